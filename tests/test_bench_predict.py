"""benchmarks/predict.py (issue 27) end to end at a tiny size: scoring in one process, the floor, deployed."""

from __future__ import annotations

import json

import pytest
from script_module import ROOT, load_script


def _benchmark():
    return load_script(ROOT / "benchmarks" / "predict.py", "predict_bench")


def test_the_predict_benchmark_runs_and_its_floor_computes_what_scoring_does(tmp_path):
    out = tmp_path / "predict.json"
    figures = _benchmark().main(["--rows", "1500", "--train-rows", "600", "--repeats", "1", "--batch-sizes", "512",
                                 "--exchange-rows", "512", "--no-deployed", "--no-online", "--quiet", "--out", str(out),
                                 "--work-dir", str(tmp_path / "work")])
    assert json.loads(out.read_text())["rows"] == 1500
    assert figures["online"]["status"].startswith("not run (--no-online")
    for key in ("splitnn", "easter_dh"):
        f = figures[key]
        assert f["in_process"]["rows"] == f["in_process_plaintext"]["rows"] == f["floor"]["rows"] == 1500
        assert f["in_process"]["psi_s"] > 0 and f["in_process"]["score_s"] > 0
        assert f["floor"]["max_abs_diff"] < 1e-5  # the floor's plain modules compute score()'s predictions
        assert f["ratio_to_floor"]["scoring_phase"] > 0 and f["ratio_to_floor"]["end_to_end"] > 0
        assert set(f["batch_sizes"]) == {"512"}
        assert f["deployed"] == {"status": "not run (--no-deployed)"}


@pytest.mark.slow
def test_the_predict_benchmark_measures_the_deployed_parties(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    figures = _benchmark().main(["--rows", "1200", "--train-rows", "400", "--repeats", "1", "--batch-sizes", "256",
                                 "--methods", "splitnn", "--no-psi", "--quiet", "--timeout", "300",
                                 "--online-requests", "20", "--online-bulk", "2"])
    deployed = figures["splitnn"]["deployed"]
    assert deployed["rows"] == 1200 and deployed["wall_s"] > 0
    assert set(deployed["peak_rss_mb"]) == {"bank", "shop", "clinic"}
    assert all(v > 50 for v in deployed["peak_rss_mb"].values())
    online = figures["online"]  # three `party --serve` processes over mutual TLS
    assert online["one_row"]["n"] == 20 and online["thousand_rows"]["n"] == 2
    assert 0 < online["one_row"]["p50_ms"] <= online["one_row"]["p99_ms"]
    assert online["exit_codes"] == {"bank": 0, "shop": 0, "clinic": 0}


def test_the_bench_command_has_a_predict_section(tmp_path):
    from securevfl.cli import main

    out = tmp_path / "bench"
    assert main(["bench", "--tiny", "--sections", "predict", "--methods", "splitnn", "--quiet", "--out", str(out)]) == 0
    data = json.loads((out / "results.json").read_text())
    assert list(data["sections"]) == ["predict", "environment"]
    assert data["figures"]["predict.splitnn.score_rows_per_s"]["min"] > 0
    assert data["figures"]["predict.splitnn.ratio_scoring_phase"]["repetitions"] == 2
    report = (out / "report.md").read_text()
    assert "Batch scoring of a saved model" in report
    # the online part: three `party --serve` processes under a few cells of closed-loop load
    online = data["sections"]["predict"]["data"]["online"]
    assert [(c["clients"], c["rows_per_request"], c["batch_wait_ms"]) for c in online["cells"]] == \
        [(1, 1, 2.0), (8, 1, 2.0), (1, 100, 2.0)]
    assert all(c["errors"] == 0 and c["requests"] > 0 for c in online["cells"]), online["cells"]
    assert online["exit_codes"] == {"load": {"bank": 0, "shop": 0, "clinic": 0}}
    for cell in ("1x1", "8x1", "1x100"):
        for figure in ("requests_per_s", "p50_ms", "p99_ms"):
            assert data["figures"][f"predict.online.{cell}.{figure}"]["min"] > 0
    assert data["figures"]["predict.online.ratio_to_floor"]["min"] > 1
    assert "Online scoring: SplitNN, 3 `party --serve` processes" in report


def test_a_failed_online_part_leaves_the_batch_scoring_reported():
    from securevfl.bench import predict

    data = {"rows": 100, "methods": {}, "online": {"status": "failed: RuntimeError: the port 8123 is taken"}}
    assert predict.online_figures(data["online"]) == []
    section = predict.section(data)
    batch, online = section.tables
    assert batch.title.startswith("score() against the floor")
    assert "failed: RuntimeError: the port 8123 is taken" in online.note and online.rows


def test_the_online_part_failing_is_recorded_not_raised(tmp_path, monkeypatch):
    from securevfl.bench import serving, suite
    from securevfl.bench.config import SIZES

    def taken(*args, **kwargs):
        raise RuntimeError("the serving parties were not up within 1 s")

    monkeypatch.setattr(serving, "measure_online", taken)
    assert suite._online(tmp_path, SIZES["quick"], print) == \
        {"status": "failed: RuntimeError: the serving parties were not up within 1 s"}

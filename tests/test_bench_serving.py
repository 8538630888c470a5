"""benchmarks/serving.py (issue 42) at a tiny size: three `party --serve` processes under closed-loop load."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _benchmark():
    spec = importlib.util.spec_from_file_location("serving_bench", ROOT / "benchmarks" / "serving.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_the_serving_benchmark_loads_the_service_without_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "serving.json"
    figures = _benchmark().main(["--rows", "1000", "--train-rows", "500", "--clients", "1,2", "--sizes", "1,5",
                                 "--duration", "1", "--warmup", "0.3", "--no-tls", "--no-budget-check", "--quiet",
                                 "--timeout", "120", "--out", str(out), "--work-dir", str(tmp_path / "work")])
    saved = json.loads(out.read_text())
    assert {"config", "cells", "tls_token_one_row", "batch_rows_mean", "floor_ms", "ratio_to_floor",
            "batching_gain", "goals", "budget_flood"} <= set(saved)
    assert saved["config"]["rows"] == 1000 and saved["config"]["clients"] == [1, 2]
    cells = figures["cells"]
    # 2 sizes x 2 client counts at the default batch wait, then 2 clients x 1 row with --batch-wait-ms 0
    assert [(c["clients"], c["rows_per_request"], c["batch_wait_ms"]) for c in cells] == \
        [(1, 1, 2.0), (2, 1, 2.0), (1, 5, 2.0), (2, 5, 2.0), (2, 1, 0.0)]
    for cell in cells:
        assert {"clients", "rows_per_request", "requests_per_s", "rows_per_s", "p50_ms", "p99_ms", "errors",
                "batch_wait_ms", "batch_rows_mean"} <= set(cell)
        assert cell["errors"] == 0, cell
        assert cell["requests"] > 0 and 0 < cell["p50_ms"] <= cell["p99_ms"]
        assert cell["rows_per_s"] == cell["requests_per_s"] * cell["rows_per_request"]
        assert cell["batch_rows_mean"] >= cell["rows_per_request"]  # the server's histogram saw these batches
    assert figures["floor_ms"]["1"] > 0 and figures["ratio_to_floor"] > 1
    assert figures["batching_gain"] > 0
    assert set(figures["goals"]) == {"one_client_p50_ms", "one_client_p99_ms", "clients_2_requests_per_s",
                                     "clients_2_p99_ms"}
    assert figures["tls_token_one_row"] == {"status": "not run (--no-tls)"}
    assert all(codes == {"bank": 0, "shop": 0, "clinic": 0} for codes in figures["exit_codes"].values())

"""benchmarks/serving.py (issue 42) at a tiny size: three `party --serve` processes under closed-loop load.

The load generator and the benchmark live in :mod:`securevfl.bench.serving`; the script is its command line.
"""

from __future__ import annotations

import json
import math
import runpy
from pathlib import Path

from securevfl.bench.serving import DEFAULT_BATCH_WAIT_MS, GOALS, Target, _goals, batch_rows_mean

ROOT = Path(__file__).resolve().parents[1]


def _cell(clients, rows, wait=DEFAULT_BATCH_WAIT_MS, **figures):
    return {"clients": clients, "rows_per_request": rows, "batch_wait_ms": wait, **figures}


def test_batch_rows_mean_is_the_histogram_mean_between_two_scrapes():
    key = "securevfl_serve_batch_rows"
    before = {f"{key}_count": 10.0, f"{key}_sum": 30.0}
    after = {f"{key}_count": 14.0, f"{key}_sum": 50.0, "other": 1.0}
    assert batch_rows_mean(before, after) == 5.0
    assert batch_rows_mean({}, after) == 50.0 / 14.0
    assert math.isnan(batch_rows_mean(after, after))  # no batch in between


def test_goals_read_the_default_batch_wait_cells_and_name_the_most_clients():
    cells = [_cell(1, 1, p50_ms=4.0, p99_ms=30.0), _cell(8, 1, requests_per_s=350.0, p99_ms=20.0),
             _cell(8, 1, 0.0, requests_per_s=999.0, p99_ms=1.0)]
    goals = _goals(cells, 8)
    assert goals["one_client_p50_ms"] == {"value": 4.0, "bound": GOALS["one_client_p50_ms"], "below": True,
                                          "met": True}
    assert goals["one_client_p99_ms"]["met"] is False
    assert goals["clients_8_requests_per_s"] == {"value": 350.0, "bound": 300.0, "at_least": True, "met": True}
    assert goals["clients_8_p99_ms"]["value"] == 20.0  # not the batch-wait-0 peer's
    assert _goals([], 32)["clients_32_p99_ms"]["met"] is None


def test_a_target_is_read_from_the_endpoint_url():
    target = Target.of("http://127.0.0.1:8123", token="t0k")
    assert (target.host, target.port, target.context) == ("127.0.0.1", 8123, None)
    assert target.headers == "Authorization: Bearer t0k\r\n"
    assert Target.of("http://localhost:9").headers == ""


def test_the_serving_benchmark_loads_the_service_without_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "serving.json"
    main = runpy.run_path(str(ROOT / "benchmarks" / "serving.py"))["main"]  # the script, as run
    figures = main(["--rows", "1000", "--train-rows", "500", "--clients", "1,2", "--sizes", "1,5", "--duration", "1",
                    "--warmup", "0.3", "--no-tls", "--no-budget-check", "--quiet", "--timeout", "120",
                    "--out", str(out), "--work-dir", str(tmp_path / "work")])
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

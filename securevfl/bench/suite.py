"""Run the benchmark sections in order and write the report: :func:`run_bench`.

Order: the environment first (load at the start), then primitives, methods, scaling (which reuses
section 1's PSI timings), network (which re-prices section 2's runs, no new runs), predict (batch
scoring against its floor, then a few cells of online scoring under load), secureboost (training
against the straightforward protocol, its crypto floor and XGBoost), coverage (every customer
scored: held-out rows per coverage pattern, four ways), and the environment again at the end (load
at the end, the warning). The load average is also sampled between sections for the environment's
figure.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from securevfl.bench import coverage as coverage_bench
from securevfl.bench import environment, methods, network, plots, predict, primitives, report, scaling, wire
from securevfl.bench import secureboost as secureboost_bench
from securevfl.bench import serving as serving_bench
from securevfl.bench.config import BenchConfig, Sizes
from securevfl.bench.results import Results, Section, Table
from securevfl.bench.timing import Figure
from securevfl.checks import check_output_dir

#: progress(done_sections, total_sections, text)
Progress = Callable[[int, int, str], None]


def _quiet(done: int, total: int, text: str) -> None:
    del done, total, text


def run_bench(config: BenchConfig, out: str | Path, *, progress: Progress | None = None,
              command: str = "") -> Results:
    """Measure every section of ``config``; write results.json, report.md, report.html and the PNGs to ``out``."""
    out_dir = check_output_dir(out, "bench output folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    progress = progress or _quiet
    started = time.perf_counter()
    active = [s for s in ("primitives", "methods", "scaling", "network", "predict", "secureboost", "coverage")
              if s in config.sections]
    total = len(active) + 1
    done = 0
    load_samples: list[tuple[str, float, float]] = [("start", 0.0, environment.load_average())]
    env = environment.collect(config.device)
    results = Results(config={**config.to_dict(), "command": command or "securevfl bench"})
    sizes = config.sizes

    def tick(text: str) -> None:
        progress(done, total, text)

    def finish_section(name: str) -> None:
        nonlocal done
        done += 1
        load_samples.append((name, time.perf_counter() - started, environment.load_average()))
        progress(done, total, f"{name} done")

    def record(figs: list[Figure]) -> None:
        for f in figs:
            results.add(f)

    psi_rows: dict[int, dict[str, Any]] = {}
    runs: list[dict[str, Any]] = []
    if "primitives" in active:
        data = primitives.measure(sizes, config.psi_workers, tick)
        psi_rows = data["psi"]
        record(primitives.figures(data))
        sec = primitives.section(data, results.figures)
        tick("plotting primitives")
        sec.images.append({"file": plots.primitives(results.figures, data, out_dir / "bench_primitives.png"),
                           "caption": "Primitives against their peers: PSI, Paillier, mask expansion, key agreement"})
        results.sections.append(sec)
        finish_section("primitives")
    if "methods" in active:
        runs = methods.measure(config.methods, config.privacy, dataset=config.dataset, parties=config.method_parties,
                               epochs=sizes.epochs, batch_size=config.batch_size, device=config.device,
                               seed=config.seed, tick=tick, rounds=sizes.method_rounds)
        record(methods.figures(runs))
        sec = methods.section(runs, config.dataset, config.method_parties, sizes.epochs)
        tick("plotting methods")
        sec.images.append({"file": plots.time_split(runs, out_dir / "bench_time_split.png"),
                           "caption": "Where each run's time went (party-seconds; black: wall clock)"})
        sec.images.append({"file": plots.overhead(runs, out_dir / "bench_overhead.png"),
                           "caption": "Epoch-time overhead of each privacy option over none, wall and CPU time "
                                      "(95 % intervals; pale: within noise)"})
        sec.images.append({"file": plots.crypto_by_primitive(runs, out_dir / "bench_crypto.png"),
                           "caption": "Crypto seconds by primitive per run (every primitive: the table "
                                      "Crypto seconds by primitive)"})
        sec.images.append({"file": plots.bytes_by_link(runs, out_dir / "bench_bytes.png"),
                           "caption": "Bytes per link per run (every link: the table Bytes per link)"})
        results.sections.append(sec)
        finish_section("methods")
    if "scaling" in active:
        if not psi_rows:  # section 1 did not run: time our PSI at its sizes here
            psi_rows = {n: {"ours_s": v} for n, v in scaling.psi_scaling(sizes.psi_sizes, sizes.repeats,
                                                                         config.psi_workers, tick).items()}
        data = scaling.measure(sizes, config.scaling_parties, psi_rows, config.psi_workers, tick)
        record(scaling.figures(data))
        sec = scaling.section(data, results.figures)
        tick("plotting scaling")
        sec.images.append({"file": plots.scaling(data, sec.data["psi_exponents"], out_dir / "bench_scaling.png"),
                           "caption": "Secure aggregation vs parties; PSI vs set size (log-log, fitted); "
                                      "Paillier aggregation vs batch"})
        results.sections.append(sec)
        finish_section("scaling")
    if "network" in active:
        tick("re-pricing the runs on other links")
        models = config.network_models()
        rows = network.reprice(runs, models)
        record(network.figures(rows))
        sec = network.section(rows, models)
        measured = None
        if sizes.wire_epochs:
            tick("a deployed run over gRPC + mutual TLS beside the in-process one")
            with tempfile.TemporaryDirectory(prefix="securevfl-bench-wire-") as tmp:
                measured = wire.measure(Path(tmp), epochs=sizes.wire_epochs)
        network.add_measured(sec, measured)
        record(network.measured_figures(measured))
        if not runs:
            sec.notes.append("no method runs to re-price: section 2 (methods) was not run")
        sec.images.append({"file": plots.network(rows, out_dir / "bench_network.png"),
                           "caption": "Simulated transfer time of each run vs bandwidth and latency"})
        results.sections.append(sec)
        finish_section("network")
    if "predict" in active:
        with tempfile.TemporaryDirectory(prefix="securevfl-bench-predict-") as tmp:
            scored = predict.measure(Path(tmp), sizes.predict_rows, config.methods, sizes.repeats, tick)
            scored["online"] = _online(Path(tmp), sizes, tick)
        record(predict.figures(scored))
        sec = predict.section(scored)
        sec.images.append({"file": plots.predict(scored["methods"], out_dir / "bench_predict.png"),
                           "caption": "Where batch scoring's time goes (plaintext alignment) next to the floor"})
        results.sections.append(sec)
        finish_section("predict")
    if "secureboost" in active:
        sb = secureboost_bench.measure(secureboost_bench.from_sizes(sizes, seed=config.seed), tick)
        record(secureboost_bench.figures(sb))
        sec = secureboost_bench.section(sb)
        sec.images.append({"file": plots.secureboost(sb, out_dir / "bench_secureboost.png"),
                           "caption": "SecureBoost: time per tree of each configuration; the fast run's split "
                                      "next to its crypto floor"})
        results.sections.append(sec)
        finish_section("secureboost")
    if "coverage" in active:
        cov = coverage_bench.measure(coverage_bench.from_sizes(sizes), lambda text: tick("coverage: " + text.strip()))
        record(coverage_bench.figures(cov))
        sec = coverage_bench.section(cov)
        sec.images.append({"file": plots.coverage(cov, out_dir / "bench_coverage.png"),
                           "caption": "Every customer scored: each way over all held-out rows and over the rows "
                                      "only the active party holds, per dataset and p"})
        results.sections.append(sec)
        finish_section("coverage")
    results.environment = environment.finish(env, load_samples)
    results.sections.append(_environment_section(results.environment, out_dir))
    results.headline = report.headline(results)
    results.wall_s = time.perf_counter() - started
    report.write(results, out_dir)
    progress(total, total, "report written")
    return results


def _online(directory: Path, sizes: Sizes, tick: Callable[[str], None]) -> dict[str, Any]:
    """The predict section's online part (the SplitNN model the batch part saved, if any), or why it is missing.

    Any failure (a port taken, a party that exits during set-up) is recorded, not raised: the batch
    scoring measured before it is still reported.
    """
    if not sizes.serving_rows:
        return {"status": "not run at this size"}
    model_dir = directory / "model-splitnn"
    try:
        return serving_bench.measure_online(directory / "online", rows=sizes.serving_rows,
                                            duration_s=sizes.serving_duration_s,
                                            warmup_s=min(1.0, sizes.serving_duration_s / 3),
                                            nowait=sizes.serving_nowait,
                                            model_dir=model_dir if model_dir.is_dir() else None, tick=tick)
    except Exception as error:  # noqa: BLE001 - reported in the section's online table
        return {"status": f"failed: {type(error).__name__}: {error}"[:600]}


def _environment_section(env: dict[str, Any], out_dir: Path) -> Section:
    sec = Section("environment", "5. Environment", text=environment.__doc__ or "")
    t = report.environment_table(env)
    sec.tables.append(Table(t["title"], t["columns"], t["rows"]))
    load = Table("Load average (1 min) between sections", ["after", "elapsed (s)", "load", "load per core"])
    cores = int(env.get("cores_logical", 1))
    for s in env["load_samples"]:
        load.add(s["at"], f"{s['elapsed_s']:.1f}", f"{s['load_1m']:.2f}", f"{s['load_1m'] / max(cores, 1):.2f}")
    sec.tables.append(load)
    if env.get("warning"):
        sec.notes.append("warning: " + env["warning"])
    sec.images.append({"file": plots.load(env["load_samples"], cores, environment.LOADED_PER_CORE,
                                          out_dir / "bench_load.png"),
                       "caption": "Load average per core during the run"})
    sec.data = {"cpu_count": os.cpu_count()}
    return sec

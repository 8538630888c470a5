"""Section 2: training methods x privacy options, through ``securevfl.train`` exactly as ``train`` runs.

Every cell is a real run (in-process parties, real crypto) on a bundled dataset with
``alignment="plaintext"`` (PSI is section 1's business). What the report shows comes from the
run's own report: accuracy, wall time, ``cost`` (model compute, crypto seconds per primitive,
serialisation, simulated network — summed over parties), bytes per link, communication rounds and
the critical network path that section 4 re-prices. **Epoch time** is the gap between consecutive
epoch ends (the first epoch carries setup: key agreement, Paillier keys, so it is left out when
there are later ones), in wall-clock seconds and in **CPU seconds** (this process, whose threads are
the parties, plus any worker processes): on a loaded machine wall time grows while another job
holds the cores, CPU time much less. With ``method_rounds`` above one every cell runs that many
times, the cells in forward then reverse order (A B C, C B A, ...), so that a burst of load does
not land on one side of a comparison only.

The **overhead** of a privacy option is its median epoch time over the median epoch time of the
method's ``none`` run, minus one, with a 95 % bootstrap interval (:mod:`securevfl.bench.stats`:
runs resampled, then epochs within them). An interval that includes zero reads "within noise":
no overhead was measurable. An interval wholly below zero cannot be a real saving (a privacy
option only adds work); it is a measurement artefact, load during the ``none`` run, and is
flagged as such; neither ever reaches the headline.

A privacy option a method does not have (SplitNN has no aggregation step) is not run; a
configuration a method refuses (for example one that would reveal a peer's vector) is listed with
the method's own reason.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from securevfl.bench import stats
from securevfl.bench.timing import HIGHER, Figure, cpu_seconds
from securevfl.errors import SecureVFLError

Tick = Callable[[str], None]


def supports_privacy(method: str) -> bool:
    """Whether the method has a ``secagg`` option (an aggregation step privacy can wrap)."""
    from securevfl.methods import method_class

    return any(f.name == "secagg" for f in dataclasses.fields(method_class(method).Options))


def plan(methods: tuple[str, ...], privacy: tuple[str, ...]) -> list[tuple[str, str]]:
    """The (method, privacy) cells to run: every option for methods with ``secagg``, ``none`` otherwise."""
    cells = []
    for m in methods:
        options = privacy if supports_privacy(m) else ("none",)
        cells += [(m, p) for p in options]
    return cells


def run_cell(method: str, privacy: str, *, dataset: str, parties: int, epochs: int, batch_size: int,
             device: str, seed: int) -> dict[str, Any]:
    """One training run through :func:`securevfl.train`; the figures the report needs."""
    import securevfl

    options = {"secagg": privacy} if supports_privacy(method) else {}
    ends: list[float] = []
    cpu_ends: list[float] = []

    def epoch_end(*_: Any, **__: Any) -> None:
        ends.append(time.perf_counter())
        cpu_ends.append(cpu_seconds())

    cpu_started = cpu_seconds()
    started = time.perf_counter()
    report = securevfl.train(method, dataset, parties=parties, epochs=epochs, batch_size=batch_size,
                             seed=seed, device=device, alignment="plaintext", options=options,
                             early_stopping=0, progress=epoch_end)  # every method its epochs, none validating
    c = report.cost
    metric = "accuracy" if "accuracy" in report.metrics else "rmse"
    return {
        "method": method, "privacy": privacy, "status": "ok",
        "metric": metric, "metric_value": float(report.metrics[metric]),
        "wall_s": report.wall_s, "epoch_s": _epoch_gaps(started, ends),
        "epoch_cpu_s": _epoch_gaps(cpu_started, cpu_ends), "epochs": epochs,
        "compute_s": c["compute_s"], "crypto_s": dict(c["crypto_s"]), "serialize_s": c["serialize_s"],
        "simulated_network_s": c["simulated_network_s"], "network_model": c["network_model"],
        "network_path": c["network_path"], "bytes": dict(c["comm"]["bytes"]),
        "messages": dict(c["comm"]["messages"]), "total_bytes": c["total_bytes"], "rounds": c["rounds"],
        "phases": c["phases"], "dataset": report.dataset,
        "secagg_rounds": int((report.extra.get("secagg_stats") or {}).get("rounds", 0)),
    }


def _epoch_gaps(start: float, ends: list[float]) -> list[float]:
    """Gaps between consecutive epoch ends; the first epoch (setup) left out when there are later ones."""
    gaps = [b - a for a, b in zip([start, *ends], ends)]
    return gaps[1:] if len(gaps) > 1 else gaps


def merge_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One row for a cell run several times: every run's epochs (pooled and per run); costs of the first run."""
    row = dict(runs[0])
    row["runs"] = len(runs)
    for key in ("epoch_s", "epoch_cpu_s"):
        row[key + "_runs"] = [list(r[key]) for r in runs]
        row[key] = [x for r in runs for x in r[key]]
    row["wall_s_runs"] = [r["wall_s"] for r in runs]
    return row


def measure(methods: tuple[str, ...], privacy: tuple[str, ...], *, dataset: str, parties: int, epochs: int,
            batch_size: int, device: str, seed: int, tick: Tick, rounds: int = 1) -> list[dict[str, Any]]:
    """Every cell of :func:`plan`, ``rounds`` times (forward, reverse, ...); a refused one gives its reason."""
    cells = plan(methods, privacy)
    done: dict[tuple[str, str], list[dict[str, Any]]] = {c: [] for c in cells}
    refused: dict[tuple[str, str], dict[str, Any]] = {}
    rounds = max(1, rounds)
    for i in range(rounds):
        for method, option in cells if i % 2 == 0 else cells[::-1]:
            if (method, option) in refused:
                continue
            tick(f"{method} with privacy {option}: {epochs} epoch(s) on {dataset}"
                 + (f" (round {i + 1} of {rounds})" if rounds > 1 else ""))
            try:
                done[(method, option)].append(run_cell(method, option, dataset=dataset, parties=parties,
                                                       epochs=epochs, batch_size=batch_size, device=device,
                                                       seed=seed))
            except SecureVFLError as exc:  # the method refuses this configuration or this dataset: say why
                refused[(method, option)] = {"method": method, "privacy": option, "status": "refused",
                                             "reason": str(exc)}
    rows = [merge_runs(done[c]) if done[c] else refused[c] for c in cells]
    add_overheads(rows)
    return rows


def add_overheads(rows: list[dict[str, Any]]) -> None:
    """Per privacy option: its wall and CPU epoch-time overhead over the method's ``none`` row, with intervals.

    Sets ``overhead_pct`` (the estimate, per cent), ``overhead_pct_low`` / ``_high`` (95 % interval) and
    ``overhead_verdict`` (:mod:`securevfl.bench.stats`), and the same with ``overhead_cpu_`` for CPU time.
    """
    base = {r["method"]: r for r in rows if r.get("status") == "ok" and r["privacy"] == "none"}
    for r in rows:
        b = base.get(r.get("method", ""))
        if r.get("status") != "ok" or b is None or r is b:
            continue
        for key, prefix in (("epoch_s", "overhead"), ("epoch_cpu_s", "overhead_cpu")):
            if not r.get(key) or not b.get(key):
                continue
            d = stats.difference_of_runs(_runs(r, key), _runs(b, key), relative=True).scaled(100.0)
            r[f"{prefix}_pct"], r[f"{prefix}_pct_low"], r[f"{prefix}_pct_high"] = d.estimate, d.low, d.high
            r[f"{prefix}_verdict"] = d.verdict
            r[f"{prefix}_samples"] = [d.n_a, d.n_b]


def _runs(row: dict[str, Any], key: str) -> list[list[float]]:
    return row.get(key + "_runs") or [row[key]]


def overhead_of(row: dict[str, Any], cpu: bool = False) -> stats.Difference | None:
    """The row's overhead (per cent) as a :class:`~securevfl.bench.stats.Difference`; None without an interval.

    A row from a results.json written before intervals were measured has ``overhead_pct`` alone: None.
    """
    prefix = "overhead_cpu" if cpu else "overhead"
    if f"{prefix}_verdict" not in row:
        return None
    n_a, n_b = row.get(f"{prefix}_samples", (0, 0))
    return stats.Difference(row[f"{prefix}_pct"], row[f"{prefix}_pct_low"], row[f"{prefix}_pct_high"],
                            row[f"{prefix}_verdict"], int(n_a), int(n_b), relative=True)


def overhead_cell(row: dict[str, Any], cpu: bool = False) -> str:
    """The overhead as a table cell: ``+12.3 [+8.1, +16.0]``, ``within noise (-3.1 … +4.2)``, artefacts flagged."""
    d = overhead_of(row, cpu)
    if d is None:
        return "-"
    text = stats.describe(d)
    if d.verdict == stats.BELOW:
        text += " (below none: a measurement artefact, not a saving)"
    return text


def crypto_total(row: dict[str, Any]) -> float:
    """Crypto seconds of a run, all primitives and parties."""
    return float(sum(row["crypto_s"].values()))


#: Key set-up of a secure-aggregation session (once per run), left out of the crypto per round.
SESSION_SETUP_PRIMITIVES = frozenset({"secagg.keygen", "secagg.key_agreement", "secagg.paillier_keygen",
                                      "secagg.paillier_setup"})


def round_crypto_ms(row: dict[str, Any]) -> float | None:
    """Crypto milliseconds per secure-aggregation round, all parties, session set-up left out.

    None for a run without secure-aggregation rounds or without crypto (``secagg=none``).
    """
    rounds = row.get("secagg_rounds") or 0
    spent = sum(v for k, v in row["crypto_s"].items() if k not in SESSION_SETUP_PRIMITIVES)
    return spent / rounds * 1e3 if rounds and spent > 0 else None


def figures(rows: list[dict[str, Any]]) -> list[Figure]:
    """Per cell: epoch wall and CPU times (the epochs of every run are the repetitions), wall, crypto, the metric."""
    out = []
    for r in rows:
        if r["status"] != "ok":
            continue
        k = f"methods.{r['method']}.{r['privacy']}"
        out.append(Figure(k + ".epoch_s", "s", tuple(r["epoch_s"]), note="gap between epoch ends"))
        if r.get("epoch_cpu_s"):
            out.append(Figure(k + ".epoch_cpu_s", "s", tuple(r["epoch_cpu_s"]),
                              note="CPU seconds between epoch ends (this process and its workers)"))
        out.append(Figure(k + ".wall_s", "s", tuple(r.get("wall_s_runs") or (r["wall_s"],))))
        if crypto_total(r) > 0:  # a run without crypto has no crypto figure to compare
            out.append(Figure(k + ".crypto_s", "s", (crypto_total(r),), note="summed over parties"))
        per_round = round_crypto_ms(r)
        if per_round is not None:
            out.append(Figure(k + ".secagg_round_crypto_ms", "ms", (per_round,),
                              note="crypto per secure-aggregation round, all parties, key set-up left out"))
        out.append(Figure(k + "." + r["metric"], "", (r["metric_value"],),
                          HIGHER if r["metric"] == "accuracy" else "lower"))
    return out


def section(rows: list[dict[str, Any]], dataset: str, parties: int, epochs: int) -> Any:
    """Section 2 of the report: runs with their overheads, crypto by primitive, bytes per link."""
    import statistics

    from securevfl.bench.results import Section, Table

    s = Section("methods", f"2. Methods x privacy options ({dataset}, {parties} parties, {epochs} epoch(s))",
                text=__doc__ or "")
    t = Table("Runs", ["method", "privacy", "metric", "value", "wall (s)", "timed epochs (runs)",
                       "epoch median (s)", "epoch CPU median (s)",
                       "overhead vs none, wall (% of epoch, 95 % interval)",
                       "overhead vs none, CPU (% of epoch, 95 % interval)", "model compute (s)", "crypto (s)",
                       "serialisation (s)", "simulated network (s)", "bytes (all links)", "rounds"])
    for r in rows:
        if r["status"] != "ok":
            t.add(r["method"], r["privacy"], "refused", r["reason"][:120], *["-"] * 12)
            continue
        cpu = r.get("epoch_cpu_s") or []
        t.add(r["method"], r["privacy"], r["metric"], f"{r['metric_value']:.4f}", f"{r['wall_s']:.2f}",
              f"{len(r['epoch_s'])} ({r.get('runs', 1)})", f"{statistics.median(r['epoch_s']):.3f}",
              f"{statistics.median(cpu):.3f}" if cpu else "-", overhead_cell(r), overhead_cell(r, cpu=True),
              f"{r['compute_s']:.3f}", f"{crypto_total(r):.3f}", f"{r['serialize_s']:.3f}",
              f"{r['simulated_network_s']:.3f}", f"{r['total_bytes']:,}", str(r["rounds"]))
    t.note = ("overhead: median epoch time over the none run's, minus one, with a 95 % bootstrap interval; "
              "'within noise' when the interval includes zero (no overhead measurable at this size and load). "
              "Wall and costs are the first run's; compute, crypto and serialisation are summed over all parties "
              "(one process); the simulated network uses the run's default link (100 Mbit/s, 10 ms); a refused "
              "run gives the method's reason in the value column")
    s.tables.append(t)
    prim = Table("Crypto seconds by primitive (summed over parties)", ["method", "privacy", "primitive", "seconds (s)"],
                 fold=True)
    for r in rows:
        if r["status"] == "ok":
            for name, sec in sorted(r["crypto_s"].items(), key=lambda kv: -kv[1]):
                prim.add(r["method"], r["privacy"], name, f"{sec:.4f}")
    if prim.rows:
        top = max((r for r in rows if r["status"] == "ok"), key=crypto_total)
        name, sec = max(top["crypto_s"].items(), key=lambda kv: kv[1])
        prim.summary = (f"{len(prim.rows)} rows; the most crypto: {top['method']}/{top['privacy']}, "
                        f"{crypto_total(top):.3f} s, most of it {name} ({sec:.3f} s)")
        s.tables.append(prim)
    links = Table("Bytes per link", ["method", "privacy", "link", "bytes (B)", "messages"], fold=True)
    for r in rows:
        if r["status"] == "ok":
            for link, b in r["bytes"].items():
                links.add(r["method"], r["privacy"], link, f"{b:,}", f"{r['messages'][link]:,}")
    ok = [r for r in rows if r["status"] == "ok" and r["bytes"]]
    if ok:
        top = max(ok, key=lambda r: r["total_bytes"])
        link, b = max(top["bytes"].items(), key=lambda kv: kv[1])
        links.summary = (f"{len(links.rows)} rows; the most bytes: {top['method']}/{top['privacy']}, "
                         f"{top['total_bytes']:,} B, most of it on {link} ({b:,} B)")
    s.tables.append(links)
    per_round = [f"{r['method']}/{r['privacy']} {ms:.2f} ms" for r in rows
                 if r["status"] == "ok" and (ms := round_crypto_ms(r)) is not None]
    if per_round:
        s.notes.append("Crypto per secure-aggregation round (all parties summed, the session's key set-up left out; "
                       "figure secagg_round_crypto_ms): " + ", ".join(per_round) + ".")
    below = [f"{r['method']}/{r['privacy']}" for r in rows if r.get("overhead_verdict") == stats.BELOW
             or r.get("overhead_cpu_verdict") == stats.BELOW]
    if below:
        s.notes.append(f"{', '.join(below)}: epochs measured faster than without privacy; a privacy option only adds "
                       "work, so this is load during the runs (see the environment section), not a saving")
    s.data = {"runs": rows}
    return s

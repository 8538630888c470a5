"""Section 2: training methods x privacy options, through ``securevfl.train`` exactly as ``train`` runs.

Every cell is one real run (in-process parties, real crypto) on a bundled dataset with
``alignment="plaintext"`` (PSI is section 1's business). What the report shows comes from the
run's own report: accuracy, wall time, ``cost`` (model compute, crypto seconds per primitive,
serialisation, simulated network — summed over parties), bytes per link, communication rounds and
the critical network path that section 4 re-prices. **Epoch time** is the gap between consecutive
epoch ends (the first epoch carries setup: key agreement, Paillier keys, so it is left out when
there are later ones); the **overhead** of a privacy option is its minimum epoch time over the
method's ``none`` run's, minus one, in per cent of the epoch.

A privacy option a method does not have (SplitNN has no aggregation step) is not run; a
configuration a method refuses (for example one that would reveal a peer's vector) is listed with
the method's own reason.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from securevfl.bench.timing import HIGHER, Figure
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
    started = time.perf_counter()
    report = securevfl.train(method, dataset, parties=parties, epochs=epochs, batch_size=batch_size,
                             seed=seed, device=device, alignment="plaintext", options=options,
                             progress=lambda *_, **__: ends.append(time.perf_counter()))
    gaps = [b - a for a, b in zip([started, *ends], ends)]
    epoch_s = gaps[1:] if len(gaps) > 1 else gaps
    c = report.cost
    metric = "accuracy" if "accuracy" in report.metrics else "rmse"
    return {
        "method": method, "privacy": privacy, "status": "ok",
        "metric": metric, "metric_value": float(report.metrics[metric]),
        "wall_s": report.wall_s, "epoch_s": epoch_s, "epochs": epochs,
        "compute_s": c["compute_s"], "crypto_s": dict(c["crypto_s"]), "serialize_s": c["serialize_s"],
        "simulated_network_s": c["simulated_network_s"], "network_model": c["network_model"],
        "network_path": c["network_path"], "bytes": dict(c["comm"]["bytes"]),
        "messages": dict(c["comm"]["messages"]), "total_bytes": c["total_bytes"], "rounds": c["rounds"],
        "phases": c["phases"], "dataset": report.dataset,
    }


def measure(methods: tuple[str, ...], privacy: tuple[str, ...], *, dataset: str, parties: int, epochs: int,
            batch_size: int, device: str, seed: int, tick: Tick) -> list[dict[str, Any]]:
    """Every cell of :func:`plan`; a refused configuration becomes a row with its reason."""
    rows = []
    for method, option in plan(methods, privacy):
        tick(f"{method} with privacy {option}: {epochs} epoch(s) on {dataset}")
        try:
            rows.append(run_cell(method, option, dataset=dataset, parties=parties, epochs=epochs,
                                 batch_size=batch_size, device=device, seed=seed))
        except SecureVFLError as exc:  # the method refuses this configuration or this dataset: say why
            rows.append({"method": method, "privacy": option, "status": "refused", "reason": str(exc)})
    baseline = {r["method"]: min(r["epoch_s"]) for r in rows if r["status"] == "ok" and r["privacy"] == "none"}
    for r in rows:
        if r["status"] == "ok" and r["method"] in baseline:
            r["overhead_pct"] = 100.0 * (min(r["epoch_s"]) / baseline[r["method"]] - 1.0)
    return rows


def crypto_total(row: dict[str, Any]) -> float:
    """Crypto seconds of a run, all primitives and parties."""
    return float(sum(row["crypto_s"].values()))


def figures(rows: list[dict[str, Any]]) -> list[Figure]:
    """Per run: epoch times (the epochs are the repetitions), wall, crypto and the headline metric."""
    out = []
    for r in rows:
        if r["status"] != "ok":
            continue
        k = f"methods.{r['method']}.{r['privacy']}"
        out.append(Figure(k + ".epoch_s", "s", tuple(r["epoch_s"]), note="gap between epoch ends"))
        out.append(Figure(k + ".wall_s", "s", (r["wall_s"],)))
        if crypto_total(r) > 0:  # a run without crypto has no crypto figure to compare
            out.append(Figure(k + ".crypto_s", "s", (crypto_total(r),), note="summed over parties"))
        out.append(Figure(k + "." + r["metric"], "", (r["metric_value"],),
                          HIGHER if r["metric"] == "accuracy" else "lower"))
    return out


def section(rows: list[dict[str, Any]], dataset: str, parties: int, epochs: int) -> Any:
    """Section 2 of the report: runs, crypto by primitive, bytes per link."""
    from securevfl.bench.results import Section, Table

    s = Section("methods", f"2. Methods x privacy options ({dataset}, {parties} parties, {epochs} epoch(s))",
                text=__doc__ or "")
    t = Table("Runs", ["method", "privacy", "metric", "value", "wall (s)", "epoch min (s)", "epoch median (s)",
                       "overhead vs none (% of epoch)", "model compute (s)", "crypto (s)", "serialisation (s)",
                       "simulated network (s)", "bytes (all links)", "rounds"])
    for r in rows:
        if r["status"] != "ok":
            t.add(r["method"], r["privacy"], "refused", r["reason"][:120], *["-"] * 10)
            continue
        import statistics

        over = r.get("overhead_pct")
        t.add(r["method"], r["privacy"], r["metric"], f"{r['metric_value']:.4f}", f"{r['wall_s']:.2f}",
              f"{min(r['epoch_s']):.3f}", f"{statistics.median(r['epoch_s']):.3f}",
              "-" if over is None or r["privacy"] == "none" else f"{over:+.1f}", f"{r['compute_s']:.3f}",
              f"{crypto_total(r):.3f}", f"{r['serialize_s']:.3f}", f"{r['simulated_network_s']:.3f}",
              f"{r['total_bytes']:,}", str(r["rounds"]))
    t.note = ("compute, crypto and serialisation are summed over all parties (one process); the "
              "simulated network uses the run's default link (100 Mbit/s, 10 ms); a refused run gives the method's "
              "reason in the value column")
    s.tables.append(t)
    prim = Table("Crypto seconds by primitive (summed over parties)", ["method", "privacy", "primitive", "seconds (s)"])
    for r in rows:
        if r["status"] == "ok":
            for name, sec in sorted(r["crypto_s"].items(), key=lambda kv: -kv[1]):
                prim.add(r["method"], r["privacy"], name, f"{sec:.4f}")
    if prim.rows:
        s.tables.append(prim)
    links = Table("Bytes per link", ["method", "privacy", "link", "bytes (B)", "messages"])
    for r in rows:
        if r["status"] == "ok":
            for link, b in r["bytes"].items():
                links.add(r["method"], r["privacy"], link, f"{b:,}", f"{r['messages'][link]:,}")
    s.tables.append(links)
    s.data = {"runs": rows}
    return s

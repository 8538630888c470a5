"""A run report on the console: metrics, preprocessing, where the time went, traffic, measured privacy."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from securevfl.report.run_report import preprocessing_line


def _print_parties(parties: dict[str, Any], console: Console) -> None:
    """Class names and each party's local preprocessing, where this process knows it."""
    for name, p in parties.items():
        if p.get("classes"):
            console.print(f"classes (label at {name}): {', '.join(map(str, p['classes']))}", highlight=False)
    known = {n: p for n, p in parties.items() if p.get("preprocessing")}
    if not known or all(not (p["preprocessing"]["one_hot"] or p["preprocessing"]["hashed"]
                             or p["preprocessing"]["imputed"] or p["preprocessing"]["dates"]
                             or p["preprocessing"]["dropped"]) for p in known.values()):
        return  # numbers only, standardised: nothing worth a table
    table = Table(title="each party's own preprocessing (fitted on its training rows)")
    for col in ("party", "encoded columns", "how"):
        table.add_column(col)
    for name, p in known.items():
        table.add_row(name, str(p["features"]), preprocessing_line(p["preprocessing"]))
    console.print(table)


def metric_label(key: str, positive: Any) -> str:
    """``f1`` and ``auc`` of a binary label name the class they score as positive: ``f1 (positive class 'yes')``."""
    if positive is not None and key in ("f1", "auc"):
        return f"{key} (positive class {str(positive)!r})"
    return key


def summed_label(category: str, parties: int) -> str:
    """A time summed over parties says so: it may exceed the wall clock, as the parties run side by side."""
    return f"{category} (summed over {parties} parties)" if parties > 1 else category


def print_summary(result: Any, console: Console, err_console: Console) -> None:
    """Metrics, time split and traffic of a run report as rich tables on ``console`` (warnings on ``err_console``)."""
    metrics = Table(title=f"{result.method} on {result.dataset}", show_header=True)
    metrics.add_column("metric")
    metrics.add_column("value", justify="right")
    positive = next((p["positive_class"] for p in result.parties.values() if "positive_class" in p), None)
    for k, v in result.metrics.items():
        if isinstance(v, float):
            metrics.add_row(metric_label(k, positive), f"{v:.4f}")
    console.print(metrics)
    _print_parties(result.parties, console)
    for note in result.notes:
        if note.startswith("warning: "):
            err_console.print(f"[bold yellow]{note}[/]", highlight=False)
    per_party = result.metrics.get("per_party")
    if per_party:
        t = Table(title="per-party test metrics")
        cols = list(next(iter(per_party.values())))
        t.add_column("party")
        for c in cols:
            t.add_column(c, justify="right")
        for party, m in per_party.items():
            t.add_row(party, *(f"{m[c]:.4f}" for c in cols))
        console.print(t)
    boost = result.extra.get("secureboost") if isinstance(result.extra, dict) else None
    if boost:
        owners = ", ".join(f"{p} {n}" for p, n in boost["split_owners"].items())
        console.print(f"secureboost: {boost['trees_kept']} trees kept of {boost['trees_built']} built, "
                      f"{boost['seconds_per_tree']:.2f} s per tree; splits owned: {owners}")
    c = result.cost
    n_parties = len(c.get("per_party", {}))
    cost = Table(title="where the time went", caption=(
        f"model compute, crypto and serialisation are summed over the {n_parties} parties, which run side by "
        "side: the sum may exceed the wall clock") if n_parties > 1 else None)
    cost.add_column("category")
    cost.add_column("seconds", justify="right")
    cost.add_row(summed_label("model compute", n_parties), f"{c['compute_s']:.3f}")
    for prim, s in c["crypto_s"].items():
        cost.add_row(f"crypto: {prim}", f"{s:.3f}")
    cost.add_row(summed_label("serialisation", n_parties), f"{c['serialize_s']:.3f}")
    cost.add_row("simulated network", f"{c['simulated_network_s']:.3f}")
    cost.add_row("wall clock", f"{result.wall_s:.3f}")
    console.print(cost)
    alignment = c.get("alignment", {})
    if alignment.get("method") == "none":
        console.print(f"alignment: none ({alignment.get('note', 'not needed')})")
    elif "intersection_size" in alignment:
        console.print(f"alignment: {alignment['method']}; {alignment.get('total_bytes', 0):,} bytes, "
                      f"{alignment.get('rounds', 0)} rounds (not included in the training traffic below)")
    if c["comm"]["bytes"]:
        links = Table(title=f"training traffic ({c['rounds']} rounds)")
        links.add_column("link")
        links.add_column("bytes", justify="right")
        links.add_column("messages", justify="right")
        for link, b in c["comm"]["bytes"].items():
            links.add_row(link, f"{b:,}", f"{c['comm']['messages'][link]:,}")
        console.print(links)
    if result.privacy:
        leaks = Table(title="measured privacy (attacks on what a party received)")
        for col in ("attack", "attacker -> target", "metric", "value", "random guess", "own data only"):
            leaks.add_column(col)
        for r in result.privacy:
            value = "n/a" if r["value"] is None else f"{r['value']:.3f}"
            own = "" if r.get("own_data") is None else f"{r['own_data']:.3f}"
            leaks.add_row(r["attack"], f"{r['attacker']} -> {r['target']}", r["metric"], value, f"{r['baseline']:.3f}",
                          own)
        console.print(leaks)

"""``securevfl attack``: every applicable attack on a method, then a defence sweep (privacy vs utility)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from psi import atomic
from securevfl.cli.options import parse_pairs
from securevfl.errors import ConfigError

console = Console()


def attack(
    method: str = typer.Option("splitnn", help="Training method."),
    dataset: str = typer.Option("breast-cancer", help="Dataset name."),
    parties: int = typer.Option(4, help="Number of parties (1 active + passives)."),
    epochs: int = typer.Option(10, help="Training epochs of every run."),
    active_features: int = typer.Option(-1, help="Features of the active party (0: labels only)."),
    seed: int = typer.Option(0, help="Seed of the runs."),
    option: list[str] = typer.Option([], "--option", help="Method option KEY=VALUE (repeatable)."),
    secagg: str = typer.Option("", help="Secure aggregation for easter / aggvfl: dh | pairwise | paillier | none."),
    defense: str = typer.Option("grad-noise", help="The defence to sweep: grad-noise | grad-sparsify | label-dp."),
    strengths: str = typer.Option("0,1,4,16", help="Comma-separated strengths of the sweep (0: no defence)."),
    out: Path = typer.Option(Path("out/attack"), help="Folder for attack.json and privacy_utility.png."),
) -> None:
    """Run every applicable attack on a method, then sweep a defence: the privacy-utility table and plot."""
    from securevfl.api import train as api_train
    from securevfl.attacks.suite import applicable_attacks, plot_privacy_utility, privacy_utility
    from securevfl.checks import check_output_dir

    check_output_dir(out)
    try:
        levels = [float(x) for x in strengths.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--strengths must be comma-separated numbers, got {strengths!r}") from None
    opts: dict[str, Any] = parse_pairs(option, "--option")
    if secagg:
        opts["secagg"] = secagg
    attacks = applicable_attacks(method, parties)
    kwargs = dict(method=method, dataset=dataset, parties=parties, epochs=epochs, seed=seed, options=opts,
                  active_features=active_features if active_features >= 0 else None, alignment="plaintext")
    with console.status(f"{len(levels)} runs of {method} on {dataset} with {len(attacks)} attacks"):
        points = privacy_utility(api_train, defense, levels, attacks, **kwargs)
    table = Table(title=f"{method} on {dataset}: attacks vs accuracy, {defense} sweep")
    table.add_column(defense, justify="right")
    table.add_column("accuracy", justify="right")
    for name in attacks:
        table.add_column(name, justify="right")
    for p in points:
        table.add_row(f"{p['strength']:g}", f"{p['accuracy']:.3f}",
                      *("n/a" if p["attacks"].get(n) is None else f"{p['attacks'][n]:.3f}" for n in attacks))
    console.print(table)
    out.mkdir(parents=True, exist_ok=True)
    atomic.write_text(out / "attack.json",
                      json.dumps({"method": method, "dataset": dataset, "points": points}, indent=2))
    png = plot_privacy_utility(points, out / "privacy_utility.png", f"{method} on {dataset}: {defense}")
    console.print(f"results: {out / 'attack.json'} and {png}")

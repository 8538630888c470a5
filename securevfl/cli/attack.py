"""``securevfl attack``: every applicable attack on a method, then a defence sweep (privacy vs utility)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from psi import atomic
from securevfl.cli.options import CONTEXT, api_values, cli_settings, given_names, settings_command
from securevfl.cli.startup import heavy_imports
from securevfl.errors import ConfigError

console = Console()


_ATTACK_SETTINGS = ("method", "dataset", "parties", "epochs", "active_features", "seed", "options")
_ATTACK_ONLY = [
    inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=kind, default=typer.Option(default, help=text))
    for name, kind, default, text in (
        ("defense", str, "grad-noise", "The defence to sweep: grad-noise | grad-sparsify | label-dp."),
        ("strengths", str, "0,1,4,16", "Comma-separated strengths of the sweep (0: no defence)."),
        ("out", Path, Path("out/attack"), "Folder for attack.json and privacy_utility.png."))]


#: The attack command's own defaults (they count as given: the method's defaults do not replace them).
_ATTACK_DEFAULTS = {"parties": 4, "epochs": 10}


def attack(ctx: typer.Context, *, defense: str, strengths: str, out: Path, **values: Any) -> None:
    """Run every applicable attack on a method, then sweep a defence: the privacy-utility table and plot."""
    with heavy_imports():
        from securevfl.api import train as api_train
        from securevfl.attacks.suite import applicable_attacks, plot_privacy_utility, privacy_utility
        from securevfl.checks import check_output_dir

    check_output_dir(out)
    try:
        levels = [float(x) for x in strengths.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--strengths must be comma-separated numbers, got {strengths!r}") from None
    kwargs = api_values(cli_settings(_ATTACK_SETTINGS), values,
                        given_names(ctx, values, also=("method", "dataset", *_ATTACK_DEFAULTS)))
    method, dataset, parties = kwargs["method"], kwargs["dataset"], kwargs["parties"]
    attacks = applicable_attacks(method, parties)
    kwargs["alignment"] = "plaintext"
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
    atomic.make_dirs(out)
    atomic.write_text(out / "attack.json",
                      json.dumps({"method": method, "dataset": dataset, "points": points}, indent=2))
    png = plot_privacy_utility(points, out / "privacy_utility.png", f"{method} on {dataset}: {defense}")
    console.print(f"results: {out / 'attack.json'} and {png}")


settings_command(attack, cli_settings(_ATTACK_SETTINGS), before=[CONTEXT], after=_ATTACK_ONLY,
                 defaults=_ATTACK_DEFAULTS)

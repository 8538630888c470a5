"""``securevfl explore``: before training, each party's column statistics, WOE / IV against the label, Pearson."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from securevfl.cli.options import CONTEXT, api_values, cli_settings, given_names, settings_command
from securevfl.cli.startup import heavy_imports
from securevfl.settings import settings_of

console = Console()
err_console = Console(stderr=True)

#: The run settings exploring takes: where the data comes from and how it is cut and aligned.
EXPLORE_RUN_SETTINGS = ("dataset", "id_column", "label_column", "n_samples", "n_features", "categorical", "drop",
                        "dates", "missing_markers", "task", "parties", "party_names", "features", "preset", "split",
                        "active_features", "aligned", "aligned_ratio", "unaligned", "test_size", "seed",
                        "alignment", "data_files", "recv_timeout_s", "positive_class")

_EXPLORE_ONLY = [
    inspect.Parameter("report", inspect.Parameter.KEYWORD_ONLY, annotation=Path,
                      default=typer.Option(Path("out/explore.json"),
                                           help="Where to write the JSON report (+ .md and .html).")),
    inspect.Parameter("top", inspect.Parameter.KEYWORD_ONLY, annotation=int,
                      default=typer.Option(15, help="Columns shown in the IV table printed here.")),
]


def _explore_settings() -> list[Any]:
    from securevfl.exploration.options import ExploreOptions

    return [s for s in settings_of(ExploreOptions) if s.info.cli]


def explore(ctx: typer.Context, *, report: Path, top: int, **values: Any) -> None:
    """Before training: each party's column statistics, WOE / IV against the label (kept at the active party).

    The same inputs and PSI as `securevfl train`. Writes JSON, Markdown and an HTML page.
    """
    from securevfl.exploration.options import ExploreOptions
    from securevfl.exploration.report import check_explore_paths

    check_explore_paths(report)
    own = {s.name for s in _explore_settings()}
    run_names = cli_settings(EXPLORE_RUN_SETTINGS)
    settings = api_values(run_names, values, given_names(ctx, [s.name for s in run_names]))
    options = {k: v for k, v in api_values(_explore_settings(), values).items() if k in own}
    ExploreOptions(**options)  # refused here, before the heavy imports (about 2 s)
    with heavy_imports():
        from securevfl.api import explore as api_explore
    with err_console.status("exploring") as status:
        result = api_explore(progress=lambda line: status.update(line), **settings, **options)
    paths = result.save(report)
    print_explore(result, top)
    console.print(f"report: {paths[0]}, {paths[1]} and {paths[2]}")


def print_explore(result: Any, top: int) -> None:
    """The IV ranking, notes, redundant pairs and the value estimate, as a table and lines."""
    rows = f"{result.rows} rows explored"
    if result.events is not None:
        rows += f", {result.events} events ({result.events / max(1, result.rows):.1%}, class {result.positive_class!r})"
    console.print(f"{result.dataset}: {rows}; {result.wall_s:.1f} s")
    if result.ranking:
        table = Table(title=f"information value (top {min(top, len(result.ranking))} of {len(result.ranking)})")
        for name, justify in (("#", "right"), ("party", "left"), ("column", "left"), ("IV", "right"),
                              ("strength", "left")):
            table.add_column(name, justify=justify)  # type: ignore[arg-type]
        for row in result.ranking[:top]:
            table.add_row(str(row["rank"]), row["party"], row["column"], f"{row['iv']:.4f}", row["strength"])
        console.print(table)
    for note in result.notes:
        console.print(f"note: {note}")
    for pair in result.redundant[:5]:
        console.print(f"redundant: {result.active}.{pair['active_column']} ~ {pair['party']}.{pair['column']} "
                      f"(r = {pair['r']:+.3f})")
    value = result.value
    if value:
        console.print(f"value ({value['method']}): active alone AUC {value['active_only']:.4f}, every party "
                      f"{value['all_parties']:.4f}")
        for party, entry in value["parties"].items():
            console.print(f"  {party}: +{entry['gain']:.4f} AUC (without it {entry['without']:.4f})")


settings_command(explore, [*cli_settings(EXPLORE_RUN_SETTINGS), *_explore_settings()], before=[CONTEXT],
                 after=_EXPLORE_ONLY)

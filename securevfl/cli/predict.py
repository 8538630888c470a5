"""``securevfl predict``: score new rows with a saved model, every party in this process.

A thin shell over :func:`securevfl.pipeline.score.score` (issue 27). Errors are SecureVFLErrors,
printed by the CLI wrapper as one line (exit code 2). Each organisation scoring on its own
machine uses ``securevfl party --predict`` instead (docs/deploy.md).
"""

from __future__ import annotations

import inspect
import json
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from securevfl.cli.options import api_values, cli_settings, parse_pairs, settings_command
from securevfl.cli.startup import heavy_imports
from securevfl.run_config import ScoringSettings
from securevfl.settings import settings_of

console = Console()
err_console = Console(stderr=True)


def _predict(
    model_dir: Path = typer.Option(..., help="The saved model (DIR/<party>/ per party, from train --model-dir)."),  # noqa: B008
    data: list[str] = typer.Option(..., "--data", help="PARTY=FILE per party of the model (CSV/Parquet)."),  # noqa: B008
    out: Path = typer.Option(Path("out/predictions.csv"), help="Where the active party writes the predictions."),  # noqa: B008
    report: Path | None = typer.Option(  # noqa: B008
        None, help="Also write a report (JSON + .md): rows, time and, when the active file has labels, metrics."),
    quiet: bool = typer.Option(False, help="No progress bar."),
    **values: Any,
) -> None:
    """Score the rows every party's new file shares with a saved model; the active party writes predictions."""
    with heavy_imports():
        from psi.atomic import write_text
        from securevfl.checks import check_output_file
        from securevfl.model.scoring import load_model
        from securevfl.pipeline.score import score

    check_output_file(out, "predictions file")
    if report is not None:
        from securevfl.api import check_report_path

        check_report_path(report)
    model = load_model(model_dir)  # verified (digests, versions, one job) before any data is read
    files = parse_pairs(data, "--data")
    with _RowProgress(quiet) as progress:
        run = api_values(_SCORING_RUN_SETTINGS, values)
        scored = score(model, files, id_column=run["id_column"], exchange_rows=values["exchange_rows"],
                       device=run["device"], alignment=run["alignment"],
                       require_all_parties=run["require_all_parties"] or None, progress=progress)
    write_text(out, scored.predictions.to_csv(index=False))
    table = Table(title=f"{model.method}: {scored.rows['scored']:,} rows scored in {scored.wall_s:.1f} s")
    table.add_column("party")
    table.add_column("rows in its file", justify="right")
    for party in model.data_parties:
        table.add_row(party, f"{scored.rows[party]:,}")
    console.print(table)
    if len(scored.coverage) > 1 or set(scored.coverage) != {"+".join(model.data_parties)}:
        patterns = Table(title="rows scored per coverage (the parties column: whose parts scored the row)")
        patterns.add_column("parties")
        patterns.add_column("rows", justify="right")
        for pattern, n in sorted(scored.coverage.items(), key=lambda kv: -kv[1]):
            patterns.add_row(pattern, f"{n:,}")
        console.print(patterns)
    left = scored.rows[model.active] - scored.rows["scored"]
    if left > 0:
        why = ("--require-all-parties" if run["require_all_parties"] else
               f"the {model.method} model scores only them (securevfl methods: the methods that score every row)")
        console.print(f"{left:,} rows of {model.active}'s file not scored: some party does not hold them ({why})",
                      highlight=False)
    for key, value in scored.metrics.items():
        if isinstance(value, float):
            console.print(f"{key}: {value:.4f}", highlight=False)
    console.print(f"predictions: {out}")
    if report is not None:
        json_path, md_path = _write_report(report, model, scored, files)
        console.print(f"report: {json_path} and {md_path}")


predict_command = _predict
#: The run settings that scoring reads (the rest is the saved model's), from their one declaration.
_SCORING_RUN_SETTINGS = cli_settings(["id_column", "device", "alignment", "require_all_parties"])
#: --party-timeout is for deployed parties (one process has every party).
_ONE_PROCESS_SCORING = [s for s in settings_of(ScoringSettings) if s.name != "party_timeout_s"]
settings_command(predict_command, [*_SCORING_RUN_SETTINGS, *_ONE_PROCESS_SCORING],
                 before=list(inspect.signature(_predict).parameters.values())[:-1])


def _write_report(report: Path, model: Any, scored: Any, files: dict[str, str]) -> tuple[Path, Path]:
    from psi.atomic import write_text
    from securevfl.report.run_report import report_paths

    json_path, md_path = report_paths(report)
    body = {"kind": "predict", "method": model.method, "model_dir": str(model.directory),
            "job_fingerprint": model.manifests[model.active].job_fingerprint, "data": dict(files),
            "rows": scored.rows, "coverage": scored.coverage, "metrics": scored.metrics, "wall_s": scored.wall_s,
            "rows_per_s": scored.rows["scored"] / max(scored.wall_s, 1e-9)}
    write_text(json_path, json.dumps(body, indent=2, default=float))
    lines = [f"# securevfl predict: {model.method}", "", f"model: {model.directory}", "",
             "| party | rows in its file |", "|---|---|"]
    lines += [f"| {p} | {scored.rows[p]:,} |" for p in model.data_parties]
    lines += ["", f"Scored: {scored.rows['scored']:,} rows in {scored.wall_s:.2f} s", "",
              "| parties (whose parts scored the row) | rows |", "|---|---|"]
    lines += [f"| {p} | {n:,} |" for p, n in sorted(scored.coverage.items(), key=lambda kv: -kv[1])]
    lines += [""]
    if scored.metrics:
        lines += ["| metric | value |", "|---|---|"]
        lines += [f"| {k} | {v:.4f} |" for k, v in scored.metrics.items() if isinstance(v, float)]
    write_text(md_path, "\n".join(lines) + "\n")
    return json_path, md_path


class _RowProgress:
    """A rich progress bar over the rows scored (the active party's count)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self._bar: Progress | None = None
        self._task: Any = None
        self._last = 0.0

    def __enter__(self) -> Any:
        if self.quiet:
            return None
        self._bar = Progress(TextColumn("[bold]scoring[/]"), BarColumn(),
                             TextColumn("{task.completed}/{task.total} rows"), TimeElapsedColumn(),
                             console=err_console, transient=True)
        self._bar.__enter__()
        self._task = self._bar.add_task("score", total=None)
        return self.update

    def update(self, rows: int, total: int, **_: Any) -> None:
        now = time.monotonic()
        if rows < total and now - self._last < 0.1:
            return
        self._last = now
        assert self._bar is not None
        self._bar.update(self._task, completed=rows, total=total)

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

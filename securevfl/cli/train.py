"""``securevfl train``: train a VFL model in this process and write its report."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from securevfl.checks import check_output_file
from securevfl.cli.options import CONTEXT, api_values, cli_settings, given_names, settings_command
from securevfl.cli.resume import hint_resume
from securevfl.cli.startup import heavy_imports
from securevfl.report.console import print_summary

console = Console(stderr=False)
err_console = Console(stderr=True)


_TRAIN_ONLY = [
    inspect.Parameter("report", inspect.Parameter.KEYWORD_ONLY, annotation=Path,
                      default=typer.Option(Path("out/run.json"), help="Where to write the JSON report (+ .md).")),
    inspect.Parameter("quiet", inspect.Parameter.KEYWORD_ONLY, annotation=bool,
                      default=typer.Option(False, help="No progress bar.")),
]


def train(ctx: typer.Context, *, report: Path, quiet: bool, **values: Any) -> None:
    """Train a VFL model and write a report (JSON + Markdown); with --model-dir, keep the model.

    Every option but --report and --quiet is a setting of the run (securevfl.run_config): the same
    name as the Python API's keyword and the report's config key, with dashes.
    """
    from securevfl.method_names import check_method_name, check_method_options
    from securevfl.model.store import check_model_dir
    from securevfl.report.run_report import report_paths
    from securevfl.run_config import run_config

    for path in report_paths(report):  # before any work (the API checks it too when given report=)
        check_output_file(path, "report file")
    settings = api_values(cli_settings(), values, given_names(ctx, values))  # the rest: the method's defaults
    check_method_name(settings.get("method", "splitnn"))
    check_method_options(settings.get("method", "splitnn"), settings.get("options") or {})
    run_config(method_defaults=False, **settings)  # every value checked before the heavy imports (about 2 s)
    if settings.get("model_dir") is not None:
        check_model_dir(settings["model_dir"], bool(settings.get("overwrite_model")))
    with heavy_imports():
        from securevfl.api import train as api_train

    with _progress(quiet) as on_progress, hint_resume(settings.get("checkpoint_dir")):
        result = api_train(progress=on_progress, **settings)
    json_path, md_path = result.save(report)
    print_summary(result, console, err_console)
    console.print(f"report: {json_path} and {md_path}")
    model_dir = settings.get("model_dir")
    if model_dir is not None:
        from securevfl.methods.base import method_class

        if method_class(result.method).standalone:
            active = next(p for p, e in result.parties.items() if e.get("labels"))
            console.print(f"model: {model_dir}/{active}/ (standalone: the active party's alone; score with "
                          f"securevfl predict and {active}'s file only)")
        else:
            console.print(f"model: {model_dir}/<party>/ (one part per party; score with securevfl predict)")


settings_command(train, cli_settings(), before=[CONTEXT], after=_TRAIN_ONLY)


def _print_resume(epoch: int, epochs: int, **info: Any) -> None:
    """The line a resumed run prints once, before its first epoch (``--quiet`` too)."""
    if info.get("resumed"):
        err_console.print(f"resuming from epoch {epoch} (of {epochs}): its checkpoints are loaded", highlight=False)


class _progress:
    """Context manager yielding a progress callback for the active party (rich bar)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self._bar: Progress | None = None
        self._task: Any = None

    def __enter__(self) -> Any:
        if self.quiet:
            return _print_resume
        self._bar = Progress(TextColumn("[bold]training[/]"), BarColumn(),
                             TextColumn("{task.completed}/{task.total} {task.fields[unit]}"),
                             TextColumn("{task.fields[info]}"),
                             TimeElapsedColumn(), TimeRemainingColumn(), console=err_console, transient=True)
        self._bar.__enter__()
        self._task = self._bar.add_task("train", total=None, info="", unit="epochs")
        return self.update

    def update(self, epoch: int, epochs: int, **info: Any) -> None:
        _print_resume(epoch, epochs, **info)
        text = " ".join(f"{k}={v:.4f}" for k, v in info.items() if isinstance(v, float))
        self._bar.update(self._task, completed=epoch, total=epochs, info=text,  # type: ignore[union-attr]
                         unit=str(info.get("unit", "epochs")))

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

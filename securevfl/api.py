"""The Python API: ``securevfl.train(...)`` mirrors ``securevfl train`` and returns a RunReport.

A thin pair of a mode and a placement (:mod:`securevfl.pipeline`): training every party in this
process; :func:`predict` / :func:`score` score a saved model the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from securevfl.checks import check_output_file
from securevfl.data import Scenario
from securevfl.pipeline.report import assemble_report, describe_parties
from securevfl.pipeline.score import predict, score
from securevfl.pipeline.train import build_scenario, run_training
from securevfl.report import RunReport
from securevfl.report.run_report import report_paths
from securevfl.run_config import RUN_SETTINGS, RunConfig, run_config
from securevfl.settings import settings_doc

ProgressCallback = Callable[..., None]


def check_report_path(report: str | Path) -> tuple[Path, Path]:
    """Refuse, before any work, a report path whose JSON or Markdown file could not be written."""
    json_path, md_path = report_paths(report)
    check_output_file(json_path, "report file")
    check_output_file(md_path, "report file")
    return json_path, md_path


def run(config: RunConfig, *, scenario: Scenario | None = None,
        progress: ProgressCallback | None = None) -> RunReport:
    """Run ``config`` end to end and return its report (metrics on the held-out aligned test rows)."""
    return run_training(config, scenario=scenario, progress=progress)


def train(method: str = "splitnn", dataset: str = "breast-cancer", *, report: str | Path | None = None,
          progress: ProgressCallback | None = None, **settings: Any) -> RunReport:
    """Train ``method`` on ``dataset`` and return the run's report; ``settings`` are the CLI's options.

    Every setting of :data:`securevfl.run_config.RUN_SETTINGS` is a keyword, named as its field (the
    list below is generated from them): ``epochs=30``, ``aligned_ratio=0.5``, ``options={"secagg":
    "dh"}`` (method options, ``securevfl methods``), ``columns=ColumnSpec(...)`` (or party ->
    ColumnSpec for per-party files), ``data_files={"active": "a.csv", "bank": "b.csv"}`` (the
    parties' own tables, the first holding the labels; PSI aligns them unless ``alignment="plaintext"``),
    ``early_stopping=N`` (patience in epochs on a ``val_fraction`` validation split of the aligned
    training rows, best weights restored), ``checkpoint_dir`` / ``resume``, ``attacks``, ``defenses``,
    ``model_dir`` (every party saves its own part; :func:`securevfl.predict` scores with it). An
    unknown keyword is a :class:`~securevfl.errors.ConfigError` naming the closest setting.
    ``report``: also write the report there (JSON + Markdown; the path is checked before any work).
    ``progress``: called after each epoch with ``(epoch, epochs, **metrics)``.

    Example::

        import securevfl
        report = securevfl.train("splitnn", "breast-cancer", parties=2, epochs=30)
        print(report.metrics["accuracy"], report.cost["comm"]["bytes"])
    """
    if report is not None:
        check_report_path(report)  # before any work: a run must not be lost to an unwritable path
    result = run(run_config(method=method, dataset=dataset, **settings), progress=progress)
    if report is not None:
        result.save(report)
    return result


train.__doc__ = (train.__doc__ or "") + settings_doc(RUN_SETTINGS)


def explore(dataset: str = "breast-cancer", *, report: str | Path | None = None,
            progress: Callable[[str], None] | None = None, **settings: Any) -> Any:
    """Before training: each party's column statistics, WOE / IV of every column against the label, Pearson.

    The same data settings as :func:`train` (``data_files``, ``id_column``, ``label_column``,
    ``parties`` ...; PSI aligns the parties unless ``alignment="plaintext"``), plus the options of
    :class:`securevfl.exploration.ExploreOptions` (``max_bins``, ``key_bits``, ``epsilon``, ``share_stats``,
    ``correlation``, ``value`` ...). Returns an :class:`securevfl.exploration.ExploreReport`; ``report``:
    also write it there (JSON, Markdown and HTML). ``progress``: called with a line at each long step.

    Example::

        import securevfl
        found = securevfl.explore("adult", parties=3)
        print(found.ranking[:5])
    """
    import dataclasses

    from securevfl.exploration.options import ExploreOptions
    from securevfl.exploration.report import check_explore_paths
    from securevfl.pipeline.explore import run_explore

    if report is not None:
        check_explore_paths(report)
    names = {f.name for f in dataclasses.fields(ExploreOptions)}
    options = ExploreOptions(**{k: v for k, v in settings.items() if k in names})
    config = run_config(dataset=dataset, **{k: v for k, v in settings.items() if k not in names})
    result = run_explore(config, options, progress=progress)
    if report is not None:
        result.save(report)
    return result


__all__ = ["RunConfig", "assemble_report", "build_scenario", "check_report_path", "describe_parties", "explore",
           "predict", "run", "score", "train"]

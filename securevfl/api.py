"""The Python API: ``securevfl.train(...)`` mirrors ``securevfl train`` and returns a RunReport."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from securevfl.checks import check_output_file
from securevfl.data import Scenario, load_dataset, partition, scenario_from_partition, scenario_from_tables
from securevfl.data.alignment import alignment_crypto_seconds, create_aligner
from securevfl.data.files import party_tables_from_files
from securevfl.errors import ConfigError
from securevfl.eval import imbalanced, positive_index, task_metrics
from securevfl.federation.runtime import run_parties
from securevfl.methods import create_method
from securevfl.networks.device import resolve_device
from securevfl.report import RunReport, cost_from_snapshots
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


def build_scenario(config: RunConfig) -> Scenario:
    """Per-party tables (from files, or cut from one dataset), aligned by PSI or, if told, in plaintext."""
    aligner = create_aligner(config.alignment)
    if config.data_files:
        opts = config.dataset_options
        if opts.id_column is None or opts.label_column is None:
            raise ConfigError("training from --data files needs --id-column and --label-column")
        names = list(config.data_files)
        tables, classes = party_tables_from_files(config.data_files, id_column=opts.id_column, task=opts.task,
                                                  label_column=opts.label_column, active=names[0],
                                                  columns=opts.columns)
        return scenario_from_tables(tables, names[0], classes, test_size=config.partition.test_size,
                                    seed=config.partition.seed, aligner=aligner,
                                    dataset="files: " + ", ".join(f"{n}={p}" for n, p in config.data_files.items()))
    dataset = load_dataset(config.dataset, config.dataset_options)
    data = partition(dataset, config.partition)
    return scenario_from_partition(data, aligner)


def run(config: RunConfig, *, scenario: Scenario | None = None,
        progress: ProgressCallback | None = None) -> RunReport:
    """Run ``config`` end to end and return its report (metrics on the held-out aligned test rows)."""
    started = time.perf_counter()
    method = create_method(config.method, config.train)  # validates the name and options first
    device = resolve_device(config.device)
    scenario = scenario or build_scenario(config)
    positive_index(scenario.classes, config.positive_class, scenario.task)  # refused before any training
    synchronize = None
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        synchronize = lambda: torch.cuda.synchronize(device)  # noqa: E731
    roles = method.party_roles(scenario)
    if config.model_dir:  # refused before any training, not after it
        from securevfl.model.saving import check_model_dir, check_savable, model_parties

        check_savable(method, {p: roles[p] for p in model_parties(method, _data_roles(scenario))})
        check_model_dir(config.model_dir, config.overwrite_model)
    sides = dict(roles)
    planned: list[Any] = []
    if config.attacks:
        from securevfl.attacks import attach

        roles, planned = attach(roles, scenario, config.attacks)
    result = run_parties(roles, active=scenario.active, passives=scenario.passives, device=device,
                         seed=config.train.seed, progress=progress, synchronize=synchronize,
                         recv_timeout=config.recv_timeout_s, scheduler=config.scheduler)
    snapshots = {n: m.snapshot() for n, m in result.meters.items()}
    report = assemble_report(config, scenario, result.results[scenario.active], snapshots,
                             method.describe(), wall_s=time.perf_counter() - started)
    if planned:
        from securevfl.attacks import evaluate

        report.privacy = [r.as_dict() for r in evaluate(planned, scenario, config.method, config.train)]
    outcome = result.results[scenario.active]
    active_rows = scenario.alignment.aligned[scenario.active][scenario.test]
    report.test_predictions = {"ids": scenario.tables[scenario.active].ids[active_rows], "scores": outcome.scores,
                               "y_true": outcome.y_true}
    if config.model_dir:
        _save_model(config, method, scenario, sides, report)
    return report


def _save_model(config: RunConfig, method: Any, scenario: Scenario, roles: Mapping[str, Any],
                report: RunReport) -> None:
    """Every party of this process saves its own part (its side, preprocessing and schema) under ``model_dir``.

    A standalone method's model is the active party's alone: only that party saves a part.
    """
    from securevfl.methods.engine.kept import saved_of
    from securevfl.model.saving import (
        aligned_ids,
        model_fingerprint,
        model_parties,
        party_schema,
        save_part,
        train_settings,
    )

    settings = train_settings(config.train)
    parties = model_parties(method, _data_roles(scenario))
    fingerprint = model_fingerprint(method.name, settings, parties)
    card = report.to_dict()
    opts = config.dataset_options
    for party, role in roles.items():
        if party not in parties:
            continue
        table = scenario.tables[party]
        encoder = scenario.encoded(party).encoder
        schema = party_schema(encoder, table.columns, id_column=opts.id_column,
                              label_column=opts.label_column if party == scenario.active else None)
        save_part(config.model_dir or "", party=party, role=parties[party], side_saved=saved_of(role),
                  encoder=encoder, schema=schema, method=method, settings=settings, parties=parties,
                  fingerprint=fingerprint, task=scenario.task, classes=scenario.classes,
                  report=card if party == scenario.active else None, overwrite=config.overwrite_model,
                  training_ids=aligned_ids(scenario, party) if parties[party] == "passive" else None)


def _data_roles(scenario: Scenario) -> dict[str, str]:
    """Each data party's role (``active`` / ``passive``), in the scenario's order."""
    return {p: ("active" if p == scenario.active else "passive") for p in scenario.tables}


def assemble_report(config: RunConfig, scenario: Scenario, outcome: Any, snapshots: Mapping[str, Any],
                    method_options: Mapping[str, Any], *, wall_s: float) -> RunReport:
    """The run report from the active party's outcome and every party's meter snapshot.

    Shared by the threaded run and a deployed active party (whose ``scenario`` holds only its own
    table and the other parties' row and feature counts).
    """
    task = scenario.task
    positive = positive_index(scenario.classes, config.positive_class, task) if task != "regression" else 1
    metrics: dict[str, Any] = task_metrics(task, outcome.y_true, outcome.scores, positive)
    if outcome.per_party:
        metrics["per_party"] = {p: task_metrics(task, y, s, positive) for p, (y, s) in outcome.per_party.items()}
        if outcome.extra.get("headline_metrics") == "per_party_mean":  # one model per party (EASTER)
            party = list(metrics["per_party"].values())
            metrics.update({k: float(np.mean([m[k] for m in party])) for k in party[0] if all(k in m for m in party)})
    cost = cost_from_snapshots(snapshots, config.network)
    cost["crypto_s"].update(alignment_crypto_seconds(scenario.alignment))
    cost["alignment"] = {"method": scenario.alignment.method, **scenario.alignment.cost}
    return RunReport(
        method=config.method, dataset=scenario.dataset or config.dataset,
        config=_config_dict(config, method_options), metrics=metrics, cost=cost,
        wall_s=wall_s, parties=describe_parties(scenario, positive), history=outcome.history,
        notes=list(scenario.notes) + _label_notes(task, outcome.y_true, config.train.class_weight, positive)
        + [f"warning: {w}" for w in outcome.extra.get("warnings", ())],
        extra=outcome.extra)


def _label_notes(task: str, y_test: np.ndarray, class_weight: str, positive: int = 1) -> list[str]:
    """A note on an imbalanced binary task: which metrics to read, and the class weighting."""
    if task != "classification" or not imbalanced(y_test, positive) or len(np.unique(y_test)) != 2:
        return []
    share = float(np.mean(np.asarray(y_test) == positive))
    weighting = ("classes weighted (class_weight=balanced)" if class_weight == "balanced"
                 else "--class-weight balanced weights the loss")
    return [f"imbalanced: {100 * share:.1f} % positives in the test rows; read auc and f1 (always predicting "
            f"the majority scores accuracy {1 - share:.3f}); {weighting}"]


def describe_parties(scenario: Scenario, positive: int = 1) -> dict[str, dict[str, Any]]:
    """The report's ``parties``: rows, model inputs, alignment, the label holder's class names.

    For each table this process holds, also what its own preprocessing did (``preprocessing``: the
    encoded columns and how each column was encoded). ``features`` counts the encoded columns (the
    model's input width). A deployed party knows only its own preprocessing: its peers' entries have
    their sizes, never their columns. ``positive``: the class index binary F1 and AUC score as positive.
    """
    parties: dict[str, dict[str, Any]] = {}
    for name, t in scenario.tables.items():
        encoded = scenario.encoded(name)
        entry: dict[str, Any] = {"rows": int(t.n_rows), "features": len(encoded.feature_names),
                                 "aligned": int(len(scenario.alignment.aligned[name])),
                                 "unaligned": int(len(scenario.alignment.unaligned[name])),
                                 "labels": t.labels is not None}
        if t.labels is not None and scenario.task == "regression":
            entry["task"] = "regression"  # a numeric target: no classes
        elif t.labels is not None:
            entry["classes"] = list(scenario.classes)
            if len(scenario.classes) == 2:  # the class binary F1 and AUC score as positive
                entry["positive_class"] = scenario.classes[positive]
        if encoded.summary:
            entry["preprocessing"] = encoded.summary
        parties[name] = entry
    return parties


def _config_dict(config: RunConfig, method_options: Mapping[str, Any]) -> dict[str, Any]:
    out = asdict(config)
    out["train"]["options"] = dict(method_options)
    return out


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


__all__ = ["RunConfig", "build_scenario", "check_report_path", "describe_parties", "run", "train"]

"""The Python API: ``securevfl.train(...)`` mirrors ``securevfl train`` and returns a RunReport."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from securevfl.checks import check_output_file
from securevfl.data import (
    ColumnSpec,
    DatasetOptions,
    PartitionSpec,
    Scenario,
    load_dataset,
    partition,
    scenario_from_partition,
    scenario_from_tables,
)
from securevfl.data.alignment import alignment_crypto_seconds, create_aligner
from securevfl.data.files import party_tables_from_files
from securevfl.errors import ConfigError
from securevfl.eval import imbalanced, positive_index, task_metrics
from securevfl.federation.meter import NetworkModel
from securevfl.federation.runtime import DEFAULT_RECV_TIMEOUT_S, run_parties
from securevfl.methods import TrainConfig, create_method
from securevfl.report import RunReport, cost_from_snapshots
from securevfl.report.run_report import report_paths


def resolve_device(name: str) -> Any:
    """``auto`` -> CUDA when available, else CPU; ``cpu`` / ``cuda`` / ``cuda:N`` as given."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"unknown device {name!r}; use auto, cpu or cuda[:N]") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device 'cuda' requested but no CUDA device is available")
    return device


@dataclass(frozen=True)
class RunConfig:
    """One training run: the method, where the data comes from, how it is cut, how it trains."""

    method: str = "splitnn"
    dataset: str = "breast-cancer"
    dataset_options: DatasetOptions = field(default_factory=DatasetOptions)
    partition: PartitionSpec = field(default_factory=PartitionSpec)
    train: TrainConfig = field(default_factory=TrainConfig)
    device: str = "auto"
    network: NetworkModel = field(default_factory=NetworkModel)
    alignment: str = "psi"
    data_files: Mapping[str, str] | None = None
    recv_timeout_s: float | None = DEFAULT_RECV_TIMEOUT_S
    attacks: tuple[str, ...] = ()
    #: How the parties of this process run (securevfl.federation.runtime.SCHEDULERS).
    scheduler: str = "cooperative"
    #: Where every party saves its own part of the trained model (``DIR/<party>/``; issue 27).
    model_dir: str | None = None
    #: Replace a model already saved in ``model_dir``.
    overwrite_model: bool = False
    #: The class binary F1 and AUC score as positive (default: the second of the label's classes).
    positive_class: str | None = None


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
    from securevfl.model.saving import model_fingerprint, model_parties, party_schema, save_part, train_settings

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
                  report=card if party == scenario.active else None, overwrite=config.overwrite_model)


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


def train(
    method: str = "splitnn",
    dataset: str = "breast-cancer",
    *,
    parties: int = 2,
    party_names: Sequence[str] | None = None,
    epochs: int = 50,
    batch_size: int = 32,
    lr: float = 1e-3,
    seed: int = 0,
    device: str = "auto",
    embedding_dim: int = 16,
    hidden: Sequence[int] = (64,),
    features: Mapping[str, Sequence[str]] | None = None,
    preset: str | None = None,
    split: str | None = None,
    active_features: int | None = None,
    aligned: int | None = None,
    aligned_ratio: float | None = None,
    unaligned: str = "drop",
    test_size: float = 0.2,
    id_column: str | None = None,
    label_column: str | None = None,
    n_samples: int = 10_000,
    n_features: int = 40,
    columns: ColumnSpec | Mapping[str, ColumnSpec] | None = None,
    task: str = "auto",
    options: Mapping[str, Any] | None = None,
    data_files: Mapping[str, str] | None = None,
    alignment: str = "psi",
    bandwidth_mbps: float = 100.0,
    latency_ms: float = 10.0,
    recv_timeout_s: float | None = DEFAULT_RECV_TIMEOUT_S,
    scheduler: str = "cooperative",
    patience: int = 0,
    val_fraction: float = 0.2,
    checkpoint_dir: str | Path | None = None,
    resume: bool = False,
    checkpoint_overwrite: bool = False,
    attacks: Sequence[str] = (),
    defenses: Mapping[str, float] | None = None,
    class_weight: str = "none",
    report: str | Path | None = None,
    progress: ProgressCallback | None = None,
    model_dir: str | Path | None = None,
    overwrite_model: bool = False,
    positive_class: str | None = None,
) -> RunReport:
    """Train ``method`` on ``dataset`` cut into ``parties`` parties; same options as the CLI.

    With ``data_files={"active": "a.csv", "bank": "b.csv"}`` the parties' own tables are used
    instead (the first holds the labels). ``columns`` (a :class:`~securevfl.data.ColumnSpec`, or
    party -> ColumnSpec for per-party files) says how each party reads and encodes its own columns:
    integer categories, dropped columns, dates, missing markers, the one-hot limit; every party fits
    its preprocessing on its own training rows. ``task``: ``"auto"`` (a numeric label with
    fractional values and many distinct ones is a regression target; anything else has classes),
    ``"classification"`` or ``"regression"`` (MSE; metrics rmse, mae, r2). ``alignment="psi"``
    (default) finds the shared rows with ECDH PSI; ``"plaintext"`` skips it for simulations and the
    report says so. ``patience`` > 0 stops early on a ``val_fraction`` validation split of the
    aligned training rows (best weights restored); ``checkpoint_dir`` saves every party's own state
    at each epoch end and ``resume`` continues from the last epoch all parties completed
    (split-learning methods); a new run refuses a used directory unless ``checkpoint_overwrite``
    (the old files are moved aside). ``attacks`` (``securevfl.attacks.attack_names()``) tap the attacking
    party's channel and add a ``privacy`` section to the report: each attack's metric next to its
    random-guess baseline. ``defenses`` (``{"grad-noise": 0.5, "grad-sparsify": 0.9, "label-dp":
    1.0}``) perturb what the active party returns or trains on (securevfl.methods.engine.defenses); the
    same report shows what they cost. ``class_weight="balanced"`` weights the cross-entropy by
    inverse class frequency (imbalanced labels; securevfl.methods.engine.objective). ``scheduler``: the
    parties run as greenlets of one thread (``"cooperative"``, default) or a thread each (``"threads"``);
    the results and byte counts are the same. ``model_dir``: every party saves its own part of the
    trained model under ``model_dir/<party>/`` (weights, fitted preprocessing, schema, manifest, model
    card; :mod:`securevfl.model`), scored later by :func:`securevfl.predict`; a directory that holds a
    model is refused unless ``overwrite_model``. ``positive_class``: the class name binary F1 and AUC
    score as positive (default: the second of the label's classes, the class names of a file sorted; the
    report and the console name it either way).

    Example::

        import securevfl
        report = securevfl.train("splitnn", "breast-cancer", parties=2, epochs=30)
        print(report.metrics["accuracy"], report.cost["comm"]["bytes"])
    """
    if report is not None:
        check_report_path(report)  # before any work: a run must not be lost to an unwritable path
    config = RunConfig(
        method=method, dataset=dataset,
        dataset_options=DatasetOptions(id_column=id_column, label_column=label_column,
                                       n_samples=n_samples, n_features=n_features, seed=seed,
                                       columns=columns if columns is not None else ColumnSpec(), task=task),
        partition=PartitionSpec(parties=parties, names=tuple(party_names) if party_names else None,
                                features=features, preset=preset, split=split,
                                active_features=active_features, aligned=aligned,
                                aligned_ratio=aligned_ratio, unaligned=unaligned,
                                test_size=test_size, seed=seed),
        train=TrainConfig(epochs=epochs, batch_size=batch_size, lr=lr, seed=seed,
                          embedding_dim=embedding_dim, hidden=tuple(hidden), options=dict(options or {}),
                          patience=patience, val_fraction=val_fraction,
                          checkpoint_dir=str(checkpoint_dir) if checkpoint_dir else None, resume=resume,
                          checkpoint_overwrite=checkpoint_overwrite, defenses=dict(defenses or {}),
                          class_weight=class_weight),
        device=device,
        network=NetworkModel(bandwidth_mbps=bandwidth_mbps, latency_ms=latency_ms),
        alignment=alignment,
        data_files=dict(data_files) if data_files else None,
        recv_timeout_s=recv_timeout_s,
        attacks=tuple(attacks),
        scheduler=scheduler,
        model_dir=str(model_dir) if model_dir else None,
        overwrite_model=overwrite_model,
        positive_class=positive_class,
    )
    result = run(config, progress=progress)
    if report is not None:
        result.save(report)
    return result


__all__ = ["RunConfig", "build_scenario", "check_report_path", "describe_parties", "resolve_device", "run", "train"]

"""The run report of a training: the active party's outcome, every party's costs, what each table is.

One assembly for both placements: every party in one process, or a deployed active party whose
scenario holds only its own table and the other parties' row and feature counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import numpy as np

from securevfl.data import Scenario
from securevfl.data.alignment import alignment_crypto_seconds
from securevfl.eval import imbalanced, positive_index, task_metrics
from securevfl.report import RunReport, cost_from_snapshots
from securevfl.run_config import RunConfig


def assemble_report(config: RunConfig, scenario: Scenario, outcome: Any, snapshots: Mapping[str, Any],
                    method_options: Mapping[str, Any], *, wall_s: float) -> RunReport:
    """The run report from the active party's outcome and every party's meter snapshot.

    Shared by the threaded run and a deployed active party (whose ``scenario`` holds only its own
    table and the other parties' row and feature counts).
    """
    task = scenario.task
    positive = positive_index(scenario.classes, config.positive_class, task) if task != "regression" else 1
    metrics: dict[str, Any] = task_metrics(task, outcome.y_true, outcome.scores, positive)
    if scenario.alignment.partial and len(outcome.y_true) == len(scenario.test):
        metrics["coverage"] = coverage_metrics(scenario, outcome, positive)
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


def coverage_metrics(scenario: Scenario, outcome: Any, positive: int = 1) -> dict[str, dict[str, Any]]:
    """The held-out metrics per coverage pattern (the parties holding the row: ``bank+shop``, ``bank``), and rows."""
    patterns = scenario.alignment.patterns(scenario.parties, scenario.test)
    out: dict[str, dict[str, Any]] = {}
    for pattern in sorted(set(patterns), key=lambda p: (-p.count("+"), p)):
        rows = patterns == pattern
        y, scores = np.asarray(outcome.y_true)[rows], np.asarray(outcome.scores)[rows]
        entry: dict[str, Any] = {"rows": int(rows.sum())}
        if scenario.task == "regression" or len(np.unique(y)) > 1:
            entry.update(task_metrics(scenario.task, y, scores, positive))
        else:  # one class only: AUC and F1 are undefined, accuracy is what there is
            entry["accuracy"] = float(np.mean(np.argmax(scores, axis=1) == y))
        out[pattern] = entry
    return out


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


#: DatasetOptions of the generated table only: left out of the report of a run on any other data.
SYNTHETIC_KEYS = ("n_samples", "n_features", "n_classes")


def _config_dict(config: RunConfig, method_options: Mapping[str, Any]) -> dict[str, Any]:
    """The run's settings as the report keeps them: the method's options, no generator keys for real data."""
    out = asdict(config)
    out["train"]["options"] = dict(method_options)
    if config.data_files or config.dataset != "synthetic":
        for key in SYNTHETIC_KEYS:
            out["dataset_options"].pop(key, None)
    return out

"""Test metrics from scikit-learn: accuracy, F1 (binary or macro) and ROC-AUC; RMSE, MAE and R² for regression."""

from __future__ import annotations

import numpy as np
from sklearn.metrics import (
    accuracy_score,
    f1_score,
    mean_absolute_error,
    mean_squared_error,
    r2_score,
    roc_auc_score,
)

#: Below this share of positives a binary task is imbalanced: AUC and F1 lead, accuracy follows.
IMBALANCED_SHARE = 0.05


def classification_metrics(y_true: np.ndarray, scores: np.ndarray, positive: int = 1) -> dict[str, float]:
    """Metrics from class scores ``(n, C)`` (probabilities or logits) or class-1 scores ``(n,)``.

    ``auc`` is reported for binary tasks only (the issue's contract); F1 is binary F1 for two
    classes and macro-F1 otherwise. Binary F1 and AUC score class index ``positive`` (0 or 1) as the
    positive class: by default 1, the second class (a file's class names are sorted). For an
    imbalanced binary task (positives under ``IMBALANCED_SHARE`` of the rows) ``auc`` and ``f1``
    come first: accuracy there mostly counts the majority class.
    """
    y_true = np.asarray(y_true)
    scores = np.asarray(scores, dtype=np.float64)
    positive_scores: np.ndarray | None
    if scores.ndim == 1:
        pred = (scores >= 0.5).astype(int)
        positive_scores = scores if positive == 1 else 1.0 - scores
        n_classes = 2
    else:
        pred = scores.argmax(axis=1)
        n_classes = scores.shape[1]
        positive_scores = scores[:, positive] if n_classes == 2 else None
    binary = n_classes == 2
    out = {
        "accuracy": float(accuracy_score(y_true, pred)),
        "f1": float(f1_score(y_true, pred, average="binary" if binary else "macro", zero_division=0,
                             **({"pos_label": positive} if binary else {}))),
    }
    if binary and positive_scores is not None and len(np.unique(y_true)) == 2:
        out["auc"] = float(roc_auc_score((y_true == positive).astype(int), positive_scores))
        if imbalanced(y_true, positive):
            out = {"auc": out["auc"], "f1": out["f1"], "accuracy": out["accuracy"]}
    return out


def imbalanced(y_true: np.ndarray, positive: int = 1) -> bool:
    """Whether a binary label vector has fewer than ``IMBALANCED_SHARE`` positives (class ``positive``)."""
    y_true = np.asarray(y_true)
    return bool(len(y_true)) and float(np.mean(y_true == positive)) < IMBALANCED_SHARE


def positive_index(classes: tuple[str, ...] | list[str], positive_class: str | None, task: str = "") -> int:
    """The class index binary F1 and AUC score as positive: ``positive_class``'s, or 1 (the second class).

    Refuses (:class:`~securevfl.errors.ConfigError`, one line listing the classes) a name that is not
    a class, and any name for a regression target or a label of more than two classes (macro F1).
    """
    if positive_class is None:
        return 1
    from securevfl.errors import ConfigError

    names = [str(c) for c in classes]
    if task == "regression":
        raise ConfigError(f"--positive-class {positive_class!r}: the label is a regression target, it has no classes")
    if str(positive_class) not in names:
        raise ConfigError(f"--positive-class {positive_class!r} is not a class of the label; classes: "
                          + ", ".join(repr(n) for n in names))
    if len(names) != 2:
        raise ConfigError(f"--positive-class is for a label of two classes; this one has {len(names)} "
                          f"({', '.join(repr(n) for n in names)}), scored by macro F1")
    return names.index(str(positive_class))


def regression_metrics(y_true: np.ndarray, predictions: np.ndarray) -> dict[str, float]:
    """RMSE, MAE and R² of ``predictions`` ``(n,)`` against ``y_true``."""
    y_true = np.asarray(y_true, dtype=np.float64)
    predictions = np.asarray(predictions, dtype=np.float64).reshape(len(y_true))
    return {"rmse": float(np.sqrt(mean_squared_error(y_true, predictions))),
            "mae": float(mean_absolute_error(y_true, predictions)),
            "r2": float(r2_score(y_true, predictions))}


def task_metrics(task: str, y_true: np.ndarray, scores: np.ndarray, positive: int = 1) -> dict[str, float]:
    """:func:`regression_metrics` for ``task == "regression"``, else :func:`classification_metrics`."""
    if task == "regression":
        return regression_metrics(y_true, scores)
    return classification_metrics(y_true, scores, positive)

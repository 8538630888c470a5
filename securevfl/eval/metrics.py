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


def classification_metrics(y_true: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    """Metrics from class scores ``(n, C)`` (probabilities or logits) or positive-class scores ``(n,)``.

    ``auc`` is reported for binary tasks only (the issue's contract); F1 is binary F1 for two
    classes and macro-F1 otherwise. For an imbalanced binary task (positives under
    ``IMBALANCED_SHARE`` of the rows) ``auc`` and ``f1`` come first: accuracy there mostly counts
    the majority class.
    """
    y_true = np.asarray(y_true)
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim == 1:
        pred = (scores >= 0.5).astype(int)
        positive = scores
        n_classes = 2
    else:
        pred = scores.argmax(axis=1)
        n_classes = scores.shape[1]
        positive = scores[:, 1] if n_classes == 2 else None
    out = {
        "accuracy": float(accuracy_score(y_true, pred)),
        "f1": float(f1_score(y_true, pred, average="binary" if n_classes == 2 else "macro", zero_division=0)),
    }
    if n_classes == 2 and positive is not None and len(np.unique(y_true)) == 2:
        out["auc"] = float(roc_auc_score(y_true, positive))
        if imbalanced(y_true):
            out = {"auc": out["auc"], "f1": out["f1"], "accuracy": out["accuracy"]}
    return out


def imbalanced(y_true: np.ndarray) -> bool:
    """Whether a binary label vector has fewer than ``IMBALANCED_SHARE`` positives (class 1)."""
    y_true = np.asarray(y_true)
    return bool(len(y_true)) and float(np.mean(y_true == 1)) < IMBALANCED_SHARE


def regression_metrics(y_true: np.ndarray, predictions: np.ndarray) -> dict[str, float]:
    """RMSE, MAE and R² of ``predictions`` ``(n,)`` against ``y_true``."""
    y_true = np.asarray(y_true, dtype=np.float64)
    predictions = np.asarray(predictions, dtype=np.float64).reshape(len(y_true))
    return {"rmse": float(np.sqrt(mean_squared_error(y_true, predictions))),
            "mae": float(mean_absolute_error(y_true, predictions)),
            "r2": float(r2_score(y_true, predictions))}


def task_metrics(task: str, y_true: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    """:func:`regression_metrics` for ``task == "regression"``, else :func:`classification_metrics`."""
    if task == "regression":
        return regression_metrics(y_true, scores)
    return classification_metrics(y_true, scores)

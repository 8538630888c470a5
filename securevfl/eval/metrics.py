"""Classification metrics from scikit-learn: accuracy, F1 (binary or macro) and ROC-AUC."""

from __future__ import annotations

import numpy as np
from sklearn.metrics import accuracy_score, f1_score, roc_auc_score


def classification_metrics(y_true: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    """Metrics from class scores ``(n, C)`` (probabilities or logits) or positive-class scores ``(n,)``.

    ``auc`` is reported for binary tasks only (the issue's contract); F1 is binary F1 for two
    classes and macro-F1 otherwise.
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
    return out

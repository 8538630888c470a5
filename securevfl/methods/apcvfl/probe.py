"""The final classifier of APC-VFL (step 4): a logistic-regression probe on representations.

The paper trains scikit-learn-style logistic regression on the student's latents ("linear
probing", Alain & Bengio 2018) and evaluates it with 10-fold cross-validation on the active
party's data (Sec. 6). Latents are standardised inside the pipeline so lbfgs converges.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler


def make_probe(c: float = 1.0) -> Pipeline:
    """Standardise, then L2-regularised logistic regression (lbfgs)."""
    return make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=2000))


def probe_scores(Z_train: np.ndarray, y_train: np.ndarray, Z_test: np.ndarray, n_classes: int,
                 c: float = 1.0) -> np.ndarray:
    """Fit the probe and return ``(n_test, n_classes)`` probabilities.

    Classes absent from training get probability 0.
    """
    probe = make_probe(c).fit(Z_train, y_train)
    proba = probe.predict_proba(Z_test)
    out = np.zeros((len(Z_test), n_classes))
    out[:, probe.classes_.astype(int)] = proba
    return out


def cross_validate_probe(Z: np.ndarray, y: np.ndarray, folds: int, seed: int, n_classes: int,
                         c: float = 1.0) -> dict[str, Any]:
    """Stratified ``folds``-fold CV of the probe on ``(Z, y)``: mean accuracy / F1 and per fold.

    F1 is binary for two classes and macro otherwise (as in ``securevfl.eval``).
    """
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    accs, f1s = [], []
    average = "binary" if n_classes == 2 else "macro"
    for tr, te in splitter.split(Z, y):
        pred = probe_scores(Z[tr], y[tr], Z[te], n_classes, c).argmax(axis=1)
        accs.append(float(accuracy_score(y[te], pred)))
        f1s.append(float(f1_score(y[te], pred, average=average, zero_division=0)))
    return {"folds": folds, "rows": int(len(y)), "accuracy": float(np.mean(accs)), "f1": float(np.mean(f1s)),
            "accuracy_folds": accs, "f1_folds": f1s}


__all__ = ["cross_validate_probe", "make_probe", "probe_scores"]

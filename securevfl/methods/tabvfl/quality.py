"""Latent-quality pipeline of TabVFL's evaluation (paper Sec. V-B): classic classifiers on latents.

The latents of every aligned row (from the finetuned encoder) are split 70/30 at random; six
scikit-learn classifiers are trained on the first part and scored on the second; the mean
accuracy, F1 and ROC-AUC over the six measure how much the latent space keeps. The paper used
XGBoost; scikit-learn's histogram gradient boosting stands in for it (no extra dependency).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score, roc_auc_score
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier
from sklearn.svm import LinearSVC
from sklearn.tree import DecisionTreeClassifier
from threadpoolctl import threadpool_limits

from securevfl.errors import DataError


def quality_classifiers(seed: int) -> dict[str, Callable[[], Any]]:
    """The six classifiers of the paper's pipeline, by name (fresh estimators, seeded)."""
    return {
        "logistic_regression": lambda: LogisticRegression(max_iter=1000),
        "decision_tree": lambda: DecisionTreeClassifier(random_state=seed),
        "random_forest": lambda: RandomForestClassifier(n_estimators=100, random_state=seed, n_jobs=1),
        "mlp": lambda: MLPClassifier(hidden_layer_sizes=(100,), max_iter=200, random_state=seed),
        "gradient_boosting": lambda: HistGradientBoostingClassifier(random_state=seed),
        "linear_svm": lambda: LinearSVC(random_state=seed),
    }


def _class_scores(model: Any, X: np.ndarray) -> np.ndarray:
    """Probabilities, or a softmax of decision values for models without ``predict_proba``."""
    if hasattr(model, "predict_proba"):
        return model.predict_proba(X)
    d = model.decision_function(X)
    if d.ndim == 1:
        d = np.stack([-d, d], axis=1)
    d = d - d.max(axis=1, keepdims=True)
    e = np.exp(d)
    return e / e.sum(axis=1, keepdims=True)


def _metrics(y: np.ndarray, scores: np.ndarray, classes: np.ndarray) -> dict[str, float]:
    pred = classes[scores.argmax(axis=1)]
    binary = len(classes) == 2
    out = {"accuracy": float(accuracy_score(y, pred)),
           "f1": float(f1_score(y, pred, average="binary" if binary else "macro", zero_division=0))}
    present = np.unique(y)
    if binary and len(present) == 2:
        out["auc"] = float(roc_auc_score(y, scores[:, 1]))
    elif not binary and len(present) == len(classes):
        out["auc"] = float(roc_auc_score(y, scores, multi_class="ovr", labels=classes))
    else:
        out["auc"] = float("nan")
    return out


def latent_quality(latents: np.ndarray, labels: np.ndarray, *, seed: int = 0, test_size: float = 0.3,
                   classifiers: dict[str, Callable[[], Any]] | None = None) -> dict[str, Any]:
    """Mean accuracy / F1 / ROC-AUC of the six classifiers on a random ``test_size`` split of latents.

    F1 is binary for two classes and macro otherwise; ROC-AUC is one-vs-rest for several classes.
    """
    latents = np.asarray(latents, dtype=np.float64)
    labels = np.asarray(labels)
    if latents.ndim != 2 or len(latents) != len(labels):
        raise DataError(f"latents {latents.shape} and labels {labels.shape} do not match")
    if not np.isfinite(latents).all():
        raise DataError("latents contain NaN or infinite values")
    stratify = labels if np.bincount(labels).min() >= 2 else None
    X_tr, X_te, y_tr, y_te = train_test_split(latents, labels, test_size=test_size, random_state=seed,
                                              stratify=stratify)
    classes = np.unique(labels)
    per_model = {}
    for name, make in (classifiers or quality_classifiers(seed)).items():
        # one BLAS/OpenMP thread: the parties' threads already share the cores
        with threadpool_limits(1), warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model = make().fit(X_tr, y_tr)
            scores = _class_scores(model, X_te)
        if scores.shape[1] != len(classes):  # a class absent from the training part
            full = np.zeros((len(X_te), len(classes)))
            full[:, np.searchsorted(classes, model.classes_)] = scores
            scores = full
        per_model[name] = _metrics(y_te, scores, classes)
    mean = {k: float(np.nanmean([m[k] for m in per_model.values()])) for k in ("accuracy", "f1", "auc")}
    return {**mean, "latent_dim": int(latents.shape[1]), "rows": int(len(latents)),
            "test_size": test_size, "per_classifier": per_model}

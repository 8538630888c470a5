"""The final classifier of APC-VFL (step 4): a logistic-regression probe on representations.

The paper trains scikit-learn-style logistic regression on the student's latents ("linear
probing", Alain & Bengio 2018) and evaluates it with 10-fold cross-validation on the active
party's data (Sec. 6). Latents are standardised inside the pipeline so lbfgs converges.

:class:`FittedProbe` is the one fitted object training scores with; :class:`LogisticProbe` is the
same fitted probe as a torch module of buffers, which a saved model keeps (safetensors, no pickle)
and scores new rows with, reproducing the pipeline's ``predict_proba``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score, roc_auc_score
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler
from torch import nn

from securevfl.errors import ModelError


def make_probe(c: float = 1.0) -> Pipeline:
    """Standardise, then L2-regularised logistic regression (lbfgs)."""
    return make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=2000))


@dataclass(frozen=True)
class FittedProbe:
    """A probe fitted on ``(Z, y)`` for ``n_classes`` classes (some may be absent from ``y``)."""

    pipeline: Pipeline
    n_classes: int

    def scores(self, Z: np.ndarray) -> np.ndarray:
        """``(n, n_classes)`` probabilities; classes absent from training get probability 0."""
        proba = self.pipeline.predict_proba(Z)
        out = np.zeros((len(Z), self.n_classes))
        out[:, self.pipeline.classes_.astype(int)] = proba
        return out

    def module(self) -> LogisticProbe:
        """The fitted probe as a torch module (what a saved model keeps)."""
        return LogisticProbe.from_pipeline(self.pipeline, self.n_classes)


def fit_probe(Z_train: np.ndarray, y_train: np.ndarray, n_classes: int, c: float = 1.0) -> FittedProbe:
    """Fit the probe (:func:`make_probe`) on ``Z_train`` and the class indices ``y_train``."""
    return FittedProbe(make_probe(c).fit(Z_train, y_train), n_classes)


def probe_scores(Z_train: np.ndarray, y_train: np.ndarray, Z_test: np.ndarray, n_classes: int,
                 c: float = 1.0) -> np.ndarray:
    """Fit the probe and return ``(n_test, n_classes)`` probabilities.

    Classes absent from training get probability 0.
    """
    return fit_probe(Z_train, y_train, n_classes, c).scores(Z_test)


class LogisticProbe(nn.Module):
    """A fitted :func:`make_probe` pipeline as buffers: standardise, then binary or multinomial logistic regression.

    ``forward(Z)`` gives ``(n, n_classes)`` probabilities as ``Pipeline.predict_proba`` does (the
    installed scikit-learn: a sigmoid ``[1 - p, p]`` for two seen classes, a softmax over the seen
    classes otherwise), with probability 0 for the classes training never saw. It computes in the
    input's dtype, as scikit-learn does (a float32 fit keeps float32 coefficients; the buffers hold
    them exactly in float64).
    """

    mean: torch.Tensor
    scale: torch.Tensor
    coef: torch.Tensor
    intercept: torch.Tensor
    seen: torch.Tensor

    def __init__(self, n_features: int, n_rows: int, n_seen: int, n_classes: int) -> None:
        super().__init__()
        if n_seen < 2 or n_rows not in (1, n_seen) or n_classes < n_seen or n_features < 1:
            raise ModelError(f"a logistic probe of {n_rows} coefficient rows over {n_seen} seen classes "
                             f"(of {n_classes}) and {n_features} inputs is malformed")
        self.n_classes = n_classes
        self.register_buffer("mean", torch.zeros(n_features, dtype=torch.float64))
        self.register_buffer("scale", torch.ones(n_features, dtype=torch.float64))
        self.register_buffer("coef", torch.zeros(n_rows, n_features, dtype=torch.float64))
        self.register_buffer("intercept", torch.zeros(n_rows, dtype=torch.float64))
        self.register_buffer("seen", torch.arange(n_seen, dtype=torch.int64))

    @classmethod
    def from_pipeline(cls, pipeline: Pipeline, n_classes: int) -> LogisticProbe:
        """The module of a fitted ``StandardScaler -> LogisticRegression`` pipeline."""
        scaler, lr = pipeline[0], pipeline[-1]
        probe = cls(lr.coef_.shape[1], lr.coef_.shape[0], len(lr.classes_), n_classes)
        with torch.no_grad():
            for name, value in (("mean", scaler.mean_), ("scale", scaler.scale_), ("coef", lr.coef_),
                                ("intercept", lr.intercept_)):
                getattr(probe, name).copy_(torch.as_tensor(np.asarray(value, dtype=np.float64)))
            probe.seen.copy_(torch.as_tensor(np.asarray(lr.classes_).astype(np.int64)))
        return probe

    @classmethod
    def shaped_like(cls, weights: dict[str, torch.Tensor], n_classes: int) -> LogisticProbe:
        """An empty probe of the shapes of saved ``weights`` (to load them into); malformed ones are a ModelError."""
        try:
            n_rows, n_features = weights["coef"].shape
            n_seen = len(weights["seen"])
        except (KeyError, TypeError, ValueError):
            raise ModelError("the saved probe's weights are malformed") from None
        return cls(int(n_features), int(n_rows), int(n_seen), n_classes)

    @torch.no_grad()
    def forward(self, Z: torch.Tensor) -> torch.Tensor:
        dtype = Z.dtype if Z.is_floating_point() else torch.float64
        Z = Z.to(dtype=dtype, device=self.mean.device)
        if len(self.seen) and int(self.seen.max()) >= self.n_classes:
            raise ModelError(f"the probe scores class {int(self.seen.max())} of a model of {self.n_classes} classes")
        scaled = (Z - self.mean.to(dtype)) / self.scale.to(dtype)
        logits = scaled @ self.coef.to(dtype).T + self.intercept.to(dtype)
        if self.coef.shape[0] == 1:
            p = torch.sigmoid(logits[:, 0])
            proba = torch.stack([1 - p, p], dim=1)
        else:
            proba = torch.softmax(logits, dim=1)
        out = torch.zeros(len(Z), self.n_classes, dtype=dtype, device=Z.device)
        out[:, self.seen] = proba
        return out


def cross_validate_probe(Z: np.ndarray, y: np.ndarray, folds: int, seed: int, n_classes: int,
                         c: float = 1.0) -> dict[str, Any]:
    """Stratified ``folds``-fold CV of the probe on ``(Z, y)``: mean accuracy / F1 (/ AUC) and per fold.

    F1 is binary for two classes and macro otherwise (as in ``securevfl.eval``); ROC AUC of the
    second class's probability for two classes (``auc`` only where every test fold has both classes).
    """
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    accs, f1s, aucs = [], [], []
    average = "binary" if n_classes == 2 else "macro"
    for tr, te in splitter.split(Z, y):
        proba = probe_scores(Z[tr], y[tr], Z[te], n_classes, c)
        pred = proba.argmax(axis=1)
        accs.append(float(accuracy_score(y[te], pred)))
        f1s.append(float(f1_score(y[te], pred, average=average, zero_division=0)))
        if n_classes == 2 and len(np.unique(y[te])) == 2:
            aucs.append(float(roc_auc_score(y[te], proba[:, 1])))
    out = {"folds": folds, "rows": int(len(y)), "accuracy": float(np.mean(accs)), "f1": float(np.mean(f1s)),
           "accuracy_folds": accs, "f1_folds": f1s}
    if aucs and len(aucs) == len(accs):
        out.update(auc=float(np.mean(aucs)), auc_folds=aucs)
    return out


__all__ = ["FittedProbe", "LogisticProbe", "cross_validate_probe", "fit_probe", "make_probe", "probe_scores"]

"""SecureBoost's losses: gradients and hessians at the active party, and scores from raw margins.

XGBoost's three objectives for the three tasks, with its conventions: ``binary:logistic``
(g = p − y, h = p (1 − p)), ``multi:softprob`` (one tree per class per round; g_k = p_k − [y = k],
h_k = 2 p_k (1 − p_k)) and ``reg:squarederror`` (g = ŷ − y, h = 1). The base margin is the
training rows' log-odds (binary), the log class frequencies (multi-class), or the target mean
(regression). Only the active party (the label holder) runs this module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from securevfl.errors import ConfigError

BINARY, MULTICLASS, SQUARED = "binary:logistic", "multi:softprob", "reg:squarederror"
#: |g| <= GRADIENT_BOUND and h <= 1 for the two classification losses (the packing's public bound).
GRADIENT_BOUND = 1.0


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return np.asarray(0.5 * (1.0 + np.tanh(0.5 * z)))


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return np.asarray(e / e.sum(axis=1, keepdims=True))


@dataclass(frozen=True)
class BoostObjective:
    """The loss of one task: ``kind`` and the output width (trees per round)."""

    kind: str
    n_classes: int

    @classmethod
    def for_task(cls, task: str, n_classes: int) -> BoostObjective:
        """``binary:logistic`` for two classes, ``multi:softprob`` for more, ``reg:squarederror`` for regression."""
        if task == "regression":
            return cls(SQUARED, 1)
        if n_classes < 2:
            raise ConfigError(f"classification needs at least 2 classes, got {n_classes}")
        return cls(BINARY, 2) if n_classes == 2 else cls(MULTICLASS, n_classes)

    @property
    def trees_per_round(self) -> int:
        """1, or one tree per class for multi-class."""
        return self.n_classes if self.kind == MULTICLASS else 1

    @property
    def regression(self) -> bool:
        return self.kind == SQUARED

    def base_margin(self, y: np.ndarray) -> np.ndarray:
        """The starting margin per output column (shape ``(trees_per_round,)``)."""
        y = np.asarray(y)
        if self.kind == SQUARED:
            return np.array([float(np.mean(y))]) if len(y) else np.zeros(1)
        if self.kind == BINARY:
            p = float(np.clip(np.mean(y == 1), 1e-6, 1 - 1e-6)) if len(y) else 0.5
            return np.array([np.log(p / (1 - p))])
        counts = np.bincount(y.astype(np.int64), minlength=self.n_classes).astype(np.float64)
        freq = np.clip(counts / max(len(y), 1), 1e-6, None)
        return np.log(freq / freq.sum())

    def gradients(self, y: np.ndarray, margin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Gradients g and hessians h of shape ``(rows, trees_per_round)`` at the current margins (same shape)."""
        if self.kind == SQUARED:
            return margin - np.asarray(y, dtype=np.float64)[:, None], np.ones_like(margin)
        if self.kind == BINARY:
            p = _sigmoid(margin[:, 0])
            return (p - (np.asarray(y) == 1))[:, None], (p * (1.0 - p))[:, None]
        p = _softmax(margin)
        onehot = np.eye(self.n_classes)[np.asarray(y, dtype=np.int64)]
        return p - onehot, 2.0 * p * (1.0 - p)

    def scores(self, margin: np.ndarray) -> np.ndarray:
        """What the run reports: class probabilities ``(rows, classes)``, or predicted values ``(rows,)``."""
        if self.kind == SQUARED:
            return np.asarray(margin[:, 0], dtype=np.float64)
        if self.kind == BINARY:
            p = _sigmoid(margin[:, 0])
            return np.column_stack([1.0 - p, p])
        return _softmax(margin)

    def loss(self, y: np.ndarray, margin: np.ndarray) -> float:
        """Mean log loss or mean squared error (early stopping's validation loss)."""
        if self.kind == SQUARED:
            return float(np.mean((margin[:, 0] - np.asarray(y, dtype=np.float64)) ** 2))
        probs = self.scores(margin)
        picked = probs[np.arange(len(probs)), np.asarray(y, dtype=np.int64)]
        return float(-np.mean(np.log(np.clip(picked, 1e-15, None))))

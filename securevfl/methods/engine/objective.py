"""What the active party's model minimises: cross-entropy over classes, or squared error (regression).

One :class:`Objective` per active party, built from its own training labels by
:func:`objective_for`, gives every method the same four things: the loss, the training targets as
a tensor, the test predictions the report scores, and the model's output width (``data.n_classes``:
the class count, or 1 for regression).

* classification: cross-entropy, optionally weighted per class (``class_weight="balanced"``:
  scikit-learn's ``n / (C * count_c)``, from the training labels); predictions are class
  probabilities;
* regression: mean squared error on the target standardised with the training labels' mean and
  standard deviation (so one learning rate suits any scale); predictions are mapped back to the
  original scale.

Everything here is computed by the active party from its own labels; nothing crosses the wire.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.utils.class_weight import compute_class_weight
from torch import nn

from securevfl.data.labels import CLASSIFICATION, REGRESSION, TASKS
from securevfl.errors import ConfigError
from securevfl.train_config import CLASS_WEIGHTS


@dataclass(frozen=True)
class Objective:
    """The loss and target handling of one run (see the module docstring)."""

    task: str = CLASSIFICATION
    class_weights: tuple[float, ...] | None = None
    target_mean: float = 0.0
    target_std: float = 1.0

    @property
    def regression(self) -> bool:
        return self.task == REGRESSION

    def targets(self, y: np.ndarray, device: torch.device | str = "cpu") -> torch.Tensor:
        """Training labels as the loss takes them: class indices, or the standardised target."""
        if self.regression:
            z = (np.asarray(y, dtype=np.float64) - self.target_mean) / self.target_std
            return torch.as_tensor(z, dtype=torch.float32, device=device)
        return torch.as_tensor(np.asarray(y), dtype=torch.long, device=device)

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Cross-entropy on logits ``(n, C)`` (weighted if asked), or MSE on outputs ``(n, 1)``."""
        if self.regression:
            return nn.functional.mse_loss(outputs.reshape(-1), targets)
        weight = None
        if self.class_weights is not None:
            weight = torch.as_tensor(self.class_weights, dtype=outputs.dtype, device=outputs.device)
        return nn.functional.cross_entropy(outputs, targets, weight=weight)

    def predictions(self, outputs: torch.Tensor) -> np.ndarray:
        """What the report scores: class probabilities ``(n, C)``, or predicted values ``(n,)``."""
        outputs = outputs.detach()
        if self.regression:
            return outputs.reshape(-1).cpu().numpy().astype(np.float64) * self.target_std + self.target_mean
        return torch.softmax(outputs, dim=1).cpu().numpy()

    def validation_loss(self, y: np.ndarray, predictions: np.ndarray) -> float:
        """The loss on held-out rows from :meth:`predictions`: log loss, or MSE on the standardised scale."""
        if self.regression:
            z = (np.asarray(y, dtype=np.float64) - np.asarray(predictions, dtype=np.float64)) / self.target_std
            return float(np.mean(z * z))
        p = np.clip(predictions[np.arange(len(y)), np.asarray(y, dtype=np.int64)], 1e-12, 1.0)
        return float(-np.mean(np.log(p)))


def balanced_class_weights(y: np.ndarray, n_classes: int) -> tuple[float, ...]:
    """scikit-learn's balanced weights ``n / (C * count_c)``; a class absent from ``y`` gets weight 1."""
    y = np.asarray(y)
    present = np.unique(y)
    weights = np.ones(n_classes)
    weights[present] = compute_class_weight("balanced", classes=present, y=y)
    return tuple(float(w) for w in weights)


def make_objective(task: str, y_train: np.ndarray, n_classes: int, class_weight: str = "none") -> Objective:
    """The objective for a run, fitted on the active party's training labels ``y_train``."""
    if task not in TASKS:
        raise ConfigError(f"unknown task {task!r}; choose {' or '.join(TASKS)}")
    if class_weight not in CLASS_WEIGHTS:
        raise ConfigError(f"unknown class weighting {class_weight!r}; choose {' or '.join(CLASS_WEIGHTS)}")
    if task == REGRESSION:
        if class_weight != "none":
            raise ConfigError("class weighting applies to classification; this is a regression task")
        y = np.asarray(y_train, dtype=np.float64)
        std = float(y.std())
        return Objective(REGRESSION, target_mean=float(y.mean()), target_std=std if std > 1e-12 else 1.0)
    weights = balanced_class_weights(y_train, n_classes) if class_weight == "balanced" else None
    return Objective(CLASSIFICATION, class_weights=weights)

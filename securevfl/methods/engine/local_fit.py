"""Training a party's own modules on its own rows: the local epoch loop every method shares.

:func:`run_side` runs the epochs of a joint protocol; this runs the epochs a party spends alone
(few-shot VFL's server classifiers and clients' FixMatch, APC-VFL's and VFedTrans's
autoencoders). The caller gives the epoch's batches (its own batch order: the agreed
:func:`~securevfl.methods.base.batch_plan`, or a party's own generator) and the step's loss; the
loop owns the rest — ``zero_grad`` / ``backward`` / ``step``, each epoch's weighted mean losses
(the history), and optionally early stopping on a validation loss (or on the training loss) with
the best weights restored. It draws no random number of its own, so a method's random draws stay
the same draws in the same order.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

LOSS = "loss"


@dataclass(frozen=True)
class StepLoss:
    """One batch's result: the loss to minimise, its weight in the epoch's mean, what the mean reports.

    ``weight``: the batch's rows for a row-weighted mean, 1 for a mean over steps; ``report``: the
    values averaged into the epoch's history entry (by default ``{"loss": loss}``).
    """

    loss: torch.Tensor
    weight: int = 1
    report: Mapping[str, float] | None = None


@dataclass
class LocalFit:
    """What a local fit did: one history entry per epoch trained, and the best epoch where it stopped early."""

    history: list[dict[str, float]] = field(default_factory=list)
    best_epoch: int = 0
    best_loss: float = float("inf")

    @property
    def epochs(self) -> int:
        """The epochs trained."""
        return len(self.history)

    def last(self, key: str = LOSS, default: float = float("nan")) -> float:
        """The last epoch's mean ``key`` (0.0 if no batch reported it; ``default`` when no epoch was trained)."""
        return self.history[-1].get(key, 0.0) if self.history else default


def fit_local(modules: Sequence[nn.Module], optimizer: torch.optim.Optimizer, epochs: int,
              batches: Callable[[int], Iterable[Any]], step: Callable[[Any], StepLoss], *,
              patience: int | None = None, validation_loss: Callable[[], float] | None = None,
              min_improvement: float = 0.0) -> LocalFit:
    """Train ``modules`` for up to ``epochs`` epochs: per batch of ``batches(epoch)`` (epoch from 0), ``step``.

    Each epoch's history entry holds ``epoch`` (from 1) and the weighted means of the steps'
    reports. With ``patience`` the fit stops after that many epochs without improving the monitored
    loss by more than ``min_improvement`` — :func:`validation_loss` where given (called with the
    modules in evaluation mode, without gradients; entered as ``val_loss``), else the epoch's mean
    ``loss`` — then restores the best epoch's weights and leaves the modules in evaluation mode.
    Without ``patience`` it trains every epoch and leaves them in training mode.
    """
    fit = LocalFit()
    best_state: list[dict[str, Any]] | None = None
    waited = 0
    for epoch in range(epochs):
        for module in modules:
            module.train()
        sums: dict[str, float] = {}
        weight = 0
        for batch in batches(epoch):
            result = step(batch)
            optimizer.zero_grad()
            result.loss.backward()
            optimizer.step()
            report = result.report if result.report is not None else {LOSS: float(result.loss.detach())}
            for key, value in report.items():
                sums[key] = sums.get(key, 0.0) + value * result.weight
            weight += result.weight
        entry = {"epoch": float(epoch + 1), **{k: v / max(weight, 1) for k, v in sums.items()}}
        fit.history.append(entry)
        if patience is None:
            continue
        if validation_loss is not None:
            for module in modules:
                module.eval()
            with torch.no_grad():
                entry["val_loss"] = monitored = validation_loss()
        else:
            monitored = entry.get(LOSS, 0.0)
        if monitored < fit.best_loss - min_improvement:
            fit.best_loss, fit.best_epoch, waited = monitored, epoch + 1, 0
            best_state = [copy.deepcopy(m.state_dict()) for m in modules]
        else:
            waited += 1
            if waited >= patience:
                break
    if patience is not None:
        if best_state is not None:
            for module, state in zip(modules, best_state, strict=True):
                module.load_state_dict(state)
        for module in modules:
            module.eval()
    return fit


__all__ = ["LOSS", "LocalFit", "StepLoss", "fit_local"]

"""Plaintext, centralised re-implementation of hetero-lr's Taylor-approximated SGD (no crypto).

It runs exactly the updates the federated protocol runs — same batch order, same residual
d = ¼ θᵀx − ½ y', same step θ ← θ − lr (Xᵀd / B + l2 θ) with an unregularised intercept — on the
concatenated features, in float64. The encrypted protocol must match it up to fixed-point
rounding (2^-frac_bits per encoded value); tests and benchmarks use it as the reference.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from securevfl.methods.base import batch_plan


@dataclass
class TaylorLRResult:
    """Per-block weights (the active block first, intercept leading if fitted) and the loss per epoch."""

    weights: list[np.ndarray]
    taylor_loss: list[float] = field(default_factory=list)

    def logits(self, blocks: Sequence[np.ndarray], intercept: bool = True) -> np.ndarray:
        """θᵀx for rows given as the same blocks (active first)."""
        total = np.zeros(len(blocks[0]))
        for i, (X, theta) in enumerate(zip(blocks, self.weights, strict=True)):
            if i == 0 and intercept:
                total = total + theta[0]
                theta = theta[1:]
            total = total + np.asarray(X, dtype=np.float64) @ theta
        return total


def taylor_lr_reference(blocks: Sequence[np.ndarray], y: np.ndarray, *, epochs: int, batch_size: int, seed: int,
                        lr: float = 0.15, l2: float = 0.0, intercept: bool = True, min_batch_rows: int | None = None,
                        trace: list[dict[str, list[np.ndarray]]] | None = None) -> TaylorLRResult:
    """Train on ``blocks`` (the active party's features first) with labels ``y`` in {0, 1}.

    ``min_batch_rows``: merge a shorter trailing batch into the previous one (default: the widest
    block's weight count + 1, as hetero-lr does). With ``trace`` (a list), every batch appends
    ``{"u": [X_k θ_k per block], "grad": [X_kᵀ d / B per block]}``.
    """
    mats = [np.asarray(X, dtype=np.float64) for X in blocks]
    if intercept:
        mats[0] = np.hstack([np.ones((len(mats[0]), 1)), mats[0]])
    thetas = [np.zeros(X.shape[1]) for X in mats]
    regs = [np.ones(X.shape[1]) for X in mats]
    if intercept:
        regs[0][0] = 0.0
    y_pm = 2.0 * np.asarray(y, dtype=np.float64) - 1.0
    if min_batch_rows is None:
        min_batch_rows = max(X.shape[1] for X in mats) + 1
    losses = []
    for epoch in range(epochs):
        total = 0.0
        for idx in batch_plan(len(y_pm), batch_size, seed, epoch, min_rows=min_batch_rows, short="merge"):
            parts = [X[idx] @ t for X, t in zip(mats, thetas, strict=True)]
            z = sum(parts)
            total += float(np.sum(math.log(2.0) - 0.5 * y_pm[idx] * z + 0.125 * z * z))
            d = 0.25 * z - 0.5 * y_pm[idx]
            grads = [X[idx].T @ d / len(idx) for X in mats]
            if trace is not None:
                trace.append({"u": parts, "grad": grads})
            thetas = [t - lr * (g + l2 * r * t) for g, t, r in zip(grads, thetas, regs, strict=True)]
        losses.append(total / len(y_pm))
    return TaylorLRResult(weights=thetas, taylor_loss=losses)


__all__ = ["TaylorLRResult", "taylor_lr_reference"]

"""Plaintext, centralised re-implementation of hetero-lr's Taylor-approximated SGD (no crypto).

It runs exactly the updates the federated protocol runs — same batch order, same residual
d = ¼ θᵀx − ½ y', same step θ ← θ − lr (Xᵀd / B + l2 θ) with an unregularised intercept — on the
concatenated features, in float64. The encrypted protocol must match it up to fixed-point
rounding (2^-frac_bits per encoded value); tests and benchmarks use it as the reference.

Partial coverage (``present``: per passive block, which rows that party holds): a passive party's
partial score is left out (zero) of the rows it does not hold, ``absent_bias`` adds one bias per
passive block on those rows (the active party's indicator columns, unregularised), and a party
whose encrypted share of a batch holds no more rows than it has weights takes no step on the batch
(a passive party: the rows it holds; the active party: the rows some passive party holds, if any),
exactly as the federated protocol does.
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
    #: The absent biases, one per passive block (empty without ``absent_bias``).
    absent: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def logits(self, blocks: Sequence[np.ndarray], intercept: bool = True,
               present: Sequence[np.ndarray | None] | None = None) -> np.ndarray:
        """θᵀx for rows given as the same blocks (active first); ``present`` as in :func:`taylor_lr_reference`."""
        total = np.zeros(len(blocks[0]))
        for i, (X, theta) in enumerate(zip(blocks, self.weights, strict=True)):
            if i == 0 and intercept:
                total = total + theta[0]
                theta = theta[1:]
            part = np.asarray(X, dtype=np.float64) @ theta
            held = present[i - 1] if present is not None and i else None
            if held is not None:
                part = np.where(held, part, self.absent[i - 1] if len(self.absent) else 0.0)
            total = total + part
        return total


def taylor_lr_reference(blocks: Sequence[np.ndarray], y: np.ndarray, *, epochs: int, batch_size: int, seed: int,
                        lr: float = 0.15, l2: float = 0.0, intercept: bool = True, min_batch_rows: int | None = None,
                        trace: list[dict[str, list[np.ndarray]]] | None = None,
                        present: Sequence[np.ndarray | None] | None = None,
                        absent_bias: bool = False) -> TaylorLRResult:
    """Train on ``blocks`` (the active party's features first) with labels ``y`` in {0, 1}.

    ``min_batch_rows``: merge a shorter trailing batch into the previous one (default: the widest
    block's weight count + 1, absent biases not counted, as hetero-lr does). With ``trace`` (a list),
    every batch appends ``{"u": [X_k θ_k per block], "grad": [X_kᵀ d / B per block]}``.
    ``present``: per passive block (in order), a boolean mask of the rows it holds (None: all); a
    block's values on other rows are ignored.
    ``absent_bias``: one bias per passive block on the rows it does not hold (trained on every row).
    """
    mats = [np.asarray(X, dtype=np.float64) for X in blocks]
    n_passive = len(mats) - 1
    held = [np.ones(len(y), dtype=bool) if present is None or present[k] is None else np.asarray(present[k], bool)
            for k in range(n_passive)]
    for k in range(n_passive):
        mats[k + 1] = np.where(held[k][:, None], mats[k + 1], 0.0)  # left out where it does not hold the row
    if intercept:
        mats[0] = np.hstack([np.ones((len(mats[0]), 1)), mats[0]])
    n_active = mats[0].shape[1]
    if min_batch_rows is None:  # the columns' weights (the absent biases do not count: every party agrees on it)
        min_batch_rows = max(X.shape[1] for X in mats) + 1
    if absent_bias:
        mats[0] = np.hstack([mats[0], np.column_stack([~h for h in held]).astype(np.float64)])
    thetas = [np.zeros(X.shape[1]) for X in mats]
    regs = [np.ones(X.shape[1]) for X in mats]
    if intercept:
        regs[0][0] = 0.0
    regs[0][n_active:] = 0.0  # the absent biases: not regularised
    y_pm = 2.0 * np.asarray(y, dtype=np.float64) - 1.0
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
            shares = [int(np.logical_or.reduce([h[idx] for h in held]).sum()) if held else len(idx)]
            shares += [int(h[idx].sum()) for h in held]
            steps = [not (0 < shares[0] <= mats[0].shape[1])] + [s > X.shape[1] for s, X in zip(shares[1:], mats[1:],
                                                                                                  strict=True)]
            thetas = [t - lr * (g + l2 * r * t) if step else t
                      for g, t, r, step in zip(grads, thetas, regs, steps, strict=True)]
        losses.append(total / len(y_pm))
    weights = [thetas[0][:n_active], *thetas[1:]]
    return TaylorLRResult(weights=weights, taylor_loss=losses, absent=thetas[0][n_active:])


__all__ = ["TaylorLRResult", "taylor_lr_reference"]

"""hetero-lr's batch schedule: the agreed batch order, with no batch small enough to be solved for.

Every party learns its own gradient g_k = X_kᵀ d / B in the clear (Hardy et al. 2017; FATE). That
is w_k linear equations (w_k = the party's weight count) in the batch's B residuals d, or — for the
active party — in the passive parties' summed partial scores. With B <= w_k the system can be
solved: a passive party would recover d, whose sign is −y' whenever |θᵀx| < 2 (the labels), and
the active party the passive parties' scores. So every batch must hold more rows than any party has
weights: the run refuses a smaller ``batch_size``, and a short trailing batch is merged into the
one before it. Larger batches still leave a (B − w_k)-dimensional set of candidates (documented
in docs/hetero_lr.md); this only removes the exactly solvable case.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from securevfl.errors import ConfigError
from securevfl.methods.base import batch_plan


def check_batch_size(batch_size: int, n_rows: int, max_weights: int) -> None:
    """Refuse batches a party could solve for: need batch_size > max_weights and enough rows."""
    if n_rows <= max_weights:
        raise ConfigError(f"hetero-lr needs more than {max_weights} aligned training rows (the widest party's "
                          f"weight count), got {n_rows}")
    if batch_size <= max_weights and batch_size < n_rows:
        raise ConfigError(f"batch_size={batch_size} would let a party solve its gradient equations for the batch "
                          f"(it has up to {max_weights} weights); use batch_size > {max_weights}")


def batch_schedule(n_rows: int, batch_size: int, seed: int, epoch: int, min_rows: int) -> Iterator[np.ndarray]:
    """:func:`batch_plan`, with a trailing batch of fewer than ``min_rows`` rows merged into the previous one."""
    batches = list(batch_plan(n_rows, batch_size, seed, epoch))
    if len(batches) > 1 and len(batches[-1]) < min_rows:
        batches[-2:] = [np.concatenate(batches[-2:])]
    yield from batches


def count_batches(n_rows: int, batch_size: int, min_rows: int) -> int:
    """Number of batches per epoch of :func:`batch_schedule` (the same every epoch)."""
    full, rest = divmod(n_rows, batch_size)
    if rest == 0:
        return full
    return full if (full >= 1 and rest < min_rows) else full + 1


__all__ = ["batch_schedule", "check_batch_size", "count_batches"]

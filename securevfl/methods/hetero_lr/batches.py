"""hetero-lr's batch schedule: the agreed batch order, with no batch small enough to be solved for.

Every party learns its own gradient g_k = X_kᵀ d / B in the clear (Hardy et al. 2017; FATE). That
is w_k linear equations (w_k = the party's weight count) in the batch's B residuals d, or — for the
active party — in the passive parties' summed partial scores. With B <= w_k the system can be
solved: a passive party would recover d, whose sign is −y' whenever |θᵀx| < 2 (the labels), and
the active party the passive parties' scores. So every batch must hold more rows than any party has
weights: the run refuses a smaller ``batch_size``, and a short trailing batch is merged into the
one before it (:func:`securevfl.methods.base.batch_plan` with ``short="merge"``). Larger batches
still leave a (B − w_k)-dimensional set of candidates (documented in docs/hetero_lr.md); this only
removes the exactly solvable case.
"""

from __future__ import annotations

from securevfl.errors import ConfigError


def check_batch_size(batch_size: int, n_rows: int, max_weights: int) -> None:
    """Refuse batches a party could solve for: need batch_size > max_weights and enough rows."""
    if n_rows <= max_weights:
        raise ConfigError(f"hetero-lr needs more than {max_weights} aligned training rows (the widest party's "
                          f"weight count), got {n_rows}")
    if batch_size <= max_weights and batch_size < n_rows:
        raise ConfigError(f"batch_size={batch_size} would let a party solve its gradient equations for the batch "
                          f"(it has up to {max_weights} weights); use batch_size > {max_weights}")


__all__ = ["check_batch_size"]

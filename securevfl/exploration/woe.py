"""Weight of evidence and information value from per-bin event / non-event counts (pure arithmetic).

With E_b events and N_b non-events in bin b, E and N their totals, and the credit-scoring sign
(Siddiqi; optbinning's convention):

    WOE_b = ln( (N_b / N) / (E_b / E) ),      IV = Σ_b (N_b / N − E_b / E) · WOE_b.

A positive WOE marks a bin with fewer events than average. A bin with no rows has no WOE and adds
nothing to IV. A bin with rows but no event (or no non-event) would have an infinite WOE: its two
counts are adjusted by ``adjustment`` (0.5 by default, FATE's ``adjustment_factor``) before the
shares are taken; ``adjustment=0`` leaves such a bin out instead (optbinning's choice: WOE 0).
The event is the positive class (:func:`securevfl.eval.positive_index`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from securevfl.exploration.options import DEFAULT_ADJUSTMENT  # noqa: E402 (re-exported)


@dataclass(frozen=True)
class WoeTable:
    """One column's WOE per bin slot (NaN where a bin has no rows), IV per bin and the column's IV."""

    events: np.ndarray
    non_events: np.ndarray
    woe: np.ndarray
    iv_terms: np.ndarray
    iv: float

    @property
    def event_rate(self) -> np.ndarray:
        """Events per row in each bin (NaN where a bin has no rows)."""
        rows = self.events + self.non_events
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(rows > 0, self.events / np.where(rows > 0, rows, 1), np.nan)


def woe_iv(events: np.ndarray, non_events: np.ndarray, adjustment: float = DEFAULT_ADJUSTMENT) -> WoeTable:
    """WOE and IV of one column's bins from its per-bin counts (floats: noised counts may be fractional)."""
    e = np.asarray(events, dtype=np.float64)
    ne = np.asarray(non_events, dtype=np.float64)
    used = (e + ne) > 0
    zero = used & ((e <= 0) | (ne <= 0))
    if adjustment > 0:
        e_adj = np.where(zero, np.maximum(e, 0) + adjustment, e)
        ne_adj = np.where(zero, np.maximum(ne, 0) + adjustment, ne)
        valid = used
    else:
        e_adj, ne_adj = e, ne
        valid = used & ~zero
    total_e, total_ne = float(e[used].clip(min=0).sum()), float(ne[used].clip(min=0).sum())
    woe = np.full(e.shape, np.nan)
    terms = np.zeros(e.shape)
    if total_e > 0 and total_ne > 0 and valid.any():
        share_e = e_adj[valid] / total_e
        share_ne = ne_adj[valid] / total_ne
        woe[valid] = np.log(share_ne / share_e)
        terms[valid] = (share_ne - share_e) * woe[valid]
        if adjustment <= 0:
            woe[used & zero] = 0.0
    return WoeTable(e, ne, woe, terms, float(terms.sum()))


def iv_strength(iv: float) -> str:
    """Siddiqi's reading of an IV: useless < 0.02 <= weak < 0.1 <= medium < 0.3 <= strong (> 0.5: suspicious)."""
    if iv < 0.02:
        return "useless"
    if iv < 0.1:
        return "weak"
    if iv < 0.3:
        return "medium"
    return "strong" if iv <= 0.5 else "suspicious"


def plain_woe_counts(bins: np.ndarray, y: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Events and non-events per bin of each column, in the clear: ``(columns, width)`` each (the reference)."""
    y = np.asarray(y, dtype=np.int64)
    events = np.stack([np.bincount(bins[:, j], weights=y, minlength=width) for j in range(bins.shape[1])]) \
        if bins.shape[1] else np.zeros((0, width))
    rows = np.stack([np.bincount(bins[:, j], minlength=width) for j in range(bins.shape[1])]) \
        if bins.shape[1] else np.zeros((0, width))
    return events.astype(np.int64), (rows - events).astype(np.int64)


__all__ = ["DEFAULT_ADJUSTMENT", "WoeTable", "iv_strength", "plain_woe_counts", "woe_iv"]

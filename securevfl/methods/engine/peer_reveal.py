"""When a secure sum broadcast back to its contributors gives one contribution away.

EASTER broadcasts the global embedding E = (S + e_active) / k and Agg-VFL the gradient of the mean
of the logits (which reveals the mean itself, up to a per-row constant). A passive party that
subtracts its own contribution from what it receives gets the sum of every *other* contribution.
When the active party contributes nothing (no features, so no model) and exactly two passive
parties contribute, that sum is the other passive party's vector — secure aggregation hides it
from the active party only. These helpers refuse such a configuration or round unless the user
accepted it with the method option ``allow_peer_reveal=true`` (hardening issue, item 3).
"""

from __future__ import annotations

import numpy as np

from securevfl.errors import ConfigError, ProtocolError

HINT = ("add a passive party, give the active party features (--active-features N), "
        "or accept the leak with --option allow_peer_reveal=true")


def reveals_peer(secagg: str, active_contributes: bool, contributors: int) -> bool:
    """True when each of the passive contributors could compute the other's vector from the broadcast."""
    return secagg != "none" and not active_contributes and contributors == 2


def warning(method: str, secagg: str) -> str:
    """The report's note when the user accepted the leak."""
    return (f"allow_peer_reveal: {method} with secagg={secagg}, a featureless active party and two passive "
            "contributors: each passive party can compute the other's contribution from what the active party "
            "broadcasts; secure aggregation hides it from the active party only")


def refuse_configuration(method: str, secagg: str, active_contributes: bool, n_passives: int,
                         allowed: bool) -> None:
    """Raise ConfigError before training when every round would reveal a peer's vector."""
    if reveals_peer(secagg, active_contributes, n_passives) and not allowed:
        raise ConfigError(f"{method} with secagg={secagg}, two passive parties and an active party without "
                          "features: each passive party could compute the other's contribution from what the "
                          f"active party broadcasts; {HINT}")


def refuse_round(method: str, secagg: str, active_contributes: bool, survivors: int, allowed: bool) -> None:
    """Raise ProtocolError instead of broadcasting a round's result that would reveal a peer's vector."""
    if reveals_peer(secagg, active_contributes, survivors) and not allowed:
        raise ProtocolError(f"{method}: only {survivors} passive parties contributed to this round and the active "
                            "party contributes nothing, so the broadcast would let each compute the other's "
                            f"contribution despite secagg={secagg}; the round is refused ({HINT})")


def summable_rows(secagg: str, active_contributes: bool, counts: np.ndarray, allowed: bool) -> np.ndarray:
    """Per row of a round under partial coverage: whether its passive contributions may be summed.

    ``counts``: per row, the passive parties that hold it and take part. A row's sum gives away one
    contribution when it has one passive contributor (the active party learns it from the sum) or, with
    a featureless active party, two (each learns the other's from what the active party sends back). So
    with a secure ``secagg`` a row is summed only with at least two passive contributors, three where
    the active party contributes nothing; the holders of any other row send a masked zero for it and
    are treated as not holding it. ``secagg=none`` (the active party sees every contribution anyway) and
    ``allowed`` (``allow_peer_reveal``) sum every held row.
    """
    counts = np.asarray(counts)
    if secagg == "none" or allowed:
        return np.ones(len(counts), dtype=bool)
    return counts >= (2 if active_contributes else 3)


def refuse_rows(method: str, secagg: str, active_contributes: bool, counts: np.ndarray, allowed: bool) -> None:
    """Raise ProtocolError instead of sending back a round in which some row's sum gives a contribution away.

    ``counts``: per row, the passive parties whose contributions the round actually summed (a real dropout
    can leave fewer than were planned).
    """
    counts = np.asarray(counts)
    bad = (counts > 0) & ~summable_rows(secagg, active_contributes, counts, allowed)
    if bad.any():
        raise ProtocolError(f"{method}: {int(bad.sum())} rows of this round were summed over too few passive "
                            f"parties ({int(counts[bad].min())}) to hide each contribution despite secagg={secagg}; "
                            f"the round is refused ({HINT})")

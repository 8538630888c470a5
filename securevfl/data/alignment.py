"""Aligners: who shares which rows. ECDH PSI for real runs; a labelled plaintext shortcut for simulations.

Both return an :class:`~securevfl.data.scenario.Alignment`. The PSI aligner runs the ``psi``
package with every party holding its own fresh keys, and hands the PSI's time split and traffic to
the run report (``cost.alignment``) — crypto seconds appear as ``psi.hash`` / ``psi.blind``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import numpy as np

from securevfl.data.partition import PartyTable
from securevfl.data.scenario import (
    Aligner,
    Alignment,
    align_plaintext,
    align_plaintext_covering,
    covering_alignment,
)
from securevfl.errors import ConfigError, DataError, psi_errors

ALIGNERS = ("psi", "plaintext")


def align_with_psi(tables: Mapping[str, PartyTable], active: str, *, workers: int | None = None,
                   cover: bool = False) -> Alignment:
    """Run ECDH PSI over the parties' ID columns (pairwise with the active party, then global).

    ``cover``: every row of the active party is an agreed position, each passive party holding the ones
    its pairwise PSI with the active party matched (partial coverage, issue 44) — no global intersection.
    """
    import psi

    if not hasattr(psi, "run_local"):  # a local psi.py next to the caller's script would shadow the package
        raise ConfigError(f"'import psi' found {getattr(psi, '__file__', psi)!r}, not the securevfl psi package; "
                          "run from another directory or pass alignment='plaintext'")
    largest = max(t.n_rows for t in tables.values())
    if workers is None:
        workers = 1 if largest < 20_000 else None  # process start-up costs more than it saves on small sets
    with psi_errors():
        result = psi.run_local({n: list(t.ids) for n, t in tables.items()}, active=active, workers=workers)
    if cover:  # the keyed order even where every party holds every row: as deployed, where no party knows that
        pairs = {}
        for name, pair in result.pairwise.items():
            if pair.active_rows is None or pair.passive_rows is None:
                raise DataError(f"PSI did not reveal the intersection to party {name!r}")
            pairs[name] = (pair.active_rows, pair.passive_rows)
        sizes = ", ".join(f"{name} {pair.size}" for name, pair in result.pairwise.items())
        return covering_alignment(tables, active, pairs, f"ECDH PSI (X25519), every active row; shared with "
                                  f"the active party: {sizes}", result.report())
    aligned: dict[str, np.ndarray] = {}
    unaligned: dict[str, np.ndarray] = {}
    for name, table in tables.items():
        if result.aligned.get(name) is None:
            raise DataError(f"PSI did not reveal the alignment to party {name!r}")
        rows = np.asarray(result.aligned[name], dtype=np.int64)
        # PSI's agreed order follows the session's random blinded values. Every party re-sorts its
        # aligned rows by its own (identical, un-normalised) IDs — a local step that reveals nothing
        # new — so the order, and hence a seeded run, is the same in every session.
        aligned[name] = rows[np.argsort(table.ids[rows].astype(str), kind="stable")]
        unaligned[name] = np.asarray(result.unaligned[name], dtype=np.int64)
    reference = tables[active].ids[aligned[active]]
    for name, table in tables.items():
        if not np.array_equal(table.ids[aligned[name]], reference):
            raise DataError(f"PSI alignment is inconsistent between {active!r} and {name!r}")
    return Alignment(aligned=aligned, unaligned=unaligned,
                     method=f"ECDH PSI (X25519, {result.intersection_size} shared IDs)",
                     cost=result.report())


def create_aligner(name: str, *, cover: bool = False) -> Aligner:
    """``psi`` (ECDH private set intersection) or ``plaintext`` (simulation only, not private).

    ``cover``: every row of the active party, each passive party holding the ones it shares with it
    (partial coverage); otherwise the rows every party holds.
    """
    if name == "psi":
        return functools.partial(align_with_psi, cover=True) if cover else align_with_psi
    if name == "plaintext":
        return align_plaintext_covering if cover else align_plaintext
    raise ConfigError(f"unknown alignment {name!r}; choose one of {', '.join(ALIGNERS)}")


def alignment_crypto_seconds(alignment: Alignment) -> dict[str, float]:
    """PSI crypto seconds summed over parties, keyed ``psi.hash`` / ``psi.blind``."""
    timings = alignment.cost.get("timings", {})
    out: dict[str, float] = {}
    for per_party in timings.values():
        for key in ("hash", "blind"):
            if key in per_party:
                out[f"psi.{key}"] = out.get(f"psi.{key}", 0.0) + float(per_party[key])
    return out

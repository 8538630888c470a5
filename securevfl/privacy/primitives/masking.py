"""Pairwise blinding factors that sum to zero over the passive parties (EASTER Eq. 4-6).

This module holds the project's one sign rule: every pairwise mask is added, and removed, by
:func:`add_pairwise_mask` (the session-key ``pairwise`` scheme, and the per-round masks of the
double-masked protocol in :mod:`securevfl.privacy.secagg`, including the removal of a dropped
party's masks by the aggregator).

Each pair of passive parties (i, j) shares a seed s_ij (Diffie–Hellman + HKDF, see
:mod:`securevfl.privacy.primitives.kdf`). For a round (batch) r and step label, party i's blinding factor is

    mask_i = sum_{j > i} PRG(s_ij, r) - sum_{j < i} PRG(s_ij, r)   (mod 2^64),

with parties ordered by name. Every PRG(s_ij, r) appears once with + (at the lower-ordered
party) and once with - (at the higher), so sum_i mask_i = 0 and the active party, adding the
blinded embeddings encode(x_i) + mask_i, obtains exactly sum_i encode(x_i) and nothing else
(EASTER sec. III, "Blinding Factor Generation"; the classic pairwise-mask construction of
Bonawitz et al. 2017, sec. 3). For dropout recovery and double masking see
:mod:`securevfl.privacy.secagg`: survivors' masks against a dropped party d sum to *minus* d's own
mask, so the aggregator removes them by adding d's mask, rebuilt from d's reconstructed key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from securevfl.errors import ConfigError, DataError
from securevfl.privacy.primitives.fixed_point import (
    DEFAULT_FRAC_BITS,
    RING_BITS,
    decode,
    encode,
    from_ring,
    ring_sum,
    to_ring,
)
from securevfl.privacy.primitives.kdf import PAIRWISE_MASK_LABEL, pairwise_seed
from securevfl.privacy.primitives.key_agreement import KeyAgreement, KeyPair, PublicKey
from securevfl.privacy.primitives.prg import STEP_PAIRWISE, add_prg_streams


def derive_pairwise_seeds(
    agreement: KeyAgreement,
    own_name: str,
    own_keys: KeyPair,
    peer_publics: Mapping[str, PublicKey],
    session_id: bytes,
    label: str = PAIRWISE_MASK_LABEL,
    validate: bool = True,
) -> dict[str, bytes]:
    """Seeds s_ij for every peer j: HKDF(DH(own, peer), label || session || sorted names).

    ``validate=False`` skips the FFDH subgroup check for peer keys this process validated before.
    """
    if own_name in peer_publics:
        raise ConfigError("peer_publics must not contain the party itself")
    peers = sorted(peer_publics)
    secrets_ = agreement.exchange_many(own_keys, [peer_publics[p] for p in peers], validate)
    return {
        peer: pairwise_seed(secret, session_id, own_name, peer, label)
        for peer, secret in zip(peers, secrets_, strict=True)
    }


def add_pairwise_mask(
    values: np.ndarray,
    own_name: str,
    peer_seeds: Mapping[str, bytes],
    round_index: int,
    step: str | int = STEP_PAIRWISE,
    sign: int = 1,
    offset: int = 0,
) -> np.ndarray:
    """Add ``sign`` times party ``own_name``'s pairwise mask to a uint64 array in place.

    The sign rule: +PRG(s_ij) for every peer j ordered after ``own_name``, -PRG(s_ij) for every
    peer before it, so the masks of all parties of a round sum to zero mod 2^64. ``offset``:
    add the mask's elements from that (flat) position on (see :func:`add_prg_streams`).
    """
    if values.dtype != np.uint64:
        raise DataError("masks are added to uint64 ring elements")
    if sign not in (1, -1):
        raise ConfigError("sign must be +1 or -1")
    if own_name in peer_seeds:
        raise ConfigError("a party has no pairwise seed with itself")
    higher = [seed for peer, seed in peer_seeds.items() if peer > own_name]
    lower = [seed for peer, seed in peer_seeds.items() if peer < own_name]
    plus, minus = (higher, lower) if sign == 1 else (lower, higher)
    add_prg_streams(values, plus, minus, round_index, step, offset)
    return values


def pairwise_mask(
    own_name: str,
    peer_seeds: Mapping[str, bytes],
    shape: tuple[int, ...],
    round_index: int,
    step: str | int = STEP_PAIRWISE,
) -> np.ndarray:
    """Compute the blinding factor of ``own_name`` for (round, step): uint64 array of ``shape``."""
    return add_pairwise_mask(
        np.zeros(shape, dtype=np.uint64), own_name, peer_seeds, round_index, step
    )


def mask_values(
    values: np.ndarray,
    own_name: str,
    peer_seeds: Mapping[str, bytes],
    round_index: int,
    step: str | int = STEP_PAIRWISE,
    frac_bits: int = DEFAULT_FRAC_BITS,
    n_terms: int | None = None,
    ring_bits: int = RING_BITS,
) -> np.ndarray:
    """Blinded embedding encode(x) + mask (EASTER Eq. 6), ready to send to the active party.

    ``n_terms`` (default: number of parties = peers + 1) sets the overflow headroom;
    ``ring_bits=32`` returns the blinded vector mod 2^32 as uint32 (see ``fixed_point.to_ring``).
    """
    terms = len(peer_seeds) + 1 if n_terms is None else n_terms
    encoded = encode(values, frac_bits, terms, ring_bits)
    return to_ring(add_pairwise_mask(encoded, own_name, peer_seeds, round_index, step), ring_bits)


def unmask_sum(
    masked: Sequence[np.ndarray], frac_bits: int = DEFAULT_FRAC_BITS, ring_bits: int = RING_BITS
) -> np.ndarray:
    """Active party: add all blinded embeddings mod 2^ring_bits (masks cancel) and decode the sum."""
    return decode(ring_sum([from_ring(m, ring_bits) for m in masked]), frac_bits, ring_bits)


__all__ = [
    "add_pairwise_mask",
    "derive_pairwise_seeds",
    "mask_values",
    "pairwise_mask",
    "unmask_sum",
]

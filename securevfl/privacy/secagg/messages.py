"""The protocol's messages as frozen dataclasses (their wire form is :mod:`.wire`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from securevfl.privacy.primitives.shamir import Share


@dataclass(frozen=True)
class KeyAdvert:
    """Passive party -> aggregator: the party's long-lived channel public key."""

    party: str
    channel_public: bytes


@dataclass(frozen=True)
class KeyDirectory:
    """Aggregator -> all passive parties: every channel public key (routed via the aggregator)."""

    channel_publics: Mapping[str, bytes]


@dataclass(frozen=True)
class RoundSetup:
    """Passive party -> aggregator: round mask public key, encrypted shares, commitments.

    ``seed_commitment`` and ``key_commitment`` (:func:`commit_secret`, 32 bytes each) let the
    aggregator verify the self-mask seed and the mask private key it reconstructs. In session mode
    (``rekey_every`` != 1) the mask key is never shared, and ``key_commitment`` is 32 zero bytes.
    """

    party: str
    round_index: int
    mask_public: bytes
    encrypted_shares: Mapping[str, bytes] = field(repr=False)
    seed_commitment: bytes = field(repr=False)
    key_commitment: bytes = field(repr=False)


@dataclass(frozen=True)
class SetupBundle:
    """Aggregator -> one passive party: the round's mask public keys and the shares for it."""

    round_index: int
    mask_publics: Mapping[str, bytes]
    encrypted_shares: Mapping[str, bytes] = field(repr=False)


@dataclass(frozen=True)
class MaskedInput:
    """Passive party -> aggregator: the masked ring vector, plus next round's setup (piggyback)."""

    party: str
    round_index: int
    masked: np.ndarray = field(repr=False)
    next_setup: RoundSetup | None = None


@dataclass(frozen=True)
class UnmaskRequest:
    """Aggregator -> responding parties: who survived (input received) and who dropped."""

    round_index: int
    survivors: tuple[str, ...]
    dropped: tuple[str, ...]


@dataclass(frozen=True)
class UnmaskResponse:
    """Passive party -> aggregator: self-seed shares of survivors, and what recovers each dropped party.

    For a dropped party: its key share (fresh keys every round) or, in session mode, this party's
    round seed with it (``pair_seeds``).
    """

    party: str
    round_index: int
    self_seed_shares: Mapping[str, Share]
    key_shares: Mapping[str, Share]
    pair_seeds: Mapping[str, bytes] = field(default_factory=dict, repr=False)


__all__ = [
    "KeyAdvert",
    "KeyDirectory",
    "MaskedInput",
    "RoundSetup",
    "SetupBundle",
    "UnmaskRequest",
    "UnmaskResponse",
]

"""Session parameters of the double-masked protocol, its threshold rule and its errors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from securevfl.errors import ConfigError, ProtocolError
from securevfl.privacy.primitives.fixed_point import DEFAULT_FRAC_BITS, RING_BITS, FixedPointConfig
from securevfl.privacy.primitives.key_agreement import KEY_AGREEMENT_NAMES, KeyAgreement, create_key_agreement
from securevfl.privacy.primitives.prg import STEP_SELF

Urandom = Callable[[int], bytes]
SELF_SEED_BYTES = 32
COMMITMENT_BYTES = 32
#: Names of the two per-round secrets (commitment domain labels and error messages).
SELF_SEED = "self-mask seed"
MASK_KEY = "mask key"


class InsufficientSurvivorsError(ProtocolError):
    """Fewer than the threshold t of parties survived (or answered), so the sum is lost."""


class ShareVerificationError(ProtocolError):
    """A secret reconstructed from the unmask responses does not match its owner's commitment.

    ``party`` owns the secret (``secret`` is :data:`SELF_SEED` or :data:`MASK_KEY`) of round
    ``round_index``. ``suspects`` are the responders whose shares are inconsistent with the
    committed secret, when a verifying subset of the responses was found (empty otherwise: the
    owner dealt bad shares or a bad commitment, or several responses are corrupt). The
    aggregator's state is unchanged, so it may call :func:`aggregate` again without them.
    """

    def __init__(self, party: str, secret: str, round_index: int, suspects: tuple[str, ...], detail: str):
        self.party = party
        self.secret = secret
        self.round_index = round_index
        self.suspects = suspects
        super().__init__(detail)


def default_threshold(n_parties: int) -> int:
    """Return the majority threshold floor(n/2) + 1 (at least 2).

    It is the smallest t for which two disjoint sets of t responders cannot exist.
    """
    return max(2, n_parties // 2 + 1)


def validate_threshold(threshold: object, n_parties: int) -> int:
    """Check a Shamir threshold for ``n_parties``: an int with n/2 < t <= n (and t >= 2).

    t > n/2 is what stops a malicious aggregator from sending different unmask requests to
    two disjoint groups of t parties (one revealing a party's self-mask seed, the other its
    mask key) and unmasking that party (Bonawitz et al., CCS 2017, sec. 4 and 6). Every party
    answers one request per round, so two groups of t > n/2 always overlap and the overlap
    refuses. Raises a one-line :class:`ConfigError` naming the bound.
    """
    if isinstance(threshold, bool) or not isinstance(threshold, int):
        raise ConfigError(f"threshold must be an int, got {type(threshold).__name__}")
    n = n_parties
    if threshold > n:
        raise ConfigError(f"threshold must satisfy t <= n = {n}, got {threshold}")
    if threshold < 2:
        raise ConfigError(f"threshold must be at least 2, got {threshold}")
    if 2 * threshold <= n:
        raise ConfigError(
            f"threshold {threshold} is at most n/2 = {n / 2:g} for {n} parties; secure aggregation "
            f"needs t > n/2 (Bonawitz et al. 2017), e.g. the default {default_threshold(n)}"
        )
    return threshold


def validate_rekey_every(rekey_every: object) -> int:
    """Check ``rekey_every``: an int >= 0 (0: once per session; 1: every round)."""
    if isinstance(rekey_every, bool) or not isinstance(rekey_every, int) or rekey_every < 0:
        raise ConfigError(f"rekey_every must be an int >= 0 (0: keys once per session, 1: fresh keys every round), "
                          f"got {rekey_every!r}")
    return rekey_every


@dataclass(frozen=True)
class SecAggConfig:
    """Session parameters shared by all passive parties and the aggregator."""

    session_id: bytes
    parties: tuple[str, ...]
    threshold: int
    key_agreement: str = "x25519"
    frac_bits: int = DEFAULT_FRAC_BITS
    step: str = "secagg/embedding"
    ring_bits: int = RING_BITS  # masked inputs travel in Z_2^ring_bits (64, or 32: half the bytes)
    #: Rounds per mask key pair: 1 draws fresh keys and Shamir-shares them every round (Bonawitz et al.);
    #: 0 agrees keys once per session, k > 1 every k rounds (each round's seeds derived from the pair's
    #: key; a dropped party's round seeds revealed by the survivors). Either way a party whose masks were
    #: recovered re-keys (see :mod:`securevfl.privacy.secagg`).
    rekey_every: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.session_id, bytes) or not self.session_id:
            raise ConfigError("session_id must be non-empty bytes")
        parties = tuple(self.parties)
        if len(parties) < 2 or len(set(parties)) != len(parties):
            raise ConfigError("secure aggregation needs at least 2 distinct passive parties")
        if any(not isinstance(p, str) or not p for p in parties):
            raise ConfigError("party names must be non-empty strings")
        object.__setattr__(self, "parties", tuple(sorted(parties)))
        validate_threshold(self.threshold, len(parties))
        if self.key_agreement not in KEY_AGREEMENT_NAMES:
            raise ConfigError(
                f"unknown key agreement {self.key_agreement!r}; valid names: {', '.join(KEY_AGREEMENT_NAMES)}"
            )
        if self.step == STEP_SELF:
            raise ConfigError(f"step label {STEP_SELF!r} is reserved for self masks")
        FixedPointConfig(self.frac_bits, 1, self.ring_bits)  # validates frac_bits and ring_bits
        validate_rekey_every(self.rekey_every)

    @property
    def session_keys(self) -> bool:
        """Whether a mask key pair serves more than one round (``rekey_every`` != 1)."""
        return self.rekey_every != 1

    def share_index(self, party: str) -> int:
        """Shamir x coordinate of ``party`` (1-based position in the sorted party list)."""
        try:
            return self.parties.index(party) + 1
        except ValueError:
            raise ProtocolError(f"unknown party {party!r}") from None

    def agreement(self) -> KeyAgreement:
        """Build the key agreement scheme object."""
        return create_key_agreement(self.key_agreement)


__all__ = [
    "COMMITMENT_BYTES",
    "MASK_KEY",
    "SELF_SEED",
    "SELF_SEED_BYTES",
    "InsufficientSurvivorsError",
    "SecAggConfig",
    "ShareVerificationError",
    "Urandom",
    "default_threshold",
    "validate_rekey_every",
    "validate_threshold",
]

"""The contract of an aggregation scheme: shared config, the two halves, results and stats.

A scheme has a passive half and an active half; each takes the party's
:class:`~securevfl.federation.runtime.PartyContext` and does its own ``send`` / ``recv`` under
tags starting ``agg.``, validating every received message into a
:class:`~securevfl.errors.ProtocolError`, and wraps its cryptography in
``ctx.meter.crypto("secagg.<primitive>")``. Both halves count rounds in lockstep; a method calls,
per round, ``contribute`` or ``drop`` on every passive party and ``aggregate`` once on the active
party.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

import numpy as np

from securevfl.errors import ConfigError
from securevfl.privacy.aggregation.options import NoOptions
from securevfl.privacy.primitives.fixed_point import DEFAULT_FRAC_BITS, RING_BITS, FixedPointConfig, max_magnitude
from securevfl.privacy.primitives.key_agreement import KEY_AGREEMENT_NAMES

if TYPE_CHECKING:
    from securevfl.federation.runtime import PartyContext

Urandom = Callable[[int], bytes]
OptionsT = TypeVar("OptionsT")
HalfT_co = TypeVar("HalfT_co", covariant=True)

#: Short names accepted for the key agreement option (the CLI documents ``x25519 | ffdh``).
KEY_AGREEMENT_ALIASES = {"ffdh": "ffdh2048"}
SESSION_ID_BYTES = 16


def resolve_key_agreement(name: str) -> str:
    """Canonical key agreement name (``ffdh`` means RFC 7919 ffdhe2048)."""
    name = KEY_AGREEMENT_ALIASES.get(name, name)
    if name not in KEY_AGREEMENT_NAMES:
        valid = ", ".join([*KEY_AGREEMENT_NAMES, *KEY_AGREEMENT_ALIASES])
        raise ConfigError(f"unknown key agreement {name!r}; valid names: {valid}")
    return name


@dataclass(frozen=True)
class AggregationConfig:
    """Parameters every scheme shares (from the method's options); scheme-specific ones are its Options.

    ``threshold``: Shamir threshold t for ``dh`` (None: majority, see
    :func:`securevfl.privacy.secagg.default_threshold`); it must exceed n/2 for n passive
    parties (checked by the ``dh`` scheme's ``validate``, see
    :func:`securevfl.privacy.secagg.validate_threshold`). ``ring_bits``: the ring the masked
    vectors travel in, Z_2^64 (default) or Z_2^32 (half the bytes, a smaller range: see
    :mod:`securevfl.privacy.primitives.fixed_point`); only the masking schemes
    (``uses_ring``) accept 32. ``urandom`` may be injected for deterministic tests; by default
    secrets come from ``os.urandom``.
    """

    frac_bits: int = DEFAULT_FRAC_BITS
    key_agreement: str = "x25519"
    threshold: int | None = None
    urandom: Urandom | None = field(default=None, repr=False, compare=False)
    ring_bits: int = RING_BITS

    def __post_init__(self) -> None:
        object.__setattr__(self, "key_agreement", resolve_key_agreement(self.key_agreement))
        FixedPointConfig(self.frac_bits, 1, self.ring_bits)  # validates frac_bits and ring_bits
        if self.threshold is not None and (
            isinstance(self.threshold, bool) or not isinstance(self.threshold, int) or self.threshold < 2
        ):
            raise ConfigError(f"threshold must be None (majority) or an int >= 2, got {self.threshold!r}")

    def draw(self, n: int) -> bytes:
        """``n`` secret random bytes (from the injected ``urandom``, else ``os.urandom``)."""
        return (self.urandom or os.urandom)(n)


@dataclass(frozen=True)
class AggregateResult:
    """One round at the active party: the float64 sum over the survivors, and who they were."""

    total: np.ndarray = field(repr=False)
    survivors: tuple[str, ...]
    dropped: tuple[str, ...]


@dataclass
class AggregationStats:
    """What the active half counted (lands in the method's report ``extra``)."""

    rounds: int = 0
    dropouts: int = 0
    recovered_rounds: int = 0
    recovery_bytes: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counters as a plain dict."""
        return {"rounds": self.rounds, "dropouts": self.dropouts,
                "recovered_rounds": self.recovered_rounds, "recovery_bytes": self.recovery_bytes}


class PassiveAggregator(ABC):
    """A passive party's half of a scheme (stateful; one object per party and run)."""

    @abstractmethod
    def setup(self, ctx: PartyContext) -> None:
        """Once per run, before the first round (key exchange, if any)."""

    @abstractmethod
    def contribute(self, ctx: PartyContext, values: np.ndarray) -> None:
        """Take part in the next round with ``values`` (any shape, equal across parties)."""

    def drop(self, ctx: PartyContext) -> None:
        """Simulated dropout: vanish in the next round, come back for the one after."""
        raise ConfigError(f"aggregation scheme {type(self).__name__} has no dropout recovery")


class ActiveAggregator(ABC):
    """The active party's half: learns the sum of the survivors' values, round by round."""

    def __init__(self) -> None:
        self.stats = AggregationStats()

    @abstractmethod
    def setup(self, ctx: PartyContext, parties: Sequence[str]) -> None:
        """Once per run: ``parties`` are the passive parties taking part."""

    @abstractmethod
    def aggregate(self, ctx: PartyContext, dropped: Collection[str] = ()) -> AggregateResult:
        """Close the next round: the sum over the passive parties not in ``dropped``."""


class HalfFactory(Protocol[HalfT_co]):
    """Builds one half of a scheme from the run's config (the half's class itself, usually)."""

    def __call__(self, config: AggregationConfig) -> HalfT_co: ...


class AggregationScheme(ABC, Generic[OptionsT]):
    """A named way of summing passive vectors at the active party.

    ``Options`` is the scheme's frozen options dataclass (:class:`NoOptions` by default); the
    registry builds it from a mapping (:func:`~securevfl.privacy.aggregation.create_aggregation`).
    ``Passive`` and ``Active`` are its two halves, each built from the run's :class:`AggregationConfig`;
    a scheme whose halves take something else overrides :meth:`passive` and :meth:`active` instead.
    """

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    #: Whether the scheme masks fixed-point values in a ring (``AggregationConfig.ring_bits`` applies).
    uses_ring: ClassVar[bool] = False
    Options: ClassVar[type[Any]] = NoOptions
    Passive: ClassVar[HalfFactory[PassiveAggregator]]
    Active: ClassVar[HalfFactory[ActiveAggregator]]

    def __init__(self, config: AggregationConfig | None = None, options: OptionsT | None = None) -> None:
        if options is not None and not isinstance(options, self.Options):
            raise ConfigError(
                f"aggregation scheme {self.name!r} takes {self.Options.__name__} options, "
                f"got {type(options).__name__}"
            )
        self.config = config or AggregationConfig()
        self.options: OptionsT = self.Options() if options is None else options
        self.check_ring(self.config.ring_bits)

    @classmethod
    def check_ring(cls, ring_bits: int) -> None:
        """ConfigError when ``ring_bits`` asks for a ring other than Z_2^64 and the scheme has none to change."""
        if ring_bits != RING_BITS and not cls.uses_ring:
            raise ConfigError(f"ring_bits={ring_bits} applies to the masking schemes only "
                              f"(dh, pairwise); aggregation scheme {cls.name!r} has no ring")

    def passive(self) -> PassiveAggregator:
        """A fresh passive half."""
        return self.Passive(self.config)

    def active(self) -> ActiveAggregator:
        """A fresh active half."""
        return self.Active(self.config)

    def max_dropouts(self, n_passives: int) -> int:
        """How many passive parties may drop in one round with the sum still recoverable."""
        return 0

    def validate(self, n_passives: int) -> None:  # noqa: B027 - optional hook, no-op by default
        """Raise ConfigError if the scheme cannot run with ``n_passives`` passive parties."""


def require_ring_range(config: AggregationConfig, n_passives: int, floor: float = 1.0) -> None:
    """ConfigError when ``n_passives`` summands leave the ring less than ``floor`` per value.

    The bound per value is ``floor((2^(ring_bits-1) - 1) / n) / 2^frac_bits``
    (:func:`~securevfl.privacy.primitives.fixed_point.max_magnitude`); larger values met at run
    time are refused by the encoder (:class:`~securevfl.errors.EncodingOverflowError`).
    """
    bound = max_magnitude(config.frac_bits, max(n_passives, 1), config.ring_bits)
    if bound < floor:
        raise ConfigError(
            f"the {config.ring_bits}-bit ring with frac_bits={config.frac_bits} and {n_passives} passive "
            f"parties holds only |x| <= {bound:.4g} per value (below {floor:g}); use ring_bits=64 or fewer frac_bits")


def require_passives(n_passives: int, minimum: int = 2) -> None:
    """ConfigError unless there are ``minimum`` passive parties (the secure schemes need two)."""
    if n_passives < minimum:
        raise ConfigError("secure aggregation needs at least 2 passive parties "
                          f"(got {n_passives}); with one the sum is its vector — use secagg=none")


__all__ = [
    "KEY_AGREEMENT_ALIASES",
    "SESSION_ID_BYTES",
    "ActiveAggregator",
    "AggregateResult",
    "AggregationConfig",
    "AggregationScheme",
    "AggregationStats",
    "HalfFactory",
    "NoOptions",
    "PassiveAggregator",
    "Urandom",
    "require_passives",
    "require_ring_range",
    "resolve_key_agreement",
]

"""Aggregating the passive parties' vectors at the active party, as interchangeable schemes.

EASTER (paper 004, sec. IV-B/IV-C) sums the passive parties' local embeddings at the active
party; Agg-VFL sums local predictions. *How* the sum is formed is a separate, swappable step:

* ``none`` — plaintext: every passive party sends its vector; the active party sums them.
* ``dh`` — EASTER's Diffie–Hellman blinding factors with dropout recovery: the double-masking
  protocol of :mod:`securevfl.privacy.secagg` (Bonawitz et al., CCS 2017), with fresh mask keys
  and self-mask seeds every round (= every batch). Public keys and encrypted Shamir shares are
  relayed through the active party, as in the paper. Each round: fixed-point encode, mask,
  the active party adds the masked vectors, removes the self masks of the survivors (and the
  pairwise masks of dropped parties, reconstructed from t shares, each secret checked against
  the commitment in its owner's setup) and decodes only the sum. The threshold must exceed n/2.
* ``pairwise`` — the paper's lightweight blinding exactly as Eq. 4-6: one key agreement per
  session, per-batch masks PRG(s_ij, round) that cancel in the sum
  (:mod:`securevfl.privacy.masking`). No dropout recovery (``max_dropouts == 0``).

A scheme has a passive half and an active half; each takes the :class:`PartyContext` and does
its own ``send`` / ``recv`` under tags starting ``agg.``, and wraps its cryptography in
``ctx.meter.crypto("secagg.<primitive>")``, so it appears in the report's ``cost.crypto_s``.
Both halves count rounds in lockstep; a method calls, per round, ``contribute`` or ``drop`` on
every passive party and ``aggregate`` once on the active party. A new scheme (e.g. Paillier) is
one class registered with :func:`register_aggregation`; methods pick it by name.

Dropouts are *simulated*: the method draws a seeded schedule that all parties know, and the
active party passes the round's dropped parties to ``aggregate`` (a deployment would close the
round on a timeout instead). A dropped party vanishes after the round was set up — so the
others have already masked against it — and comes back for the next round with fresh keys.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from securevfl.errors import ConfigError, ProtocolError
from securevfl.federation import codec
from securevfl.federation.runtime import PartyContext
from securevfl.privacy import secagg as sa
from securevfl.privacy.fixed_point import DEFAULT_FRAC_BITS, encode
from securevfl.privacy.key_agreement import (
    KEY_AGREEMENT_NAMES,
    PublicKey,
    create_key_agreement,
)
from securevfl.privacy.masking import derive_pairwise_seeds, mask_values, unmask_sum
from securevfl.privacy.shamir import SHARE_BYTES, Share

Urandom = Callable[[int], bytes]

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
    """Parameters both halves of a scheme agree on (from the method's options).

    ``threshold``: Shamir threshold t for ``dh`` (None: majority, see
    :func:`securevfl.privacy.secagg.default_threshold`); it must exceed n/2 for n passive
    parties (checked by :meth:`DHAggregation.validate`, see
    :func:`securevfl.privacy.secagg.validate_threshold`). ``urandom`` may be injected for
    deterministic tests; by default secrets come from ``os.urandom``.
    """

    frac_bits: int = DEFAULT_FRAC_BITS
    key_agreement: str = "x25519"
    threshold: int | None = None
    urandom: Urandom | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key_agreement", resolve_key_agreement(self.key_agreement))
        encode(0.0, self.frac_bits)  # validates frac_bits
        if self.threshold is not None and (
            isinstance(self.threshold, bool) or not isinstance(self.threshold, int) or self.threshold < 2
        ):
            raise ConfigError(f"threshold must be None (majority) or an int >= 2, got {self.threshold!r}")

    def draw(self, n: int) -> bytes:
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


class AggregationScheme(ABC):
    """A named way of summing passive vectors at the active party."""

    name: ClassVar[str]
    summary: ClassVar[str] = ""

    def __init__(self, config: AggregationConfig) -> None:
        self.config = config

    @abstractmethod
    def passive(self) -> PassiveAggregator:
        """A fresh passive half."""

    @abstractmethod
    def active(self) -> ActiveAggregator:
        """A fresh active half."""

    def max_dropouts(self, n_passives: int) -> int:
        """How many passive parties may drop in one round with the sum still recoverable."""
        return 0

    def validate(self, n_passives: int) -> None:  # noqa: B027 - optional hook, no-op by default
        """Raise ConfigError if the scheme cannot run with ``n_passives`` passive parties."""


_SCHEMES: dict[str, type[AggregationScheme]] = {}


def register_aggregation(cls: type[AggregationScheme]) -> type[AggregationScheme]:
    """Class decorator: register an aggregation scheme under ``cls.name``."""
    if cls.name in _SCHEMES:
        raise ConfigError(f"aggregation scheme {cls.name!r} is registered twice")
    _SCHEMES[cls.name] = cls
    return cls


def aggregation_names() -> list[str]:
    """Registered scheme names, sorted."""
    return sorted(_SCHEMES)


def create_aggregation(name: str, config: AggregationConfig | None = None) -> AggregationScheme:
    """The scheme registered as ``name``; unknown names raise ConfigError listing valid ones."""
    try:
        cls = _SCHEMES[name]
    except KeyError:
        raise ConfigError(
            f"unknown aggregation scheme {name!r}; choose one of {', '.join(aggregation_names())}"
        ) from None
    return cls(config or AggregationConfig())


def _expect(message: Any, src: str, kind: str) -> dict:
    if not isinstance(message, dict):
        raise ProtocolError(f"{kind} from {src} is not a mapping")
    if "party" in message and message["party"] != src:
        raise ProtocolError(f"{kind} from {src} claims to come from {message['party']!r}")
    return message


# ============================================================================ none (plaintext)


class _PlainPassive(PassiveAggregator):
    def setup(self, ctx: PartyContext) -> None:
        return None

    def contribute(self, ctx: PartyContext, values: np.ndarray) -> None:
        ctx.send(ctx.active, "agg.plain", np.asarray(values, dtype=np.float32))

    def drop(self, ctx: PartyContext) -> None:
        return None


class _PlainActive(ActiveAggregator):
    def setup(self, ctx: PartyContext, parties: Sequence[str]) -> None:
        self.parties = tuple(parties)

    def aggregate(self, ctx: PartyContext, dropped: Collection[str] = ()) -> AggregateResult:
        alive = tuple(p for p in self.parties if p not in set(dropped))
        if not alive:
            raise sa.InsufficientSurvivorsError("every passive party dropped")
        total = None
        for p in alive:
            value = np.asarray(ctx.recv(p, "agg.plain"), dtype=np.float64)
            total = value if total is None else total + value
        self.stats.rounds += 1
        self.stats.dropouts += len(self.parties) - len(alive)
        return AggregateResult(total, alive, tuple(p for p in self.parties if p not in alive))


@register_aggregation
class PlainAggregation(AggregationScheme):
    """No protection: the active party sees every passive vector (baseline)."""

    name = "none"
    summary = "plaintext sum (the active party sees every passive vector)"

    def passive(self) -> PassiveAggregator:
        return _PlainPassive()

    def active(self) -> ActiveAggregator:
        return _PlainActive()

    def max_dropouts(self, n_passives: int) -> int:
        return max(n_passives - 1, 0)


# ============================================================================ dh (double masking)
# Wire forms of the secagg messages: plain dicts of bytes/ints/lists/arrays (the codec never
# pickles). Each ``_..._from_wire`` parser checks every field's type before use and raises
# ProtocolError on anything malformed, so a message is never indexed raw.

_MAX_ROUND = (1 << 63) - 1


def _wire_field(m: Any, key: str, kind: str) -> Any:
    if not isinstance(m, Mapping):
        raise ProtocolError(f"{kind} is not a mapping")
    if key not in m:
        raise ProtocolError(f"{kind} lacks the field {key!r}")
    return m[key]


def _wire_str(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise ProtocolError(f"{what} must be a non-empty string")
    return value


def _wire_int(value: Any, what: str, low: int = 0, high: int = _MAX_ROUND) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ProtocolError(f"{what} must be an int in [{low}, {high}]")
    return int(value)


def _wire_bytes(value: Any, what: str, length: int | None = None) -> bytes:
    if not isinstance(value, bytes | bytearray):
        raise ProtocolError(f"{what} must be bytes")
    if length is not None and len(value) != length:
        raise ProtocolError(f"{what} must be {length} bytes, got {len(value)}")
    return bytes(value)


def _wire_names(value: Any, what: str) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        raise ProtocolError(f"{what} must be a list of party names")
    return tuple(_wire_str(v, f"a party name in {what}") for v in value)


def _wire_map(value: Any, what: str, parse: Callable[[Any, str], Any]) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ProtocolError(f"{what} must be a mapping")
    return {_wire_str(k, f"a key of {what}"): parse(v, f"{what}[{k!r}]") for k, v in value.items()}


def _wire_share(value: Any, what: str) -> Share:
    return Share.from_bytes(_wire_bytes(value, what, SHARE_BYTES))


def _session_to_wire(c: sa.SecAggConfig) -> dict:
    return {"session_id": c.session_id, "parties": list(c.parties), "threshold": c.threshold}


def _session_from_wire(m: Any, key_agreement: str, frac_bits: int) -> sa.SecAggConfig:
    """The session the active party proposes; one that breaks the rules (t <= n/2) is refused."""
    kind = "session"
    session_id = _wire_bytes(_wire_field(m, "session_id", kind), "session_id")
    parties = _wire_names(_wire_field(m, "parties", kind), "parties")
    threshold = _wire_int(_wire_field(m, "threshold", kind), "threshold", 0, 0xFFFF)
    try:
        return sa.SecAggConfig(session_id=session_id, parties=parties, threshold=threshold,
                               key_agreement=key_agreement, frac_bits=frac_bits)
    except ConfigError as exc:
        raise ProtocolError(f"the active party proposed an invalid session: {exc}") from None


def _advert_to_wire(a: sa.KeyAdvert) -> dict:
    return {"party": a.party, "channel_public": a.channel_public}


def _advert_from_wire(m: Any) -> sa.KeyAdvert:
    return sa.KeyAdvert(_wire_str(_wire_field(m, "party", "key advert"), "party"),
                        _wire_bytes(_wire_field(m, "channel_public", "key advert"), "channel_public"))


def _directory_from_wire(m: Any) -> sa.KeyDirectory:
    return sa.KeyDirectory(_wire_map(m, "key directory", _wire_bytes))


def _setup_to_wire(s: sa.RoundSetup) -> dict:
    return {"party": s.party, "round": s.round_index, "mask_public": s.mask_public,
            "shares": dict(s.encrypted_shares), "seed_commitment": s.seed_commitment,
            "key_commitment": s.key_commitment}


def _setup_from_wire(m: Any) -> sa.RoundSetup:
    kind = "round setup"
    return sa.RoundSetup(
        _wire_str(_wire_field(m, "party", kind), "party"),
        _wire_int(_wire_field(m, "round", kind), "round"),
        _wire_bytes(_wire_field(m, "mask_public", kind), "mask_public"),
        _wire_map(_wire_field(m, "shares", kind), "shares", _wire_bytes),
        _wire_bytes(_wire_field(m, "seed_commitment", kind), "seed_commitment", sa.COMMITMENT_BYTES),
        _wire_bytes(_wire_field(m, "key_commitment", kind), "key_commitment", sa.COMMITMENT_BYTES),
    )


def _bundle_to_wire(b: sa.SetupBundle) -> dict:
    return {"round": b.round_index, "mask_publics": dict(b.mask_publics),
            "shares": dict(b.encrypted_shares)}


def _bundle_from_wire(m: Any) -> sa.SetupBundle:
    kind = "setup bundle"
    return sa.SetupBundle(_wire_int(_wire_field(m, "round", kind), "round"),
                          _wire_map(_wire_field(m, "mask_publics", kind), "mask_publics", _wire_bytes),
                          _wire_map(_wire_field(m, "shares", kind), "shares", _wire_bytes))


def _input_to_wire(x: sa.MaskedInput) -> dict:
    return {"party": x.party, "round": x.round_index, "masked": x.masked,
            "next": None if x.next_setup is None else _setup_to_wire(x.next_setup)}


def _input_from_wire(m: Any) -> sa.MaskedInput:
    kind = "masked input"
    masked = _wire_field(m, "masked", kind)
    if not isinstance(masked, np.ndarray) or masked.dtype != np.uint64:
        raise ProtocolError("masked input must be a uint64 array")
    nxt = _wire_field(m, "next", kind)
    return sa.MaskedInput(_wire_str(_wire_field(m, "party", kind), "party"),
                          _wire_int(_wire_field(m, "round", kind), "round"), masked,
                          None if nxt is None else _setup_from_wire(nxt))


def _request_to_wire(q: sa.UnmaskRequest, next_bundle: dict | None) -> dict:
    return {"round": q.round_index, "survivors": list(q.survivors), "dropped": list(q.dropped),
            "next_bundle": next_bundle}


def _request_from_wire(m: Any) -> tuple[sa.UnmaskRequest, sa.SetupBundle | None]:
    """The unmask request and the next round's setup bundle riding on it (if any)."""
    kind = "unmask request"
    request = sa.UnmaskRequest(_wire_int(_wire_field(m, "round", kind), "round"),
                               _wire_names(_wire_field(m, "survivors", kind), "survivors"),
                               _wire_names(_wire_field(m, "dropped", kind), "dropped"))
    nxt = _wire_field(m, "next_bundle", kind)
    return request, None if nxt is None else _bundle_from_wire(nxt)


def _response_to_wire(r: sa.UnmaskResponse) -> dict:
    return {"party": r.party, "round": r.round_index,
            "self_seed_shares": {k: s.to_bytes() for k, s in r.self_seed_shares.items()},
            "key_shares": {k: s.to_bytes() for k, s in r.key_shares.items()}}


def _response_from_wire(m: Any) -> sa.UnmaskResponse:
    kind = "unmask response"
    return sa.UnmaskResponse(
        _wire_str(_wire_field(m, "party", kind), "party"),
        _wire_int(_wire_field(m, "round", kind), "round"),
        _wire_map(_wire_field(m, "self_seed_shares", kind), "self_seed_shares", _wire_share),
        _wire_map(_wire_field(m, "key_shares", kind), "key_shares", _wire_share))


class _DHPassive(PassiveAggregator):
    def __init__(self, config: AggregationConfig) -> None:
        self.config = config
        self.state: sa.PassiveSecAggState | None = None
        self.round = 0

    def setup(self, ctx: PartyContext) -> None:
        sconfig = _session_from_wire(ctx.recv(ctx.active, "agg.dh.session"),
                                     self.config.key_agreement, self.config.frac_bits)
        with ctx.meter.crypto("secagg.keygen"):
            self.state = sa.PassiveSecAggState.create(sconfig, ctx.name, self.config.urandom)
            advert = sa.advertise_keys(self.state)
        ctx.send(ctx.active, "agg.dh.advert", _advert_to_wire(advert))
        directory = _directory_from_wire(ctx.recv(ctx.active, "agg.dh.directory"))
        with ctx.meter.crypto("secagg.key_agreement"):
            self.state = sa.receive_keys(self.state, directory)
        with ctx.meter.crypto("secagg.share_keys"):
            self.state, setup = sa.share_keys(self.state, 0)
        ctx.send(ctx.active, "agg.dh.setup", _setup_to_wire(setup))
        self._receive_bundle(ctx)

    def _receive_bundle(self, ctx: PartyContext, bundle: sa.SetupBundle | None = None) -> None:
        if bundle is None:
            bundle = _bundle_from_wire(ctx.recv(ctx.active, "agg.dh.bundle"))
        with ctx.meter.crypto("secagg.receive_setup"):
            self.state = sa.receive_setup(self.state, bundle)

    def contribute(self, ctx: PartyContext, values: np.ndarray) -> None:
        if self.state is None:
            raise ProtocolError("contribute before setup")
        with ctx.meter.crypto("secagg.mask"):  # fixed-point encode, self + pairwise masks, next setup
            self.state, message = sa.masked_input(self.state, np.asarray(values), self.round)
        ctx.send(ctx.active, "agg.dh.input", _input_to_wire(message))
        # The unmask request of this round carries next round's setup bundle (one hop saved).
        request, next_bundle = _request_from_wire(ctx.recv(ctx.active, "agg.dh.request"))
        if next_bundle is None:
            raise ProtocolError("the unmask request lacks next round's setup bundle")
        with ctx.meter.crypto("secagg.unmask_response"):
            self.state, response = sa.unmask_response(self.state, request)
        ctx.send(ctx.active, "agg.dh.response", _response_to_wire(response))
        self._receive_bundle(ctx, next_bundle)
        self.round += 1

    def drop(self, ctx: PartyContext) -> None:
        # Vanish before sending this round's input; rejoin next round with fresh keys.
        if self.state is None:
            raise ProtocolError("drop before setup")
        with ctx.meter.crypto("secagg.share_keys"):
            self.state, setup = sa.share_keys(self.state, self.round + 1)
        ctx.send(ctx.active, "agg.dh.rejoin", _setup_to_wire(setup))
        self._receive_bundle(ctx)
        self.round += 1


class _DHActive(ActiveAggregator):
    def __init__(self, config: AggregationConfig) -> None:
        super().__init__()
        self.config = config
        self.agg: sa.AggregatorSecAggState | None = None
        self.round = 0

    def setup(self, ctx: PartyContext, parties: Sequence[str]) -> None:
        parties = tuple(sorted(parties))
        threshold = self.config.threshold or sa.default_threshold(len(parties))
        sconfig = sa.SecAggConfig(
            session_id=self.config.draw(SESSION_ID_BYTES), parties=parties, threshold=threshold,
            key_agreement=self.config.key_agreement, frac_bits=self.config.frac_bits)
        self.parties = parties
        self.agg = sa.AggregatorSecAggState.create(sconfig)
        ctx.broadcast(parties, "agg.dh.session", _session_to_wire(sconfig))
        adverts = [_advert_from_wire(_expect(ctx.recv(p, "agg.dh.advert"), p, "key advert"))
                   for p in parties]
        with ctx.meter.crypto("secagg.relay"):
            self.agg, directory = sa.collect_adverts(self.agg, adverts)
        ctx.broadcast(parties, "agg.dh.directory", dict(directory.channel_publics))
        setups = [self._recv_setup(ctx, p, "agg.dh.setup") for p in parties]
        self._route_setups(ctx, setups)

    def _recv_setup(self, ctx: PartyContext, src: str, tag: str) -> sa.RoundSetup:
        setup = _setup_from_wire(_expect(ctx.recv(src, tag), src, "round setup"))
        if setup.party != src:
            raise ProtocolError(f"setup from {src} names {setup.party!r}")
        return setup

    def _route_setups(self, ctx: PartyContext, setups: Sequence[sa.RoundSetup],
                      skip: Collection[str] = ()) -> dict[str, dict]:
        """Route a round's setups; send bundles except to ``skip`` (returned for piggybacking)."""
        with ctx.meter.crypto("secagg.relay"):
            self.agg, bundles = sa.collect_setups(self.agg, setups)
        wires = {p: _bundle_to_wire(b) for p, b in bundles.items()}
        for p, wire in wires.items():
            if p not in skip:
                ctx.send(p, "agg.dh.bundle", wire)
        return wires

    def aggregate(self, ctx: PartyContext, dropped: Collection[str] = ()) -> AggregateResult:
        if self.agg is None:
            raise ProtocolError("aggregate before setup")
        r = self.round
        participants = tuple(sorted(self.agg.round_publics[r]))
        gone = set(dropped)
        alive = tuple(p for p in participants if p not in gone)
        inputs = []
        for p in alive:
            message = _input_from_wire(_expect(ctx.recv(p, "agg.dh.input"), p, "masked input"))
            if message.round_index != r:
                raise ProtocolError(f"masked input of {p} is for round {message.round_index}, not {r}")
            inputs.append(message)
        with ctx.meter.crypto("secagg.unmask"):
            self.agg, request = sa.unmask_request(self.agg, inputs)
        # Next round's setups are all here already (piggybacked on the inputs, plus rejoin
        # setups of this round's dropped parties): route them now, riding on the request.
        next_setups = [m.next_setup for m in inputs if m.next_setup is not None]
        for p in request.dropped:
            if p in gone:
                rejoin = ctx.recv(p, "agg.dh.rejoin")
                setup = _setup_from_wire(_expect(rejoin, p, "rejoin setup"))
                if setup.party != p:
                    raise ProtocolError(f"rejoin setup from {p} names {setup.party!r}")
                self.stats.recovery_bytes += len(codec.encode(rejoin))
                next_setups.append(setup)
        bundles = self._route_setups(ctx, next_setups, skip=request.survivors)
        for p in request.survivors:
            ctx.send(p, "agg.dh.request", _request_to_wire(request, bundles[p]))
        responses = []
        for p in request.survivors:
            wire = _expect(ctx.recv(p, "agg.dh.response"), p, "unmask response")
            response = _response_from_wire(wire)
            if response.party != p:
                raise ProtocolError(f"unmask response from {p} names {response.party!r}")
            if request.dropped:
                self.stats.recovery_bytes += len(codec.encode(wire["key_shares"]))
            responses.append(response)
        with ctx.meter.crypto("secagg.recover" if request.dropped else "secagg.unmask"):
            self.agg, total = sa.aggregate(self.agg, responses)
        self.round += 1
        self.stats.rounds += 1
        self.stats.dropouts += len(request.dropped)
        self.stats.recovered_rounds += bool(request.dropped)
        return AggregateResult(total, request.survivors, request.dropped)


@register_aggregation
class DHAggregation(AggregationScheme):
    """DH blinding factors with per-round keys, double masking and Shamir dropout recovery."""

    name = "dh"
    summary = "DH pairwise masks + self masks, fresh keys per round, Shamir dropout recovery"

    def passive(self) -> PassiveAggregator:
        return _DHPassive(self.config)

    def active(self) -> ActiveAggregator:
        return _DHActive(self.config)

    def _threshold(self, n_passives: int) -> int:
        return self.config.threshold or sa.default_threshold(n_passives)

    def max_dropouts(self, n_passives: int) -> int:
        return max(n_passives - self._threshold(n_passives), 0)

    def validate(self, n_passives: int) -> None:
        if n_passives < 2:
            raise ConfigError("secure aggregation needs at least 2 passive parties "
                              f"(got {n_passives}); with one the sum is its vector — use secagg=none")
        sa.validate_threshold(self._threshold(n_passives), n_passives)


# ============================================================================ pairwise (paper Eq. 4-6)


class _PairwisePassive(PassiveAggregator):
    def __init__(self, config: AggregationConfig) -> None:
        self.config = config
        self.seeds: dict[str, bytes] | None = None
        self.round = 0

    def setup(self, ctx: PartyContext) -> None:
        session = ctx.recv(ctx.active, "agg.pw.session")
        agreement = create_key_agreement(self.config.key_agreement)
        with ctx.meter.crypto("secagg.keygen"):
            keys = agreement.generate(self.config.urandom)
        ctx.send(ctx.active, "agg.pw.public", keys.public.to_bytes())
        directory = ctx.recv(ctx.active, "agg.pw.directory")
        self.n_parties = len(directory)
        with ctx.meter.crypto("secagg.key_agreement"):
            peers = {str(p): PublicKey.from_bytes(bytes(b)) for p, b in directory.items()
                     if p != ctx.name}
            if any(k.scheme != self.config.key_agreement for k in peers.values()):
                raise ProtocolError("public key of the wrong scheme")
            self.seeds = derive_pairwise_seeds(agreement, ctx.name, keys, peers,
                                               bytes(session["session_id"]))

    def contribute(self, ctx: PartyContext, values: np.ndarray) -> None:
        if self.seeds is None:
            raise ProtocolError("contribute before setup")
        with ctx.meter.crypto("secagg.mask"):
            masked = mask_values(np.asarray(values), ctx.name, self.seeds, self.round,
                                 frac_bits=self.config.frac_bits, n_terms=self.n_parties)
        ctx.send(ctx.active, "agg.pw.input", masked)
        self.round += 1


class _PairwiseActive(ActiveAggregator):
    def __init__(self, config: AggregationConfig) -> None:
        super().__init__()
        self.config = config

    def setup(self, ctx: PartyContext, parties: Sequence[str]) -> None:
        self.parties = tuple(sorted(parties))
        ctx.broadcast(self.parties, "agg.pw.session",
                      {"session_id": self.config.draw(SESSION_ID_BYTES)})
        publics = {p: bytes(ctx.recv(p, "agg.pw.public")) for p in self.parties}
        ctx.broadcast(self.parties, "agg.pw.directory", publics)

    def aggregate(self, ctx: PartyContext, dropped: Collection[str] = ()) -> AggregateResult:
        if dropped:
            raise ConfigError("the pairwise scheme has no dropout recovery; use secagg=dh")
        masked = []
        for p in self.parties:
            value = ctx.recv(p, "agg.pw.input")
            if not isinstance(value, np.ndarray) or value.dtype != np.uint64:
                raise ProtocolError("masked input must be a uint64 array")
            masked.append(value)
        with ctx.meter.crypto("secagg.unmask"):
            total = unmask_sum(masked, self.config.frac_bits)
        self.stats.rounds += 1
        return AggregateResult(total, self.parties, ())


@register_aggregation
class PairwiseAggregation(AggregationScheme):
    """EASTER Eq. 4-6 as written: session keys, per-batch PRG masks, no dropout recovery."""

    name = "pairwise"
    summary = "paper's blinding factors: session DH keys, per-batch masks, no dropout recovery"

    def passive(self) -> PassiveAggregator:
        return _PairwisePassive(self.config)

    def active(self) -> ActiveAggregator:
        return _PairwiseActive(self.config)

    def validate(self, n_passives: int) -> None:
        if n_passives < 2:
            raise ConfigError("secure aggregation needs at least 2 passive parties "
                              f"(got {n_passives}); use secagg=none")


__all__ = [
    "ActiveAggregator",
    "AggregateResult",
    "AggregationConfig",
    "AggregationScheme",
    "AggregationStats",
    "DHAggregation",
    "PairwiseAggregation",
    "PassiveAggregator",
    "PlainAggregation",
    "aggregation_names",
    "create_aggregation",
    "register_aggregation",
    "resolve_key_agreement",
]
from securevfl.privacy import paillier_aggregation as _paillier_aggregation  # noqa: E402,F401 (registers "paillier")

"""``dh``: double-masked secure aggregation with dropout recovery, over a party's channel.

Runs the pure core of :mod:`securevfl.privacy.secagg` (mask keys once per session by default, or
fresh every round with ``rekey_every=1``; a fresh self-mask seed every round, Shamir-shared and
committed) with the active party as the relay. Messages travel in
the wire format of :mod:`securevfl.privacy.secagg.wire`, and every received one is parsed (and its
sender checked) before use. Per round: each survivor sends its masked input with next round's
setup riding on it; the active party answers with the unmask request, which carries next
round's setup bundle; the survivors return their shares. A dropped party sends a rejoin setup
instead and takes part again from the next round.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from securevfl.errors import ProtocolError
from securevfl.federation import codec
from securevfl.privacy import secagg as sa
from securevfl.privacy.aggregation.base import (
    SESSION_ID_BYTES,
    ActiveAggregator,
    AggregateResult,
    AggregationConfig,
    AggregationScheme,
    PassiveAggregator,
    require_passives,
    require_ring_range,
)
from securevfl.privacy.aggregation.registry import register_aggregation
from securevfl.privacy.primitives.buffers import Workspace
from securevfl.privacy.secagg import wire
from securevfl.settings import setting

if TYPE_CHECKING:
    from securevfl.federation.runtime import PartyContext

TAG_SESSION = "agg.dh.session"
TAG_ADVERT = "agg.dh.advert"
TAG_DIRECTORY = "agg.dh.directory"
TAG_SETUP = "agg.dh.setup"
TAG_BUNDLE = "agg.dh.bundle"
TAG_INPUT = "agg.dh.input"
TAG_REQUEST = "agg.dh.request"
TAG_RESPONSE = "agg.dh.response"
TAG_REJOIN = "agg.dh.rejoin"


@dataclass(frozen=True)
class DHOptions:
    """Options of the ``dh`` scheme (beyond the shared :class:`AggregationConfig`).

    ``rekey_every``: rounds per mask key pair. 0 (default): keys agreed once per session (a training
    run, a scoring run, a serving session), each round's pairwise seeds derived from them; k > 1: a
    new key pair every k rounds; 1: fresh keys Shamir-shared every round (the protocol before issue
    47, message for message). In every mode a party that answered for a dropped party re-keys.
    """

    rekey_every: int = setting(
        0, help="Rounds per mask key pair: 0 once per session (default), k every k rounds, 1 fresh keys every round.")

    def __post_init__(self) -> None:
        sa.validate_rekey_every(self.rekey_every)


class DHPassive(PassiveAggregator):
    """A passive party: keys once per session, then per round mask, answer, set up the next.

    Work that does not depend on the input is done as soon as a round is set up, at the end of
    the previous round (while the active party unmasks and the models compute), not when the
    input is ready: the round's mask is expanded (:func:`~securevfl.privacy.secagg.round_mask`,
    sized like the usual input) and the next round's setup (fresh key pair, shares) is drawn.
    Each prepared setup is bound to one round and sent once: with the masked input, or as the
    rejoin setup after a drop.
    """

    def __init__(self, config: AggregationConfig, options: DHOptions | None = None) -> None:
        self.config = config
        self.options = options or DHOptions()
        self._state: sa.PassiveSecAggState | None = None
        self.round = 0
        self._mask: sa.RoundMask | None = None
        self._next_setup: sa.RoundSetup | None = None
        self._size = 0  # flat size of the usual input, to expand masks ahead
        self._last_size = 0
        self._workspace = Workspace()  # the same mask and encoding memory every round

    @property
    def state(self) -> sa.PassiveSecAggState:
        if self._state is None:
            raise ProtocolError("secure aggregation used before setup")
        return self._state

    def setup(self, ctx: PartyContext) -> None:
        sconfig = wire.parse_session(ctx.recv(ctx.active, TAG_SESSION), self.config.key_agreement,
                                     self.config.frac_bits, self.config.ring_bits)
        if sconfig.rekey_every != self.options.rekey_every:
            raise ProtocolError(f"the active party proposed rekey_every={sconfig.rekey_every}; this party's "
                                f"options say {self.options.rekey_every} (every party must run one plan)")
        with ctx.meter.crypto("secagg.keygen"):
            self._state = sa.PassiveSecAggState.create(sconfig, ctx.name, self.config.urandom)
            advert = sa.advertise_keys(self._state)
        ctx.send(ctx.active, TAG_ADVERT, wire.advert_to_wire(advert))
        directory = wire.parse_directory(ctx.recv(ctx.active, TAG_DIRECTORY))
        with ctx.meter.crypto("secagg.key_agreement"):
            self._state = sa.receive_keys(self.state, directory)
        with ctx.meter.crypto("secagg.share_keys"):
            self._state, setup = sa.share_keys(self.state, 0)
        ctx.send(ctx.active, TAG_SETUP, wire.setup_to_wire(setup))
        self._receive_bundle(ctx)

    def _receive_bundle(self, ctx: PartyContext, bundle: sa.SetupBundle | None = None) -> None:
        if bundle is None:
            bundle = wire.parse_bundle(ctx.recv(ctx.active, TAG_BUNDLE))
        with ctx.meter.crypto("secagg.receive_setup"):
            self._state = sa.receive_setup(self.state, bundle)
        self._prepare(ctx, bundle.round_index)

    def _prepare(self, ctx: PartyContext, r: int) -> None:
        """Round r is set up: expand its mask and draw round r + 1's setup before the input comes."""
        self._mask = None
        if self._size:
            with ctx.meter.crypto("secagg.mask_expand"):
                self._mask = sa.round_mask(self.state, r, self._size, self._workspace.take("mask", self._size))
        with ctx.meter.crypto("secagg.share_keys"):
            self._state, self._next_setup = sa.share_keys(self.state, r + 1)

    def _take_next_setup(self) -> sa.RoundSetup | None:
        """The prepared setup of the round after this one, handed out once."""
        setup, self._next_setup = self._next_setup, None
        return setup if setup is not None and setup.round_index == self.round + 1 else None

    def _note_size(self, size: int) -> None:
        # Expand ahead for the size seen twice in a row (the training batch), not for the odd
        # evaluation or last batch: a shorter mask is extended when used, a longer one wasted.
        if size == self._last_size or not self._size:
            self._size = size
        self._last_size = size

    def contribute(self, ctx: PartyContext, values: np.ndarray) -> None:
        state = self.state
        values = np.asarray(values)
        mask, self._mask = self._mask, None
        with ctx.meter.crypto("secagg.mask"):  # fixed-point encode + the mask expanded ahead
            self._state, message = sa.masked_input(
                state, values, self.round,
                mask=mask if mask is not None and mask.round_index == self.round else None,
                next_setup=self._take_next_setup(), workspace=self._workspace)
        self._note_size(values.size)
        ctx.send(ctx.active, TAG_INPUT, wire.input_to_wire(message))
        # The unmask request of this round carries next round's setup bundle (one hop saved).
        request, next_bundle = wire.parse_request(ctx.recv(ctx.active, TAG_REQUEST))
        if next_bundle is None:
            raise ProtocolError("the unmask request lacks next round's setup bundle")
        with ctx.meter.crypto("secagg.unmask_response"):
            self._state, response = sa.unmask_response(self.state, request)
        ctx.send(ctx.active, TAG_RESPONSE, wire.response_to_wire(response))
        self._receive_bundle(ctx, next_bundle)
        self.round += 1

    def drop(self, ctx: PartyContext) -> None:
        # Vanish before sending this round's input; rejoin next round with fresh keys.
        self._mask = None
        setup = self._take_next_setup()
        if setup is None:
            with ctx.meter.crypto("secagg.share_keys"):
                self._state, setup = sa.share_keys(self.state, self.round + 1)
        ctx.send(ctx.active, TAG_REJOIN, wire.setup_to_wire(setup))
        self._receive_bundle(ctx)
        self.round += 1


class DHActive(ActiveAggregator):
    """The active party: relays keys and shares, closes each round and unmasks only the sum."""

    def __init__(self, config: AggregationConfig, options: DHOptions | None = None) -> None:
        super().__init__()
        self.config = config
        self.options = options or DHOptions()
        self._agg: sa.AggregatorSecAggState | None = None
        self.parties: tuple[str, ...] = ()
        self.round = 0
        self._workspace = Workspace()  # the same running-sum memory every round

    @property
    def agg(self) -> sa.AggregatorSecAggState:
        if self._agg is None:
            raise ProtocolError("aggregate before setup")
        return self._agg

    def setup(self, ctx: PartyContext, parties: Sequence[str]) -> None:
        self.parties = tuple(sorted(parties))
        threshold = self.config.threshold or sa.default_threshold(len(self.parties))
        sconfig = sa.SecAggConfig(
            session_id=self.config.draw(SESSION_ID_BYTES), parties=self.parties, threshold=threshold,
            key_agreement=self.config.key_agreement, frac_bits=self.config.frac_bits,
            ring_bits=self.config.ring_bits, rekey_every=self.options.rekey_every)
        self._agg = sa.AggregatorSecAggState.create(sconfig)
        ctx.broadcast(self.parties, TAG_SESSION, wire.session_to_wire(sconfig))
        adverts = [wire.parse_advert(ctx.recv(p, TAG_ADVERT), p) for p in self.parties]
        with ctx.meter.crypto("secagg.relay"):
            self._agg, directory = sa.collect_adverts(self.agg, adverts)
        ctx.broadcast(self.parties, TAG_DIRECTORY, wire.directory_to_wire(directory))
        setups = [wire.parse_setup(ctx.recv(p, TAG_SETUP), p) for p in self.parties]
        self._route_setups(ctx, setups)

    def _route_setups(self, ctx: PartyContext, setups: Sequence[sa.RoundSetup],
                      skip: Collection[str] = ()) -> dict[str, dict[str, Any]]:
        """Route a round's setups; send bundles except to ``skip`` (returned for piggybacking)."""
        with ctx.meter.crypto("secagg.relay"):
            self._agg, bundles = sa.collect_setups(self.agg, setups)
        wires = {p: wire.bundle_to_wire(b) for p, b in bundles.items()}
        for p, message in wires.items():
            if p not in skip:
                ctx.send(p, TAG_BUNDLE, message)
        return wires

    def aggregate(self, ctx: PartyContext, dropped: Collection[str] = ()) -> AggregateResult:
        r = self.round
        publics = self.agg.round_publics.get(r)
        if publics is None:
            raise ProtocolError(f"round {r} was never set up")
        participants = tuple(sorted(publics))
        gone = set(dropped)
        alive = tuple(p for p in participants if p not in gone)
        inputs = []
        for p in alive:
            message = wire.parse_input(ctx.recv(p, TAG_INPUT), p)
            if message.round_index != r:
                raise ProtocolError(f"masked input of {p} is for round {message.round_index}, not {r}")
            inputs.append(message)
        with ctx.meter.crypto("secagg.unmask"):
            self._agg, request = sa.unmask_request(self.agg, inputs)
        # Next round's setups are all here already (piggybacked on the inputs, plus rejoin
        # setups of this round's dropped parties): route them now, riding on the request.
        next_setups = []
        for m in inputs:
            if m.next_setup is None:  # else the survivor would have no bundle to ride on the request
                raise ProtocolError(f"the masked input of {m.party} lacks next round's setup")
            next_setups.append(m.next_setup)
        for p in request.dropped:
            if p in gone:
                rejoin = ctx.recv(p, TAG_REJOIN)
                next_setups.append(wire.parse_setup(rejoin, p))
                self.stats.recovery_bytes += len(codec.encode(rejoin))
        bundles = self._route_setups(ctx, next_setups, skip=request.survivors)
        for p in request.survivors:
            ctx.send(p, TAG_REQUEST, wire.request_to_wire(request, bundles[p]))
        responses = []
        for p in request.survivors:
            message = ctx.recv(p, TAG_RESPONSE)
            responses.append(wire.parse_response(message, p))
            if request.dropped:  # the key shares of the dropped parties: parsed above, so present
                self.stats.recovery_bytes += len(codec.encode(message[wire.K_KEY_SHARES]))
        with ctx.meter.crypto("secagg.recover" if request.dropped else "secagg.unmask"):
            self._agg, total = sa.aggregate(self.agg, responses, self._workspace)
        self.round += 1
        self.stats.rounds += 1
        self.stats.dropouts += len(request.dropped)
        self.stats.recovered_rounds += bool(request.dropped)
        return AggregateResult(total, request.survivors, request.dropped)


@register_aggregation
class DHAggregation(AggregationScheme[DHOptions]):
    """DH blinding factors with session (or per-round) keys, double masking and dropout recovery."""

    name = "dh"
    summary = "DH pairwise masks + self masks, keys once per session (rekey_every), dropout recovery"
    uses_ring = True
    Options = DHOptions
    Passive = DHPassive
    Active = DHActive

    def passive(self) -> PassiveAggregator:
        return DHPassive(self.config, self.options)

    def active(self) -> ActiveAggregator:
        return DHActive(self.config, self.options)

    def _threshold(self, n_passives: int) -> int:
        return self.config.threshold or sa.default_threshold(n_passives)

    def max_dropouts(self, n_passives: int) -> int:
        return max(n_passives - self._threshold(n_passives), 0)

    def validate(self, n_passives: int) -> None:
        require_passives(n_passives)
        require_ring_range(self.config, n_passives)
        sa.validate_threshold(self._threshold(n_passives), n_passives)


__all__ = ["DHActive", "DHAggregation", "DHOptions", "DHPassive", "TAG_INPUT"]

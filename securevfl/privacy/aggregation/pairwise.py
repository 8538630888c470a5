"""``pairwise``: EASTER's blinding factors exactly as Eq. 4-6, without dropout recovery.

Once per session every passive party draws a key pair; the active party relays the public
keys. Each pair derives a seed s_ij, and per round (batch) a party adds its pairwise mask
(:func:`~securevfl.privacy.primitives.masking.mask_values`, the one sign rule) to its encoded
vector; the masks cancel in the active party's sum. A dropped party would leave its masks in
the sum, so dropouts are refused.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

import numpy as np

from securevfl.errors import ConfigError, CryptoError, ProtocolError
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
from securevfl.privacy.aggregation.options import NoOptions
from securevfl.privacy.aggregation.registry import register_aggregation
from securevfl.privacy.primitives import wire
from securevfl.privacy.primitives.key_agreement import create_key_agreement
from securevfl.privacy.primitives.masking import derive_pairwise_seeds, mask_values, unmask_sum

if TYPE_CHECKING:
    from securevfl.federation.runtime import PartyContext

TAG_SESSION = "agg.pw.session"
TAG_PUBLIC = "agg.pw.public"
TAG_DIRECTORY = "agg.pw.directory"
TAG_INPUT = "agg.pw.input"
K_SESSION_ID = "session_id"


class PairwisePassive(PassiveAggregator):
    """A passive party: one key agreement per session, then a fresh mask every round."""

    def __init__(self, config: AggregationConfig) -> None:
        self.config = config
        self.seeds: dict[str, bytes] | None = None
        self.n_parties = 0
        self.round = 0

    def setup(self, ctx: PartyContext) -> None:
        session = ctx.recv(ctx.active, TAG_SESSION)
        session_id = wire.blob(wire.field(session, K_SESSION_ID, "pairwise session"), K_SESSION_ID, SESSION_ID_BYTES)
        agreement = create_key_agreement(self.config.key_agreement)
        with ctx.meter.crypto("secagg.keygen"):
            keys = agreement.generate(self.config.urandom)
        ctx.send(ctx.active, TAG_PUBLIC, keys.public.to_bytes())
        directory = wire.str_map(ctx.recv(ctx.active, TAG_DIRECTORY), "pairwise key directory", wire.blob)
        if directory.get(ctx.name) != keys.public.to_bytes():
            raise ProtocolError("the pairwise key directory carries a wrong key for this party")
        self.n_parties = len(directory)
        with ctx.meter.crypto("secagg.key_agreement"):
            peers = {p: wire.public_key(b, self.config.key_agreement, f"public key of {p!r}")
                     for p, b in directory.items() if p != ctx.name}
            try:
                self.seeds = derive_pairwise_seeds(agreement, ctx.name, keys, peers, session_id, validate=False)
            except CryptoError as exc:  # e.g. a low-order X25519 key
                raise wire.PeerCryptoError("key agreement with a peer's public key failed") from exc

    def contribute(self, ctx: PartyContext, values: np.ndarray) -> None:
        if self.seeds is None:
            raise ProtocolError("contribute before setup")
        with ctx.meter.crypto("secagg.mask"):
            masked = mask_values(np.asarray(values), ctx.name, self.seeds, self.round,
                                 frac_bits=self.config.frac_bits, n_terms=self.n_parties,
                                 ring_bits=self.config.ring_bits)
        ctx.send(ctx.active, TAG_INPUT, masked)
        self.round += 1


class PairwiseActive(ActiveAggregator):
    """The active party: relays the public keys, then adds the masked vectors and decodes."""

    def __init__(self, config: AggregationConfig) -> None:
        super().__init__()
        self.config = config
        self.parties: tuple[str, ...] = ()

    def setup(self, ctx: PartyContext, parties: Sequence[str]) -> None:
        self.parties = tuple(sorted(parties))
        ctx.broadcast(self.parties, TAG_SESSION, {K_SESSION_ID: self.config.draw(SESSION_ID_BYTES)})
        publics = {p: wire.public_key(ctx.recv(p, TAG_PUBLIC), self.config.key_agreement, f"public key of {p}",
                                      validate=False).to_bytes()
                   for p in self.parties}
        ctx.broadcast(self.parties, TAG_DIRECTORY, publics)

    def aggregate(self, ctx: PartyContext, dropped: Collection[str] = ()) -> AggregateResult:
        if dropped:
            raise ConfigError("the pairwise scheme has no dropout recovery; use secagg=dh")
        masked: list[np.ndarray] = []
        for p in self.parties:
            value = wire.ring_array(ctx.recv(p, TAG_INPUT), f"masked input from {p}", self.config.ring_bits)
            if masked and value.shape != masked[0].shape:
                raise ProtocolError(f"masked input from {p} has shape {value.shape}, expected {masked[0].shape}")
            masked.append(value)
        with ctx.meter.crypto("secagg.unmask"):
            total = unmask_sum(masked, self.config.frac_bits, self.config.ring_bits)
        self.stats.rounds += 1
        return AggregateResult(total, self.parties, ())


@register_aggregation
class PairwiseAggregation(AggregationScheme[NoOptions]):
    """EASTER Eq. 4-6 as written: session keys, per-batch PRG masks, no dropout recovery."""

    name = "pairwise"
    summary = "paper's blinding factors: session DH keys, per-batch masks, no dropout recovery"
    uses_ring = True
    Passive = PairwisePassive
    Active = PairwiseActive

    def validate(self, n_passives: int) -> None:
        require_passives(n_passives)
        require_ring_range(self.config, n_passives)


__all__ = ["PairwiseActive", "PairwiseAggregation", "PairwisePassive"]

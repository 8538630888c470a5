"""``none``: the plaintext sum; every passive party sends its vector (the baseline, no protection)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

import numpy as np

from securevfl.errors import ProtocolError
from securevfl.privacy.aggregation.base import (
    ActiveAggregator,
    AggregateResult,
    AggregationScheme,
    PassiveAggregator,
)
from securevfl.privacy.aggregation.options import NoOptions
from securevfl.privacy.aggregation.registry import register_aggregation
from securevfl.privacy.primitives import wire
from securevfl.privacy.secagg.config import InsufficientSurvivorsError

if TYPE_CHECKING:
    from securevfl.federation.runtime import PartyContext

TAG_INPUT = "agg.plain"


class PlainPassive(PassiveAggregator):
    """Sends its vector as float32."""

    def setup(self, ctx: PartyContext) -> None:
        return None

    def contribute(self, ctx: PartyContext, values: np.ndarray) -> None:
        ctx.send(ctx.active, TAG_INPUT, np.asarray(values, dtype=np.float32))

    def drop(self, ctx: PartyContext) -> None:
        return None


class PlainActive(ActiveAggregator):
    """Sums the survivors' vectors in float64 (all of one shape, else ProtocolError)."""

    def __init__(self) -> None:
        super().__init__()
        self.parties: tuple[str, ...] = ()

    def setup(self, ctx: PartyContext, parties: Sequence[str]) -> None:
        self.parties = tuple(parties)

    def aggregate(self, ctx: PartyContext, dropped: Collection[str] = ()) -> AggregateResult:
        gone = set(dropped)
        alive = tuple(p for p in self.parties if p not in gone)
        if not alive:
            raise InsufficientSurvivorsError("every passive party dropped")
        total: np.ndarray | None = None
        for p in alive:
            value = wire.real_array(ctx.recv(p, TAG_INPUT), f"plaintext input from {p}")
            if total is not None and value.shape != total.shape:
                raise ProtocolError(f"plaintext input from {p} has shape {value.shape}, expected {total.shape}")
            total = value if total is None else total + value
        assert total is not None  # alive is non-empty
        self.stats.rounds += 1
        self.stats.dropouts += len(self.parties) - len(alive)
        return AggregateResult(total, alive, tuple(p for p in self.parties if p not in alive))


@register_aggregation
class PlainAggregation(AggregationScheme[NoOptions]):
    """No protection: the active party sees every passive vector (baseline)."""

    name = "none"
    summary = "plaintext sum (the active party sees every passive vector)"

    def passive(self) -> PassiveAggregator:
        return PlainPassive()

    def active(self) -> ActiveAggregator:
        return PlainActive()

    def max_dropouts(self, n_passives: int) -> int:
        return max(n_passives - 1, 0)


__all__ = ["PlainAggregation"]

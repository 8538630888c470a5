"""What an attacking party sees: a tap on its own channel, and nothing else.

:func:`tapped` wraps one party's role so that every message the party *receives* is recorded, as
decoded by its own channel, in arrival order — the messages the party legitimately has — and
whatever the method reports through ``ctx.observe`` (what the party computes from them, such as the
aggregate a secure-aggregation round reveals to it, or its own contribution; ``src`` is then the
party itself). The tap sits on the party's channel, so it sees exactly what the method delivers to
that party (with a privacy option in force, the masked or encrypted values), never another party's
messages or data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from securevfl.federation.runtime import PartyContext
from securevfl.methods.base import Role


@dataclass(frozen=True)
class Observation:
    """One received message: who sent it, under which tag, and its decoded value."""

    src: str
    tag: str
    value: Any


@dataclass
class ChannelTap:
    """The messages one party received during a run, in order."""

    party: str
    observations: list[Observation] = field(default_factory=list)

    def received(self, suffix: str, src: str | None = None) -> list[Any]:
        """Values of the received messages whose tag ends with ``suffix`` (from ``src`` if given)."""
        return [o.value for o in self.observations
                if o.tag.endswith(suffix) and (src is None or o.src == src)]


class _TappedChannel:
    """A party's channel that records what it receives; sending is unchanged."""

    def __init__(self, inner: Any, tap: ChannelTap) -> None:
        self._inner = inner
        self._tap = tap

    def send(self, dst: str, tag: str, value: Any) -> int:
        return int(self._inner.send(dst, tag, value))

    def broadcast(self, dsts: Sequence[str], tag: str, value: Any) -> None:
        self._inner.broadcast(dsts, tag, value)

    def recv(self, src: str, tag: str, timeout: float | None = None) -> Any:
        value = self._inner.recv(src, tag, timeout)
        self._tap.observations.append(Observation(src, tag, value))
        return value


def tapped(role: Role, tap: ChannelTap) -> Role:
    """``role`` with its received messages recorded in ``tap`` (the party must be ``tap.party``)."""

    def run(ctx: PartyContext) -> Any:
        if ctx.name != tap.party:
            raise ValueError(f"the tap of {tap.party} was attached to {ctx.name}")
        ctx.channel = _TappedChannel(ctx.channel, tap)  # type: ignore[assignment]  # same interface
        def observe(kind: str, value: Any) -> None:  # a callable value is computed only here, when tapped
            tap.observations.append(Observation(ctx.name, kind, value() if callable(value) else value))

        ctx.observe = observe
        return role(ctx)

    return run

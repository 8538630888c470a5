"""The party runtime: every party runs its role in its own thread and talks only through a channel.

A role is a callable ``role(ctx: PartyContext) -> result``. The runtime owns the threads, the
transport, one :class:`~securevfl.federation.meter.Meter` per party, shutdown and error
propagation: the first party to raise stops the run (the others get :class:`RunAborted` at their
next receive) and :func:`run_parties` re-raises it as :class:`PartyFailure` with that party's name,
stage and traceback — never a hang.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from securevfl.errors import ConfigError, PartyFailure, ProtocolError, RunAborted
from securevfl.federation import codec
from securevfl.federation.meter import Meter
from securevfl.federation.transport import Envelope, InProcessTransport, Transport

T = TypeVar("T")


class Channel:
    """A party's only way to talk: named, typed messages, encoded by the codec and metered."""

    def __init__(self, party: str, transport: Transport, meter: Meter, abort: threading.Event,
                 recv_timeout: float | None = None) -> None:
        self.party = party
        self._transport = transport
        self._meter = meter
        self._abort = abort
        self._clock = 0  # Lamport depth: the deepest message this party has received
        self._recv_timeout = recv_timeout

    def send(self, dst: str, tag: str, value: Any) -> int:
        """Encode ``value`` and send it to ``dst`` under ``tag``; returns the bytes sent."""
        if self._abort.is_set():
            raise RunAborted(f"{self.party} stopped sending: the run was aborted")
        with self._meter.serialize():
            payload = codec.encode(value)
        depth = self._clock + 1
        self._meter.record_message(self.party, dst, len(payload), depth)
        self._transport.send(Envelope(self.party, dst, tag, depth, payload))
        return len(payload)

    def broadcast(self, dsts: Sequence[str], tag: str, value: Any) -> None:
        """Send the same value to several parties (encoded once, counted once per link)."""
        if self._abort.is_set():
            raise RunAborted(f"{self.party} stopped sending: the run was aborted")
        with self._meter.serialize():
            payload = codec.encode(value)
        depth = self._clock + 1
        for dst in dsts:
            self._meter.record_message(self.party, dst, len(payload), depth)
            self._transport.send(Envelope(self.party, dst, tag, depth, payload))

    def recv(self, src: str, tag: str) -> Any:
        """Receive the next message from ``src``; it must carry ``tag`` (else ProtocolError)."""
        with self._meter.gate_released():
            envelope = self._transport.recv(self.party, src, self._abort, self._recv_timeout)
        if envelope.tag != tag:
            raise ProtocolError(
                f"{self.party} expected {tag!r} from {src} but received {envelope.tag!r}"
            )
        self._clock = max(self._clock, envelope.depth)
        with self._meter.serialize():
            return codec.decode(envelope.payload)


@dataclass
class PartyContext:
    """What a role sees: its name, its peers, its channel and meter, device, seed and progress."""

    name: str
    active: str
    passives: tuple[str, ...]
    channel: Channel
    meter: Meter
    device: Any = "cpu"
    seed: int = 0
    progress: Callable[..., None] = field(default=lambda *a, **k: None)
    stage: str = "setup"

    @property
    def is_active(self) -> bool:
        return self.name == self.active

    def send(self, dst: str, tag: str, value: Any) -> int:
        return self.channel.send(dst, tag, value)

    def recv(self, src: str, tag: str) -> Any:
        return self.channel.recv(src, tag)

    def broadcast(self, dsts: Sequence[str], tag: str, value: Any) -> None:
        self.channel.broadcast(dsts, tag, value)


@dataclass
class RunResult(Generic[T]):
    """Return values of every role and a meter per party."""

    results: dict[str, T]
    meters: dict[str, Meter]


def run_parties(
    roles: Mapping[str, Callable[[PartyContext], T]],
    *,
    active: str,
    transport: Transport | None = None,
    device: Any = "cpu",
    seed: int = 0,
    progress: Callable[..., None] | None = None,
    synchronize: Callable[[], None] | None = None,
    recv_timeout: float | None = None,
    serialize_compute: bool = True,
) -> RunResult[T]:
    """Run one role per party in its own thread and return their results and meters.

    ``serialize_compute`` (default): one party's compute block runs at a time (see
    :meth:`Meter.compute`); crypto and communication still overlap across parties.

    Raises :class:`PartyFailure` for the first party whose role raised (other parties' consequent
    :class:`RunAborted` are not reported as failures).
    """
    names = list(roles)
    if active not in roles:
        raise ConfigError(f"active party {active!r} has no role; roles are {names}")
    transport = transport or InProcessTransport(names)
    abort = threading.Event()
    gate = threading.Lock() if serialize_compute else None
    meters = {n: Meter(n, synchronize=synchronize, compute_gate=gate) for n in names}
    passives = tuple(n for n in names if n != active)
    contexts = {
        n: PartyContext(
            name=n, active=active, passives=passives,
            channel=Channel(n, transport, meters[n], abort, recv_timeout),
            meter=meters[n], device=device, seed=seed,
            progress=(progress if (progress is not None and n == active) else (lambda *a, **k: None)),
        )
        for n in names
    }
    results: dict[str, T] = {}
    failures: list[PartyFailure] = []
    lock = threading.Lock()

    def body(name: str) -> None:
        ctx = contexts[name]
        try:
            value = roles[name](ctx)
            with lock:
                results[name] = value
        except RunAborted:
            pass
        except BaseException as exc:  # noqa: BLE001 - everything must reach the caller
            with lock:
                failures.append(PartyFailure(name, ctx.stage, exc, traceback.format_exc()))
            abort.set()

    threads = [threading.Thread(target=body, args=(n,), name=f"party-{n}", daemon=True) for n in names]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except KeyboardInterrupt:
        abort.set()
        for t in threads:
            t.join(timeout=5)
        raise
    finally:
        transport.close()
    if failures:
        first = failures[0]
        raise first from first.cause
    missing = [n for n in names if n not in results]
    if missing:
        raise PartyFailure(missing[0], "shutdown", RuntimeError("role ended without a result"))
    return RunResult(results=results, meters=meters)

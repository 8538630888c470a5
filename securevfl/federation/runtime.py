"""The party runtime: every party runs its role in its own thread and talks only through a channel.

A role is a callable ``role(ctx: PartyContext) -> result``. The runtime owns the threads, the
transport, one :class:`~securevfl.federation.meter.Meter` per party, shutdown and error
propagation: the first party to raise stops the run (the others get :class:`RunAborted` at their
next receive) and :func:`run_parties` re-raises it as :class:`PartyFailure` with that party's name,
stage and traceback — never a hang.

Never a hang also when nobody raises: a role that returns is marked finished on the transport, so a
peer that still waits for a message from it fails at once with :class:`PeerFinishedError` naming
it; and every receive has a timeout (:data:`DEFAULT_RECV_TIMEOUT_S` unless the caller sets one), so
a peer stuck in a loop is reported too. A malformed frame is a :class:`ProtocolError` naming the
sender and the tag, raised in the receiving party, never a crash of the process.

Who is who: one role is the active party; the scenario's *passive* parties hold data too; any other
role is a *helper* a method runs beside the data parties (hetero-lr's arbiter, VFedTrans's key
generator and server). A role's :attr:`PartyContext.peers` are all the other roles, its
:attr:`PartyContext.passives` only the passive data parties, which the caller names
(``passives=``; by default every role but the active one, i.e. no helpers).
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from securevfl.errors import (
    ConfigError,
    PartyFailure,
    PeerFinishedError,
    PeerTimeoutError,
    ProtocolError,
    RunAborted,
)
from securevfl.federation import codec
from securevfl.federation.meter import Meter
from securevfl.federation.transport import Envelope, InProcessTransport, Transport

T = TypeVar("T")

#: Seconds a party waits for one message before the run fails (generous: a peer may be training a
#: local model or running Paillier on a large batch between two messages). ``None`` waits forever.
DEFAULT_RECV_TIMEOUT_S = 600.0

#: Seconds the runtime waits, after a failure, for the other parties to notice it and stop.
ABORT_GRACE_S = 5.0


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
        try:
            with self._meter.gate_released():
                envelope = self._transport.recv(self.party, src, self._abort, self._recv_timeout)
        except PeerFinishedError as exc:
            raise PeerFinishedError(src, self.party, f"{self.party} waits for {tag!r} from {src}, "
                                    f"but {src}'s role finished without sending it") from exc
        except PeerTimeoutError as exc:
            raise PeerTimeoutError(src, self.party, exc.timeout, f"{self.party} waited {exc.timeout:g} s for "
                                   f"{tag!r} from {src} (receive timeout)") from exc
        if envelope.tag != tag:
            raise ProtocolError(
                f"{self.party} expected {tag!r} from {src} but received {envelope.tag!r}"
            )
        self._clock = max(self._clock, envelope.depth)
        with self._meter.serialize():
            try:
                return codec.decode(envelope.payload)
            except ProtocolError as exc:
                raise ProtocolError(f"{self.party} received a malformed {tag!r} message from {src} "
                                    f"({len(envelope.payload)} bytes): {exc}") from exc


@dataclass
class PartyContext:
    """What a role sees: its name, its peers, its channel and meter, device, seed and progress.

    ``peers``: every other role of the run (helper roles included); ``passives``: the passive data
    parties only (never a helper, never the active party; this party itself if it is one).
    """

    name: str
    active: str
    passives: tuple[str, ...]
    peers: tuple[str, ...]
    channel: Channel
    meter: Meter
    device: Any = "cpu"
    seed: int = 0
    progress: Callable[..., None] = field(default=lambda *a, **k: None)
    stage: str = "setup"
    #: What the party learns by computing rather than by a message (an aggregate, its own contribution):
    #: ``observe(kind, value)``; ``value`` may be a callable, computed only when observed. A no-op unless an
    #: attack taps this party (securevfl.attacks).
    observe: Callable[[str, Any], None] = field(default=lambda kind, value: None)

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


def _data_passives(names: Sequence[str], active: str, passives: Iterable[str] | None) -> tuple[str, ...]:
    """The passive data parties: ``passives`` checked against the roles, or every role but the active one."""
    if passives is None:
        return tuple(n for n in names if n != active)
    chosen = tuple(passives)
    wrong = [p for p in chosen if p not in names or p == active]
    if wrong or len(set(chosen)) != len(chosen):
        raise ConfigError(f"passives {list(chosen)} must be distinct roles other than the active party "
                          f"{active!r}; roles are {list(names)}")
    return chosen


def _peers(names: Sequence[str], name: str) -> tuple[str, ...]:
    return tuple(n for n in names if n != name)


def run_parties(
    roles: Mapping[str, Callable[[PartyContext], T]],
    *,
    active: str,
    passives: Iterable[str] | None = None,
    transport: Transport | None = None,
    device: Any = "cpu",
    seed: int = 0,
    progress: Callable[..., None] | None = None,
    synchronize: Callable[[], None] | None = None,
    recv_timeout: float | None = DEFAULT_RECV_TIMEOUT_S,
    serialize_compute: bool = True,
) -> RunResult[T]:
    """Run one role per party in its own thread and return their results and meters.

    ``passives``: the passive data parties (default: every role but ``active``); the other roles
    are helpers, in every context's ``peers`` but not in its ``passives``.

    ``recv_timeout``: seconds one receive may wait (``None``: forever). A role that returns is
    marked finished, so a peer waiting for it fails at once rather than at the timeout.

    ``serialize_compute`` (default): one party's compute block runs at a time (see
    :meth:`Meter.compute`); crypto and communication still overlap across parties.

    Raises :class:`PartyFailure` for the first party whose role raised (other parties' consequent
    :class:`RunAborted` are not reported as failures).
    """
    names = list(roles)
    if recv_timeout is not None and not recv_timeout > 0:
        raise ConfigError(f"recv_timeout must be positive seconds or None, got {recv_timeout!r}")
    if active not in roles:
        raise ConfigError(f"active party {active!r} has no role; roles are {names}")
    data_passives = _data_passives(names, active, passives)
    transport = transport or InProcessTransport(names)
    abort = threading.Event()
    gate = threading.Lock() if serialize_compute else None
    meters = {n: Meter(n, synchronize=synchronize, compute_gate=gate) for n in names}
    contexts = {
        n: PartyContext(
            name=n, active=active, passives=data_passives, peers=_peers(names, n),
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
        finally:
            transport.finish(name)

    threads = [threading.Thread(target=body, args=(n,), name=f"party-{n}", daemon=True) for n in names]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive() and not abort.is_set():
                t.join(0.1)
        if abort.is_set():  # a party failed: the others stop at their next send or receive
            deadline = time.monotonic() + ABORT_GRACE_S
            for t in threads:  # a role stuck in compute is left behind (daemon thread), not waited for
                t.join(max(0.0, deadline - time.monotonic()))
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


def run_party(
    role: Callable[[PartyContext], T],
    *,
    name: str,
    active: str,
    parties: Sequence[str],
    transport: Transport,
    passives: Iterable[str] | None = None,
    device: Any = "cpu",
    seed: int = 0,
    progress: Callable[..., None] | None = None,
    synchronize: Callable[[], None] | None = None,
    recv_timeout: float | None = DEFAULT_RECV_TIMEOUT_S,
    finish: bool = True,
) -> tuple[T, Meter]:
    """Run one party's role in this process over a network ``transport`` (its peers run elsewhere).

    ``parties``: every role of the run (this one included); ``passives``: the passive data parties
    among them (default: all but ``active``), as in :func:`run_parties`.

    The same :class:`PartyContext` as :func:`run_parties`, so method code does not change. If the
    role raises, every peer is told (``transport.abort``) and :class:`PartyFailure` is raised; a
    peer's failure reaches this party as :class:`RunAborted` with the peer's reason. ``finish=False``
    for a phase after which the party goes on talking on the same transport (a fresh meter and
    Lamport clock per phase).
    """
    if name not in parties or active not in parties:
        raise ConfigError(f"party {name!r} and active party {active!r} must be among {list(parties)}")
    if recv_timeout is not None and not recv_timeout > 0:
        raise ConfigError(f"recv_timeout must be positive seconds or None, got {recv_timeout!r}")
    meter = Meter(name, synchronize=synchronize)
    ctx = PartyContext(
        name=name, active=active, passives=_data_passives(parties, active, passives), peers=_peers(parties, name),
        channel=Channel(name, transport, meter, threading.Event(), recv_timeout),
        meter=meter, device=device, seed=seed, progress=progress or (lambda *a, **k: None))
    try:
        value = role(ctx)
    except RunAborted:
        raise
    except BaseException as exc:
        transport.abort(f"{name} failed during {ctx.stage}: {type(exc).__name__}: {exc}")
        raise PartyFailure(name, ctx.stage, exc, traceback.format_exc()) from exc
    if finish:
        transport.finish(name)
    return value, meter

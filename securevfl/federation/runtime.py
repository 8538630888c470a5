"""The party runtime: every party runs its role and talks only through a channel.

A role is a callable ``role(ctx: PartyContext) -> result``. In one process the roles run as
greenlets of one worker thread, switched only when a party waits for a message
(:mod:`~securevfl.federation.cooperative`, the default), or as a thread each
(``scheduler="threads"``); deployed, one role runs per process (:func:`run_party`). The runtime
owns the scheduling, the transport, one :class:`~securevfl.federation.meter.Meter` per party,
shutdown and error propagation: the first party to raise stops the run (the others get :class:`RunAborted` at their
next receive) and :func:`run_parties` re-raises it as :class:`PartyFailure` with that party's name,
stage and traceback — never a hang.

Never a hang also when nobody raises: a role that returns is marked finished on the transport, so a
peer that still waits for a message from it fails at once with :class:`PeerFinishedError` naming
it; and every receive has a timeout (:data:`DEFAULT_RECV_TIMEOUT_S` unless the caller sets one), so
a peer stuck in a loop is reported too; in one process, a run in which every party waits is a
:class:`DeadlockError` at once. A malformed frame is a :class:`ProtocolError` naming the
sender and the tag, raised in the receiving party, never a crash of the process.

Who is who: one role is the active party; the scenario's *passive* parties hold data too; any other
role is a *helper* a method runs beside the data parties (hetero-lr's arbiter, VFedTrans's key
generator and server). A role's :attr:`PartyContext.peers` are all the other roles, its
:attr:`PartyContext.passives` only the passive data parties, which the caller names
(``passives=``; by default every role but the active one, i.e. no helpers).
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from securevfl.errors import (
    ConfigError,
    DeadlockError,
    Interrupted,
    PartyFailure,
    PeerFinishedError,
    PeerTimeoutError,
    ProtocolError,
    RunAborted,
    UnexpectedTagError,
)
from securevfl.federation import codec
from securevfl.federation.cooperative import CooperativeTransport
from securevfl.federation.meter import Meter
from securevfl.federation.transport import Envelope, InProcessTransport, PeerStatus, Transport

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
        self.waiting_for: tuple[str, str] | None = None  # (peer, tag) of the receive in progress
        self.waiting_since = 0.0  # time.monotonic() when that receive began (a watcher reports long waits)
        self._held: dict[str, Envelope] = {}  # per peer, the message poll() took and the next receive returns

    def _payload(self, value: Any) -> bytes | codec.Parcel:
        with self._meter.serialize():
            return codec.transfer(value) if self._transport.passes_objects else codec.encode(value)

    def send(self, dst: str, tag: str, value: Any) -> int:
        """Encode ``value`` and send it to ``dst`` under ``tag``; returns the bytes sent."""
        if self._abort.is_set():
            raise RunAborted(f"{self.party} stopped sending: the run was aborted")
        payload = self._payload(value)
        size = codec.payload_size(payload)
        depth = self._clock + 1
        self._meter.record_message(self.party, dst, size, depth)
        self._transport.send(Envelope(self.party, dst, tag, depth, payload))
        return size

    def broadcast(self, dsts: Sequence[str], tag: str, value: Any) -> None:
        """Send the same value to several parties (encoded once, counted once per link).

        In one process each receiver gets its own copy, as each would decode its own.
        """
        if self._abort.is_set():
            raise RunAborted(f"{self.party} stopped sending: the run was aborted")
        payload = None if self._transport.passes_objects else self._payload(value)
        depth = self._clock + 1
        for dst in dsts:
            own = payload if payload is not None else self._payload(value)
            self._meter.record_message(self.party, dst, codec.payload_size(own), depth)
            self._transport.send(Envelope(self.party, dst, tag, depth, own))

    def timeout_error(self, src: str, tag: str, timeout: float) -> PeerTimeoutError:
        """The error a receive of ``tag`` from ``src`` ends with after ``timeout`` seconds."""
        return PeerTimeoutError(src, self.party, timeout, f"{self.party} waited {timeout:g} s for {tag!r} from {src} "
                                                           "(receive timeout)")

    def recv(self, src: str, tag: str, timeout: float | None = None) -> Any:
        """Receive the next message from ``src``; it must carry ``tag`` (else ProtocolError).

        ``timeout``: seconds this one receive may wait, instead of the channel's receive timeout (a
        deadline for one message: :class:`PeerTimeoutError` after it, the message, if it comes later,
        left for the next receive).
        """
        return self._decoded(self._next(src, tag, timeout), src, tag)

    def poll(self, src: str, timeout: float) -> bool:
        """Whether a message from ``src`` is here within ``timeout`` seconds (0: now); kept for the next receive.

        Transport failures (a lost peer) are raised as by :meth:`recv`; a peer that merely has not sent
        yet is ``False``. Over a network or threaded transport (the cooperative one of one process has
        no timeouts: it waits for the message).
        """
        if src in self._held:
            return True
        try:
            self._held[src] = self._next(src, "a message", timeout)
        except PeerTimeoutError:
            return False
        return True

    def take(self, src: str, timeout: float) -> tuple[str, Any] | None:
        """The next message from ``src`` whatever its tag, as (tag, value), or None if none comes within ``timeout``.

        For a party that must skip what a peer sent late (a serving session's stale answers).
        """
        if not self.poll(src, timeout):
            return None
        envelope = self._held.pop(src)
        return envelope.tag, self._decoded(envelope, src, envelope.tag)

    @contextlib.contextmanager
    def receive_timeout(self, seconds: float) -> Iterator[None]:
        """Within the block, a receive without a timeout of its own waits at most ``seconds`` (or the channel's less).

        For a party that must not wait a whole receive timeout on a peer that vanished inside a short
        exchange (a serving batch's evaluation): :class:`PeerTimeoutError` after it.
        """
        saved = self._recv_timeout
        self._recv_timeout = seconds if saved is None else min(saved, seconds)
        try:
            yield
        finally:
            self._recv_timeout = saved

    def discard(self, src: str) -> None:
        """Drop the message :meth:`poll` kept from ``src`` (if any)."""
        self._held.pop(src, None)

    def peer_status(self, src: str) -> PeerStatus:
        """Whether ``src`` is reachable now, and which process of it (:meth:`Transport.peer_status`)."""
        return self._transport.peer_status(src)

    def _next(self, src: str, tag: str, timeout: float | None) -> Envelope:
        """The next envelope from ``src`` (the one :meth:`poll` kept first), waiting at most ``timeout`` s."""
        held = self._held.pop(src, None)
        if held is not None:
            return held
        self.waiting_since = time.monotonic()
        self.waiting_for = (src, tag)
        try:
            with self._meter.waiting():
                return self._transport.recv(self.party, src, self._abort,
                                            self._recv_timeout if timeout is None else max(0.0, timeout))
        except PeerFinishedError as exc:
            raise PeerFinishedError(src, self.party, f"{self.party} waits for {tag!r} from {src}, "
                                    f"but {src}'s role finished without sending it") from exc
        except PeerTimeoutError as exc:
            raise self.timeout_error(src, tag, exc.timeout) from exc
        except DeadlockError as exc:
            raise DeadlockError(self.party, src, f"{self.party} waits for {tag!r} from {src}, but {exc}") from exc
        finally:
            self.waiting_for = None

    def _decoded(self, envelope: Envelope, src: str, tag: str) -> Any:
        if envelope.tag != tag:
            raise UnexpectedTagError(f"{self.party} expected {tag!r} from {src} but received {envelope.tag!r}",
                                     envelope.tag)
        self._clock = max(self._clock, envelope.depth)
        if isinstance(envelope.payload, codec.Parcel):
            return envelope.payload.value
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

    def recv(self, src: str, tag: str, timeout: float | None = None) -> Any:
        return self.channel.recv(src, tag) if timeout is None else self.channel.recv(src, tag, timeout)

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


#: How :func:`run_parties` runs the roles of one process: greenlets of one thread, or a thread each.
SCHEDULERS = ("cooperative", "threads")


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
    scheduler: str | None = None,
) -> RunResult[T]:
    """Run one role per party in this process and return their results and meters.

    ``scheduler="cooperative"`` (the default, unless ``transport`` is a threaded one): every role is
    a greenlet of one worker thread, switched only when it waits for a message
    (:mod:`securevfl.federation.cooperative`); messages are passed as copies whose encoded size is
    counted, not encoded. A run in which every party waits is a :class:`DeadlockError` at once.
    ``scheduler="threads"``: a thread per role over encoded bytes (``transport`` must then be a
    threaded one, :class:`InProcessTransport` by default), with ``serialize_compute`` (default)
    letting one party's compute block run at a time (see :meth:`Meter.compute`). Results and byte
    counts are the same either way.

    ``passives``: the passive data parties (default: every role but ``active``); the other roles
    are helpers, in every context's ``peers`` but not in its ``passives``.

    ``recv_timeout``: seconds one receive may wait (``None``: forever). A role that returns is
    marked finished, so a peer waiting for it fails at once rather than at the timeout.

    Raises :class:`PartyFailure` for the first party whose role raised (other parties' consequent
    :class:`RunAborted` are not reported as failures).
    """
    names = list(roles)
    if recv_timeout is not None and not recv_timeout > 0:
        raise ConfigError(f"recv_timeout must be positive seconds or None, got {recv_timeout!r}")
    if active not in roles:
        raise ConfigError(f"active party {active!r} has no role; roles are {names}")
    if scheduler is None:
        scheduler = "threads" if transport is not None and not isinstance(transport, CooperativeTransport) \
            else "cooperative"
    if scheduler not in SCHEDULERS:
        raise ConfigError(f"scheduler must be one of {list(SCHEDULERS)}, got {scheduler!r}")
    cooperative = scheduler == "cooperative"
    if transport is None:
        transport = CooperativeTransport(names) if cooperative else InProcessTransport(names)
    elif cooperative != isinstance(transport, CooperativeTransport):
        raise ConfigError(f"scheduler={scheduler!r} needs {'a' if cooperative else 'no'} CooperativeTransport, "
                          f"got {type(transport).__name__}")
    data_passives = _data_passives(names, active, passives)
    abort = threading.Event()
    gate = threading.Lock() if serialize_compute and not cooperative else None
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

    overdue: Callable[[], PartyFailure | None]
    if isinstance(transport, CooperativeTransport):
        bodies = {n: functools.partial(body, n) for n in names}
        threads = [threading.Thread(target=transport.run, args=(bodies, abort), name="parties", daemon=True)]
        overdue = functools.partial(_overdue_receive, transport, contexts, recv_timeout)
    else:
        threads = [threading.Thread(target=body, args=(n,), name=f"party-{n}", daemon=True) for n in names]
        overdue = _never_overdue
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive() and not abort.is_set():
                t.join(0.1)
                late = overdue()  # cooperative: the waiting party cannot time itself out if another never yields
                if late is not None:
                    with lock:
                        failures.append(late)
                    abort.set()
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


def _never_overdue() -> PartyFailure | None:
    return None


def _overdue_receive(transport: CooperativeTransport, contexts: Mapping[str, PartyContext],
                     recv_timeout: float | None) -> PartyFailure | None:
    """A party parked in a receive for longer than ``recv_timeout``, as its failure (None: none is)."""
    if recv_timeout is None:
        return None
    now = time.monotonic()
    for party, (peer, since) in transport.parked().items():
        if now - since >= recv_timeout:
            ctx = contexts[party]
            tag = (ctx.channel.waiting_for or (peer, "a message"))[1]
            error = ctx.channel.timeout_error(peer, tag, recv_timeout)
            return PartyFailure(party, ctx.stage, error)
    return None


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
        transport.abort(f"{name} stopped: {exc}" if isinstance(exc, Interrupted)  # SIGTERM / SIGINT: no failure
                        else f"{name} failed during {ctx.stage}: {type(exc).__name__}: {exc}")
        raise PartyFailure(name, ctx.stage, exc, traceback.format_exc()) from exc
    if finish:
        transport.finish(name)
    return value, meter

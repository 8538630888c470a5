"""Transports move encoded envelopes between parties; method code never sees which one is used.

:class:`InProcessTransport` keeps one FIFO queue per directed link between party threads (the
runtime's ``scheduler="threads"``); :class:`~securevfl.federation.cooperative.CooperativeTransport`,
the default in one process, runs every party as a greenlet of one thread. A network transport
(gRPC with mutual TLS, one process per party) implements the same three methods.
"""

from __future__ import annotations

import queue
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass

from securevfl.errors import PeerFinishedError, PeerTimeoutError, ProtocolError, RunAborted
from securevfl.federation.codec import Parcel, payload_size


@dataclass(frozen=True)
class Envelope:
    """One message on a link: a tag naming what it is, its Lamport depth and the encoded payload.

    The payload is the encoded bytes, or a :class:`~securevfl.federation.codec.Parcel` on a
    transport that passes objects (:attr:`Transport.passes_objects`, the cooperative one).
    """

    src: str
    dst: str
    tag: str
    depth: int
    payload: bytes | Parcel

    @property
    def size(self) -> int:
        """The bytes this message is on the wire."""
        return payload_size(self.payload)


@dataclass(frozen=True)
class PeerStatus:
    """What a transport knows of one peer now (:meth:`Transport.peer_status`)."""

    #: Its links carry messages now (a network transport: both directions connected, nothing failed).
    up: bool = True
    #: How many times a new process of the peer replaced the one before (0: the first one), where the
    #: transport accepts that (a serving session's passive parties, :mod:`~securevfl.federation.grpc_transport`).
    epoch: int = 0


class Transport(ABC):
    """Moves envelopes between named parties."""

    #: True where envelopes may carry :class:`~securevfl.federation.codec.Parcel`\ s (one process,
    #: no wire); the channel then skips encoding but still counts the encoded size.
    passes_objects: bool = False

    @abstractmethod
    def send(self, envelope: Envelope) -> None:
        """Deliver ``envelope`` to ``envelope.dst`` (non-blocking for the sender)."""

    @abstractmethod
    def recv(self, dst: str, src: str, abort: threading.Event, timeout: float | None = None) -> Envelope:
        """Next envelope from ``src`` to ``dst``.

        Raises :class:`RunAborted` once ``abort`` is set, :class:`PeerFinishedError` when ``src``
        has finished its role (see :meth:`finish`) and nothing from it is left to deliver, and
        :class:`PeerTimeoutError` after ``timeout`` seconds without a message.
        """

    @abstractmethod
    def finish(self, party: str) -> None:
        """Record that ``party``'s role has returned: it will send nothing more.

        A peer still waiting for a message from it then fails at once, with a message naming it,
        instead of waiting forever (the "finished peer" contract).
        """

    def peer_status(self, peer: str) -> PeerStatus:
        """Whether ``peer`` is reachable now, and which process of it (in one process: always up, the first)."""
        return PeerStatus()

    def abort(self, reason: str) -> None:  # noqa: B027 - optional hook, deliberately not abstract
        """Tell the peers that this process's party failed (network transports; threads share an event)."""

    def close(self) -> None:  # noqa: B027 - optional hook, deliberately not abstract
        """Release resources. The in-process transport has none."""


class InProcessTransport(Transport):
    """Per-link FIFO queues between threads of one process."""

    _POLL_S = 0.05

    def __init__(self, parties: list[str]) -> None:
        self._parties = frozenset(parties)
        self._finished: set[str] = set()
        self._finished_lock = threading.Lock()
        self._queues: dict[tuple[str, str], queue.SimpleQueue[Envelope]] = {
            (a, b): queue.SimpleQueue() for a in parties for b in parties if a != b
        }

    def _link(self, src: str, dst: str) -> queue.SimpleQueue[Envelope]:
        try:
            return self._queues[(src, dst)]
        except KeyError:
            raise ProtocolError(f"no link {src}->{dst}; parties are {sorted(self._parties)}") from None

    def send(self, envelope: Envelope) -> None:
        self._link(envelope.src, envelope.dst).put(envelope)

    def finish(self, party: str) -> None:
        with self._finished_lock:
            self._finished.add(party)

    def _has_finished(self, party: str) -> bool:
        with self._finished_lock:
            return party in self._finished

    def recv(self, dst: str, src: str, abort: threading.Event, timeout: float | None = None) -> Envelope:
        link = self._link(src, dst)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if abort.is_set():
                raise RunAborted(f"{dst} stopped waiting for {src}: the run was aborted")
            wait = self._POLL_S if deadline is None else max(0.0, min(self._POLL_S, deadline - time.monotonic()))
            try:
                return link.get(timeout=wait) if wait > 0 else link.get_nowait()
            except queue.Empty:
                # A role's sends happen before it is marked finished, so once it is, an empty link stays empty.
                if self._has_finished(src):
                    try:
                        return link.get_nowait()
                    except queue.Empty:
                        raise PeerFinishedError(src, dst) from None
                if deadline is not None and time.monotonic() >= deadline:
                    assert timeout is not None
                    raise PeerTimeoutError(src, dst, timeout) from None

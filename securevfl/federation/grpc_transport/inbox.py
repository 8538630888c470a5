"""The receiving side of a link: what arrived from one peer (:class:`_Inbox`) and how a frame is taken.

:class:`_Receiver` holds the checks of a HELLO and the handling of every frame after it, the same
whether the frame came on a stream this party serves (:mod:`.server`) or on the pull stream a star's
non-hub party opens to the hub (:mod:`.star`).

Sizes. Large payloads are cut into ``chunk_kb`` chunks (gRPC's message limit never applies to a
whole payload); ``max_message_mb`` bounds one message with a clear error at the sender and a
:class:`ProtocolError` at the receiver, which names the sender and both limits and refuses the link
at once (the sender sees that refusal too). The HELLO carries the sender's ``chunk_kb`` and
``max_message_mb``: parties whose ``chunk_kb`` differ are refused at the handshake with both values.
A single frame above the receiver's limit (one chunk and its header, :func:`~.wire.frame_limit`) is
refused at once at both ends naming its size; gRPC itself refuses one above about twice that, and
the sender, told by gRPC, names it too and tells the receiver in an ABORT on a fresh stream.

HELLO. The first frame carries the job fingerprint; a mismatch is refused with the keys that
differ, before any data frame. It also carries the sending process's random session id: a
reconnect repeats it, and a HELLO with another id while a link from that party was accepted (a
second process of the party: a batch ``--predict`` next to a running ``--serve``) is refused,
except from a peer the transport was told is *replaceable* (a serving session's passive party
restarted): that process replaces the one before, its link starting afresh.

Bounds. What one party can make another hold is bounded per link: the sender keeps at most
``send_window_mb`` unacknowledged; the receiver holds at most ``recv_buffer_mb`` (default
``max_message_mb``; plus one chunk) of whole messages its role has not taken yet and the message in
progress. Beyond that its server stops reading the link (back-pressure): the sender's window fills
and its ``send`` blocks until the receiving role catches up; a message is never dropped.

Order. The receiver acknowledges cumulatively (:data:`~.wire.ACK_EVERY_FRAMES` frames or
:data:`~.wire.ACK_EVERY_BYTES` bytes, on FIN and on a heartbeat) and drops duplicates. A malformed
frame is a :class:`ProtocolError` naming the peer, raised in the receiving party's role, never a
crash.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from securevfl.errors import ProtocolError
from securevfl.federation import frames as fr
from securevfl.federation.grpc_transport.errors import PeerLostError, _Refusal
from securevfl.federation.grpc_transport.wire import _MIB, ACK_EVERY_BYTES, ACK_EVERY_FRAMES, RELAY, frame_limit
from securevfl.federation.network import NetworkSettings, TlsCredentials
from securevfl.federation.transport import Envelope


@dataclass
class _Inbox:
    """What arrived from one peer."""

    envelopes: deque[Envelope] = field(default_factory=deque)
    expected: int = 0  # next sequence number
    finished: bool = False
    error: BaseException | None = None
    last_seen: float = field(default_factory=time.monotonic)
    hello_seen: bool = False
    generation: int = 0
    reassembly: fr.Reassembly | None = None  # survives reconnects: a resend continues at the next chunk
    unacked_frames: int = 0
    unacked_bytes: int = 0
    queued_bytes: int = 0  # payload bytes of the whole messages in ``envelopes``
    held_back: int = 0  # times the server stopped reading this link because it held recv_buffer_mb
    reader_waiting: bool = False  # the link's reader waits for recv to take messages (back-pressure)
    peer_max_message: int = 0  # the peer's max_message (bytes) from its HELLO; 0 if it did not say
    session: str | None = None  # the session id of the peer process whose HELLO this party accepted first
    context: Any = None  # the server context of the stream now carrying this link
    relayed: deque[tuple[str, int, bytes]] = field(default_factory=deque)  # relay messages to forward or open
    relay_lock: threading.Lock = field(default_factory=threading.Lock)  # one thread forwards/opens, in order

    def held_bytes(self) -> int:
        """What the link holds: whole messages not yet taken by recv and the message in progress."""
        return self.queued_bytes + (self.reassembly.pending_bytes if self.reassembly is not None else 0)


class _Receiver:
    """The receiving part of :class:`~.transport.GrpcTransport`: HELLO checks and taking one frame."""

    # Set by GrpcTransport.__init__ (:mod:`.transport`).
    party: str
    peers: tuple[str, ...]
    hub: str | None
    is_hub: bool
    tls: TlsCredentials | None
    fingerprint: str
    job: dict[str, Any]
    settings: NetworkSettings
    abort_reason: str | None
    _aborted_by: set[str]
    _differences: Callable[[Any, Any], list[str]] | None
    _cond: threading.Condition
    _inboxes: dict[str, _Inbox]
    replaceable: frozenset[str]
    left_out: dict[str, str]

    def _accept_hello(self, inbox: _Inbox, hello: fr.Frame, context: Any = None) -> tuple[int, int, Any]:
        """Start a new generation of ``inbox`` for an accepted HELLO.

        Returns (the generation, the next frame number expected, the server context it replaces);
        ``context``: the server stream now carrying the link (None for a pull stream this party opened).
        """
        with self._cond:
            inbox.generation += 1
            inbox.hello_seen = True
            inbox.last_seen = time.monotonic()
            inbox.peer_max_message = hello.max_message
            if inbox.reassembly is None:
                inbox.reassembly = fr.Reassembly(self.settings.max_message_bytes)
            previous = inbox.context
            if context is not None:
                inbox.context = context
            self._cond.notify_all()
            return inbox.generation, inbox.expected, previous

    def _hold_back(self, inbox: _Inbox, generation: int, bound: int, active: Callable[[], bool]) -> None:
        """Back-pressure: stop reading the link while it holds ``bound`` bytes (``recv_buffer_mb``) not yet taken.

        Returns at once when there is room; otherwise waits until ``recv`` takes enough (it wakes the reader),
        the stream is replaced or ends (``active`` false) or the run aborts.
        """
        with self._cond:
            if not inbox.envelopes or inbox.held_bytes() < bound:
                return
            inbox.held_back += 1
            inbox.reader_waiting = True
            try:
                while (inbox.envelopes and inbox.held_bytes() >= bound and inbox.generation == generation
                       and self.abort_reason is None and active()):
                    inbox.last_seen = time.monotonic()  # the peer is not silent: this party holds it back
                    self._cond.wait(0.1)
            finally:
                inbox.reader_waiting = False
            inbox.last_seen = time.monotonic()

    def _check_hello(self, hello: fr.Frame, context: grpc.ServicerContext | None) -> str:
        if hello.kind != fr.Kind.HELLO:
            return f"first frame is a {hello.kind.name}, not a HELLO"
        if hello.dst != self.party:
            return f"this is {self.party}, not {hello.dst}"
        if hello.src not in self._inboxes:
            return f"{hello.src!r} is not a party of this federation ({', '.join(self.peers)})"
        if hello.src in self.left_out:
            return f"{self.party} left {hello.src} out of this run: {self.left_out[hello.src]}"
        if self.tls is not None and context is not None:  # a client checked the server's name in the TLS handshake
            identities = [i.decode("utf-8", "replace") for i in (context.peer_identities() or [])]
            if hello.src not in identities:
                return (f"the client certificate names {identities or 'nobody'}, but the stream claims to come "
                        f"from {hello.src}")
        mine = self.settings.chunk_kb
        if hello.chunk_kb and hello.chunk_kb != mine:  # the larger side's frames cannot pass the smaller's limit
            big, small = (hello.src, self.party) if hello.chunk_kb > mine else (self.party, hello.src)
            return (f"{big} sends chunks of {max(mine, hello.chunk_kb)} KiB but {small} accepts "
                    f"{min(mine, hello.chunk_kb)} KiB: set the same [network] chunk_kb for every party")
        if hello.text != self.fingerprint:
            differing = (self._differences(self.job, hello.job) if self._differences else []) or ["(fingerprint only)"]
            return (f"job mismatch between {hello.src} and {self.party}; differing keys: "
                    + ", ".join(differing))
        return ""

    def _session_refusal(self, hello: fr.Frame) -> str:
        """Claim the link from ``hello.src`` for the process that sent ``hello``; a refusal if another holds it.

        The first accepted HELLO from a party fixes its session id; its reconnects repeat it. A HELLO with
        another id comes from another process of that party (a batch ``--predict`` next to a ``--serve``
        one, a second copy): it must not take over the link, whose sequence numbers are the first one's.
        """
        with self._cond:
            inbox = self._inboxes[hello.src]
            if inbox.session is None:
                inbox.session = hello.session
            if hello.session == inbox.session:
                return ""
            if hello.src in self.replaceable:  # a serving session takes a restarted passive party back
                self._replace_peer(hello.src, hello.session)
                return ""
        return f"another process of {hello.src} (another session) is connected to {self.party}"

    def _replace_peer(self, peer: str, session: str) -> None:
        raise NotImplementedError  # :class:`~.transport.GrpcTransport`

    def _on_frame(self, src: str, inbox: _Inbox, frame: fr.Frame,
                  queue_ack: Callable[[bytes], None] | None = None) -> bytes | None:
        """Take one frame; the ACK due is returned, or queued with ``queue_ack`` before the lock is released.

        A pull stream queues it, so the acknowledgement of a FIN is on its way before ``close`` can see the FIN.
        """
        kind = frame.kind
        if kind == fr.Kind.HEARTBEAT:  # the sender is idle: acknowledge what is pending
            with self._cond:
                return self._queued(self._ack(inbox, force=True), queue_ack)
        if kind == fr.Kind.ABORT:
            with self._cond:
                if src in self.replaceable:  # its failure is its own: only what comes from it fails
                    if inbox.error is None:
                        inbox.error = PeerLostError(src, self.party, f"{src} stopped: {frame.text}")
                    self._cond.notify_all()
                    return None
                self.abort_reason = self.abort_reason or f"{src} aborted the run: {frame.text}"
                self._aborted_by.add(src)
                if self.is_hub:  # the hub tells the other parties at once (after this frame, outside the lock)
                    inbox.relayed.append((RELAY + "abort", 0, f"{src} aborted the run: {frame.text}".encode()))
                self._cond.notify_all()
            return None
        if kind not in (fr.Kind.DATA, fr.Kind.FIN):
            raise ProtocolError(f"unexpected {kind.name} frame")
        with self._cond:
            if frame.seq < inbox.expected:  # a resend of something already delivered
                return fr.encode_frame(fr.Frame(fr.Kind.ACK, seq=inbox.expected - 1))
            if frame.seq > inbox.expected:
                raise ProtocolError(f"frame {frame.seq} arrived before frame {inbox.expected}")
            if kind == fr.Kind.FIN:
                inbox.finished = True
            else:
                assert inbox.reassembly is not None
                limit = self.settings.max_message_bytes
                if frame.total > limit:
                    theirs = inbox.peer_max_message
                    hint = (f" ({src}'s is {theirs / _MIB:g}): set the same [network] max_message_mb for every party"
                            if theirs and theirs != limit else "")
                    raise _Refusal(f"{self.party} refused a message from {src}: {frame.tag!r} of {frame.total:,} "
                                   f"bytes exceeds {self.party}'s max_message_mb = {self.settings.max_message_mb:g}"
                                   + hint)
                done = inbox.reassembly.add(frame)
                if done is not None:
                    tag, depth, payload = done
                    if self.hub is not None and tag.startswith(RELAY):  # forwarded or opened after this frame
                        inbox.relayed.append((tag, depth, payload))
                    else:
                        inbox.envelopes.append(Envelope(src, self.party, tag, depth, payload))
                        inbox.queued_bytes += len(payload)
            inbox.expected += 1
            inbox.unacked_frames += 1
            inbox.unacked_bytes += len(frame.payload)
            self._cond.notify_all()
            return self._queued(self._ack(inbox, force=kind == fr.Kind.FIN), queue_ack)

    def _check_frame_size(self, src: str, data: bytes) -> None:
        """Refuse a frame above :func:`frame_limit`, naming its sender, its size and the limit (both ends read it)."""
        limit = frame_limit(self.settings)
        if len(data) > limit:
            raise _Refusal(f"{src} sent a frame of {len(data):,} bytes, over {self.party}'s limit of {limit:,} bytes "
                           f"(chunk_kb = {self.settings.chunk_kb}: set the same [network] chunk_kb for every party)")

    @staticmethod
    def _queued(ack: bytes | None, queue_ack: Callable[[bytes], None] | None) -> bytes | None:
        if ack is None or queue_ack is None:
            return ack
        queue_ack(ack)
        return None

    def _ack(self, inbox: _Inbox, force: bool = False) -> bytes | None:
        """A cumulative ACK, if one is due.

        Due every ``ACK_EVERY_FRAMES`` frames or ``ACK_EVERY_BYTES`` bytes, on FIN, and when the sender goes
        idle (its heartbeat): one ACK per small message would double the frames on the link.
        """
        if not inbox.unacked_frames or not (force or inbox.unacked_frames >= ACK_EVERY_FRAMES
                                             or inbox.unacked_bytes >= ACK_EVERY_BYTES):
            return None
        inbox.unacked_frames = inbox.unacked_bytes = 0
        return fr.encode_frame(fr.Frame(fr.Kind.ACK, seq=inbox.expected - 1))

    def _fail_inbox(self, peer: str, error: BaseException) -> None:
        with self._cond:
            inbox = self._inboxes[peer]
            if inbox.error is None and not inbox.finished:
                inbox.error = error
            self._cond.notify_all()

"""The sending side of one link (:class:`_OutLink`), and the channel it opens to a peer.

The sender's state machine (sequencing, resend buffer, window, heartbeats) is the same whichever
side opened the gRPC call: a mesh link, or a star party's link to the hub, is this party's client
stream to the peer's server; the star hub's link to a party without a server rides on that party's
pull stream (:mod:`.star`).

Faults. Frames carrying data are numbered per link; the receiver acknowledges them cumulatively
(every 32 frames or 8 MiB, on FIN and when the sender idles) and drops duplicates; the sender
keeps every unacknowledged frame and, after a dropped connection, reconnects with exponential
backoff and resends from the receiver's next expected number: no loss, duplication or
reordering. Idle links carry heartbeats; a peer from which nothing arrives for ``peer_timeout_s``
is reported as lost (:class:`PeerLostError`, naming it). A failing party sends ABORT to every
peer, which then stops at once. The sender keeps at most ``send_window_mb`` unacknowledged; a full
window blocks ``send`` until the peer takes more (back-pressure: :mod:`.inbox`).

Authentication, the client's half. With TLS (the default and the only choice off loopback) the
client verifies the server's certificate against the federation CA with the *peer's party name*
as the expected host name (``ssl_target_name_override``), so a certificate for another party, or
from another CA, fails the handshake before any frame flows. A failed TLS handshake is reported by
the side that failed it, saying why (unknown CA, name mismatch, expired, not yet valid) as far as
gRPC's error detail tells (:func:`_permanent_failure`).
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import grpc

from securevfl.errors import PeerTimeoutError, ProtocolError, SecureVFLError
from securevfl.federation import frames as fr
from securevfl.federation.grpc_transport.errors import LinkRefusedError, LinkStats, PeerLostError, PeerRestartedError
from securevfl.federation.grpc_transport.wire import _METHOD, _MIB

if TYPE_CHECKING:
    from securevfl.federation.grpc_transport.transport import GrpcTransport


def _open_channel(owner: GrpcTransport, peer: str, address: str, receive: int = 65536) -> grpc.Channel:
    s = owner.settings
    options: list[tuple[str, int | str]] = [
        ("grpc.max_send_message_length", s.chunk_bytes + 65536),
        ("grpc.max_receive_message_length", receive),
        ("grpc.initial_reconnect_backoff_ms", int(s.reconnect_backoff_s * 1000)),
        ("grpc.max_reconnect_backoff_ms", int(s.max_backoff_s * 1000)),
        ("grpc.keepalive_time_ms", max(1000, int(s.heartbeat_s * 5000))),
        ("grpc.keepalive_permit_without_calls", 1)]
    tls = owner.tls
    if tls is None:
        return grpc.insecure_channel(address, options=options)
    credentials = grpc.ssl_channel_credentials(root_certificates=tls.root_ca, private_key=tls.private_key,
                                               certificate_chain=tls.cert_chain)
    options.append(("grpc.ssl_target_name_override", peer))  # the peer's certificate must name it
    return grpc.secure_channel(address, credentials, options=options)


class _OutLink:
    """What the local party sends one peer: sequencing, resend buffer, heartbeats, reconnects.

    The sender's state machine does not depend on which side opened the gRPC call. Mesh (and a star
    party's link to the hub): this party's client stream carries the frames, the peer's server answers
    with acknowledgements (:meth:`_run`). ``served`` (the star hub's link to a party without a server):
    that party opens a pull stream to the hub's server, the frames flow on the response side and the
    acknowledgements on the request side (:meth:`serve`); the hub waits for a new pull stream after a
    drop, and :meth:`_watch` reports the peer as lost when none comes within the timeout.
    """

    def __init__(self, owner: GrpcTransport, peer: str, address: str, served: bool = False) -> None:
        self.owner, self.peer, self.address = owner, peer, address
        self.settings = owner.settings
        self.cond = threading.Condition()
        self.frames: dict[int, bytes] = {}  # unacknowledged sequenced frames
        self.unacked_bytes = 0
        self.next_seq = 0  # number of the next sequenced frame
        self.acked = 0  # every frame below this number is acknowledged
        self.send_pos = 0  # next frame to put on the current stream
        self.high_water = 0  # highest frame number ever put on a stream (resends are counted below it)
        self.generation = 0  # stream attempts; a stale request iterator ends when this moves on
        self.handshaken = -1  # generation whose HELLO_ACK arrived
        self.probed = False  # a heartbeat asked for an acknowledgement since the last one (the window is full)
        self.urgent: deque[bytes] = deque()  # ABORT
        self.closing = False
        self.error: BaseException | None = None
        self.ever_connected = False
        self.last_error = ""
        self.stats = LinkStats()
        self.send_lock = threading.Lock()
        self.served = served
        self.context: Any = None  # served: the server context of the pull stream now carrying the link
        self._call: Any = None
        self._channel = None if served else _open_channel(owner, peer, address)
        self._thread = threading.Thread(target=self._watch if served else self._run,
                                        name=f"link-{owner.party}->{peer}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    # -- called by the party's threads

    def send(self, tag: str, depth: int, payload: bytes, relayed: bool = False) -> None:
        settings = self.settings
        if len(payload) > settings.max_message_bytes:
            raise ProtocolError(f"{self.owner.party} cannot send a {len(payload):,}-byte {tag!r} message to "
                                f"{self.peer}: above max_message_mb = {settings.max_message_mb:g}")
        chunks = fr.split_payload(payload, settings.chunk_bytes)
        window = settings.send_window_mb * 1024 * 1024
        with self.send_lock:  # a message's chunks stay together: the star hub's role and its relays share a link
            self._send_chunks(tag, depth, payload, chunks, window, relayed)

    def _send_chunks(self, tag: str, depth: int, payload: bytes, chunks: list[memoryview], window: float,
                     relayed: bool) -> None:
        for i, part in enumerate(chunks):
            with self.cond:
                if self.unacked_bytes > window:
                    self._wait_for_window(window)
                if self.error is not None:
                    raise self.error
                self._append(fr.encode_data(self.next_seq, tag, depth, i, len(chunks), len(payload), part))  # no copy
        if relayed:
            self.stats.relayed_bytes += len(payload)
        else:
            self.stats.payload_bytes += len(payload)

    def _wait_for_window(self, window: float) -> None:
        """Back-pressure: wait until the peer acknowledged enough to bring the unacknowledged bytes under ``window``.

        The caller holds ``cond``. A peer that is alive but takes nothing for ``recv_timeout_s`` is a
        :class:`PeerTimeoutError`; a failed link or an aborted run ends the wait (the caller checks).
        """
        settings = self.settings
        blocked = time.monotonic()
        while self.unacked_bytes > window and self.error is None and not self.owner.abort_reason:
            if time.monotonic() - blocked > settings.recv_timeout_s:  # the peer is alive but takes nothing
                raise PeerTimeoutError(self.peer, self.owner.party, settings.recv_timeout_s, (
                    f"{self.owner.party} waited {settings.recv_timeout_s:g} s for {self.peer} to take its "
                    f"messages: {self.peer} holds its recv_buffer_mb unread and this party's "
                    "send_window_mb is full"))
            self.cond.wait(0.1)

    def finish(self) -> None:
        with self.send_lock, self.cond:
            if self.error is None:
                self._append(fr.encode_frame(fr.Frame(fr.Kind.FIN, seq=self.next_seq)))

    def abort(self, reason: str) -> None:
        with self.cond:
            self.urgent.append(fr.encode_frame(fr.Frame(fr.Kind.ABORT, text=reason[:4000])))
            self.cond.notify_all()

    def _append(self, data: bytes) -> None:
        """Queue the encoded frame numbered ``next_seq`` (the caller holds ``cond``)."""
        self.frames[self.next_seq] = data
        self.unacked_bytes += len(data)
        self.next_seq += 1
        self.cond.notify_all()

    def drain(self, timeout: float) -> bool:
        """Wait until every sequenced frame is acknowledged; False on timeout or failure."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.acked < self.next_seq and self.error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(min(left, 0.1))
            return self.error is None

    def flush_urgent(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self.cond:  # a link still connecting gets the time to connect and carry the ABORT too
            while self.urgent and self.error is None and time.monotonic() < deadline:
                self.cond.wait(0.05)

    def begin_close(self) -> None:
        """Let the request stream end by itself (what is queued goes first); :meth:`close` then waits for it."""
        with self.cond:
            self.closing = True
            self.cond.notify_all()

    def close(self, polite_until: float | None = None) -> None:
        self.begin_close()
        # The request stream ends by itself once nothing urgent is queued: gRPC then delivers what it
        # was handed (an ABORT) before the half-close. Cancelling at once could drop that frame, and the
        # peer would only learn of the failure a peer timeout later; cancel a stream that lingers.
        _end_stream(self._thread, self._call, polite_until)
        if self._channel is not None:
            self._channel.close()
        elif self.context is not None and self.urgent:
            time.sleep(0.2)  # an ABORT still queued on the pull stream: give it a moment, then end the stream
            self.context.cancel()

    # -- served: the peer's pull stream carries this link

    def serve(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        """Carry the link on a new pull stream: frames out as responses, the peer's acknowledgements in."""
        with self.cond:
            self.generation += 1
            generation = self.generation
            self.handshaken = -1
            previous, self.context = self.context, context
            self.cond.notify_all()
        if previous is not None and previous is not context:
            previous.cancel()  # the peer reconnected: its old pull stream ends and frees its thread
        reader = threading.Thread(target=self._read_answers, args=(requests, generation), daemon=True,
                                  name=f"acks-{self.peer}->{self.owner.party}")
        reader.start()
        try:
            yield from self._requests(generation)
        finally:
            self._stream_ended(generation)

    def _read_answers(self, requests: Iterator[bytes], generation: int) -> None:
        try:
            for data in requests:
                if self.generation != generation:
                    return
                self._on_response(data, generation)
        except grpc.RpcError:
            pass
        except SecureVFLError as exc:  # REFUSE or a malformed answer: fatal for this link
            self._fail(exc)
        except Exception as exc:  # noqa: BLE001 - the stream was torn down under the reader
            self.last_error = f"{type(exc).__name__}: {exc}"
        finally:
            self._stream_ended(generation)

    def _stream_ended(self, generation: int) -> None:
        with self.cond:
            if self.generation == generation:  # still the current stream: the link is down until the next one
                self.generation += 1
                self.handshaken = -1
            self.cond.notify_all()

    def _watch(self) -> None:
        """Served links: report the peer as lost when it opens no pull stream within the timeout."""
        settings = self.settings
        down_since: float | None = time.monotonic()
        while True:
            with self.cond:
                if self.closing or self.error is not None:
                    return
                now = time.monotonic()
                if self.handshaken >= 0:
                    down_since = None
                elif down_since is None:
                    down_since = now
                    self.stats.reconnects += 1
                else:
                    limit = settings.peer_timeout_s if self.ever_connected else settings.connect_timeout_s
                    if now - down_since > limit:
                        what = "lost" if self.ever_connected else "never opened"
                        error = PeerLostError(self.peer, self.owner.party,
                                              f"{self.owner.party}: the stream from {self.peer} that carries "
                                              f"{self.owner.party}'s messages to it was {what} for {limit:g} s")
                        self.error = error
                        self.cond.notify_all()
                        break
                self.cond.wait(0.2)
        self.owner.notify()
        if self.error is not None and not self.closing:
            self.owner._report_lost(self.peer, str(self.error))

    # -- the link's own thread

    def _requests(self, generation: int) -> Iterator[bytes]:
        owner = self.owner
        yield _hello(owner, self.peer)
        heartbeat = self.settings.heartbeat_s
        window = self.settings.send_window_mb * _MIB
        while True:
            with self.cond:
                deadline = time.monotonic() + heartbeat
                while True:
                    if self.generation != generation or (self.closing and not self.urgent):
                        return
                    if self.urgent and self.handshaken == generation:
                        data = self.urgent.popleft()
                        self.cond.notify_all()  # flush_urgent waits for the urgent queue to empty
                        break
                    if self.handshaken == generation and self.send_pos < self.next_seq:
                        data = self.frames[self.send_pos]
                        if self.send_pos < self.high_water:
                            self.stats.resent_frames += 1
                        self.send_pos += 1
                        self.high_water = max(self.high_water, self.send_pos)
                        break
                    left = deadline - time.monotonic()
                    full = self.unacked_bytes > window and not self.probed and self.handshaken == generation
                    if left <= 0 or full:  # idle, or blocked by the window: a heartbeat makes the peer acknowledge
                        self.probed = self.probed or full
                        data = _HEARTBEAT
                        break
                    self.cond.wait(left)
            self.stats.frames += 1
            self.stats.frame_bytes += len(data)
            yield data

    def _run(self) -> None:
        settings = self.settings
        backoff = settings.reconnect_backoff_s
        down_since = time.monotonic()
        last_error = "not connected yet"
        while True:
            with self.cond:
                if self.closing:
                    return
                self.generation += 1
                generation = self.generation
            try:
                assert self._channel is not None
                stream = self._channel.stream_stream(_METHOD, request_serializer=None, response_deserializer=None)
                call = stream(self._requests(generation), wait_for_ready=False,
                              timeout=None)
                self._call = call
                for data in call:
                    if self._on_response(data, generation):
                        backoff = settings.reconnect_backoff_s
                        down_since = time.monotonic()
                if self.closing:
                    return
                last_error = "the peer closed the stream"
            except grpc.RpcError as exc:
                if self.closing:
                    return
                last_error = f"{exc.code().name}: {exc.details()}" if hasattr(exc, "code") else str(exc)
            except SecureVFLError as exc:  # REFUSE or a malformed answer: fatal for this link
                self._fail(exc)
                return
            with self.cond:
                self.handshaken = -1
            self.last_error = last_error
            reason = _permanent_failure(last_error, self.peer, self.address, self.owner.party)
            if reason:  # permanent: retrying cannot make a certificate valid or a frame smaller
                self._fail(LinkRefusedError(self.peer, reason, reason))
                if "RESOURCE_EXHAUSTED" in last_error and "larger than max" in last_error.lower():
                    self._last_word(reason)
                return
            limit = settings.peer_timeout_s if self.ever_connected else settings.connect_timeout_s
            if time.monotonic() - down_since > limit:
                what = "lost" if self.ever_connected else "unreachable"
                self._fail(PeerLostError(self.peer, self.owner.party,
                                         f"{self.owner.party}: link to {self.peer} at {self.address} {what} for "
                                         f"{limit:g} s ({last_error})"))
                return
            self.stats.reconnects += int(self.ever_connected)
            time.sleep(backoff)
            backoff = min(backoff * 2, settings.max_backoff_s)

    def _last_word(self, reason: str) -> None:
        """Tell the peer's party why this link ends: its gRPC refused a frame, and only this side was told why.

        One short stream: HELLO, then ABORT with the reason; the peer stops at once, naming it, instead of
        reporting this party as lost after its peer timeout.
        """
        frames = [_hello(self.owner, self.peer), fr.encode_frame(fr.Frame(fr.Kind.ABORT, text=reason[:4000]))]
        try:
            assert self._channel is not None
            call = self._channel.stream_stream(_METHOD, request_serializer=None, response_deserializer=None)
            for _ in call(iter(frames), timeout=2):
                pass
        except grpc.RpcError:
            pass  # the peer is gone too: its own peer timeout reports this party

    def _on_response(self, data: bytes, generation: int) -> bool:
        """Handle one answer from the peer; True when it was a handshake."""
        frame = fr.decode_frame(data, max_chunk=4096)
        with self.cond:
            if frame.kind == fr.Kind.HELLO_ACK:
                if frame.seq < self.acked:  # it expects frames it acknowledged: another process of the peer
                    raise PeerRestartedError(self.peer, self.owner.party, (
                        f"{self.owner.party}: a new process of {self.peer} answered at {self.address} (it expects "
                        f"frame {frame.seq}; the one before acknowledged {self.acked}): {self.peer} restarted"))
                self._acknowledge(frame.seq)
                if frame.seq > self.next_seq:
                    raise ProtocolError(f"{self.peer} acknowledged frame {frame.seq - 1}, never sent")
                self.send_pos = frame.seq
                self.handshaken = generation
                self.ever_connected = True
                self.cond.notify_all()
                return True
            if frame.kind == fr.Kind.ACK:
                if frame.seq >= self.next_seq:
                    raise ProtocolError(f"{self.peer} acknowledged frame {frame.seq}, never sent")
                self._acknowledge(frame.seq + 1)
                return False
        if frame.kind == fr.Kind.REFUSE:
            raise LinkRefusedError(self.peer, frame.text)
        raise ProtocolError(f"{self.peer} answered with a {frame.kind.name} frame")

    def _acknowledge(self, upto: int) -> None:
        for seq in range(self.acked, min(upto, self.next_seq)):
            data = self.frames.pop(seq, None)
            if data is not None:
                self.unacked_bytes -= len(data)
        self.acked = max(self.acked, upto)
        self.probed = False
        self.cond.notify_all()

    def _fail(self, error: BaseException) -> None:
        with self.cond:
            if self.error is None:
                self.error = error
            self.cond.notify_all()
        self.owner.notify()


_HEARTBEAT = fr.encode_frame(fr.Frame(fr.Kind.HEARTBEAT))


def _hello(owner: GrpcTransport, peer: str) -> bytes:
    """The first frame of a stream ``owner`` opens to ``peer``: names, job fingerprint and link settings."""
    settings = owner.settings
    return fr.encode_frame(fr.Frame(fr.Kind.HELLO, src=owner.party, dst=peer, text=owner.fingerprint, job=owner.job,
                                    chunk_kb=settings.chunk_kb, max_message=settings.max_message_bytes,
                                    session=owner.session))


#: How long a closing link's stream may take to end by itself before it is cancelled.
POLITE_CLOSE_S = 1.0


def _end_stream(thread: threading.Thread, call: Any, polite_until: float | None = None) -> None:
    """Let a link's thread end its stream by itself (delivering a queued ABORT); cancel a stream that lingers.

    ``polite_until`` (a ``time.monotonic()`` deadline) is shared by the links a party closes together,
    so they linger in parallel, not one after the other (default: :data:`POLITE_CLOSE_S` from now).
    """
    until = time.monotonic() + POLITE_CLOSE_S if polite_until is None else polite_until
    thread.join(timeout=max(0.0, until - time.monotonic()))
    if thread.is_alive() and call is not None:
        call.cancel()
    thread.join(timeout=5)


def _oversized(detail: str, sender: str, receiver: str) -> str:
    """The gRPC detail "larger than max (N vs. M)" as a sentence naming sender, size and limit; "" if not that."""
    match = re.search(r"larger than max \((\d+) vs\. (\d+)\)", detail, re.IGNORECASE)
    if match is None:
        return ""
    size, limit = int(match.group(1)), int(match.group(2))
    return (f"{sender} sent a frame of {size:,} bytes, over {receiver}'s limit of {limit:,} bytes (gRPC's receive "
            "limit; set the same [network] chunk_kb for every party)")


def _permanent_failure(detail: str, peer: str, address: str, party: str, receiving: bool = False) -> str:
    """A readable reason, naming the side that failed, when a gRPC error cannot pass on retry; "" otherwise.

    ``party`` opened the link to ``peer``; gRPC's detail says which TLS check failed on this side, or
    which alert the peer's side sent when it rejected ``party``'s certificate. ``receiving``: the
    stream carries what ``peer`` sends ``party`` (a star's pull stream), not the reverse.
    """
    sender, receiver = (peer, party) if receiving else (party, peer)
    oversized = _oversized(detail, sender, receiver)
    if oversized:
        return oversized
    upper = detail.upper()
    if "HOSTNAME VERIFICATION" in upper or "PEER NAME" in upper:
        return (f"{party} rejected the certificate presented at {address} for {peer}: it does not name {peer!r} "
                "(name mismatch)")
    if "CERTIFICATE_VERIFY_FAILED" in upper or "CERTIFICATE VERIFY" in upper:
        if "EXPIRED" in upper:
            why = "it has expired (issue a new one from the federation CA)"
        elif "NOT YET VALID" in upper:
            why = "it is not valid yet (check both machines' clocks)"
        else:
            why = (f"it is not signed by the federation CA that {party} trusts (unknown CA: {peer}'s certificate or "
                   f"{party}'s [tls] ca comes from another federation)")
        return f"{party} rejected the certificate of {peer} at {address}: {why}"
    for alert, why in (("ALERT_UNKNOWN_CA", "not signed by the federation CA that it trusts (unknown CA)"),
                       ("ALERT_CERTIFICATE_EXPIRED", "expired"), ("ALERT_BAD_CERTIFICATE", "a bad certificate"),
                       ("ALERT_CERTIFICATE_REQUIRED", "no certificate")):
        if alert in upper:
            return f"{peer} at {address} rejected the certificate of {party}: {why}"
    if "LARGER THAN MAX" in upper:
        return (f"{peer} at {address} refused a frame from {party} as larger than its limit "
                "(set the same [network] chunk_kb for every party)")
    return ""  # anything else (a reset during the handshake, a proxy up before its server) may pass: retry

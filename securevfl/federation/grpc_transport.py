"""The network transport: one process per party, gRPC streams between them, mutual TLS.

:class:`GrpcTransport` implements :class:`~securevfl.federation.transport.Transport` for *one*
local party, so the runtime and the method code are the same as in the threaded simulation.

Links. Every party runs a gRPC server on its address. For each peer P it opens one bidirectional
stream to P's server and sends its envelopes to P on it as :mod:`~securevfl.federation.frames`
(raw bytes, no protobuf); P answers with acknowledgements. So the directed link A -> B is A's
stream to B, and each party receives on its server. Large payloads are cut into ``chunk_kb``
chunks (gRPC's message limit never applies to a whole payload); ``max_message_mb`` bounds one
message with a clear error at the sender and a :class:`ProtocolError` at the receiver, which names
the sender and both limits and refuses the link at once (the sender sees that refusal too). The
HELLO carries the sender's ``chunk_kb`` and ``max_message_mb``: parties whose ``chunk_kb`` differ
are refused at the handshake with both values. A single frame above the receiver's limit (one chunk
and its header, :func:`frame_limit`) is refused at once at both ends naming its size; gRPC itself
refuses one above about twice that, and the sender, told by gRPC, names it too and tells the
receiver in an ABORT on a fresh stream.

Star topology (``hub``: the active party). Only the hub runs a server. A non-hub party opens two
streams to it: ``Exchange`` carries what it sends (as above) and ``Pull`` what it receives: the hub
answers the party's HELLO with its own (checked by the party as a server checks one), the party
answers HELLO_ACK with its next expected number, then the hub's frames flow as responses and the
party acknowledges them on the request side. The sending state machine (:class:`_OutLink`:
sequencing, resend buffer, window, heartbeats) and the receiving one (:class:`_Inbox`,
:meth:`GrpcTransport._on_frame`) are the same for both; only the driver differs. A message between
two non-hub parties is sealed for its destination (:mod:`securevfl.federation.e2e`, with session
keys signed by the parties' certificates and distributed through the hub), sent to the hub with a
relay tag naming the destination, forwarded by the hub on its link to the destination without
reaching the hub's role, and opened there: the runtime sees a normal P1 -> P2 message. The hub
sends its FIN to a party only once every other party finished (until then it may still relay to it).
A relayed message that does not open (changed, replayed, reordered, dropped; relabelled: it opens
under another party's key), or a relayed party's sealed end-of-messages marker still missing when the
hub's FIN arrives (a dropped last message), is a :class:`RelayError` naming the hub, and fails every
relayed link of the receiving party at once: the honest sender is never the one blamed.

Bounds. What one party can make another hold is bounded per link: the sender keeps at most
``send_window_mb`` unacknowledged; the receiver holds at most ``recv_buffer_mb`` (default
``max_message_mb``; plus one chunk) of whole messages its role has not taken yet and the message in
progress. Beyond that its server stops reading the link (back-pressure): the sender's window fills
and its ``send`` blocks until the receiving role catches up; a message is never dropped. The server
has ``STREAMS_PER_PEER`` threads per peer and direction plus 4 and refuses a stream beyond them at
once (``RESOURCE_EXHAUSTED``, retried by the client) instead of queueing it: a stream that sends no
HELLO within ``HELLO_TIMEOUT_S`` is dropped, a peer (by its certificate) holds at most
``STREAMS_PER_PEER`` streams per direction (``Exchange``; ``Pull`` too at a star hub), its newest
replacing its oldest other than the one carrying its live link, and a reconnecting peer's new stream
(same session) ends its old one. Every
:class:`NetworkSettings` number lies in a sane range (a :class:`ConfigError` names the key and the
range).

Authentication. With TLS (the default and the only choice off loopback) the server requires a
client certificate from the federation CA, and the client verifies the server's certificate against
the same CA with the *peer's party name* as the expected host name (``ssl_target_name_override``), so
a certificate for another party, or from another CA, fails the handshake before any frame flows. The
server also checks that the party a stream claims to come from is the one its client certificate
names. The first frame (HELLO) carries the job fingerprint; a mismatch is refused with the keys that
differ, before any data frame. It also carries the sending process's random session id: a reconnect
repeats it, and a HELLO with another id while a link from that party was accepted (a second process
of the party: a batch ``--predict`` next to a running ``--serve``) is refused. Once a party's link
is established, a refused HELLO is refused to its stream alone and the live link goes on; before
that, it is charged to the party the client *certificate* names too (its link fails at this party,
so a job mismatch is seen at both ends), and so it always is when the certificate's party claims
another name. It is never charged to the party the HELLO merely claims, so a forged HELLO cannot
break an honest party's link; on plaintext (loopback) links a refused HELLO is charged to nobody.
A failed TLS handshake is reported by the side that failed it, saying why (unknown CA, name
mismatch, expired, not yet valid) as far as gRPC's error detail tells.

Logging. gRPC's C core prints its own lines (``Handshake failed ...``) to stderr; importing this
module sets ``GRPC_VERBOSITY=NONE`` unless the variable is set already or grpc was imported before,
so a party's terminal shows only securevfl's one-line errors (``securevfl --debug`` sets ``INFO``).

Faults. Frames carrying data are numbered per link; the receiver acknowledges them cumulatively
(every 32 frames or 8 MiB, on FIN and when the sender idles) and drops duplicates; the sender
keeps every unacknowledged frame and, after a dropped connection, reconnects with exponential
backoff and resends from the receiver's next expected number: no loss, duplication or
reordering. Idle links carry heartbeats; a peer from which nothing arrives for ``peer_timeout_s``
is reported as lost (:class:`PeerLostError`, naming it). A failing party sends ABORT to every
peer, which then stops at once. A malformed frame is a :class:`ProtocolError` naming the peer,
raised in the receiving party's role, never a crash.
"""

from __future__ import annotations

import os
import re
import secrets
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

if "grpc" not in sys.modules:  # the C core reads it once, at start: keep its log lines off the terminal
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")

import grpc  # noqa: E402

from securevfl.errors import (  # noqa: E402
    ConfigError,
    PeerFinishedError,
    PeerTimeoutError,
    ProtocolError,
    RunAborted,
    SecureVFLError,
)
from securevfl.federation import frames as fr  # noqa: E402
from securevfl.federation.network import NetworkSettings, TlsCredentials, is_loopback  # noqa: E402
from securevfl.federation.transport import Envelope, Transport  # noqa: E402

_METHOD = "/securevfl.Link/Exchange"
#: Star topology: a party without a server opens this stream to the hub to *receive* on it (hub -> party).
_PULL_METHOD = "/securevfl.Link/Pull"
#: A relayed message's tag: RELAY + the other end's name + SEP + the original tag (see :func:`relay_tag`).
RELAY = "\x1e"
_SEP = "\x1f"
_RELAY_FIN = RELAY + "fin"  # the sender's role returned: nothing more on this relayed link (sealed)
_RELAY_BUNDLE = RELAY + "bundle"  # the sender's signed session key (see securevfl.federation.e2e)
_RELAY_LOST = RELAY + "lost"  # from the hub: the party named as source is lost (the hub alone can see it)
#: The receiver acknowledges cumulatively: after this many frames or bytes, on FIN and on a heartbeat.
ACK_EVERY_FRAMES = 32
ACK_EVERY_BYTES = 8 * 1024 * 1024
_SERVICE = "securevfl.Link"
#: A stream must send its HELLO within this many seconds, or the server drops it (and frees its thread).
HELLO_TIMEOUT_S = 5.0
#: Streams one authenticated peer may hold open at a party's server at once; a newer one replaces the oldest.
STREAMS_PER_PEER = 2
_MIB = 1024 * 1024


class PeerLostError(ProtocolError):
    """Nothing arrived from a peer for the peer timeout, or its link could not be re-established."""

    def __init__(self, peer: str, party: str, detail: str):
        self.peer = peer
        self.party = party
        super().__init__(detail)


class LinkRefusedError(SecureVFLError, ConnectionError):
    """A peer refused the link (wrong party, job mismatch) or its TLS handshake failed."""

    def __init__(self, peer: str, reason: str, message: str = ""):
        self.peer = peer
        self.reason = reason
        super().__init__(message or f"link to {peer} refused: {reason}")


class RelayError(ProtocolError):
    """Star topology: the hub changed, relabelled, replayed, reordered or dropped a message it relays.

    ``peer`` is the hub (the party to blame), ``party`` the one that noticed; the senders are honest:
    their messages reach the hub over their authenticated links and are sealed end to end.
    """

    def __init__(self, peer: str, party: str, detail: str):
        self.peer = peer
        self.party = party
        super().__init__(detail)


class _Refusal(ProtocolError):
    """A frame the receiver refuses for a reason both ends should read as is (not "malformed")."""


@dataclass
class LinkStats:
    """Bytes and frames that crossed one directed link, as gRPC messages (before HTTP/2 and TLS framing).

    Star topology: a link to or from the hub counts every frame on it, its own messages in
    ``payload_bytes`` and the (sealed) messages it relays for two other parties in ``relayed_bytes``;
    the logical link between those two parties counts only their ``payload_bytes``, as in a mesh.
    """

    frames: int = 0
    frame_bytes: int = 0
    payload_bytes: int = 0
    resent_frames: int = 0
    reconnects: int = 0
    relayed_bytes: int = 0  # payload bytes of relayed messages (star topology), not in payload_bytes


def relay_tag(party: str, tag: str) -> str:
    """The tag of a relayed message: to the hub it names the destination, from the hub the source."""
    return f"{RELAY}{party}{_SEP}{tag}"


def parse_relay_tag(tag: str) -> tuple[str, str]:
    """``(party, original tag)`` of a relay tag; :class:`ProtocolError` if malformed."""
    party, sep, inner = tag[len(RELAY):].partition(_SEP)
    if not tag.startswith(RELAY) or not sep or not party:
        raise ProtocolError(f"malformed relay tag {tag!r}")
    return party, inner


def frame_limit(settings: NetworkSettings) -> int:
    """The largest frame a party takes from a peer: one ``chunk_kb`` chunk and the frame's header."""
    return settings.chunk_bytes + 4096


def _grpc_limit(settings: NetworkSettings) -> int:
    """The receive limit given to gRPC, above :func:`frame_limit`.

    A frame between the two is refused by the receiving party itself, naming its size at both ends;
    one above it never reaches the party's code (the sender learns it from gRPC).
    """
    return 2 * (settings.chunk_bytes + 65536)


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


# ------------------------------------------------------------------ the sending side of one link


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
        settings = self.settings
        for i, part in enumerate(chunks):
            with self.cond:
                blocked = time.monotonic()
                while self.unacked_bytes > window and self.error is None and not self.owner.abort_reason:
                    if time.monotonic() - blocked > settings.recv_timeout_s:  # the peer is alive but takes nothing
                        raise PeerTimeoutError(self.peer, self.owner.party, settings.recv_timeout_s, (
                            f"{self.owner.party} waited {settings.recv_timeout_s:g} s for {self.peer} to take its "
                            f"messages: {self.peer} holds its recv_buffer_mb unread and this party's "
                            "send_window_mb is full"))
                    self.cond.wait(0.1)  # back-pressure: the peer has not acknowledged enough yet
                if self.error is not None:
                    raise self.error
                self._append(fr.encode_data(self.next_seq, tag, depth, i, len(chunks), len(payload), part))  # no copy
        if relayed:
            self.stats.relayed_bytes += len(payload)
        else:
            self.stats.payload_bytes += len(payload)

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
                self.cond.notify_all()
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


# ------------------------------------------------------------------ the receiving side


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
    peer_max_message: int = 0  # the peer's max_message (bytes) from its HELLO; 0 if it did not say
    session: str | None = None  # the session id of the peer process whose HELLO this party accepted first
    context: Any = None  # the server context of the stream now carrying this link
    relayed: deque[tuple[str, int, bytes]] = field(default_factory=deque)  # relay messages to forward or open
    relay_lock: threading.Lock = field(default_factory=threading.Lock)  # one thread forwards/opens, in order

    def held_bytes(self) -> int:
        """What the link holds: whole messages not yet taken by recv and the message in progress."""
        return self.queued_bytes + (self.reassembly.pending_bytes if self.reassembly is not None else 0)


class _PullLink:
    """Star topology, a party without a server: its stream to the hub on which it *receives* (hub -> party).

    The party dials the hub's ``Pull`` method; the hub answers with its HELLO (checked here as a server
    checks one), this party answers HELLO_ACK with its next expected number, then data frames arrive
    as responses and this party acknowledges them on the request side. After a drop it re-dials with
    backoff and the hub resends from the next expected number.
    """

    def __init__(self, owner: GrpcTransport, peer: str, address: str) -> None:
        self.owner, self.peer, self.address = owner, peer, address
        self.settings = owner.settings
        self.cond = threading.Condition()
        self.queue: deque[bytes] = deque()  # acknowledgements (and a REFUSE) to send
        self.generation = 0
        self.closing = False
        self.last_error = ""
        self.stats = LinkStats()
        self._call: Any = None
        self._channel = _open_channel(owner, peer, address, receive=_grpc_limit(self.settings))
        self._thread = threading.Thread(target=self._run, name=f"pull-{peer}->{owner.party}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def push(self, data: bytes) -> None:
        with self.cond:
            self.queue.append(data)
            self.cond.notify_all()

    def close(self) -> None:
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        _end_stream(self._thread, self._call)
        self._channel.close()

    def _requests(self, generation: int, queue: deque[bytes]) -> Iterator[bytes]:
        owner = self.owner
        yield _hello(owner, self.peer)
        while True:  # this stream's own queue: a stale stream's iterator never takes the new stream's frames
            with self.cond:
                while not queue:  # closing: what is queued (the acknowledgement of a FIN) goes first
                    if self.generation != generation or self.closing:
                        return
                    self.cond.wait(0.5)
                data = queue.popleft()
            self.stats.frames += 1
            self.stats.frame_bytes += len(data)
            yield data

    def _run(self) -> None:
        settings = self.settings
        owner = self.owner
        inbox = owner._inboxes[self.peer]
        backoff = settings.reconnect_backoff_s
        down_since = time.monotonic()
        ever = False
        while True:
            with self.cond:
                if self.closing:
                    return
                self.generation += 1
                generation = self.generation
                self.queue = deque()
            try:
                stream = self._channel.stream_stream(_PULL_METHOD, request_serializer=None,
                                                     response_deserializer=None)
                call = stream(self._requests(generation, self.queue), wait_for_ready=False, timeout=None)
                self._call = call
                if owner._pull(self, call):
                    ever = True
                    backoff = settings.reconnect_backoff_s
                    down_since = time.monotonic()
                if self.closing or inbox.finished:
                    return
                last_error = "the peer closed the stream"
            except grpc.RpcError as exc:
                if self.closing or inbox.finished:
                    return
                last_error = f"{exc.code().name}: {exc.details()}" if hasattr(exc, "code") else str(exc)
            except SecureVFLError as exc:  # REFUSE or a malformed frame: fatal for this link
                owner._fail_inbox(self.peer, exc)
                return
            self.last_error = last_error
            reason = _permanent_failure(last_error, self.peer, self.address, owner.party, receiving=True)
            if reason:
                owner._fail_inbox(self.peer, LinkRefusedError(self.peer, reason, reason))
                return
            limit = settings.peer_timeout_s if ever else settings.connect_timeout_s
            if time.monotonic() - down_since > limit:
                what = "lost" if ever else "unreachable"
                owner._fail_inbox(self.peer, PeerLostError(
                    self.peer, owner.party, f"{owner.party}: link from {self.peer} at {self.address} {what} for "
                                            f"{limit:g} s ({last_error})"))
                return
            self.stats.reconnects += int(ever)
            time.sleep(backoff)
            backoff = min(backoff * 2, settings.max_backoff_s)


class _RelayLink:
    """Star topology: what a party sends another non-hub party, sealed end to end and relayed by the hub."""

    def __init__(self, owner: GrpcTransport, peer: str, hub_link: _OutLink) -> None:
        self.owner, self.peer, self.hub_link = owner, peer, hub_link
        self.cond = hub_link.cond
        self.handshaken = 0
        self.stats = LinkStats()
        self.lock = threading.Lock()  # sealing order is sending order: the receiver wants the exact next counter

    @property
    def error(self) -> BaseException | None:
        return self.hub_link.error

    def send(self, tag: str, depth: int, payload: bytes) -> None:
        settings = self.owner.settings
        if len(payload) > settings.max_message_bytes:
            raise ProtocolError(f"{self.owner.party} cannot send a {len(payload):,}-byte {tag!r} message to "
                                f"{self.peer}: above max_message_mb = {settings.max_message_mb:g}")
        with self.lock:
            sealed = self.owner._seal(self.peer, tag, payload)
            self.hub_link.send(relay_tag(self.peer, tag), depth, sealed, relayed=True)
        self.stats.payload_bytes += len(payload)  # the logical link's codec bytes; its frames are the hub link's

    def finish(self) -> None:
        try:
            self.send(_RELAY_FIN, 0, b"")
        except SecureVFLError:
            pass  # the hub link failed: the peer learns it from the hub

    def abort(self, reason: str) -> None:
        pass  # the ABORT to the hub reaches every party

    def drain(self, timeout: float) -> bool:
        return True

    def flush_urgent(self, timeout: float) -> None:
        pass

    def start(self) -> None:
        pass

    def begin_close(self) -> None:
        pass

    def close(self, polite_until: float | None = None) -> None:
        pass


@dataclass
class _Pair:
    """Star topology, at a non-hub party: the end-to-end state with one other non-hub party."""

    channel: Any = None  # e2e.PairChannel once the peer's bundle verified; unused in plaintext federations
    ready: bool = False
    error: BaseException | None = None


class GrpcTransport(Transport):
    """The network side of one party: a gRPC server for what it receives, one stream per peer for what it sends."""

    def __init__(self, party: str, addresses: Mapping[str, str | None], *, tls: TlsCredentials | None,
                 fingerprint: str = "", job: Mapping[str, Any] | None = None,
                 settings: NetworkSettings | None = None, insecure: bool = False,
                 differences: Callable[[Any, Any], list[str]] | None = None, hub: str | None = None) -> None:
        if hub is not None and (hub not in addresses or not addresses[hub]):
            raise ConfigError(f"the hub {hub!r} of a star federation needs an address; parties are {sorted(addresses)}")
        if party not in addresses or (hub is None and not addresses[party]):
            raise ConfigError(f"{party!r} has no address; parties are {sorted(addresses)}")
        if tls is None:
            if not insecure:
                raise ConfigError("the network transport needs TLS credentials (plaintext only with insecure=True)")
            off = sorted(p for p, a in addresses.items() if a and not is_loopback(a))
            if off:
                raise ConfigError(f"plaintext (insecure) links are allowed on loopback only; not loopback: {off}")
        self.party = party
        self.addresses = {p: a or "" for p, a in addresses.items()}
        self.peers = tuple(p for p in addresses if p != party)
        #: Star topology: the one party that listens (the active party); None in a full mesh.
        self.hub = hub
        self.is_hub = hub == party
        self._relayed = frozenset(p for p in self.peers if hub is not None and not self.is_hub and p != hub)
        self._pairs: dict[str, _Pair] = {p: _Pair() for p in self._relayed}
        self._session: Any = None  # e2e session key (star, a non-hub party with TLS)
        self._pulls: dict[str, _PullLink] = {}
        self._hub_finished = False
        self._fin_sent: set[str] = set()
        self.tls = tls
        self.fingerprint = fingerprint
        #: This process's id in its HELLOs: a reconnect repeats it, a second process of the party has another.
        self.session = secrets.token_hex(8)
        self.job = dict(job or {})
        self.settings = settings or NetworkSettings()
        self._differences = differences
        self._cond = threading.Condition()
        self._inboxes = {p: _Inbox() for p in self.peers}
        self.abort_reason: str | None = None
        self._server: grpc.Server | None = None
        self._links: dict[str, Any] = {}  # _OutLink, or _RelayLink for a relayed peer
        self._streams: dict[tuple[str, str], deque[Any]] = {}  # per (peer, direction), oldest first
        self.received_frame_bytes: dict[str, int] = dict.fromkeys(self.peers, 0)
        self.started_at = time.monotonic()

    # -- lifecycle

    def start(self) -> GrpcTransport:
        """Bind the server (not at a star's non-hub party) and start connecting to every peer (returns at once)."""
        if self.hub is not None and not self.is_hub:
            return self._start_spoke()
        settings = self.settings
        handler = grpc.method_handlers_generic_handler(_SERVICE, {
            "Exchange": grpc.stream_stream_rpc_method_handler(self._serve, request_deserializer=None,
                                                              response_serializer=None),
            "Pull": grpc.stream_stream_rpc_method_handler(self._serve_pull, request_deserializer=None,
                                                          response_serializer=None)})
        # The hub also serves one pull stream per peer (STREAMS_PER_PEER of each kind per certificate).
        workers = STREAMS_PER_PEER * len(self.peers) * (2 if self.is_hub else 1) + 4
        # Every stream holds a thread for its life: beyond ``workers`` a stream is refused at once
        # (RESOURCE_EXHAUSTED, the client retries) instead of waiting for a thread that never frees.
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"rx-{self.party}"),
                             handlers=(handler,), maximum_concurrent_rpcs=workers,
                             options=[("grpc.max_receive_message_length", _grpc_limit(settings)),
                                      ("grpc.so_reuseport", 0),
                                      ("grpc.keepalive_permit_without_calls", 1),
                                      ("grpc.http2.min_ping_interval_without_data_ms", 1000)])
        address = self.addresses[self.party]
        try:  # the pinned grpcio raises RuntimeError where older ones returned 0
            if self.tls is None:
                port = server.add_insecure_port(address)
            else:
                credentials = grpc.ssl_server_credentials([(self.tls.private_key, self.tls.cert_chain)],
                                                          root_certificates=self.tls.root_ca,
                                                          require_client_auth=True)
                port = server.add_secure_port(address, credentials)
        except RuntimeError:
            port = 0
        if port == 0:
            raise ConfigError(f"{self.party} cannot listen on {address}: the address is in use or not on this "
                              "machine (its [parties] address in the federation file)")
        server.start()
        self._server = server
        self.started_at = time.monotonic()
        for peer in self.peers:
            link = _OutLink(self, peer, self.addresses[peer], served=self.is_hub)
            self._links[peer] = link
            link.start()
        return self

    def _start_spoke(self) -> GrpcTransport:
        """Star topology, a party without a server: both directions with the hub on streams this party opens."""
        assert self.hub is not None
        self.started_at = time.monotonic()
        hub_link = _OutLink(self, self.hub, self.addresses[self.hub])
        self._links[self.hub] = hub_link
        pull = _PullLink(self, self.hub, self.addresses[self.hub])
        self._pulls[self.hub] = pull
        for peer in self._relayed:
            self._links[peer] = _RelayLink(self, peer, hub_link)
        if self.tls is not None:
            from securevfl.federation import e2e

            self._session = e2e.new_session_key()
            bundle = e2e.make_bundle(self.tls.cert_chain, self.tls.private_key, self.fingerprint, self.party,
                                     self._session)
            for peer in sorted(self._relayed):  # queued now, sent once the hub link is up
                hub_link.send(relay_tag(peer, _RELAY_BUNDLE), 0, bundle, relayed=True)
        else:
            for pair in self._pairs.values():
                pair.ready = True  # plaintext federation: relayed in clear (loopback trials only)
        hub_link.start()
        pull.start()
        return self

    def wait_ready(self, timeout: float | None = None) -> None:
        """Block until every outgoing link completed its handshake; raise the first link failure."""
        limit = self.settings.connect_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + limit
        for peer, link in self._links.items():
            if peer in self._relayed:
                continue
            with link.cond:
                while link.handshaken < 0 and link.error is None:
                    refused = self._inboxes[peer].error
                    if refused is not None:
                        raise refused
                    if self.abort_reason is not None:
                        raise RunAborted(self.abort_reason)
                    left = deadline - time.monotonic()
                    if left <= 0:
                        hint = (f" ({peer} closed the connection during the handshake: {peer} probably rejected the "
                                f"certificate of {self.party}; is it signed by the federation CA?)"
                                if "Socket closed" in link.last_error and self.tls is not None else
                                f" ({peer} refused the stream: every stream slot of its server is taken, by other "
                                f"connections to {peer})" if "Concurrent RPC limit" in link.last_error else
                                f" (last error: {link.last_error})" if link.last_error else "")
                        raise PeerLostError(peer, self.party, f"{self.party}: no handshake with {peer} at "
                                                              f"{link.address} within {limit:g} s{hint}")
                    link.cond.wait(min(left, 0.1))
                if link.error is not None:
                    raise link.error
        for peer in self._pulls:  # star: the hub's stream to this party is up too
            inbox = self._inboxes[peer]
            with self._cond:
                while not inbox.hello_seen and inbox.error is None:
                    if self.abort_reason is not None:
                        raise RunAborted(self.abort_reason)
                    if time.monotonic() > deadline:
                        pull = self._pulls[peer]
                        raise PeerLostError(peer, self.party, f"{self.party}: no handshake from {peer} at "
                                                              f"{pull.address} within {limit:g} s"
                                            + (f" (last error: {pull.last_error})" if pull.last_error else ""))
                    self._cond.wait(0.1)
                if inbox.error is not None:
                    raise inbox.error

    def close(self) -> None:
        """Deliver what is queued (bounded by the peer timeout), wait for peers to finish, stop."""
        timeout = self.settings.peer_timeout_s
        if self.abort_reason is None:
            deadline = time.monotonic() + timeout
            for link in self._links.values():
                link.drain(max(0.0, deadline - time.monotonic()))
            with self._cond:  # peers may still need our acknowledgements of their last frames
                while (self.abort_reason is None and not all(i.finished or i.error for i in self._inboxes.values())
                       and (time.monotonic() < deadline or self.is_hub and self._spokes_alive(timeout))):
                    self._cond.wait(0.05)  # the hub relays for the other parties until they finish
            if self.is_hub:  # what it forwarded meanwhile, and its FIN to a party that another left waiting
                self._report_unfinished()  # before the FIN: a party seeing it checks that every other one finished
                self._fin_to_spokes(force=True)
                deadline = time.monotonic() + timeout
                for link in self._links.values():
                    link.drain(max(0.0, deadline - time.monotonic()))
        else:  # the ABORT goes out on every link at once: 2 s in all, not 2 s per link still connecting
            deadline = time.monotonic() + 2.0
            for link in self._links.values():
                link.flush_urgent(max(0.0, deadline - time.monotonic()))
        for link in self._links.values():  # every stream starts ending now; they linger in parallel
            link.begin_close()
        polite_until = time.monotonic() + POLITE_CLOSE_S
        for link in self._links.values():
            link.close(polite_until)
        for pull in self._pulls.values():
            pull.close()
        if self._server is not None:
            self._server.stop(grace=0.5).wait(2)

    def _spokes_alive(self, timeout: float) -> bool:
        now = time.monotonic()
        return any(not i.finished and i.error is None and now - i.last_seen < timeout for i in self._inboxes.values())

    def notify(self) -> None:
        with self._cond:
            self._cond.notify_all()

    # -- Transport

    def send(self, envelope: Envelope) -> None:
        if envelope.src != self.party:
            raise ProtocolError(f"{self.party} cannot send as {envelope.src}")
        link = self._links.get(envelope.dst)
        if link is None:
            raise ProtocolError(f"no link {envelope.src}->{envelope.dst}; peers are {list(self.peers)}")
        if not isinstance(envelope.payload, bytes):
            raise ProtocolError(f"{self.party} can only send encoded bytes over the network")
        link.send(envelope.tag, envelope.depth, envelope.payload)

    def finish(self, party: str) -> None:
        if party != self.party:
            return
        if self.is_hub:  # the hub may still relay to a party: its FIN to it waits until the others finished
            self._hub_finished = True
            self._fin_to_spokes()
            return
        for peer in sorted(self._links, key=lambda p: p not in self._relayed):  # relayed FINs first, on the hub link
            self._links[peer].finish()

    def _fin_to_spokes(self, force: bool = False) -> None:
        """The hub's FIN to a party, once its role returned and no other party can send that party anything more."""
        with self._cond:
            if not self._hub_finished:
                return
            done = {p for p, i in self._inboxes.items() if i.finished or i.error is not None}
            due = [p for p in self.peers if p not in self._fin_sent and (force or done >= set(self.peers) - {p})]
            self._fin_sent.update(due)
        for peer in due:
            self._links[peer].finish()

    def abort(self, reason: str) -> None:
        """Tell every peer that this party failed, so they stop at once."""
        with self._cond:
            self.abort_reason = self.abort_reason or reason
            self._cond.notify_all()
        for link in self._links.values():
            link.abort(reason)

    def recv(self, dst: str, src: str, abort: threading.Event, timeout: float | None = None) -> Envelope:
        if dst != self.party:
            raise ProtocolError(f"{self.party} cannot receive for {dst}")
        inbox = self._inboxes.get(src)
        if inbox is None:
            raise ProtocolError(f"no link {src}->{dst}; peers are {list(self.peers)}")
        link = self._links[src]
        carrier = self._inboxes[self.hub] if src in self._relayed and self.hub is not None else inbox
        started = time.monotonic()
        peer_timeout = self.settings.peer_timeout_s
        with self._cond:
            while True:
                if abort.is_set():
                    raise RunAborted(f"{dst} stopped waiting for {src}: the run was aborted")
                if inbox.envelopes:
                    envelope = inbox.envelopes.popleft()
                    inbox.queued_bytes -= len(envelope.payload) if isinstance(envelope.payload, bytes) else 0
                    self._cond.notify_all()  # the link's server thread may wait for room in the buffer
                    return envelope
                if inbox.error is not None:
                    raise inbox.error
                if self.abort_reason is not None:
                    raise RunAborted(self.abort_reason)
                if inbox.finished:
                    raise PeerFinishedError(src, dst)
                if link.error is not None:
                    raise link.error
                if carrier.error is not None:  # relayed: the hub's link failed, or the hub tampered
                    raise carrier.error
                now = time.monotonic()
                silent_limit = peer_timeout if carrier.hello_seen else max(peer_timeout,
                                                                           self.settings.connect_timeout_s)
                if now - max(carrier.last_seen, self.started_at) > silent_limit:
                    raise self._silent(src, silent_limit)
                if timeout is not None and now - started >= timeout:
                    raise PeerTimeoutError(src, dst, timeout, f"{dst} waited {timeout:g} s for a message from {src}"
                                           + (f" (relayed by {self.hub}: {src} sent none, or {self.hub} withholds it)"
                                              if src in self._relayed else ""))
                self._cond.wait(0.1)

    def _silent(self, src: str, limit: float) -> PeerLostError:
        """Nothing arrived on the link that carries ``src``'s messages: ``src``'s own, or (relayed) the hub's."""
        if src in self._relayed and self.hub is not None:
            return PeerLostError(self.hub, self.party, f"{self.party}: nothing from {self.hub} (which relays {src}'s "
                                                       f"messages) for {limit:g} s (its process stopped or the "
                                                       "network is down)")
        return PeerLostError(src, self.party, f"{self.party}: nothing from {src} for {limit:g} s "
                                              "(its process stopped or the network is down)")

    # -- the server side: one call per incoming stream

    def _serve(self, requests: Iterator[bytes], context: grpc.ServicerContext,
               pull: bool = False) -> Iterator[bytes]:
        """One incoming stream: at most ``STREAMS_PER_PEER`` per authenticated peer and direction, a HELLO in time."""
        certified = self._certified(context)
        key = (certified or "", "pull" if pull else "push")
        if certified is not None:  # a newer stream from the same peer replaces its oldest: one thread each
            with self._cond:
                streams = self._streams.setdefault(key, deque())
                streams.append(context)
                live = self._live_context(certified, pull)  # the stream carrying the live link is never the one
                stale = [c for c in streams if c is not live][:max(0, len(streams) - STREAMS_PER_PEER)]
                for old in stale:
                    streams.remove(old)
            for old in stale:
                old.cancel()
        timer = threading.Timer(HELLO_TIMEOUT_S, context.cancel)  # a stream that sends no HELLO frees its thread
        timer.daemon = True
        timer.start()
        try:
            yield from (self._pull_exchange if pull else self._exchange)(requests, context, timer, certified)
        finally:
            timer.cancel()
            if certified is not None:
                with self._cond:
                    streams = self._streams.get(key, deque())
                    if context in streams:
                        streams.remove(context)

    def _live_context(self, peer: str, pull: bool) -> Any:
        """The server stream carrying the link with ``peer`` in one direction, or None (the caller holds the lock)."""
        if pull:
            return getattr(self._links.get(peer), "context", None)
        return self._inboxes[peer].context

    def _serve_pull(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        """Star topology: a party without a server opens this stream to receive what this party (the hub) sends it."""
        return self._serve(requests, context, pull=True)

    def _refuse(self, certified: str | None, claimed: str, refusal: str) -> bytes:
        """Refuse a stream's HELLO: the REFUSE frame to answer it with.

        Once this party accepted a stream from the party the HELLO names, its link is live and the refusal
        goes to this stream alone (a second process of that party, started with another phase or job, or
        a duplicate, never ends the live session). Before that, this party's link with the party its
        *certificate* names fails too, so a job mismatch is seen at both ends at once; and so it does
        when a certificate's party claims another name (a forgery, never a second process). A claim
        alone (a plaintext stream) is charged to nobody.
        """
        with self._cond:
            inbox = self._inboxes.get(claimed)
            live = inbox is not None and inbox.session is not None
            if certified is not None and (certified != claimed or self._inboxes[certified].session is None):
                self._inboxes[certified].error = LinkRefusedError(
                    certified, refusal, f"{self.party} refused the link from {certified}: {refusal}")
                self._cond.notify_all()
        if live and certified in (None, claimed):
            refusal += (f" ({self.party} keeps its live link from {claimed}: this stream alone is refused; is a "
                        f"second process of {claimed} running?)")
        return fr.encode_frame(fr.Frame(fr.Kind.REFUSE, text=refusal[:60000]))

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
        return f"another process of {hello.src} (another session) is connected to {self.party}"

    def _pull_exchange(self, requests: Iterator[bytes], context: grpc.ServicerContext, timer: threading.Timer,
                       certified: str | None) -> Iterator[bytes]:
        try:
            first = next(requests)
        except (StopIteration, grpc.RpcError):
            return
        timer.cancel()
        try:
            hello = fr.decode_frame(first, max_chunk=self.settings.chunk_bytes)
        except ProtocolError as exc:
            yield fr.encode_frame(fr.Frame(fr.Kind.REFUSE, text=f"first frame is not a HELLO: {exc}"))
            return
        refusal = self._check_hello(hello, context)
        if not refusal and not self.is_hub:
            refusal = f"{self.party} is not the hub of a star federation: it sends on its own streams"
        refusal = refusal or self._session_refusal(hello)
        if refusal:
            yield self._refuse(certified, hello.src, refusal)
            return
        with self._cond:
            self._inboxes[hello.src].peer_max_message = hello.max_message
        yield from self._links[hello.src].serve(requests, context)

    def _pull(self, pull: _PullLink, call: Any) -> bool:
        """Read one pull stream from the hub (star, a non-hub party); True once its handshake passed."""
        peer, settings = pull.peer, self.settings
        inbox = self._inboxes[peer]
        responses = iter(call)
        try:
            first = next(responses)
        except StopIteration:
            return False
        hello = fr.decode_frame(first, max_chunk=settings.chunk_bytes)
        if hello.kind == fr.Kind.REFUSE:
            raise LinkRefusedError(peer, hello.text)
        refusal = self._check_hello(hello, None)
        if not refusal and hello.src != peer:
            refusal = f"the stream from {peer} claims to come from {hello.src}"
        refusal = refusal or self._session_refusal(hello)
        if refusal:
            pull.push(fr.encode_frame(fr.Frame(fr.Kind.REFUSE, text=refusal)))
            raise LinkRefusedError(peer, refusal, f"{self.party} refused the link from {peer}: {refusal}")
        bound = settings.recv_buffer_bytes
        generation, expected, _ = self._accept_hello(inbox, hello)
        pull.push(fr.encode_frame(fr.Frame(fr.Kind.HELLO_ACK, seq=expected)))
        for data in responses:
            with self._cond:
                if inbox.generation != generation:
                    return True
                self.received_frame_bytes[peer] += len(data)
                inbox.last_seen = time.monotonic()
            try:
                self._check_frame_size(peer, data)
                frame = fr.decode_frame(data, max_chunk=settings.chunk_bytes)
                ack = self._on_frame(peer, inbox, frame, pull.push)
            except _Refusal as exc:
                pull.push(fr.encode_frame(fr.Frame(fr.Kind.REFUSE, text=str(exc))))
                raise ProtocolError(str(exc)) from None
            except ProtocolError as exc:
                pull.push(fr.encode_frame(fr.Frame(fr.Kind.REFUSE, text=f"malformed frame: {exc}")))
                raise ProtocolError(f"{self.party} received a malformed frame from {peer}: {exc}") from None
            self._after_frame(peer, inbox)
            if ack is not None:
                pull.push(ack)
            with self._cond:  # back-pressure: stop reading while the link holds recv_buffer_mb
                if inbox.envelopes and inbox.held_bytes() >= bound:
                    inbox.held_back += 1
                while (inbox.envelopes and inbox.held_bytes() >= bound and inbox.generation == generation
                       and self.abort_reason is None and not pull.closing):
                    inbox.last_seen = time.monotonic()
                    self._cond.wait(0.1)
        return True

    def _fail_inbox(self, peer: str, error: BaseException) -> None:
        with self._cond:
            inbox = self._inboxes[peer]
            if inbox.error is None and not inbox.finished:
                inbox.error = error
            self._cond.notify_all()

    # -- star topology: relaying between two non-hub parties

    def _after_frame(self, src: str, inbox: _Inbox) -> None:
        """Forward (the hub) or open (the destination) the relayed messages a frame completed, in order."""
        if self._hub_finished and inbox.finished:
            self._fin_to_spokes()
        hub_ended = src == self.hub and not self.is_hub and inbox.finished
        if not inbox.relayed and not hub_ended:
            return
        with inbox.relay_lock:
            while True:
                with self._cond:
                    if not inbox.relayed:
                        break
                    tag, depth, payload = inbox.relayed.popleft()
                if tag == RELAY + "abort":
                    for peer, link in self._links.items():
                        if peer != src:
                            link.abort(payload.decode("utf-8", "replace"))
                elif self.is_hub:
                    self._forward(src, tag, depth, payload)
                else:
                    self._open_relayed(src, tag, depth, payload)
            if hub_ended:
                self._check_relayed_ends(src)

    def _check_relayed_ends(self, hub: str) -> None:
        """The hub's FIN came: every relayed party's sealed end-of-messages marker must have come before it.

        An honest hub sends its FIN to a party only once every other party finished, and a party's
        end-of-messages markers precede its FIN on its link to the hub, so the hub relayed them first. A
        party whose marker is missing lost its last message(s) at the hub: named now, not at a timeout.
        """
        with self._cond:
            missing = [p for p in sorted(self._relayed) if not self._inboxes[p].finished
                       and self._inboxes[p].error is None]
            counts = {p: self._pairs[p].channel.received if self._pairs[p].channel is not None else None
                      for p in missing}
        for peer in missing:
            opened = f" after the {counts[peer]} it relayed" if counts[peer] is not None else ""
            self._relay_failed(hub, RelayError(hub, self.party, (
                f"{self.party}: {hub} dropped the last message(s) from {peer}: it ended its link to {self.party} "
                f"without relaying {peer}'s sealed end-of-messages marker{opened}")))

    def _forward(self, src: str, tag: str, depth: int, payload: bytes) -> None:
        dst, inner = parse_relay_tag(tag)
        if dst not in self._links or dst == src:
            self._fail_inbox(src, ProtocolError(f"{src} asked {self.party} to relay a message to {dst!r}, "
                                                "which is not another party of this federation"))
            return
        try:
            self._relay(src, dst, relay_tag(src, inner), depth, payload)
        except SecureVFLError:
            pass  # the link to dst failed: this party's role, or dst's peer timeout, reports it

    def _report_unfinished(self) -> None:
        """The hub gave up waiting: tell every party which others never finished (lost), before its FIN."""
        with self._cond:
            unfinished = [p for p, i in self._inboxes.items() if not i.finished and i.error is None]
        for peer in unfinished:
            self._report_lost(peer, f"{peer} did not finish within {self.settings.peer_timeout_s:g} s of {self.party}")

    def _report_lost(self, peer: str, detail: str) -> None:
        """The hub lost ``peer``: tell the other parties, which cannot see it themselves (they wait on it)."""
        for other, link in self._links.items():
            if other != peer:
                try:
                    link.send(relay_tag(peer, _RELAY_LOST), 0, detail.encode("utf-8")[:4000], relayed=True)
                except SecureVFLError:
                    pass

    def _relay(self, src: str, dst: str, tag: str, depth: int, payload: bytes) -> None:
        """The hub hands a relayed message on (a test replaces it with a tampering relay)."""
        self._links[dst].send(tag, depth, payload, relayed=True)

    def _open_relayed(self, carrier: str, tag: str, depth: int, payload: bytes) -> None:
        try:
            origin, inner = parse_relay_tag(tag)
        except ProtocolError as exc:
            self._relay_failed(carrier, RelayError(carrier, self.party, f"{carrier} relayed a message with a {exc}"))
            return
        if origin not in self._relayed:
            self._relay_failed(carrier, RelayError(carrier, self.party, (
                f"{carrier} relayed a message from {origin!r}, not a party {self.party} receives relayed "
                "messages from")))
            return
        from securevfl.federation import e2e

        pair = self._pairs[origin]
        if inner == _RELAY_LOST:  # liveness is the hub's to tell (it could stop relaying anyway)
            self._fail_inbox(origin, PeerLostError(origin, self.party, f"{self.party}: {carrier} lost {origin}: "
                                                   + payload.decode("utf-8", "replace")))
            return
        try:
            if inner == _RELAY_BUNDLE:
                if self.tls is None or pair.channel is not None:
                    raise e2e.E2EError(f"an unexpected session key from {origin} (relayed by {carrier})")
                public = e2e.verify_bundle(payload, self.tls.root_ca, self.fingerprint, origin)
                with self._cond:
                    pair.channel = e2e.PairChannel.establish(self._session, public, self.fingerprint, self.party,
                                                             origin)
                    pair.ready = True
                    self._cond.notify_all()
                return
            if pair.error is not None:
                return
            if self.tls is not None:
                if pair.channel is None:
                    raise e2e.E2EError(f"a message from {origin} arrived before its session key")
                plaintext = pair.channel.open(inner, payload)
            else:
                plaintext = payload
        except e2e.E2EError as exc:
            self._relay_failed(carrier, self._relay_blame(carrier, origin, inner, payload, exc))
            return
        with self._cond:
            inbox = self._inboxes[origin]
            if inner == _RELAY_FIN:
                inbox.finished = True
            else:
                inbox.envelopes.append(Envelope(origin, self.party, inner, depth, plaintext))
                inbox.queued_bytes += len(plaintext)
            inbox.hello_seen = True
            self._cond.notify_all()

    def _relay_blame(self, carrier: str, origin: str, inner: str, payload: bytes, exc: Exception) -> RelayError:
        """The error for a relayed message that does not open as ``origin``'s: the hub, ``carrier``, is to blame.

        Its sender reached the hub over an authenticated link and sealed it for this party alone, so
        only the hub can have changed, replayed, reordered, dropped or relabelled it. A message that
        opens under another party's key (with its own counter) was relabelled: that is said as such.
        """
        from securevfl.federation.e2e import open_sealed

        for other in sorted(self._relayed - {origin}):
            channel = self._pairs[other].channel
            if channel is None or len(payload) < 8:
                continue
            try:
                open_sealed(channel.recv_key, int.from_bytes(payload[:8], "big"), other, self.party, inner, payload)
            except ProtocolError:
                continue
            return RelayError(carrier, self.party, (
                f"{self.party}: {carrier} relabelled a message from {other} as from {origin} ({inner!r}): the relay "
                "changed who sent it"))
        return RelayError(carrier, self.party, (
            f"{self.party} refused a message relayed by {carrier} from {origin}: {exc} (what {origin} sends reaches "
            f"{carrier} over an authenticated link, sealed for {self.party} alone: the relay {carrier} is to blame)"))

    def _relay_failed(self, carrier: str, error: RelayError) -> None:
        """The hub, ``carrier``, tampered with what it relays: every relayed link fails at once, naming it.

        A party waiting on any other non-hub party stops now, and nothing more is sent through that
        hub to one; the hub's own link stays (what it sends itself is authenticated by TLS).
        """
        with self._cond:
            for peer in sorted(self._relayed):
                if self._pairs[peer].error is None:
                    self._pairs[peer].error = error
                inbox = self._inboxes[peer]
                if inbox.error is None and not inbox.finished:
                    inbox.error = error
            self._cond.notify_all()

    def _seal(self, peer: str, tag: str, payload: bytes) -> bytes:
        """Seal a message for another non-hub party (waits for its session key; plaintext federations: as is)."""
        pair = self._pairs[peer]
        deadline = time.monotonic() + self.settings.connect_timeout_s
        with self._cond:
            while not pair.ready and pair.error is None:
                if self.abort_reason is not None:
                    raise RunAborted(self.abort_reason)
                if time.monotonic() > deadline:
                    raise PeerLostError(peer, self.party, f"{self.party}: no session key from {peer} (relayed by "
                                                          f"{self.hub}) within {self.settings.connect_timeout_s:g} s")
                self._cond.wait(0.1)
            if pair.error is not None:
                raise pair.error
            if pair.channel is None:
                return payload
            sealed: bytes = pair.channel.seal(tag, payload)
            return sealed

    def _certified(self, context: grpc.ServicerContext) -> str | None:
        """The peer the client certificate of a stream names (TLS only), or None."""
        if self.tls is None:
            return None
        names = [i.decode("utf-8", "replace") for i in (context.peer_identities() or [])]
        return next((n for n in names if n in self._inboxes), None)

    def _exchange(self, requests: Iterator[bytes], context: grpc.ServicerContext, timer: threading.Timer,
                  certified: str | None) -> Iterator[bytes]:
        settings = self.settings
        try:
            first = next(requests)
        except (StopIteration, grpc.RpcError):  # closed, or dropped for sending no HELLO
            return
        timer.cancel()
        try:
            hello = fr.decode_frame(first, max_chunk=settings.chunk_bytes)
        except ProtocolError as exc:
            yield fr.encode_frame(fr.Frame(fr.Kind.REFUSE, text=f"first frame is not a HELLO: {exc}"))
            return
        refusal = self._check_hello(hello, context) or self._session_refusal(hello)
        if refusal:
            yield self._refuse(certified, hello.src, refusal)
            return
        src = hello.src
        inbox = self._inboxes[src]
        bound = settings.recv_buffer_bytes
        generation, expected, previous = self._accept_hello(inbox, hello, context)
        if previous is not None and previous is not context:
            previous.cancel()  # the peer reconnected: its old stream ends and frees its thread
        yield fr.encode_frame(fr.Frame(fr.Kind.HELLO_ACK, seq=expected))
        while True:
            with self._cond:  # back-pressure: stop reading while the link holds recv_buffer_mb
                if inbox.envelopes and inbox.held_bytes() >= bound:
                    inbox.held_back += 1
                while (inbox.envelopes and inbox.held_bytes() >= bound and inbox.generation == generation
                       and self.abort_reason is None and context.is_active()):
                    inbox.last_seen = time.monotonic()  # the peer is not silent: this party holds it back
                    self._cond.wait(0.1)
                inbox.last_seen = time.monotonic()
            try:
                data = next(requests)
            except (StopIteration, grpc.RpcError):  # closed, or replaced by a newer stream
                return
            with self._cond:
                if inbox.generation != generation:  # a newer stream from the same peer took over
                    return
                self.received_frame_bytes[src] += len(data)
                inbox.last_seen = time.monotonic()
            try:
                self._check_frame_size(src, data)
                frame = fr.decode_frame(data, max_chunk=settings.chunk_bytes)
                ack = self._on_frame(src, inbox, frame)
            except _Refusal as exc:
                with self._cond:
                    inbox.error = ProtocolError(str(exc))
                    self._cond.notify_all()
                yield fr.encode_frame(fr.Frame(fr.Kind.REFUSE, text=str(exc)))
                return
            except ProtocolError as exc:
                with self._cond:
                    inbox.error = ProtocolError(f"{self.party} received a malformed frame from {src}: {exc}")
                    self._cond.notify_all()
                yield fr.encode_frame(fr.Frame(fr.Kind.REFUSE, text=f"malformed frame: {exc}"))
                return
            self._after_frame(src, inbox)
            if ack is not None:
                yield ack

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

    def _check_hello(self, hello: fr.Frame, context: grpc.ServicerContext | None) -> str:
        if hello.kind != fr.Kind.HELLO:
            return f"first frame is a {hello.kind.name}, not a HELLO"
        if hello.dst != self.party:
            return f"this is {self.party}, not {hello.dst}"
        if hello.src not in self._inboxes:
            return f"{hello.src!r} is not a party of this federation ({', '.join(self.peers)})"
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
                self.abort_reason = self.abort_reason or f"{src} aborted the run: {frame.text}"
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

    def link_stats(self) -> dict[str, dict[str, int]]:
        """Per outgoing link ``"SRC->DST"``: frames, frame bytes, payload bytes, resends, reconnects."""
        return {f"{self.party}->{p}": vars(link.stats).copy() for p, link in self._links.items()}

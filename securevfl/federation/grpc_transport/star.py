"""The star topology (``hub``: the active party): the pull link, the relay link, sealed relayed messages.

Only the hub runs a server. A non-hub party opens two streams to it: ``Exchange`` carries what it
sends (as in a mesh) and ``Pull`` what it receives (:class:`_PullLink`): the hub answers the party's
HELLO with its own (checked by the party as a server checks one), the party answers HELLO_ACK with
its next expected number, then the hub's frames flow as responses and the party acknowledges them
on the request side. The sending state machine (:class:`~.outlink._OutLink`: sequencing, resend
buffer, window, heartbeats) and the receiving one (:class:`~.inbox._Inbox`,
:meth:`~.inbox._Receiver._on_frame`) are the same for both; only the driver differs.

A message between two non-hub parties (:class:`_RelayLink`) is sealed for its destination
(:mod:`securevfl.federation.e2e`, with session keys signed by the parties' certificates and
distributed through the hub), sent to the hub with a relay tag naming the destination, forwarded by
the hub on its link to the destination without reaching the hub's role, and opened there: the
runtime sees a normal P1 -> P2 message. The hub sends its FIN to a party only once every other
party finished (until then it may still relay to it). A relayed message that does not open
(changed, replayed, reordered, dropped; relabelled: it opens under another party's key), or a
relayed party's sealed end-of-messages marker still missing when the hub's FIN arrives (a dropped
last message), is a :class:`RelayError` naming the hub, and fails every relayed link of the
receiving party at once: the honest sender is never the one blamed.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc

from securevfl.errors import ProtocolError, RunAborted, SecureVFLError
from securevfl.federation import frames as fr
from securevfl.federation.grpc_transport.errors import LinkRefusedError, LinkStats, PeerLostError, RelayError, _Refusal
from securevfl.federation.grpc_transport.inbox import _Inbox, _Receiver
from securevfl.federation.grpc_transport.outlink import _end_stream, _hello, _open_channel, _OutLink, _permanent_failure
from securevfl.federation.grpc_transport.wire import (
    _PULL_METHOD,
    _RELAY_BUNDLE,
    _RELAY_FIN,
    _RELAY_LOST,
    RELAY,
    _grpc_limit,
    parse_relay_tag,
    relay_tag,
)
from securevfl.federation.transport import Envelope

if TYPE_CHECKING:
    from securevfl.federation.grpc_transport.transport import GrpcTransport


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


class _StarRelay(_Receiver):
    """The star topology's part of :class:`~.transport.GrpcTransport`: the pull stream, relaying, sealing."""

    # Set by GrpcTransport.__init__ (:mod:`.transport`), besides what :class:`_Receiver` lists.
    received_frame_bytes: dict[str, int]
    _links: dict[str, Any]  # _OutLink, or _RelayLink for a relayed peer
    _relayed: frozenset[str]
    _pairs: dict[str, _Pair]
    _session: Any
    _hub_finished: bool
    _fin_sent: set[str]

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
            self._hold_back(inbox, generation, bound, lambda: not pull.closing)  # while it holds recv_buffer_mb
        return True

    def _fin_to_spokes(self, force: bool = False) -> None:
        """The hub's FIN to a party, once its role returned and no other party can send that party anything more."""
        with self._cond:
            if not self._hub_finished:
                return
            done = {p for p, i in self._inboxes.items() if i.finished or i.error is not None}
            due = [p for p in self.peers if p not in self._fin_sent and p not in self.left_out
                   and (force or done >= set(self.peers) - {p})]
            self._fin_sent.update(due)
        for peer in due:
            self._links[peer].finish()

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

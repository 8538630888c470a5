"""The gRPC servicer: one call per incoming stream (``Exchange``; ``Pull`` too at a star's hub).

Streams. The server has ``STREAMS_PER_PEER`` threads per peer and direction plus 4 and refuses a
stream beyond them at once (``RESOURCE_EXHAUSTED``, retried by the client) instead of queueing it: a
stream that sends no HELLO within ``HELLO_TIMEOUT_S`` is dropped, a peer (by its certificate) holds
at most ``STREAMS_PER_PEER`` streams per direction (``Exchange``; ``Pull`` too at a star hub), its
newest replacing its oldest other than the one carrying its live link, and a reconnecting peer's
new stream (same session) ends its old one.

Authentication, the server's half. With TLS the server requires a client certificate from the
federation CA, and checks that the party a stream claims to come from is the one its client
certificate names (the HELLO's other checks: :mod:`.inbox`). Once a party's link is established, a
refused HELLO is refused to its stream alone and the live link goes on; before that, it is charged
to the party the client *certificate* names too (its link fails at this party, so a job mismatch is
seen at both ends), and so it always is when the certificate's party claims another name. It is
never charged to the party the HELLO merely claims, so a forged HELLO cannot break an honest
party's link; on plaintext (loopback) links a refused HELLO is charged to nobody.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import grpc

from securevfl.errors import ProtocolError
from securevfl.federation import frames as fr
from securevfl.federation.grpc_transport.errors import LinkRefusedError, _Refusal
from securevfl.federation.grpc_transport.star import _StarRelay

#: A stream must send its HELLO within this many seconds, or the server drops it (and frees its thread).
HELLO_TIMEOUT_S = 5.0
#: Streams one authenticated peer may hold open at a party's server at once; a newer one replaces the oldest.
STREAMS_PER_PEER = 2


class _Servicer(_StarRelay):
    """The server part of :class:`~.transport.GrpcTransport`: the ``Exchange`` and ``Pull`` calls."""

    # Set by GrpcTransport.__init__ (:mod:`.transport`), besides what :class:`~.star._StarRelay` lists.
    _streams: dict[tuple[str, str], deque[Any]]  # per (peer, direction), oldest first

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
            self._hold_back(inbox, generation, bound, context.is_active)  # while the link holds recv_buffer_mb
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

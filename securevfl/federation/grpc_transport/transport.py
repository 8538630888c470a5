"""The network side of one party, :class:`GrpcTransport`: the parts of this package, tied together.

It implements :class:`~securevfl.federation.transport.Transport` for *one* local party, so the
runtime and the method code are the same as in the threaded simulation. Its lifecycle (bind the
server or, at a star's non-hub party, open the two streams to the hub; wait for the handshakes;
close), ``send``, ``recv``, ``finish`` and ``abort`` are here. It inherits the servicer
(:mod:`.server`), which inherits the star topology's pull stream and relaying (:mod:`.star`), which
inherits the HELLO checks and frame acceptance (:mod:`.inbox`): one class per part, each on the one
below; the links are objects of their own (:mod:`.outlink`, :mod:`.star`).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping
from concurrent import futures
from typing import Any

import grpc

from securevfl.errors import ConfigError, PeerFinishedError, PeerTimeoutError, ProtocolError, RunAborted
from securevfl.federation.grpc_transport.errors import PeerLostError
from securevfl.federation.grpc_transport.inbox import _Inbox
from securevfl.federation.grpc_transport.outlink import POLITE_CLOSE_S, _OutLink
from securevfl.federation.grpc_transport.server import STREAMS_PER_PEER, _Servicer
from securevfl.federation.grpc_transport.star import _Pair, _PullLink, _RelayLink
from securevfl.federation.grpc_transport.wire import _RELAY_BUNDLE, _SERVICE, _grpc_limit, relay_tag
from securevfl.federation.network import NetworkSettings, TlsCredentials, is_loopback
from securevfl.federation.transport import Envelope, PeerStatus, Transport


class GrpcTransport(_Servicer, Transport):
    """The network side of one party: a gRPC server for what it receives, one stream per peer for what it sends."""

    def __init__(self, party: str, addresses: Mapping[str, str | None], *, tls: TlsCredentials | None,
                 fingerprint: str = "", job: Mapping[str, Any] | None = None,
                 settings: NetworkSettings | None = None, insecure: bool = False,
                 differences: Callable[[Any, Any], list[str]] | None = None, hub: str | None = None,
                 replaceable: Collection[str] = ()) -> None:
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
        wrong = sorted(set(replaceable) - set(self.peers))
        if wrong or (replaceable and hub is not None):
            raise ConfigError(f"replaceable peers must be peers of {party} in a full mesh; got {sorted(replaceable)}"
                              + (" in a star federation" if hub is not None else f" (not peers: {wrong})"))
        #: Peers whose failure is theirs alone (a serving session's passive parties): their ABORT or a lost
        #: link fails only what this party receives from them, and a new process of one (another session id)
        #: replaces the one before (its link starts afresh; :attr:`PeerStatus.epoch` counts the processes).
        self.replaceable = frozenset(replaceable)
        #: Peers this party left out of the run (:meth:`leave_out`), with why: no link, no message, no wait.
        self.left_out: dict[str, str] = {}
        self._epochs: dict[str, int] = dict.fromkeys(self.peers, 0)
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
        self._aborted_by: set[str] = set()  # peers whose ABORT arrived (they need no ABORT back)
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

    def wait_ready(self, timeout: float | None = None, peers: Collection[str] | None = None) -> None:
        """Block until every outgoing link completed its handshake; raise the first link failure.

        ``peers``: only the links to these (default: every peer not :attr:`left_out`).
        """
        limit = self.settings.connect_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + limit
        for peer, link in self._links.items():
            if peer in self._relayed or peer in self.left_out or (peers is not None and peer not in peers):
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
        for peer in self._pulls if peers is None or self.hub in peers else ():  # star: the hub's stream to us too
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

    def unready(self, peers: Collection[str], timeout: float) -> list[str]:
        """The ``peers`` whose links are not up within ``timeout`` seconds in all (a failed link counts as not up).

        A refused link (another job, a rejected certificate) is raised, as by :meth:`wait_ready`.
        """
        deadline = time.monotonic() + timeout
        missing = []
        for peer in peers:
            try:
                self.wait_ready(max(0.0, deadline - time.monotonic()), peers=(peer,))
            except PeerLostError:
                missing.append(peer)
        return missing

    def leave_out(self, peer: str, reason: str) -> None:
        """Go on without ``peer``: its link stops, nothing is sent to it, received from it or waited for.

        A process of it that connects later is refused with ``reason``, so it stops at once, saying why (in a
        star, by the hub: the other parties' link to it is relayed, and nothing is relayed to it any more).
        """
        link = self._links.get(peer)
        if link is None:
            raise ProtocolError(f"{peer!r} is not a peer of {self.party}; peers are {list(self.peers)}")
        with self._cond:
            self.left_out[peer] = reason
            inbox = self._inboxes[peer]
            if inbox.error is None:
                inbox.error = PeerLostError(peer, self.party, f"{self.party} left {peer} out: {reason}")
            self._cond.notify_all()
        link.abort(f"{self.party} left {peer} out of this run: {reason}")  # a process of it already connected
        threading.Thread(target=link.close, name=f"close-{self.party}->{peer}", daemon=True).start()

    def close(self) -> None:
        """Deliver what is queued (bounded by the peer timeout), wait for peers to finish, stop."""
        timeout = self.settings.peer_timeout_s
        if self.abort_reason is None:
            deadline = time.monotonic() + timeout
            for peer, link in self._links.items():
                if not self._gone(peer):  # a replaceable peer that is down takes nothing more
                    link.drain(max(0.0, deadline - time.monotonic()))
            with self._cond:  # peers may still need our acknowledgements of their last frames
                while (self.abort_reason is None and not all(i.finished or i.error or self._gone(p)
                                                             for p, i in self._inboxes.items())
                       and (time.monotonic() < deadline or self.is_hub and self._spokes_alive(timeout))):
                    self._cond.wait(0.05)  # the hub relays for the other parties until they finish
            if self.is_hub:  # what it forwarded meanwhile, and its FIN to a party that another left waiting
                self._report_unfinished()  # before the FIN: a party seeing it checks that every other one finished
                self._fin_to_spokes(force=True)
                deadline = time.monotonic() + timeout
                for peer, link in self._links.items():
                    if not self._gone(peer):
                        link.drain(max(0.0, deadline - time.monotonic()))
        else:  # the ABORT goes out on every link at once: 2 s in all, not 2 s per link still connecting
            deadline = time.monotonic() + 2.0
            for peer, link in self._links.items():
                if not self._known_gone(peer):  # a peer known to be gone is not waited for
                    link.flush_urgent(max(0.0, deadline - time.monotonic()))
        for link in self._links.values():  # every stream starts ending now; they linger in parallel
            link.begin_close()
        polite_until = time.monotonic() + POLITE_CLOSE_S
        for peer, link in self._links.items():
            link.close(time.monotonic() if self._known_gone(peer) else polite_until)
        for pull in self._pulls.values():
            pull.close()
        if self._server is not None:
            self._server.stop(grace=0.5).wait(2)

    def _known_gone(self, peer: str) -> bool:
        """Whether nothing more can reach ``peer``, so that closing does not wait for it.

        Its stream to this party failed or it aborted, and this party's link to it is not connected
        now: an ABORT or a last frame would only wait out a timeout.
        """
        inbox, link = self._inboxes.get(peer), self._links.get(peer)
        if inbox is None or link is None:
            return False
        with self._cond:
            failed = inbox.error is not None or peer in self._aborted_by
        return failed and (link.error is not None or getattr(link, "handshaken", 0) < 0)

    def _gone(self, peer: str) -> bool:
        """A replaceable peer whose links are down: nothing is waited for from it or delivered to it on closing."""
        return peer in self.left_out or peer in self.replaceable and not self.peer_status(peer).up

    def peer_status(self, peer: str) -> PeerStatus:
        """Whether ``peer``'s links are up, and which process of it this party talks to.

        Up: both directions connected (its stream to this party heard within the peer timeout, this
        party's stream to it handshaken), neither failed nor finished; the epoch counts its replaced
        processes.
        """
        inbox, link = self._inboxes.get(peer), self._links.get(peer)
        if inbox is None or link is None:
            raise ProtocolError(f"{peer!r} is not a peer of {self.party}; peers are {list(self.peers)}")
        with self._cond:
            heard = time.monotonic() - max(inbox.last_seen, self.started_at) <= self.settings.peer_timeout_s
            up = (inbox.hello_seen and heard and inbox.error is None and not inbox.finished
                  and link.error is None and getattr(link, "handshaken", 0) >= 0)
            return PeerStatus(up, self._epochs[peer])

    def _replace_peer(self, peer: str, session: str) -> None:
        """A new process of replaceable ``peer`` (session id ``session``) replaces the one before.

        Its inbox and this party's link to it start afresh (what the process before sent or was sent
        is dropped); the caller holds ``_cond``.
        """
        inbox = self._inboxes[peer]
        inbox.envelopes.clear()
        inbox.relayed.clear()
        inbox.expected = inbox.unacked_frames = inbox.unacked_bytes = inbox.queued_bytes = 0
        inbox.finished, inbox.error, inbox.reassembly, inbox.session = False, None, None, session
        inbox.last_seen = time.monotonic()
        self._epochs[peer] += 1
        old = self._links[peer]
        link = _OutLink(self, peer, self.addresses[peer])
        link.stats.reconnects = old.stats.reconnects + 1
        self._links[peer] = link
        link.start()
        old.begin_close()
        threading.Thread(target=old.close, name=f"close-{self.party}->{peer}", daemon=True).start()
        self._cond.notify_all()

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
        if envelope.dst in self.left_out:
            raise ProtocolError(f"{self.party} left {envelope.dst} out of this run: nothing is sent to it")
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
            if peer not in self.left_out:
                self._links[peer].finish()

    def abort(self, reason: str) -> None:
        """Tell every peer that this party failed, so they stop at once."""
        with self._cond:
            self.abort_reason = self.abort_reason or reason
            self._cond.notify_all()
        for peer, link in self._links.items():
            if peer not in self.left_out:
                link.abort(reason)

    def recv(self, dst: str, src: str, abort: threading.Event, timeout: float | None = None) -> Envelope:
        if dst != self.party:
            raise ProtocolError(f"{self.party} cannot receive for {dst}")
        inbox = self._inboxes.get(src)
        if inbox is None:
            raise ProtocolError(f"no link {src}->{dst}; peers are {list(self.peers)}")
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
                    if inbox.reader_waiting:  # the link's reader waits for room in the buffer
                        self._cond.notify_all()
                    return envelope
                if inbox.error is not None:
                    raise inbox.error
                if self.abort_reason is not None:
                    raise RunAborted(self.abort_reason)
                if inbox.finished:
                    raise PeerFinishedError(src, dst)
                link = self._links[src]  # a new process of a replaceable peer gets a new link
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
                self._cond.wait(0.1 if timeout is None else min(0.1, max(0.001, started + timeout - now)))

    def _silent(self, src: str, limit: float) -> PeerLostError:
        """Nothing arrived on the link that carries ``src``'s messages: ``src``'s own, or (relayed) the hub's."""
        if src in self._relayed and self.hub is not None:
            return PeerLostError(self.hub, self.party, f"{self.party}: nothing from {self.hub} (which relays {src}'s "
                                                       f"messages) for {limit:g} s (its process stopped or the "
                                                       "network is down)")
        return PeerLostError(src, self.party, f"{self.party}: nothing from {src} for {limit:g} s "
                                              "(its process stopped or the network is down)")

    def link_stats(self) -> dict[str, dict[str, int]]:
        """Per outgoing link ``"SRC->DST"``: frames, frame bytes, payload bytes, resends, reconnects."""
        return {f"{self.party}->{p}": vars(link.stats).copy() for p, link in self._links.items()}

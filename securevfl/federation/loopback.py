"""Loopback helpers for network tests and measurements: free ports, a counting and cutting TCP proxy.

Everything binds 127.0.0.1; every thread is a daemon with bounded waits, and
:meth:`LoopbackProxy.close` stops all of them. Used by the test suite (a link cut mid-epoch) and
``benchmarks/network.py`` (TCP bytes on the wire, TLS and HTTP/2 framing included).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time


def free_port() -> int:
    """An ephemeral port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LoopbackProxy:
    """Forwards 127.0.0.1:<port> to a local target, counts the bytes in each direction, can cut.

    :meth:`cut` drops every open connection once (a network blip); new connections are forwarded
    again. A connection that arrives before the target listens waits for it (up to 30 s) rather
    than being accepted and reset.
    """

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._stop = threading.Event()
        self.upstream_bytes = 0  # client -> server
        self.downstream_bytes = 0  # server -> client
        self.connections = 0
        self.cuts = 0
        self._threads: list[threading.Thread] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def total(self) -> int:
        with self._lock:
            return self.upstream_bytes + self.downstream_bytes

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            upstream = self._connect_upstream()
            if upstream is None:
                client.close()
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets += [client, upstream]
                self.connections += 1
            for a, b, up in ((client, upstream, True), (upstream, client, False)):
                thread = threading.Thread(target=self._pump, args=(a, b, up), daemon=True)
                self._threads.append(thread)
                thread.start()

    def _connect_upstream(self) -> socket.socket | None:
        # The target may not listen yet (the peer process is starting): retry rather than accept and reset,
        # which the transport would take for a failed TLS handshake (see the report of this benchmark).
        deadline = time.monotonic() + 30
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                return socket.create_connection(self.target, timeout=5)
            except OSError:
                time.sleep(0.05)
        return None

    def _pump(self, src: socket.socket, dst: socket.socket, up: bool) -> None:
        src.settimeout(0.5)
        while not self._stop.is_set():
            try:
                data = src.recv(262144)
            except TimeoutError:
                continue
            except OSError:
                break
            if not data:
                break
            try:
                dst.sendall(data)
            except OSError:
                break
            with self._lock:
                if up:
                    self.upstream_bytes += len(data)
                else:
                    self.downstream_bytes += len(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Close every connection open now."""
        with self._lock:
            sockets, self._sockets = self._sockets, []
            self.cuts += 1
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        self._listener.close()
        self._thread.join(timeout=2)
        for t in self._threads:
            t.join(timeout=2)


__all__ = ["LoopbackProxy", "free_port"]

"""What a networked party needs to know before it opens a link: addresses, timeouts and sizes, TLS material.

Shared by the gRPC transport (:mod:`securevfl.federation.grpc_transport`) and the federation file
(:mod:`securevfl.deploy.federation_file`), which fills these from its ``[network]`` and ``[tls]`` sections.
"""

from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import dataclass, fields
from typing import Any

from securevfl.errors import ConfigError


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def split_address(address: str) -> tuple[str, int]:
    """Split ``host:port`` (IPv6 as ``[::1]:7101``) into host and port, or raise :class:`ConfigError`."""
    if not isinstance(address, str):
        raise ConfigError(f"address must be a string 'host:port', got {address!r}")
    bad = f"invalid address {address!r}: expected 'host:port' (IPv6 as '[::1]:7101')"
    if address.startswith("["):
        host, sep, port = address[1:].partition("]:")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ConfigError(f"{bad}; {host!r} is not an IPv6 address") from None
    else:
        host, sep, port = address.rpartition(":")
        if ":" in host:
            raise ConfigError(f"{bad}; write IPv6 hosts in brackets")
        if not re.fullmatch(r"[A-Za-z0-9._-]+", host or " "):
            raise ConfigError(f"{bad}; the host is empty or has characters other than letters, digits, '.', '-', '_'")
    if not sep or not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(f"{bad}; the port must be a number in 1..65535")
    try:
        unspecified = ipaddress.ip_address(host).is_unspecified
    except ValueError:
        unspecified = False  # a host name
    if unspecified:
        raise ConfigError(f"{bad}; {host} is not an address peers can connect to, name this machine's address")
    return host, int(port)


def is_loopback(address: str) -> bool:
    """True if ``host:port`` is on this machine only: 127.0.0.0/8, ``localhost`` or ``[::1]``."""
    return is_loopback_host(split_address(address)[0])


def is_loopback_host(host: str) -> bool:
    """True if ``host`` (no port) is on this machine only: 127.0.0.0/8, ``localhost`` or ``::1``."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


#: The range every ``[network]`` number must lie in (``chunk_kb``: an integer, checked on its own).
LIMITS: dict[str, tuple[float, float]] = {
    "peer_timeout_s": (0.1, 86400.0),
    "heartbeat_s": (0.05, 3600.0),
    "max_message_mb": (0.001, 4096.0),
    "connect_timeout_s": (0.1, 86400.0),
    "reconnect_backoff_s": (0.001, 3600.0),
    "max_backoff_s": (0.001, 3600.0),
    "send_window_mb": (0.001, 4096.0),
    "recv_timeout_s": (0.1, 86400.0),
    "recv_buffer_mb": (0.001, 16384.0),
}


def _bounded(key: str, value: Any) -> float:
    low, high = LIMITS[key]
    where = f"[network] {key}"
    if not (_is_int(value) or isinstance(value, float)) or not math.isfinite(value) or not low <= value <= high:
        raise ConfigError(f"{where} must be a positive number in {low:g}..{high:g}, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class NetworkSettings:
    """Timeouts and sizes of the network links (the ``[network]`` section; every key optional).

    Reconnection waits ``reconnect_backoff_s``, doubling after each failed attempt up to
    ``max_backoff_s``. ``recv_timeout_s`` bounds one wait for a message from a live peer (a peer
    that stops heartbeating is reported after ``peer_timeout_s`` already). ``send_window_mb``
    bounds what a party keeps unacknowledged per outgoing link; ``recv_buffer_mb`` (default:
    ``max_message_mb``, at least that) bounds what one incoming link may queue before the local
    role takes it: beyond it the receiver stops reading that link, so the sender blocks. Every
    number must lie in :data:`LIMITS`.
    """

    peer_timeout_s: float = 30.0
    heartbeat_s: float = 2.0
    max_message_mb: float = 1024.0
    chunk_kb: int = 1024
    connect_timeout_s: float = 60.0
    reconnect_backoff_s: float = 0.2
    max_backoff_s: float = 5.0
    send_window_mb: float = 256.0
    recv_timeout_s: float = 600.0
    recv_buffer_mb: float | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "chunk_kb" and not (f.name == "recv_buffer_mb" and value is None):
                object.__setattr__(self, f.name, _bounded(f.name, value))
        if not _is_int(self.chunk_kb) or not 1 <= self.chunk_kb <= 16 * 1024:
            raise ConfigError(f"[network] chunk_kb must be an integer in 1..16384, got {self.chunk_kb!r}")
        if self.heartbeat_s >= self.peer_timeout_s:
            raise ConfigError(f"[network] heartbeat_s ({self.heartbeat_s:g}) must be shorter than "
                              f"peer_timeout_s ({self.peer_timeout_s:g})")
        if self.max_backoff_s < self.reconnect_backoff_s:
            raise ConfigError(f"[network] max_backoff_s ({self.max_backoff_s:g}) must be at least "
                              f"reconnect_backoff_s ({self.reconnect_backoff_s:g})")
        if self.recv_buffer_mb is not None and self.recv_buffer_mb < self.max_message_mb:
            raise ConfigError(f"[network] recv_buffer_mb ({self.recv_buffer_mb:g}) must be at least max_message_mb "
                              f"({self.max_message_mb:g}): a link must be able to hold one whole message")

    @property
    def chunk_bytes(self) -> int:
        return self.chunk_kb * 1024

    @property
    def max_message_bytes(self) -> int:
        return int(self.max_message_mb * 1024 * 1024)

    @property
    def recv_buffer_bytes(self) -> int:
        """What one incoming link may hold (whole messages not yet taken, and the one in progress)."""
        mb = self.max_message_mb if self.recv_buffer_mb is None else self.recv_buffer_mb
        return int(mb * 1024 * 1024)


@dataclass(frozen=True)
class TlsCredentials:
    """PEM bytes one party needs for mutual TLS: its certificate chain and key, and the federation CA."""

    cert_chain: bytes
    private_key: bytes
    root_ca: bytes

    def __repr__(self) -> str:  # never print key material
        return (f"TlsCredentials(cert_chain=<{len(self.cert_chain)} bytes>, private_key=<hidden>, "
                f"root_ca=<{len(self.root_ca)} bytes>)")


__all__ = ["LIMITS", "NetworkSettings", "TlsCredentials", "is_loopback", "is_loopback_host", "split_address"]

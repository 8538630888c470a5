"""Ciphertexts on the wire: fixed-width big-endian integers mod n^2, one byte string per list.

A receiver knows how many ciphertexts it expects; any other length is a
:class:`~securevfl.errors.ProtocolError` naming the sender, raised before a single integer is made.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from securevfl.errors import ProtocolError


def ciphertext_bytes(n: int) -> int:
    """Bytes of one ciphertext on the wire (fixed width, big-endian, mod n^2)."""
    return (2 * n.bit_length() + 7) // 8


def to_wire(ciphertexts: Sequence[Any], width: int) -> bytes:
    """Ciphertexts as one byte string of fixed-width big-endian integers."""
    return b"".join(int(c).to_bytes(width, "big") for c in ciphertexts)


def from_wire(data: Any, width: int, count: int, sender: str, what: str) -> list[int]:
    """``count`` fixed-width ciphertexts from ``data``; any other length is a ProtocolError naming the sender."""
    if not isinstance(data, bytes) or len(data) != width * count:
        got = f"{len(data)} bytes" if isinstance(data, bytes) else type(data).__name__
        raise ProtocolError(f"{sender} sent {what} of {got}; {count} ciphertexts of {width} bytes were expected")
    return [int.from_bytes(data[i : i + width], "big") for i in range(0, len(data), width)]


__all__ = ["ciphertext_bytes", "from_wire", "to_wire"]

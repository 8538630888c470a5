"""Typed readers for the fields of received protocol messages.

A message arrives from a peer as plain codec values (dicts, lists, bytes, ints, arrays). Every
reader here checks one field's presence, type and range and returns it typed, or raises
:class:`~securevfl.errors.ProtocolError` naming the message and field; so a protocol step
never indexes a received value raw and never fails with ``KeyError``/``TypeError``/``IndexError``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np

from securevfl.errors import CryptoError, ProtocolError
from securevfl.privacy.primitives.key_agreement import PublicKey

T = TypeVar("T")


class PeerCryptoError(CryptoError, ProtocolError):
    """A peer's message failed a cryptographic check (share authentication, key agreement).

    Both a :class:`CryptoError` (the check is cryptographic and its message deliberately terse)
    and a :class:`ProtocolError` (the peer sent something unusable).
    """


#: Largest round index on the wire (rounds are uint64 counter blocks; we keep them signed-safe).
MAX_ROUND = (1 << 63) - 1


def mapping(message: Any, what: str) -> Mapping[str, Any]:
    """``message`` as a mapping, else ProtocolError."""
    if type(message) is dict:  # the common case, without the (slow) ABC check
        return message
    if not isinstance(message, Mapping):
        raise ProtocolError(f"{what} is not a mapping")
    return message


def field(message: Any, key: str, what: str) -> Any:
    """The raw value of ``key`` in the mapping ``message`` (present, any type)."""
    m = message if type(message) is dict else mapping(message, what)
    if key not in m:
        raise ProtocolError(f"{what} lacks the field {key!r}")
    return m[key]


def string(value: Any, what: str) -> str:
    """A non-empty string."""
    if type(value) is str and value:
        return value
    if not isinstance(value, str) or not value:
        raise ProtocolError(f"{what} must be a non-empty string")
    return value


def integer(value: Any, what: str, low: int = 0, high: int = MAX_ROUND) -> int:
    """An int (not a bool) in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ProtocolError(f"{what} must be an int in [{low}, {high}]")
    return int(value)


def blob(value: Any, what: str, length: int | None = None) -> bytes:
    """Bytes, of exactly ``length`` when given."""
    if type(value) is bytes and (length is None or len(value) == length):
        return value  # the common case: already exact, immutable bytes
    if not isinstance(value, bytes | bytearray):
        raise ProtocolError(f"{what} must be bytes")
    if length is not None and len(value) != length:
        raise ProtocolError(f"{what} must be {length} bytes, got {len(value)}")
    return bytes(value)


def names(value: Any, what: str) -> tuple[str, ...]:
    """A list (or tuple) of non-empty party names."""
    if not isinstance(value, list | tuple):
        raise ProtocolError(f"{what} must be a list of party names")
    return tuple(string(v, f"a party name in {what}") for v in value)


def str_map(value: Any, what: str, parse: Callable[[Any, str], T]) -> dict[str, T]:
    """A mapping with non-empty string keys, each value read by ``parse(value, description)``."""
    if type(value) is not dict and not isinstance(value, Mapping):
        raise ProtocolError(f"{what} must be a mapping")
    out: dict[str, T] = {}
    for k, v in value.items():
        if type(k) is not str or not k:
            string(k, f"a key of {what}")  # raises for a key that is no non-empty str
        out[k] = parse(v, f"{what}[{k!r}]")
    return out


def uint64_array(value: Any, what: str) -> np.ndarray:
    """A numpy array of dtype uint64 (a masked ring vector)."""
    if not isinstance(value, np.ndarray) or value.dtype != np.uint64:
        raise ProtocolError(f"{what} must be a uint64 array")
    return value


def ring_array(value: Any, what: str, ring_bits: int | None = None) -> np.ndarray:
    """A masked ring vector: uint64 (Z_2^64) or uint32 (Z_2^32); ``ring_bits`` given: that ring's dtype only."""
    allowed = ("uint32", "uint64") if ring_bits is None else (f"uint{ring_bits}",)
    if not isinstance(value, np.ndarray) or value.dtype.name not in allowed:
        raise ProtocolError(f"{what} must be a {' or '.join(allowed)} array")
    return value


def real_array(value: Any, what: str) -> np.ndarray:
    """A numpy array of real numbers (bool, int or float dtype), as float64."""
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
        raise ProtocolError(f"{what} must be a numeric array")
    return np.asarray(value, dtype=np.float64)


def public_key(value: Any, scheme: str, what: str, validate: bool = True) -> PublicKey:
    """A serialised key-agreement public key of ``scheme``, checked (``validate``: the full check)."""
    try:
        key = PublicKey.from_bytes(blob(value, what), validate=validate)
    except CryptoError as exc:
        raise ProtocolError(f"{what} is not a valid public key: {exc}") from None
    if key.scheme != scheme:
        raise ProtocolError(f"{what} is a {key.scheme} key, expected {scheme}")
    return key


def attributed(message: Any, src: str, what: str, key: str = "party") -> Mapping[str, Any]:
    """A mapping whose ``key`` field, when present, names the sender ``src``."""
    m = mapping(message, f"{what} from {src}")
    if key in m and m[key] != src:
        raise ProtocolError(f"{what} from {src} claims to come from {m[key]!r}")
    return m


__all__ = [
    "MAX_ROUND",
    "PeerCryptoError",
    "attributed",
    "blob",
    "field",
    "integer",
    "mapping",
    "names",
    "public_key",
    "real_array",
    "str_map",
    "string",
    "ring_array",
    "uint64_array",
]

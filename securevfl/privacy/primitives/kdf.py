"""HKDF-SHA256 key derivation with unambiguous, domain-separated ``info`` strings.

Every derived key binds a domain label, the session ID and the *sorted* party names (RFC 5869
HKDF; the ``info`` input is what separates keys derived from one shared secret for different
purposes). Fields are length-prefixed so that ("ab", "c") and ("a", "bc") never collide.
"""

from __future__ import annotations

import hmac
import struct
from collections.abc import Iterable

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from securevfl.errors import ConfigError

SEED_BYTES = 32
_LEN = struct.Struct(">I")
_ZERO_SALT = bytes(32)  # RFC 5869: no salt means HashLen zero bytes
PAIRWISE_MASK_LABEL = "securevfl/secagg/pairwise-mask/v1"
CHANNEL_KEY_LABEL = "securevfl/secagg/share-channel/v1"


def encode_fields(fields: Iterable[bytes | bytearray | str | int]) -> bytes:
    """Length-prefixed concatenation: each field becomes ``len (4 bytes BE) || bytes``.

    Only exact ``str``, ``bytes``/``bytearray`` and non-negative ``int`` fields are accepted (not
    ``bool``, not subclasses), so a field's encoding never depends on a subclass's behaviour.
    """
    parts: list[bytes | bytearray] = []
    for field in fields:
        kind = type(field)
        data: bytes | bytearray
        if kind is str and isinstance(field, str):  # exact types (``kind``), narrowed for typing
            data = field.encode("utf-8")
        elif (kind is bytes or kind is bytearray) and isinstance(field, bytes | bytearray):
            data = field
        elif kind is int and isinstance(field, int):
            if field < 0:
                raise ConfigError(f"integer KDF fields must be >= 0, got {field}")
            data = field.to_bytes(max(1, (field.bit_length() + 7) // 8), "big")
        else:
            raise ConfigError(f"unsupported KDF field type {kind.__name__}")
        parts.append(_LEN.pack(len(data)))
        parts.append(data)
    return b"".join(parts)


def hkdf_sha256(secret: bytes, info: bytes, length: int = SEED_BYTES, salt: bytes | None = None) -> bytes:
    """HKDF-SHA256 (RFC 5869) of ``secret`` with ``info``; ``length`` output bytes."""
    if not secret:
        raise ConfigError("HKDF input key material must not be empty")
    if length == SEED_BYTES:  # one output block: extract + one HMAC (RFC 5869 sec. 2.2-2.3)
        prk = hmac.digest(salt or _ZERO_SALT, secret, "sha256")
        return hmac.digest(prk, info + b"\x01", "sha256")
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=salt, info=info).derive(secret)


def pairwise_info(label: str, session_id: bytes, party_a: str, party_b: str) -> bytes:
    """Build the HKDF ``info`` for a pair: label, session ID and the two names in sorted order."""
    if party_a == party_b:
        raise ConfigError(f"a pairwise key needs two distinct parties, got {party_a!r} twice")
    low, high = sorted((party_a, party_b))
    return encode_fields((label, session_id, low, high))


def pairwise_seed(
    shared_secret: bytes,
    session_id: bytes,
    party_a: str,
    party_b: str,
    label: str = PAIRWISE_MASK_LABEL,
    length: int = SEED_BYTES,
) -> bytes:
    """Symmetric pairwise seed: both parties derive the same bytes whatever the argument order."""
    return hkdf_sha256(shared_secret, pairwise_info(label, session_id, party_a, party_b), length)


__all__ = [
    "CHANNEL_KEY_LABEL",
    "PAIRWISE_MASK_LABEL",
    "SEED_BYTES",
    "encode_fields",
    "hkdf_sha256",
    "pairwise_info",
    "pairwise_seed",
]

"""Paillier key pairs: generation, fingerprints and byte serialisation.

The public key is ``(n, h_s)``: the modulus and the Damgård–Jurik–Nielsen base
``h_s = (-x^2)^n mod n^2`` used for short-exponent randomness (Damgård–Jurik–Nielsen, IJIS 2010;
see :mod:`securevfl.privacy.paillier.fast_backend`). g is fixed to ``n + 1`` and is not stored.
The private key is ``(p, q)`` with the CRT constants of Paillier 1999, section 7.
"""

from __future__ import annotations

import hashlib
import secrets
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

import gmpy2
from gmpy2 import mpz

from securevfl.errors import ConfigError, CryptoError

RandBits = Callable[[int], int]
"""A ``secrets.randbits``-like callable; injectable so tests can be deterministic."""

SECURE_KEY_BITS = (2048, 3072)
"""Key sizes accepted without the insecure test option: ~112- and ~128-bit security
(NIST SP 800-57 Part 1 Rev. 5, Table 2, IFC column)."""

MIN_TEST_KEY_BITS = 512
_PUBLIC_MAGIC = b"SVPaillierPub\x01"
_PRIVATE_MAGIC = b"SVPaillierPriv\x01"
FINGERPRINT_BYTES = 16


def _int_to_bytes(value: int) -> bytes:
    value = int(value)
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def _pack_ints(magic: bytes, *values: int) -> bytes:
    parts = [magic]
    for value in values:
        raw = _int_to_bytes(value)
        parts.append(struct.pack(">I", len(raw)))
        parts.append(raw)
    return b"".join(parts)


def _unpack_ints(magic: bytes, data: bytes, count: int) -> list[int]:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise CryptoError("key bytes expected")
    data = bytes(data)
    if not data.startswith(magic):
        raise CryptoError("not a serialised Paillier key of this kind")
    pos = len(magic)
    values = []
    for _ in range(count):
        if pos + 4 > len(data):
            raise CryptoError("truncated key bytes")
        (length,) = struct.unpack_from(">I", data, pos)
        pos += 4
        if length == 0 or pos + length > len(data):
            raise CryptoError("truncated key bytes")
        values.append(int.from_bytes(data[pos : pos + length], "big"))
        pos += length
    if pos != len(data):
        raise CryptoError("trailing bytes after key")
    return values


def key_fingerprint(n: int) -> bytes:
    """First 16 bytes of SHA-256 over the modulus: identifies a key pair without revealing it."""
    return hashlib.sha256(b"securevfl-paillier-n" + _int_to_bytes(n)).digest()[:FINGERPRINT_BYTES]


@dataclass(frozen=True, eq=False)
class PaillierPublicKey:
    """Public key ``(n, h_s)`` with g = n + 1.

    ``hs`` is the DJN short-exponent base, an n-th residue mod n^2 whose discrete log nobody
    needs; any party may also derive its own with :meth:`with_fresh_hs`.
    """

    n: int
    hs: int
    nsquare: int = field(init=False, repr=False)
    fingerprint: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        n, hs = int(self.n), int(self.hs)
        if n < 3 or n % 2 == 0:
            raise ConfigError("Paillier modulus must be an odd integer > 2")
        nsq = n * n
        if not 0 < hs < nsq or gmpy2.gcd(hs, n) != 1:
            raise CryptoError("invalid DJN base h_s for this modulus")
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "hs", hs)
        object.__setattr__(self, "nsquare", nsq)
        object.__setattr__(self, "fingerprint", key_fingerprint(n))

    @property
    def bits(self) -> int:
        """Bit length of the modulus n."""
        return self.n.bit_length()

    @property
    def max_int(self) -> int:
        """Largest magnitude a signed plaintext may have (n // 3, as python-paillier)."""
        return self.n // 3 - 1

    @classmethod
    def from_n(cls, n: int, randbits: RandBits | None = None) -> PaillierPublicKey:
        """Public key for a bare modulus (e.g. one from python-paillier) with a fresh DJN base."""
        return cls(n=int(n), hs=derive_hs(int(n), randbits))

    def with_fresh_hs(self, randbits: RandBits | None = None) -> PaillierPublicKey:
        """Return the same key with an independently drawn DJN base."""
        return PaillierPublicKey.from_n(self.n, randbits)

    def to_bytes(self) -> bytes:
        """Serialise (magic, n, h_s) as length-prefixed big-endian integers."""
        return _pack_ints(_PUBLIC_MAGIC, self.n, self.hs)

    @classmethod
    def from_bytes(cls, data: bytes) -> PaillierPublicKey:
        """Load a key written by :meth:`to_bytes`; malformed bytes raise CryptoError."""
        n, hs = _unpack_ints(_PUBLIC_MAGIC, data, 2)
        try:
            return cls(n=n, hs=hs)
        except ConfigError as exc:
            raise CryptoError("invalid public key") from exc

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PaillierPublicKey) and self.n == other.n

    def __hash__(self) -> int:
        return hash(self.n)

    def __repr__(self) -> str:
        return f"PaillierPublicKey(bits={self.bits}, fingerprint={self.fingerprint.hex()[:12]})"


@dataclass(frozen=True, eq=False)
class PaillierPrivateKey:
    """Private key: the primes p < q plus CRT decryption constants (never printed)."""

    public_key: PaillierPublicKey
    p: int = field(repr=False)
    q: int = field(repr=False)
    psquare: int = field(init=False, repr=False)
    qsquare: int = field(init=False, repr=False)
    hp: int = field(init=False, repr=False)
    hq: int = field(init=False, repr=False)
    p_inverse: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        p, q = sorted((int(self.p), int(self.q)))
        n = self.public_key.n
        if p * q != n or p == q or p < 3:
            raise CryptoError("p and q do not match the public key")
        psq, qsq = p * p, q * q
        g = n + 1
        # h_p = L_p(g^(p-1) mod p^2)^-1 mod p  (Paillier 1999, section 7).
        hp = int(gmpy2.invert((int(gmpy2.powmod(g, p - 1, psq)) - 1) // p, p))
        hq = int(gmpy2.invert((int(gmpy2.powmod(g, q - 1, qsq)) - 1) // q, q))
        for name, value in (("p", p), ("q", q), ("psquare", psq), ("qsquare", qsq),
                            ("hp", hp), ("hq", hq), ("p_inverse", int(gmpy2.invert(p, q)))):
            object.__setattr__(self, name, value)

    @property
    def fingerprint(self) -> bytes:
        """Fingerprint of the matching public key."""
        return self.public_key.fingerprint

    def to_bytes(self) -> bytes:
        """Serialise (magic, n, h_s, p, q); keep these bytes secret."""
        return _pack_ints(_PRIVATE_MAGIC, self.public_key.n, self.public_key.hs, self.p, self.q)

    @classmethod
    def from_bytes(cls, data: bytes) -> PaillierPrivateKey:
        """Load a key written by :meth:`to_bytes`; inconsistent bytes raise CryptoError."""
        n, hs, p, q = _unpack_ints(_PRIVATE_MAGIC, data, 4)
        try:
            return cls(public_key=PaillierPublicKey(n=n, hs=hs), p=p, q=q)
        except ConfigError as exc:
            raise CryptoError("invalid private key") from exc

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PaillierPrivateKey) and (self.p, self.q) == (other.p, other.q)

    def __hash__(self) -> int:
        return hash((self.p, self.q))

    def __repr__(self) -> str:
        return (f"PaillierPrivateKey(bits={self.public_key.bits}, "
                f"fingerprint={self.fingerprint.hex()[:12]})")


def derive_hs(n: int, randbits: RandBits | None = None) -> int:
    """DJN base: h = -x^2 mod n for random x in Z_n^*, h_s = h^n mod n^2 (DJN, IJIS 2010)."""
    randbits = randbits or secrets.randbits
    n = int(n)
    while True:
        x = randbits(n.bit_length() + 64) % n
        if x > 1 and gmpy2.gcd(x, n) == 1:
            break
    h = (-x * x) % n
    return int(gmpy2.powmod(h, n, n * n))


def _random_prime(bits: int, randbits: RandBits) -> mpz:
    """Draw a prime of exactly ``bits`` bits, top two bits set (so p*q has 2*bits)."""
    while True:
        candidate = mpz(randbits(bits)) | (mpz(3) << (bits - 2)) | 1
        prime = gmpy2.next_prime(candidate)
        if prime.bit_length() == bits and gmpy2.is_prime(prime, 50):
            return prime


def generate_keypair(
    bits: int = 2048,
    *,
    insecure_allow_small_key: bool = False,
    randbits: RandBits | None = None,
) -> tuple[PaillierPublicKey, PaillierPrivateKey]:
    """Generate a key pair with an n of exactly ``bits`` bits from equal-size primes.

    ``bits`` must be 2048 (default, ~112-bit security) or 3072 (~128-bit), per NIST SP 800-57.
    ``insecure_allow_small_key=True`` admits any even size >= 512 for fast tests only.
    """
    if not isinstance(bits, int) or bits % 2:
        raise ConfigError(f"key size must be an even integer, got {bits!r}")
    if bits not in SECURE_KEY_BITS:
        if not insecure_allow_small_key:
            raise ConfigError(
                f"key size {bits} is not allowed; use one of {SECURE_KEY_BITS} "
                "(insecure_allow_small_key=True exists for tests only)"
            )
        if bits < MIN_TEST_KEY_BITS:
            raise ConfigError(f"key size must be >= {MIN_TEST_KEY_BITS} even for tests")
    randbits = randbits or secrets.randbits
    half = bits // 2
    while True:
        p = _random_prime(half, randbits)
        q = _random_prime(half, randbits)
        if p == q:
            continue
        # |p - q| must not be small (Fermat factoring): demand a difference in the top 100 bits.
        if abs(p - q).bit_length() <= half - 100:
            continue
        n = p * q
        if n.bit_length() != bits:
            continue
        if gmpy2.gcd(n, (p - 1) * (q - 1)) != 1:
            continue
        break
    public_key = PaillierPublicKey(n=int(n), hs=derive_hs(int(n), randbits))
    return public_key, PaillierPrivateKey(public_key=public_key, p=int(p), q=int(q))

"""Paillier key pairs: generation, fingerprints and byte serialisation.

The public key is ``(n, h_s)``: the modulus and the Damgård–Jurik–Nielsen base
``h_s = (-x^2)^n mod n^2`` used for short-exponent randomness (Damgård–Jurik–Nielsen, IJIS 2010;
see :mod:`securevfl.privacy.paillier.fast_backend`). g is fixed to ``n + 1`` and is not stored.
The private key is ``(p, q)`` with the CRT constants of Paillier 1999, section 7.

A public key usually arrives from another party, so construction validates it (as pyca's
``_verify_rsa_parameters`` does for RSA): n odd, not a perfect square, free of prime factors
below 2^12 and between ``MIN_TEST_KEY_BITS`` and ``MAX_KEY_BITS`` bits; h_s in [2, n^2 - 2], coprime
to n, and with ``h_s^M mod n != 1`` for M = lcm(1, ..., 2^12). The last test refuses h_s = 1
(every ciphertext 1 + m n, readable by anyone), h_s = -1, every h_s = 1 + k n = g^k (then
``Enc(m) = g^(m + k r)``, readable mod n with short r), and every h_s = g^k * y with y of
2^12-smooth order d (then ``c^d`` is readable). An honest h_s = h^n passes unless h has
2^12-smooth order mod n, which has negligible probability (and :func:`derive_hs` redraws).
Whether h_s is an n-th residue at all cannot be checked without the factors; a deviating key
holder could still pick an h_s that weakens *its own* key against others, which is why the key
holder is trusted not to collude (docs/paillier_aggregation.md).
"""

from __future__ import annotations

import hashlib
import math
import secrets
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

import gmpy2
from gmpy2 import mpz

from securevfl.errors import ConfigError, CryptoError

RandBits = Callable[[int], int]
"""A ``secrets.randbits``-like callable; injectable so tests can be deterministic."""

SECURE_KEY_BITS = (2048, 3072)
"""Key sizes accepted without the insecure test option: ~112- and ~128-bit security
(NIST SP 800-57 Part 1 Rev. 5, Table 2, IFC column)."""

MIN_TEST_KEY_BITS = 512
MAX_KEY_BITS = 16384
"""Largest modulus a public key may have (bounds the cost of validating a key someone sent)."""
SMALL_BOUND = 1 << 12
"""Bound of the cheap structural checks: trial division of n, smooth order of h_s."""
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


@cache
def _small_primes_product() -> int:
    return math.prod(p for p in range(3, SMALL_BOUND, 2) if gmpy2.is_prime(p))


@cache
def _smooth_exponent() -> int:
    """lcm(1, ..., SMALL_BOUND): every element of SMALL_BOUND-smooth order divides it (~5.9 kbit)."""
    return math.lcm(*range(1, SMALL_BOUND + 1))


def check_modulus(n: int) -> None:
    """Raise ConfigError unless n could be an honest Paillier modulus (cheap structural checks)."""
    if not MIN_TEST_KEY_BITS <= n.bit_length() <= MAX_KEY_BITS:
        raise ConfigError(
            f"Paillier modulus has {n.bit_length()} bits; {MIN_TEST_KEY_BITS} to {MAX_KEY_BITS} are accepted"
        )
    if n % 2 == 0:
        raise ConfigError("Paillier modulus must be an odd integer > 2")
    if gmpy2.is_square(n):
        raise ConfigError("Paillier modulus must not be a perfect square")
    if gmpy2.gcd(n, _small_primes_product()) != 1:
        raise ConfigError(f"Paillier modulus has a prime factor below {SMALL_BOUND}")


def check_djn_base(n: int, hs: int) -> None:
    """Raise CryptoError unless h_s is a usable DJN base for n (see the module docstring)."""
    nsq = n * n
    if not 2 <= hs <= nsq - 2 or gmpy2.gcd(hs, n) != 1:
        raise CryptoError("invalid DJN base h_s for this modulus")
    if gmpy2.powmod(hs, _smooth_exponent(), n) == 1:  # h_s = +-1, g^k, g^k * (small order), ...
        raise CryptoError("invalid DJN base h_s: it has small order modulo n")


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
        check_modulus(n)
        check_djn_base(n, hs)
        nsq = n * n
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
    def from_bytes(cls, data: bytes, expected_bits: int | None = None) -> PaillierPublicKey:
        """Load a key written by :meth:`to_bytes`; malformed or invalid keys raise CryptoError.

        ``expected_bits``: the agreed modulus size; a key of any other size is refused (before
        the validation's exponentiation, so an oversized key costs the receiver nothing).
        """
        n, hs = _unpack_ints(_PUBLIC_MAGIC, data, 2)
        if expected_bits is not None and n.bit_length() != expected_bits:
            raise CryptoError(f"a {n.bit_length()}-bit Paillier key where {expected_bits} bits were agreed")
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
            h = (-x * x) % n
            hs = int(gmpy2.powmod(h, n, n * n))
            try:
                check_djn_base(n, hs)  # fails only with negligible probability: draw again
            except CryptoError:
                continue
            return hs


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
                f"key size {bits} is not allowed; use one of {SECURE_KEY_BITS}"
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

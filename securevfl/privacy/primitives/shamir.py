"""Shamir secret sharing of short byte strings over the prime field GF(2^521 - 1).

Used for dropout recovery (Bonawitz et al., CCS 2017, sec. 4): a party's per-round key-agreement
secret and self-mask seed are split into n shares with threshold t; any t shares reconstruct
by Lagrange interpolation at x = 0, while t - 1 shares are statistically independent of the
secret (Shamir 1979). The field is the Mersenne prime 2^521 - 1, large enough for secrets of up
to 64 bytes (X25519 keys, 256/320-bit DH exponents, 32-byte seeds). Polynomial coefficients
are drawn uniformly by rejection sampling (no modular bias). Arithmetic uses Python ints (a
521-bit field is small; gmpy2 is not needed, so secure aggregation never loads it).

**What is and is not detected here.** Plain Shamir shares are not verifiable. This module
detects only malformed shares (wrong length, index 0, value outside the field, mixed
thresholds or lengths, duplicate indices, too few shares: :class:`ProtocolError`) and a
reconstructed value too large for the recorded secret length (:class:`CryptoError`). A share
whose value was altered is *not* reliably detected: with indices 1..n the Lagrange
coefficients at 0 are small integers (e.g. 3, -3, 1 for x = 1, 2, 3), so a small change to y
yields a wrong secret that still fits the length and comes back without error. Callers must
check the result against something the owner published: :mod:`securevfl.privacy.secagg`
compares each reconstructed secret with a SHA-256 commitment and, given a spare share, uses
:func:`interpolate_at` to name the inconsistent share (Feldman/Pedersen verifiable sharing
would catch a bad share before reconstruction; it is not implemented).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from securevfl.errors import ConfigError, CryptoError, ProtocolError

PRIME = (1 << 521) - 1
MAX_SECRET_BYTES = 64
_Y_BYTES = 66
_HEADER = struct.Struct(">IHH")  # x, threshold, secret length

Urandom = Callable[[int], bytes]


@dataclass(frozen=True)
class Share:
    """One Shamir share: the point (x, y) plus the threshold and secret length it belongs to."""

    x: int
    y: int = field(repr=False)
    threshold: int
    secret_len: int

    def __post_init__(self) -> None:
        if not 1 <= self.x < (1 << 32):
            raise ProtocolError(f"share index must be in [1, 2^32), got {self.x}")
        if not 0 <= self.y < PRIME:
            raise ProtocolError("share value outside the field")
        if not 1 <= self.threshold <= 0xFFFF or not 1 <= self.secret_len <= MAX_SECRET_BYTES:
            raise ProtocolError("malformed share header")

    def to_bytes(self) -> bytes:
        """Serialise to 74 bytes: x (4) || threshold (2) || secret_len (2) || y (66)."""
        return _HEADER.pack(self.x, self.threshold, self.secret_len) + self.y.to_bytes(
            _Y_BYTES, "big"
        )

    @classmethod
    def from_bytes(cls, blob: bytes) -> Share:
        """Parse :meth:`to_bytes` output; malformed input raises :class:`ProtocolError`.

        Only the format is checked (see the module docstring): an altered y parses fine.
        """
        if not isinstance(blob, bytes | bytearray | memoryview):
            raise ProtocolError(f"a Shamir share is bytes, got {type(blob).__name__}")
        blob = bytes(blob)
        if len(blob) != _HEADER.size + _Y_BYTES:
            raise ProtocolError("a Shamir share is 74 bytes")
        x, threshold, secret_len = _HEADER.unpack_from(blob)
        return cls(x, int.from_bytes(blob[_HEADER.size :], "big"), threshold, secret_len)


SHARE_BYTES = _HEADER.size + _Y_BYTES


def _random_field_element(urandom: Urandom) -> int:
    while True:  # rejection sampling; P(reject) = 2^-521
        value = int.from_bytes(urandom(_Y_BYTES), "big") & PRIME
        if value < PRIME:
            return value


def split_secret(
    secret: bytes,
    threshold: int,
    x_indices: Sequence[int],
    urandom: Urandom | None = None,
) -> tuple[Share, ...]:
    """Split ``secret`` into one share per x index (distinct, >= 1); any t shares recover it."""
    if not 1 <= len(secret) <= MAX_SECRET_BYTES:
        raise ConfigError(f"secret must be 1..{MAX_SECRET_BYTES} bytes, got {len(secret)}")
    xs = [int(x) for x in x_indices]
    if len(set(xs)) != len(xs) or any(not 1 <= x < (1 << 32) for x in xs):
        raise ConfigError("share indices must be distinct integers in [1, 2^32)")
    if not 1 < threshold <= len(xs):
        raise ConfigError(f"threshold must satisfy 1 < t <= n (n={len(xs)}), got {threshold}")
    draw = urandom or os.urandom
    coeffs = [int.from_bytes(secret, "big")]
    coeffs += [_random_field_element(draw) for _ in range(threshold - 1)]
    shares = []
    for x in xs:
        acc = 0
        for c in reversed(coeffs):  # Horner
            acc = (acc * x + c) % PRIME
        shares.append(Share(x, acc, threshold, len(secret)))
    return tuple(shares)


def lagrange_at(x_indices: Sequence[int], at: int) -> tuple[int, ...]:
    """Lagrange basis values L_i(at) = prod_{j != i} (at - x_j) / (x_i - x_j) over GF(2^521 - 1)."""
    xs = [int(x) for x in x_indices]
    if len(set(xs)) != len(xs):
        raise ProtocolError("duplicate share indices")
    point = int(at)
    coeffs = []
    for i, xi in enumerate(xs):
        num = 1
        den = 1
        for j, xj in enumerate(xs):
            if i != j:
                num = num * (point - xj) % PRIME
                den = den * (xi - xj) % PRIME
        coeffs.append(num * pow(den, -1, PRIME) % PRIME)
    return tuple(coeffs)


def lagrange_at_zero(x_indices: Sequence[int]) -> tuple[int, ...]:
    """Lagrange basis values L_i(0) = prod_{j != i} x_j / (x_j - x_i) over GF(2^521 - 1).

    They depend only on which indices answered, so one set serves every secret reconstructed
    from the same responders (the aggregator reconstructs n secrets per round).
    """
    return lagrange_at(x_indices, 0)


def interpolate_at_zero(
    points: Sequence[tuple[int, int]], coefficients: Sequence[int] | None = None
) -> int:
    """Lagrange interpolation at x = 0 of the polynomial through ``points`` over GF(2^521 - 1).

    ``coefficients`` may pass precomputed :func:`lagrange_at_zero` values for the same xs.
    """
    coeffs = lagrange_at_zero([x for x, _ in points]) if coefficients is None else coefficients
    if len(coeffs) != len(points):
        raise ProtocolError("one Lagrange coefficient per share is needed")
    total = 0
    for (_, y), c in zip(points, coeffs, strict=True):
        total += int(y) * c
    return total % PRIME


def interpolate_at(points: Sequence[tuple[int, int]], at: int) -> int:
    """Value at x = ``at`` of the polynomial through ``points`` (degree len(points) - 1).

    Used to check a further share against t shares already known to be right: it is
    consistent exactly when its y equals this value at its x.
    """
    coeffs = lagrange_at([x for x, _ in points], at)
    total = 0
    for (_, y), c in zip(points, coeffs, strict=True):
        total += int(y) * c
    return total % PRIME


def reconstruct_secret(shares: Sequence[Share], coefficients: Sequence[int] | None = None) -> bytes:
    """Recover the secret from at least ``threshold`` consistent shares (the first t are used).

    ``coefficients``: optional :func:`lagrange_at_zero` of the first t shares' x indices.

    Fewer shares than the threshold, or mixed thresholds or lengths, raise
    :class:`ProtocolError`; a result too large for the recorded length raises
    :class:`CryptoError`. A tampered share value usually yields a *wrong secret without an
    error* (see the module docstring): verify the result against a commitment.
    """
    if not shares:
        raise ProtocolError("no shares to reconstruct from")
    threshold, secret_len = shares[0].threshold, shares[0].secret_len
    if any(s.threshold != threshold or s.secret_len != secret_len for s in shares):
        raise ProtocolError("shares of different secrets mixed")
    if len(shares) < threshold:
        raise ProtocolError(f"need {threshold} shares to reconstruct, got {len(shares)}")
    value = interpolate_at_zero([(s.x, s.y) for s in shares[:threshold]], coefficients)
    if value >= 1 << (8 * secret_len):
        raise CryptoError("inconsistent shares")
    return value.to_bytes(secret_len, "big")


__all__ = [
    "MAX_SECRET_BYTES",
    "PRIME",
    "SHARE_BYTES",
    "Share",
    "interpolate_at",
    "interpolate_at_zero",
    "lagrange_at",
    "lagrange_at_zero",
    "reconstruct_secret",
    "split_secret",
]

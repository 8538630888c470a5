"""Signed fixed-point encoding of real numbers into the Paillier plaintext ring Z_n.

A value x is encoded at ``scale_bits`` s as the integer v = round(x * 2^s), stored as v mod n:
non-negative v as itself, negative v in the upper part of the ring (n + v). As in
python-paillier, only |v| <= n // 3 - 1 is accepted on encoding; a decrypted residue in the
middle third (max_int, n - max_int) can only come from an overflow and is reported as
:class:`~securevfl.errors.EncodingOverflowError` instead of a wrong number.
"""

from __future__ import annotations

from fractions import Fraction
from typing import cast

import numpy as np

from securevfl.errors import DataError, EncodingOverflowError

DEFAULT_FRAC_BITS = 32
"""Fractional bits of a fresh encoding: 2^-32 ~ 2.3e-10 absolute resolution."""


def to_fixed_ints(values: np.ndarray, scale_bits: int) -> list[int]:
    """Round ``values * 2^scale_bits`` to Python ints (exact: scaling by 2^s is lossless)."""
    array = np.asarray(values)
    if array.dtype.kind in "iub" and scale_bits >= 0:
        return [int(v) << scale_bits for v in array.ravel().tolist()]
    array = np.asarray(array, dtype=np.float64)
    if not np.all(np.isfinite(array)):
        raise DataError("cannot encrypt NaN or infinite values")
    with np.errstate(over="ignore"):
        scaled = np.rint(np.ldexp(array.ravel(), scale_bits))
    if not np.all(np.isfinite(scaled)):
        # Beyond float range: scale exactly with Fractions (round half to even, as np.rint).
        return [round(Fraction(v) * 2**scale_bits) for v in array.ravel().tolist()]
    if scaled.size and float(np.max(np.abs(scaled))) < 2.0**62:
        return cast(list[int], scaled.astype(np.int64).tolist())
    return [int(v) for v in scaled.tolist()]


def encode_signed(ints: list[int], n: int) -> list[int]:
    """Map signed ints into Z_n (negatives to n + v), rejecting |v| > n // 3 - 1."""
    max_int = n // 3 - 1
    out = []
    for v in ints:
        if v > max_int or v < -max_int:
            raise EncodingOverflowError("value exceeds the plaintext range n/3 of this key")
        out.append(v % n)
    return out


def decode_signed(residues: list[int], n: int) -> list[int]:
    """Inverse of :func:`encode_signed`; a residue in the middle third means overflow."""
    max_int = n // 3 - 1
    out = []
    for m in residues:
        m = int(m)
        if m <= max_int:
            out.append(m)
        elif m >= n - max_int:
            out.append(m - n)
        else:
            raise EncodingOverflowError("decrypted value overflowed the plaintext range")
    return out


def from_fixed_ints(ints: list[int] | np.ndarray, scale_bits: int) -> np.ndarray:
    """Divide signed ints by 2^scale_bits, correctly rounded to float64."""
    if isinstance(ints, np.ndarray) and ints.dtype == np.int64:
        return np.ldexp(ints.astype(np.float64), -scale_bits)
    if isinstance(ints, np.ndarray):
        ints = ints.ravel().tolist()
    if scale_bits <= 0:
        return np.array([float(v << -scale_bits) for v in ints], dtype=np.float64)
    divisor = 1 << scale_bits
    return np.array([v / divisor for v in ints], dtype=np.float64)

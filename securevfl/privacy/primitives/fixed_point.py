"""Exact fixed-point encoding of real arrays into the ring Z_2^64 (numpy ``uint64``).

Secure aggregation adds uniformly random masks to every value, so it must work in a finite ring
where "add a random element" hides the value perfectly (a one-time pad). Z_2^64 is the ring numpy
gives us for free: ``uint64`` arithmetic wraps modulo 2^64. A real ``x`` is encoded as the
two's-complement integer ``round(x * 2^f)``; sums of encodings decode to the sum of the reals as
long as the true (unwrapped) integer sum stays inside the signed range ``[-2^63, 2^63)``.

Overflow is detected at encoding time, never wrapped silently: the caller states how many terms
will be summed (``n_terms``), and each encoded magnitude must be at most
``floor((2^63 - 1) / n_terms)`` ring units, which guarantees that the sum of ``n_terms`` such
values cannot leave the signed range. Encoding error per value is at most ``2^-(f+1)``
(round-to-nearest); the sum of ``n`` encodings decodes within ``n * 2^-(f+1)`` of the real sum.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from securevfl.errors import ConfigError, DataError, EncodingOverflowError

RING_BITS = 64
DEFAULT_FRAC_BITS = 16
_SIGNED_MAX = (1 << (RING_BITS - 1)) - 1


@dataclass(frozen=True)
class FixedPointConfig:
    """Fixed-point parameters: ``frac_bits`` fractional bits in Z_2^64, ``n_terms`` summands.

    ``n_terms`` reserves headroom so the sum of that many encodings cannot overflow.
    """

    frac_bits: int = DEFAULT_FRAC_BITS
    n_terms: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.frac_bits, int) or not 0 <= self.frac_bits <= 52:
            raise ConfigError(f"frac_bits must be an int in [0, 52], got {self.frac_bits!r}")
        if not isinstance(self.n_terms, int) or self.n_terms < 1:
            raise ConfigError(f"n_terms must be an int >= 1, got {self.n_terms!r}")

    @property
    def max_ring_magnitude(self) -> int:
        """Largest encoded magnitude (in ring units) allowed per term."""
        return _SIGNED_MAX // self.n_terms

    @property
    def max_magnitude(self) -> float:
        """Largest real magnitude that can be encoded with this headroom."""
        return self.max_ring_magnitude / float(1 << self.frac_bits)

    @property
    def resolution(self) -> float:
        """The encoding step 2^-frac_bits."""
        return 1.0 / float(1 << self.frac_bits)


def max_magnitude(frac_bits: int = DEFAULT_FRAC_BITS, n_terms: int = 1) -> float:
    """Largest |x| that :func:`encode` accepts for the given precision and number of summands."""
    return FixedPointConfig(frac_bits, n_terms).max_magnitude


def encode(
    values: np.ndarray | float, frac_bits: int = DEFAULT_FRAC_BITS, n_terms: int = 1
) -> np.ndarray:
    """Encode a real array into Z_2^64 as ``round(x * 2^frac_bits)`` (two's complement uint64).

    Raises :class:`DataError` on NaN/inf and :class:`EncodingOverflowError` when some
    ``|x| * 2^frac_bits`` exceeds ``(2^63 - 1) // n_terms`` (the sum of ``n_terms`` encodings
    would no longer decode correctly). The result always has dtype ``uint64``.
    """
    cfg = FixedPointConfig(frac_bits, n_terms)
    x = np.asarray(values)
    if x.dtype != np.float32 and x.dtype != np.float64:
        x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return np.zeros(x.shape, dtype=np.uint64)
    # Multiplying by a power of two is exact (barring overflow to inf, caught below), so
    # rounding is the only error source. (np.ldexp is equivalent but ~10x slower.)
    scale = float(1 << frac_bits)
    # x -> rint(x * 2^f) is non-decreasing, so the extremes of the encoding are the images of
    # the extremes of ``x`` (NaN propagates through both): check them before encoding (and
    # reduce ``x``, half the bytes of float32 input).
    hi = float(np.rint(float(x.max()) * scale))
    lo = float(np.rint(float(x.min()) * scale))
    if not (np.isfinite(hi) and np.isfinite(lo)):
        raise DataError("cannot encode NaN or infinite values into the fixed-point ring")
    # Both extremes are integer-valued floats, so ``int()`` gives their exact value and the
    # comparison with the integer bound is exact (no float rounding of the bound).
    peak = int(max(hi, -lo))
    if peak > cfg.max_ring_magnitude:
        raise EncodingOverflowError(
            f"value of magnitude {peak / (1 << frac_bits):.6g} does not fit the fixed-point "
            f"ring: max representable magnitude is {cfg.max_magnitude:.6g} "
            f"(frac_bits={frac_bits}, headroom for n_terms={n_terms} summands in Z_2^64)"
        )
    # float32 input is widened (exactly) inside the multiply, without a float64 copy first.
    scaled: np.ndarray = np.multiply(x, scale, out=np.empty(x.shape, dtype=np.float64), dtype=np.float64)
    np.rint(scaled, out=scaled)
    return scaled.astype(np.int64).view(np.uint64)


def decode(encoded: np.ndarray, frac_bits: int = DEFAULT_FRAC_BITS) -> np.ndarray:
    """Decode ring elements (e.g. a sum of encodings) back to float64, two's complement."""
    FixedPointConfig(frac_bits, 1)
    arr = np.asarray(encoded)
    if arr.dtype != np.uint64:
        raise DataError(f"decode expects a uint64 array, got dtype {arr.dtype}")
    # One pass: each int64 is converted to float64 (as astype would), then scaled exactly (a
    # power of two).
    out: np.ndarray = np.multiply(arr.view(np.int64), 1.0 / float(1 << frac_bits),
                                  out=np.empty(arr.shape, dtype=np.float64), dtype=np.float64)
    return out


def ring_sum(arrays: list[np.ndarray] | tuple[np.ndarray, ...]) -> np.ndarray:
    """Sum uint64 arrays modulo 2^64 (numpy wraps uint64 addition)."""
    if not arrays:
        raise DataError("ring_sum needs at least one array")
    first = np.asarray(arrays[0], dtype=np.uint64)
    if len(arrays) == 1:
        copy: np.ndarray = first.copy()
        return copy
    second = np.asarray(arrays[1])
    if second.shape != first.shape:
        raise DataError(f"shape mismatch in ring_sum: {second.shape} vs {first.shape}")
    total: np.ndarray = np.add(first, second, dtype=np.uint64)  # a new array: the inputs are left alone
    for arr in arrays[2:]:
        if arr.shape != total.shape:
            raise DataError(f"shape mismatch in ring_sum: {arr.shape} vs {total.shape}")
        np.add(total, arr, out=total)
    return total


__all__ = [
    "DEFAULT_FRAC_BITS",
    "RING_BITS",
    "FixedPointConfig",
    "decode",
    "encode",
    "max_magnitude",
    "ring_sum",
]

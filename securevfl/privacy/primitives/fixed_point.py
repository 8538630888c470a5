"""Exact fixed-point encoding of real arrays into the ring Z_2^64 (numpy ``uint64``), or Z_2^32.

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

**The 32-bit ring** (``ring_bits=32``, half the bytes on the wire). Reducing mod 2^32 is a ring
homomorphism Z_2^64 -> Z_2^32, so masks that cancel mod 2^64 also cancel mod 2^32, and a uniform
uint64 mask reduced mod 2^32 is uniform on Z_2^32: the arithmetic stays in ``uint64``, and only
the masked vector that goes on the wire is cut to ``uint32`` (:func:`to_ring`); the receiver
widens it again (:func:`from_ring`), sums, and :func:`decode` reduces the sum mod 2^32 and reads it
as a signed 32-bit integer. The precision is the same (``frac_bits``); the range shrinks to
``|x| <= floor((2^31 - 1) / n_terms) / 2^f`` per term — e.g. 3,276.7 for 10 summands at f = 16 —
and :func:`encode` refuses larger values (:class:`EncodingOverflowError`) exactly as for 64 bits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from securevfl.errors import ConfigError, DataError, EncodingOverflowError

RING_BITS = 64
#: The rings a masked vector may travel in (``ring_bits``); 64 is the default.
RING_BITS_CHOICES = (32, 64)
DEFAULT_FRAC_BITS = 16
_SIGNED_MAX = (1 << (RING_BITS - 1)) - 1
_WIRE_DTYPES: dict[int, np.dtype[np.unsignedinteger]] = {32: np.dtype(np.uint32), 64: np.dtype(np.uint64)}


def check_ring_bits(ring_bits: int) -> int:
    """``ring_bits`` if it names a supported ring (32 or 64), else ConfigError."""
    if isinstance(ring_bits, bool) or ring_bits not in RING_BITS_CHOICES:
        raise ConfigError(f"ring_bits must be one of {', '.join(map(str, RING_BITS_CHOICES))}, got {ring_bits!r}")
    return ring_bits


def ring_dtype(ring_bits: int) -> np.dtype[np.unsignedinteger]:
    """The unsigned dtype a masked vector of that ring travels as (uint32 or uint64)."""
    return _WIRE_DTYPES[check_ring_bits(ring_bits)]


@dataclass(frozen=True)
class FixedPointConfig:
    """Fixed-point parameters: ``frac_bits`` fractional bits in Z_2^``ring_bits``, ``n_terms`` summands.

    ``n_terms`` reserves headroom so the sum of that many encodings cannot overflow.
    """

    frac_bits: int = DEFAULT_FRAC_BITS
    n_terms: int = 1
    ring_bits: int = RING_BITS

    def __post_init__(self) -> None:
        check_ring_bits(self.ring_bits)
        limit = min(52, self.ring_bits - 2)  # at least one integer bit besides the sign
        if not isinstance(self.frac_bits, int) or not 0 <= self.frac_bits <= limit:
            raise ConfigError(
                f"frac_bits must be an int in [0, {limit}] for the {self.ring_bits}-bit ring, got {self.frac_bits!r}")
        if not isinstance(self.n_terms, int) or self.n_terms < 1:
            raise ConfigError(f"n_terms must be an int >= 1, got {self.n_terms!r}")

    @property
    def max_ring_magnitude(self) -> int:
        """Largest encoded magnitude (in ring units) allowed per term."""
        return ((1 << (self.ring_bits - 1)) - 1) // self.n_terms

    @property
    def max_magnitude(self) -> float:
        """Largest real magnitude that can be encoded with this headroom."""
        return self.max_ring_magnitude / float(1 << self.frac_bits)

    @property
    def resolution(self) -> float:
        """The encoding step 2^-frac_bits."""
        return 1.0 / float(1 << self.frac_bits)


def max_magnitude(frac_bits: int = DEFAULT_FRAC_BITS, n_terms: int = 1, ring_bits: int = RING_BITS) -> float:
    """Largest |x| that :func:`encode` accepts for the given precision, summands and ring."""
    return FixedPointConfig(frac_bits, n_terms, ring_bits).max_magnitude


def _flat_out(arr: np.ndarray | None, size: int, dtype: type, what: str) -> np.ndarray | None:
    if arr is None:
        return None
    if arr.dtype != dtype or arr.size != size or not arr.flags.c_contiguous:
        raise ConfigError(f"{what} must be a C-contiguous {np.dtype(dtype).name} array of {size} elements")
    return arr.reshape(-1)


def encode(
    values: np.ndarray | float,
    frac_bits: int = DEFAULT_FRAC_BITS,
    n_terms: int = 1,
    ring_bits: int = RING_BITS,
    *,
    out: np.ndarray | None = None,
    scratch: np.ndarray | None = None,
) -> np.ndarray:
    """Encode a real array into Z_2^64 as ``round(x * 2^frac_bits)`` (two's complement uint64).

    Raises :class:`DataError` on NaN/inf and :class:`EncodingOverflowError` when some
    ``|x| * 2^frac_bits`` exceeds ``(2^(ring_bits-1) - 1) // n_terms`` (the sum of ``n_terms``
    encodings would no longer decode correctly in Z_2^ring_bits). The result always has dtype
    ``uint64`` (for ``ring_bits=32`` too: see :func:`to_ring`).

    ``out`` (uint64) and ``scratch`` (float64), C-contiguous arrays of ``values.size`` elements,
    receive the encoding and the intermediate scaled values instead of fresh arrays (see
    :mod:`~securevfl.privacy.primitives.buffers`); the result is then ``out`` in ``values``' shape.
    """
    cfg = FixedPointConfig(frac_bits, n_terms, ring_bits)
    x = np.asarray(values)
    if x.dtype != np.float32 and x.dtype != np.float64:
        x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return np.zeros(x.shape, dtype=np.uint64)
    flat_out = _flat_out(out, x.size, np.uint64, "out")
    flat_scratch = _flat_out(scratch, x.size, np.float64, "scratch")
    # Multiplying by a power of two is exact (barring overflow to inf, caught below), so
    # rounding is the only error source. (np.ldexp is equivalent but ~10x slower.) float32
    # input is widened (exactly) inside the multiply, without a float64 copy first.
    scale = float(1 << frac_bits)
    target = np.empty(x.shape, dtype=np.float64) if flat_scratch is None else flat_scratch.reshape(x.shape)
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow becomes inf: refused just below
        scaled: np.ndarray = np.multiply(x, scale, out=target, dtype=np.float64)
    # x -> rint(x * 2^f) is non-decreasing, so the extremes of the encoding are the images of
    # the extremes of the scaled values (NaN propagates through both): check them before
    # encoding. ``x`` is read once; the reductions read ``scaled``, still in cache.
    hi = float(np.rint(float(scaled.max())))
    lo = float(np.rint(float(scaled.min())))
    if not (np.isfinite(hi) and np.isfinite(lo)):
        raise DataError("cannot encode NaN or infinite values into the fixed-point ring")
    # Both extremes are integer-valued floats, so ``int()`` gives their exact value and the
    # comparison with the integer bound is exact (no float rounding of the bound).
    peak = int(max(hi, -lo))
    if peak > cfg.max_ring_magnitude:
        raise EncodingOverflowError(
            f"value of magnitude {peak / (1 << frac_bits):.6g} does not fit the fixed-point "
            f"ring: max representable magnitude is {cfg.max_magnitude:.6g} "
            f"(frac_bits={frac_bits}, headroom for n_terms={n_terms} summands in Z_2^{ring_bits})"
            + ("; use ring_bits=64 or fewer frac_bits" if ring_bits < RING_BITS else "")
        )
    encoded = (np.empty(x.shape, dtype=np.uint64) if flat_out is None else flat_out.reshape(x.shape))
    # Rounded and converted in one pass: the integer-valued doubles convert to int64 exactly.
    np.rint(scaled, out=encoded.view(np.int64), casting="unsafe")
    return encoded


def to_ring(values: np.ndarray, ring_bits: int = RING_BITS) -> np.ndarray:
    """A uint64 array (e.g. a masked encoding) as the wire dtype of Z_2^ring_bits (mod 2^32: uint32)."""
    if values.dtype != np.uint64:
        raise DataError(f"to_ring expects a uint64 array, got dtype {values.dtype}")
    if check_ring_bits(ring_bits) == RING_BITS:
        return values
    return values.astype(np.uint32)  # keeps the low 32 bits: reduction mod 2^32


def from_ring(values: np.ndarray, ring_bits: int = RING_BITS) -> np.ndarray:
    """A received ring vector widened to uint64 for the arithmetic; DataError for a foreign dtype."""
    expected = ring_dtype(ring_bits)
    if values.dtype != expected:
        raise DataError(f"a vector of the {ring_bits}-bit ring must be {expected}, got {values.dtype}")
    return values if ring_bits == RING_BITS else values.astype(np.uint64)


def decode(encoded: np.ndarray, frac_bits: int = DEFAULT_FRAC_BITS, ring_bits: int = RING_BITS) -> np.ndarray:
    """Decode ring elements (e.g. a sum of encodings) back to float64, two's complement.

    With ``ring_bits=32`` the uint64 (or uint32) input is first reduced mod 2^32 and read as a
    signed 32-bit integer.
    """
    FixedPointConfig(frac_bits, 1, ring_bits)
    arr = np.asarray(encoded)
    if ring_bits != RING_BITS:
        if arr.dtype not in (np.uint32, np.uint64):
            raise DataError(f"decode expects a uint32 or uint64 array, got dtype {arr.dtype}")
        signed32 = arr.astype(np.uint32, copy=False).view(np.int32)
        out32: np.ndarray = np.multiply(signed32, 1.0 / float(1 << frac_bits),
                                        out=np.empty(arr.shape, dtype=np.float64), dtype=np.float64)
        return out32
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
    "RING_BITS_CHOICES",
    "FixedPointConfig",
    "check_ring_bits",
    "decode",
    "encode",
    "from_ring",
    "max_magnitude",
    "ring_dtype",
    "ring_sum",
    "to_ring",
]

"""Packing many fixed-point values into one Paillier plaintext, with headroom for additions.

Layout (little-endian in slots: slot 0 holds the least significant bits)::

    plaintext = sum_i  (v_i + 2^w) * 2^(i * b)          0 <= i < slots

with ``b`` = ``slot_bits``, ``w`` = ``value_bits`` and v_i = round(x_i * 2^frac_bits) required
to lie in [-2^w, 2^w). The offset 2^w makes every slot non-negative, so a slot starts in
[0, 2^(w+1)). Summing ``t`` packed plaintexts leaves ``t * 2^w + sum v`` in a slot, which is
< t * 2^(w+1); the headroom rule ``b >= w + 1 + ceil(log2 k)`` therefore guarantees that sums of
up to ``k`` = ``max_summands`` terms never carry into the next slot. Each packed tensor carries its
term count t; an operation that would make t exceed k raises EncodingOverflowError before any
ciphertext is produced, so a carry can never happen silently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from securevfl.errors import ConfigError, EncodingOverflowError

from .encoding import to_fixed_ints


@dataclass(frozen=True)
class PackingSpec:
    """What the caller asks for: slot width, the most terms a slot may sum, fixed-point bits."""

    slot_bits: int = 32
    max_summands: int = 16
    frac_bits: int = 16

    def __post_init__(self) -> None:
        if not 8 <= self.slot_bits <= 1024:
            raise ConfigError("slot_bits must be in [8, 1024]")
        if self.max_summands < 1:
            raise ConfigError("max_summands must be >= 1")
        if not 0 <= self.frac_bits <= self.slot_bits:
            raise ConfigError("frac_bits must be in [0, slot_bits]")
        if self.value_bits < 1:
            raise ConfigError(
                f"slot_bits={self.slot_bits} leaves no room for values with "
                f"max_summands={self.max_summands}"
            )

    @classmethod
    def fitting(cls, max_abs_value: float, max_summands: int, frac_bits: int = 16) -> PackingSpec:
        """Narrowest spec whose slots hold |x| <= max_abs_value summed up to max_summands times."""
        if not max_abs_value >= 0 or max_summands < 1:
            raise ConfigError("need max_abs_value >= 0 and max_summands >= 1")
        value_bits = max(1, math.ceil(max_abs_value * 2**frac_bits + 1).bit_length())
        slot_bits = value_bits + 1 + (max_summands - 1).bit_length()
        return cls(slot_bits=max(8, slot_bits, frac_bits), max_summands=max_summands,
                   frac_bits=frac_bits)

    @property
    def headroom_bits(self) -> int:
        """Bits reserved for carries of up to ``max_summands`` terms: ceil(log2 k)."""
        return (self.max_summands - 1).bit_length()

    @property
    def value_bits(self) -> int:
        """w: encoded values must lie in [-2^w, 2^w)."""
        return self.slot_bits - 1 - self.headroom_bits

    @property
    def max_abs_value(self) -> float:
        """Largest real magnitude that encodes without overflow (about 2^(w - frac_bits))."""
        return float((2**self.value_bits - 1) / 2**self.frac_bits)


@dataclass(frozen=True)
class PackingLayout:
    """A spec bound to a key size: how many slots fit below n."""

    spec: PackingSpec
    slots: int

    @classmethod
    def for_key(cls, spec: PackingSpec, n_bits: int) -> PackingLayout:
        """Fit as many whole slots as stay below 2^(n_bits - 1) <= n (so no reduction mod n)."""
        slots = (n_bits - 1) // spec.slot_bits
        if slots < 1:
            raise ConfigError("slot wider than the plaintext space")
        return cls(spec=spec, slots=slots)

    def check_terms(self, terms: int) -> None:
        """Raise EncodingOverflowError if ``terms`` summands exceed the declared headroom."""
        if terms > self.spec.max_summands:
            raise EncodingOverflowError(
                f"packed slot would hold {terms} summands; headroom allows "
                f"{self.spec.max_summands} (slot_bits={self.spec.slot_bits})"
            )

    def n_ciphertexts(self, length: int) -> int:
        """Ciphertexts needed for ``length`` values along the packed axis."""
        return max(1, -(-length // self.slots))

    def _byte_width(self) -> int | None:
        """Bytes per slot when slots map onto numpy unsigned integers, else None."""
        b = self.spec.slot_bits
        return b // 8 if b % 8 == 0 and b // 8 in (1, 2, 4, 8) else None

    def _slot_contents(self, values: np.ndarray) -> np.ndarray:
        """Offset slot contents v + 2^w (uint64 when w <= 62, else Python ints), range-checked."""
        spec = self.spec
        f, w = spec.frac_bits, spec.value_bits
        overflow = EncodingOverflowError(
            f"value outside the packing range +-{spec.max_abs_value:g} "
            f"(value_bits={w}, frac_bits={f})"
        )
        if w <= 62 and values.dtype.kind in "fiub":
            if values.dtype.kind == "f":
                if not np.all(np.isfinite(values)):
                    raise overflow
                scaled = np.rint(np.ldexp(values.astype(np.float64), f))
                if values.size and not (scaled.min() >= -(2.0**w) and scaled.max() < 2.0**w):
                    raise overflow
                ints = scaled.astype(np.int64)
            else:
                lo, hi = -((1 << w) >> f), max(1, (1 << w) >> f)
                if values.size and not (int(values.min()) >= lo and int(values.max()) < hi):
                    raise overflow
                ints = values.astype(np.int64) << f
            return (ints + (1 << w)).astype(np.uint64)
        fixed = to_fixed_ints(values, f)
        for v in fixed:
            if not -(1 << w) <= v < (1 << w):
                raise overflow
        return np.array([v + (1 << w) for v in fixed], dtype=object).reshape(values.shape)

    def pack_rows(self, values: np.ndarray) -> tuple[list[int], int]:
        """Pack a 2-D array (rows, length) row-wise; returns plaintext ints and per-row count."""
        rows, length = values.shape
        per_row = self.n_ciphertexts(length)
        slots = self.slots
        contents = self._slot_contents(values)
        full = np.full((rows, per_row * slots), 1 << self.spec.value_bits, dtype=contents.dtype)
        full[:, :length] = contents  # padding slots hold an encoded zero
        grouped = full.reshape(rows * per_row, slots)[:, ::-1]  # slot 0 least significant
        width = self._byte_width()
        if width is not None and contents.dtype == np.uint64:
            raw = np.ascontiguousarray(grouped).astype(f">u{width}").tobytes()
            step = slots * width
            chunks = range(0, len(raw), step)
            return [int.from_bytes(raw[i : i + step], "big") for i in chunks], per_row
        b = self.spec.slot_bits
        out = []
        for row in grouped.tolist():
            acc = 0
            for v in row:
                acc = (acc << b) | int(v)
            out.append(acc)
        return out, per_row

    def unpack(self, plaintexts: list[int], terms: int, length: int) -> np.ndarray:
        """Split plaintexts into slots, remove ``terms`` offsets, keep ``length`` values per row.

        ``plaintexts`` holds rows * per_row ints in row order; the result is a (rows, length)
        array of signed fixed-point ints (int64, or object for slots wider than 64 bits). A
        plaintext wider than its slots means a corrupted or foreign ciphertext.
        """
        b = self.spec.slot_bits
        slots = self.slots
        total_bits = b * slots
        offset = terms << self.spec.value_bits
        per_row = self.n_ciphertexts(length)
        rows = len(plaintexts) // per_row
        for m in plaintexts:
            if int(m) >> total_bits:
                raise EncodingOverflowError("packed plaintext overflowed its slots")
        width = self._byte_width()
        signed: np.ndarray
        if width is not None:
            raw = b"".join(int(m).to_bytes(total_bits // 8, "big") for m in plaintexts)
            words = np.frombuffer(raw, dtype=f">u{width}").astype(np.uint64)
            words = words.reshape(len(plaintexts), slots)[:, ::-1]
            # Sums lie in [-2^63, 2^63): modular uint64 subtraction then a signed view is exact.
            signed = (words - np.uint64(offset)).view(np.int64)
        else:
            mask = (1 << b) - 1
            signed = np.array(
                [[((int(m) >> (i * b)) & mask) - offset for i in range(slots)] for m in plaintexts],
                dtype=object,
            ).reshape(len(plaintexts), slots)
        return signed.reshape(rows, per_row * slots)[:, :length]

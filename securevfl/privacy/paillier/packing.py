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
        if not 0 <= self.frac_bits:
            raise ConfigError("frac_bits must be >= 0")
        if self.value_bits < 1:
            raise ConfigError(
                f"slot_bits={self.slot_bits} leaves no room for values with "
                f"max_summands={self.max_summands}"
            )

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
        return (2**self.value_bits - 1) / 2**self.frac_bits


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

    def pack_rows(self, values: np.ndarray) -> tuple[list[int], int]:
        """Pack a 2-D array (rows, length) row-wise; returns plaintext ints and per-row count."""
        spec = self.spec
        rows, length = values.shape
        per_row = self.n_ciphertexts(length)
        ints = to_fixed_ints(values, spec.frac_bits)
        w = spec.value_bits
        lo, hi = -(1 << w), (1 << w)
        offset_ints = np.zeros((rows, per_row * self.slots), dtype=object)
        offset_ints[:, :] = 1 << w  # padding slots hold an encoded zero
        flat = np.array(ints, dtype=object).reshape(rows, length) if length else offset_ints[:, :0]
        for v in ints:
            if not lo <= v < hi:
                raise EncodingOverflowError(
                    f"value outside the packing range +-{spec.max_abs_value:g} "
                    f"(value_bits={w}, frac_bits={spec.frac_bits})"
                )
        offset_ints[:, :length] = flat + (1 << w)
        grouped = offset_ints.reshape(rows * per_row, self.slots)
        return [self._join(row.tolist()) for row in grouped], per_row

    def _join(self, slot_values: list[int]) -> int:
        b = self.spec.slot_bits
        if b % 8 == 0 and b <= 64:
            width = b // 8
            dtype = np.dtype(f">u{width}") if width in (1, 2, 4, 8) else None
            if dtype is not None:
                raw = np.array(slot_values[::-1], dtype=np.uint64).astype(dtype).tobytes()
                return int.from_bytes(raw, "big")
        acc = 0
        for v in reversed(slot_values):
            acc = (acc << b) | v
        return acc

    def unpack(self, plaintexts: list[int], terms: int, length: int) -> list[int]:
        """Split plaintexts into slots, remove ``terms`` offsets, keep ``length`` values per row.

        ``plaintexts`` holds rows * per_row ints in row order; the result is rows * length signed
        fixed-point ints. A plaintext wider than the slots means a corrupted or foreign ciphertext.
        """
        b = self.spec.slot_bits
        slots = self.slots
        total_bits = b * slots
        offset = terms << self.spec.value_bits
        per_row = self.n_ciphertexts(length)
        out: list[int] = []
        width = b // 8
        fast = b % 8 == 0 and width in (1, 2, 4, 8)
        mask = (1 << b) - 1
        for index, m in enumerate(plaintexts):
            m = int(m)
            if m >> total_bits:
                raise EncodingOverflowError("packed plaintext overflowed its slots")
            if fast:
                raw = m.to_bytes(total_bits // 8, "big")
                words = np.frombuffer(raw, dtype=f">u{width}")[::-1]
                if b < 64:
                    slot_values = (words.astype(np.int64) - offset).tolist()
                else:
                    slot_values = [int(v) - offset for v in words.tolist()]
            else:
                slot_values = [((m >> (i * b)) & mask) - offset for i in range(slots)]
            position = index % per_row
            keep = min(slots, length - position * slots)
            out.extend(slot_values[:keep])
        return out

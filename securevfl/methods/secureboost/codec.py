"""Fixed-point gradients and their packing: (g, h) in one Paillier plaintext, many split sums in one ciphertext.

The active party turns g and h into integers ``round(x · 2^frac_bits)`` (:func:`to_fixed`); every
histogram and split sum is then an exact integer sum, the same with and without encryption, so the
plaintext mode (``encrypt=false``) and the encrypted protocol build identical trees.

Packing (SecureBoost+, Fan et al. 2021, "GH packing" and "cipher compressing") writes several signed
integers as the digits of one number in base 2^s, ``P = Σ_i d_i 2^(i s)``, with no offsets: a sum of
such numbers is the number of the digit sums, and as long as every digit sum stays inside
(−2^(s−1), 2^(s−1)) the digits are recovered exactly by balanced base-2^s decoding
(:func:`unpack_signed`). A negative P is stored as n + P (residues above n/2 read as negative). So a
passive party can add packed (g, h) ciphertexts into bins, and shift-and-add several candidate sums
into one ciphertext (c_1^(2^(2s)) · c_2 ...), without knowing any value or any offset; it never
learns counts of rows per bin either (there is no count slot to correct offsets).

The digit width ``s`` follows from public bounds only — the rows summed, |g| <= bound, h <= bound, the
fixed-point scale — so it tells a passive party nothing about the labels (for regression the bound is
the largest |g| of the tree, rounded up to a power of two: see docs/secureboost.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from securevfl.errors import ConfigError, EncodingOverflowError

#: Exact int64 sums need |Σ x| < 2^62: the fixed-point scale is lowered for a tree whose bound needs it.
INT64_SUM_BITS = 62


def to_fixed(values: np.ndarray, frac_bits: int) -> np.ndarray:
    """``round(values · 2^frac_bits)`` as int64."""
    return np.asarray(np.rint(np.asarray(values, dtype=np.float64) * float(2**frac_bits)), dtype=np.int64)


@dataclass(frozen=True)
class DigitLayout:
    """Signed digits of ``digit_bits`` bits, ``digits`` of them per plaintext of a ``plain_bits``-bit modulus."""

    digit_bits: int
    digits: int

    @classmethod
    def fitting(cls, max_abs_sum: int, n_bits: int) -> DigitLayout:
        """The narrowest digit that holds sums up to ``max_abs_sum`` in magnitude, and how many fit below n/2."""
        digit_bits = max(8, int(max_abs_sum).bit_length() + 2)  # |sum| < 2^(s-1) with a spare bit
        digits = (n_bits - 2) // digit_bits
        if digits < 2:
            raise ConfigError(f"a {n_bits}-bit key cannot hold two {digit_bits}-bit digits; use a larger key")
        return cls(digit_bits, digits)


def pack_pairs(g: np.ndarray, h: np.ndarray, digit_bits: int, n: int) -> list[int]:
    """(g_i, h_i) as g_i + h_i 2^s mod n per row: the packed plaintexts the active party encrypts."""
    shift = 1 << digit_bits
    return [(int(a) + int(b) * shift) % n for a, b in zip(g.tolist(), h.tolist(), strict=True)]


def _signed(residue: int, n: int) -> int:
    """A residue mod n read as signed: above n/2 it is negative."""
    value = int(residue)
    return value - n if value > n // 2 else value


def _low_digit(value: int, bits: int) -> int:
    """The balanced low base-2^bits digit of ``value``, in [-2^(bits-1), 2^(bits-1))."""
    digit = value & ((1 << bits) - 1)
    return digit - (1 << bits) if digit >> (bits - 1) else digit


_OVERFLOW = "a packed sum left its digit range (the histogram cannot be decoded)"


def unpack_signed(residues: Sequence[int], digits: int, digit_bits: int, n: int) -> np.ndarray:
    """Balanced base-2^s digits of each residue (read as signed): an int64 ``(len, digits)`` array.

    A residue whose value does not end after ``digits`` digits (a digit sum left its range) is an
    EncodingOverflowError: it never decodes silently wrong.
    """
    out = np.empty((len(residues), digits), dtype=np.int64)
    for i, r in enumerate(residues):
        value = _signed(r, n)
        for j in range(digits):
            out[i, j] = d = _low_digit(value, digit_bits)
            value = (value - d) >> digit_bits
        if value != 0:
            raise EncodingOverflowError(_OVERFLOW)
    return out


def node_slot_bits(digit_bits: int, tree_rows: int, node_rows: int) -> int:
    """Bits of one (g, h) sum of a node's ``node_rows`` rows in a compressed ciphertext (cipher compression).

    The packed pair is ``g + h 2^s`` (``s = digit_bits``, sized for the tree's ``tree_rows`` rows). A node's
    sums are bounded by its share of the tree's bound, ``|sum| < (node_rows / tree_rows) 2^(s-2)``, so its h
    digit needs ``s - k`` bits, ``k = floor(log2(tree_rows / node_rows))``, and the pair ``2 s - k`` bits
    (at least ``s + 8``): the smaller the node, the fewer squarings compress its sums and the more of them fit in a
    ciphertext. Both parties compute it from the row counts both know (the passive party's rows of the tree and of
    the node).
    """
    k = (max(tree_rows, 1) // max(node_rows, 1)).bit_length() - 1
    return digit_bits + max(8, digit_bits - k)


def slots_per_ciphertext(n_bits: int, slot_bits: int) -> int:
    """How many ``slot_bits``-bit signed slots fit below n/2 of an ``n_bits``-bit modulus (at least one)."""
    return max(1, (n_bits - 2) // slot_bits)


def unpack_pairs(residues: Sequence[int], per_ciphertext: int, digit_bits: int, slot_bits: int,
                 n: int) -> np.ndarray:
    """The (g, h) sums of compressed residues, ``per_ciphertext`` pairs of ``slot_bits`` bits each: ``(len·per, 2)``.

    Each slot is a balanced base-2^slot digit ``g + h 2^s``; g is its balanced low ``s`` bits. A pair or a
    residue outside its range is an EncodingOverflowError, never a silently wrong sum.
    """
    h_limit = 1 << (slot_bits - digit_bits - 1)
    out = np.empty((len(residues) * per_ciphertext, 2), dtype=np.int64)
    for i, r in enumerate(residues):
        value = _signed(r, n)
        for j in range(per_ciphertext):
            pair = _low_digit(value, slot_bits)
            value = (value - pair) >> slot_bits
            g = _low_digit(pair, digit_bits)
            h = (pair - g) >> digit_bits
            if not -h_limit < h < h_limit:
                raise EncodingOverflowError(_OVERFLOW)
            out[i * per_ciphertext + j] = (g, h)
        if value != 0:
            raise EncodingOverflowError(_OVERFLOW)
    return out


def digit_bound(rows: int, value_bound: float, frac_bits: int) -> int:
    """The largest |sum| of ``rows`` fixed-point values of magnitude <= ``value_bound``."""
    return int(math.ceil(rows * value_bound * 2**frac_bits)) + rows


def frac_bits_for(rows: int, value_bound: float, wanted: int) -> int:
    """``wanted`` fraction bits, lowered where the sums of ``rows`` values could leave exact int64 range."""
    room = INT64_SUM_BITS - math.ceil(math.log2(max(rows, 1) * max(value_bound, 1e-300) + 1)) - 1
    if room < 8:
        raise ConfigError(f"gradients of magnitude {value_bound:g} over {rows} rows leave no fixed-point precision")
    return min(wanted, room)

"""SecureBoost's codec: node-sized compression slots decode exactly and refuse what overflowed; its validation rows."""

from __future__ import annotations

import numpy as np
import pytest

from securevfl.errors import EncodingOverflowError
from securevfl.methods.secureboost.codec import (
    DigitLayout,
    digit_bound,
    node_slot_bits,
    slots_per_ciphertext,
    unpack_pairs,
    unpack_signed,
)

N = (1 << 1023) + 1155  # a 1024-bit odd modulus stands in for n: decoding only reads residues mod n


def compress(pairs: np.ndarray, digit_bits: int, slot_bits: int, per: int) -> list[int]:
    """What the passive party's Horner compression of packed (g, h) sums decrypts to, per ciphertext."""
    out = []
    for start in range(0, len(pairs), per):
        value = 0
        for g, h in reversed(pairs[start : start + per].tolist()):
            value = (value << slot_bits) + g + (h << digit_bits)
        out.append(value % N)
    return out


@pytest.mark.parametrize("node_rows", [455, 300, 113, 20, 1])
def test_node_sums_at_their_bound_decode_exactly(node_rows):
    rows, frac = 455, 24
    layout = DigitLayout.fitting(digit_bound(rows, 1.0, frac), N.bit_length())
    slot = node_slot_bits(layout.digit_bits, rows, node_rows)
    per = slots_per_ciphertext(N.bit_length(), slot)
    bound = digit_bound(node_rows, 1.0, frac)  # the largest |sum| of the node's rows
    rng = np.random.default_rng(node_rows)
    pairs = np.column_stack([rng.integers(-bound, bound + 1, 3 * per + 2), rng.integers(0, bound + 1, 3 * per + 2)])
    pairs[:4] = [[bound, bound], [-bound, bound], [-bound, 0], [bound, 0]]
    decoded = unpack_pairs(compress(pairs, layout.digit_bits, slot, per), per, layout.digit_bits, slot, N)
    np.testing.assert_array_equal(decoded[: len(pairs)], pairs)


def test_a_smaller_node_gets_a_narrower_slot_and_more_sums_per_ciphertext():
    s = DigitLayout.fitting(digit_bound(3000, 1.0, 24), 2048).digit_bits
    assert node_slot_bits(s, 3000, 3000) == node_slot_bits(s, 3000, 1501) == 2 * s
    assert node_slot_bits(s, 3000, 1500) == 2 * s - 1
    assert node_slot_bits(s, 3000, 187) == 2 * s - 4
    assert node_slot_bits(s, 3000, 0) == node_slot_bits(s, 3000, 1) == 2 * s - 11  # an empty node: zero sums
    assert node_slot_bits(10, 10**6, 1) == 18  # never under 8 bits for h
    assert slots_per_ciphertext(2048, 2 * s - 4) > slots_per_ciphertext(2048, 2 * s)
    assert slots_per_ciphertext(64, 100) == 1


def test_the_root_slot_decodes_like_two_plain_digits():
    layout = DigitLayout.fitting(digit_bound(455, 1.0, 24), N.bit_length())
    slot = node_slot_bits(layout.digit_bits, 455, 455)
    pairs = np.array([[-5, 7], [123456, 0], [-(2**20), 2**30]])
    residues = compress(pairs, layout.digit_bits, slot, 3)
    np.testing.assert_array_equal(unpack_pairs(residues, 3, layout.digit_bits, slot, N),
                                  unpack_signed(residues, 6, layout.digit_bits, N).reshape(-1, 2))


def test_a_sum_beyond_the_node_bound_is_an_overflow_not_a_wrong_sum():
    layout = DigitLayout.fitting(digit_bound(455, 1.0, 24), N.bit_length())
    slot = node_slot_bits(layout.digit_bits, 455, 20)
    h_room = 1 << (slot - layout.digit_bits - 1)
    (residue,) = compress(np.array([[0, h_room]]), layout.digit_bits, slot, 1)
    with pytest.raises(EncodingOverflowError):
        unpack_pairs([residue], 1, layout.digit_bits, slot, N)
    (residue,) = compress(np.array([[0, h_room], [1, 1]]), layout.digit_bits, slot, 2)  # spills into the next slot
    with pytest.raises(EncodingOverflowError):
        unpack_pairs([residue], 1, layout.digit_bits, slot, N)


def test_the_validation_rows_are_the_same_ids_whatever_order_psi_agreed():
    """secureboost's active party draws its early-stopping rows over its rows in ID order: a run whose PSI agreed
    another order validates on the same customers."""
    from securevfl.methods.engine.loop import split_rows_by_id
    from securevfl.train_config import TrainConfig

    ids = np.array([f"c{i:04d}" for i in range(200)])
    order = np.random.default_rng(5).permutation(200)
    config = TrainConfig(early_stopping=3, val_fraction=0.25, seed=2)
    fit, val = split_rows_by_id(ids, config)
    fit_shuffled, val_shuffled = split_rows_by_id(ids[order], config)
    assert len(val) == 50 and set(ids[val]) == set(ids[order][val_shuffled])
    assert set(ids[fit]) == set(ids[order][fit_shuffled]) and not set(ids[fit]) & set(ids[val])
    fit_all, none = split_rows_by_id(ids, TrainConfig())
    assert len(none) == 0 and (fit_all == np.arange(200)).all()

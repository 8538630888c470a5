import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy import stats

from securevfl.errors import ConfigError
from securevfl.privacy.primitives.key_agreement import create_key_agreement
from securevfl.privacy.primitives.masking import (
    derive_pairwise_seeds,
    mask_values,
    pairwise_mask,
    unmask_sum,
)


def _seeds(n: int, session: bytes = b"session-1"):
    ka = create_key_agreement("x25519")
    names = [f"passive{i}" for i in range(n)]
    keys = {name: ka.generate() for name in names}
    return names, {
        name: derive_pairwise_seeds(
            ka, name, keys[name], {p: keys[p].public for p in names if p != name}, session
        )
        for name in names
    }


def test_seeds_agree_pairwise():
    names, seeds = _seeds(4)
    for a in names:
        for b in names:
            if a != b:
                assert seeds[a][b] == seeds[b][a]


@pytest.mark.parametrize("n", [2, 3, 5, 10])
def test_masks_sum_to_zero(n):
    names, seeds = _seeds(n)
    for r in (0, 1, 2**40):
        masks = [pairwise_mask(p, seeds[p], (17, 5), r, "embedding") for p in names]
        total = np.zeros((17, 5), dtype=np.uint64)
        for m in masks:
            total += m
        assert not total.any()
        assert all(m.any() for m in masks)


def test_masks_change_with_round_and_step_and_are_reproducible():
    names, seeds = _seeds(3)
    p = names[0]
    base = pairwise_mask(p, seeds[p], (64,), 5, "embedding")
    assert np.array_equal(base, pairwise_mask(p, seeds[p], (64,), 5, "embedding"))
    assert not np.array_equal(base, pairwise_mask(p, seeds[p], (64,), 6, "embedding"))
    assert not np.array_equal(base, pairwise_mask(p, seeds[p], (64,), 5, "gradient"))


def test_masks_change_with_session():
    _, seeds_a = _seeds(2, b"a")
    _, seeds_b = _seeds(2, b"b")
    assert seeds_a["passive0"]["passive1"] != seeds_b["passive0"]["passive1"]


@settings(max_examples=25, deadline=None)
@given(st.data(), st.integers(2, 10))
def test_masked_sum_is_exact(data, n):
    names, seeds = _seeds(n)
    shape = data.draw(hnp.array_shapes(max_dims=2, max_side=8))
    elements = st.floats(-1000, 1000, allow_nan=False, allow_infinity=False)
    xs = {p: data.draw(hnp.arrays(np.float64, shape, elements=elements)) for p in names}
    r = data.draw(st.integers(0, 2**32))
    masked = [mask_values(xs[p], p, seeds[p], r, "embedding", frac_bits=16) for p in names]
    expected = np.sum([xs[p] for p in names], axis=0)
    assert np.all(np.abs(unmask_sum(masked, 16) - expected) <= n * 2.0**-16)


def test_single_masked_vector_looks_uniform():
    names, seeds = _seeds(3)
    x = np.full(100_000, 0.25)  # a constant input: without the mask it would be one value
    masked = mask_values(x, names[1], seeds[names[1]], 0, "embedding")
    counts = np.bincount((masked >> np.uint64(56)).astype(np.int64), minlength=256)
    assert stats.chisquare(counts).pvalue > 1e-4
    assert stats.kstest(masked.astype(np.float64) / 2.0**64, "uniform").pvalue > 1e-4


def test_own_seed_rejected():
    names, seeds = _seeds(2)
    with pytest.raises(ConfigError):
        pairwise_mask(names[0], {names[0]: bytes(32)}, (3,), 0)

"""Reused round memory (a :class:`~securevfl.privacy.primitives.buffers.Workspace`) gives what fresh arrays give."""

from __future__ import annotations

import numpy as np
import pytest
from secagg_rounds import set_up_round0

from securevfl.errors import ConfigError, DataError
from securevfl.privacy import secagg as sa
from securevfl.privacy.primitives.buffers import Workspace
from securevfl.privacy.primitives.fixed_point import encode


def test_a_workspace_hands_out_the_same_memory_and_grows_when_asked() -> None:
    ws = Workspace()
    a = ws.take("mask", 100)
    b = ws.take("mask", 60)
    assert np.shares_memory(a, b) and b.size == 60
    c = ws.take("mask", 200)
    assert c.size == 200 and ws.nbytes() == 200 * 8
    assert not np.shares_memory(c, ws.take("other", 10))
    assert ws.take("mask", 5, np.float64).dtype == np.float64  # another dtype: another array
    with pytest.raises(ConfigError):
        ws.take("mask", -1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ring_bits", [32, 64])
def test_encoding_into_a_workspace_equals_a_fresh_encoding(dtype: type, ring_bits: int) -> None:
    x = (np.random.default_rng(3).normal(scale=50.0, size=(7, 9))).astype(dtype)
    ws = Workspace()
    for _ in range(2):  # the second time over the first one's contents
        into = encode(x, 16, 3, ring_bits, out=ws.take("m", x.size), scratch=ws.take("s", x.size, np.float64))
        fresh = encode(x, 16, 3, ring_bits)
        assert into.shape == x.shape and into.dtype == np.uint64
        np.testing.assert_array_equal(into, fresh)
        expected = np.rint(x.astype(np.float64) * 2.0**16).astype(np.int64).view(np.uint64)
        np.testing.assert_array_equal(fresh, expected)


def test_encoding_refuses_a_workspace_array_of_the_wrong_size_and_nan_input() -> None:
    x = np.ones((4, 4))
    with pytest.raises(ConfigError):
        encode(x, out=np.empty(15, dtype=np.uint64))
    with pytest.raises(ConfigError):
        encode(x, scratch=np.empty(16, dtype=np.float32))
    with pytest.raises(DataError):
        encode(np.array([1.0, np.nan]), out=np.empty(2, dtype=np.uint64))


def test_a_round_mask_into_reused_memory_equals_a_fresh_one() -> None:
    parties, *_ = set_up_round0(sa.SecAggConfig(b"ws", ("p1", "p2", "p3"), 2))
    ws = Workspace()
    stale = ws.take("mask", 50)
    stale[:] = 12345  # leftovers of an earlier round must not leak into the mask
    reused = sa.round_mask(parties["p2"], 0, 50, stale)
    np.testing.assert_array_equal(reused.values, sa.round_mask(parties["p2"], 0, 50).values)
    x = np.random.default_rng(0).normal(size=(5, 10))
    _, fresh = sa.masked_input(parties["p2"], x, 0, prepare_next=False)
    _, into = sa.masked_input(parties["p2"], x, 0, prepare_next=False, mask=reused, workspace=ws)
    np.testing.assert_array_equal(fresh.masked, into.masked)

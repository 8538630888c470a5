import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from securevfl.errors import ProtocolError
from securevfl.federation.codec import decode, encode

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary()
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@given(values)
def test_round_trip_structures(value):
    assert decode(encode(value)) == value


@given(hnp.arrays(st.sampled_from([np.float32, np.float64, np.int64, np.uint64, np.uint8, np.bool_]),
                  hnp.array_shapes(min_dims=0, max_dims=3, max_side=5)))
def test_round_trip_arrays(array):
    out = decode(encode({"a": array}))["a"]
    assert out.dtype == array.dtype and out.shape == array.shape
    np.testing.assert_array_equal(out, array)


def test_tensor_and_bigint_and_tuple():
    t = torch.randn(3, 4)
    big = 2**4000 + 12345
    out = decode(encode([t, big, -big, (1, "x")]))
    assert isinstance(out[0], torch.Tensor) and torch.equal(out[0], t)
    assert out[1] == big and out[2] == -big and out[3] == (1, "x")


def test_tensor_bytes_are_payload_plus_small_header():
    for rows in (1, 32, 128, 5000):
        size = len(encode(torch.zeros(rows, 16)))
        assert rows * 16 * 4 < size <= rows * 16 * 4 + 32


def test_refuses_objects_and_garbage():
    with pytest.raises(ProtocolError):
        encode(object())
    with pytest.raises(ProtocolError):
        encode(np.array([object()], dtype=object))
    with pytest.raises(ProtocolError):
        decode(b"\xc7\x05\x63abcde")  # unknown extension code 99
    with pytest.raises(ProtocolError):
        decode(encode(np.arange(10))[:-3])  # truncated

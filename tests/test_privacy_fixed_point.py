import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from securevfl.errors import ConfigError, DataError, EncodingOverflowError
from securevfl.privacy.primitives.fixed_point import (
    FixedPointConfig,
    decode,
    encode,
    max_magnitude,
    ring_sum,
)

FINITE = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(np.float64, hnp.array_shapes(max_dims=3, max_side=6), elements=FINITE),
    st.integers(0, 30),
)
def test_round_trip_within_resolution(x, frac_bits):
    enc = encode(x, frac_bits)
    assert enc.dtype == np.uint64 and enc.shape == x.shape
    assert np.all(np.abs(decode(enc, frac_bits) - x) <= 2.0**-frac_bits)


@settings(max_examples=60, deadline=None)
@given(st.data(), st.integers(2, 10), st.integers(8, 24))
def test_sum_of_encodings_decodes_to_sum(data, n, frac_bits):
    shape = data.draw(hnp.array_shapes(max_dims=2, max_side=5))
    xs = [data.draw(hnp.arrays(np.float64, shape, elements=FINITE)) for _ in range(n)]
    total = ring_sum([encode(x, frac_bits, n_terms=n) for x in xs])
    assert np.all(np.abs(decode(total, frac_bits) - np.sum(xs, axis=0)) <= n * 2.0**-frac_bits)


def test_negative_values_are_twos_complement():
    enc = encode(np.array([-1.0, -0.5]), 16)
    assert enc[0] == np.uint64(2**64 - 2**16)
    assert np.array_equal(decode(enc, 16), [-1.0, -0.5])


def test_overflow_detected_with_headroom():
    limit = max_magnitude(16, n_terms=4)
    assert limit == pytest.approx((2**63 - 1) // 4 / 2**16)
    encode(np.array([limit * 0.999]), 16, n_terms=4)
    with pytest.raises(EncodingOverflowError, match="max representable magnitude"):
        encode(np.array([0.0, limit * 1.001]), 16, n_terms=4)
    with pytest.raises(EncodingOverflowError):
        encode(np.array([-(2.0**63)]), 0)
    # the same value fits once fewer summands are announced
    encode(np.array([limit * 1.001]), 16, n_terms=3)


def test_sum_at_the_limit_does_not_wrap():
    n = 3
    big = FixedPointConfig(16, n).max_ring_magnitude
    x = np.array([big / 2**16, -big / 2**16])
    enc = [encode(x, 16, n) for _ in range(n)]
    assert np.allclose(decode(ring_sum(enc), 16), n * x, rtol=1e-12)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_and_inf_rejected(bad):
    with pytest.raises(DataError):
        encode(np.array([1.0, bad]))


def test_config_validation():
    with pytest.raises(ConfigError):
        FixedPointConfig(frac_bits=60)
    with pytest.raises(ConfigError):
        FixedPointConfig(n_terms=0)
    with pytest.raises(DataError):
        decode(np.zeros(3, dtype=np.int64))


def test_float32_input_accepted():
    x = np.linspace(-3, 3, 11, dtype=np.float32)
    assert np.allclose(decode(encode(x)), x, atol=2**-16)

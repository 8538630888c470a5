"""EncryptedTensor: shapes, broadcasting, axis sums, matrix products, serialisation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from securevfl.errors import ConfigError
from securevfl.privacy.paillier import EncryptedTensor, create_backend, generate_keypair

SETTINGS = settings(max_examples=15, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
ATOL = 1e-6


@pytest.fixture(scope="module")
def keys():
    return generate_keypair(1024, insecure_allow_small_key=True)


@pytest.fixture(scope="module", params=["fast", "phe"])
def backend(request, keys):
    options = {"workers": 1} if request.param == "fast" else {}
    return create_backend(request.param, *keys, **options)


arrays = hnp.arrays(np.float64, hnp.array_shapes(min_dims=0, max_dims=3, max_side=3),
                    elements=st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False))


@SETTINGS
@given(x=arrays)
def test_serialisation_roundtrip_any_shape(backend, x):
    enc = backend.encrypt(x)
    for tensor in (enc, enc * 2.5 + 1.0):
        wire = tensor.to_bytes()
        assert len(wire) == tensor.nbytes
        back = EncryptedTensor.from_bytes(wire, backend)
        assert back.shape == x.shape and back.scale_bits == tensor.scale_bits and back.obfuscated
        np.testing.assert_array_equal(backend.decrypt(back), backend.decrypt(tensor))


@SETTINGS
@given(x=arrays, data=st.data())
def test_sum_over_axes_matches_numpy(backend, x, data):
    axes = [None] + list(range(x.ndim)) + ([(0, x.ndim - 1)] if x.ndim > 1 else [])
    axis = data.draw(st.sampled_from(axes))
    got = backend.decrypt(backend.encrypt(x).sum(axis=axis))
    np.testing.assert_allclose(got, x.sum(axis=axis), atol=ATOL)


def test_broadcasting_add_and_mul(backend):
    x = np.arange(6.0).reshape(2, 3) - 2.5
    enc = backend.encrypt(x)
    row = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(backend.decrypt(enc + row), x + row, atol=ATOL)
    np.testing.assert_allclose(backend.decrypt(row * enc), row * x, atol=ATOL)
    np.testing.assert_allclose(backend.decrypt(enc + backend.encrypt(row)), x + row, atol=ATOL)
    np.testing.assert_allclose(backend.decrypt(enc + backend.encrypt(3.0)), x + 3, atol=ATOL)
    np.testing.assert_allclose(backend.decrypt(enc / 4), x / 4, atol=ATOL)
    np.testing.assert_allclose(backend.decrypt((enc * 0.5) + enc), 1.5 * x, atol=ATOL)


@SETTINGS
@given(n=st.integers(1, 4), m=st.integers(1, 3), b=st.integers(1, 2), seed=st.integers(0, 99))
def test_matrix_products_match_numpy(backend, n, m, b, seed):
    rng = np.random.default_rng(seed)
    v, batch = rng.normal(size=n), rng.normal(size=(b, n))
    w, wt = rng.normal(size=(n, m)), rng.normal(size=(m, n))
    ev, eb = backend.encrypt(v), backend.encrypt(batch)
    np.testing.assert_allclose(backend.decrypt(ev @ w), v @ w, atol=ATOL)
    np.testing.assert_allclose(backend.decrypt(eb @ w), batch @ w, atol=ATOL)
    np.testing.assert_allclose(backend.decrypt(wt @ ev), wt @ v, atol=ATOL)
    np.testing.assert_allclose(backend.decrypt(batch @ ev), batch @ v, atol=ATOL)
    np.testing.assert_allclose(backend.decrypt(wt @ eb.reshape(n, b)), wt @ batch.reshape(n, b),
                               atol=ATOL)
    np.testing.assert_allclose(backend.decrypt(ev @ v), v @ v, atol=ATOL)


def test_indexing_and_reshape(backend):
    x = np.arange(12.0).reshape(3, 4)
    enc = backend.encrypt(x)
    np.testing.assert_array_equal(backend.decrypt(enc[1]), x[1])
    np.testing.assert_array_equal(backend.decrypt(enc[:, 2]), x[:, 2])
    assert backend.decrypt(enc[2, 3]).shape == ()
    np.testing.assert_array_equal(backend.decrypt(enc.reshape(4, 3)), x.reshape(4, 3))
    assert len(enc) == 3 and enc.size == 12 and enc.n_ciphertexts == 12


def test_be_secure_rerandomises_derived_tensors(backend):
    enc = backend.encrypt(np.ones(2)) * 3
    raw = enc.to_bytes(be_secure=False)
    secure = enc.to_bytes()
    body = 2 * enc.ciphertext_bytes
    assert raw[: len(raw) - body] != secure[: len(raw) - body]  # header flag: obfuscated
    assert raw[-enc.ciphertext_bytes:] != secure[-enc.ciphertext_bytes:]
    np.testing.assert_array_equal(backend.decrypt(EncryptedTensor.from_bytes(secure, backend)),
                                  [3.0, 3.0])


def test_invalid_operands(backend):
    enc = backend.encrypt(np.ones(3))
    with pytest.raises(ConfigError):
        enc * enc
    with pytest.raises(ConfigError):
        enc + "text"
    with pytest.raises(ConfigError):
        enc @ np.ones((2, 2))
    with pytest.raises(ValueError):
        enc + np.ones(4)
    with pytest.raises(ConfigError):
        enc.sum(axis=3)


def test_transpose_and_concatenate(backend):
    x = np.arange(6.0).reshape(2, 3)
    enc = backend.encrypt(x)
    np.testing.assert_array_equal(backend.decrypt(enc.T), x.T)
    joined = EncryptedTensor.concatenate([enc, enc * 0.5], axis=0)
    assert joined.shape == (4, 3) and not joined.obfuscated
    np.testing.assert_array_equal(backend.decrypt(joined), np.concatenate([x, x * 0.5]))
    with pytest.raises(ConfigError):
        EncryptedTensor.concatenate([])

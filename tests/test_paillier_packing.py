"""Packing: slot limits, exactly-k headroom, k+1 overflow, allowed and refused packed ops."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from securevfl.errors import ConfigError, EncodingOverflowError
from securevfl.privacy.paillier import (
    EncryptedTensor,
    PackingLayout,
    PackingSpec,
    create_backend,
    generate_keypair,
)

SETTINGS = settings(max_examples=20, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def keys():
    return generate_keypair(1024, insecure_allow_small_key=True)


@pytest.fixture(scope="module", params=["fast", "phe"])
def backend(request, keys):
    options = {"workers": 1} if request.param == "fast" else {}
    return create_backend(request.param, *keys, **options)


def test_layout_arithmetic():
    spec = PackingSpec(slot_bits=32, max_summands=16, frac_bits=16)
    assert spec.headroom_bits == 4 and spec.value_bits == 27
    assert PackingLayout.for_key(spec, 2048).slots == 63
    assert PackingLayout.for_key(spec, 1024).slots == 31
    assert PackingSpec(32, 1, 0).value_bits == 31
    assert PackingSpec(32, 17, 0).value_bits == 26
    with pytest.raises(ConfigError):
        PackingSpec(slot_bits=8, max_summands=2**8)


@SETTINGS
@given(slot_bits=st.sampled_from([12, 20, 32, 48, 64]), k=st.integers(1, 9),
       rows=st.integers(1, 3), length=st.integers(1, 70), data=st.data())
def test_boundary_values_survive_exactly_k_summands(backend, slot_bits, k, rows, length, data):
    spec = PackingSpec(slot_bits=slot_bits, max_summands=k, frac_bits=0)
    lo, hi = -(2**spec.value_bits), 2**spec.value_bits - 1
    values = np.array(data.draw(st.lists(st.sampled_from([lo, hi, 0, -1, lo + 1, hi - 1]),
                                         min_size=rows * length, max_size=rows * length)),
                      dtype=np.int64).reshape(rows, length)
    enc = backend.encrypt(values, packing=spec)
    total = enc
    for _ in range(k - 1):
        total = total + enc
    assert total.terms == k
    expected = (values.astype(object) * k).astype(np.float64)
    np.testing.assert_array_equal(backend.decrypt(total), expected)
    with pytest.raises(EncodingOverflowError):
        total + enc
    with pytest.raises(EncodingOverflowError):
        total + values


@pytest.mark.parametrize("slot_bits", [16, 32, 40])
def test_values_outside_slot_range_are_refused(backend, slot_bits):
    spec = PackingSpec(slot_bits=slot_bits, max_summands=4, frac_bits=0)
    w = spec.value_bits
    backend.encrypt(np.array([-(2.0**w), 2.0**w - 1]), packing=spec)
    for bad in (2.0**w, -(2.0**w) - 1):
        with pytest.raises(EncodingOverflowError):
            backend.encrypt(np.array([0.0, bad]), packing=spec)


def test_sum_and_scalar_headroom(backend):
    spec = PackingSpec(slot_bits=32, max_summands=6, frac_bits=8)
    x = np.round(np.linspace(-100, 100, 3 * 40).reshape(3, 40), 2)
    enc = backend.encrypt(x, packing=spec)
    np.testing.assert_allclose(backend.decrypt(enc.sum(axis=0)), x.sum(axis=0), atol=3 * 2**-9)
    np.testing.assert_allclose(backend.decrypt(enc * 2 + x), 3 * x, atol=3 * 2**-9)
    doubled = enc.sum(axis=0) * 2  # 3 * 2 = 6 summands: allowed
    np.testing.assert_allclose(backend.decrypt(doubled), 2 * x.sum(axis=0), atol=6 * 2**-9)
    assert backend.decrypt(enc * 0).sum() == 0.0
    with pytest.raises(EncodingOverflowError):
        enc * 7
    with pytest.raises(EncodingOverflowError):
        (enc + enc + enc).sum(axis=0)  # 9 summands
    with pytest.raises(EncodingOverflowError):
        doubled + backend.encrypt(x[0], packing=spec)


def test_refused_operations_on_packed(backend):
    spec = PackingSpec(slot_bits=32, max_summands=4, frac_bits=8)
    enc = backend.encrypt(np.ones((2, 5)), packing=spec)
    for operation in (lambda: enc * -1, lambda: enc * 1.5, lambda: enc * np.ones(5, dtype=int),
                      lambda: enc.sum(), lambda: enc.sum(axis=1), lambda: -enc,
                      lambda: enc @ np.ones((5, 2)), lambda: enc[0],
                      lambda: enc + backend.encrypt(np.ones((2, 5))),
                      lambda: enc + backend.encrypt(np.ones((2, 5)), packing=PackingSpec(32, 8, 8)),
                      lambda: backend.encrypt(1.0, packing=spec)):
        with pytest.raises(ConfigError):
            operation()


def test_corrupted_packed_plaintext_detected(keys):
    layout = PackingLayout.for_key(PackingSpec(32, 4, 0), 1024)
    with pytest.raises(EncodingOverflowError):
        layout.unpack([1 << (32 * layout.slots)], terms=1, length=5)


def test_packed_serialisation_roundtrip(backend):
    spec = PackingSpec(slot_bits=48, max_summands=3, frac_bits=20)
    x = np.linspace(-3, 3, 2 * 3 * 25).reshape(2, 3, 25)
    enc = backend.encrypt(x, packing=spec) + x
    wire = enc.to_bytes()
    assert len(wire) == enc.nbytes
    back = EncryptedTensor.from_bytes(wire, backend)
    assert back.shape == x.shape and back.terms == 2 and back.layout == enc.layout
    np.testing.assert_allclose(backend.decrypt(back), 2 * x, atol=2**-19)
    with pytest.raises(EncodingOverflowError):
        back + back


@SETTINGS
@given(max_abs=st.floats(0, 1e6), k=st.integers(1, 1000), frac=st.integers(0, 24))
def test_fitting_spec_holds_its_range(max_abs, k, frac):
    spec = PackingSpec.fitting(max_abs, k, frac)
    assert spec.max_abs_value >= max_abs
    assert spec.max_summands == k and spec.frac_bits == frac
    layout = PackingLayout.for_key(spec, 1024)
    extreme = np.array([[max_abs, -max_abs, 0.0]])
    ints = np.rint(np.ldexp(extreme, frac))
    assert ints.min() >= -(2.0**spec.value_bits) and ints.max() < 2.0**spec.value_bits
    assert layout.slots >= 1

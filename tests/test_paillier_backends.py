"""Homomorphic laws for both backends, cross-backend agreement, overflow and randomness."""

from __future__ import annotations

import numpy as np
import pytest
from deterministic_random import det_randbits
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from securevfl.errors import ConfigError, EncodingOverflowError
from securevfl.privacy.paillier import FastBackend, create_backend, generate_keypair

FRAC = 32
SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
reals = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
small_ints = st.integers(min_value=-(10**6), max_value=10**6)


def fixed(x: float, bits: int = FRAC) -> int:
    return int(np.rint(np.ldexp(x, bits)))



@pytest.fixture(scope="module")
def keys():
    return generate_keypair(1024, insecure_allow_small_key=True)


@pytest.fixture(scope="module", params=["fast", "phe"])
def backend(request, keys):
    options = {"workers": 1} if request.param == "fast" else {}
    return create_backend(request.param, *keys, **options)


@SETTINGS
@given(a=reals, b=reals)
def test_add_ciphertexts(backend, a, b):
    out = backend.decrypt(backend.encrypt([a]) + backend.encrypt([b]))[0]
    assert out == (fixed(a) + fixed(b)) / 2**FRAC


@SETTINGS
@given(a=reals, k=small_ints)
def test_multiply_by_integer(backend, a, k):
    out = backend.decrypt(backend.encrypt([a]) * k)[0]
    assert out == fixed(a) * k / 2**FRAC


@SETTINGS
@given(a=reals, k=reals)
def test_multiply_by_real(backend, a, k):
    out = backend.decrypt(backend.encrypt([a]) * k)[0]
    assert out == fixed(a) * fixed(k) / 2 ** (2 * FRAC)


@SETTINGS
@given(a=reals, b=reals)
def test_add_and_subtract_plaintext(backend, a, b):
    enc = backend.encrypt([a])
    assert backend.decrypt(enc + b)[0] == (fixed(a) + fixed(b)) / 2**FRAC
    assert backend.decrypt(b - enc)[0] == (fixed(b) - fixed(a)) / 2**FRAC
    assert backend.decrypt(enc - enc)[0] == 0.0


@SETTINGS
@given(xs=st.lists(reals, min_size=1, max_size=6), ws=st.lists(reals, min_size=6, max_size=6))
def test_weighted_sum_matches_numpy(backend, xs, ws):
    x, w = np.array(xs), np.array(ws[: len(xs)])
    got = backend.decrypt(backend.encrypt(x) @ w)
    expected = sum(fixed(a) * fixed(b) for a, b in zip(x, w, strict=True)) / 2 ** (2 * FRAC)
    assert got == expected


def test_negative_and_zero_values(backend):
    values = np.array([-1e9, -1.0, -2.0**-32, 0.0, 2.0**-32, 1e9])
    np.testing.assert_array_equal(backend.decrypt(backend.encrypt(values)), values)
    np.testing.assert_array_equal(backend.decrypt(-backend.encrypt(values)), -values)


def test_integer_arrays_keep_exact_values(backend):
    values = np.array([-(2**40), -3, 0, 7, 2**40], dtype=np.int64)
    enc = backend.encrypt(values, frac_bits=0)
    np.testing.assert_array_equal(backend.decrypt(enc * 3 + 1), values * 3 + 1)


def test_overflow_detected_not_wrapped(backend, keys):
    pk = keys[0]
    big = pk.n // 3 - 2
    with pytest.raises(EncodingOverflowError):
        backend.encrypt(np.array([1.0, 2.0**900]), frac_bits=200)  # 2^1100 > n
    enc = backend.encrypt_raw([big])  # raw residue: a value just inside the signed range
    from securevfl.privacy.paillier import EncryptedTensor

    tensor = EncryptedTensor(backend, np.array(enc, dtype=object), shape=(1,), scale_bits=0)
    with pytest.raises(EncodingOverflowError):
        backend.decrypt(tensor * 2)  # lands in the middle third of Z_n


def test_fresh_randomness_and_rerandomize(backend):
    a, b = backend.encrypt([5.0]), backend.encrypt([5.0])
    assert a.ciphertexts[0] != b.ciphertexts[0]
    derived = a * 2
    assert not derived.obfuscated
    fresh = derived.rerandomize()
    assert fresh.obfuscated and fresh.ciphertexts[0] != derived.ciphertexts[0]
    assert backend.decrypt(fresh)[0] == backend.decrypt(derived)[0] == 10.0


@pytest.fixture(scope="module")
def pair(keys):
    return create_backend("fast", *keys, workers=1), create_backend("phe", *keys)


@SETTINGS
@given(a=st.lists(reals, min_size=3, max_size=3), b=st.lists(reals, min_size=3, max_size=3),
       k=reals)
def test_backends_decrypt_each_others_results(pair, a, b, k):
    fast, phe = pair
    from_fast = (fast.encrypt(a) + fast.encrypt(b)) * k
    from_phe = (phe.encrypt(a) + phe.encrypt(b)) * k
    mixed = (fast.encrypt(a).with_backend(phe) + phe.encrypt(b)) * k
    results = [be.decrypt(t.with_backend(be)) for t in (from_fast, from_phe, mixed)
               for be in (fast, phe)]
    for result in results[1:]:
        np.testing.assert_array_equal(result, results[0])


def test_fast_table_matches_plain_exponentiation(keys):
    crt = FastBackend(*keys, workers=1, randbits=det_randbits(b"r"))
    public = FastBackend(keys[0], workers=1, randbits=det_randbits(b"r"))
    no_crt = FastBackend(*keys, workers=1, randbits=det_randbits(b"r"), crt_encrypt=False)
    plain = FastBackend(*keys, workers=1, randbits=det_randbits(b"r"), use_table=False)
    assert crt.engine.crt_encrypt and not public.engine.crt_encrypt
    m = [0, 1, 12345, keys[0].n - 1]
    expected = plain.encrypt_raw(m)
    assert crt.encrypt_raw(m) == public.encrypt_raw(m) == no_crt.encrypt_raw(m) == expected
    assert crt.decrypt_raw(expected) == m


def test_fast_parallel_path_matches_serial(keys):
    serial = FastBackend(*keys, workers=1, randbits=det_randbits(b"p"))
    with FastBackend(*keys, workers=2, parallel_min_items=8, randbits=det_randbits(b"p")) as par:
        values = np.linspace(-5, 5, 40)
        enc_par = par.encrypt(values)
        enc_ser = serial.encrypt(values)
        assert list(enc_par.ciphertexts) == list(enc_ser.ciphertexts)
        np.testing.assert_array_equal(par.decrypt(enc_par * 1.5), serial.decrypt(enc_ser * 1.5))


@SETTINGS
@given(coeffs=st.lists(st.lists(st.integers(-(2**70), 2**70) | st.sampled_from([0, 1, -1]),
                                min_size=5, max_size=5), min_size=1, max_size=4))
def test_fast_linear_combination_matches_reference(pair, coeffs):
    fast, phe = pair
    cts = fast.encrypt_raw([0, 1, 7, 123456789, fast.public_key.n - 5])
    got = fast.linear_combine_raw(cts, coeffs)
    assert got == phe.linear_combine_raw(cts, coeffs)
    plain = [0, 1, 7, 123456789, -5]
    n = fast.public_key.n
    assert fast.decrypt_raw(got) == [sum(k * m for k, m in zip(row, plain, strict=True)) % n
                                     for row in coeffs]


def test_fast_parallel_linear_combination(keys):
    serial = FastBackend(*keys, workers=1)
    with FastBackend(*keys, workers=2, parallel_min_items=4) as par:
        x, w = np.linspace(-2, 2, 24), np.linspace(-1, 3, 24 * 3).reshape(24, 3)
        enc = serial.encrypt(x)
        np.testing.assert_array_equal(serial.decrypt(enc.with_backend(par) @ w),
                                      serial.decrypt(enc @ w))
        np.testing.assert_allclose(serial.decrypt(w.T @ enc.with_backend(par)), w.T @ x,
                                   atol=1e-8)


def test_precomputed_random_factors_encrypt_once_each(keys):
    """``encrypt_with`` consumes the factors ``precompute_randomness`` made: valid ciphertexts, never a reuse."""
    public, private = keys
    backend = FastBackend(public, private, workers=1)
    factors = backend.precompute_randomness(5)
    ciphertexts = backend.encrypt_with([7, 0, public.n - 1], factors)
    assert backend.decrypt_raw(ciphertexts) == [7, 0, public.n - 1]
    assert len(factors) == 2  # the three used are gone
    again = backend.encrypt_with([7, 7], factors)
    assert again[0] != again[1] and again[0] != ciphertexts[0]
    with pytest.raises(ConfigError, match="precomputed factors"):
        backend.encrypt_with([1], factors)

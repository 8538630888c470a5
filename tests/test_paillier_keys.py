"""Paillier keys: generation, sizes, serialisation, repr, wrong-key detection, phe interop."""

from __future__ import annotations

import numpy as np
import pytest
from deterministic_random import det_randbits
from phe import paillier as phe_paillier

from securevfl.errors import ConfigError, CryptoError, ProtocolError
from securevfl.privacy.paillier import (
    EncryptedTensor,
    PackingSpec,
    PaillierPrivateKey,
    PaillierPublicKey,
    available_backends,
    create_backend,
    default_r_bits,
    from_phe_keys,
    generate_keypair,
    to_phe_keys,
)


@pytest.fixture(scope="module")
def keys():
    return generate_keypair(1024, insecure_allow_small_key=True)


@pytest.fixture(scope="module")
def other_keys():
    return generate_keypair(1024, insecure_allow_small_key=True)


@pytest.fixture(scope="session")
def keys_2048():
    return generate_keypair(2048)


def test_generated_key_has_exact_size_and_equal_primes(keys):
    pk, sk = keys
    assert pk.n.bit_length() == 1024 == pk.bits
    assert sk.p.bit_length() == sk.q.bit_length() == 512
    assert sk.p * sk.q == pk.n and sk.p != sk.q


def test_2048_bit_session_key_roundtrip(keys_2048):
    pk, sk = keys_2048
    assert pk.n.bit_length() == 2048
    backend = create_backend("fast", pk, sk, workers=1)
    assert backend.r_bits == 448
    values = np.array([-3.5, 0.0, 1e-6, 12345.678])
    np.testing.assert_allclose(backend.decrypt(backend.encrypt(values)), values, atol=1e-9)
    packed = backend.encrypt(np.arange(100.0) - 50, packing=PackingSpec(32, 8, 16))
    assert packed.layout.slots == 63 and packed.n_ciphertexts == 2
    np.testing.assert_array_equal(backend.decrypt(packed + packed), 2 * (np.arange(100.0) - 50))


@pytest.mark.parametrize("bits", [1024, 1536, 4096, 2047, 0])
def test_insecure_or_odd_sizes_refused(bits):
    with pytest.raises(ConfigError):
        generate_keypair(bits)


def test_tiny_keys_refused_even_with_test_option():
    with pytest.raises(ConfigError):
        generate_keypair(256, insecure_allow_small_key=True)


def test_deterministic_generation_with_injected_randomness():
    a = generate_keypair(768, insecure_allow_small_key=True, randbits=det_randbits(b"k"))
    b = generate_keypair(768, insecure_allow_small_key=True, randbits=det_randbits(b"k"))
    c = generate_keypair(768, insecure_allow_small_key=True, randbits=det_randbits(b"other"))
    assert a[1] == b[1] and a[0].hs == b[0].hs
    assert a[0] != c[0]


def test_key_serialisation_roundtrip(keys):
    pk, sk = keys
    pk2 = PaillierPublicKey.from_bytes(pk.to_bytes())
    sk2 = PaillierPrivateKey.from_bytes(sk.to_bytes())
    assert pk2 == pk and pk2.hs == pk.hs and pk2.fingerprint == pk.fingerprint
    assert sk2 == sk and sk2.hp == sk.hp and sk2.public_key == pk
    backend = create_backend("fast", pk2, sk2, workers=1)
    assert backend.decrypt(create_backend("fast", pk, workers=1).encrypt([1.5]))[0] == 1.5


MUTATIONS = [lambda b: b[:-3], lambda b: b"X" + b[1:], lambda b: b + b"\x00"]


@pytest.mark.parametrize("mutate", MUTATIONS)
def test_corrupt_key_bytes_raise_crypto_error(keys, mutate):
    pk, sk = keys
    with pytest.raises(CryptoError):
        PaillierPublicKey.from_bytes(mutate(pk.to_bytes()))
    with pytest.raises(CryptoError):
        PaillierPrivateKey.from_bytes(mutate(sk.to_bytes()))


def test_private_key_with_wrong_primes_refused(keys, other_keys):
    with pytest.raises(CryptoError):
        PaillierPrivateKey(public_key=keys[0], p=other_keys[1].p, q=other_keys[1].q)


def test_repr_shows_only_short_hash(keys):
    pk, sk = keys
    for text in (repr(pk), repr(sk), str(sk), repr(create_backend("phe", pk, sk))):
        assert str(sk.p) not in text and str(sk.q) not in text and str(pk.n) not in text
        assert hex(sk.p)[2:12] not in text
        assert pk.fingerprint.hex()[:12] in text
        assert len(text) < 120


def test_unknown_backend_lists_valid_names(keys):
    assert available_backends() == ("fast", "phe")
    with pytest.raises(ConfigError, match="fast, phe"):
        create_backend("seal", keys[0])


def test_short_exponent_length_floor(keys, keys_2048):
    assert default_r_bits(2048) == 448 and default_r_bits(3072) == 512
    with pytest.raises(ConfigError):
        create_backend("fast", keys_2048[0], r_bits=200)
    assert create_backend("fast", keys_2048[0], r_bits=224).r_bits == 224


@pytest.mark.parametrize("name", ["fast", "phe"])
def test_wrong_key_is_detected(keys, other_keys, name):
    mine = create_backend(name, *keys)
    theirs = create_backend(name, *other_keys)
    enc = mine.encrypt(np.array([1.0, 2.0]))
    with pytest.raises(CryptoError):
        theirs.decrypt(enc)
    with pytest.raises(CryptoError):
        EncryptedTensor.from_bytes(enc.to_bytes(), theirs)
    with pytest.raises(CryptoError):
        enc + theirs.encrypt(np.array([1.0, 2.0]))
    with pytest.raises(CryptoError):
        enc.with_backend(theirs)
    with pytest.raises(CryptoError):
        create_backend(name, keys[0], other_keys[1])


def test_public_only_backend_cannot_decrypt(keys):
    public = create_backend("fast", keys[0])
    with pytest.raises(CryptoError):
        public.decrypt(public.encrypt([1.0]))


def test_malformed_tensor_bytes(keys):
    backend = create_backend("fast", *keys, workers=1)
    wire = backend.encrypt(np.ones(3)).to_bytes()
    with pytest.raises(ProtocolError):
        EncryptedTensor.from_bytes(wire[:-1], backend)
    with pytest.raises(ProtocolError):
        EncryptedTensor.from_bytes(b"NOPE" + wire[4:], backend)
    with pytest.raises(ProtocolError):
        EncryptedTensor.from_bytes(wire[:10], backend)


def test_phe_and_fast_share_key_material(keys):
    pk, sk = keys
    phe_pub, phe_priv = to_phe_keys(pk, sk)
    assert phe_pub.g == pk.n + 1
    fast = create_backend("fast", pk, sk, workers=1)
    # python-paillier's own EncryptedNumber arithmetic, decrypted by fast.
    a, b = phe_pub.encrypt(1234), phe_pub.encrypt(-77)
    combined = (a + b) * 3 + 5
    assert fast.decrypt_raw([combined.ciphertext()])[0] == (1234 - 77) * 3 + 5
    # fast ciphertexts, decrypted and combined by python-paillier.
    c = fast.encrypt_raw([99])[0]
    phe_number = phe_paillier.EncryptedNumber(phe_pub, int(c), 0)
    assert phe_priv.decrypt(phe_number * 2 + 1) == 199
    pk2, sk2 = from_phe_keys(phe_pub, phe_priv)
    assert pk2 == pk and sk2 == sk


@pytest.mark.slow
def test_3072_bit_key_roundtrip():
    pk, sk = generate_keypair(3072)
    assert pk.n.bit_length() == 3072
    backend = create_backend("fast", pk, sk, workers=1)
    assert backend.r_bits == 512
    packed = backend.encrypt(np.arange(200.0), packing=PackingSpec(32, 4, 8))
    assert packed.layout.slots == 95
    np.testing.assert_array_equal(backend.decrypt(packed * 4), 4 * np.arange(200.0))
    np.testing.assert_array_equal(backend.decrypt(backend.encrypt([-1.5]) * 2), [-3.0])


# ---------------------------------------------------------------- public key validation (hardening #7)


def _forged_public_bytes(n: int, hs: int) -> bytes:
    """Public-key bytes as a deviating sender would craft them (bypassing the constructor)."""
    def field(value: int) -> bytes:
        raw = value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")
        return len(raw).to_bytes(4, "big") + raw

    return b"SVPaillierPub\x01" + field(n) + field(hs)


@pytest.mark.parametrize(
    "name, make_hs",
    [
        ("one", lambda n: 1),  # Enc(m) = 1 + m n: readable without the key
        ("minus one", lambda n: n * n - 1),  # order 2
        ("one mod n", lambda n: 1 + 12345 * n),  # g^k: Enc(m) = g^(m + k r), readable mod n
        ("small order times g", lambda n: (n * n - 1) * (1 + 7 * n) % (n * n)),
        ("zero", lambda n: 0),
        ("n squared", lambda n: n * n),
        ("shares a factor with n", lambda n: n),
    ],
)
def test_degenerate_djn_base_is_refused(keys, name, make_hs):
    """h_s = 1 makes every ciphertext 1 + m n (anyone reads m); -1 or any h_s = g^k * (small order)
    leaks m + k r mod n from c^d. Refused both by the constructor and by from_bytes."""
    n = keys[0].n
    hs = make_hs(n)
    with pytest.raises(CryptoError):
        PaillierPublicKey(n=n, hs=hs)
    with pytest.raises(CryptoError):
        PaillierPublicKey.from_bytes(_forged_public_bytes(n, hs))


def test_one_base_really_leaks_without_the_check(keys):
    """Negative control: with h_s = 1 a fast-backend 'ciphertext' is 1 + m n, read off without the key."""
    n = keys[0].n
    m = 0xC0FFEE
    ciphertext = (1 + m * n) * pow(1, 448, n * n) % (n * n)  # what encrypt computes for h_s = 1
    assert (ciphertext - 1) // n == m


@pytest.mark.parametrize(
    "name, make_n",
    [
        ("even", lambda k: k.public_key.n + 1),
        ("perfect square", lambda k: k.p * k.p),
        ("small factor", lambda k: 3 * (k.public_key.n // 3 | 1)),
        ("too short", lambda k: (1 << 300) + 1),
        ("too long", lambda k: (1 << 20000) + 1),
    ],
)
def test_malformed_modulus_is_refused(keys, name, make_n):
    pk, sk = keys
    n = make_n(sk)
    with pytest.raises((ConfigError, CryptoError)):
        PaillierPublicKey(n=n, hs=2)
    with pytest.raises(CryptoError):
        PaillierPublicKey.from_bytes(_forged_public_bytes(n, 4))


def test_from_bytes_checks_the_expected_size(keys):
    pk, _ = keys
    assert PaillierPublicKey.from_bytes(pk.to_bytes(), expected_bits=1024) == pk
    with pytest.raises(CryptoError, match="1024-bit.*2048"):
        PaillierPublicKey.from_bytes(pk.to_bytes(), expected_bits=2048)


def test_honest_keys_pass_the_base_checks(keys, other_keys):
    for pk, _ in (keys, other_keys):
        assert PaillierPublicKey(n=pk.n, hs=pk.hs).hs == pk.hs
        assert pk.with_fresh_hs().n == pk.n

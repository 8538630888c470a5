import gmpy2
import pytest
from deterministic_random import CountingUrandom

from securevfl.errors import ConfigError, CryptoError
from securevfl.privacy.primitives.key_agreement import (
    KEY_AGREEMENT_NAMES,
    PublicKey,
    create_key_agreement,
)


@pytest.fixture(scope="session")
def ffdh_pairs():
    return {
        name: (create_key_agreement(name).generate(), create_key_agreement(name).generate())
        for name in ("ffdh2048", "modp2048")
    }


def test_rfc7748_x25519_function_vector():
    ka = create_key_agreement("x25519")
    scalar = bytes.fromhex("a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4")
    u = ka.load_public(
        bytes.fromhex("e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c")
    )
    assert ka.exchange(scalar, u).hex() == (
        "c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552"
    )


def test_rfc7748_section_6_1_diffie_hellman():
    ka = create_key_agreement("x25519")
    alice = ka.keypair_from_private(
        bytes.fromhex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
    )
    bob = ka.keypair_from_private(
        bytes.fromhex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb")
    )
    assert alice.public.data.hex() == (
        "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"
    )
    assert bob.public.data.hex() == (
        "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f"
    )
    shared = "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742"
    assert ka.exchange(alice.private, bob.public).hex() == shared
    assert ka.exchange(bob.private, alice.public).hex() == shared


def test_x25519_rejects_small_order_point():
    ka = create_key_agreement("x25519")
    with pytest.raises(CryptoError):
        ka.exchange(ka.generate().private, ka.load_public(bytes(32)))
    with pytest.raises(CryptoError):
        ka.load_public(bytes(31))


def test_ffdh_agreement_both_ways(ffdh_pairs):
    for name, (a, b) in ffdh_pairs.items():
        ka = create_key_agreement(name)
        assert ka.exchange(a.private, b.public) == ka.exchange(b.private, a.public)
        assert len(ka.exchange(a.private, b.public)) == 256


def test_ffdh3072_agreement_both_ways():
    ka = create_key_agreement("ffdh3072")
    urandom = CountingUrandom(b"ffdh3072")
    a, b = ka.generate(urandom), ka.generate(urandom)
    assert len(a.private) == 40
    assert ka.exchange(a.private, b.public) == ka.exchange(b.private, a.public)


@pytest.mark.parametrize("name", ["ffdh2048", "ffdh3072", "modp2048"])
def test_ffdh_rejects_bad_public_values(name):
    ka = create_key_agreement(name)
    p = int(ka.p)
    size = ka.element_bytes
    for bad in (0, 1, p - 1, p, p + 1):
        with pytest.raises(CryptoError):
            ka.load_public(bad.to_bytes(size + (1 if bad >= 1 << (8 * size) else 0), "big"))
    # a quadratic non-residue (order 2q, outside the prime-order subgroup): p - 2 = -2 mod p,
    # a non-residue because p = 7 mod 8 makes -1 a non-residue and 2 a residue
    with pytest.raises(CryptoError):
        ka.load_public((p - 2).to_bytes(size, "big"))
    with pytest.raises(CryptoError):
        ka.load_public(b"\x01" * (size - 1))


def test_rfc_primes_match_published_closed_forms():
    with gmpy2.context(precision=4000):
        e, pi = gmpy2.exp(1), gmpy2.const_pi()
        two = gmpy2.mpfr(2)
        expected = {
            "ffdh2048": 2**2048 - 2**1984 + (int(gmpy2.floor(two**1918 * e)) + 560316) * 2**64 - 1,
            "ffdh3072": 2**3072 - 2**3008 + (int(gmpy2.floor(two**2942 * e)) + 2625351) * 2**64 - 1,
            "modp2048": 2**2048 - 2**1984 - 1 + 2**64 * (int(gmpy2.floor(two**1918 * pi)) + 124476),
        }
    for name, p in expected.items():
        ka = create_key_agreement(name)
        assert int(ka.p) == p
        assert gmpy2.is_prime(ka.p) and gmpy2.is_prime(ka.q)
        assert gmpy2.powmod(2, ka.q, ka.p) == 1  # g = 2 generates the order-q subgroup


def test_registry_and_unknown_name():
    assert set(KEY_AGREEMENT_NAMES) >= {"x25519", "ffdh2048", "ffdh3072"}
    with pytest.raises(ConfigError, match="x25519"):
        create_key_agreement("rsa")


@pytest.mark.parametrize("name", ["x25519", "ffdh2048"])
def test_public_key_round_trip_and_repr(name):
    ka = create_key_agreement(name)
    pair = ka.generate(CountingUrandom(name.encode()))
    blob = pair.public.to_bytes()
    assert PublicKey.from_bytes(blob) == pair.public
    assert pair.private.hex() not in repr(pair)
    assert "fp=" in repr(pair) and len(repr(pair)) < 60
    assert ka.keypair_from_private(pair.private) == pair


def test_injected_urandom_is_deterministic():
    ka = create_key_agreement("x25519")
    assert ka.generate(CountingUrandom(b"s")) == ka.generate(CountingUrandom(b"s"))
    assert ka.generate(CountingUrandom(b"s")) != ka.generate(CountingUrandom(b"t"))


def test_public_key_from_unknown_scheme():
    with pytest.raises(CryptoError):
        PublicKey.from_bytes(b"\x03abc" + bytes(32))


@pytest.mark.parametrize("name", ["x25519", "ffdh2048"])
def test_exchange_many_matches_exchange(name, ffdh_pairs):
    ka = create_key_agreement(name)
    me = ka.generate()
    peers = [ka.generate().public for _ in range(3)]
    assert ka.exchange_many(me.private, peers) == [ka.exchange(me.private, p) for p in peers]


def test_from_bytes_without_subgroup_check_still_checks_length():
    ka = create_key_agreement("ffdh2048")
    blob = ka.generate().public.to_bytes()
    assert PublicKey.from_bytes(blob, validate=False) == PublicKey.from_bytes(blob)
    with pytest.raises(CryptoError):
        PublicKey.from_bytes(blob[:-1], validate=False)

"""Curve layer: RFC 7748 vectors, commutative blinding, hash-to-curve, point validation."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psi.curve import (
    FIELD_PRIME,
    BlindingKey,
    CurveEngine,
    _curve_rhs,
    _exchange_all,
    _is_nonzero_square,
    hash_prefix,
    hash_to_curve,
    is_on_curve,
    rerandomizing_pair,
)
from psi.errors import InvalidPointError, PSICryptoError

# RFC 7748, section 5.2 (first test vector)
RFC_SCALAR = bytes.fromhex("a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4")
RFC_U = bytes.fromhex("e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c")
RFC_OUT = bytes.fromhex("c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552")

# u-coordinates of small-order points (Bernstein's list used by libsodium), and non-canonical ones
SMALL_ORDER_U = [
    0,
    1,
    325606250916557431795983626356110631294008115727848805560023387167927233504,
    39382357235489614581723060781553021112529911719440698176882885853963445705823,
    FIELD_PRIME - 1,
]


def u_bytes(u: int) -> bytes:
    return u.to_bytes(32, "little")


def test_rfc7748_vector():
    assert _exchange_all(RFC_SCALAR, [RFC_U], 32) == RFC_OUT


def test_key_repr_hides_secret():
    key = BlindingKey(b"\x07" * 32)
    assert "07" not in repr(key) and "secret" in repr(key).lower()
    with pytest.raises(PSICryptoError):
        BlindingKey(b"short")


@settings(max_examples=25, deadline=None)
@given(st.binary(min_size=1, max_size=64), st.binary(min_size=32, max_size=32))
def test_blinding_commutes(item, salt):
    a, b = BlindingKey(os.urandom(32)), BlindingKey(os.urandom(32))
    p = hash_to_curve(item, hash_prefix(salt))
    ab = _exchange_all(b.secret, [_exchange_all(a.secret, [p], 32)], 32)
    ba = _exchange_all(a.secret, [_exchange_all(b.secret, [p], 32)], 32)
    assert ab == ba


@settings(max_examples=25, deadline=None)
@given(st.binary(min_size=1, max_size=64), st.binary(min_size=32, max_size=32))
def test_rerandomizing_pair_gives_the_point_back(item, salt):
    """H(x)^a hidden behind a fresh r, blinded by a peer's b, then r removed: H(x)^{ab}, as without r."""
    a, b = BlindingKey(os.urandom(32)), BlindingKey(os.urandom(32))
    ha = _exchange_all(a.secret, [hash_to_curve(item, hash_prefix(salt))], 32)
    r, inverse = rerandomizing_pair()
    hidden = _exchange_all(r.secret, [ha], 32)
    assert hidden != ha
    back = _exchange_all(inverse.secret, [_exchange_all(b.secret, [hidden], 32)], 32)
    assert back == _exchange_all(b.secret, [ha], 32)
    assert rerandomizing_pair()[0] != r  # fresh each time
    ar, inverse = rerandomizing_pair(base=a)  # a and r in one key: H(x)^{a r} from H(x) directly
    point = hash_to_curve(item, hash_prefix(salt))
    hidden = _exchange_all(ar.secret, [point], 32)
    assert hidden != ha
    assert _exchange_all(inverse.secret, [_exchange_all(b.secret, [hidden], 32)], 32) == _exchange_all(
        b.secret, [ha], 32)


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=100))
def test_hash_to_curve_lands_on_curve_not_twist(item):
    p = hash_to_curve(item, hash_prefix(b"\x01" * 32))
    assert is_on_curve(p)


def test_raw_sha256_would_hit_the_twist_half_the_time():
    # the reason for try-and-increment: about half of raw 255-bit values are twist points
    rng = np.random.default_rng(0)  # test data only, nothing secret
    us = [int.from_bytes(rng.bytes(32), "little") % FIELD_PRIME for _ in range(2000)]
    on_curve = sum(_is_nonzero_square(_curve_rhs(u)) for u in us)
    assert 850 < on_curve < 1150


def test_hash_depends_on_salt_and_item():
    p1 = hash_to_curve(b"alice", hash_prefix(b"\x00" * 32))
    assert p1 != hash_to_curve(b"alice", hash_prefix(b"\x01" * 32))
    assert p1 != hash_to_curve(b"alicf", hash_prefix(b"\x00" * 32))
    assert p1 == hash_to_curve(b"alice", hash_prefix(b"\x00" * 32))


@pytest.mark.parametrize("u", SMALL_ORDER_U + [FIELD_PRIME, FIELD_PRIME + 1, 2**255 - 1])
def test_blind_rejects_small_order_and_non_canonical(u):
    engine = CurveEngine(1)
    good = np.frombuffer(hash_to_curve(b"x", hash_prefix(b"\x00" * 32)), np.uint8)
    pts = np.stack([good, np.frombuffer(u_bytes(u), np.uint8)])
    with pytest.raises(InvalidPointError, match="#1"):
        engine.blind(pts, BlindingKey(os.urandom(32)))


def test_blind_rejects_twist_point():
    u = next(u for u in range(2, 100) if not _is_nonzero_square(_curve_rhs(u)))
    with pytest.raises(InvalidPointError):
        CurveEngine(1).blind(np.frombuffer(u_bytes(u), np.uint8).reshape(1, 32), BlindingKey(os.urandom(32)))


def test_parallel_engine_matches_inline():
    items = [f"user-{i}" for i in range(3000)]
    key, salt = BlindingKey(os.urandom(32)), os.urandom(32)
    inline, st1 = CurveEngine(1).hash_and_blind(items, salt, key)
    with CurveEngine(2, min_parallel_items=1, chunk_items=500) as eng:
        par, st2 = eng.hash_and_blind(items, salt, key)
        dbl_par, _ = eng.blind(par, key, 16)
    dbl_inline, _ = CurveEngine(1).blind(inline, key, 16)
    assert np.array_equal(inline, par) and np.array_equal(dbl_inline, dbl_par)
    assert st1.hashed == st2.hashed == 3000 and st2.hash_cpu > 0 and st2.blind_cpu > 0
    assert dbl_par.shape == (3000, 16)

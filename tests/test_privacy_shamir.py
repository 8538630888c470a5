import itertools
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from securevfl.errors import ConfigError, CryptoError, ProtocolError
from securevfl.privacy.primitives.shamir import (
    PRIME,
    Share,
    interpolate_at,
    interpolate_at_zero,
    lagrange_at,
    lagrange_at_zero,
    reconstruct_secret,
    split_secret,
)


@settings(max_examples=40, deadline=None)
@given(st.binary(min_size=1, max_size=64), st.integers(2, 7), st.integers(0, 3), st.randoms())
def test_any_t_shares_reconstruct(secret, t, extra, rnd):
    n = t + extra
    shares = split_secret(secret, t, range(1, n + 1))
    subset = rnd.sample(list(shares), t)
    assert reconstruct_secret(subset) == secret


@settings(max_examples=40, deadline=None)
@given(st.binary(min_size=32, max_size=32), st.integers(2, 6))
def test_t_minus_one_shares_give_a_wrong_value(secret, t):
    shares = split_secret(secret, t, range(1, t + 2))
    value = interpolate_at_zero([(s.x, s.y) for s in shares[: t - 1]])
    assert value != int.from_bytes(secret, "big")
    with pytest.raises(ProtocolError):
        reconstruct_secret(shares[: t - 1])


def test_every_subset_of_size_t_works():
    secret = os.urandom(32)
    shares = split_secret(secret, 3, [2, 5, 7, 11, 13])
    for combo in itertools.combinations(shares, 3):
        assert reconstruct_secret(list(combo)) == secret


def test_share_serialisation_and_repr():
    share = split_secret(b"\x00" * 31 + b"\x01", 2, [1, 2])[0]
    assert Share.from_bytes(share.to_bytes()) == share
    assert str(share.y) not in repr(share)
    with pytest.raises(ProtocolError):
        Share.from_bytes(share.to_bytes()[:-1])


def test_leading_zero_bytes_preserved():
    secret = b"\x00\x00" + os.urandom(30)
    assert reconstruct_secret(split_secret(secret, 2, [1, 2, 3])[1:]) == secret


def test_validation():
    with pytest.raises(ConfigError):
        split_secret(b"x", 1, [1, 2])
    with pytest.raises(ConfigError):
        split_secret(b"x", 3, [1, 2])
    with pytest.raises(ConfigError):
        split_secret(b"x", 2, [1, 1])
    with pytest.raises(ConfigError):
        split_secret(b"x" * 65, 2, [1, 2])
    with pytest.raises(ConfigError):
        split_secret(b"x", 2, [0, 1])
    with pytest.raises(ProtocolError):
        Share(1, PRIME, 2, 32)


def test_tampered_share_value_is_not_detected_here():
    """What the module docstring says: an altered y gives a wrong secret, usually without error."""
    secret = (1 << 200).to_bytes(32, "big")  # far from both ends of the 32-byte range
    a, b, c = split_secret(secret, 2, [1, 2, 3])
    bad = Share(b.x, (b.y + 1) % PRIME, b.threshold, b.secret_len)
    # x = 1, 2: L = (2, -1), so y_2 + 1 shifts the secret by -1 and it still fits 32 bytes
    assert reconstruct_secret([a, bad]) == (int.from_bytes(secret, "big") - 1).to_bytes(32, "big")
    # a large change that does not fit the length is caught
    huge = Share(b.x, (b.y + (1 << 300)) % PRIME, b.threshold, b.secret_len)
    with pytest.raises(CryptoError):
        reconstruct_secret([a, huge])
    with pytest.raises(ProtocolError):
        reconstruct_secret([a, a])
    # with t shares known to be right, a further share is checked by interpolation
    points = [(a.x, a.y), (c.x, c.y)]
    assert interpolate_at(points, b.x) == b.y
    assert interpolate_at(points, bad.x) != bad.y
    assert interpolate_at(points, 0) == int.from_bytes(secret, "big")


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 6), st.integers(0, 2**32))
def test_lagrange_at_matches_zero_and_reproduces_shares(t, seed):
    import random

    rnd = random.Random(seed)
    xs = rnd.sample(range(1, 50), t + 1)
    shares = split_secret(os.urandom(32), t, xs)
    assert lagrange_at(xs[:t], 0) == lagrange_at_zero(xs[:t])
    points = [(s.x, s.y) for s in shares[:t]]
    assert interpolate_at(points, shares[t].x) == shares[t].y


def test_precomputed_lagrange_coefficients():
    secrets_ = [os.urandom(32) for _ in range(3)]
    split = [split_secret(s, 3, [1, 2, 3, 4]) for s in secrets_]
    coeffs = lagrange_at_zero([2, 3, 4])
    for s, shares in zip(secrets_, split, strict=True):
        assert reconstruct_secret(list(shares[1:]), coeffs) == s

"""The fast paths of the secure-aggregation hot loop compute exactly what the plain code did."""

from __future__ import annotations

import dataclasses
import hashlib
import os

import numpy as np
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from securevfl.errors import ConfigError, DataError, EncodingOverflowError, ProtocolError
from securevfl.privacy import secagg as sa
from securevfl.privacy.primitives import wire
from securevfl.privacy.primitives.fixed_point import encode
from securevfl.privacy.primitives.kdf import encode_fields, hkdf_sha256
from securevfl.privacy.primitives.prg import add_prg_streams, prg_uint64
from securevfl.privacy.secagg.derive import COMMIT_LABEL, SHARE_AAD_LABEL, commit_secret, share_aad
from securevfl.privacy.secagg.evolve import evolve


def _reference_encode(values, frac_bits, n_terms):
    """The plain encoding: float64 copy, scale, round, range check, cast."""
    x = np.asarray(values, dtype=np.float64)
    scaled = np.rint(x * float(1 << frac_bits))
    assert np.all(np.isfinite(scaled)) and np.abs(scaled).max(initial=0) <= ((1 << 63) - 1) // n_terms
    return scaled.astype(np.int64).view(np.uint64)


@pytest.mark.parametrize("salt", [None, b"", b"salt-bytes"])
@pytest.mark.parametrize("length", [16, 32, 64])
def test_hkdf_matches_cryptography(salt, length):
    secret, info = os.urandom(32), encode_fields(("label", b"sid", "a", "b"))
    expected = HKDF(algorithm=hashes.SHA256(), length=length, salt=salt, info=info).derive(secret)
    assert hkdf_sha256(secret, info, length, salt) == expected


def test_encode_fields_layout_and_refusals():
    assert encode_fields(("ab", b"c", bytearray(b"de"), 0, 256)) == (
        b"\x00\x00\x00\x02ab" b"\x00\x00\x00\x01c" b"\x00\x00\x00\x02de" b"\x00\x00\x00\x01\x00"
        b"\x00\x00\x00\x02\x01\x00"
    )

    class Name(str):
        pass

    for bad in (True, -1, 1.0, Name("x"), None):
        with pytest.raises(ConfigError):
            encode_fields(("ok", bad))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.float16])
@pytest.mark.parametrize("shape", [(), (7,), (33, 5)])
def test_encode_matches_reference(dtype, shape):
    x = (np.random.default_rng(1).normal(size=shape) * 300).astype(dtype)
    out = encode(x, 16, 4)
    assert out.dtype == np.uint64 and out.shape == np.shape(x)
    np.testing.assert_array_equal(out, _reference_encode(x, 16, 4))


def test_encode_half_way_rounding_and_refusals():
    assert encode(np.array([2.5, -2.5, 3.5], dtype=np.float32) / 65536, 16).view(np.int64).tolist() == [2, -2, 4]
    with pytest.raises(DataError):
        encode(np.array([1.0, np.nan], dtype=np.float32), 16)
    with pytest.raises(DataError):
        encode(np.array([-np.inf]), 16)
    with pytest.raises(EncodingOverflowError):  # float32 max * 2^16 stays finite in float64
        encode(np.array([np.finfo(np.float32).max], dtype=np.float32), 16)


def test_prg_streams_reuse_scratch_across_sizes_and_offsets():
    plus, minus = [os.urandom(32), os.urandom(16)], [os.urandom(32)]
    for size, offset in [(10, 0), (1 << 20, 0), (7, 3), (1000, 0), (5, 1)]:  # 8 MiB: past the cached scratch
        values = np.arange(size, dtype=np.uint64)
        expected = values.copy()
        for seed, sign in [(plus[0], 1), (plus[1], 1), (minus[0], -1)]:
            stream = prg_uint64(seed, offset + size, 9, "step")[offset:]
            expected = expected + stream if sign == 1 else expected - stream
        add_prg_streams(values, plus, minus, 9, "step", offset)
        np.testing.assert_array_equal(values, expected)


def _session() -> sa.SecAggConfig:
    return sa.SecAggConfig(session_id=b"s" * 16, parties=("p1", "p2", "p3"), threshold=2)


def test_commitment_and_aad_layout():
    config = _session()
    secret = os.urandom(32)
    assert commit_secret(config, 5, "p2", sa.MASK_KEY, secret) == hashlib.sha256(
        encode_fields((COMMIT_LABEL, config.session_id, 5, "p2", sa.MASK_KEY, secret))).digest()
    assert share_aad(config, "p1", "p3", 70000, b"key") == encode_fields(
        (SHARE_AAD_LABEL, config.session_id, "p1", "p3", 70000, b"key"))

    class Name(str):
        pass

    with pytest.raises(ConfigError):  # the cache never lets a str subclass (or a bool) through
        commit_secret(config, 5, Name("p2"), sa.MASK_KEY, secret)
    with pytest.raises(ConfigError):
        share_aad(config, "p1", "p3", True, b"key")  # type: ignore[arg-type]


def test_evolve_is_replace():
    state = sa.PassiveSecAggState.create(_session(), "p1")
    changed = evolve(state, masked_rounds=frozenset({3}))
    assert changed == dataclasses.replace(state, masked_rounds=frozenset({3}))
    assert type(changed) is type(state) and state.masked_rounds == frozenset()
    with pytest.raises(TypeError):
        evolve(state, no_such_field=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        changed.name = "p2"  # type: ignore[misc]


def test_wire_readers_fast_paths_keep_their_checks():
    assert wire.blob(b"abc", "x", 3) == b"abc" and wire.blob(bytearray(b"ab"), "x") == b"ab"
    with pytest.raises(ProtocolError):
        wire.blob(b"abc", "x", 4)
    with pytest.raises(ProtocolError):
        wire.str_map({"": b"a"}, "m", wire.blob)
    with pytest.raises(ProtocolError):
        wire.str_map({1: b"a"}, "m", wire.blob)
    with pytest.raises(ProtocolError):
        wire.field([("a", 1)], "a", "m")
    assert wire.str_map({"a": b"1"}, "m", wire.blob) == {"a": b"1"}

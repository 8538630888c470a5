import numpy as np
import pytest
from scipy import stats

from securevfl.errors import ConfigError
from securevfl.privacy.primitives.kdf import encode_fields, hkdf_sha256, pairwise_seed
from securevfl.privacy.primitives.prg import (
    STEP_PAIRWISE,
    STEP_SELF,
    counter_block,
    prg_uint64,
    step_id,
)

SEED = bytes(range(32))


def test_hkdf_rfc5869_case_1():
    # RFC 5869 appendix A.1 (SHA-256, 22-byte IKM, salt, info, L=42)
    okm = hkdf_sha256(
        bytes.fromhex("0b" * 22),
        bytes.fromhex("f0f1f2f3f4f5f6f7f8f9"),
        42,
        salt=bytes.fromhex("000102030405060708090a0b0c"),
    )
    assert okm.hex() == ("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865")


def test_pairwise_seed_symmetric_and_separated():
    s = b"shared-secret"
    assert pairwise_seed(s, b"sess", "a", "b") == pairwise_seed(s, b"sess", "b", "a")
    assert pairwise_seed(s, b"sess", "a", "b") != pairwise_seed(s, b"sess2", "a", "b")
    assert pairwise_seed(s, b"sess", "a", "b") != pairwise_seed(s, b"sess", "a", "c")
    assert pairwise_seed(s, b"sess", "a", "b", label="x") != pairwise_seed(s, b"sess", "a", "b")
    with pytest.raises(ConfigError):
        pairwise_seed(s, b"sess", "a", "a")


def test_encode_fields_is_unambiguous():
    assert encode_fields(["ab", "c"]) != encode_fields(["a", "bc"])


def test_prg_deterministic_and_shape():
    a = prg_uint64(SEED, (128, 128), 3, STEP_PAIRWISE)
    b = prg_uint64(SEED, (128, 128), 3, STEP_PAIRWISE)
    assert a.dtype == np.uint64 and a.shape == (128, 128)
    assert np.array_equal(a, b)
    assert a.flags.writeable
    # a longer request extends the same keystream (chunking does not change the stream)
    long = prg_uint64(SEED, 3 * 16384 + 5, 3, STEP_PAIRWISE)
    assert np.array_equal(long[:16384], a.ravel())


def test_prg_differs_between_rounds_steps_and_seeds():
    base = prg_uint64(SEED, 1024, 0, STEP_PAIRWISE)
    assert not np.array_equal(base, prg_uint64(SEED, 1024, 1, STEP_PAIRWISE))
    assert not np.array_equal(base, prg_uint64(SEED, 1024, 0, STEP_SELF))
    assert not np.array_equal(base, prg_uint64(bytes(32), 1024, 0, STEP_PAIRWISE))
    # no overlap between round 0 and round 1 keystreams anywhere
    assert not set(base.tolist()) & set(prg_uint64(SEED, 1024, 1, STEP_PAIRWISE).tolist())


def test_protocol_step_labels_do_not_collide():
    labels = [STEP_PAIRWISE, STEP_SELF, "secagg/embedding", "secagg/gradient"]
    assert len({step_id(label) for label in labels}) == len(labels)
    assert counter_block(1, 2) == (1).to_bytes(8, "big") + (2).to_bytes(4, "big") + bytes(4)


def test_prg_rejects_bad_arguments():
    with pytest.raises(ConfigError):
        prg_uint64(b"short", 4, 0, "x")
    with pytest.raises(ConfigError):
        prg_uint64(SEED, 4, -1, "x")
    with pytest.raises(ConfigError):
        prg_uint64(SEED, 4, 0, "")


def test_prg_output_uniform_chi_square_top_byte():
    values = prg_uint64(SEED, 100_000, 7, STEP_PAIRWISE)
    counts = np.bincount((values >> np.uint64(56)).astype(np.int64), minlength=256)
    _, p = stats.chisquare(counts)
    assert p > 1e-4


def test_prg_output_uniform_ks():
    values = prg_uint64(SEED, 100_000, 8, STEP_PAIRWISE)
    assert stats.kstest(values.astype(np.float64) / 2.0**64, "uniform").pvalue > 1e-4


def test_uniformity_test_can_fail():
    # the same tests reject a visibly non-uniform vector
    biased = prg_uint64(SEED, 100_000, 9, STEP_PAIRWISE) >> np.uint64(1)
    counts = np.bincount((biased >> np.uint64(56)).astype(np.int64), minlength=256)
    assert stats.chisquare(counts).pvalue < 1e-6


def test_encode_fields_types():
    assert encode_fields([b"ab", 3, "c"]) == (b"\x00\x00\x00\x02ab" + b"\x00\x00\x00\x01\x03" + b"\x00\x00\x00\x01c")
    with pytest.raises(ConfigError):
        encode_fields([1.5])
    with pytest.raises(ConfigError):
        encode_fields([-1])
    with pytest.raises(ConfigError):
        encode_fields([True])

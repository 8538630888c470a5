"""The 32-bit masking ring (``ring_bits=32``): error bound, refused overflow, half the bytes per link."""

from __future__ import annotations

import numpy as np
import pytest
from aggregation_harness import PASSIVES, RecordingTransport, random_inputs, run_rounds
from scipy.stats import chisquare

import securevfl
from securevfl.errors import ConfigError, EncodingOverflowError, ProtocolError
from securevfl.federation import codec
from securevfl.methods import TrainConfig, create_method
from securevfl.privacy.aggregation import AggregationConfig, create_aggregation
from securevfl.privacy.primitives import wire
from securevfl.privacy.primitives.fixed_point import decode, encode, from_ring, max_magnitude, ring_sum, to_ring

MASKING = ("dh", "pairwise")


def _run(name: str, inputs, ring_bits: int, frac_bits: int = 16, transport=None):
    scheme = create_aggregation(name, AggregationConfig(frac_bits=frac_bits, ring_bits=ring_bits))
    scheme.validate(len(PASSIVES))
    return run_rounds(scheme, inputs, transport=transport)


@pytest.mark.parametrize("name", MASKING)
@pytest.mark.parametrize("frac_bits", [12, 16, 20])
def test_ring32_sum_is_within_the_fixed_point_bound(name, frac_bits):
    # inputs up to the largest magnitude the 32-bit ring allows for 3 summands, both signs
    bound = max_magnitude(frac_bits, len(PASSIVES), 32)
    rng = np.random.default_rng(frac_bits)
    inputs = [{p: rng.uniform(-bound, bound, size=(6, 5)) for p in PASSIVES} for _ in range(2)]
    inputs[1]["p1"][0, :] = bound  # the extremes: the sum reaches 3 * bound, still inside the signed range
    inputs[1]["p2"][0, :] = bound
    inputs[1]["p3"][0, :] = bound
    inputs[1]["p1"][1, :] = -bound
    inputs[1]["p2"][1, :] = -bound
    inputs[1]["p3"][1, :] = -bound
    (results, _), _ = _run(name, inputs, 32, frac_bits)
    for r, res in enumerate(results):
        expected = sum(inputs[r][p] for p in PASSIVES)
        assert np.max(np.abs(res.total - expected)) <= len(PASSIVES) * 2.0 ** -(frac_bits + 1)


@pytest.mark.parametrize("name", MASKING)
def test_ring32_decodes_the_same_sums_as_ring64(name):
    inputs = random_inputs(2, (4, 7))
    (r32, _), _ = _run(name, inputs, 32)
    (r64, _), _ = _run(name, inputs, 64)
    for a, b in zip(r32, r64, strict=True):
        np.testing.assert_array_equal(a.total, b.total)  # same encodings, same exact ring sum


def test_ring32_refuses_a_value_beyond_its_range():
    bound = max_magnitude(16, 3, 32)
    assert bound == pytest.approx((2**31 - 1) // 3 / 2**16)
    encode(np.array([bound, -bound]), 16, 3, 32)  # the bound itself fits
    with pytest.raises(EncodingOverflowError, match="ring_bits=64"):
        encode(np.array([bound + 2**-16]), 16, 3, 32)
    encode(np.array([bound + 2**-16]), 16, 3, 64)  # the 64-bit ring holds it
    # without the check, the wrapped sum of three such values would decode to a wrong sign:
    wrapped = decode(ring_sum([encode(np.array([bound]), 16) for _ in range(4)]), 16, 32)
    assert wrapped[0] < 0


def test_ring32_is_refused_where_its_range_is_too_small_or_there_is_no_ring():
    with pytest.raises(ConfigError, match=r"frac_bits must be an int in \[0, 30\]"):
        AggregationConfig(frac_bits=31, ring_bits=32)
    with pytest.raises(ConfigError, match="ring_bits must be one of 32, 64"):
        AggregationConfig(ring_bits=16)
    # frac_bits = 30 leaves (2^31 - 1) / 3 / 2^30 < 1 per value for 3 parties
    with pytest.raises(ConfigError, match="holds only"):
        create_aggregation("dh", AggregationConfig(frac_bits=30, ring_bits=32)).validate(3)
    with pytest.raises(ConfigError, match="holds only"):
        create_aggregation("pairwise", AggregationConfig(frac_bits=30, ring_bits=32)).validate(3)
    with pytest.raises(ConfigError, match="no ring"):
        create_aggregation("none", AggregationConfig(ring_bits=32))
    with pytest.raises(ConfigError, match="masking schemes only"):
        create_method("easter", TrainConfig(options={"secagg": "none", "ring_bits": 32}))
    create_method("easter", TrainConfig(options={"secagg": "dh", "ring_bits": "32"}))  # a CLI string is an int


def test_ring_wire_checks_the_dtype():
    with pytest.raises(ProtocolError, match="uint32 array"):
        wire.ring_array(np.zeros(3, dtype=np.uint64), "masked input", 32)
    with pytest.raises(ProtocolError, match="uint32 or uint64"):
        wire.ring_array(np.zeros(3, dtype=np.int32), "masked input")
    x = to_ring(np.array([2**40 + 5], dtype=np.uint64), 32)
    assert x.dtype == np.uint32 and int(x[0]) == 5
    assert from_ring(x, 32).dtype == np.uint64


@pytest.mark.parametrize("name", MASKING)
def test_ring32_halves_the_masked_payload_on_each_link(name):
    rounds, shape = 3, (128, 128)
    inputs = random_inputs(rounds, shape)
    _, m64 = _run(name, inputs, 64)
    _, m32 = _run(name, inputs, 32)
    for p in PASSIVES:
        b64, b32 = m64[p].snapshot().bytes[f"{p}->A"], m32[p].snapshot().bytes[f"{p}->A"]
        # every masked element: 8 bytes in Z_2^64, 4 in Z_2^32; nothing else changes
        assert b64 - b32 == rounds * int(np.prod(shape)) * 4
    # the active party's traffic (keys, requests) is the same
    assert m64["A"].snapshot().bytes == m32["A"].snapshot().bytes


def test_ring32_blinded_input_is_uniform_on_z2_32():
    same = np.full((128, 128), 0.25)
    inputs = [{p: same for p in PASSIVES}, {p: same for p in PASSIVES}]
    transport = RecordingTransport(["A", *PASSIVES])
    _run("dh", inputs, 32, transport=transport)
    masked = [codec.decode(e.payload)["masked"] for e in transport.envelopes
              if e.tag == "agg.dh.input" and e.src == "p1"]
    assert len(masked) == 2 and masked[0].dtype == np.uint32
    top = (masked[0] >> np.uint32(24)).astype(np.int64).ravel()
    assert chisquare(np.bincount(top, minlength=256)).pvalue > 1e-4
    assert np.mean(masked[0] == masked[1]) < 1e-3


@pytest.mark.slow  # two short EASTER runs, ~6 s
def test_easter_with_ring32_trains_exactly_as_ring64_with_fewer_bytes():
    def run(ring_bits: int):
        return securevfl.train("easter", "breast-cancer", parties=4, epochs=1, batch_size=64, device="cpu",
                               alignment="plaintext",
                               options={"secagg": "pairwise", "embedding_size": 16, "ring_bits": ring_bits})

    r32, r64 = run(32), run(64)
    assert [h["train_loss"] for h in r32.history] == [h["train_loss"] for h in r64.history]
    assert r32.metrics["accuracy"] == r64.metrics["accuracy"]
    b32, b64 = r32.cost["comm"]["bytes"], r64.cost["comm"]["bytes"]
    for link in ("passive1->active", "passive2->active", "passive3->active"):
        assert b32[link] < 0.6 * b64[link]  # the masked embeddings dominate a passive party's uplink
    assert b32["active->passive1"] == b64["active->passive1"]

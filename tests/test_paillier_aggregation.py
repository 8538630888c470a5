"""The ``paillier`` aggregation scheme: exact sums, what each party sees, dropouts, EASTER parity."""

from __future__ import annotations

import numpy as np
import pytest
from aggregation_harness import PASSIVES, RecordingTransport, random_inputs, run_rounds
from hypothesis import given, settings
from hypothesis import strategies as st
from paillier_setup import FRAC_BITS, TEST_KEY_BITS

from securevfl.errors import ConfigError, EncodingOverflowError, PartyFailure
from securevfl.federation import codec
from securevfl.federation.runtime import run_parties
from securevfl.methods import TrainConfig, create_method
from securevfl.privacy.aggregation import AggregationConfig, aggregation_names, create_aggregation
from securevfl.privacy.aggregation import paillier as pa
from securevfl.privacy.aggregation import paillier_wire as pw
from securevfl.privacy.paillier import generate_keypair


def run_scheme(scheme, inputs, drops=None, transport=None):
    return run_rounds(scheme, inputs, drops, PASSIVES, transport)


def test_registered_and_validated():
    assert "paillier" in aggregation_names()
    assert isinstance(create_aggregation("paillier"), pa.PaillierAggregation)
    with pytest.raises(ConfigError, match="at least 2 passive"):
        create_aggregation("paillier").validate(1)
    assert create_aggregation("paillier").max_dropouts(3) == 1
    with pytest.raises(ConfigError):
        pa.PaillierOptions(workers=0)


def test_sum_is_exact_within_fixed_point_resolution_and_equals_dh(scheme):
    inputs = random_inputs(2, (5, 70))  # 350 values: several packed ciphertexts, a ragged last one
    (results, stats), meters = run_scheme(scheme, inputs)
    dh_results, _ = run_scheme_dh(inputs)
    for values, result, dh in zip(inputs, results, dh_results, strict=True):
        truth = sum(values.values())
        assert result.total.shape == truth.shape
        # Each encoding rounds by <= 2^-(f+1); the sum of 3 by <= 3 * 2^-(f+1) < 2^-f * 3.
        assert np.max(np.abs(result.total - truth)) <= len(PASSIVES) * 2.0 ** -(FRAC_BITS + 1)
        # Same rounding as dh: the decoded sums are bit-identical.
        np.testing.assert_array_equal(result.total, dh.total)
    assert stats.rounds == 2
    assert set(meters["A"].snapshot().crypto_s) == {"secagg.paillier_unmask"}
    assert {"secagg.paillier_verify", "secagg.paillier_add", "secagg.paillier_decrypt"} <= set(
        meters["p1"].snapshot().crypto_s
    )
    assert {"secagg.paillier_mask", "secagg.paillier_encrypt", "secagg.paillier_commit"} <= set(
        meters["p2"].snapshot().crypto_s
    )
    assert "secagg.paillier_encrypt" not in meters["p1"].snapshot().crypto_s  # H adds its own in the clear


def run_scheme_dh(inputs):
    dh = create_aggregation("dh", AggregationConfig(frac_bits=FRAC_BITS))

    def passive(ctx):
        half = dh.passive()
        half.setup(ctx)
        for values in inputs:
            half.contribute(ctx, values[ctx.name])

    def active(ctx):
        half = dh.active()
        half.setup(ctx, ctx.passives)
        return [half.aggregate(ctx) for _ in inputs]

    return run_parties({"A": active, **{p: passive for p in PASSIVES}}, active="A").results["A"], None


def test_active_party_never_receives_a_plaintext_embedding(scheme, keypair):
    inputs = random_inputs(2, (4, 64))
    transport = RecordingTransport(["A", *PASSIVES])
    run_scheme(scheme, inputs, transport=transport)
    layout = pw.packing_layout(keypair[0].bits, len(PASSIVES), FRAC_BITS, 2.0**20)
    to_active = [e for e in transport.envelopes if e.dst == "A"]
    assert {e.tag for e in to_active} == {"agg.pa.public_key", "agg.pa.input", "agg.pa.decrypted"}
    raw = b"".join(e.payload for e in to_active)
    n_bytes = (keypair[0].n.bit_length() + 7) // 8
    for values in inputs:
        for x in values.values():
            packed, _ = layout.pack_rows(x.reshape(1, -1))
            for m in packed:  # no packed plaintext appears in any message the active party gets
                assert m.to_bytes(n_bytes, "big") not in raw
            for dtype in (np.float32, np.float64):  # nor the floats themselves
                assert x.astype(dtype).tobytes()[:16] not in raw
    # The inputs are ciphertexts that decrypt (with the holder's key) to the packed plaintexts plus
    # the masks sent beside them, i.e. the check above looked in the right place.
    sk, n = keypair[1], keypair[0].n
    first = next(codec.decode(e.payload) for e in to_active if e.tag == "agg.pa.input" and e.src == "p2")
    width = (keypair[0].nsquare.bit_length() + 7) // 8
    cts = [int.from_bytes(first["ct"][i : i + width], "big") for i in range(0, len(first["ct"]), width)]
    masks = [int.from_bytes(first["masks"][i : i + n_bytes], "big") for i in range(0, len(first["masks"]), n_bytes)]
    from securevfl.privacy.paillier import FastBackend

    plain = FastBackend(keypair[0], sk, workers=1).decrypt_raw(cts)
    assert [(d - r) % n for d, r in zip(plain, masks, strict=True)] == layout.pack_rows(
        inputs[0]["p2"].reshape(1, -1)
    )[0]
    # The key holder's own vector never leaves it, not even encrypted.
    assert not any(e.tag == "agg.pa.input" and e.src == "p1" for e in to_active)


def _holder_view(scheme, keypair, inputs):
    """(what the key holder can decrypt, the true packed vector) per round, other party and ciphertext."""
    transport = RecordingTransport(["A", *PASSIVES])
    run_scheme(scheme, inputs, transport=transport)
    holder = "p1"  # first passive party in sorted order
    to_holder = [codec.decode(e.payload) for e in transport.envelopes if e.dst == holder and e.tag == "agg.pa.forward"]
    assert len(to_holder) == len(inputs)
    from securevfl.privacy.paillier import FastBackend

    backend = FastBackend(keypair[0], keypair[1], workers=1)
    layout = pw.packing_layout(keypair[0].bits, len(PASSIVES), FRAC_BITS, 2.0**20)
    width = (keypair[0].nsquare.bit_length() + 7) // 8
    for message, values in zip(to_holder, inputs, strict=True):
        assert set(message["ct"]) == {"p2", "p3"}  # individual ciphertexts, not a sum
        for party, data in message["ct"].items():
            cts = [int.from_bytes(data[i : i + width], "big") for i in range(0, len(data), width)]
            yield backend.decrypt_raw(cts), layout.pack_rows(values[party].reshape(1, -1))[0]


def test_key_holder_sees_only_masked_contributions(scheme, keypair):
    layout = pw.packing_layout(keypair[0].bits, len(PASSIVES), FRAC_BITS, 2.0**20)
    packed_bits = layout.slots * layout.spec.slot_bits  # every packed vector is below 2^packed_bits
    for seen, truth in _holder_view(scheme, keypair, random_inputs(2, (4, 64), seed=1)):
        assert all(s != t for s, t in zip(seen, truth, strict=True))
        assert max(truth).bit_length() <= packed_bits
        # Masked residues are uniform in Z_n (n > 2^(packed_bits + 20)): each lands below
        # 2^packed_bits with probability < 2^-20, so none should.
        assert all(s.bit_length() > packed_bits for s in seen)


def test_the_holder_check_can_fail_without_masks(scheme, keypair):
    unmasked = pa.PaillierAggregation(
        scheme.config,
        pa.PaillierOptions(key_bits=TEST_KEY_BITS, insecure_allow_small_key=True, randbelow=lambda n: 0),
    )
    for seen, truth in _holder_view(unmasked, keypair, random_inputs(1, (4, 64), seed=1)):
        assert seen == truth


def test_dropped_party_is_left_out_without_an_extra_round(scheme):
    inputs = random_inputs(3, (3, 40), seed=2)
    drops = {1: {"p3"}, 2: {"p1"}}  # a non-holder, then the key holder (who keeps decrypting)
    transport = RecordingTransport(["A", *PASSIVES])
    (results, stats), _ = run_scheme(scheme, inputs, drops, transport)
    for r, (values, result) in enumerate(zip(inputs, results, strict=True)):
        alive = [p for p in PASSIVES if p not in drops.get(r, ())]
        assert result.survivors == tuple(alive)
        truth = sum(values[p] for p in alive)
        assert np.max(np.abs(result.total - truth)) <= len(alive) * 2.0 ** -(FRAC_BITS + 1)
    assert stats.dropouts == 2
    # Per round: one input and one commitment per surviving non-holder, one forward, one
    # decryption — nothing more (round 1: p2 only; rounds 0 and 2: p2 and p3).
    per_round = [
        e
        for e in transport.envelopes
        if e.tag.startswith("agg.pa.") and e.tag not in ("agg.pa.session", "agg.pa.public_key", "agg.pa.key_digest")
    ]
    assert len(per_round) == (2 * 2 + 2) + (2 * 1 + 2) + (2 * 2 + 2)
    assert sum(e.src == "p3" and e.tag == "agg.pa.commit" for e in transport.envelopes) == 2
    assert sum(e.src == "p3" and e.tag == "agg.pa.input" for e in transport.envelopes) == 2
    assert sum(e.src == "p1" and e.tag == "agg.pa.decrypted" for e in transport.envelopes) == 3


def test_a_single_survivor_and_out_of_range_values_are_refused(scheme):
    with pytest.raises(PartyFailure):
        run_scheme(scheme, random_inputs(1, (2, 2)), {0: {"p2", "p3"}})
    huge = [{p: np.full((2, 2), 2.0**21) for p in PASSIVES}]
    with pytest.raises(PartyFailure) as info:
        run_scheme(scheme, huge)
    assert isinstance(info.value.cause, EncodingOverflowError)


def test_small_keys_need_the_explicit_insecure_flag():
    with pytest.raises(ConfigError, match="not allowed"):
        generate_keypair(1024)


def _easter_history(secagg: str):
    from securevfl.api import RunConfig, build_scenario
    from securevfl.data import PartitionSpec

    scenario = build_scenario(
        RunConfig(dataset="breast-cancer", partition=PartitionSpec(parties=4), alignment="plaintext")
    )
    config = TrainConfig(epochs=2, batch_size=128, seed=3, options={"secagg": secagg, "embedding_size": 16})
    method = create_method("easter", config)
    result = run_parties(method.roles(scenario), active=scenario.active)
    return result


def test_easter_with_paillier_trains_like_dh_and_plaintext():
    """Real 2048-bit key. paillier and dh round identically (round(x 2^16)), so their losses
    agree to float32 noise; against ``none`` the aggregate differs by <= 3 * 2^-17 per value,
    the same tolerance test_easter uses for dh vs none."""
    runs = {s: _easter_history(s) for s in ("none", "dh", "paillier")}
    outcome = {s: _active_outcome(r) for s, r in runs.items()}
    hist = {s: [h["train_loss"] for h in o.history] for s, o in outcome.items()}
    assert len(hist["paillier"]) == 2
    np.testing.assert_allclose(hist["paillier"], hist["dh"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(hist["paillier"], hist["none"], rtol=0, atol=2e-3)
    np.testing.assert_allclose(outcome["paillier"].scores, outcome["dh"].scores, atol=1e-4)
    crypto = _crypto_keys(runs["paillier"])
    assert {
        "secagg.paillier_encrypt",
        "secagg.paillier_add",
        "secagg.paillier_mask",
        "secagg.paillier_decrypt",
    } <= crypto
    assert outcome["paillier"].extra["secagg_stats"]["rounds"] > 0


def _active_outcome(result):
    from securevfl.methods import ActiveOutcome

    return next(v for v in result.results.values() if isinstance(v, ActiveOutcome))


def _crypto_keys(result) -> set[str]:
    return {k for meter in result.meters.values() for k in meter.snapshot().crypto_s}


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 120).flatmap(  # 2-3 parties' rows of one common length (no filtering)
        lambda width: st.lists(
            st.lists(st.floats(-(2.0**20) + 1, 2.0**20 - 1, allow_nan=False), min_size=width, max_size=width),
            min_size=2,
            max_size=3,
        )
    ),
    st.integers(0, 2**64),
)
def test_masked_packed_sum_decodes_to_the_sum_of_roundings(keypair, rows, seed):
    """Law behind steps 1-6: unpack((sum_k pack(x_k) + r) mod n - r mod n) = sum_k round(x_k 2^f)."""
    n = keypair[0].n
    layout = pw.packing_layout(keypair[0].bits, len(PASSIVES), FRAC_BITS, 2.0**20)
    packed = [layout.pack_rows(np.array(r).reshape(1, -1))[0] for r in rows]
    sums = [sum(col) for col in zip(*packed, strict=True)]
    masks = [(seed * (i + 1) * 0x9E3779B97F4A7C15) % n for i in range(len(sums))]
    residues = [(s + r) % n for s, r in zip(sums, masks, strict=True)]
    unmasked = [(d - r) % n for d, r in zip(residues, masks, strict=True)]
    ints = layout.unpack(unmasked, terms=len(rows), length=len(rows[0]))
    expected = np.sum([np.rint(np.array(r) * 2.0**FRAC_BITS) for r in rows], axis=0)
    np.testing.assert_array_equal(np.asarray(ints, dtype=np.float64).ravel(), expected)


def test_easter_paillier_with_dropouts_including_the_key_holder():
    """EASTER's drop schedule draws over all passive parties; the key holder keeps decrypting."""
    import securevfl
    from securevfl.methods.easter import drop_schedule

    # At seed 0 the schedule drops passive3 and, in later batches, the key holder passive1.
    drawn = [drop_schedule(("passive1", "passive2", "passive3"), 0.3, 0, 0, b, 1) for b in range(8)]
    assert any("passive1" in d for d in drawn) and any("passive3" in d for d in drawn)

    report = securevfl.train(
        "easter",
        "breast-cancer",
        parties=4,
        epochs=1,
        batch_size=64,
        device="cpu",
        alignment="plaintext",
        options={"secagg": "paillier", "drop_prob": 0.3, "embedding_size": 8},
    )
    stats = report.extra["secagg_stats"]
    assert stats["dropouts"] > 0 and stats["recovered_rounds"] == 0 and stats["recovery_bytes"] == 0
    assert report.metrics["accuracy"] > 0.6

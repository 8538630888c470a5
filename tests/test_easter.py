"""EASTER and its aggregation step: exact sums, hiding, dropout recovery, training parity."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from aggregation_harness import PASSIVES, RecordingTransport, random_inputs, run_rounds
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

import securevfl
from securevfl.api import RunConfig, build_scenario
from securevfl.data import PartitionSpec
from securevfl.errors import ConfigError, PartyFailure
from securevfl.federation import codec
from securevfl.federation.runtime import run_parties
from securevfl.methods import TrainConfig, create_method
from securevfl.methods.easter import drop_schedule
from securevfl.privacy.aggregation import AggregationConfig, aggregation_names, create_aggregation
from securevfl.privacy.aggregation import dh as dhmod
from securevfl.privacy.primitives.fixed_point import encode


def run_scheme(name: str, inputs: list[dict[str, np.ndarray]], drops: dict[int, set[str]] | None = None,
               passives: tuple[str, ...] = PASSIVES, transport=None, **config):
    """Run ``len(inputs)`` aggregation rounds of scheme ``name`` through the threaded runtime."""
    return run_rounds(create_aggregation(name, AggregationConfig(**config)), inputs, drops, passives, transport)


# -- the aggregation step ---------------------------------------------------------------------------


def test_registry_lists_schemes_and_rejects_unknown_names():
    assert {"none", "dh", "pairwise"} <= set(aggregation_names())
    with pytest.raises(ConfigError, match="choose one of"):
        create_aggregation("rot13")
    assert AggregationConfig(key_agreement="ffdh").key_agreement == "ffdh2048"
    with pytest.raises(ConfigError, match="valid names"):
        AggregationConfig(key_agreement="rsa")


@pytest.mark.parametrize("name", ["none", "dh", "pairwise"])
def test_schemes_return_the_exact_sum(name):
    inputs = random_inputs(3, (5, 4))
    (results, stats), _ = run_scheme(name, inputs)
    for r, res in enumerate(results):
        expected = sum(inputs[r][p] for p in PASSIVES)
        tol = 1e-5 if name == "none" else len(PASSIVES) * 2.0**-17
        assert np.max(np.abs(res.total - expected)) <= tol * (10 if name == "none" else 1)
        assert res.survivors == PASSIVES
    assert stats.rounds == 3


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(2, 5), rows=st.integers(1, 6), cols=st.integers(1, 5), frac_bits=st.integers(8, 24),
       seed=st.integers(0, 2**16))
def test_dh_sum_is_exact_within_fixed_point_resolution(n, rows, cols, frac_bits, seed):
    passives = tuple(f"q{i}" for i in range(n))
    inputs = random_inputs(2, (rows, cols), passives, seed)
    (results, _), _ = run_scheme("dh", inputs, passives=passives, frac_bits=frac_bits)
    for r, res in enumerate(results):
        expected = sum(inputs[r][p] for p in passives)
        assert np.max(np.abs(res.total - expected)) <= n * 2.0 ** -(frac_bits + 1)


def test_dh_recovers_the_sum_over_survivors_after_dropouts():
    inputs = random_inputs(6, (4, 3))
    drops = {1: {"p2"}, 2: {"p2"}, 4: {"p1"}}
    (results, stats), meters = run_scheme("dh", inputs, drops)
    for r, res in enumerate(results):
        assert set(res.dropped) == drops.get(r, set())
        expected = sum(inputs[r][p] for p in res.survivors)
        assert np.max(np.abs(res.total - expected)) <= 3 * 2.0**-17
    assert stats.dropouts == 3 and stats.recovered_rounds == 3
    assert stats.recovery_bytes > 0
    assert meters["A"].snapshot().crypto_s["secagg.recover"] > 0


def test_pairwise_refuses_dropouts_and_dh_needs_two_passives():
    scheme = create_aggregation("pairwise")
    assert scheme.max_dropouts(3) == 0
    assert create_aggregation("dh").max_dropouts(3) == 1
    with pytest.raises(ConfigError, match="at least 2 passive"):
        create_aggregation("dh").validate(1)
    with pytest.raises(PartyFailure):
        run_scheme("pairwise", random_inputs(2, (2, 2)), {0: {"p1"}})


def _masked_inputs(transport: RecordingTransport, tag: str) -> list[tuple[str, np.ndarray]]:
    out = []
    for env in transport.received_by("A"):
        if env.tag == tag:
            value = codec.decode(env.payload)
            out.append((env.src, value["masked"] if isinstance(value, dict) else value))
    return out


def _arrays_in(value):
    if isinstance(value, np.ndarray):
        yield value
    elif isinstance(value, torch.Tensor):
        yield value.numpy()
    elif isinstance(value, dict):
        for v in value.values():
            yield from _arrays_in(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _arrays_in(v)


def leaked_inputs(transport: RecordingTransport, inputs, frac_bits: int = 16) -> int:
    """How many (round, party) inputs appear in clear — as floats or as ring encodings — in any
    message the active party received."""
    arrays = [a for env in transport.received_by("A") for a in _arrays_in(codec.decode(env.payload))]
    leaks = 0
    for values in inputs:
        for x in values.values():
            ring = encode(x, frac_bits)
            for a in arrays:
                if a.shape != x.shape:
                    continue
                same = np.isclose(a.astype(np.float64), x, atol=1e-4) if a.dtype != np.uint64 else a == ring
                if same.mean() > 0.5:
                    leaks += 1
                    break
    return leaks


@pytest.mark.parametrize("name", ["dh", "pairwise"])
def test_active_party_never_receives_an_unblinded_input(name):
    inputs = random_inputs(3, (8, 8))
    transport = RecordingTransport(["A", *PASSIVES])
    run_scheme(name, inputs, transport=transport)
    assert leaked_inputs(transport, inputs) == 0


def test_the_leak_check_can_fail_on_plaintext():
    inputs = random_inputs(3, (8, 8))
    transport = RecordingTransport(["A", *PASSIVES])
    run_scheme("none", inputs, transport=transport)
    assert leaked_inputs(transport, inputs) == len(inputs) * len(PASSIVES)


def test_blinded_input_is_uniform_on_the_ring_and_masks_change_per_round():
    same = np.full((128, 128), 0.25)  # the same embedding in both rounds
    inputs = [{p: same for p in PASSIVES}, {p: same for p in PASSIVES}]
    transport = RecordingTransport(["A", *PASSIVES])
    run_scheme("dh", inputs, transport=transport)
    masked = [m for src, m in _masked_inputs(transport, "agg.dh.input") if src == "p1"]
    assert len(masked) == 2
    top_bytes = (masked[0] >> np.uint64(56)).astype(np.int64).ravel()
    counts = np.bincount(top_bytes, minlength=256)
    assert chisquare(counts).pvalue > 1e-4
    # a constant input without masks would put every element in one bin:
    assert chisquare(np.bincount((encode(same) >> np.uint64(56)).astype(np.int64).ravel(),
                                 minlength=256)).pvalue < 1e-10
    assert np.mean(masked[0] == masked[1]) < 1e-3  # fresh masks every round


def test_crypto_time_is_reported_under_secagg_keys():
    _, meters = run_scheme("dh", random_inputs(2, (3, 3)))
    keys = set()
    for m in meters.values():
        keys |= set(m.snapshot().crypto_s)
    assert {"secagg.mask", "secagg.unmask", "secagg.keygen"} <= keys
    assert all(k.startswith("secagg.") for k in keys)


def test_drop_schedule_is_seeded_and_capped():
    a = [drop_schedule(PASSIVES, 0.5, 1, 0, b, 1) for b in range(50)]
    assert a == [drop_schedule(PASSIVES, 0.5, 1, 0, b, 1) for b in range(50)]
    assert all(len(s) <= 1 for s in a) and any(a)
    assert drop_schedule(PASSIVES, 0.0, 1, 0, 0, 3) == frozenset()


# -- EASTER end to end ------------------------------------------------------------------------------

EPOCHS = 3


def _train(secagg: str, **options):
    return securevfl.train("easter", "breast-cancer", parties=4, epochs=EPOCHS, batch_size=64, device="cpu",
                           alignment="plaintext", options={"secagg": secagg, "embedding_size": 32, **options})


@pytest.fixture(scope="module")
def reports():
    return {s: _train(s) for s in ("none", "dh")}


def test_easter_trains_one_model_per_party_and_reports_their_mean(reports):
    report = reports["dh"]
    per_party = report.metrics["per_party"]
    assert set(per_party) == {"active", "passive1", "passive2", "passive3"}
    mean_acc = np.mean([m["accuracy"] for m in per_party.values()])
    assert report.metrics["accuracy"] == pytest.approx(mean_acc)
    assert report.extra["mean_party_metrics"]["accuracy"] == pytest.approx(mean_acc)
    assert len(set(report.extra["architectures"].values())) == 4  # heterogeneous
    assert mean_acc > 0.8  # breast-cancer is easy; chance is ~0.63
    assert any(k.startswith("secagg.") for k in report.cost["crypto_s"])


def test_easter_dh_training_matches_plaintext_aggregation(reports):
    none = [h["train_loss"] for h in reports["none"].history]
    dh = [h["train_loss"] for h in reports["dh"].history]
    assert len(dh) == EPOCHS
    np.testing.assert_allclose(dh, none, atol=2e-3)
    assert not any(k.startswith("secagg.") for k in reports["none"].cost["crypto_s"])


def _scenario(dataset: str = "breast-cancer", parties: int = 4):
    return build_scenario(RunConfig(dataset=dataset, partition=PartitionSpec(parties=parties),
                                    alignment="plaintext"))


def _run_easter(secagg: str, scenario, transport=None, epochs: int = 1, **options):
    config = TrainConfig(epochs=epochs, batch_size=64, seed=3,
                         options={"secagg": secagg, "embedding_size": 16, **options})
    method = create_method("easter", config)
    names = list(scenario.tables)
    return run_parties(method.roles(scenario), active=scenario.active,
                       transport=transport or RecordingTransport(names))


def _global_embeddings(transport) -> list[np.ndarray]:
    return [codec.decode(e.payload)["E"].numpy() for e in transport.envelopes
            if e.tag == "easter.train.global" and e.dst == "passive1"]


def test_global_embedding_equals_plaintext_mean_within_resolution():
    scenario = _scenario()
    names = list(scenario.tables)
    t_none, t_dh = RecordingTransport(names), RecordingTransport(names)
    _run_easter("none", scenario, t_none)
    _run_easter("dh", scenario, t_dh, frac_bits=16)
    first_none, first_dh = _global_embeddings(t_none)[0], _global_embeddings(t_dh)[0]
    # Same seed, same first batch, same initial models: E differs only by fixed-point rounding.
    assert np.max(np.abs(first_none - first_dh)) <= 2.0**-16


def test_easter_messages_to_the_active_party_hide_passive_embeddings(monkeypatch):
    seen: list[dict[str, np.ndarray]] = []
    lock = threading.Lock()
    original = dhmod.DHPassive.contribute

    def spy(self, ctx, values):
        with lock:
            seen.append({ctx.name: np.array(values)})
        return original(self, ctx, values)

    monkeypatch.setattr(dhmod.DHPassive, "contribute", spy)
    scenario = _scenario()
    transport = RecordingTransport(list(scenario.tables))
    _run_easter("dh", scenario, transport)
    assert len(seen) > 10
    assert leaked_inputs(transport, seen) == 0


def test_easter_survives_dropouts_and_counts_recovery():
    report = securevfl.train("easter", "breast-cancer", parties=4, epochs=2, batch_size=32, device="cpu",
                             alignment="plaintext",
                             options={"secagg": "dh", "drop_prob": 0.2, "embedding_size": 16})
    stats = report.extra["secagg_stats"]
    assert stats["dropouts"] > 0 and stats["recovered_rounds"] > 0
    assert stats["recovery_bytes"] > 0
    assert report.cost["crypto_s"]["secagg.recover"] > 0
    assert report.metrics["accuracy"] > 0.6


def test_easter_rejects_dropouts_without_recovery_and_bad_options():
    with pytest.raises(ConfigError, match="cannot recover"):
        create_method("easter", TrainConfig(options={"secagg": "pairwise", "drop_prob": 0.1})).roles(_scenario())
    with pytest.raises(ConfigError, match="secagg must be"):
        create_method("easter", TrainConfig(options={"secagg": "rot13"}))
    with pytest.raises(ConfigError, match="models must be"):
        create_method("easter", TrainConfig(options={"models": "mixed"}))
    with pytest.raises(ConfigError, match="at least 2 passive"):
        create_method("easter", TrainConfig(options={"secagg": "dh"})).roles(_scenario(parties=2))


def test_easter_embed_grad_all_sums_every_loss_gradient_securely():
    report = _train("dh", embed_grad="all")
    assert report.metrics["accuracy"] > 0.8
    # two aggregation rounds per batch (embeddings, then dL/dE), plus the test round
    n_batches = -(-report.parties["active"]["aligned"] * 4 // 5 // 64)
    assert report.extra["secagg_stats"]["rounds"] >= 2 * EPOCHS * (n_batches - 1)
    with pytest.raises(ConfigError, match="embed_grad must be"):
        create_method("easter", TrainConfig(options={"embed_grad": "both"}))


def test_easter_runs_with_the_papers_pairwise_blinding():
    scenario = _scenario()
    transport = RecordingTransport(list(scenario.tables))
    result = _run_easter("pairwise", scenario, transport)
    outcome = result.results[scenario.active]
    assert outcome.extra["secagg"] == "pairwise" and outcome.extra["secagg_stats"]["rounds"] > 1
    assert {e.tag for e in transport.envelopes} >= {"agg.pw.input", "easter.train.global", "easter.train.logits"}

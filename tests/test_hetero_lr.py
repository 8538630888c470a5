"""hetero-lr: accuracy vs scikit-learn, equality with the plaintext Taylor updates, what each party sees."""

import json
import struct
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.linear_model import LogisticRegression

from securevfl.api import RunConfig, build_scenario
from securevfl.cli import main
from securevfl.data import PartitionSpec
from securevfl.errors import ConfigError, PartyFailure, ProtocolError
from securevfl.federation import codec
from securevfl.federation.runtime import RunResult, run_parties
from securevfl.federation.transport import Envelope, InProcessTransport
from securevfl.methods import TrainConfig, create_method
from securevfl.methods.base import batch_plan, n_batches
from securevfl.methods.hetero_lr import (
    ARBITER,
    ENC_SCORE,
    MASKED_GRADIENT,
    TEST_SCORE,
    UNMASKED,
)
from securevfl.methods.hetero_lr.reference import taylor_lr_reference
from securevfl.privacy.paillier import EncryptedTensor, create_backend
from securevfl.privacy.paillier.ring_masks import add_ring_masks, draw_ring_masks, remove_ring_masks

TEST_KEY = {"key_bits": 1024, "insecure_allow_small_key": True}
EPOCHS, BATCH = 5, 64
# The run seed (partition and batch order): the project default. The Taylor loss's fixed point is a
# least-squares fit, not the logistic one, so hetero-lr trails scikit-learn's LR on some splits: with
# these settings the gap (identical in plaintext, see test_weights_equal_plaintext_taylor_updates) was
# 2.6, 3.5, 0.9, 0.9, 0.0, 0.0 points for seeds 0..5. The "within 1 point" therefore does not
# hold on every split; benchmarks/hetero_lr.py reports the gap per seed, and this test does not pick
# a seed where it happens to hold.
SEED = 0


class RecordingTransport(InProcessTransport):
    """Keeps every envelope that crosses any link."""

    def __init__(self, parties):
        super().__init__(parties)
        self.log: list[Envelope] = []

    def send(self, envelope):
        self.log.append(envelope)
        super().send(envelope)


@dataclass
class Run:
    scenario: object
    result: RunResult
    log: list
    keypair: tuple
    trace: list
    reference: object

    @property
    def outcome(self):
        return self.result.results[self.scenario.active]

    def blocks(self, split="X_train"):
        sc = self.scenario
        return [getattr(sc.party_data(p), split) for p in (sc.active, *sc.passives)]


def federated_run(parties, keypair, epochs=EPOCHS, batch_size=BATCH, **options):
    train = TrainConfig(epochs=epochs, batch_size=batch_size, seed=SEED, options={**TEST_KEY, **options})
    config = RunConfig(method="hetero-lr", dataset="breast-cancer", partition=PartitionSpec(parties=parties, seed=SEED),
                       train=train, alignment="plaintext")
    scenario = build_scenario(config)
    method = create_method("hetero-lr", train)
    method.keypair = keypair
    roles = method.roles(scenario)
    transport = RecordingTransport(list(roles))
    result = run_parties(roles, active=scenario.active, passives=scenario.passives, transport=transport)
    trace = []
    blocks = [scenario.party_data(p).X_train for p in (scenario.active, *scenario.passives)]
    reference = taylor_lr_reference(blocks, scenario.party_data(scenario.active).y_train, epochs=epochs,
                                    batch_size=batch_size, seed=SEED, trace=trace)
    return Run(scenario, result, transport.log, keypair, trace, reference)


@pytest.fixture(scope="module")
def run2(keypair):
    return federated_run(2, keypair)


@pytest.fixture(scope="module")
def run3(keypair):
    return federated_run(3, keypair)


@pytest.fixture(params=[2, 3], ids=["2-parties", "3-parties"])
def run(request, run2, run3):
    return {2: run2, 3: run3}[request.param]


def test_accuracy_close_to_sklearn(run):
    # Centralised plaintext logistic regression on the same (per-party standardised) features.
    y_train = run.scenario.party_data(run.scenario.active).y_train
    y_test = run.outcome.y_true
    sk = LogisticRegression(max_iter=1000).fit(np.hstack(run.blocks()), y_train).score(np.hstack(run.blocks("X_test")),
                                                                                         y_test)
    acc = float(np.mean(run.outcome.scores.argmax(axis=1) == y_test))
    # A linear model on breast-cancer should clear 94%; the Taylor approximation costs at most a
    # few test rows against the exact logistic fit (see SEED's comment for the measured gaps).
    assert acc > 0.94
    assert acc >= sk - 0.05


def test_two_and_three_parties_learn_the_same_model(run2, run3):
    # Per-party standardisation is column-wise, so the centralised model is the same however the
    # columns are split; the federated runs must agree on the test scores.
    np.testing.assert_allclose(run2.outcome.scores, run3.outcome.scores, atol=1e-6)


def test_weights_equal_plaintext_taylor_updates(run):
    sc = run.scenario
    active_weights = np.array(run.outcome.extra["hetero_lr"]["active_weights"])
    np.testing.assert_allclose(active_weights, run.reference.weights[0], atol=1e-7)
    for i, passive in enumerate(sc.passives, start=1):
        np.testing.assert_allclose(run.result.results[passive], run.reference.weights[i], atol=1e-7)
    # Guard against a vacuous comparison: the weights moved away from zero.
    assert np.abs(active_weights).max() > 0.1


def test_taylor_loss_monitored_for_two_parties_only(run2, run3):
    losses = [h["train_loss"] for h in run2.outcome.history]
    np.testing.assert_allclose(losses, run2.reference.taylor_loss, rtol=1e-7)
    assert losses[-1] < losses[0] < np.log(2) + 1e-9
    assert all("train_loss" not in h for h in run3.outcome.history)
    assert len(run3.outcome.history) == EPOCHS


def test_no_plaintext_partial_scores_reach_the_active_party(run):
    sc, (_, sk) = run.scenario, run.keypair
    holder = create_backend("fast", sk.public_key, sk)
    for index, passive in enumerate(sc.passives, start=1):
        to_active = [e for e in run.log if e.src == passive and e.dst == sc.active]
        training = [e for e in to_active if e.tag != TEST_SCORE]
        assert {e.tag for e in training} == {ENC_SCORE}
        assert len(training) == len(run.trace)
        per_epoch = len(run.trace) // EPOCHS
        for batch, (envelope, step) in enumerate(zip(training, run.trace, strict=True)):
            message = codec.decode(envelope.payload)
            assert set(message) == {"score", "square"}
            assert all(v is None or isinstance(v, bytes) for v in message.values())  # no arrays, no floats
            if per_epoch <= batch < len(run.trace) - per_epoch:
                continue  # decrypt the first and last epoch only (decryption is the slow part)
            score = EncryptedTensor.from_bytes(message["score"], holder)
            u = holder.decrypt(score)
            # The ciphertext does carry this passive party's u_k (so the check below is not vacuous) ...
            np.testing.assert_allclose(u, step["u"][index], atol=1e-6)
            # ... but neither its float nor its fixed-point encoding appears in the bytes sent.
            # (float32: two neighbouring values, 8 bytes; one value's 4 bytes turn up in random ciphertext bytes
            # about once in a hundred runs: a flaky check.)
            for first, second in zip(u[:-1], u[1:]):
                assert struct.pack("<ff", first, second) not in envelope.payload
            for value in u[np.abs(u) > 1e-3]:
                assert struct.pack("<d", value) not in envelope.payload
                # The fixed-point value as a 64-bit integer, either byte order and sign. (Its minimal-length
                # form is often 2-3 bytes, which random ciphertext bytes contain by chance: a flaky check.)
                fixed = round(value * 2**score.scale_bits)
                for order in ("big", "little"):
                    for word in (fixed, abs(fixed)):
                        assert word.to_bytes(8, order, signed=True) not in envelope.payload
        # Only the FATE-style inference message carries plaintext: the test-set partial scores.
        assert [e.tag for e in to_active if e.tag == TEST_SCORE] == [TEST_SCORE]


def test_arbiter_sees_masked_gradients_only(run):
    sc, (_, sk) = run.scenario, run.keypair
    n = sk.public_key.n
    parties = (sc.active, *sc.passives)
    for index, party in enumerate(parties):
        sent = [e for e in run.log if e.src == party and e.dst == ARBITER]
        assert {e.tag for e in sent} <= {MASKED_GRADIENT, "hetero-lr.train.masked_loss"}
        back = [codec.decode(e.payload) for e in run.log if e.src == ARBITER and e.dst == party and e.tag == UNMASKED]
        assert len(back) == len(sent)  # one reply per request, in order
        pairs = [(residues, e.tag) for residues, e in zip(back, sent, strict=True)]
        for residues, _ in pairs:  # gradients and (at the active party) the epoch's loss alike
            # A true value (|v| < 2^30) at <= 64 fractional bits encodes below 2^94 or above n - 2^94;
            # the arbiter's residues are spread over all of Z_n.
            assert all(2**100 < r < n - 2**100 for r in residues)
        gradients = [residues for residues, tag in pairs if tag == MASKED_GRADIENT]
        assert len(gradients) == len(run.trace)
        for residues, step in zip(gradients, run.trace, strict=True):
            true = step["grad"][index]
            assert len(residues) == len(true)
            encoded_true = [round(g * 2**64) % n for g in true]
            assert all(r != t for r, t in zip(residues, encoded_true, strict=True))


def test_phe_backend_gives_the_same_model(keypair):
    # One full batch keeps python-paillier's full-length r^n encryptions affordable.
    run = federated_run(2, keypair, epochs=1, batch_size=1000, backend="phe", monitor_loss=False)
    assert run.outcome.history == [{"epoch": 1.0}]
    np.testing.assert_allclose(run.outcome.extra["hetero_lr"]["active_weights"], run.reference.weights[0], atol=1e-7)
    np.testing.assert_allclose(run.result.results[run.scenario.passives[0]], run.reference.weights[1], atol=1e-7)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=6), st.integers(0, 2**64))
def test_ring_masks_round_trip(keypair, values, seed):
    pk, sk = keypair
    backend = create_backend("fast", pk, sk)
    rng = np.random.default_rng(seed)  # deterministic stand-in for secrets.randbelow, tests only
    masks = draw_ring_masks(pk.n, len(values), lambda bound: int(rng.integers(0, 2**62)) * 2**900 % bound)
    assert all(0 <= m < pk.n for m in masks)
    tensor = backend.encrypt(np.array(values), frac_bits=32)
    masked = add_ring_masks(tensor, masks).rerandomize()
    residues = backend.decrypt_raw(masked.ciphertexts.ravel().tolist())
    np.testing.assert_allclose(remove_ring_masks(residues, masks, pk.n, 32), values, atol=2**-31)


def test_masks_come_from_secrets_by_default(keypair):
    n = keypair[0].n
    a, b = draw_ring_masks(n, 4), draw_ring_masks(n, 4)
    assert a != b and all(0 <= m < n for m in a + b)
    assert max(a).bit_length() > n.bit_length() - 64


@pytest.mark.parametrize("train, message", [
    (TrainConfig(options={"key_bits": 1024}), r"key_bits must be one of \(2048, 3072\)$"),  # no test-only hint
    (TrainConfig(options={"backend": "gpu"}), "backend must be"),
    (TrainConfig(options={"lr": 0}), "lr must be"),
    (TrainConfig(lr=0.1), "option lr"),
])
def test_invalid_configs_are_refused(train, message):
    with pytest.raises(ConfigError, match=message):
        create_method("hetero-lr", train)


def test_batches_a_party_could_solve_for_are_refused_or_merged():
    scenario = build_scenario(RunConfig(partition=PartitionSpec(parties=2, seed=0), alignment="plaintext"))
    widest = max(scenario.party_data(p).n_features for p in scenario.parties) + 1  # + the intercept
    with pytest.raises(ConfigError, match="solve"):
        create_method("hetero-lr", TrainConfig(batch_size=widest, options=TEST_KEY)).roles(scenario)
    n = len(scenario.party_data(scenario.active).X_train)
    batches = list(batch_plan(n, 64, 0, 0, min_rows=widest + 1, short="merge"))
    assert n % 64 < widest + 1 and len(batches) == n // 64  # the short tail was merged
    assert min(len(b) for b in batches) > widest
    assert sorted(np.concatenate(batches).tolist()) == list(range(n))
    assert n_batches(n, 64, min_rows=widest + 1, short="merge") == len(batches)
    merged = list(batch_plan(n, 64, 0, 0, min_rows=2, short="merge"))
    assert n_batches(n, 64, min_rows=2, short="merge") == len(merged) == n // 64 + 1


def test_a_key_of_another_size_than_agreed_is_refused(keypair):
    train = TrainConfig(epochs=1, batch_size=128, options={**TEST_KEY, "key_bits": 2048})
    scenario = build_scenario(RunConfig(partition=PartitionSpec(parties=2, seed=0), alignment="plaintext"))
    method = create_method("hetero-lr", train)
    method.keypair = keypair  # a 1024-bit key where 2048 bits were agreed
    with pytest.raises(PartyFailure) as failure:
        run_parties(method.roles(scenario), active=scenario.active)
    assert isinstance(failure.value.cause, ProtocolError) and "agreed" in str(failure.value.cause)


def test_multiclass_and_reserved_names_are_refused():
    method = create_method("hetero-lr", TrainConfig(options=TEST_KEY))
    digits = build_scenario(RunConfig(dataset="digits", partition=PartitionSpec(parties=2), alignment="plaintext"))
    with pytest.raises(ConfigError, match="binary"):
        method.roles(digits)
    clash = build_scenario(RunConfig(partition=PartitionSpec(parties=2, party_names=("active", ARBITER)),
                                     alignment="plaintext"))
    with pytest.raises(ConfigError, match="reserved"):
        method.roles(clash)


def test_cli_run_reports_paillier_time_split(tmp_path):
    out = tmp_path / "hlr.json"
    rc = main(["train", "--method", "hetero-lr", "--dataset", "breast-cancer", "--parties", "3", "--epochs", "1",
               "--batch-size", "128", "--alignment", "plaintext", "--option", "key_bits=1024",
               "--option", "insecure_allow_small_key=true", "--option", "lr=0.3", "--quiet", "--report", str(out)])
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["metrics"]["accuracy"] > 0.85
    crypto = report["cost"]["crypto_s"]
    for primitive in ("encrypt", "decrypt", "add", "matmul", "mask", "rerandomize", "keygen"):
        assert crypto[f"paillier.{primitive}"] > 0
    links = report["cost"]["comm"]["bytes"]
    for link in ("passive1->active", "passive2->active", "active->passive1", "active->arbiter",
                 "passive1->arbiter", "arbiter->passive2"):
        assert links[link] > 0
    assert "passive1->passive2" not in links


def test_threat_model_a_deviating_passive_party_reads_the_labels(keypair, monkeypatch):
    """DOCUMENTS A KNOWN LIMIT, not a guarantee (docs/hetero_lr.md, "Threat model").

    hetero-lr is secure against semi-honest parties only (as Hardy et al. and FATE). A passive
    party that deviates sends the arbiter the encrypted residual [[e]] = [[z - 2y']] behind its own
    mask instead of its gradient; the arbiter cannot tell (closing this needs zero-knowledge proofs
    that the request is X_k^T [[e]]). It gets e in the clear, whose first batch (all weights 0, z = 0)
    is exactly -2y', and whose sign gives the labels while |z| < 2. If this test ever fails because
    the arbiter refuses the request, update the threat model in docs/hetero_lr.md.
    """
    import securevfl.methods.hetero_lr.sides as hl

    honest, stolen = hl.gradient, []

    def deviating(ctx, X_batch, residual, options, randbelow, scale):
        if ctx.is_active:
            return honest(ctx, X_batch, residual, options, randbelow, scale)
        stolen.append(hl.send_masked(ctx, MASKED_GRADIENT, residual, randbelow))  # [[e]], not X^T[[e]]
        return np.zeros(X_batch.shape[1])

    monkeypatch.setattr(hl, "gradient", deviating)
    run = federated_run(2, keypair, epochs=1)
    y = run.scenario.party_data(run.scenario.active).y_train
    X = run.scenario.party_data(run.scenario.active).X_train
    widths = [X.shape[1] + 1, run.scenario.party_data(run.scenario.passives[0]).X_train.shape[1]]
    batches = list(batch_plan(len(X), BATCH, SEED, 0, min_rows=max(widths) + 1, short="merge"))
    assert len(stolen) == len(batches)
    np.testing.assert_allclose(stolen[0], -2.0 * (2.0 * y[batches[0]] - 1.0), atol=1e-6)  # exact labels
    guessed = np.concatenate([(e < 0).astype(int) for e in stolen])
    truth = np.concatenate([y[idx] for idx in batches])
    assert np.mean(guessed == truth) > 0.9

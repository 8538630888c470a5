"""hetero-lr on every row of the active party (issue 44): a passive party's score left out where it lacks the row.

The organisation tables of tests/org_tables.py: the bank (active, 5 columns) holds every customer, the shop
(13 columns) and the clinic (12) about 70 % each. The federated run must equal the plaintext Taylor updates
on the joined table with each absent party's columns zeroed per row (plus one absent bias per passive party),
score every row with its ``parties``, and reproduce its test predictions from the saved model. Small (insecure,
tests only) 512-bit keys keep Paillier fast.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from org_tables import partial_tables, pattern_of, probabilities, rows_of, scored_held_out, who_holds

import securevfl
from securevfl.api import RunConfig, build_scenario
from securevfl.data import DatasetOptions
from securevfl.federation import codec
from securevfl.federation.runtime import run_parties
from securevfl.federation.transport import Envelope, InProcessTransport
from securevfl.methods import TrainConfig, create_method
from securevfl.methods.base import batch_plan
from securevfl.methods.hetero_lr import ARBITER, ENC_SCORE, MASKED_GRADIENT, RESIDUAL, TEST_SCORE, HeteroLR
from securevfl.methods.hetero_lr.reference import taylor_lr_reference
from securevfl.privacy.paillier import EncryptedTensor, create_backend, generate_keypair
from securevfl.privacy.paillier.keys import MIN_TEST_KEY_BITS

PARTIES = ("bank", "shop", "clinic")
SMALL_KEY = {"key_bits": MIN_TEST_KEY_BITS, "insecure_allow_small_key": True}
COMMON = {"id_column": "customer_id", "label_column": "churn", "device": "cpu", "seed": 0}


class RecordingTransport(InProcessTransport):
    """Keeps every envelope that crosses any link."""

    def __init__(self, parties):
        super().__init__(parties)
        self.log: list[Envelope] = []

    def send(self, envelope):
        self.log.append(envelope)
        super().send(envelope)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    return partial_tables(tmp_path_factory.mktemp("partial"))


@pytest.fixture(scope="module")
def key():
    return generate_keypair(MIN_TEST_KEY_BITS, insecure_allow_small_key=True)


@pytest.fixture(scope="module")
def trained(files, key, tmp_path_factory):
    """hetero-lr trained on every row of the bank (the default), its model saved."""
    model = tmp_path_factory.mktemp("model") / "heterolr"
    HeteroLR.keypair = key
    try:
        report = securevfl.train("hetero-lr", data_files={p: str(files[p]) for p in PARTIES}, epochs=3,
                                 batch_size=64, options=SMALL_KEY, model_dir=model, **COMMON)
    finally:
        HeteroLR.keypair = None
    return report, model




def federated(files, key, *, epochs, batch_size):
    """The scenario over every bank row, the run (its transport log kept) and its plaintext reference."""
    train = TrainConfig(epochs=epochs, batch_size=batch_size, seed=0, options=SMALL_KEY)
    config = RunConfig(method="hetero-lr", data_files={p: str(files[p]) for p in PARTIES}, train=train,
                       alignment="plaintext",
                       dataset_options=DatasetOptions(id_column="customer_id", label_column="churn"))
    scenario = build_scenario(config, cover=True)
    assert scenario.alignment.partial
    method = create_method("hetero-lr", train)
    method.keypair = key
    roles = method.roles(scenario)
    transport = RecordingTransport(list(roles))
    result = run_parties(roles, active=scenario.active, passives=scenario.passives, transport=transport)
    active = scenario.party_data(scenario.active)
    masks = [active.coverage.train[p] for p in scenario.passives]
    blocks = [active.X_train] + [_spread(scenario.party_data(p).X_train, m) for p, m in
                                 zip(scenario.passives, masks, strict=True)]
    reference = taylor_lr_reference(blocks, active.y_train, epochs=epochs, batch_size=batch_size, seed=0,
                                    present=masks, absent_bias=True)
    return scenario, result, transport.log, reference


def _spread(X, held):
    """A passive party's rows (those it holds, in the agreed order) at their agreed positions, zeros elsewhere."""
    full = np.zeros((len(held), X.shape[1]))
    full[held] = X
    return full


def test_every_row_is_trained_and_scored_with_the_parties_that_hold_it(files, trained):
    report, _ = trained
    holders = who_holds(files)
    ids = report.test_predictions["ids"]
    coverage = report.metrics["coverage"]
    patterns = [pattern_of(holders, i) for i in ids]
    assert {p: e["rows"] for p, e in coverage.items()} == {p: patterns.count(p) for p in set(patterns)}
    assert {"bank", "bank+shop", "bank+clinic", "bank+shop+clinic"} <= set(coverage)
    assert len(ids) > 0.2 * len(pd.read_csv(files["bank"])) - 2  # every held-out bank row, not the intersection
    assert report.metrics["accuracy"] > 0.9
    bias = report.extra["hetero_lr"]["absent_bias"]
    assert set(bias) == {"shop", "clinic"} and all(abs(v) > 0 for v in bias.values())


def test_scoring_the_held_out_rows_reproduces_the_test_predictions_on_every_pattern(files, trained, tmp_path):
    report, model = trained
    frame = scored_held_out(report, model, files, tmp_path / "held")
    holders = who_holds(files)
    assert frame.parties.tolist() == [pattern_of(holders, i) for i in frame.customer_id]
    assert (frame.parties != "+".join(PARTIES)).sum() > 10  # the oracle covers partial rows too


def test_every_row_of_the_active_file_is_scored_and_the_switch_keeps_the_intersection(files, trained, tmp_path):
    _, model = trained
    holders = who_holds(files)
    wanted = pd.read_csv(files["bank"]).customer_id.sample(120, random_state=0)
    new = rows_of(files, tmp_path / "new", wanted)
    frame = securevfl.predict(model, data=new, device="cpu")
    assert sorted(frame.customer_id) == sorted(wanted)
    assert frame.parties.tolist() == [pattern_of(holders, i) for i in frame.customer_id]
    only = securevfl.predict(model, data=new, require_all_parties=True, device="cpu")
    assert "parties" not in only.columns
    assert sorted(only.customer_id) == sorted(i for i in wanted if pattern_of(holders, i) == "+".join(PARTIES))
    both = frame.set_index("customer_id").loc[only.customer_id]
    np.testing.assert_allclose(probabilities(both), probabilities(only), atol=1e-6, rtol=0)


@pytest.fixture(scope="module")
def partial_run(files, key):
    """Small batches: a passive party often holds no more of a batch's rows than it has weights (no step then)."""
    return federated(files, key, epochs=2, batch_size=20)


def test_weights_equal_the_plaintext_updates_with_absent_parties_left_out(partial_run):
    scenario, result, _, reference = partial_run
    extra = result.results[scenario.active].extra["hetero_lr"]
    np.testing.assert_allclose(extra["active_weights"], reference.weights[0], atol=1e-7, rtol=0)
    np.testing.assert_allclose(list(extra["absent_bias"].values()), reference.absent, atol=1e-7, rtol=0)
    for i, passive in enumerate(scenario.passives, start=1):
        np.testing.assert_allclose(result.results[passive], reference.weights[i], atol=1e-7, rtol=0)
    assert np.abs(reference.absent).min() > 1e-3 and np.abs(reference.weights[1]).max() > 0.05
    # the test scores: the reference's logits with each absent party's part left out (and its bias in)
    active = scenario.party_data(scenario.active)
    masks = [active.coverage.test[p] for p in scenario.passives]
    blocks = [active.X_test] + [_spread(scenario.party_data(p).X_test, m) for p, m in
                                zip(scenario.passives, masks, strict=True)]
    logits = reference.logits(blocks, present=masks)
    np.testing.assert_allclose(result.results[scenario.active].scores[:, 1], 1 / (1 + np.exp(-logits)), atol=1e-7)


def test_a_passive_party_takes_no_step_on_a_batch_it_could_solve_for(partial_run):
    """Both cases occur at batch size 20: batches where the shop holds more rows than its 13 weights, and fewer."""
    scenario, _, _, _ = partial_run
    shop = scenario.party_data("shop")
    rows = scenario.party_data(scenario.active).positions("train")
    shares = [int(shop.coverage.train["shop"][idx].sum()) for epoch in range(2)
              for idx in batch_plan(rows, 20, 0, epoch, min_rows=14, short="merge")]
    assert min(shares) <= shop.n_features < max(shares)  # the equality above covers steps and skipped steps


def test_a_passive_party_receives_and_computes_over_its_own_rows_only(partial_run, key):
    scenario, _, log, _ = partial_run
    backend = create_backend("fast", *key)
    active = scenario.party_data(scenario.active)
    rows = active.positions("train")
    batches = [idx for epoch in range(2) for idx in batch_plan(rows, 20, 0, epoch, min_rows=14, short="merge")]
    for passive in scenario.passives:
        own = scenario.party_data(passive)
        assert len(own.X_train) == int(own.coverage.train[passive].sum()) < rows  # its rows only
        held = [int(own.coverage.train[passive][idx].sum()) for idx in batches]
        sent = [EncryptedTensor.from_bytes(codec.decode(e.payload)["score"], backend).shape[0]
                for e in log if e.src == passive and e.tag == ENC_SCORE]
        got = [EncryptedTensor.from_bytes(codec.decode(e.payload), backend).shape[0]
               for e in log if e.dst == passive and e.tag == RESIDUAL]
        assert sent == got == held and min(held) < 20
        test = [codec.decode(e.payload) for e in log if e.src == passive and e.tag == TEST_SCORE]
        assert len(test) == 1 and len(test[0]) == int(own.coverage.test[passive].sum()) < active.positions("test")
        # the arbiter sees one request of the party's weight count per batch, stepped or not
        requests = [EncryptedTensor.from_bytes(codec.decode(e.payload), backend).shape
                    for e in log if e.src == passive and e.dst == ARBITER and e.tag == MASKED_GRADIENT]
        assert requests == [(own.n_features,)] * len(batches)
    widths = {EncryptedTensor.from_bytes(codec.decode(e.payload), backend).shape
              for e in log if e.src == scenario.active and e.dst == ARBITER and e.tag == MASKED_GRADIENT}
    assert widths == {(active.n_features + 1 + len(scenario.passives),)}  # intercept, columns, absent biases


def test_every_row_deployed_with_the_arbiter_matches_one_process(files, tmp_path):
    """Three data parties and the arbiter (``data = false``) over loopback links, in threads, against one process:
    the same test metrics on every pattern; the deployed model scores every row with the same parties column."""
    from deployed_threads import in_threads, loopback_federation_file, run_parties_in_threads

    from securevfl.deploy.federation_file import load_federation
    from securevfl.pipeline.score import run_deployed_scoring

    job = ('method = "hetero-lr"\nepochs = 2\nbatch_size = 64\nseed = 0\n'
           'id_column = "customer_id"\nlabel_column = "churn"')
    path = loopback_federation_file(tmp_path, [*PARTIES, ARBITER], "bank", job,
                                    f"[job.options]\nkey_bits = {MIN_TEST_KEY_BITS}\ninsecure_allow_small_key = true")
    path.write_text(path.read_text().replace(f"[parties.{ARBITER}]\n", f"[parties.{ARBITER}]\ndata = false\n"))
    fed = load_federation(path)
    data = {p: str(files[p]) for p in PARTIES}
    results = run_parties_in_threads(fed, {**data, ARBITER: None}, model_dir=tmp_path / "model")
    local = securevfl.train("hetero-lr", data_files=data, epochs=2, batch_size=64, options=SMALL_KEY, **COMMON)
    report = results["bank"].report
    assert report.metrics["coverage"].keys() == local.metrics["coverage"].keys()
    assert report.metrics["accuracy"] == pytest.approx(local.metrics["accuracy"], abs=1e-9)
    for pattern, entry in local.metrics["coverage"].items():
        assert report.metrics["coverage"][pattern] == pytest.approx(entry, abs=1e-9), pattern
    holders = who_holds(files)
    new = rows_of(files, tmp_path / "new", pd.read_csv(files["bank"]).customer_id.sample(90, random_state=1))
    scored = in_threads(lambda p: run_deployed_scoring(fed, p, new.get(p), tmp_path / "model" if p in new else None,
                                                       exchange_rows=40, device="cpu"), tuple(fed.parties))
    frame = scored["bank"].predictions
    assert len(frame) == 90 and frame.parties.tolist() == [pattern_of(holders, i) for i in frame.customer_id]
    in_process = securevfl.predict(tmp_path / "model", data=new, device="cpu")
    both = in_process.set_index("customer_id").loc[frame.customer_id]
    np.testing.assert_allclose(probabilities(frame), probabilities(both), atol=1e-6, rtol=0)


def test_the_arbiter_sends_a_restarted_passive_party_the_sessions_public_key(key):
    """Serving takes a restarted passive party back (issue 44): the arbiter's ``rejoined`` resends the key of its
    session, the one it broadcast at set-up, to that party alone."""
    from securevfl.data import PartitionSpec
    from securevfl.methods.engine.loop import PartySide
    from securevfl.methods.hetero_lr.protocol import PUBLIC_KEY, HeteroLROptions
    from securevfl.methods.hetero_lr.scoring import ArbiterScorer, arbiter_data

    scenario = build_scenario(RunConfig(dataset="breast-cancer", alignment="plaintext",
                                        partition=PartitionSpec(parties=3)))
    method = create_method("hetero-lr", TrainConfig(options=SMALL_KEY))
    arbiter = ArbiterScorer(method, arbiter_data(scenario, ARBITER), HeteroLROptions(**SMALL_KEY), key)
    assert arbiter.takes_part and PartySide.rejoined is not ArbiterScorer.rejoined

    def arbiter_role(ctx):
        arbiter.build(ctx)
        arbiter.rejoined(ctx, "passive2")

    def receiver(count):
        def role(ctx):
            return [ctx.recv(ARBITER, PUBLIC_KEY) for _ in range(count)]
        return role

    roles = {"active": receiver(1), "passive1": receiver(1), "passive2": receiver(2), ARBITER: arbiter_role}
    result = run_parties(roles, active="active", passives=("passive1", "passive2"), scheduler="threads")
    first, again = result.results["passive2"]
    assert first == again == result.results["active"][0] == key[0].to_bytes()

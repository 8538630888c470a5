"""EASTER (and Agg-VFL) on every row of the active party (issue 44): masked zeros, K per row, own rows only.

The organisation tables of tests/org_tables.py: the bank (active, 5 columns) holds every customer, the shop
and the clinic about 70 % each. A passive party contributes a vector of the round's full size to the secure
sum (its embedding on the rows it holds that are summed, an exact zero elsewhere) and receives the global
embedding of those rows only; a row is summed only over enough passive parties to hide each contribution.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from org_tables import (
    organisation_frames,
    partial_tables,
    pattern_of,
    probabilities,
    rows_of,
    scored_held_out,
    summed_pattern,
    who_holds,
    write_tables,
)

import securevfl
from securevfl.api import RunConfig, build_scenario
from securevfl.attacks.tap import ChannelTap, tapped
from securevfl.data import DatasetOptions
from securevfl.data.scenario import Coverage, Scenario
from securevfl.errors import ProtocolError
from securevfl.federation.runtime import run_parties
from securevfl.methods import TrainConfig, create_method
from securevfl.methods.engine import peer_reveal
from securevfl.methods.engine.aggregate import OBSERVED_CONTRIBUTION, OBSERVED_SUM
from securevfl.methods.engine.loop import agreed_batches
from securevfl.privacy.aggregation.dh import TAG_INPUT
from securevfl.privacy.secagg import wire

PARTIES = ("bank", "shop", "clinic")
COMMON = {"id_column": "customer_id", "label_column": "churn", "device": "cpu", "seed": 0}
SMALL = {"embedding_size": 16}
#: A label-only bank and three passive parties (tools/golden.py's LABEL_ONLY with an insurer).
FOUR = {"bank": slice(0, 0), "shop": slice(0, 10), "clinic": slice(10, 20), "insurer": slice(20, 30)}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    return partial_tables(tmp_path_factory.mktemp("easter_partial"))


@pytest.fixture(scope="module")
def trained(files, tmp_path_factory):
    """EASTER (secagg=dh) trained on every row of the bank (the default), its model saved."""
    model = tmp_path_factory.mktemp("model") / "easter"
    report = securevfl.train("easter", data_files={p: str(files[p]) for p in PARTIES}, epochs=3, options=SMALL,
                             model_dir=model, **COMMON)
    return report, model




def _run(files, method="easter", parties=PARTIES, options=None, epochs=1, cover=True, taps=()):
    """A run in one process; ``taps``: parties whose received messages and observations are recorded."""
    train = TrainConfig(epochs=epochs, batch_size=64, seed=0, options={**SMALL, **(options or {})})
    config = RunConfig(method=method, data_files={p: str(files[p]) for p in parties}, train=train,
                       alignment="plaintext",
                       dataset_options=DatasetOptions(id_column="customer_id", label_column="churn"))
    scenario = build_scenario(config, cover=cover)
    roles = create_method(method, train).party_roles(scenario)
    kept = {p: ChannelTap(p) for p in taps}
    roles = {p: tapped(r, kept[p]) if p in kept else r for p, r in roles.items()}
    result = run_parties(roles, active=scenario.active, passives=scenario.passives)
    return scenario, result.results[scenario.active], kept


def test_every_row_is_trained_and_scored_with_the_parties_that_hold_it(files, trained, tmp_path):
    report, model = trained
    holders = who_holds(files)
    ids = report.test_predictions["ids"]
    patterns = [pattern_of(holders, i) for i in ids]
    coverage = report.metrics["coverage"]
    assert {p: e["rows"] for p, e in coverage.items()} == {p: patterns.count(p) for p in set(patterns)}
    assert {"bank", "bank+shop", "bank+clinic", "bank+shop+clinic"} <= set(coverage)
    assert report.metrics["accuracy"] > 0.85
    wanted = pd.read_csv(files["bank"]).customer_id.sample(120, random_state=0)
    new = rows_of(files, tmp_path / "new", wanted)
    frame = securevfl.predict(model, data=new, device="cpu")  # trained on every row: every row
    assert sorted(frame.customer_id) == sorted(wanted)
    # a row's parties: those whose parts were summed (one passive party's part alone never is)
    assert frame.parties.tolist() == [summed_pattern(holders, i) for i in frame.customer_id]
    only = securevfl.predict(model, data=new, require_all_parties=True, device="cpu")  # the intersection
    assert "parties" not in only.columns
    assert sorted(only.customer_id) == sorted(i for i in wanted if pattern_of(holders, i) == "+".join(PARTIES))
    both = frame.set_index("customer_id").loc[only.customer_id]
    np.testing.assert_allclose(probabilities(both), probabilities(only), atol=1e-6, rtol=0)


def test_scoring_the_held_out_rows_reproduces_the_test_predictions_on_every_pattern(files, trained, tmp_path):
    report, model = trained
    frame = scored_held_out(report, model, files, tmp_path / "held")
    assert (frame.parties != "+".join(PARTIES)).sum() > 10  # the oracle covers partial rows too


def test_a_passive_party_receives_the_global_embedding_of_its_summed_rows_only(files):
    """The shop is told which of its rows are summed (those the clinic holds too: one passive contributor would
    give its embedding away to the bank), then gets E of exactly those rows; every masked input is full size."""
    scenario, _, taps = _run(files, taps=("bank", "shop", "clinic"))
    bank = scenario.party_data("bank")
    shop_mask, clinic_mask = bank.coverage.train["shop"], bank.coverage.train["clinic"]
    config = TrainConfig(epochs=1, batch_size=64, seed=0)
    batches = list(agreed_batches(np.arange(len(shop_mask)), config, 0))
    shop = taps["shop"]
    told = shop.received("easter.train.rows")
    globals_ = shop.received("easter.train.global")
    assert len(told) == len(batches)
    summed = [clinic_mask[b][shop_mask[b]] for b in batches]
    for keep, expected in zip(told, summed, strict=True):
        np.testing.assert_array_equal(keep, expected)
    with_rows = [s for s in summed if s.any()]
    assert len(globals_) == len(with_rows) and len(with_rows) > 3
    assert [len(g["E"]) for g in globals_] == [int(s.sum()) for s in with_rows]
    assert any(not s.all() for s in summed)  # some rows of the shop are not summed: it holds them alone
    inputs = [wire.parse_input(v).masked for v in taps["bank"].received(TAG_INPUT)]
    sizes = [16 * len(b) for b in batches for _ in ("shop", "clinic")]
    assert [np.asarray(m).size for m in inputs[:len(sizes)]] == sizes  # full size, whoever holds the rows
    for masked in inputs[:len(sizes)]:
        assert np.mean(np.asarray(masked) == 0) < 0.01  # the masked zeros look like every other entry


def test_the_sum_the_active_party_learns_is_the_sum_of_the_contributions_present(files):
    scenario, _, taps = _run(files, taps=("bank", "shop", "clinic"))
    sums = [v for o in taps["bank"].observations if o.tag == OBSERVED_SUM for v in [o.value]]
    parts = {p: [o.value for o in taps[p].observations if o.tag == OBSERVED_CONTRIBUTION] for p in ("shop", "clinic")}
    assert len(sums) == len(parts["shop"]) == len(parts["clinic"]) > 3
    for total, shop, clinic in zip(sums, parts["shop"], parts["clinic"], strict=True):
        assert total.shape == shop.shape == clinic.shape
        np.testing.assert_allclose(total, shop + clinic, atol=1e-4, rtol=0)
        lone = (shop != 0).any(axis=1) ^ (clinic != 0).any(axis=1)
        assert not lone.any()  # a row one passive party alone contributes to would give its embedding away


def test_the_peer_reveal_rule_per_row_pattern():
    counts = np.array([0, 1, 2, 3, 4])
    np.testing.assert_array_equal(peer_reveal.summable_rows("dh", True, counts, False), [0, 0, 1, 1, 1])
    np.testing.assert_array_equal(peer_reveal.summable_rows("dh", False, counts, False), [0, 0, 0, 1, 1])
    assert peer_reveal.summable_rows("none", False, counts, False).all()  # no secure sum: nothing to hide
    assert peer_reveal.summable_rows("dh", False, counts, True).all()  # accepted with allow_peer_reveal
    peer_reveal.refuse_rows("easter", "dh", True, np.array([0, 2, 3]), False)  # nothing given away
    with pytest.raises(ProtocolError, match="1 rows of this round were summed over too few"):
        peer_reveal.refuse_rows("easter", "dh", False, np.array([0, 2, 3]), False)  # a real dropout left a pair


def test_a_label_only_active_party_sums_a_row_over_three_passive_parties_only(tmp_path):
    parties = tuple(FOUR)
    frames = organisation_frames(6, split=FOUR, keep=0.75)
    frames["bank"] = organisation_frames(6, split=FOUR, keep=1.0)["bank"]
    files = write_tables(frames, tmp_path)
    scenario, outcome, taps = _run(files, parties=parties, taps=("shop",))
    bank = scenario.party_data("bank")
    masks = bank.coverage.train
    batches = list(agreed_batches(np.arange(len(masks["shop"])), TrainConfig(epochs=1, batch_size=64, seed=0), 0))
    told = taps["shop"].received("easter.train.rows")
    for keep, b in zip(told, batches, strict=True):
        held = masks["shop"][b]
        np.testing.assert_array_equal(keep, (masks["clinic"][b] & masks["insurer"][b])[held])
    assert set(outcome.per_party) == {"shop", "clinic", "insurer"}  # no model at the label-only bank
    assert np.isfinite(outcome.scores).all() and len(outcome.scores) == len(bank.y_test)


def test_simulated_dropouts_still_drop_a_party_from_the_whole_round(tmp_path):
    parties = ("bank", "shop", "clinic", "insurer")
    split = {"bank": slice(0, 5), "shop": slice(5, 13), "clinic": slice(13, 21), "insurer": slice(21, 30)}
    frames = organisation_frames(7, split=split, keep=0.8)
    frames["bank"] = organisation_frames(7, split=split, keep=1.0)["bank"]
    files = write_tables(frames, tmp_path)
    _, outcome, _ = _run(files, parties=parties, options={"drop_prob": 0.3}, epochs=2)
    assert outcome.extra["secagg_stats"]["dropouts"] > 0
    assert np.isfinite(outcome.scores).all()


@pytest.mark.parametrize(("method", "options"), [("easter", {}), ("easter", {"embed_grad": "all"}),
                                                 ("aggvfl", {"secagg": "dh"})])
def test_the_masked_zero_path_with_every_row_held_equals_full_coverage(files, method, options, monkeypatch):
    """At full coverage the run is today's; the partial path, told every party holds every row, equals it."""
    full = write_tables(organisation_frames(5, keep=1.0), Path(files["bank"]).parent / "full")
    _, before, _ = _run(full, method=method, options=options, cover=False)

    def every_row(self: Scenario, name: str) -> Coverage:
        parties = self.passives if name == self.active else (name,)
        return Coverage({p: np.ones(len(self.train), bool) for p in parties},
                        {p: np.ones(len(self.test), bool) for p in parties})

    monkeypatch.setattr(Scenario, "_coverage", every_row)
    scenario, after, _ = _run(full, method=method, options=options, cover=False)
    assert scenario.party_data("shop").coverage is not None  # the partial path: told which rows are summed
    np.testing.assert_array_equal(after.scores, before.scores)
    assert after.history == before.history


def test_every_row_deployed_matches_one_process_and_scores_every_row(files, tmp_path):
    """EASTER (dh) deployed over loopback links in threads: the one-process test predictions on every pattern;
    the deployed model scores every row with its parties."""
    from deployed_threads import in_threads, loopback_federation, one_torch_thread, run_parties_in_threads

    from securevfl.pipeline.score import run_deployed_scoring

    job = ('method = "easter"\nepochs = 2\nbatch_size = 64\nseed = 0\nid_column = "customer_id"\n'
           'label_column = "churn"\n[job.options]\nembedding_size = 16')
    fed = loopback_federation(tmp_path, list(PARTIES), "bank", job)
    with one_torch_thread():
        results = run_parties_in_threads(fed, {p: str(files[p]) for p in PARTIES}, model_dir=tmp_path / "model")
        local = securevfl.train("easter", data_files={p: str(files[p]) for p in PARTIES}, epochs=2, batch_size=64,
                                options=SMALL, **COMMON)
    report = results["bank"].report
    assert report.metrics["coverage"].keys() == local.metrics["coverage"].keys()
    for pattern, entry in local.metrics["coverage"].items():
        assert report.metrics["coverage"][pattern] == pytest.approx(entry, abs=1e-9), pattern
    holders = who_holds(files)
    new = rows_of(files, tmp_path / "new", pd.read_csv(files["bank"]).customer_id.sample(90, random_state=1))
    scored = in_threads(lambda p: run_deployed_scoring(fed, p, new[p], tmp_path / "model", device="cpu",
                                                       exchange_rows=40), PARTIES)
    frame = scored["bank"].predictions
    assert len(frame) == 90 and frame.parties.tolist() == [summed_pattern(holders, i) for i in frame.customer_id]
    in_process = securevfl.predict(tmp_path / "model", data=new, device="cpu")
    both = in_process.set_index("customer_id").loc[frame.customer_id]
    np.testing.assert_allclose(probabilities(frame), probabilities(both), atol=1e-6, rtol=0)
    assert frame.parties.tolist() == both.parties.tolist()

"""LASER-VFL (``laser-vfl``): trains, scores every row with the parties that hold it, and samples its tasks right.

The partial-coverage tables are tests/test_coverage.py's: the bank (active) holds every customer, the shop
and the clinic about 70 % each.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from org_tables import partial_tables, pattern_of, rows_of, scored_held_out, who_holds

import securevfl
from securevfl.api import RunConfig, build_scenario
from securevfl.data import PartitionSpec
from securevfl.errors import ConfigError
from securevfl.methods import TrainConfig, create_method
from securevfl.methods.laservfl import LaserActive

PARTIES = ("bank", "shop", "clinic")
COMMON = {"id_column": "customer_id", "label_column": "churn", "device": "cpu", "seed": 0}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    return partial_tables(tmp_path_factory.mktemp("laser"))


@pytest.fixture(scope="module")
def trained(files, tmp_path_factory):
    """LASER-VFL trained on every row of the bank (``require_all_parties=False``), its model saved."""
    model = tmp_path_factory.mktemp("model") / "laser"
    report = securevfl.train("laser-vfl", data_files={p: str(files[p]) for p in PARTIES}, epochs=8,
                             require_all_parties=False, model_dir=model, **COMMON)
    return report, model



def test_laser_vfl_trains_and_beats_the_majority_class_on_full_coverage():
    report = securevfl.train("laser-vfl", dataset="breast-cancer", parties=3, epochs=10, device="cpu", seed=0)
    y = np.asarray(report.test_predictions["y_true"])
    majority = max(np.mean(y == c) for c in np.unique(y))
    assert report.metrics["accuracy"] > majority + 0.25
    assert report.metrics["auc"] > 0.97
    assert report.extra["laser_blocks"] == 3
    losses = [h["train_loss"] for h in report.history]
    assert losses[-1] < losses[0]


def test_trained_on_every_row_it_scores_every_row_with_the_parties_that_hold_it(files, trained, tmp_path):
    report, model = trained
    coverage = report.metrics["coverage"]
    assert {"bank", "bank+shop", "bank+clinic", "bank+shop+clinic"} <= set(coverage)
    assert coverage["bank+shop+clinic"]["accuracy"] > 0.85
    wanted = pd.read_csv(files["bank"]).customer_id.sample(120, random_state=0)
    new = rows_of(files, tmp_path / "new", wanted)
    frame = securevfl.predict(model, data=new, require_all_parties=False, device="cpu")
    assert sorted(frame.customer_id) == sorted(wanted)
    assert frame.parties.tolist() == [pattern_of(who_holds(files), i) for i in frame.customer_id]
    assert set(frame.parties) > {"bank+shop+clinic"}
    assert frame.proba_yes.between(0, 1).all()


def test_scoring_the_held_out_rows_reproduces_the_test_predictions_on_every_pattern(files, trained, tmp_path):
    report, model = trained
    frame = scored_held_out(report, model, files, tmp_path / "held")
    assert (frame.parties != "+".join(PARTIES)).sum() > 10  # the oracle covers partial rows too


def test_a_label_only_active_party_scores_rows_no_passive_party_holds_with_its_prior(files, tmp_path):
    bank = pd.read_csv(files["bank"])[["customer_id", "churn"]]
    label_only = {**files, "bank": tmp_path / "bank.csv"}
    bank.to_csv(label_only["bank"], index=False)
    model = tmp_path / "model"
    securevfl.train("laser-vfl", data_files={p: str(label_only[p]) for p in PARTIES}, epochs=2,
                    require_all_parties=False, model_dir=model, **COMMON)
    frame = securevfl.predict(model, data={p: str(label_only[p]) for p in PARTIES}, require_all_parties=False,
                              device="cpu")
    assert len(frame) == len(bank)
    nobody = frame[frame.parties == "bank"]
    assert len(nobody) > 5 and nobody.proba_yes.nunique() == 1  # one constant: the learned label prior
    rate = (bank.churn == "yes").mean()
    assert abs(nobody.proba_yes.iloc[0] - rate) < 0.25


def _active_side(parties: int = 3) -> LaserActive:
    scenario = build_scenario(RunConfig(dataset="breast-cancer", partition=PartitionSpec(parties=parties),
                                        alignment="plaintext"))
    roles = create_method("laser-vfl", TrainConfig(seed=0, embedding_dim=4, hidden=(8,))).roles(scenario)
    side = roles[scenario.active].side
    assert isinstance(side, LaserActive)
    side.name = scenario.active
    side.build(SimpleNamespace(device="cpu"))
    return side


def _exact_objective(side: LaserActive, parts: torch.Tensor, there: np.ndarray, y: torch.Tensor) -> float:
    """The paper's objective, every subset enumerated: per row, the mean over its heads of each subset's loss,
    summed over the subsets of its observed blocks (rows grouped by pattern, weighted by their share)."""
    total, rows = 0.0, parts.shape[1]
    for pattern in np.unique(there.T, axis=0):
        members = torch.as_tensor(np.flatnonzero((there.T == pattern).all(axis=1)))
        observed = np.flatnonzero(pattern)
        for size in range(1, len(observed) + 1):
            for subset in itertools.combinations(observed, size):
                chosen = torch.zeros(parts.shape[:2], dtype=torch.bool)
                chosen[list(subset)] = True
                combined = side.method.aggregate(parts[:, members], chosen[:, members])
                for k in subset:
                    loss = side.objective.loss(side._heads()[int(k)](combined), y[members])
                    total += len(members) / rows * float(loss) / size
    return total


def test_the_sampled_loss_is_an_unbiased_estimate_of_the_loss_over_every_subset_of_the_observed_blocks():
    """Task-sampling (one subset per head and size, weighted C(|O|-1, s-1)/s) averages to the loss over all
    subsets; it fails if the sampling is left out (only the full set) or the weights are wrong."""
    side = _active_side(parties=4)
    generator = torch.Generator().manual_seed(0)
    rows = 40
    parts = torch.randn((4, rows, 4), generator=generator) * 2
    there = np.ones((4, rows), dtype=bool)
    there[1, :15] = False  # three patterns: all four blocks, blocks 0,2,3, and blocks 0,3
    there[2, 5:15] = False
    y = side.y[:rows]
    with torch.no_grad():
        exact = _exact_objective(side, parts, there, y)
    with torch.no_grad():
        draws = [float(side.task_loss(parts, there, y)) for _ in range(1500)]
    assert np.mean(draws) == pytest.approx(exact, rel=0.01)
    assert np.std(draws) > 1e-3  # subsets are sampled: the draws differ
    full = np.ones_like(there)
    with torch.no_grad():
        alone = float(side.task_loss(parts, full, y))
    assert alone != pytest.approx(exact, rel=0.01)  # another pattern, another objective


def test_the_heads_learn_from_batches_where_blocks_are_left_out():
    """Each head receives gradient from its own block alone (the size-1 subsets) even where every block is there."""
    side = _active_side(parties=3)
    rows = 32
    parts = torch.randn((3, rows, 4), generator=torch.Generator().manual_seed(1)).requires_grad_(True)
    there = np.ones((3, rows), dtype=bool)
    heads = side._heads()
    # a size-1 subset of head k sees block k alone: the mean equals that block's representation
    captured: list[torch.Tensor] = []
    hook = heads[1].register_forward_hook(lambda m, i, o: captured.append(i[0].detach()))
    side.task_loss(parts, there, side.y[:rows])
    hook.remove()
    assert len(captured) == 3  # one subset per size 1..3
    assert torch.allclose(captured[0], parts[1].detach())  # size 1: block 1 alone
    pairs = [parts[[1, j]].mean(0).detach() for j in (0, 2)]
    assert any(torch.allclose(captured[1], pair) for pair in pairs)  # size 2: block 1 and one other
    assert torch.allclose(captured[2], parts.mean(0).detach())  # size 3: every block


def test_the_options_are_checked_and_listed(capsys):
    from securevfl.cli import main

    with pytest.raises(ConfigError, match="aggregation must be one of mean, sum"):
        create_method("laser-vfl", TrainConfig(options={"aggregation": "max"}))
    assert main(["methods", "laser-vfl"]) == 0
    out = capsys.readouterr().out
    assert "aggregation" in out and "cut_activation" in out

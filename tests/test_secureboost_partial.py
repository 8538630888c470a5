"""secureboost on every row of the active party (issue 44): rows a passive party does not hold.

A row a passive party does not hold is, at that party's splits, a row whose every feature of that
party is missing: it follows a default direction the active party learns (XGBoost's sparsity-aware
split finding, with the sums of such rows known to the active party in the clear). So on a joined
table where a party's rows it does not hold are NaN in its columns, XGBoost ``hist`` grows the same
trees. Small runs: a few trees on breast cancer, 512-bit keys (insecure, tests only).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import xgboost as xgb
from org_tables import partial_tables, pattern_of, probabilities, rows_of, who_holds
from sklearn.metrics import roc_auc_score

import securevfl
from securevfl.data import DatasetOptions, PartitionSpec, load_dataset, partition
from securevfl.data.scenario import Scenario, align_plaintext, align_plaintext_covering, scenario_from_partition
from securevfl.federation.runtime import run_parties
from securevfl.methods import TrainConfig, create_method
from securevfl.methods.secureboost import protocol
from securevfl.methods.secureboost.binning import fit_bins
from securevfl.methods.secureboost.objective import BoostObjective
from securevfl.methods.secureboost.tree import TreeArrays
from securevfl.privacy.paillier import generate_keypair

SMALL_KEY = {"key_bits": 512, "insecure_allow_small_key": True}  # insecure, tests only
PARTIES = ("bank", "shop", "clinic")
COMMON = {"id_column": "customer_id", "label_column": "churn", "device": "cpu", "seed": 0}


@pytest.fixture(scope="module")
def small_keypair() -> Any:
    return generate_keypair(512, insecure_allow_small_key=True)


_scenarios: dict[tuple[float, str], Scenario] = {}


def scenario(p: float, aligner: str = "covering") -> Scenario:
    """Breast cancer over 3 parties; each passive party keeps each row with probability ``p`` (its own draw)."""
    key = (p, aligner)
    if key not in _scenarios:
        data = partition(load_dataset("breast-cancer", DatasetOptions(seed=0)), PartitionSpec(parties=3, seed=0))
        rng = np.random.default_rng(1)
        tables = {}
        for name, table in data.tables.items():
            keep = np.ones(len(table.ids), dtype=bool) if name == data.active else rng.random(len(table.ids)) < p
            features = table.features[keep] if isinstance(table.features, np.ndarray) \
                else table.features[keep].reset_index(drop=True)
            tables[name] = replace(table, ids=table.ids[keep], features=features,
                                   labels=None if table.labels is None else table.labels[keep])
        aligned = align_plaintext_covering if aligner == "covering" else align_plaintext
        _scenarios[key] = scenario_from_partition(replace(data, tables=tables), aligned)
    return _scenarios[key]


class Tap:
    """Logs every message a party's role receives."""

    def __init__(self) -> None:
        self.received: list[tuple[str, Any]] = []

    def wrap(self, role: Any) -> Any:
        tap = self

        class Ctx:
            def __init__(self, ctx: Any) -> None:
                self.__dict__["_ctx"] = ctx

            def __getattr__(self, name: str) -> Any:
                return getattr(self._ctx, name)

            def __setattr__(self, name: str, value: Any) -> None:
                setattr(self._ctx, name, value)

            def recv(self, src: str, tag: str) -> Any:
                value = self._ctx.recv(src, tag)
                tap.received.append((tag, value))
                return value

        return lambda ctx: role(Ctx(ctx))


def run(sc: Scenario, keypair: Any = None, taps: dict[str, Tap] | None = None, **options: Any) -> tuple[Any, Any]:
    """One secureboost run of ``sc`` in this process: (the active party's outcome, the roles)."""
    method = create_method("secureboost", TrainConfig(seed=0, options={**SMALL_KEY, **options}))
    method.keypair = keypair
    method.shuffle_seed = 7
    roles = method.party_roles(sc)
    runnable = {p: (taps[p].wrap(r) if taps and p in taps else r) for p, r in roles.items()}
    result = run_parties(runnable, active=sc.active, passives=sc.passives)
    return result.results[sc.active], roles


def kept(sc: Scenario, roles: Any) -> dict[str, dict[str, np.ndarray]]:
    return {p: {f"{m}.{n}": t.numpy() for m, b in roles[p].saved().weights.items() for n, t in b.items()}
            for p in sc.parties}


def walk(sc: Scenario, roles: Any, split: str) -> np.ndarray:
    """The margins of ``split``'s agreed rows from the kept parts alone (a row a party lacks: ``absent_left``)."""
    parts = (sc.active, *sc.passives)
    weights = kept(sc, roles)
    t = {k.split(".", 1)[1]: v for k, v in weights[sc.active].items() if k.startswith("trees.")}
    positions = sc.train if split == "train" else sc.test
    X = {p: np.asarray(getattr(sc.party_data(p), f"X_{split}"), dtype=np.float64) for p in parts}
    held = {p: sc.alignment.held(p, positions) for p in parts}
    rank = {p: np.cumsum(held[p]) - 1 for p in parts}
    margin = np.tile(t["base_margin"], (len(positions), 1))
    for root, output in zip(t["roots"].tolist(), t["output"].tolist(), strict=True):
        for i in range(len(positions)):
            node = root
            while t["left"][node] != -1:
                owner, record = parts[t["owner"][node]], t["record"][node]
                if not held[owner][i]:
                    left = bool(t["absent_left"][node])
                else:
                    value = X[owner][rank[owner][i], weights[owner]["splits.feature"][record]]
                    left = (bool(weights[owner]["splits.missing_left"][record]) if np.isnan(value)
                            else value <= weights[owner]["splits.threshold"][record])
                node = t["left"][node] if left else t["right"][node]
            margin[i, output] += t["value"][node]
    return margin


def binned(sc: Scenario, split: str, max_bins: int) -> np.ndarray:
    """Every party's bin indices side by side; NaN in a party's columns on the rows it does not hold."""
    positions = sc.train if split == "train" else sc.test
    out = []
    for p in (sc.active, *sc.passives):
        data = sc.party_data(p)
        bins = fit_bins(data.X_train, max_bins).transform(getattr(data, f"X_{split}")).astype(np.float64)
        full = np.full((len(positions), bins.shape[1]), np.nan)
        full[sc.alignment.held(p, positions)] = bins
        out.append(full)
    return np.hstack(out)


def xgboost_margins(sc: Scenario, trees: int, max_depth: int, max_bins: int) -> tuple[np.ndarray, np.ndarray]:
    """XGBoost ``hist`` on :func:`binned` with secureboost's loss and settings: train and test margins."""
    y = sc.party_data(sc.active).y_train
    base = BoostObjective.for_task(sc.task, 2).base_margin(y)[0]
    params = {"objective": "binary:logistic", "max_depth": max_depth, "eta": 0.3, "max_bin": 256,
              "tree_method": "hist", "reg_lambda": 1.0, "min_child_weight": 1.0, "gamma": 0.0, "nthread": 2, "seed": 0}
    X, X_test = binned(sc, "train", max_bins), binned(sc, "test", max_bins)
    booster = xgb.train(params, xgb.DMatrix(X, label=y, base_margin=np.full(len(X), base)), trees)
    return tuple(booster.predict(xgb.DMatrix(A, base_margin=np.full(len(A), base)), output_margin=True)  # type: ignore[return-value]
                 for A in (X, X_test))


# -- the trees are XGBoost's with the rows a party lacks as missing --------------------------------------------------

def test_the_training_rows_follow_xgboosts_sparsity_aware_splits():
    """Every training row's margin is XGBoost's (float32 precision): the same splits, default directions and
    leaves. A held-out row may differ only where its value falls in a bin none of the node's training rows
    hold at a split sending absent rows left (XGBoost keeps the highest such threshold, the owner the lowest:
    it is not told the direction)."""
    sc = scenario(0.7)
    assert sc.alignment.partial
    outcome, roles = run(sc, encrypt=False, trees=10, max_depth=3, max_bins=32, learning_rate=0.3)  # XGBoost's eta
    train, test = xgboost_margins(sc, trees=10, max_depth=3, max_bins=32)
    np.testing.assert_allclose(walk(sc, roles, "train")[:, 0], train, rtol=0, atol=1e-5)
    ours = walk(sc, roles, "test")
    np.testing.assert_allclose(BoostObjective.for_task(sc.task, 2).scores(ours), outcome.scores, rtol=0, atol=1e-12)
    assert np.mean(np.abs(ours[:, 0] - test) < 1e-5) > 0.95
    owners = outcome.extra["secureboost"]["split_owners"]
    assert all(owners[p] > 0 for p in sc.passives)
    trees = kept(sc, roles)[sc.active]
    assert trees["trees.absent_left"].any() and not trees["trees.absent_left"][trees["trees.owner"] == 0].any()


def test_encryption_changes_nothing_and_a_passive_party_gets_the_gradients_of_its_own_rows_only(small_keypair):
    sc = scenario(0.7)
    taps = {p: Tap() for p in sc.passives}
    plain, plain_roles = run(sc, small_keypair, encrypt=False, trees=3, max_depth=3)
    encrypted, roles = run(sc, small_keypair, taps=taps, encrypt=True, trees=3, max_depth=3)
    assert np.array_equal(plain.scores, encrypted.scores)
    a, b = kept(sc, plain_roles), kept(sc, roles)
    assert all(np.array_equal(a[p][k], b[p][k]) for p in a for k in a[p])
    width = protocol.ciphertext_bytes(small_keypair[0].n)
    for party in sc.passives:
        data = sc.party_data(party)
        own_train = int(sc.alignment.held(party, sc.train).sum())
        assert len(data.X_train) == own_train < len(sc.train)
        trees = [m for tag, m in taps[party].received if tag == protocol.TREE and "gradients" in m]
        assert len(trees) == 3
        for message in trees:  # one ciphertext per training row it holds (every fitted row here), no other
            assert len(message["rows"]) == own_train and len(message["gradients"][0]) == own_train * width
        assigns = [m for tag, m in taps[party].received if tag == protocol.ASSIGN and "node_of" in m]
        assert assigns and all(len(m["node_of"]) == len(data.X_train) + len(data.X_test) for m in assigns)


def test_at_full_coverage_the_model_is_the_intersections():
    """Every passive party holding every row: no extra candidate, nothing absent; the same model as on the
    intersection (the rows come in another agreed order, the trees do not depend on it)."""
    every, intersection = scenario(1.0), scenario(1.0, "intersection")
    assert not every.alignment.partial
    a, roles_a = run(every, encrypt=False, trees=5, max_depth=3)
    b, roles_b = run(intersection, encrypt=False, trees=5, max_depth=3)
    ids_a = every.tables[every.active].ids[every.alignment.aligned[every.active][every.test]]
    ids_b = intersection.tables[every.active].ids[intersection.alignment.aligned[every.active][intersection.test]]
    order = pd.Series(np.arange(len(ids_b)), index=ids_b).loc[ids_a].to_numpy()
    np.testing.assert_allclose(a.scores, b.scores[order], rtol=0, atol=1e-12)
    assert not kept(every, roles_a)[every.active]["trees.absent_left"].any()


def test_a_model_saved_before_absent_left_loads_with_every_such_row_going_right():
    import torch

    weights = {"left": torch.tensor([1, -1, -1]), "value": torch.zeros(3)}
    assert TreeArrays.with_defaults(weights)["absent_left"].tolist() == [0, 0, 0]
    assert TreeArrays.with_defaults({**weights, "absent_left": torch.tensor([1, 0, 0])})["absent_left"].tolist() == \
        [1, 0, 0]


# -- in one process through the API, saved, reloaded, scored --------------------------------------------------------

@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    return partial_tables(tmp_path_factory.mktemp("sbpartial"))


@pytest.fixture(scope="module")
def trained(files, tmp_path_factory):
    model = tmp_path_factory.mktemp("model") / "secureboost"
    report = securevfl.train("secureboost", data_files={p: str(files[p]) for p in PARTIES}, model_dir=model,
                             options={**SMALL_KEY, "trees": 5, "max_depth": 3}, **COMMON)
    return report, model



def test_every_row_of_the_bank_is_trained_on_and_scored_with_the_parties_that_hold_it(files, trained, tmp_path):
    report, model = trained
    patterns = [pattern_of(who_holds(files), i) for i in report.test_predictions["ids"]]
    coverage = report.metrics["coverage"]
    assert {p: e["rows"] for p, e in coverage.items()} == dict(Counter(patterns))
    assert {"bank+shop+clinic", "bank+shop", "bank+clinic"} <= set(coverage)
    assert report.metrics["auc"] > 0.9
    frame = securevfl.predict(model, data={p: str(files[p]) for p in PARTIES}, device="cpu")
    assert len(frame) == len(pd.read_csv(files["bank"]))
    assert frame.parties.tolist() == [pattern_of(who_holds(files), i) for i in frame.customer_id]
    only = securevfl.predict(model, data={p: str(files[p]) for p in PARTIES}, require_all_parties=True, device="cpu")
    assert "parties" not in only and set(only.customer_id) == set(frame.customer_id[frame.parties == "+".join(PARTIES)])
    both = frame.set_index("customer_id").loc[only.customer_id]
    np.testing.assert_allclose(probabilities(both), probabilities(only), atol=1e-12, rtol=0)


def test_the_reloaded_model_reproduces_the_test_predictions_on_every_pattern(files, trained, tmp_path):
    report, model = trained
    held = report.test_predictions
    frame = securevfl.predict(model, data=rows_of(files, tmp_path / "held", held["ids"]), device="cpu",
                              exchange_rows=29)
    scores = dict(zip(held["ids"], held["scores"][:, 1], strict=True))
    got = frame.set_index("customer_id").proba_yes.loc[list(scores)].to_numpy()
    np.testing.assert_allclose(got, list(scores.values()), atol=1e-12, rtol=0)
    assert (frame.parties != "+".join(PARTIES)).sum() > 10  # the oracle covers partial rows too
    assert roc_auc_score(held["y_true"], held["scores"][:, 1]) == pytest.approx(report.metrics["auc"])


def test_every_row_deployed_over_three_parties_matches_one_process(files, trained, tmp_path):
    """Three parties over loopback links (in threads), Paillier on: the same metrics on every pattern as in one
    process (the trees are XGBoost's whatever each party's secret permutation); the deployed
    model scores every row deployed as in one process, with the same parties column."""
    from deployed_threads import in_threads, loopback_federation, run_parties_in_threads

    from securevfl.pipeline.score import run_deployed_scoring

    report, _ = trained
    job = ('method = "secureboost"\nseed = 0\nid_column = "customer_id"\nlabel_column = "churn"\n'
           'require_all_parties = false')
    options = "[job.options]\nkey_bits = 512\ninsecure_allow_small_key = true\ntrees = 5\nmax_depth = 3"
    fed = loopback_federation(tmp_path, list(PARTIES), "bank", job, options)
    model = tmp_path / "model"
    results = run_parties_in_threads(fed, {p: str(files[p]) for p in PARTIES}, model_dir=model)
    deployed = results["bank"].report
    assert deployed.metrics["coverage"].keys() == report.metrics["coverage"].keys()
    assert deployed.metrics["auc"] == pytest.approx(report.metrics["auc"], abs=1e-12)
    for pattern, entry in report.metrics["coverage"].items():
        assert deployed.metrics["coverage"][pattern] == pytest.approx(entry, abs=1e-12), pattern
    new = rows_of(files, tmp_path / "new", pd.read_csv(files["bank"]).customer_id.sample(90, random_state=1))
    scored = in_threads(lambda p: run_deployed_scoring(fed, p, new[p], model, device="cpu", exchange_rows=40),
                        PARTIES)
    frame = scored["bank"].predictions
    assert len(frame) == 90 and frame.parties.tolist() == [pattern_of(who_holds(files), i) for i in frame.customer_id]
    local = securevfl.predict(model, data=new, device="cpu").set_index("customer_id").loc[frame.customer_id]
    np.testing.assert_allclose(probabilities(frame), probabilities(local), atol=1e-12, rtol=0)

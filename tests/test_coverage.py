"""Partial coverage (issue 44): rows some passive party does not hold, trained on and scored in one process.

The organisation tables of tests/org_tables.py with the bank (the active party) holding every customer
and the shop and the clinic about 70 % each, each its own draw.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from org_tables import (
    partial_tables,
    pattern_of,
    probabilities,
    rows_of,
    scored_held_out,
    summed_pattern,
    who_holds,
)

import securevfl
from securevfl.data.alignment import create_aligner
from securevfl.data.partition import PartyTable
from securevfl.data.scenario import covering_order
from securevfl.errors import ConfigError, ModelError

PARTIES = ("bank", "shop", "clinic")
COMMON = {"id_column": "customer_id", "label_column": "churn", "device": "cpu", "seed": 0}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    return partial_tables(tmp_path_factory.mktemp("coverage"))


@pytest.fixture(scope="module")
def trained(files, tmp_path_factory):
    """SplitNN trained on every row of the bank (the default), its model saved."""
    model = tmp_path_factory.mktemp("model") / "splitnn"
    report = securevfl.train("splitnn", data_files={p: str(files[p]) for p in PARTIES}, epochs=8,
                             model_dir=model, **COMMON)
    return report, model




def test_the_covering_alignment_holds_every_active_row_and_each_peer_its_own():
    table = {"a": PartyTable(name="a", ids=np.array(["c3", "c1", "c2", "c4"], dtype=object),
                             features=np.zeros((4, 1)), feature_names=("x",), labels=np.array([0, 1, 0, 1])),
             "b": PartyTable(name="b", ids=np.array(["c4", "c9", "c1"], dtype=object),
                             features=np.zeros((3, 1)), feature_names=("y",))}
    ordered = [["c3", "c1", "c2", "c4"][i] for i in covering_order(["c3", "c1", "c2", "c4"])]
    for name in ("psi", "plaintext"):
        alignment = create_aligner(name, cover=True)(table, "a")
        assert alignment.size == 4 and alignment.partial
        order = table["a"].ids[alignment.aligned["a"]].tolist()  # a keyed order, the same in every run
        assert sorted(order) == ["c1", "c2", "c3", "c4"] and order == ordered
        held = [i in ("c1", "c4") for i in order]
        assert alignment.present["b"].tolist() == held
        assert table["b"].ids[alignment.rows("b", np.arange(4))].tolist() == [i for i in order if i in ("c1", "c4")]
        assert alignment.unaligned["b"].tolist() == [1]  # c9: the bank does not hold it
        assert alignment.patterns(("a", "b"), np.arange(4)).tolist() == ["a+b" if h else "a" for h in held]
    full = {**table, "b": PartyTable(name="b", ids=table["a"].ids[::-1].copy(), features=np.zeros((4, 1)),
                                     feature_names=("y",))}
    every = create_aligner("psi", cover=True)(full, "a")  # every row held: the keyed order still (as deployed)
    assert not every.partial and table["a"].ids[every.aligned["a"]].tolist() == ordered


def test_training_on_every_row_reports_each_coverage_pattern(files, trained):
    report, _ = trained
    holders = who_holds(files)
    ids = report.test_predictions["ids"]
    coverage = report.metrics["coverage"]
    patterns = [pattern_of(holders, i) for i in ids]
    assert {p: e["rows"] for p, e in coverage.items()} == {p: patterns.count(p) for p in set(patterns)}
    assert {"bank+shop+clinic", "bank+shop", "bank+clinic"} <= set(coverage)
    assert sum(e["rows"] for e in coverage.values()) == len(ids) > 0.2 * len(pd.read_csv(files["bank"])) - 2
    assert coverage["bank+shop+clinic"]["accuracy"] > 0.85
    intersection = securevfl.train("splitnn", data_files={p: str(files[p]) for p in PARTIES}, epochs=2,
                                   require_all_parties=True, **COMMON)
    assert "coverage" not in intersection.metrics  # the rows every party holds: one pattern
    assert len(intersection.test_predictions["ids"]) < len(ids)


def test_every_row_of_the_active_file_is_scored_with_the_parties_that_hold_it(files, trained, tmp_path):
    report, model = trained
    holders = who_holds(files)
    wanted = pd.read_csv(files["bank"]).customer_id.sample(120, random_state=0)
    new = rows_of(files, tmp_path / "new", wanted)
    frame = securevfl.predict(model, data=new, device="cpu")  # a model trained on every row: every row, by default
    assert sorted(frame.customer_id) == sorted(wanted)
    assert frame.parties.tolist() == [pattern_of(holders, i) for i in frame.customer_id]
    assert set(frame.parties) > {"bank+shop+clinic"}
    only = securevfl.predict(model, data=new, require_all_parties=True, device="cpu")  # the intersection
    assert "parties" not in only.columns
    assert sorted(only.customer_id) == sorted(i for i in wanted if pattern_of(holders, i) == "+".join(PARTIES))
    both = frame.set_index("customer_id").loc[only.customer_id]
    np.testing.assert_allclose(probabilities(both), probabilities(only), atol=1e-6, rtol=0)


def test_scoring_the_held_out_rows_reproduces_the_test_predictions_on_every_pattern(files, trained, tmp_path):
    report, model = trained
    frame = scored_held_out(report, model, files, tmp_path / "held")
    assert (frame.parties != "+".join(PARTIES)).sum() > 10  # the oracle covers partial rows too


def test_the_absent_embeddings_are_trained(trained):
    import safetensors.numpy

    _, model = trained
    weights = [f for f in (model / "bank").iterdir() if f.suffix == ".safetensors" and "weights" in f.name]
    tensors = {k: v for f in weights for k, v in safetensors.numpy.load_file(f).items() if "absent" in k}
    assert tensors and all(np.abs(v).sum() > 0 for v in tensors.values()), sorted(tensors)


def test_rows_no_passive_party_holds_are_scored_by_the_active_partys_own_head(files, trained, tmp_path):
    """The bank-alone rows come from the bank's head on its own embedding: the absent embeddings take no part."""
    import shutil

    import safetensors.numpy

    _, model = trained
    data = {p: str(files[p]) for p in PARTIES}
    before = securevfl.predict(model, data=data, require_all_parties=False, device="cpu").set_index("customer_id")
    changed = tmp_path / "changed"
    shutil.copytree(model, changed)
    manifest = json.loads((changed / "bank" / "manifest.json").read_text())
    for name in manifest["files"]:
        f = changed / "bank" / name
        if f.suffix == ".safetensors":
            tensors = safetensors.numpy.load_file(f)
            safetensors.numpy.save_file({k: (v + 1.0 if "absent" in k else v) for k, v in tensors.items()}, f)
            manifest["files"][name] = hashlib.sha256(f.read_bytes()).hexdigest()  # re-sealed by the test
    (changed / "bank" / "manifest.json").write_text(json.dumps(manifest))
    after = securevfl.predict(changed, data=data, require_all_parties=False, device="cpu").set_index("customer_id")
    alone, partial = before.parties == "bank", ~before.parties.isin(["bank", "+".join(PARTIES)])
    assert alone.sum() > 5 and partial.sum() > 5
    np.testing.assert_allclose(after.proba_yes[alone], before.proba_yes[alone], atol=1e-7, rtol=0)
    assert not np.allclose(after.proba_yes[partial], before.proba_yes[partial], atol=1e-4)


def test_partial_rows_are_refused_in_one_line_where_the_model_cannot_score_them(files, tmp_path):
    data = {p: str(files[p]) for p in PARTIES}
    tabvfl = tmp_path / "tabvfl"
    securevfl.train("tabvfl", data_files=data, epochs=1, model_dir=tabvfl, **COMMON)  # the intersection: it can't
    with pytest.raises(ConfigError, match="tabvfl cannot use rows some party does not hold.*--require-all-parties"):
        securevfl.predict(tabvfl, data=data, require_all_parties=False, device="cpu")
    shared = set.intersection(*who_holds(files).values())
    frame = securevfl.predict(tabvfl, data=data, device="cpu")  # by default: the rows every party holds
    assert set(frame.customer_id) == shared and "parties" not in frame
    splitnn = tmp_path / "splitnn"
    securevfl.train("splitnn", data_files=data, epochs=1, model_dir=splitnn, require_all_parties=True, **COMMON)
    with pytest.raises(ModelError, match="cannot score rows some party does not hold"):
        securevfl.predict(splitnn, data=data, require_all_parties=False, device="cpu")
    assert set(securevfl.predict(splitnn, data=data, device="cpu").customer_id) == shared  # follows the model


def test_by_default_a_capable_method_trains_and_scores_every_row_and_the_switch_keeps_the_intersection(
        files, tmp_path):
    from securevfl.cli import main

    data = [a for p in PARTIES for a in ("--data", f"{p}={files[p]}")]
    common = ["--id-column", "customer_id", "--label-column", "churn", "--device", "cpu", "--epochs", "1"]
    every, shared = len(pd.read_csv(files["bank"])), len(set.intersection(*who_holds(files).values()))
    for switch, scored in (([], every), (["--require-all-parties"], shared)):
        model, out = tmp_path / f"model{len(switch)}", tmp_path / f"p{len(switch)}.csv"
        assert main(["train", "--method", "splitnn", *common, *data, "--model-dir", str(model), *switch]) == 0
        assert main(["predict", "--model-dir", str(model), "--out", str(out), "--device", "cpu", *data]) == 0
        frame = pd.read_csv(out)
        assert len(frame) == scored and ("parties" in frame) == (not switch)


def test_the_predict_command_counts_rows_per_coverage(files, trained, tmp_path, capsys):
    from securevfl.cli import main

    _, model = trained
    out, report = tmp_path / "p.csv", tmp_path / "score.json"
    args = ["predict", "--model-dir", str(model), "--out", str(out), "--report", str(report),
            "--device", "cpu",
            *[a for p in PARTIES for a in ("--data", f"{p}={files[p]}")]]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "rows scored per coverage" in printed and "bank+shop" in printed
    counts = pd.read_json(report, typ="series")["coverage"]
    assert sum(counts.values()) == len(pd.read_csv(files["bank"])) == len(pd.read_csv(out))


def test_every_row_deployed_over_three_parties_matches_one_process(files, tmp_path):
    """The same run deployed (three parties over loopback links, in threads) and in one process: same test
    predictions on every pattern; the deployed model scores every row with the same parties column."""
    from deployed_threads import SPLITNN_JOB, in_threads, loopback_federation, one_torch_thread, run_parties_in_threads

    from securevfl.pipeline.score import run_deployed_scoring

    job = SPLITNN_JOB + "\nrequire_all_parties = false"
    fed = loopback_federation(tmp_path, list(PARTIES), "bank", job)
    with one_torch_thread():
        results = run_parties_in_threads(fed, {p: str(files[p]) for p in PARTIES}, model_dir=tmp_path / "model")
        local = securevfl.train("splitnn", data_files={p: str(files[p]) for p in PARTIES}, epochs=2, batch_size=64,
                                require_all_parties=False, **COMMON)
    report = results["bank"].report
    assert report.metrics["coverage"].keys() == local.metrics["coverage"].keys()
    assert report.metrics["accuracy"] == pytest.approx(local.metrics["accuracy"], abs=1e-9)
    for pattern, entry in local.metrics["coverage"].items():
        assert report.metrics["coverage"][pattern] == pytest.approx(entry, abs=1e-9), pattern
    holders = who_holds(files)
    new = rows_of(files, tmp_path / "new", pd.read_csv(files["bank"]).customer_id.sample(90, random_state=1))
    scored = in_threads(lambda p: run_deployed_scoring(fed, p, new[p], tmp_path / "model", device="cpu",
                                                       exchange_rows=40), PARTIES)
    frame = scored["bank"].predictions
    assert len(frame) == 90 and frame.parties.tolist() == [pattern_of(holders, i) for i in frame.customer_id]
    in_process = securevfl.predict(tmp_path / "model", data=new, require_all_parties=False, device="cpu")
    both = in_process.set_index("customer_id").loc[frame.customer_id]
    np.testing.assert_allclose(probabilities(frame), probabilities(both), atol=1e-6, rtol=0)


def test_a_served_model_trained_on_every_row_answers_every_customer_of_the_active_party(files, trained, tmp_path):
    """Online: each requested customer the bank holds is scored, with the parties that hold it, as batch scoring."""
    from deployed_threads import loopback_federation
    from serving_service import Service

    _, model = trained
    holders = who_holds(files)
    fed = loopback_federation(tmp_path, list(PARTIES), "bank", 'method = "splitnn"\nid_column = "customer_id"\n'
                                                               'label_column = "churn"')
    asked = pd.read_csv(files["bank"]).customer_id.sample(60, random_state=2).tolist() + ["nobody"]
    running = Service(fed, model, files)
    try:
        status, answer = running.post({"rows": [{"customer_id": i} for i in asked]})
    finally:
        running.close()
    assert status == 200, answer
    assert answer["not_scored"] == ["nobody"]  # the one customer the bank does not hold
    got = pd.DataFrame(answer["predictions"]).set_index("customer_id")
    assert sorted(got.index) == sorted(asked[:-1])
    assert [got.parties[i] for i in asked[:-1]] == [pattern_of(holders, i) for i in asked[:-1]]
    assert len(set(got.parties)) > 1
    new = rows_of(files, tmp_path / "new", asked[:-1])
    batch = securevfl.predict(model, data=new, require_all_parties=False, device="cpu").set_index("customer_id")
    np.testing.assert_allclose(got.proba_yes.loc[asked[:-1]].to_numpy(), batch.proba_yes.loc[asked[:-1]].to_numpy(),
                               atol=1e-6, rtol=0)


@pytest.mark.parametrize("positions", [np.array([0, 0]), np.array([0, 9]), np.array([-1, 2]), np.array([0.0, 1.0]),
                                       np.array([1]), [0, 1]])
def test_row_positions_from_the_active_party_are_checked_before_use(positions):
    """A passive party refuses positions that are not one distinct in-range int64 per matched row."""
    from types import SimpleNamespace

    from securevfl.deploy.alignment import _cover_passive
    from securevfl.errors import ProtocolError

    ctx = SimpleNamespace(active="bank", name="shop", recv=lambda sender, tag: positions)
    prepared = SimpleNamespace(rows=np.arange(5))
    with pytest.raises(ProtocolError, match="malformed row positions from bank"):
        _cover_passive(ctx, prepared, np.array([3, 4]), active_size=9)


def test_the_coverage_benchmark_reports_every_way_on_every_pattern(tmp_path):
    """``benchmarks/coverage.py``: its quick cases at one coverage, the figures under the documented keys."""
    import json

    from script_module import ROOT, script_module

    out = tmp_path / "coverage.json"
    with script_module(ROOT / "benchmarks" / "coverage.py", "coverage_benchmark") as bench:
        figures = bench.main(["--quick", "--coverages", "0.5", "--out", str(out)])
    assert json.loads(out.read_text()) == pytest.approx(figures)
    for way in ("every_row", "stitched", "local", "laser_vfl"):
        assert 0.5 < figures[f"coverage.breast-cancer.p50.{way}.all.auc"] <= 1
        assert figures[f"coverage.california-housing.p50.{way}.all.rmse"] > 0
    assert "coverage.breast-cancer.p50.every_row.active.auc" in figures  # rows no passive party holds: scored
    assert "coverage.breast-cancer.p50.laser_vfl.active.auc" in figures
    for ratio in ("ratio_vs_best_baseline", "ratio_vs_laser_vfl"):
        assert figures[f"coverage.breast-cancer.p50.all.{ratio}"] > 0
        assert figures[f"coverage.california-housing.p50.all.{ratio}"] > 0


def test_subset_views_train_on_more_subsets_only_where_some_party_lacks_rows(tmp_path):
    """``subset_views`` (default 1) changes training on partial rows and nothing at full coverage."""
    files = partial_tables(tmp_path / "partial")
    data = {p: str(files[p]) for p in PARTIES}
    kw = {**COMMON, "epochs": 1}
    with_views = securevfl.train("splitnn", data_files=data, **kw)
    without = securevfl.train("splitnn", data_files=data, subset_views=0, **kw)
    assert with_views.history != without.history
    full = partial_tables(tmp_path / "full", keep=1.0)
    data = {p: str(full[p]) for p in PARTIES}
    assert (securevfl.train("splitnn", data_files=data, **kw).history
            == securevfl.train("splitnn", data_files=data, subset_views=0, **kw).history)


def test_a_resumed_every_row_run_gives_the_uninterrupted_one(tmp_path):
    """The subset-view and party-dropout generators are checkpointed with the model: resuming is exact."""
    from securevfl.errors import PartyFailure

    files = partial_tables(tmp_path / "tables")
    kw = {**COMMON, "data_files": {p: str(files[p]) for p in PARTIES}, "epochs": 3}
    uninterrupted = securevfl.train("splitnn", **kw)

    def interrupt(**info):
        if info["epoch"] == 2:
            raise RuntimeError("interrupted after epoch 2")

    with pytest.raises(PartyFailure, match="interrupted after epoch 2"):
        securevfl.train("splitnn", checkpoint_dir=tmp_path / "ck", progress=interrupt, **kw)
    resumed = securevfl.train("splitnn", checkpoint_dir=tmp_path / "ck", resume=True, **kw)
    assert resumed.extra["resumed_from_epoch"] == 2
    assert resumed.metrics == uninterrupted.metrics and resumed.history == uninterrupted.history


@pytest.fixture(scope="module")
def secure_sum_models(files, tmp_path_factory):
    """EASTER and Agg-VFL (secagg=dh) trained on every row of the bank, their models saved (trained when asked)."""
    models: dict[str, Path] = {}

    def model(method: str) -> Path:
        if method not in models:
            models[method] = tmp_path_factory.mktemp("model") / method
            securevfl.train(method, data_files={p: str(files[p]) for p in PARTIES}, epochs=2,
                            model_dir=models[method], options=SECURE_SUM[method], **COMMON)
        return models[method]

    return model


SECURE_SUM = {"easter": {"secagg": "dh", "embedding_size": 16}, "aggvfl": {"secagg": "dh"}}


@pytest.mark.parametrize("method", ["easter", "aggvfl"])
def test_a_served_secure_sum_model_answers_every_customer_as_batch_scoring(files, tmp_path, method, secure_sum_models):
    """EASTER and Agg-VFL sum their parts per request over every asked ID (a masked zero where a party lacks the
    row), so each customer the bank holds is scored, with the parties that hold it, as batch scoring scores it."""
    from deployed_threads import loopback_federation
    from serving_service import Service

    options = SECURE_SUM[method]
    model = secure_sum_models(method)
    holders = who_holds(files)
    job = (f'method = "{method}"\nid_column = "customer_id"\nlabel_column = "churn"\n[job.options]\n'
           + "\n".join(f"{k} = {json.dumps(v)}" for k, v in options.items()))
    fed = loopback_federation(tmp_path, list(PARTIES), "bank", job)
    asked = pd.read_csv(files["bank"]).customer_id.sample(40, random_state=3).tolist() + ["nobody"]
    running = Service(fed, model, files)
    try:
        status, answer = running.post({"rows": [{"customer_id": i} for i in asked]})
        again, second = running.post({"rows": [{"customer_id": i} for i in asked[:5]]})  # a second round
    finally:
        running.close()
    assert status == 200 and again == 200, (answer, second)
    assert answer["not_scored"] == ["nobody"]
    got = pd.DataFrame(answer["predictions"]).set_index("customer_id")
    # a row's parties: those whose parts were summed (one passive party's part alone never is)
    assert [got.parties[i] for i in asked[:-1]] == [summed_pattern(holders, i) for i in asked[:-1]]
    assert len(set(got.parties)) > 1
    new = rows_of(files, tmp_path / "new", asked[:-1])
    batch = securevfl.predict(model, data=new, require_all_parties=False, device="cpu").set_index("customer_id")
    np.testing.assert_allclose(got.proba_yes.loc[asked[:-1]].to_numpy(), batch.proba_yes.loc[asked[:-1]].to_numpy(),
                               atol=1e-6, rtol=0)
    assert list(got.parties.loc[asked[:-1]]) == list(batch.parties.loc[asked[:-1]])
    np.testing.assert_allclose(pd.DataFrame(second["predictions"]).proba_yes.to_numpy(),
                               got.proba_yes.loc[asked[:5]].to_numpy(), atol=1e-6, rtol=0)


@pytest.mark.timebound
def test_a_served_secure_sum_model_scores_on_while_a_party_is_late_and_takes_it_back(files, tmp_path, monkeypatch,
                                                                                    secure_sum_models):
    """EASTER serving, clinic's lookup answer late: the batch is scored by the bank alone (shop's part cannot be
    summed alone without giving it away), then clinic is back and every party's secure sum is set up again."""
    import threading
    import time

    from deployed_threads import loopback_federation
    from serving_service import Service

    from securevfl.deploy import serving as sv
    from securevfl.deploy.serving_limits import ServeSettings

    model = secure_sum_models("easter")
    slow = threading.Event()
    next_request = sv._next_request

    def late_clinic(ctx):  # clinic answers one lookup after the bank's deadline
        message = next_request(ctx)
        if ctx.name == "clinic" and slow.is_set() and isinstance(message, dict) and "points" in message:
            slow.clear()
            time.sleep(3.0)
        return message

    monkeypatch.setattr(sv, "_next_request", late_clinic)
    holders = who_holds(files)
    job = ('method = "easter"\nid_column = "customer_id"\nlabel_column = "churn"\n[job.options]\n'
           'secagg = "dh"\nembedding_size = 16')
    fed = loopback_federation(tmp_path, list(PARTIES), "bank", job)
    asked = pd.read_csv(files["bank"]).customer_id.sample(40, random_state=4).tolist()
    body = {"rows": [{"customer_id": i} for i in asked]}
    running = Service(fed, model, files, settings={"bank": ServeSettings(party_timeout_s=1.5)})
    try:
        _, before = running.post(body)
        slow.set()
        _, during = running.post(body)
        after: dict = {"left_out": True}
        for _ in range(20):  # clinic's late answer, then its echo of the sync marker: back in a few seconds
            _, after = running.post(body)
            if "left_out" not in after:
                break
            time.sleep(0.5)
    finally:
        running.close()
    first = pd.DataFrame(before["predictions"]).set_index("customer_id")
    assert [first.parties[i] for i in asked] == [summed_pattern(holders, i) for i in asked]
    assert "left_out" not in before
    assert during["left_out"] == {"clinic": "late"}
    alone = pd.DataFrame(during["predictions"]).set_index("customer_id")
    assert sorted(alone.index) == sorted(asked) and set(alone.parties) == {"bank"}
    bank_only = [i for i in asked if first.parties[i] == "bank"]
    assert bank_only  # scored by the bank alone both times: the same prediction
    np.testing.assert_allclose(alone.proba_yes.loc[bank_only], first.proba_yes.loc[bank_only], atol=1e-6, rtol=0)
    assert "left_out" not in after, after.get("left_out")
    back = pd.DataFrame(after["predictions"]).set_index("customer_id")
    np.testing.assert_allclose(back.proba_yes.loc[asked], first.proba_yes.loc[asked], atol=1e-6, rtol=0)
    assert list(back.parties.loc[asked]) == list(first.parties.loc[asked])


@pytest.mark.timebound
def test_a_party_lost_inside_a_served_secure_sum_round_fails_no_request(files, tmp_path, monkeypatch,
                                                                        secure_sum_models):
    """EASTER serving, clinic's process fails in the middle of a request's secure-aggregation round: the bank
    tells shop to stop waiting in that round, scores the batch alone, and shop serves on (set up again later)."""
    import threading

    from deployed_threads import loopback_federation
    from serving_service import Service

    from securevfl.methods.engine.aggregate import AggregatePassive

    model = secure_sum_models("easter")
    fail = threading.Event()
    evaluate_held = AggregatePassive.evaluate_held

    def dying_clinic(self, ctx, X, held, phase):
        if ctx.name == "clinic" and fail.is_set():
            raise RuntimeError("clinic's process dies in the round")
        return evaluate_held(self, ctx, X, held, phase)

    monkeypatch.setattr(AggregatePassive, "evaluate_held", dying_clinic)
    job = ('method = "easter"\nid_column = "customer_id"\nlabel_column = "churn"\n[job.options]\n'
           'secagg = "dh"\nembedding_size = 16')
    fed = loopback_federation(tmp_path, list(PARTIES), "bank", job)
    asked = pd.read_csv(files["bank"]).customer_id.sample(30, random_state=5).tolist()
    body = {"rows": [{"customer_id": i} for i in asked]}
    running = Service(fed, model, files)
    try:
        _, before = running.post(body)
        fail.set()
        status, cut = running.post(body)
        later = [running.post(body) for _ in range(3)]
    finally:
        running.stop.set()
        for t in running.threads:
            t.join(30)
    assert "clinic" in running.errors and set(running.errors) == {"clinic"}, running.errors
    assert status == 200 and cut["left_out"]["clinic"] == "down", cut
    alone = pd.DataFrame(cut["predictions"]).set_index("customer_id")
    assert sorted(alone.index) == sorted(asked) and set(alone.parties) == {"bank"}
    first = pd.DataFrame(before["predictions"]).set_index("customer_id")
    bank_only = [i for i in asked if first.parties[i] == "bank"]
    assert bank_only
    np.testing.assert_allclose(alone.proba_yes.loc[bank_only], first.proba_yes.loc[bank_only], atol=1e-6, rtol=0)
    assert all(code == 200 and len(a["predictions"]) == len(asked) for code, a in later)
    assert later[-1][1]["left_out"] == {"clinic": "down"}  # shop stopped waiting in the cut round, and is back
    assert running.results["shop"].requests >= 4

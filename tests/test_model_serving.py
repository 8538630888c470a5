"""Online scoring: the parties of a saved model stay up and the active party answers requests (``party --serve``).

The parties run in threads of this process over plaintext loopback gRPC (the same transport as
with TLS); requests go to the active party's HTTP endpoint. The oracle is batch scoring of the
same rows with the same saved model.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from deployed_threads import SPLITNN_JOB, loopback_federation_file, one_torch_thread
from serving_service import PARTIES, Service, train_served_model

import securevfl
import securevfl.errors
from securevfl.deploy.federation_file import load_federation
from securevfl.pipeline.serve import run_serving_party


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    """A SplitNN model trained in one process, and every party's table (what it can be asked about)."""
    return train_served_model(tmp_path_factory.mktemp("serving"))


@pytest.fixture()
def service(tmp_path, trained):
    model, files = trained
    fed = load_federation(loopback_federation_file(tmp_path, PARTIES, "bank", SPLITNN_JOB))
    running = Service(fed, model, files)
    yield running
    running.close()


def _batch_predictions(model: Path, files: dict[str, Path], ids: list[str], directory: Path) -> pd.DataFrame:
    """Batch scoring of ``ids`` (the oracle), every party's file of the model cut to them."""
    directory.mkdir()
    cut = {}
    parties = securevfl.load_model(model).data_parties
    for p in parties:
        frame = pd.read_csv(files[p])
        cut[p] = directory / f"{p}.csv"
        frame[frame.customer_id.isin(ids)].to_csv(cut[p], index=False)
    with one_torch_thread():
        return securevfl.predict(model, data={p: str(cut[p]) for p in parties}, device="cpu")


def _held_by_all(files: dict[str, Path]) -> list[str]:
    sets = [set(pd.read_csv(files[p]).customer_id) for p in PARTIES]
    return sorted(set.intersection(*sets))


def test_requests_are_answered_as_batch_scoring_answers_them(tmp_path, trained, service):
    model, files = trained
    everyone = _held_by_all(files)
    shop_only_lacks = sorted(set(pd.read_csv(files["bank"]).customer_id) - set(pd.read_csv(files["shop"]).customer_id))
    ids = everyone[:20] + shop_only_lacks[:2] + ["nobody"]
    status, answer = service.post({"rows": [{"customer_id": i} for i in ids]})
    assert status == 200, answer
    assert sorted(answer["not_scored"]) == sorted(shop_only_lacks[:2] + ["nobody"])
    got = pd.DataFrame(answer["predictions"])
    assert got.customer_id.tolist() == everyone[:20]  # the request's order
    oracle = _batch_predictions(model, files, everyone[:20], tmp_path / "oracle").set_index("customer_id")
    oracle = oracle.loc[got.customer_id]
    np.testing.assert_allclose(got[["proba_no", "proba_yes"]].to_numpy(), oracle[["proba_no", "proba_yes"]].to_numpy(),
                               atol=1e-6, rtol=0)
    assert got.prediction.tolist() == oracle.prediction.tolist()

    # one row at a time: the same answers
    for i in everyone[:3]:
        status, one = service.post({"rows": [{"customer_id": i}]})
        assert status == 200 and one["not_scored"] == []
        assert one["predictions"][0]["proba_yes"] == pytest.approx(float(oracle.loc[i, "proba_yes"]), abs=1e-6)


def test_the_active_party_may_send_its_own_feature_values(trained, service):
    model, files = trained
    bank = pd.read_csv(files["bank"]).set_index("customer_id")
    i, j = _held_by_all(files)[:2]
    status, from_table = service.post({"rows": [{"customer_id": i}, {"customer_id": j}]})
    assert status == 200
    features = bank.drop(columns=["churn"]).loc[i].to_dict()
    status, given = service.post({"rows": [{"customer_id": i, **features}]})
    assert status == 200 and given["predictions"][0]["proba_yes"] == pytest.approx(
        from_table["predictions"][0]["proba_yes"], abs=1e-6)
    # other values of its own columns change its prediction; an unseen category is no error
    features["tier"] = "platinum"
    features[bank.columns[0]] = float(bank[bank.columns[0]].max()) * 3
    status, changed = service.post({"rows": [{"customer_id": i, **features}]})
    assert status == 200 and changed["predictions"][0]["proba_yes"] != pytest.approx(
        from_table["predictions"][0]["proba_yes"], abs=1e-6)


def test_a_bad_request_is_refused_and_the_service_goes_on(trained, service):
    _, files = trained
    good = {"rows": [{"customer_id": _held_by_all(files)[0]}]}
    for body, words in [(b"not json", "body must be"), ({"ids": []}, "body must be"), ({"rows": []}, "non-empty"),
                        ({"rows": [{"customer_id": None}]}, "non-blank"),
                        ({"rows": [{"customer_id": "c1"}, {"customer_id": "c1"}]}, "once"),
                        ({"rows": [{"customer_id": "c1", "tier": "gold"}]}, "lacks column"),
                        ({"rows": [{"customer_id": f"x{i}"} for i in range(10_001)]}, "at most")]:
        status, answer = service.post(body)
        assert status == 400 and words in answer["error"], (body if isinstance(body, bytes) else str(body)[:80], answer)
        status, answer = service.post(good)
        assert status == 200 and len(answer["predictions"]) == 1


def test_stopping_the_active_party_stops_every_party_cleanly(trained, tmp_path):
    model, files = trained
    fed = load_federation(loopback_federation_file(tmp_path, PARTIES, "bank", SPLITNN_JOB))
    running = Service(fed, model, files)
    status, _ = running.post({"rows": [{"customer_id": _held_by_all(files)[0]}]})
    assert status == 200
    running.close()
    assert running.results["bank"].requests == 1 and running.results["shop"].requests == 1
    assert running.results["shop"].rows_scored == 1


@pytest.mark.parametrize("method, options", [("easter", {"secagg": "dh", "embedding_size": 16}), ("local", {}),
                                             ("hetero-lr", {"key_bits": 512, "insecure_allow_small_key": True})],
                         ids=["easter-dh", "local-standalone", "hetero-lr-arbiter"])
def test_other_models_serve_as_they_score(tmp_path, trained, method, options):
    """EASTER sums its embeddings under DH secure aggregation per request; a standalone model serves alone;
    hetero-lr's arbiter (a party without data) decrypts each request's masked sum of encrypted scores."""
    _, files = trained
    model = tmp_path / "model"
    securevfl.train(method, data_files={p: str(files[p]) for p in PARTIES}, id_column="customer_id",
                    label_column="churn", epochs=2, batch_size=64, seed=0, device="cpu", options=options,
                    model_dir=model)
    job = SPLITNN_JOB.replace("splitnn", method) + "\n[job.options]\n" + "\n".join(
        f"{k} = {json.dumps(v)}" for k, v in options.items())
    helpers = ("arbiter",) if method == "hetero-lr" else ()
    path = loopback_federation_file(tmp_path, [*PARTIES, *helpers], "bank", job)
    if helpers:
        path.write_text(path.read_text().replace("[parties.arbiter]\n", "[parties.arbiter]\ndata = false\n"))
    fed = load_federation(path)
    ids = _held_by_all(files)[:7]
    oracle = _batch_predictions(model, files, ids, tmp_path / "oracle").set_index("customer_id")
    if method == "local":  # the active party alone: no peer runs, and one is refused
        with pytest.raises(securevfl.errors.ConfigError, match="active party's alone"):
            run_serving_party(fed, "shop", files["shop"], model)
        only = {"bank": files["bank"]}
        running = Service(fed, model, only, parties=("bank",))
    else:
        running = Service(fed, model, files)
    try:
        status, answer = running.post({"rows": [{"customer_id": i} for i in ids]})
        assert status == 200, answer
        got = pd.DataFrame(answer["predictions"]).set_index("customer_id").loc[ids]
        np.testing.assert_allclose(got.proba_yes.to_numpy(), oracle.loc[ids].proba_yes.to_numpy(), atol=1e-6, rtol=0)
    finally:
        running.close()


def test_serve_options_are_checked_before_connecting(tmp_path, trained, capsys):
    from securevfl.cli import main

    model, files = trained
    fed = loopback_federation_file(tmp_path, PARTIES, "bank", SPLITNN_JOB)
    base = ["party", "--federation", str(fed), "--as", "bank", "--insecure", "--serve"]
    for extra, words in [([], "give --model-dir and --data"),
                         (["--model-dir", str(model), "--data", str(files["bank"]), "--predict"], "choose one"),
                         (["--model-dir", str(model), "--data", str(files["bank"]), "--out", "x.csv"], "no --out"),
                         (["--model-dir", str(model), "--data", str(files["bank"]), "--listen", "nowhere"],
                          "HOST:PORT")]:
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err, err

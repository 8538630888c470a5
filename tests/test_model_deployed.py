"""Saved models across processes: each organisation saves and scores with its own part only.

Three party processes on 127.0.0.1 (``securevfl launch``, plaintext loopback to keep the test short;
the links are the same gRPC transport as with TLS). A model trained deployed scores the same in one
process as deployed, and a model trained in one process scores the same deployed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from deployed_threads import SPLITNN_JOB, loopback_federation_file
from org_tables import probabilities, training_and_new_tables

import securevfl
from securevfl.cli import main

PARTIES = ("bank", "shop", "clinic")


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> tuple[dict[str, Path], dict[str, Path]]:
    """(training files, new files): the new rows are a quarter of the customers, none trained on."""
    return training_and_new_tables(tmp_path_factory.mktemp("tables"))


def _federation(directory: Path, method: str, options: str = "") -> Path:
    return loopback_federation_file(directory, PARTIES, "bank", SPLITNN_JOB.replace("splitnn", method),
                                    f"[job.options]\n{options}", network="peer_timeout_s = 10\nheartbeat_s = 0.5",
                                    name=f"fed-{method}.toml")


def _launch(fed: Path, files: dict[str, Path], *args: str) -> int:
    data = [a for p in PARTIES for a in ("--data", f"{p}={files[p]}")]
    return main(["launch", str(fed), "--insecure", "--device", "cpu", "--timeout", "180", *data, *args])


@pytest.mark.parametrize("method, options", [  # EASTER and entity-aug: slow (20 s each; the suite's budget)
    ("splitnn", ""), pytest.param("easter", 'secagg = "dh"\nembedding_size = 16', marks=pytest.mark.slow),
    pytest.param("entity-aug", "", marks=pytest.mark.slow)], ids=["splitnn", "easter-dh", "entity-aug"])
def test_a_model_trained_deployed_scores_alike_deployed_and_in_one_process(tmp_path, tables, method, options,
                                                                           monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    train, new = tables
    fed = _federation(tmp_path, method, options)
    model = tmp_path / "model"
    assert _launch(fed, train, "--model-dir", str(model)) == 0
    assert sorted(p.name for p in model.iterdir()) == sorted(PARTIES)
    out = tmp_path / "predictions.csv"
    assert _launch(fed, new, "--predict", "--model-dir", str(model), "--out", str(out), "--exchange-rows", "50") == 0
    deployed = pd.read_csv(out)
    local = securevfl.predict(model, data={p: str(new[p]) for p in PARTIES}, device="cpu", exchange_rows=50)
    assert deployed.customer_id.tolist() == local.customer_id.tolist()
    assert deployed.customer_id.tolist() == [i for i in pd.read_csv(new["bank"]).customer_id
                                             if i in set(local.customer_id)]  # the active file's order
    np.testing.assert_allclose(probabilities(deployed), probabilities(local), atol=1e-6, rtol=0)
    assert (deployed.prediction == local.prediction).all()


@pytest.mark.slow  # suite budget: deployed scoring is checked by the deployed-trained model test above
def test_a_model_trained_in_one_process_scores_alike_deployed(tmp_path, tables, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    train, new = tables
    model = tmp_path / "model"
    securevfl.train("splitnn", data_files={p: str(train[p]) for p in PARTIES}, id_column="customer_id",
                    label_column="churn", epochs=2, batch_size=64, seed=0, device="cpu", model_dir=model)
    local = securevfl.predict(model, data={p: str(new[p]) for p in PARTIES}, device="cpu")
    out = tmp_path / "predictions.csv"
    assert _launch(_federation(tmp_path, "splitnn"), new, "--predict", "--model-dir", str(model),
                   "--out", str(out)) == 0
    deployed = pd.read_csv(out)
    assert deployed.customer_id.tolist() == local.customer_id.tolist()
    np.testing.assert_allclose(probabilities(deployed), probabilities(local), atol=1e-6, rtol=0)


def test_parts_of_two_models_never_score_together(tmp_path, tables, capfd):
    train, new = tables
    one, two = tmp_path / "one", tmp_path / "two"
    for model in (one, two):
        securevfl.train("splitnn", data_files={p: str(train[p]) for p in PARTIES}, id_column="customer_id",
                        label_column="churn", epochs=1, batch_size=64, seed=0, device="cpu", model_dir=model)
    shutil.rmtree(one / "shop")
    shutil.copytree(two / "shop", one / "shop")
    code = _launch(_federation(tmp_path, "splitnn"), new, "--predict", "--model-dir", str(one),
                   "--out", str(tmp_path / "p.csv"))
    assert code == 2
    output = capfd.readouterr()
    errors = [line for line in (output.out + output.err).splitlines() if "error:" in line]
    assert errors and any("shop holds a part of another model" in line for line in errors), errors
    assert not (tmp_path / "p.csv").exists()


def test_a_standalone_model_is_saved_and_scored_by_the_active_party_alone(tmp_path, tables, capsys, monkeypatch):
    """``local`` deployed: only the bank saves a part; the bank scores alone, without connecting."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    train, new = tables
    fed = _federation(tmp_path, "local")
    model = tmp_path / "model"
    assert _launch(fed, train, "--model-dir", str(model)) == 0
    assert [p.name for p in model.iterdir()] == ["bank"]  # the shop and the clinic hold nothing of it
    capsys.readouterr()
    out = tmp_path / "predictions.csv"
    # no peer is running: the bank scores on its own
    assert main(["party", "--federation", str(fed), "--as", "bank", "--insecure", "--device", "cpu", "--predict",
                 "--model-dir", str(model), "--data", str(new["bank"]), "--out", str(out),
                 "--exchange-rows", "50"]) == 0
    deployed = pd.read_csv(out)
    local = securevfl.predict(model, data={"bank": str(new["bank"])}, device="cpu")
    assert deployed.customer_id.tolist() == pd.read_csv(new["bank"]).customer_id.tolist()  # every row, file order
    np.testing.assert_allclose(probabilities(deployed), probabilities(local), atol=1e-6, rtol=0)
    capsys.readouterr()
    refusals = [["party", "--federation", str(fed), "--as", "shop", "--insecure", "--predict", "--model-dir",
                 str(model), "--data", str(new["shop"])],
                ["launch", str(fed), "--insecure", "--predict", "--model-dir", str(model),
                 *[a for p in PARTIES for a in ("--data", f"{p}={new[p]}")]]]
    for args in refusals:
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "the local model is the active party's alone" in err[0], err

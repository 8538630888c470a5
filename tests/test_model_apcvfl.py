"""APC-VFL's saved models (and VFedTrans's, local-logreg's): the fitted probe as a module, save and score.

``apcvfl``, ``apcvfl-ablation``, ``vfedtrans`` and ``local-logreg`` are standalone: the active party
keeps its student ``g3`` (none for ``local-logreg``) and the probe, and scores its own rows alone.
``apcvfl-splitnn`` is joint: the passive parties send the ``g1`` latents of the scored rows.

The oracle (tests/test_model_scoring.py): scoring a run's held-out rows with its saved model
reproduces the run's own test predictions to 1e-6, and so its metrics.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from deployed_threads import in_threads, loopback_federation_file, one_torch_thread
from net_helpers import free_port
from org_tables import organisation_frames, probabilities, rows_of, write_tables
from typer.testing import CliRunner

import securevfl
from securevfl.cli import app
from securevfl.errors import ConfigError, ModelError
from securevfl.eval import task_metrics
from securevfl.methods.apcvfl.probe import LogisticProbe, fit_probe
from securevfl.model.scoring import load_model
from securevfl.model.store import MANIFEST
from securevfl.pipeline.score import score

PARTIES = ("bank", "shop", "clinic")
#: Small encoders and two epochs per autoencoder: the file runs in seconds.
APC = {"max_epochs": 2, "active_encoder": "16,32", "passive_encoder": "16,32", "joint_encoder": "32,16",
       "student_encoder": "32,16"}
OPTIONS = {"apcvfl": APC, "apcvfl-ablation": APC, "apcvfl-splitnn": APC, "local-logreg": {},
           "vfedtrans": {"max_epochs": 2, "student_hidden": "32"}}
STANDALONE = ("apcvfl", "apcvfl-ablation", "vfedtrans", "local-logreg")


@pytest.fixture(scope="module", autouse=True)
def torch_on_one_thread():
    with one_torch_thread():  # tiny models on a shared 2-core machine: intra-op threads only contend
        yield


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    return write_tables(organisation_frames(5), tmp_path_factory.mktemp("tables"))


def _train(files, model_dir, method, parties=PARTIES):
    return securevfl.train(method, data_files={p: str(files[p]) for p in parties}, id_column="customer_id",
                           label_column="churn", epochs=2, batch_size=64, seed=0, device="cpu",
                           options=OPTIONS[method], model_dir=model_dir)


# ------------------------------------------------------------------ the probe as a module


def _labelled(seed: int, n: int, d: int, classes: list[int], dtype) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    Z = (rng.normal(size=(n, d)) * rng.uniform(0.5, 4, d) + rng.normal(size=d)).astype(dtype)
    y = np.asarray(classes)[(Z[:, 0] + Z[:, 1] + rng.normal(size=n)).argsort().argsort() * len(classes) // n]
    return Z, y


@pytest.mark.parametrize("classes, n_classes", [([0, 1], 2), ([0, 1, 2, 3], 4), ([1, 3], 5), ([0, 2, 4], 5)],
                         ids=["binary", "multiclass", "binary-of-5", "three-of-5"])
def test_the_probe_module_reproduces_the_pipeline(classes, n_classes):
    """Sigmoid for two seen classes, softmax for more; unseen classes get 0 (probe_scores' rule)."""
    Z, y = _labelled(1, 400, 7, classes, np.float64)
    fitted = fit_probe(Z[:300], y[:300], n_classes, c=0.5)
    module = fitted.module()
    got = module(torch.from_numpy(Z[300:])).numpy()
    assert got.dtype == np.float64 and got.shape == (100, n_classes)
    np.testing.assert_allclose(got, fitted.scores(Z[300:]), atol=1e-9, rtol=0)
    absent = sorted(set(range(n_classes)) - set(classes))
    assert (got[:, absent] == 0).all() and np.allclose(got.sum(axis=1), 1.0)
    # a float32 fit (the latents of an autoencoder) computes in float32, as scikit-learn does
    Z32 = Z.astype(np.float32)
    fitted32 = fit_probe(Z32[:300], y[:300], n_classes)
    np.testing.assert_allclose(fitted32.module()(torch.from_numpy(Z32[300:])).numpy(), fitted32.scores(Z32[300:]),
                               atol=1e-6, rtol=0)


def test_a_saved_probe_is_rebuilt_from_its_weights_alone():
    Z, y = _labelled(2, 200, 5, [0, 1, 2], np.float64)
    module = fit_probe(Z, y, 3).module()
    weights = {k: v.clone() for k, v in module.state_dict().items()}
    assert {k: v.dtype for k, v in weights.items()} == {"mean": torch.float64, "scale": torch.float64,
                                                        "coef": torch.float64, "intercept": torch.float64,
                                                        "seen": torch.int64}
    rebuilt = LogisticProbe.shaped_like(weights, 3)
    rebuilt.load_state_dict(weights)
    assert torch.equal(rebuilt(torch.from_numpy(Z)), module(torch.from_numpy(Z)))
    with pytest.raises(ModelError, match="malformed"):
        LogisticProbe.shaped_like({"coef": weights["coef"]}, 3)
    with pytest.raises(ModelError, match="malformed"):
        LogisticProbe.shaped_like(weights, 2)  # three seen classes: not a model of two
    bad = LogisticProbe.shaped_like(weights, 3)
    bad.load_state_dict({**weights, "seen": torch.tensor([0, 1, 5])})
    with pytest.raises(ModelError, match="class 5 of a model of 3 classes"):
        bad(torch.from_numpy(Z))


# ------------------------------------------------------------------ save, then score the held-out rows


@pytest.mark.parametrize("method", [*STANDALONE, "apcvfl-splitnn"])
def test_scoring_the_held_out_rows_reproduces_the_runs_test_predictions(tmp_path, files, method):
    model = tmp_path / "model"
    report = _train(files, model, method)
    held_out = report.test_predictions
    standalone = method in STANDALONE
    parties = ("bank",) if standalone else PARTIES
    new = rows_of(files, tmp_path / "new", held_out["ids"], parties)
    predictions = securevfl.predict(model, data=new, id_column="customer_id", device="cpu", exchange_rows=37)
    expected = dict(zip(held_out["ids"], held_out["scores"], strict=True))
    assert sorted(predictions.customer_id) == sorted(held_out["ids"])
    np.testing.assert_allclose(probabilities(predictions), np.stack([expected[i] for i in predictions.customer_id]),
                               atol=1e-6, rtol=0)
    metrics = task_metrics("classification", held_out["y_true"], held_out["scores"])
    for key in ("accuracy", "auc", "f1"):
        assert predictions.attrs["metrics"][key] == pytest.approx(metrics[key], abs=1e-9), key
        assert metrics[key] == report.metrics[key]
    assert predictions.customer_id.tolist() == pd.read_csv(new["bank"]).customer_id.tolist()  # the file's order
    # what each party saved
    assert sorted(os.listdir(model)) == sorted(parties)
    saved = load_model(model)
    manifest = saved.manifests["bank"]
    assert manifest.standalone is standalone and manifest.parties == {p: ("active" if p == "bank" else "passive")
                                                                      for p in parties}
    modules = {k.split(".")[0] for k in saved.sides["bank"].weights}
    assert modules == {"local-logreg": {"probe"}, "apcvfl-splitnn": {"g1", "g2", "probe"}}.get(method, {"g3", "probe"})
    if standalone:
        learns = manifest.extra["learns"]
        assert "saved nothing and take no part in scoring" in learns
        # what the passive parties did in training, as it was
        took_part = {"apcvfl": "sent it the g1 latents", "vfedtrans": "FedSVD"}.get(method, "took no part in training")
        assert took_part in learns
        with pytest.raises(ConfigError, match="give only bank's file; shop take") as refused:
            score(model, {"bank": new["bank"], "shop": str(files["shop"])}, device="cpu")
        assert "\n" not in str(refused.value)
    else:
        assert {k.split(".")[0] for k in saved.sides["shop"].weights} == {"g1"}
        assert saved.sides["shop"].objective is None and "learns" not in manifest.extra


def test_a_joint_model_refuses_scoring_without_a_passive_party(tmp_path, files):
    model = tmp_path / "model"
    _train(files, model, "apcvfl-splitnn", parties=("bank", "shop"))
    with pytest.raises(ConfigError, match="no data for shop"):
        score(model, {"bank": files["bank"]}, device="cpu")
    side = json.loads((model / "bank" / MANIFEST).read_text())["extra"]["side"]
    assert side["passive_latents"] == [["shop", 32]]  # the widths g2 reads, in training's order


# ------------------------------------------------------------------ the command line


def test_train_then_predict_from_the_command_line(tmp_path, files):
    runner = CliRunner()
    model = tmp_path / "model"
    options = [a for k, v in APC.items() for a in ("--option", f"{k}={v}")]
    result = runner.invoke(app, ["train", "--method", "apcvfl", "--epochs", "2", "--batch-size", "64", "--device",
                                 "cpu", "--quiet", "--id-column", "customer_id", "--label-column", "churn",
                                 "--model-dir", str(model), "--report", str(tmp_path / "run.json"), *options,
                                 *[a for p in PARTIES for a in ("--data", f"{p}={files[p]}")]])
    assert result.exit_code == 0, result.output
    assert "standalone" in result.output and sorted(os.listdir(model)) == ["bank"]
    out = tmp_path / "predictions.csv"
    result = runner.invoke(app, ["predict", "--model-dir", str(model), "--data", f"bank={files['bank']}",
                                 "--id-column", "customer_id", "--out", str(out), "--quiet", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    assert list(frame.columns) == ["customer_id", "prediction", "proba_no", "proba_yes"]
    assert frame.customer_id.tolist() == pd.read_csv(files["bank"]).customer_id.tolist()  # every row, file order


# ------------------------------------------------------------------ deployed, parties in threads


def _job(method: str, options: dict) -> tuple[str, str]:
    job = (f'method = "{method}"\nepochs = 2\nbatch_size = 64\nseed = 0\n'
           'id_column = "customer_id"\nlabel_column = "churn"')
    return job, "[job.options]\n" + "\n".join(f"{k} = {json.dumps(v)}" for k, v in options.items())


def test_a_joint_model_trained_deployed_scores_alike_deployed_and_in_one_process(tmp_path, files):
    from securevfl.deploy.federation_file import load_federation
    from securevfl.pipeline.score import run_deployed_scoring
    from securevfl.pipeline.train import run_deployed_party

    job, options = _job("apcvfl-splitnn", APC)
    fed = load_federation(loopback_federation_file(tmp_path, PARTIES, "bank", job, options))
    model = tmp_path / "model"
    in_threads(lambda p: run_deployed_party(fed, p, files[p], device="cpu", model_dir=model), PARTIES)
    assert sorted(os.listdir(model)) == sorted(PARTIES)
    ids = pd.read_csv(files["bank"]).customer_id.iloc[::3]
    new = rows_of(files, tmp_path / "new", ids)
    scored = in_threads(lambda p: run_deployed_scoring(fed, p, new[p], model, exchange_rows=50, device="cpu"), PARTIES)
    deployed = scored["bank"].predictions
    assert scored["shop"].predictions is None and scored["clinic"].predictions is None
    local = securevfl.predict(model, data=new, device="cpu", exchange_rows=50)
    assert deployed.customer_id.tolist() == local.customer_id.tolist()
    np.testing.assert_allclose(probabilities(deployed), probabilities(local), atol=1e-6, rtol=0)
    # the passive parties sent their latents, one message per batch, and received nothing
    snapshots = scored["bank"].snapshots
    batches = -(-len(local) // 50)
    assert {p: snapshots[p].messages for p in ("shop", "clinic")} == {p: {f"{p}->bank": batches}
                                                                      for p in ("shop", "clinic")}
    assert snapshots["bank"].messages == {}


def test_a_standalone_model_with_helpers_is_saved_and_scored_by_the_active_party_alone(tmp_path, files):
    """VFedTrans deployed: the key generator, the server and the passive parties save nothing."""
    from securevfl.deploy.federation_file import load_federation
    from securevfl.pipeline.score import run_deployed_scoring
    from securevfl.pipeline.train import run_deployed_party

    job, options = _job("vfedtrans", OPTIONS["vfedtrans"])
    helpers = "\n".join(f'[parties.{h}]\naddress = "127.0.0.1:{free_port()}"\ndata = false\n' for h in ("keygen",
                                                                                                          "server"))
    fed = load_federation(loopback_federation_file(tmp_path, ("bank", "shop"), "bank", job, f"{helpers}\n{options}"))
    model = tmp_path / "model"
    data = {"bank": files["bank"], "shop": files["shop"], "keygen": None, "server": None}
    in_threads(lambda p: run_deployed_party(fed, p, data[p], device="cpu", model_dir=model), tuple(data))
    assert os.listdir(model) == ["bank"]
    deployed = run_deployed_scoring(fed, "bank", files["bank"], model, device="cpu").predictions
    local = securevfl.predict(model, data={"bank": str(files["bank"])}, device="cpu")
    assert deployed.customer_id.tolist() == pd.read_csv(files["bank"]).customer_id.tolist()
    np.testing.assert_allclose(probabilities(deployed), probabilities(local), atol=1e-6, rtol=0)
    with pytest.raises(ConfigError, match="the vfedtrans model is the active party's alone"):
        run_deployed_scoring(fed, "shop", files["shop"], model, device="cpu")

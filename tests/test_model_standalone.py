"""A standalone model: ``local`` trains the active party's model alone, so only the active party saves
a part, and scoring needs only its file — no passive party, no PSI, no network.

The oracle is the same as for the split models (tests/test_model_scoring.py): scoring the run's
held-out rows with the saved model reproduces the run's own test predictions to 1e-6.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from org_tables import organisation_frames, probabilities, write_tables
from typer.testing import CliRunner

import securevfl
from securevfl.cli import app, main
from securevfl.errors import ConfigError, ModelError
from securevfl.eval import task_metrics
from securevfl.model.scoring import load_model
from securevfl.model.store import MANIFEST, PartManifest
from securevfl.pipeline.score import score

PARTIES = ("bank", "shop")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """Breast Cancer as two organisations' tables; the bank holds the labels and a category column."""
    frames = organisation_frames(3, split={"bank": slice(0, 8), "shop": slice(8, 30)}, categories={"bank": "tier"})
    return write_tables(frames, tmp_path_factory.mktemp("tables"))


def _train(files, model_dir, method="local", **kwargs):
    return securevfl.train(method, data_files={p: str(files[p]) for p in PARTIES}, id_column="customer_id",
                           label_column="churn", epochs=3, batch_size=64, seed=0, device="cpu",
                           model_dir=model_dir, **kwargs)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, files):
    directory = tmp_path_factory.mktemp("standalone") / "model"
    return directory, _train(files, directory)


def _bank_rows(files, path: Path, ids) -> str:
    frame = pd.read_csv(files["bank"])
    frame = frame[frame.customer_id.isin(set(ids))].sample(frac=1.0, random_state=1)
    frame.to_csv(path, index=False)
    return str(path)


@pytest.mark.parametrize("batch", [37, 4096])
def test_the_active_file_alone_reproduces_the_runs_test_predictions(tmp_path, files, trained, batch):
    directory, report = trained
    held_out = report.test_predictions
    new = _bank_rows(files, tmp_path / "bank.csv", held_out["ids"])
    predictions = securevfl.predict(directory, data={"bank": new}, device="cpu", exchange_rows=batch)
    expected = dict(zip(held_out["ids"], held_out["scores"], strict=True))
    np.testing.assert_allclose(probabilities(predictions), np.stack([expected[i] for i in predictions.customer_id]),
                               atol=1e-6, rtol=0)
    metrics = task_metrics("classification", held_out["y_true"], held_out["scores"])
    for key in ("accuracy", "auc", "f1"):
        assert predictions.attrs["metrics"][key] == pytest.approx(metrics[key], abs=1e-9)
        assert metrics[key] == report.metrics[key]
    assert predictions.customer_id.tolist() == pd.read_csv(new).customer_id.tolist()  # the file's order


def test_only_the_active_party_saves_a_part_marked_standalone(trained):
    directory, report = trained
    assert sorted(os.listdir(directory)) == ["bank"]  # the shop holds nothing of the model
    model = load_model(directory)
    assert list(model.parts) == ["bank"] and model.active == "bank" and model.data_parties == ("bank",)
    manifest = model.manifests["bank"]
    assert manifest.standalone and manifest.parties == {"bank": "active"} and manifest.method == "local"
    assert sorted(model.parts["bank"].files) == ["preprocessing.skops", "weights.safetensors"]
    assert "shop" not in (directory / "bank" / MANIFEST).read_text()
    card = (directory / "bank" / "MODEL.md").read_text()
    assert "the active party's model alone" in card and "took no part" in card


def test_every_row_of_the_active_file_is_scored_without_labels_or_any_other_party(tmp_path, files, trained):
    directory, _ = trained
    bank = pd.read_csv(files["bank"]).drop(columns=["churn"]).iloc[::2]
    bank.loc[bank.index[:4], "tier"] = "z"  # an unseen category: encoded as in training, never an error
    bank.to_csv(tmp_path / "bank.csv", index=False)
    scored = score(directory, {"bank": tmp_path / "bank.csv"}, device="cpu")
    assert scored.rows == {"bank": len(bank), "scored": len(bank)} and scored.metrics == {}
    assert scored.predictions.customer_id.tolist() == bank.customer_id.tolist()
    assert np.allclose(probabilities(scored.predictions).sum(axis=1), 1.0)


def test_a_passive_file_is_refused_with_one_line(tmp_path, files, trained):
    directory, _ = trained
    with pytest.raises(ConfigError, match="bank's alone .*give only bank's file; shop take"):
        score(directory, {"bank": files["bank"], "shop": files["shop"]}, device="cpu")
    with pytest.raises(ConfigError, match="give only bank's file"):
        score(directory, {"shop": files["shop"]}, device="cpu")


def test_a_standalone_manifest_lists_only_its_active_party():
    base = dict(party="bank", role="active", method="local", job_fingerprint="ab" * 32, task="regression",
                standalone=True)
    PartManifest(parties={"bank": "active"}, **base)
    with pytest.raises(ModelError, match="standalone model is the active party's alone"):
        PartManifest(parties={"bank": "active", "shop": "passive"}, **base)
    with pytest.raises(ModelError, match="standalone model is the active party's alone"):
        PartManifest(**{**base, "party": "shop", "role": "passive"}, parties={"shop": "passive", "bank": "active"})


def test_a_split_model_replaced_by_a_standalone_one_leaves_no_doubt(tmp_path, files):
    directory = tmp_path / "model"
    _train(files, directory, "splitnn")
    report = _train(files, directory, overwrite_model=True)  # the shop's old part stays, not of this model
    assert sorted(os.listdir(directory)) == ["bank", "shop"]
    model = load_model(directory)
    assert list(model.parts) == ["bank"] and model.method == "local"
    new = _bank_rows(files, tmp_path / "bank.csv", report.test_predictions["ids"])
    assert len(securevfl.predict(directory, data={"bank": new}, device="cpu")) == len(report.test_predictions["ids"])
    # a standalone part beside another model's active part: which model is meant is unclear
    other = tmp_path / "other"
    _train(files, other, "splitnn")
    shutil.copytree(directory / "bank", other / "zed")  # as if a standalone model of a party zed
    manifest = (other / "zed" / MANIFEST).read_text().replace('"bank"', '"zed"')
    (other / "zed" / MANIFEST).write_text(manifest)
    with pytest.raises(ModelError, match="more than one model"):
        load_model(other)


def test_train_then_predict_from_the_command_line(tmp_path, files, capsys):
    runner = CliRunner()
    model = tmp_path / "model"
    result = runner.invoke(app, ["train", "--method", "local", "--epochs", "2", "--device", "cpu", "--quiet",
                                 "--id-column", "customer_id", "--label-column", "churn", "--model-dir", str(model),
                                 "--report", str(tmp_path / "run.json"),
                                 *[a for p in PARTIES for a in ("--data", f"{p}={files[p]}")]])
    assert result.exit_code == 0, result.output
    assert "standalone" in result.output and sorted(os.listdir(model)) == ["bank"]
    out = tmp_path / "predictions.csv"
    result = runner.invoke(app, ["predict", "--model-dir", str(model), "--out", str(out), "--quiet", "--device",
                                 "cpu", "--data", f"bank={files['bank']}"])
    assert result.exit_code == 0, result.output
    assert len(pd.read_csv(out)) == len(pd.read_csv(files["bank"]))
    assert main(["predict", "--model-dir", str(model), "--out", str(tmp_path / "p2.csv"),
                 *[a for p in PARTIES for a in ("--data", f"{p}={files[p]}")]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "give only bank's file" in err[0], err

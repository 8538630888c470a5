"""Models that outlive the run: every party saves its own part, and the parties score new rows together.

The oracle: scoring a run's held-out rows with its saved model reproduces the run's own test
predictions (probabilities to 1e-6) and so its test metrics. Bad input is refused before any
work, with one line naming what is wrong.
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from org_tables import organisation_frames, probabilities, rows_of, write_tables
from typer.testing import CliRunner

import securevfl
from securevfl.cli import app, main
from securevfl.errors import ConfigError, DataError, ModelError, PartyFailure, ProtocolError
from securevfl.eval import task_metrics
from securevfl.model.scoring import load_model
from securevfl.model.store import MANIFEST
from securevfl.pipeline.score import score

PARTIES = ("bank", "shop", "clinic")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """Three organisations' tables; the shop also has a text column."""
    return write_tables(organisation_frames(5, categories={"shop": "segment"}), tmp_path_factory.mktemp("tables"))


def _train(files, model_dir, method="splitnn", options=None, **kwargs):
    return securevfl.train(method, data_files={p: str(files[p]) for p in PARTIES}, id_column="customer_id",
                           label_column="churn", epochs=2, batch_size=64, seed=0, device="cpu",
                           options=options or {}, model_dir=model_dir, **kwargs)


def _rows(files, directory: Path, ids, drop: dict[str, list[str]] | None = None, parties=PARTIES) -> dict[str, str]:
    """Each party's file cut to ``ids`` (the held-out rows), in a shuffled order of its own."""
    new = rows_of(files, directory, ids, parties)
    for p, columns in (drop or {}).items():
        pd.read_csv(new[p]).drop(columns=columns).to_csv(new[p], index=False)
    return new


#: (method, options, scoring batch). 37 rows: batches that do not divide the held-out rows. C-VFL
#: compresses each message with the message's own scale, so its scores depend on the batch, and
#: TabVFL's ghost batch norm sums in another order per batch (1.3e-6 apart at 37 rows): for those
#: the oracle is checked with one batch carrying every held-out row, as the run's test evaluation.
ENGINE_METHODS = [("splitnn", {}, 37), ("cvfl", {}, 4096), ("aggvfl", {}, 37),
                  ("easter", {"secagg": "dh", "embedding_size": 16}, 37), ("pyvertical", {}, 37),
                  ("tabvfl", {}, 4096), ("tabvfl-le", {}, 4096), ("tabnet-lt", {}, 37), ("tabnet-ct", {}, 4096),
                  ("entity-aug", {}, 37)]


@pytest.mark.parametrize("method, options, batch", ENGINE_METHODS, ids=[m for m, _, _ in ENGINE_METHODS])
def test_scoring_the_held_out_rows_reproduces_the_runs_test_predictions(tmp_path, files, method, options, batch):
    report = _train(files, tmp_path / "model", method, options)
    held_out = report.test_predictions
    new = _rows(files, tmp_path / "new", held_out["ids"])
    predictions = securevfl.predict(tmp_path / "model", data=new, id_column="customer_id", device="cpu",
                                    exchange_rows=batch)
    assert len(predictions) == len(held_out["ids"])
    expected = dict(zip(held_out["ids"], held_out["scores"], strict=True))
    got = probabilities(predictions)
    np.testing.assert_allclose(got, np.stack([expected[i] for i in predictions.customer_id]), atol=1e-6, rtol=0)
    # the run's metrics of these scores (EASTER's headline averages every party's own model instead)
    expected_metrics = task_metrics("classification", held_out["y_true"], held_out["scores"])
    for key in ("accuracy", "auc", "f1"):
        assert predictions.attrs["metrics"][key] == pytest.approx(expected_metrics[key], abs=1e-9), key
        if method != "easter":
            assert expected_metrics[key] == report.metrics[key]
    # the active party's file order, class names as written in the label column
    assert predictions.customer_id.tolist() == pd.read_csv(new["bank"]).customer_id.tolist()
    assert set(predictions.prediction) <= {"no", "yes"}


def test_entity_aug_saves_its_widths_not_its_queues_and_scores_a_label_only_host(tmp_path, files):
    """The host's top model is built from the guests' activation widths (2 with the paper's Credit Card
    shapes): the manifest keeps them; no activation queue or entity key is saved; forged widths are refused."""
    frames = {p: pd.read_csv(files[p]) for p in PARTIES}
    frames["bank"] = frames["bank"][["customer_id", "churn"]]  # labels only: the paper's host
    paths = {}
    for p, f in frames.items():
        paths[p] = tmp_path / f"{p}.csv"
        f.to_csv(paths[p], index=False)
    report = _train(paths, tmp_path / "model", "entity-aug", {"arch": "credit-card"})
    model = load_model(tmp_path / "model")
    assert model.manifests["bank"].extra["side"] == {"widths": {"shop": 2, "clinic": 2}}
    assert model.manifests["shop"].extra["side"] == {}
    assert sorted(model.sides["bank"].weights) == ["top"]  # no bottom without features, no queue
    assert sorted(model.sides["shop"].weights) == ["bottom"]
    new = _rows(paths, tmp_path / "new", report.test_predictions["ids"])
    predictions = securevfl.predict(model, data=new, device="cpu", exchange_rows=37)
    expected = dict(zip(report.test_predictions["ids"], report.test_predictions["scores"], strict=True))
    np.testing.assert_allclose(probabilities(predictions), np.stack([expected[i] for i in predictions.customer_id]),
                               atol=1e-6, rtol=0)
    manifest_path = tmp_path / "model" / "bank" / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    for widths, match, error in (
            ({"shop": 2}, "positive activation width for each of clinic, shop", ModelError),
            ({"shop": 2, "clinic": 3}, "saved weights do not fit its model here", ModelError),
            ({"shop": 1, "clinic": 3}, "shop sent an embedding of width 2; its activations had 1", ProtocolError)):
        manifest["extra"]["side"] = {"widths": widths}
        manifest_path.write_text(json.dumps(manifest))
        with pytest.raises(PartyFailure, match=match) as failed:
            score(tmp_path / "model", new, device="cpu")
        assert isinstance(failed.value.cause, error) and failed.value.party == "bank"


def test_each_party_saves_only_its_own_part(tmp_path, files):
    report = _train(files, tmp_path / "model")
    model = load_model(tmp_path / "model")
    assert sorted(model.parts) == sorted(PARTIES) and model.active == "bank"
    for party, part in model.parts.items():
        m = part.manifest
        assert m.party == party and m.method == "splitnn"
        assert m.job_fingerprint == model.manifests["bank"].job_fingerprint
        kept = ["training_ids.safetensors"] if party != "bank" else []  # a passive party's, for --serve-ids
        assert sorted(part.files) == sorted(["preprocessing.skops", "weights.safetensors", *kept])
        schema = m.schema
        assert schema["id_column"] == "customer_id"
        assert set(schema["inputs"]) == set(pd.read_csv(files[party]).columns) - {"customer_id", "churn"}
        names = {"bank": "mean radius", "shop": "segment", "clinic": "worst area"}
        others = [n for p, n in names.items() if p != party]
        text = (part.path / "weights.safetensors").read_bytes() + (part.path / MANIFEST).read_bytes()
        assert not any(n.encode() in text for n in others), party  # no other party's columns
    assert model.manifests["bank"].classes == ["no", "yes"] and model.manifests["shop"].classes == []
    card = (tmp_path / "model" / "bank" / "MODEL.md").read_text()
    assert "splitnn" in card and f"{report.metrics['accuracy']:.4f}"[:4] in card


def test_new_categories_blanks_and_rows_outside_the_intersection_are_handled(tmp_path, files):
    _train(files, tmp_path / "model")
    new = _rows(files, tmp_path / "new", [f"c{i:04d}" for i in range(0, 569, 3)])
    shop = pd.read_csv(new["shop"])
    shop.loc[shop.index[:5], "segment"] = "platinum"  # never seen in training
    shop.loc[shop.index[5:8], "segment"] = np.nan
    shop.loc[shop.index[8:10], shop.columns[2]] = np.nan
    shop.to_csv(new["shop"], index=False)
    bank = pd.read_csv(new["bank"]).drop(columns=["churn"])  # no labels: no metrics
    extra = pd.DataFrame({"customer_id": ["zz-1", "zz-2"], **{c: [0.5, 0.6] for c in bank.columns[1:]}})
    pd.concat([bank, extra]).to_csv(new["bank"], index=False)
    scored = score(tmp_path / "model", new, device="cpu")  # every row of the bank's file (trained on every row)
    shared = set(bank.customer_id) & set(shop.customer_id) & set(pd.read_csv(new["clinic"]).customer_id)
    assert set(scored.predictions.customer_id) == {*bank.customer_id, "zz-1", "zz-2"}
    who = scored.predictions.set_index("customer_id").parties
    assert who["zz-1"] == "bank" and set(who[list(shared)]) == {"bank+shop+clinic"}
    assert scored.metrics == {} and scored.rows["scored"] == scored.rows["bank"] == len(bank) + 2
    assert np.isfinite(probabilities(scored.predictions)).all()
    only = score(tmp_path / "model", new, device="cpu", require_all_parties=True)  # the rows every party holds
    assert set(only.predictions.customer_id) == shared and only.rows["scored"] == len(shared)


def test_a_regression_model_predicts_values_on_the_training_scale(tmp_path, files):
    frames = {p: pd.read_csv(files[p]) for p in PARTIES}
    target = frames["bank"]["mean radius"] * 3.0 + 100.0
    frames["bank"] = frames["bank"].drop(columns=["mean radius", "churn"]).assign(churn=target)
    paths = {}
    for p, f in frames.items():
        paths[p] = tmp_path / f"{p}.csv"
        f.to_csv(paths[p], index=False)
    report = _train(paths, tmp_path / "model", task="regression")
    new = _rows(paths, tmp_path / "new", report.test_predictions["ids"])
    predictions = securevfl.predict(tmp_path / "model", data=new, device="cpu")
    expected = dict(zip(report.test_predictions["ids"], report.test_predictions["scores"], strict=True))
    np.testing.assert_allclose(predictions.prediction, [expected[i] for i in predictions.customer_id], atol=1e-6)
    assert predictions.attrs["metrics"]["rmse"] == pytest.approx(report.metrics["rmse"], abs=1e-9)
    assert list(predictions.columns) == ["customer_id", "prediction", "parties"]


# ------------------------------------------------------------------ refusals, before any work


@pytest.fixture(scope="module")
def saved(tmp_path_factory, files) -> Path:
    directory = tmp_path_factory.mktemp("saved") / "model"
    _train(files, directory)
    return directory


def _copy(saved: Path, tmp_path: Path) -> Path:
    import shutil

    target = tmp_path / "model"
    shutil.copytree(saved, target)
    return target


def test_every_method_saves_and_one_that_cannot_is_refused_before_training(tmp_path, files, monkeypatch):
    from securevfl.methods import method_names
    from securevfl.methods.splitnn import SplitNN
    from securevfl.model.saving import savable_methods

    assert savable_methods() == method_names()
    monkeypatch.setattr(SplitNN, "cannot_save", "its parts are being reworked")
    with pytest.raises(ConfigError, match="splitnn cannot save a model yet .*its parts are being reworked"):
        _train(files, tmp_path / "splitnn")
    assert not (tmp_path / "splitnn").exists()


def test_a_used_model_dir_is_refused_before_training_unless_overwrite(tmp_path, files, saved):
    model = _copy(saved, tmp_path)
    before = (model / "bank" / MANIFEST).read_bytes()
    with pytest.raises(ModelError, match="already holds a model .*--overwrite-model"):
        _train(files, model)
    assert (model / "bank" / MANIFEST).read_bytes() == before
    _train(files, model, overwrite_model=True)
    assert (model / "bank" / MANIFEST).read_bytes() != before


def test_a_tampered_or_truncated_file_is_refused(tmp_path, files, saved):
    model = _copy(saved, tmp_path)
    weights = model / "shop" / "weights.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="weights.safetensors"):
        load_model(model)
    weights.write_bytes(bytes(data[:100]))
    with pytest.raises(ModelError, match="weights.safetensors"):
        load_model(model)


def test_a_missing_part_or_a_part_of_another_model_is_refused(tmp_path, files, saved):
    import shutil

    model = _copy(saved, tmp_path)
    shutil.rmtree(model / "clinic")
    with pytest.raises(ModelError, match="clinic"):
        load_model(model)
    other = tmp_path / "other"
    _train(files, other)
    shutil.copytree(other / "clinic", model / "clinic")  # the same job, another run
    with pytest.raises(ModelError, match="clinic"):
        load_model(model)


def test_an_incompatible_format_is_refused(tmp_path, saved):
    model = _copy(saved, tmp_path)
    manifest = json.loads((model / "bank" / MANIFEST).read_text())
    manifest["format_version"] = 99
    (model / "bank" / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ModelError, match="incompatible securevfl"):
        load_model(model)


def test_a_new_file_missing_a_column_or_with_a_column_of_another_type_is_refused(tmp_path, files, saved):
    ids = [f"c{i:04d}" for i in range(100)]
    new = _rows(files, tmp_path / "a", ids, drop={"clinic": ["worst area"]})
    with pytest.raises(DataError, match="'worst area' of the trained model is missing"):
        score(saved, new, device="cpu")
    new = _rows(files, tmp_path / "b", ids)
    clinic = pd.read_csv(new["clinic"])
    clinic["worst area"] = "big"
    clinic.to_csv(new["clinic"], index=False)
    with pytest.raises(DataError, match="'worst area' was numeric in training and is categorical here"):
        score(saved, new, device="cpu")
    with pytest.raises(ConfigError, match="no data for clinic"):
        score(saved, {p: new[p] for p in ("bank", "shop")}, device="cpu")


def test_loading_a_model_never_runs_code_from_its_files(tmp_path, saved):
    import hashlib

    model = _copy(saved, tmp_path)
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    blob = pickle.dumps(Payload())
    path = model / "shop" / "preprocessing.skops"
    path.write_bytes(blob)
    manifest = json.loads((model / "shop" / MANIFEST).read_text())
    manifest["files"]["preprocessing.skops"] = hashlib.sha256(blob).hexdigest()  # a consistent forgery
    (model / "shop" / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ModelError, match="preprocessing.skops"):
        load_model(model)
    assert not marker.exists()


# ------------------------------------------------------------------ the command line


def test_train_then_predict_from_the_command_line(tmp_path, files):
    runner = CliRunner()
    model = tmp_path / "model"
    args = ["train", "--method", "splitnn", "--epochs", "2", "--batch-size", "64", "--device", "cpu", "--quiet",
            "--id-column", "customer_id", "--label-column", "churn", "--report", str(tmp_path / "run.json"),
            "--model-dir", str(model), *[a for p in PARTIES for a in ("--data", f"{p}={files[p]}")]]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert sorted(os.listdir(model)) == sorted(PARTIES)
    out = tmp_path / "predictions.csv"
    result = runner.invoke(app, ["predict", "--model-dir", str(model), "--out", str(out), "--quiet",
                                 "--report", str(tmp_path / "score.json"), "--device", "cpu",
                                 *[a for p in PARTIES for a in ("--data", f"{p}={files[p]}")]])
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    assert list(frame.columns) == ["customer_id", "prediction", "proba_no", "proba_yes", "parties"]
    written = json.loads((tmp_path / "score.json").read_text())
    assert written["rows"]["scored"] == len(frame) and 0.5 < written["metrics"]["accuracy"] <= 1.0


def test_predict_errors_are_one_line_and_exit_2(tmp_path, files, saved, capsys):
    data = [a for p in PARTIES for a in ("--data", f"{p}={files[p]}")]
    cases = [
        (["predict", "--model-dir", str(tmp_path / "nowhere"), *data], "no model directory"),
        (["predict", "--model-dir", str(saved), "--out", str(tmp_path), *data], "cannot write predictions file"),
        (["predict", "--model-dir", str(saved), "--data", f"bank={files['bank']}"], "no data for"),
    ]
    for args, expected in cases:
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:") and expected in err[0], err


def test_the_model_card_is_complete(tmp_path):
    """Training settings, every input column, no blank option, the selection, the limits (issue 46)."""
    from securevfl.cli import main

    out = tmp_path / "m"
    assert main(["train", "--method", "splitnn", "--parties", "3", "--epochs", "1", "--select", "iv>=0.3",
                 "--model-dir", str(out), "--quiet", "--report", str(tmp_path / "r.json")]) == 0
    card = (out / "active" / "MODEL.md").read_text()
    for heading in ("## Training settings", "## Columns selected before training (--select iv>=0.3)", "## Limits"):
        assert heading in card, heading
    assert "- epochs: 1" in card and "- batch_size: 128" in card and "- early_stopping: 10" in card
    assert not [line for line in card.splitlines() if line.rstrip().endswith(":")]  # no blank value
    assert "..." not in card.split("## Inputs of active", 1)[1].split("##", 1)[0]  # nothing cut

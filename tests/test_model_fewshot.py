"""fewshot-vfl saves a model and scores new rows: in one process, and deployed across parties.

The active party (the bank) holds the label and no feature column; the shop and the clinic hold the
features. Each passive party keeps its extractor, the active party its final classifier. The oracle: scoring a
run's held-out rows with its saved model reproduces the run's test predictions (1e-6) and metrics.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from deployed_threads import in_threads, loopback_federation_file
from org_tables import organisation_frames, probabilities, rows_of, write_tables

import securevfl
from securevfl.model.scoring import load_model

PARTIES = ("bank", "shop", "clinic")
#: The bank holds only the IDs and the label (fewshot-vfl's active party has no features).
SPLIT = {"bank": slice(0, 0), "shop": slice(0, 15), "clinic": slice(15, 30)}
OPTIONS = {"active_epochs": 5, "mu": 2}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    return write_tables(organisation_frames(5, split=SPLIT), tmp_path_factory.mktemp("tables"))


@pytest.mark.parametrize("variant", ["one-shot", "few-shot"])
def test_scoring_the_held_out_rows_reproduces_the_runs_test_predictions(tmp_path, files, variant):
    model = tmp_path / "model"
    report = securevfl.train("fewshot-vfl", data_files={p: str(files[p]) for p in PARTIES}, id_column="customer_id",
                             label_column="churn", epochs=2, batch_size=64, seed=0, device="cpu",
                             options={**OPTIONS, "variant": variant}, model_dir=model)
    saved = load_model(model)
    assert set(saved.sides["bank"].weights) == {"classifier"}  # the active party's classifier alone
    assert all(set(saved.sides[k].weights) == {"extractor"} for k in ("shop", "clinic"))  # no local heads
    held_out = report.test_predictions
    new = rows_of(files, tmp_path / "new", held_out["ids"], PARTIES)
    expected = dict(zip(held_out["ids"], held_out["scores"], strict=True))
    # MLP extractors and classifier: rows are independent, so any batch size agrees (37: batches that
    # do not divide the held-out rows; the run's own test evaluation represented them in one batch)
    for batch in (37, 4096):
        predictions = securevfl.predict(model, data=new, id_column="customer_id", device="cpu", exchange_rows=batch)
        assert sorted(predictions.customer_id) == sorted(held_out["ids"])
        np.testing.assert_allclose(probabilities(predictions), np.stack([expected[i] for i in predictions.customer_id]),
                                   atol=1e-6, rtol=0)
        for key in ("accuracy", "auc", "f1"):
            assert predictions.attrs["metrics"][key] == pytest.approx(report.metrics[key], abs=1e-9), key
        assert predictions.customer_id.tolist() == pd.read_csv(new["bank"]).customer_id.tolist()


def test_a_model_trained_deployed_scores_alike_deployed_and_in_one_process(tmp_path, files):
    from securevfl.deploy.federation_file import load_federation
    from securevfl.pipeline.score import run_deployed_scoring
    from securevfl.pipeline.train import run_deployed_party

    frames = {p: pd.read_csv(files[p]) for p in PARTIES}
    new_ids = set(frames["bank"].customer_id.sample(120, random_state=2))
    train = write_tables({p: f[~f.customer_id.isin(new_ids)] for p, f in frames.items()}, tmp_path / "train")
    # the new bank file holds the IDs alone: no label, and no feature column (the active party has none)
    new = write_tables({p: f[f.customer_id.isin(new_ids)].drop(columns=["churn"] if p == "bank" else [])
                        .sample(frac=1.0, random_state=1) for p, f in frames.items()}, tmp_path / "new")
    assert list(pd.read_csv(new["bank"]).columns) == ["customer_id"]
    job = ('method = "fewshot-vfl"\nepochs = 2\nbatch_size = 64\nseed = 0\n'
           'id_column = "customer_id"\nlabel_column = "churn"')
    federation = load_federation(loopback_federation_file(
        tmp_path, PARTIES, "bank", job, '[job.options]\nvariant = "few-shot"\nactive_epochs = 5\nmu = 2'))
    model = tmp_path / "model"
    in_threads(lambda p: run_deployed_party(federation, p, train[p], device="cpu", model_dir=model), PARTIES)
    assert sorted(p.name for p in model.iterdir()) == sorted(PARTIES)
    scored = in_threads(lambda p: run_deployed_scoring(federation, p, new[p], model, exchange_rows=50, device="cpu"),
                        PARTIES)
    deployed = scored["bank"].predictions
    assert deployed is not None and scored["shop"].predictions is None and scored["clinic"].predictions is None
    local = securevfl.predict(model, data={p: str(new[p]) for p in PARTIES}, id_column="customer_id", device="cpu",
                              exchange_rows=50)
    assert len(local) > 0 and deployed.customer_id.tolist() == local.customer_id.tolist()
    np.testing.assert_allclose(probabilities(deployed), probabilities(local), atol=1e-6, rtol=0)
    assert (deployed.prediction == local.prediction).all()


def test_an_active_party_state_without_each_passive_partys_width_is_refused():
    from securevfl.errors import ModelError
    from securevfl.methods.fewshot_vfl import WIDTHS, _saved_widths

    assert _saved_widths({WIDTHS: {"clinic": 8, "shop": 16}}, ("shop", "clinic"), "bank") == {"shop": 16, "clinic": 8}
    for state in ({}, {WIDTHS: {"shop": 16}}, {WIDTHS: {"shop": 16, "clinic": 0}},
                  {WIDTHS: {"shop": 16, "clinic": "8"}}):
        with pytest.raises(ModelError, match="representation width"):
            _saved_widths(state, ("shop", "clinic"), "bank")

"""secureboost saves each party's own part and scores new rows by walking the trees jointly.

The oracle: scoring a run's held-out rows with its saved model reproduces the run's own test
predictions (classification and regression). The active party saves the trees and its own lookup
table; each passive party only its own lookup table (features and thresholds nobody else holds).
Small (insecure, tests only) keys keep Paillier fast.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from org_tables import organisation_frames, probabilities, rows_of, training_and_new_tables, write_tables

import securevfl
from securevfl.eval import task_metrics
from securevfl.model.scoring import load_model
from securevfl.model.store import tensors_from_bytes

PARTIES = ("bank", "shop", "clinic")
SMALL_KEY = {"key_bits": 1024, "insecure_allow_small_key": True, "trees": 4, "max_depth": 3}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    return write_tables(organisation_frames(5), tmp_path_factory.mktemp("tables"))


@pytest.fixture(scope="module")
def trained(tmp_path_factory, files):
    directory = tmp_path_factory.mktemp("secureboost") / "model"
    report = securevfl.train("secureboost", data_files={p: str(files[p]) for p in PARTIES}, id_column="customer_id",
                             label_column="churn", seed=0, device="cpu", options=SMALL_KEY, model_dir=directory)
    return directory, report


def test_scoring_the_held_out_rows_reproduces_the_runs_test_predictions(tmp_path, files, trained):
    model, report = trained
    new = rows_of(files, tmp_path / "new", report.test_predictions["ids"])
    predictions = securevfl.predict(model, data=new, id_column="customer_id", device="cpu", exchange_rows=37)
    assert len(predictions) == len(report.test_predictions["ids"])
    scores = dict(zip(report.test_predictions["ids"], report.test_predictions["scores"], strict=True))
    expected = np.stack([scores[i] for i in predictions.customer_id])
    np.testing.assert_allclose(probabilities(predictions), expected, atol=1e-12, rtol=0)
    metrics = task_metrics("classification", report.test_predictions["y_true"], report.test_predictions["scores"])
    assert metrics["accuracy"] == pytest.approx(report.metrics["accuracy"])


def test_each_party_saves_only_its_own_part(trained):
    model, report = trained
    loaded = load_model(model)
    tensors = {p: tensors_from_bytes(loaded.parts[p].files["weights.safetensors"], p) for p in PARTIES}
    modules = {p: {name.split(".")[0] for name in tensors[p]} for p in PARTIES}
    assert modules["bank"] == {"trees", "splits"}
    assert modules["shop"] == modules["clinic"] == {"splits"}
    owners = report.extra["secureboost"]["split_owners"]
    for party in PARTIES:  # a party's table holds exactly the splits it owns
        assert len(tensors[party]["splits.feature"]) == owners[party]


def test_a_model_trained_deployed_scores_deployed_as_in_one_process(tmp_path):
    """Three parties over gRPC on loopback: training with Paillier, then scoring by the joint tree walk."""
    from deployed_threads import in_threads, loopback_federation_file, run_parties_in_threads

    from securevfl.deploy.federation_file import load_federation
    from securevfl.pipeline.score import run_deployed_scoring

    job = 'method = "secureboost"\nseed = 0\nid_column = "customer_id"\nlabel_column = "churn"'
    options = "[job.options]\nkey_bits = 1024\ninsecure_allow_small_key = true\ntrees = 3\nmax_depth = 3"
    federation = load_federation(loopback_federation_file(tmp_path, PARTIES, "bank", job, options))
    train, new = training_and_new_tables(tmp_path / "tables")
    model = tmp_path / "model"
    trained = run_parties_in_threads(federation, {p: str(train[p]) for p in PARTIES}, model_dir=model)
    # not a fixed figure: each passive party's secret candidate permutation breaks ties of equal gain
    assert trained["bank"].report.metrics["accuracy"] > 0.85
    scored = in_threads(lambda p: run_deployed_scoring(federation, p, str(new[p]), model, exchange_rows=50,
                                                       device="cpu"), PARTIES)
    deployed = scored["bank"].predictions
    local = securevfl.predict(model, data={p: str(new[p]) for p in PARTIES}, device="cpu", exchange_rows=50)
    assert deployed.customer_id.tolist() == local.customer_id.tolist()
    np.testing.assert_allclose(probabilities(deployed), probabilities(local), atol=1e-12, rtol=0)

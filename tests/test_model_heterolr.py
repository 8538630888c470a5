"""hetero-lr saves a model and scores new rows with the partial scores encrypted, in one process and deployed.

The oracle: scoring a run's held-out rows with its saved model reproduces the run's own test
predictions to 1e-6 (classification and regression). Every data party saves its θ_k, the arbiter
nothing and no party any key; at scoring the arbiter makes a fresh key pair, the active party
receives only ciphertexts from the passive parties and the arbiter only uniformly masked values.
Small (insecure, tests only) 512-bit keys keep Paillier fast.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from aggregation_harness import RecordingTransport
from deployed_threads import in_threads, loopback_federation_file, run_parties_in_threads
from org_tables import organisation_frames, probabilities, rows_of, training_and_new_tables, write_tables

import securevfl
import securevfl.federation.runtime as runtime
from securevfl.cli import main
from securevfl.deploy.federation_file import load_federation
from securevfl.eval import task_metrics
from securevfl.federation import codec
from securevfl.methods.hetero_lr import ARBITER, PUBLIC_KEY, HeteroLR
from securevfl.methods.hetero_lr.scoring import MASKED_SCORE, SCORE_PARTIAL, SCORE_UNMASKED
from securevfl.model.scoring import load_model
from securevfl.model.store import tensors_from_bytes
from securevfl.privacy.paillier import EncryptedTensor, create_backend, generate_keypair
from securevfl.privacy.paillier.keys import MIN_TEST_KEY_BITS

PARTIES = ("bank", "shop", "clinic")
SMALL_KEY = {"key_bits": MIN_TEST_KEY_BITS, "insecure_allow_small_key": True}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    return write_tables(organisation_frames(5), tmp_path_factory.mktemp("tables"))


@pytest.fixture(scope="module")
def training_key():
    return generate_keypair(MIN_TEST_KEY_BITS, insecure_allow_small_key=True)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, files, training_key):
    """A classification model trained in one process with a known training key, and its run report."""
    directory = tmp_path_factory.mktemp("heterolr") / "model"
    HeteroLR.keypair = training_key  # the class attribute tests use to inject a key (restored below)
    try:
        report = _train(files, directory)
    finally:
        HeteroLR.keypair = None
    return directory, report


def _train(files, model_dir, **kwargs):
    return securevfl.train("hetero-lr", data_files={p: str(files[p]) for p in PARTIES}, id_column="customer_id",
                           label_column="churn", epochs=2, batch_size=64, seed=0, device="cpu",
                           options=SMALL_KEY, model_dir=model_dir, **kwargs)


def _expected(report, ids):
    scores = dict(zip(report.test_predictions["ids"], report.test_predictions["scores"], strict=True))
    return np.stack([scores[i] for i in ids])


def test_scoring_the_held_out_rows_reproduces_the_runs_test_predictions(tmp_path, files, trained):
    model, report = trained
    new = rows_of(files, tmp_path / "new", report.test_predictions["ids"])
    predictions = securevfl.predict(model, data=new, id_column="customer_id", device="cpu", exchange_rows=37)
    assert len(predictions) == len(report.test_predictions["ids"])
    np.testing.assert_allclose(probabilities(predictions), _expected(report, predictions.customer_id), atol=1e-6,
                               rtol=0)
    expected = task_metrics("classification", report.test_predictions["y_true"], report.test_predictions["scores"])
    for key in ("accuracy", "auc", "f1"):
        assert predictions.attrs["metrics"][key] == pytest.approx(expected[key], abs=1e-9), key
        assert expected[key] == report.metrics[key]
    assert predictions.customer_id.tolist() == pd.read_csv(new["bank"]).customer_id.tolist()


def test_each_data_party_saves_its_weights_and_no_one_a_key(trained, training_key):
    model_dir, _ = trained
    assert sorted(p.name for p in model_dir.iterdir()) == sorted(PARTIES)  # no part for the arbiter
    model = load_model(model_dir)
    assert model.data_parties == PARTIES and ARBITER not in model.parts
    widths = {"bank": 5 + 1, "shop": 13, "clinic": 12}  # the bank's θ has the intercept first
    for party, part in model.parts.items():
        tensors = tensors_from_bytes(part.files["weights.safetensors"], party)
        # trained on every bank row (the default): the bank also keeps one absent bias per passive party
        assert sorted(tensors) == ["absent.weight", "theta.weight"][party != "bank":]
        assert tuple(tensors["theta.weight"].shape) == (widths[party],)
        assert tensors["theta.weight"].dtype.is_floating_point and tensors["theta.weight"].abs().max() > 0.01
    public, private = training_key
    secrets_ = {"n": public.n, "p": private.p, "q": private.q, "hp": private.hp, "hq": private.hq}
    for path in model_dir.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for name, value in secrets_.items():
                length = (value.bit_length() + 7) // 8
                for encoded in (str(value).encode(), hex(value)[2:].encode(), value.to_bytes(length, "big"),
                                value.to_bytes(length, "little")):
                    assert encoded not in data, (path, name)


def test_a_regression_model_predicts_values_on_the_training_scale(tmp_path, files):
    frames = {p: pd.read_csv(files[p]) for p in PARTIES}
    target = frames["bank"]["mean radius"] * 3.0 + 100.0
    frames["bank"] = frames["bank"].drop(columns=["mean radius", "churn"]).assign(churn=target)
    paths = write_tables(frames, tmp_path / "tables")
    report = _train(paths, tmp_path / "model", task="regression")
    assert report.metrics["r2"] > 0.9  # a linear target: the vertical linear regression learns it
    new = rows_of(paths, tmp_path / "new", report.test_predictions["ids"])
    predictions = securevfl.predict(tmp_path / "model", data=new, device="cpu", exchange_rows=50)
    np.testing.assert_allclose(predictions.prediction, _expected(report, predictions.customer_id), atol=1e-6, rtol=0)
    assert predictions.attrs["metrics"]["rmse"] == pytest.approx(report.metrics["rmse"], abs=1e-9)
    assert load_model(tmp_path / "model").manifests["bank"].target_scale["std"] > 1.0  # mapped back from z


def _score_recorded(monkeypatch, model, new, keypair):
    """Score in one process over a recording transport, with the arbiter's key pair injected to read the wire."""
    logs = []
    original = runtime.run_parties

    def recorded(roles, **kwargs):
        transport = RecordingTransport(list(roles))
        logs.append(transport.envelopes)
        return original(roles, transport=transport, **kwargs)

    monkeypatch.setattr(runtime, "run_parties", recorded)
    monkeypatch.setattr(HeteroLR, "keypair", keypair)
    predictions = securevfl.predict(model, data=new, device="cpu", exchange_rows=37)
    (log,) = [log for log in logs if any(e.tag == SCORE_PARTIAL for e in log)]
    return predictions, log


def test_what_crosses_the_wire_at_scoring_is_ciphertext(tmp_path, files, trained, training_key, monkeypatch):
    model, report = trained
    ids = report.test_predictions["ids"]
    new = rows_of(files, tmp_path / "new", ids)
    keypair = generate_keypair(MIN_TEST_KEY_BITS, insecure_allow_small_key=True)  # stands for the fresh key
    predictions, log = _score_recorded(monkeypatch, model, new, keypair)
    np.testing.assert_allclose(probabilities(predictions), _expected(report, predictions.customer_id), atol=1e-6)
    batches = -(-len(ids) // 37)
    links = {(e.src, e.dst, e.tag) for e in log}
    assert links == {(ARBITER, p, PUBLIC_KEY) for p in PARTIES} | {(p, "bank", SCORE_PARTIAL) for p in PARTIES[1:]} | {
        ("bank", ARBITER, MASKED_SCORE), (ARBITER, "bank", SCORE_UNMASKED)}  # the passive parties receive no score
    public, private = keypair
    assert {codec.decode(e.payload) for e in log if e.tag == PUBLIC_KEY} == {public.to_bytes()}
    holder = create_backend("fast", public, private)
    for passive in PARTIES[1:]:
        sent = [e for e in log if e.src == passive and e.tag == SCORE_PARTIAL]
        assert len(sent) == batches
        for envelope in sent:
            message = codec.decode(envelope.payload)
            assert isinstance(message, bytes)  # one ciphertext blob: no array, no float
            u = holder.decrypt(EncryptedTensor.from_bytes(message, holder))
            assert np.abs(u).max() > 0.1  # the ciphertexts do carry the partial scores ...
            for value in u[np.abs(u) > 1e-3]:  # ... and neither their floats nor fixed-point words are sent
                assert struct.pack("<d", value) not in envelope.payload
                fixed = round(value * 2**32)
                for order in ("big", "little"):
                    assert fixed.to_bytes(8, order, signed=True) not in envelope.payload
    n = public.n
    to_arbiter = [EncryptedTensor.from_bytes(codec.decode(e.payload), holder) for e in log if e.tag == MASKED_SCORE]
    assert len(to_arbiter) == batches and sum(t.shape[0] for t in to_arbiter) == len(ids)
    for tensor in to_arbiter:  # the arbiter decrypts uniform residues of Z_n, not sums of scores (below 2^64)
        assert all(2**100 < r < n - 2**100 for r in holder.decrypt_raw(tensor.ciphertexts.ravel().tolist()))
    assert training_key[0].to_bytes() not in {codec.decode(e.payload) for e in log if e.tag == PUBLIC_KEY}


def test_every_scoring_run_has_a_fresh_key(tmp_path, files, trained, monkeypatch):
    model, report = trained
    new = rows_of(files, tmp_path / "new", report.test_predictions["ids"][:20])
    keys = []
    original = runtime.run_parties

    def recorded(roles, **kwargs):
        transport = RecordingTransport(list(roles))
        result = original(roles, transport=transport, **kwargs)
        keys.extend(codec.decode(e.payload) for e in transport.envelopes if e.tag == PUBLIC_KEY and e.dst == "bank")
        return result

    monkeypatch.setattr(runtime, "run_parties", recorded)
    first = securevfl.predict(model, data=new, device="cpu")
    second = securevfl.predict(model, data=new, device="cpu")
    assert len(keys) == 2 and keys[0] != keys[1]
    np.testing.assert_allclose(probabilities(first), probabilities(second), atol=1e-9)


# ------------------------------------------------------------------ deployed, with the arbiter as a party


def _federation(directory: Path) -> Path:
    """bank, shop, clinic and the arbiter (``data = false``) on loopback, hetero-lr with a small key."""
    job = ('method = "hetero-lr"\nepochs = 2\nbatch_size = 64\nseed = 0\n'
           'id_column = "customer_id"\nlabel_column = "churn"')
    path = loopback_federation_file(directory, [*PARTIES, ARBITER], "bank", job,
                                    f"[job.options]\nkey_bits = {MIN_TEST_KEY_BITS}\ninsecure_allow_small_key = true")
    path.write_text(path.read_text().replace(f"[parties.{ARBITER}]\n", f"[parties.{ARBITER}]\ndata = false\n"))
    return path


def _score_in_threads(federation, files, model_dir, batch_size):
    from securevfl.pipeline.score import run_deployed_scoring

    return in_threads(lambda p: run_deployed_scoring(federation, p, files.get(p), model_dir if p in files else None,
                                                     exchange_rows=batch_size, device="cpu"), tuple(federation.parties))


def test_a_model_trained_deployed_scores_deployed_with_the_arbiter_as_in_one_process(tmp_path, files):
    federation = load_federation(_federation(tmp_path))
    assert not federation.party(ARBITER).data
    train, new = training_and_new_tables(tmp_path / "tables")
    model = tmp_path / "model"
    trained = run_parties_in_threads(federation, {**{p: str(train[p]) for p in PARTIES}, ARBITER: None},
                                     model_dir=model)
    assert trained["bank"].report.metrics["accuracy"] > 0.9
    assert sorted(p.name for p in model.iterdir()) == sorted(PARTIES)  # the arbiter saves nothing
    scored = _score_in_threads(federation, {p: str(new[p]) for p in PARTIES}, model, batch_size=50)
    deployed = scored["bank"].predictions
    assert all(scored[p].predictions is None for p in (*PARTIES[1:], ARBITER))
    local = securevfl.predict(model, data={p: str(new[p]) for p in PARTIES}, device="cpu", exchange_rows=50)
    assert deployed.customer_id.tolist() == local.customer_id.tolist()
    np.testing.assert_allclose(probabilities(deployed), probabilities(local), atol=1e-6, rtol=0)
    assert (deployed.prediction == local.prediction).all()
    assert scored[ARBITER].rows == len(local)  # the arbiter learnt the row count from the plan
    assert "bank->arbiter" in {link for snap in scored["bank"].snapshots.values() for link in snap.bytes}


def test_launch_starts_the_arbiter_to_score_without_data_or_part(tmp_path, files, monkeypatch, capsys):
    import securevfl.deploy.launch as deploy_launch

    fed = _federation(tmp_path)
    calls = []
    monkeypatch.setattr(deploy_launch, "launch", lambda federation, parties, **kw: calls.append((parties, kw)) or 0)
    data = [a for p in PARTIES for a in ("--data", f"{p}={files[p]}")]
    assert main(["launch", str(fed), "--insecure", "--predict", "--model-dir", str(tmp_path / "m"), *data]) == 0
    (parties, kw), = calls
    assert parties[ARBITER] is None and set(parties) == {*PARTIES, ARBITER}
    assert "--predict" in kw["extra"][ARBITER] and "--model-dir" not in kw["extra"][ARBITER]
    assert all("--model-dir" in kw["extra"][p] for p in PARTIES)
    capsys.readouterr()
    assert main(["party", "--federation", str(fed), "--as", ARBITER, "--insecure", "--predict",
                 "--data", str(files["bank"])]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "data = false" in err[0] and "no --data" in err[0], err

"""Batch scoring over processes without a passive party that is down (issue 44 item 2: ``--party-timeout``).

Three parties on loopback links, in threads; the clinic is never started. A model trained on every row
scores every row of the bank's file without it; a model that needs every party's part fails in one line
naming it; a process of a left-out party that connects later is refused, saying why.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pandas as pd
import pytest
from deployed_threads import in_threads, loopback_federation, one_torch_thread
from net_helpers import free_port
from org_tables import partial_tables, probabilities, rows_of

import securevfl
from securevfl.errors import SecureVFLError

PARTIES = ("bank", "shop", "clinic")
UP = ("bank", "shop")
COMMON = {"id_column": "customer_id", "label_column": "churn", "device": "cpu", "seed": 0}
JOB = 'method = "splitnn"\nid_column = "customer_id"\nlabel_column = "churn"'


def _like_one_process_without_the_clinic(frame, new, model, tmp_path):
    """The oracle: the rows scored as by one process in which the clinic holds none of them (one customer the bank
    does not have)."""
    empty = tmp_path / "clinic-none.csv"
    pd.read_csv(new["clinic"]).head(1).assign(customer_id="nobody-at-the-bank").to_csv(empty, index=False)
    alone = securevfl.predict(model, data={**new, "clinic": empty}, device="cpu").set_index("customer_id")
    np.testing.assert_allclose(probabilities(frame), probabilities(alone.loc[frame.customer_id]), atol=1e-6, rtol=0)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """SplitNN trained on every row of the bank (the default), its parts saved; the three files."""
    files = partial_tables(tmp_path_factory.mktemp("outage"))
    model = tmp_path_factory.mktemp("model") / "splitnn"
    with one_torch_thread():
        securevfl.train("splitnn", data_files={p: str(files[p]) for p in PARTIES}, epochs=2, model_dir=model,
                        **COMMON)
    return files, model


def test_every_row_is_scored_without_a_passive_party_that_is_down(trained, tmp_path):
    from securevfl.pipeline.score import run_deployed_scoring

    files, model = trained
    fed = loopback_federation(tmp_path, list(PARTIES), "bank", JOB)
    new = rows_of(files, tmp_path / "new", pd.read_csv(files["bank"]).customer_id.sample(80, random_state=3))
    started = time.monotonic()
    with one_torch_thread():
        scored = in_threads(lambda p: run_deployed_scoring(fed, p, new[p], model, device="cpu", exchange_rows=30,
                                                           party_timeout_s=2.0), UP, timeout=90)
    assert time.monotonic() - started < 60
    bank = scored["bank"]
    assert set(bank.left_out) == {"clinic"} and "2 s" in bank.left_out["clinic"]
    assert scored["shop"].left_out == bank.left_out
    frame = bank.predictions
    assert frame is not None and len(frame) == 80 == bank.rows
    assert not frame.parties.str.contains("clinic").any()
    shop = set(pd.read_csv(new["shop"]).customer_id)
    assert frame.parties.tolist() == ["bank+shop" if i in shop else "bank" for i in frame.customer_id]
    _like_one_process_without_the_clinic(frame, new, model, tmp_path)


def test_a_model_of_the_rows_every_party_holds_fails_naming_the_party_that_is_down(trained, tmp_path):
    from securevfl.pipeline.score import run_deployed_scoring

    files, model = trained
    fed = loopback_federation(tmp_path, list(PARTIES), "bank", JOB + "\nrequire_all_parties = true")
    new = rows_of(files, tmp_path / "new", pd.read_csv(files["bank"]).customer_id.head(40))
    errors = {}

    def one(party: str) -> None:
        try:
            run_deployed_scoring(fed, party, new[party], model, device="cpu", party_timeout_s=1.0)
        except SecureVFLError as exc:
            errors[party] = exc

    with one_torch_thread():
        in_threads(one, UP, timeout=90)
    message = str(errors["bank"])
    assert "\n" not in message and "clinic is not reachable within 1 s (--party-timeout)" in message
    assert "cannot score without its part" in message
    assert "shop" in errors  # told at once by the bank's ABORT


def test_a_left_out_party_that_comes_later_is_refused_saying_why():
    from securevfl.federation.grpc_transport import GrpcTransport
    from securevfl.federation.network import NetworkSettings

    addresses = {p: f"127.0.0.1:{free_port()}" for p in ("bank", "clinic")}
    settings = NetworkSettings(connect_timeout_s=10, peer_timeout_s=5, heartbeat_s=0.5)
    bank = GrpcTransport("bank", addresses, tls=None, insecure=True, settings=settings).start()
    late = None
    try:
        assert bank.unready(["clinic"], 0.5) == ["clinic"]
        bank.leave_out("clinic", "not reachable within 0.5 s (--party-timeout)")
        late = GrpcTransport("clinic", addresses, tls=None, insecure=True, settings=settings).start()
        started = time.monotonic()
        with pytest.raises(SecureVFLError, match="bank left clinic out of this run: not reachable within 0.5 s"):
            late.wait_ready()
        assert time.monotonic() - started < 8
    finally:
        if late is not None:
            late.abort("test over")
            late.close()
        bank.close()


#: method -> (its training options, data-less helper parties): small keys, few trees (tests only)
OTHER_METHODS = {
    "secureboost": ({"trees": 3, "max_depth": 2, "key_bits": 1024, "insecure_allow_small_key": True}, ()),
    "hetero-lr": ({"key_bits": 1024, "insecure_allow_small_key": True}, ("arbiter",)),
    "easter": ({"secagg": "dh", "embedding_size": 16}, ()),
}


def _federation_file(path, method, helpers, options):
    """Bank, shop, clinic and the helpers on loopback ports (the method's options in ``[job.options]``, which a
    helper scores with: it holds no part of the model); the clinic will never start."""
    from net_helpers import free_port

    from securevfl.deploy.federation_file import load_federation

    parties = "".join(f'\n[parties.{p}]\naddress = "127.0.0.1:{free_port()}"' + ("\ndata = false" if p in helpers
                                                                                    else "")
                      for p in (*PARTIES, *helpers))
    path.write_text(f'[federation]\nactive = "bank"\ninsecure = true\n{parties}\n\n[network]\npeer_timeout_s = 20\n'
                    f'heartbeat_s = 0.5\n\n[job]\nmethod = "{method}"\nid_column = "customer_id"\n'
                    'label_column = "churn"\n\n[job.options]\n'
                    + "".join(f"{k} = {json.dumps(v)}\n" for k, v in options.items()))
    return load_federation(path)


@pytest.mark.parametrize("method", sorted(OTHER_METHODS))
def test_other_methods_score_every_row_without_a_passive_party_that_is_down(method, tmp_path):
    """The clinic is never started: a model trained on every row scores the bank's rows with the shop's part where
    it holds them and the clinic's left out (hetero-lr: its absent bias; SecureBoost: the default direction;
    EASTER: no secure sum of the shop's part alone, the bank's own model), the same scores as one process in
    which the clinic holds none of the rows."""
    from securevfl.pipeline.score import run_deployed_scoring

    options, helpers = OTHER_METHODS[method]
    files = partial_tables(tmp_path / "tables")
    model = tmp_path / "model"
    securevfl.train(method, data_files={p: str(files[p]) for p in PARTIES}, model_dir=model, options=options,
                    **({} if method == "secureboost" else {"epochs": 2}), **COMMON)
    fed = _federation_file(tmp_path / "fed.toml", method, helpers, options)
    new = rows_of(files, tmp_path / "new", pd.read_csv(files["bank"]).customer_id.sample(40, random_state=4))
    scored = in_threads(lambda p: run_deployed_scoring(fed, p, new.get(p), model, device="cpu", exchange_rows=16,
                                                       party_timeout_s=2.0), (*UP, *helpers), timeout=120)
    bank = scored["bank"]
    assert set(bank.left_out) == {"clinic"}
    frame = bank.predictions
    assert frame is not None and len(frame) == 40 and not frame.parties.str.contains("clinic").any()
    _like_one_process_without_the_clinic(frame, new, model, tmp_path)


def test_a_hetero_lr_model_without_absent_biases_cannot_leave_a_party_out(tmp_path):
    """Trained on the rows every party holds, hetero-lr learned no bias to stand in for a party: it refuses."""
    from securevfl.pipeline.score import run_deployed_scoring

    options, helpers = OTHER_METHODS["hetero-lr"]
    files = partial_tables(tmp_path / "tables")
    model = tmp_path / "model"
    securevfl.train("hetero-lr", data_files={p: str(files[p]) for p in PARTIES}, epochs=1, model_dir=model,
                    options=options, require_all_parties=True, **COMMON)
    fed = _federation_file(tmp_path / "fed.toml", "hetero-lr", helpers, options)
    new = rows_of(files, tmp_path / "new", pd.read_csv(files["bank"]).customer_id.head(20))
    errors = {}

    def one(party):
        try:
            run_deployed_scoring(fed, party, new.get(party), model, device="cpu", party_timeout_s=1.0)
        except SecureVFLError as exc:
            errors[party] = exc

    in_threads(one, (*UP, *helpers), timeout=90)
    assert "cannot score without" in str(errors["bank"]) and "\n" not in str(errors["bank"])


def test_a_star_federation_scores_every_row_without_a_passive_party_that_is_down(trained, tmp_path):
    """Only the bank listens; the shop dials it, the clinic never does: the bank leaves it out, the shop (told by
    the roster) never waits for it, and the rows are those of the mesh run."""
    from deployed_threads import loopback_federation_file

    from securevfl.deploy.federation_file import load_federation
    from securevfl.pipeline.score import run_deployed_scoring

    files, model = trained
    path = loopback_federation_file(tmp_path, ["bank"], "bank", JOB, extra="[parties.shop]\n\n[parties.clinic]\n")
    fed = load_federation(path)
    assert fed.topology == "star"
    new = rows_of(files, tmp_path / "new", pd.read_csv(files["bank"]).customer_id.sample(60, random_state=5))
    with one_torch_thread():
        scored = in_threads(lambda p: run_deployed_scoring(fed, p, new[p], model, device="cpu", exchange_rows=30,
                                                           party_timeout_s=2.0), UP, timeout=90)
    bank = scored["bank"]
    assert set(bank.left_out) == {"clinic"} and scored["shop"].left_out == bank.left_out
    frame = bank.predictions
    assert frame is not None and len(frame) == 60 and not frame.parties.str.contains("clinic").any()
    _like_one_process_without_the_clinic(frame, new, model, tmp_path)

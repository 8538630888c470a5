"""``securevfl party --explore``: three processes over loopback find what one process finds (issue 45)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from deployed_threads import loopback_federation_file
from org_tables import organisation_frames, write_tables

import securevfl

PARTIES = ("bank", "shop", "clinic")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Breast Cancer cut into three organisations' tables, ~10 % of each one's customers missing, a category added."""
    split = {"bank": slice(0, 4), "shop": slice(4, 9), "clinic": slice(9, 14)}
    frames = organisation_frames(11, split=split, categories={"clinic": "ward"})
    return write_tables({p: f.sample(frac=1.0, random_state=5) for p, f in frames.items()},
                        tmp_path_factory.mktemp("tables"))


def test_three_party_processes_explore_as_one_process_does(tmp_path, files):
    fed = loopback_federation_file(tmp_path, PARTIES, "bank",
                                   'method = "splitnn"\nseed = 0\nid_column = "customer_id"\nlabel_column = "churn"')
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.getcwd()}
    procs = {}
    for party in PARTIES:
        extra = ["--share-stats", "none"] if party == "clinic" else []
        procs[party] = subprocess.Popen(
            [sys.executable, "-m", "securevfl.cli", "party", "--federation", str(fed), "--as", party, "--data",
             str(files[party]), "--explore", "--insecure", "--report", str(tmp_path / f"{party}.json"), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    try:
        outputs = {p: proc.communicate(timeout=180)[0] for p, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert all(proc.returncode == 0 for proc in procs.values()), outputs
    deployed = json.loads((tmp_path / "bank.json").read_text())
    assert (tmp_path / "bank.html").exists() and "information value" in outputs["bank"]
    clinic = json.loads((tmp_path / "clinic.json").read_text())  # a passive party's own summary
    assert clinic["role"] == "passive" and "ward" in clinic["stats"] and clinic["shared"] is False

    local = securevfl.explore(data_files={p: str(files[p]) for p in PARTIES}, id_column="customer_id",
                              label_column="churn", seed=0)
    assert deployed["rows"] == local.rows and deployed["events"] == local.events
    for party in PARTIES:
        got = [c["iv"] for c in deployed["parties"][party]["columns"]]
        want = [c["iv"] for c in local.parties[party]["columns"]]
        assert got == pytest.approx(want, abs=1e-9), party
    assert [c["name"] for c in deployed["parties"]["clinic"]["columns"]] == [f"clinic#{k}" for k in range(1, 7)]
    assert np.array(deployed["correlation"]["shop"]["r"]) == pytest.approx(np.array(local.correlation["shop"]["r"]),
                                                                          abs=1e-9)
    assert deployed["cost"]["total_bytes"] > 0 and set(deployed["cost"]["per_party"]) == set(PARTIES)


def test_explore_flags_need_explore_and_explore_takes_no_model_dir(tmp_path, files, capsys):
    from securevfl.cli import main

    fed = loopback_federation_file(tmp_path, PARTIES, "bank",
                                   'method = "splitnn"\nid_column = "customer_id"\nlabel_column = "churn"')
    base = ["party", "--federation", str(fed), "--as", "bank", "--data", str(files["bank"]), "--insecure"]
    assert main([*base, "--max-bins", "5"]) == 2
    assert "--max-bins is for --explore" in capsys.readouterr().err
    assert main([*base, "--explore", "--model-dir", str(tmp_path / "m")]) == 2
    assert "--explore writes its report only" in capsys.readouterr().err
    assert main([*base, "--explore", "--predict"]) == 2
    assert "not with --serve or --predict" in capsys.readouterr().err
    assert pd.read_csv(files["bank"]).shape[0] > 0  # nothing was touched


def test_a_deployed_select_chooses_the_columns_one_process_chooses(tmp_path, files):
    from deployed_threads import one_torch_thread, run_parties_in_threads

    from securevfl.deploy.federation_file import load_federation

    job = ('method = "splitnn"\nepochs = 2\nbatch_size = 64\nseed = 0\nid_column = "customer_id"\n'
           'label_column = "churn"\nselect = "iv>=0.3"')
    fed = load_federation(loopback_federation_file(tmp_path, PARTIES, "bank", job))
    with one_torch_thread():
        results = run_parties_in_threads(fed, {p: str(files[p]) for p in PARTIES}, timeout=180)
        local = securevfl.train("splitnn", data_files={p: str(files[p]) for p in PARTIES}, id_column="customer_id",
                                label_column="churn", epochs=2, batch_size=64, seed=0, device="cpu",
                                select="iv>=0.3")
    deployed = results["bank"].report
    chosen = deployed.extra["selection"]
    assert chosen["parties"] == local.extra["selection"]["parties"]
    assert sum(e["dropped"] for e in chosen["parties"].values()) >= 1  # the rule bites
    assert deployed.parties["clinic"]["features"] == local.parties["clinic"]["features"]
    for key, value in local.metrics.items():
        if isinstance(value, float):
            assert deployed.metrics[key] == pytest.approx(value, abs=1e-6), key


def test_a_deployed_value_estimate_equals_the_one_process_estimate(tmp_path, files):
    from deployed_threads import in_threads

    from securevfl.deploy.federation_file import load_federation
    from securevfl.exploration.options import ExploreOptions
    from securevfl.pipeline.explore import run_deployed_explore

    settings = {"key_bits": 1024, "insecure_allow_small_key": True, "correlation": False, "value": True,
                "value_trees": 2, "value_depth": 2, "value_rows": 200}
    fed = load_federation(loopback_federation_file(
        tmp_path, PARTIES, "bank", 'method = "splitnn"\nseed = 0\nid_column = "customer_id"\nlabel_column = "churn"'))
    results = in_threads(lambda p: run_deployed_explore(fed, p, str(files[p]), ExploreOptions(**settings),
                                                        device="cpu"), PARTIES, timeout=180)
    deployed = results["bank"].value
    local = securevfl.explore(data_files={p: str(files[p]) for p in PARTIES}, id_column="customer_id",
                              label_column="churn", seed=0, **settings).value
    assert set(deployed["parties"]) == {"shop", "clinic"} and deployed["rows_fit"] + deployed["rows_scored"] == 200
    for key in ("active_only", "all_parties"):
        assert deployed[key] == pytest.approx(local[key], abs=1e-12), key
    for party in ("shop", "clinic"):
        assert deployed["parties"][party]["gain"] == pytest.approx(local["parties"][party]["gain"], abs=1e-12)
    assert deployed["runs"]["all parties"]["bytes"] > 0 and deployed["runs"]["all parties"]["crypto_s"] > 0
    assert results["shop"] is not None and results["shop"].kept is None  # a passive party's own summary

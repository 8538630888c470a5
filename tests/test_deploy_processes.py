"""Three processes on 127.0.0.1: PSI and training from three CSV files match the threaded run.

Each party runs ``python -m securevfl.cli party`` (or all under ``securevfl launch``) with
certificates from the development PKI, ephemeral ports and a short peer timeout. Every process
started here is stopped by the test (launch kills its children; the kill test kills the rest).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from deployed_threads import one_torch_thread
from net_helpers import CuttingProxy, free_port
from org_tables import organisation_frames, write_tables

import securevfl
from securevfl.deploy.certs import make_dev_pki
from securevfl.deploy.federation_file import job_differences, job_fingerprint, load_federation
from securevfl.deploy.launch import launch
from securevfl.deploy.links import ordered_addresses
from securevfl.federation.grpc_transport import GrpcTransport
from securevfl.pipeline.train import run_deployed_party

PARTIES = ("bank", "shop", "clinic")
EPOCHS = 3


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """Breast Cancer cut into three organisations' tables, each with ~10 % of its own customers missing."""
    frames = organisation_frames(7, keep=0.9)
    return write_tables({p: f.sample(frac=1.0, random_state=3) for p, f in frames.items()},
                        tmp_path_factory.mktemp("tables"))


HELPERS = {"hetero-lr": ("arbiter",), "vfedtrans": ("keygen", "server")}


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    make_dev_pki([*PARTIES, "arbiter", "keygen", "server"], out)
    return out


def federation_file(directory: Path, certs: Path, method: str, options: str = "", epochs: int = EPOCHS,
                    peer_timeout: float = 8.0, helpers: tuple[str, ...] = (), job: str = "",
                    name: str = "") -> Path:
    ports = {p: free_port() for p in (*PARTIES, *helpers)}
    parties = "\n".join(f'[parties.{p}]\naddress = "127.0.0.1:{ports[p]}"' for p in PARTIES)
    parties += "".join(f'\n[parties.{h}]\naddress = "127.0.0.1:{ports[h]}"\ndata = false' for h in helpers)
    text = f"""
[federation]
active = "bank"

{parties}

[tls]
dir = "{certs}"

[network]
peer_timeout_s = {peer_timeout}
heartbeat_s = 0.5
connect_timeout_s = 60

[job]
method = "{method}"
epochs = {epochs}
batch_size = 64
seed = 0
id_column = "customer_id"
label_column = "churn"
{job}

[job.options]
{options}
"""
    path = directory / f"fed-{name or method}.toml"
    path.write_text(text)
    return path




def in_process(files, method, options=None, epochs=EPOCHS):
    with one_torch_thread():
        return securevfl.train(method, data_files={p: str(files[p]) for p in PARTIES}, id_column="customer_id",
                               label_column="churn", epochs=epochs, batch_size=64, seed=0, device="cpu",
                               options=options or {})


def headline(metrics):
    """The run's metrics to compare, those per coverage pattern flattened (``coverage.bank+shop.auc``)."""
    flat = {k: v for k, v in metrics.items() if k not in ("per_party", "coverage")}
    for pattern, entry in metrics.get("coverage", {}).items():
        flat.update({f"coverage.{pattern}.{k}": v for k, v in entry.items()})
    return flat


@pytest.mark.parametrize("method, options, toml_options", [
    ("splitnn", {}, ""),
    pytest.param("easter", {"secagg": "dh", "embedding_size": 16}, 'secagg = "dh"\nembedding_size = 16',
                 marks=pytest.mark.slow),  # the suite's time budget; the star test runs it too under slow
])
def test_three_processes_match_the_threaded_run(tmp_path, files, certs, method, options, toml_options,
                                               monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # every party process, as the threaded run below
    fed = federation_file(tmp_path, certs, method, toml_options)
    report = tmp_path / "run.json"
    code = launch(fed, dict(files), active="bank", report=report, device="cpu", timeout=240)
    assert code == 0
    network = json.loads(report.read_text())
    local = in_process(files, method, options)
    for key, value in headline(local.metrics).items():
        assert headline(network["metrics"])[key] == pytest.approx(value, abs=1e-6), key
    assert network["cost"]["comm"] == local.cost["comm"]  # the same codec bytes and messages per link
    assert network["cost"]["rounds"] == local.cost["rounds"]
    # the same sizes; the active party knows only its own preprocessing, never a peer's columns
    sizes = {p: {k: v for k, v in entry.items() if k != "preprocessing"} for p, entry in local.parties.items()}
    assert network["parties"] == {**sizes, "bank": local.parties["bank"]}
    assert network["cost"]["alignment"]["intersection_size"] == local.cost["alignment"]["intersection_size"]


def test_psi_as_one_party_writes_only_its_own_files(tmp_path, files, certs):
    fed = federation_file(tmp_path, certs, "splitnn")
    outs = {p: tmp_path / f"out-{p}" for p in PARTIES}
    children = [subprocess.Popen([sys.executable, "-m", "securevfl.cli", "psi", "--federation", str(fed), "--as", p,
                                  "--data", str(files[p]), "--out", str(outs[p])],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for p in PARTIES]
    try:
        outputs = [c.communicate(timeout=120)[0] for c in children]
    finally:
        for c in children:
            c.kill()
    assert all(c.returncode == 0 for c in children), outputs
    aligned = {p: pd.read_csv(outs[p] / f"{p}_aligned.csv", dtype={"customer_id": str}) for p in PARTIES}
    for p in PARTIES:
        assert sorted(x.name for x in outs[p].iterdir()) == sorted(
            [f"{p}_aligned.csv", f"{p}_unaligned.csv", f"{p}_psi_report.json"])
    ids = {p: set(pd.read_csv(files[p], dtype={"customer_id": str})["customer_id"]) for p in PARTIES}
    common = set.intersection(*ids.values())
    for p in PARTIES:
        assert list(aligned[p]["customer_id"]) == sorted(common)  # one agreed order, exactly the intersection


@pytest.mark.slow  # suite budget: the refusal is checked in one process (star) and by test_ops_small's mismatch message
def test_a_job_mismatch_stops_every_party_before_any_data(tmp_path, files, certs):
    fed = federation_file(tmp_path, certs, "splitnn")
    other = tmp_path / "other.toml"
    other.write_text(fed.read_text().replace(f"epochs = {EPOCHS}", "epochs = 7"))
    children = {}
    for p in PARTIES:
        path = other if p == "shop" else fed
        children[p] = subprocess.Popen([sys.executable, "-m", "securevfl.cli", "party", "--federation", str(path),
                                        "--as", p, "--data", str(files[p]), "--device", "cpu"],
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        outputs = {p: c.communicate(timeout=120)[0] for p, c in children.items()}
    finally:
        for c in children.values():
            c.kill()
    assert all(c.returncode == 2 for c in children.values()), outputs
    assert "differing keys: job.epochs" in outputs["bank"] and "differing keys: job.epochs" in outputs["shop"]
    # both values, whichever side refused first (issue 28)
    assert any(f"job.epochs ({EPOCHS} at bank, 7 at the other party)" in outputs[p]
               or f"job.epochs (7 at shop, {EPOCHS} at the other party)" in outputs[p] for p in ("bank", "shop"))
    assert not any("PSI: " in text for text in outputs.values())  # PSI never started


def test_a_killed_passive_process_stops_the_others_naming_it(tmp_path, files, certs):
    fed = federation_file(tmp_path, certs, "splitnn", epochs=200, peer_timeout=6.0)
    children = {p: subprocess.Popen([sys.executable, "-m", "securevfl.cli", "party", "--federation", str(fed),
                                     "--as", p, "--data", str(files[p]), "--device", "cpu"],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    env={**os.environ, "OMP_NUM_THREADS": "1"}, start_new_session=True)
                for p in PARTIES}
    lines: dict[str, list[str]] = {p: [] for p in PARTIES}

    def pump(p):
        for line in children[p].stdout:
            lines[p].append(line)

    threads = [threading.Thread(target=pump, args=(p,), daemon=True) for p in PARTIES]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 120
        while not any("epoch 2/" in line for line in lines["bank"]):
            assert time.monotonic() < deadline, "training never started: " + "".join(lines["bank"])
            assert children["bank"].poll() is None, "".join(lines["bank"])
            time.sleep(0.05)
        os.killpg(children["clinic"].pid, signal.SIGKILL)  # mid-epoch, no goodbye
        killed_at = time.monotonic()
        for p in ("bank", "shop"):
            children[p].wait(timeout=6.0 + 10)
        elapsed = time.monotonic() - killed_at
    finally:
        for c in children.values():
            if c.poll() is None:
                os.killpg(c.pid, signal.SIGKILL)
            c.wait(5)
        for t in threads:
            t.join(2)
    assert elapsed <= 6.0 + 5
    for p in ("bank", "shop"):
        output = "".join(lines[p])
        assert children[p].returncode == 2, output
        error = [line for line in lines[p] if line.startswith("error:")]
        assert error and "clinic" in error[-1], output


def test_a_cut_connection_mid_epoch_leaves_the_metrics_unchanged(tmp_path, files, certs):
    """All three parties in this process, each over its own gRPC transport; the link to shop goes through a
    proxy that drops every connection once mid-training."""
    fed = load_federation(federation_file(tmp_path, certs, "splitnn", epochs=4))
    digest, job = job_fingerprint(fed)
    real = ordered_addresses(fed)
    shop_port = int(real["shop"].rsplit(":", 1)[1])
    proxy = CuttingProxy(shop_port)
    from securevfl.deploy.certs import load_tls_material

    transports = {}
    try:
        for p in PARTIES:
            addresses = dict(real) if p == "shop" else {**real, "shop": proxy.address}
            spec = fed.party(p)
            tls = load_tls_material(spec.cert, spec.key, fed.tls.ca)
            transports[p] = GrpcTransport(p, addresses, tls=tls, fingerprint=digest, job=job, settings=fed.limits,
                                          differences=job_differences).start()
        for t in transports.values():
            t.wait_ready()
        results, errors = {}, {}

        def run(p):
            try:
                results[p] = run_deployed_party(fed, p, files[p], device="cpu", transport=transports[p],
                                                progress=(lambda epoch, epochs, **_: epoch == 2 and proxy.cut())
                                                if p == "bank" else None)
            except BaseException as exc:  # noqa: BLE001
                errors[p] = exc

        threads = [threading.Thread(target=run, args=(p,)) for p in PARTIES]
        with one_torch_thread():
            for t in threads:
                t.start()
            for t in threads:
                t.join(180)
        assert not errors, errors
    finally:
        for t in transports.values():
            t.close()
        proxy.close()
    assert proxy.cuts >= 1
    reconnects = sum(stats["reconnects"] for p in ("bank", "clinic") for stats in
                     results[p].link_stats.values())
    assert reconnects >= 1
    local = in_process(files, "splitnn", epochs=4)
    network = results["bank"].report
    for key, value in headline(local.metrics).items():
        assert headline(network.metrics)[key] == pytest.approx(value, abs=1e-6), key
    assert network.cost["comm"] == local.cost["comm"]


def run_in_threads(fed, files, **kwargs):
    """Every party in this process, each over its own gRPC transport (loopback, TLS): results by party."""
    results, errors = {}, {}

    def run(p):
        try:
            results[p] = run_deployed_party(fed, p, files.get(p), device="cpu", **kwargs)
        except BaseException as exc:  # noqa: BLE001
            errors[p] = exc

    threads = [threading.Thread(target=run, args=(p,)) for p in fed.parties]
    with one_torch_thread():
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    return results, errors


def test_a_deployed_run_resumes_from_every_partys_own_checkpoints(tmp_path, files, certs):
    from securevfl.methods.engine.checkpoint import CheckpointStore

    ckpt = tmp_path / "checkpoints"
    job = "early_stopping = 10\nval_fraction = 0.25"
    fed = load_federation(federation_file(tmp_path, certs, "splitnn", epochs=3, job=job, name="first"))
    full, errors = run_in_threads(fed, files, checkpoint_dir=ckpt)
    assert not errors, errors
    assert sorted(p.name for p in ckpt.iterdir()) == sorted(PARTIES)  # each party wrote only its own
    for p in PARTIES:  # as if every process had stopped after epoch 2
        CheckpointStore(ckpt, p).path(3).unlink()
    fed = load_federation(federation_file(tmp_path, certs, "splitnn", epochs=3, job=job, name="again"))
    resumed, errors = run_in_threads(fed, files, checkpoint_dir=ckpt, resume=True)
    assert not errors, errors
    report, again = full["bank"].report, resumed["bank"].report
    assert again.extra["resumed_from_epoch"] == 2
    assert report.extra["early_stopping"]["validation_rows"] > 0
    assert again.metrics == report.metrics and again.history == report.history


def test_a_deployed_resume_that_cannot_continue_is_the_same_error_at_every_party(tmp_path, files, certs):
    import shutil

    from securevfl.errors import ConfigError, PartyFailure

    def causes(errors):
        return {p: e.cause if isinstance(e, PartyFailure) else e for p, e in errors.items()}

    ckpt = tmp_path / "checkpoints"
    fed = load_federation(federation_file(tmp_path, certs, "splitnn", epochs=2, peer_timeout=60.0))
    _, errors = run_in_threads(fed, files, checkpoint_dir=ckpt)
    assert not errors, errors
    errors = causes(run_in_threads(fed, files, checkpoint_dir=ckpt)[1])  # a new run into the used directory
    assert sorted(errors) == sorted(PARTIES) and all(isinstance(e, ConfigError) for e in errors.values()), errors
    assert len({str(e) for e in errors.values()}) == 1 and "already holds checkpoints" in str(errors["shop"])
    shutil.rmtree(ckpt / "shop")  # shop lost its checkpoints
    started = time.monotonic()
    errors = causes(run_in_threads(fed, files, checkpoint_dir=ckpt, resume=True)[1])
    assert sorted(errors) == sorted(PARTIES) and all(isinstance(e, ConfigError) for e in errors.values()), errors
    assert len({str(e) for e in errors.values()}) == 1  # every party raises the active party's refusal
    assert "cannot resume: shop has no checkpoint" in str(errors["clinic"])
    assert time.monotonic() - started < 50  # decided at once, nobody waits for the peer timeout


@pytest.mark.slow
@pytest.mark.parametrize("method", ["local", "cvfl", "aggvfl", "apcvfl", "apcvfl-ablation", "apcvfl-splitnn",
                                    "local-logreg", "tabvfl", "tabvfl-le", "tabnet-lt", "tabnet-ct", "entity-aug",
                                    "pyvertical"])
def test_every_method_gives_the_threaded_result_over_the_network(tmp_path, files, certs, method):
    fed = load_federation(federation_file(tmp_path, certs, method, epochs=2))
    results, errors = run_in_threads(fed, files)
    assert not errors, errors
    local = in_process(files, method, epochs=2)
    network = results["bank"].report
    for key, value in headline(local.metrics).items():
        assert headline(network.metrics)[key] == pytest.approx(value, abs=1e-6), key
    assert network.cost["comm"] == local.cost["comm"]


@pytest.mark.parametrize("method", ["hetero-lr", "vfedtrans"])
def test_methods_with_extra_roles_need_data_less_parties(tmp_path, files, certs, method):
    fed = load_federation(federation_file(tmp_path, certs, method, epochs=1))
    started = time.monotonic()
    results, errors = run_in_threads(fed, files)
    assert set(errors) == set(PARTIES)
    assert all("data = false" in str(e) for e in errors.values()), errors
    assert time.monotonic() - started < 30  # everyone stops at once, not at the peer timeout


@pytest.mark.parametrize("method", ["hetero-lr", "vfedtrans"])
def test_methods_with_extra_roles_run_with_data_less_parties(tmp_path, files, certs, method):
    options = 'key_bits = 1024\ninsecure_allow_small_key = true' if method == "hetero-lr" else ""
    fed = load_federation(federation_file(tmp_path, certs, method, options, epochs=1, helpers=HELPERS[method]))
    results, errors = run_in_threads(fed, files)
    assert not errors, errors
    local = in_process(files, method, {"key_bits": 1024, "insecure_allow_small_key": True}
                       if method == "hetero-lr" else {}, epochs=1)
    network = results["bank"].report
    # vfedtrans' FedSVD masks are fresh secrets in every run (also between two threaded runs), so its latents
    # agree only to floating-point rounding and the metrics to about 1e-3; hetero-lr's are exact.
    tolerance = 1e-6 if method == "hetero-lr" else 0.02
    for key, value in headline(local.metrics).items():
        assert headline(network.metrics)[key] == pytest.approx(value, abs=tolerance), key
    assert network.cost["comm"]["messages"] == local.cost["comm"]["messages"]
    for link, size in local.cost["comm"]["bytes"].items():  # big integers of random residues vary by a byte
        assert network.cost["comm"]["bytes"][link] == pytest.approx(size, rel=1e-3), link


def test_plaintext_needs_the_file_and_the_flag(tmp_path, files, certs):
    from securevfl.cli import main

    fed = federation_file(tmp_path, certs, "splitnn")
    plain = tmp_path / "plain.toml"
    plain.write_text(fed.read_text().replace(f'[tls]\ndir = "{certs}"', "").replace(
        'active = "bank"', 'active = "bank"\ninsecure = true'))
    data = [f"--data={p}={files[p]}" for p in PARTIES]
    assert main(["launch", str(plain), *data]) == 2  # the file alone is not enough
    assert main(["launch", str(fed), *data, "--insecure"]) == 2  # nor the flag with a TLS file
    assert main(["party", "--federation", str(plain), "--as", "bank", "--data", str(files["bank"])]) == 2


def test_certs_command_writes_a_pki_and_refuses_to_overwrite(tmp_path, capsys):
    from securevfl.cli import main
    from securevfl.deploy.certs import verify_party_certificate

    out = tmp_path / "certs"
    assert main(["certs", "--parties", "bank,shop", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["bank.key", "bank.pem", "ca", "ca.pem", "shop.key",
                                                     "shop.pem"]
    assert [p.name for p in (out / "ca").iterdir()] == ["ca.key"]
    verify_party_certificate((out / "shop.pem").read_bytes(), (out / "ca.pem").read_bytes(), "shop")
    assert oct((out / "bank.key").stat().st_mode & 0o777) == "0o600"
    assert main(["certs", "--parties", "bank,shop", "--out", str(out)]) == 2  # never overwrites silently
    assert main(["certs", "--parties", "bank,../x", "--out", str(tmp_path / "bad")]) == 2
    assert "invalid party name" in capsys.readouterr().err

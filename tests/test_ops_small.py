"""Issue 28, items 3 and 5: torch threads per party, and the small things an operator met.

Threads: ``--threads`` is what each party process uses, and the default for parties sharing a host
is this machine's cores divided among them. Then: compute times say they are summed over parties;
F1 and AUC name their positive class, which ``--positive-class`` chooses; a failed run with
checkpoints says how to resume and a resumed run says so; a missing label column lists the file's
columns; a wrong ``[tls]`` path names its key; a job mismatch shows both values; a certificate the
transport would refuse (a party name in another case, a P-521 key) is refused before the party
starts; the licence metadata gives setuptools nothing to warn about.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from deployed_threads import SPLITNN_JOB, loopback_federation_file
from net_helpers import free_port
from org_tables import organisation_frames, write_tables
from sklearn.metrics import f1_score, roc_auc_score

import securevfl
from securevfl.cli import main
from securevfl.cli.resume import resume_hint
from securevfl.deploy import threads as th
from securevfl.deploy.federation_file import check_tls_paths, job_mismatch, load_federation, parse_federation
from securevfl.deploy.launch import launch
from securevfl.errors import ConfigError, DataError, ModelError, PartyFailure, ProtocolError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
FAST = dict(dataset="breast-cancer", epochs=2, alignment="plaintext", device="cpu", seed=0)


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[str, Path]:
    """The bank (label ``churn``: yes / no) and the shop, from Breast Cancer."""
    frames = organisation_frames(5, split={"bank": slice(0, 5), "shop": slice(5, 30)})
    return write_tables(frames, tmp_path_factory.mktemp("tables"))


# ------------------------------------------------------------------ threads


@pytest.mark.slow  # suite budget: the thread settings' order is checked alone, the default in a fresh process
def test_threads_flag_is_what_every_party_process_uses(tmp_path, tables, capsys) -> None:
    """Also: the active party's --positive-class reaches its report and console."""
    fed = loopback_federation_file(tmp_path, ["bank", "shop"], "bank", SPLITNN_JOB.replace("epochs = 2", "epochs = 1"))
    report = tmp_path / "run.json"
    # 3 differs from this machine's default (cores // 2 parties) and from torch's (one per core) on 2 cores
    code = launch(fed, dict(tables), active="bank", report=report, device="cpu", timeout=120, insecure=True,
                  extra={"bank": ["--threads", "3", "--positive-class", "no"], "shop": ["--threads", "3"]})
    out = capsys.readouterr().out
    assert code == 0, out
    for party in ("bank", "shop"):  # the party's start line says it
        start = next(line for line in out.splitlines() if line.startswith(f"[{party}] splitnn (train)"))
        assert start.endswith("; 3 torch threads (--threads)"), start
    body = json.loads(report.read_text())
    assert body["config"]["threads"] == 3  # torch.get_num_threads() in the bank's process
    assert body["parties"]["bank"]["positive_class"] == "no" and "f1 (positive class 'no')" in out


def test_the_default_shares_the_cores_among_three_loopback_parties_in_a_fresh_process(tmp_path) -> None:
    fed = loopback_federation_file(tmp_path, ["bank", "shop", "clinic"], "bank", SPLITNN_JOB)
    code = ("import sys, torch; from securevfl.deploy.federation_file import load_federation; "
            "from securevfl.deploy.threads import apply_threads, choose_threads; "
            "c = apply_threads(choose_threads(load_federation(sys.argv[1]), 'shop')); "
            "print(torch.get_num_threads(), c.source)")
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", code, str(fed)], capture_output=True, text=True, env=env,
                          timeout=60, check=True)
    used, source = done.stdout.strip().split(" ", 1)
    assert int(used) == max(1, len(os.sched_getaffinity(0)) // 3)
    assert source.startswith("3 parties share this host")


def _fed(addresses: dict[str, str | None], threads: dict[str, object] | None = None, topology: str = "mesh"):
    parties = "".join(f'[parties.{p}]\n' + (f'address = "{a}"\n' if a is not None else "")
                      + (f"threads = {json.dumps((threads or {})[p])}\n" if p in (threads or {}) else "")
                      for p, a in addresses.items())
    text = (f'[federation]\nactive = "bank"\ntopology = "{topology}"\n{parties}\n[tls]\ndir = "certs"\n'
            '[job]\nmethod = "splitnn"\nid_column = "id"\nlabel_column = "y"\n')
    return parse_federation(text, Path("."))


def test_the_order_of_the_thread_settings(monkeypatch) -> None:
    monkeypatch.setattr(th, "available_cores", lambda: 12)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    loop = {"bank": "127.0.0.1:7001", "shop": "localhost:7002", "clinic": "[::1]:7003"}
    assert th.choose_threads(_fed(loop), "shop").threads == 4  # 12 cores / 3 parties on loopback
    mixed = {"bank": "hosta:7001", "shop": "HostA:7002", "clinic": "hostb:7003"}
    assert th.same_host_parties(_fed(mixed), "bank") == ("bank", "shop")
    assert th.choose_threads(_fed(mixed), "bank").threads == 6
    alone = th.choose_threads(_fed(mixed), "clinic")  # the only party on its host: torch's own default
    assert not alone.set_here and alone.source == "torch's default"
    in_file = _fed(loop, {"shop": 2})
    assert th.choose_threads(in_file, "shop") == th.ThreadChoice(2, "[parties.shop] threads")
    assert th.choose_threads(in_file, "shop", 5) == th.ThreadChoice(5, "--threads")  # the flag wins over the file
    assert not th.choose_threads(in_file, "shop", 0).set_here  # 0: torch's default
    assert not th.choose_threads(_fed(loop), "shop", share_host=False).set_here  # the API keeps the process's
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert th.choose_threads(_fed(loop), "shop").source == "OMP_NUM_THREADS"


def test_a_star_on_one_machine_splits_its_cores_and_a_remote_hub_splits_nothing(monkeypatch) -> None:
    # only the hub has an address; a party that dials a loopback hub is on the hub's machine (issue 46)
    monkeypatch.setattr(th, "available_cores", lambda: 12)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    star = _fed({"bank": "127.0.0.1:7001", "shop": None, "clinic": None}, topology="star")
    assert th.same_host_parties(star, "shop") == ("bank", "shop", "clinic")
    for party in ("bank", "shop", "clinic"):
        choice = th.choose_threads(star, party)
        assert choice.threads == 4 and choice.source.startswith("3 parties share this host: 12 cores / 3")
    remote = _fed({"bank": "hub.example.org:7001", "shop": None, "clinic": None}, topology="star")
    assert th.same_host_parties(remote, "shop") == ("shop",)  # its host is not in the file
    assert th.same_host_parties(remote, "bank") == ("bank",)
    for party in ("bank", "shop", "clinic"):
        assert th.choose_threads(remote, party).source == "torch's default"


@pytest.mark.parametrize("value, words", [(-1, "got -1"), ("4", "got '4'"), (True, "got True"), (49, "got 49")])
def test_bad_thread_counts_are_refused_in_one_line(monkeypatch, value, words) -> None:
    monkeypatch.setattr(th, "available_cores", lambda: 12)
    fed = _fed({"bank": "127.0.0.1:7001", "shop": "127.0.0.1:7002"})
    with pytest.raises(ConfigError, match=f"--threads must be an integer from 1 to 48.*{words}"):
        th.choose_threads(fed, "bank", value)  # type: ignore[arg-type]


def test_the_federation_file_takes_a_party_threads_key() -> None:
    with pytest.raises(ConfigError, match=r"\[parties.shop\] threads must be an integer .* got 'many'"):
        _fed({"bank": "127.0.0.1:7001", "shop": "127.0.0.1:7002"}, {"shop": "many"})
    with pytest.raises(ConfigError, match="unknown key 'thread' .*did you mean 'threads'"):
        parse_federation('[federation]\nactive = "bank"\ninsecure = true\n[parties.bank]\naddress = "127.0.0.1:1"\n'
                         'thread = 2\n[parties.shop]\naddress = "127.0.0.1:2"\n'
                         '[job]\nmethod = "splitnn"\nid_column = "id"\nlabel_column = "y"\n', Path("."))


# ------------------------------------------------------------------ console: summed compute, positive class


def test_the_console_names_the_positive_class_and_sums_compute_over_parties(tmp_path, capsys) -> None:
    code = main(["train", "--dataset", "breast-cancer", "--epochs", "1", "--alignment", "plaintext", "--device", "cpu",
                 "--quiet", "--report", str(tmp_path / "run.json"), "--positive-class", "malignant"])
    out = capsys.readouterr().out
    assert code == 0
    assert "f1 (positive class 'malignant')" in out and "auc (positive class 'malignant')" in out
    assert "model compute (summed over 2 parties)" in out
    markdown = (tmp_path / "run.md").read_text()
    assert "| model compute (summed over 2 parties) |" in markdown
    assert "positive class (F1, AUC): malignant" in markdown


def test_positive_class_chooses_what_f1_and_auc_score() -> None:
    default = securevfl.train("splitnn", **FAST)
    assert default.parties["active"]["classes"] == ["malignant", "benign"]
    assert default.parties["active"]["positive_class"] == "benign"  # the second class, as before
    assert securevfl.train("splitnn", positive_class="benign", **FAST).metrics == default.metrics
    chosen = securevfl.train("splitnn", positive_class="malignant", **FAST)
    assert chosen.parties["active"]["positive_class"] == "malignant"
    y, scores = default.test_predictions["y_true"], default.test_predictions["scores"]
    assert chosen.metrics["accuracy"] == default.metrics["accuracy"]
    assert chosen.metrics["f1"] == pytest.approx(f1_score(y, scores.argmax(1), pos_label=0))
    assert chosen.metrics["f1"] != pytest.approx(default.metrics["f1"])
    assert chosen.metrics["auc"] == pytest.approx(roc_auc_score(y == 0, scores[:, 0]))


def test_a_positive_class_that_is_not_a_class_is_refused_listing_them() -> None:
    with pytest.raises(ConfigError, match="'yes' is not a class of the label; classes: 'malignant', 'benign'"):
        securevfl.train("splitnn", positive_class="yes", **{**FAST, "epochs": 1})
    with pytest.raises(ConfigError, match="for a label of two classes; this one has 10"):
        securevfl.train("splitnn", "digits", positive_class="3", epochs=1, alignment="plaintext")
    with pytest.raises(ConfigError, match="the label is a regression target"):
        securevfl.train("splitnn", "diabetes", positive_class="3", epochs=1, alignment="plaintext")


# ------------------------------------------------------------------ resume


def _interrupt_at(epoch: int):
    def progress(**info):
        if info["epoch"] == epoch and not info.get("resumed"):
            raise RuntimeError(f"interrupted after epoch {epoch}")
    return progress


def test_a_resumed_run_says_from_which_epoch(tmp_path, capsys) -> None:
    with pytest.raises(PartyFailure, match="interrupted after epoch 1"):
        securevfl.train("splitnn", checkpoint_dir=tmp_path, progress=_interrupt_at(1), **FAST)
    code = main(["train", "--dataset", "breast-cancer", "--epochs", "2", "--alignment", "plaintext", "--device", "cpu",
                 "--checkpoint-dir", str(tmp_path), "--resume", "--quiet", "--report", str(tmp_path / "run.json")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "resuming from epoch 1 (of 2)" in captured.err


def test_a_failed_run_with_checkpoints_says_how_to_resume(tmp_path, monkeypatch, capsys) -> None:
    for party, epochs in (("active", (1, 2)), ("passive1", (2, 3))):
        (tmp_path / party).mkdir()
        for e in epochs:
            (tmp_path / party / f"epoch-{e:04d}.pt").write_bytes(b"")
    args = ["train", "--checkpoint-dir", str(tmp_path), "--quiet", "--report", str(tmp_path / "run.json")]

    def lost(*_, **__):
        raise ProtocolError("the link to passive1 was lost")

    monkeypatch.setattr(securevfl.api, "train", lost)
    assert main(args) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["error: the link to passive1 was lost",
                   "to continue from the last complete epoch (2): run the same command with --resume"]

    def refused(*_, **__):
        raise ConfigError("a bad option")

    monkeypatch.setattr(securevfl.api, "train", refused)  # --resume does not fix a configuration error
    assert main(args) == 2
    assert capsys.readouterr().err.splitlines() == ["error: a bad option"]


def test_the_deployed_resume_hint_names_the_party_and_the_flag(tmp_path) -> None:
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "epoch-0004.pt").write_bytes(b"")
    failure = PartyFailure("shop", "train epoch 5", ProtocolError("bank was lost"))
    hint = resume_hint(tmp_path, failure, ["shop"], deployed=True)
    assert "this party's last checkpoint: epoch 4" in hint and "plus --resume" in hint
    assert resume_hint(tmp_path, failure, ["bank"], deployed=True) == ""  # no epoch of its own: nothing to resume
    assert resume_hint(tmp_path, DataError("bad rows"), ["shop"], deployed=True) == ""
    # a model folder refused (it holds the model of a run that had finished): --resume would not help
    already = ModelError("models already holds a model (splitnn); pass --overwrite-model to replace it")
    assert resume_hint(tmp_path, already, ["shop"], deployed=True) == ""
    assert resume_hint(tmp_path, PartyFailure("shop", "setup", already), ["shop"]) == ""
    assert resume_hint(None, failure, ["shop"]) == ""


# ------------------------------------------------------------------ data and federation files


def test_a_missing_label_column_lists_the_files_columns(tables) -> None:
    from securevfl.data.files import party_table_from_file

    with pytest.raises(DataError) as info:
        party_table_from_file("bank", tables["bank"], id_column="customer_id", label_column="churned",
                              is_active=True)
    message = str(info.value)
    assert "label column 'churned' not found at the active party; did you mean 'churn'?" in message
    assert "the file's columns: 'customer_id', 'mean radius'" in message and "\n" not in message


def _tls_file(directory: Path, tls: str) -> Path:
    path = directory / "fed.toml"
    path.write_text(f'[federation]\nactive = "bank"\n[parties.bank]\naddress = "127.0.0.1:{free_port()}"\n'
                    f'[parties.shop]\naddress = "127.0.0.1:{free_port()}"\n[tls]\n{tls}\n'
                    '[job]\nmethod = "splitnn"\nid_column = "id"\nlabel_column = "y"\n')
    return path


def test_a_wrong_tls_path_names_its_key(tmp_path) -> None:
    def check(tls: str) -> None:
        check_tls_paths(load_federation(_tls_file(tmp_path, tls)))

    with pytest.raises(ConfigError, match=r'fed.toml: \[tls\] dir = "nowhere" does not exist \(resolved to '):
        check('dir = "nowhere"')
    (tmp_path / "certs").mkdir()
    with pytest.raises(ConfigError, match=r'\[tls\] dir = "certs" holds no ca.pem'):
        check('dir = "certs"')
    with pytest.raises(ConfigError, match=r'\[tls\] ca = "certs/root.pem" is not a file here'):
        check('dir = "certs"\nca = "certs/root.pem"')
    with pytest.raises(ConfigError, match=r"\[tls\] dir \(not set: the file's folder\) holds no ca.pem"):
        check("")
    (tmp_path / "certs" / "ca.pem").write_text("")
    check('dir = "certs"')


def test_the_party_command_checks_the_tls_paths_first(tmp_path, tables, capsys) -> None:
    fed = _tls_file(tmp_path, 'dir = "nowhere"')
    assert main(["party", "--federation", str(fed), "--as", "shop", "--data", str(tables["shop"])]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and '[tls] dir = "nowhere" does not exist' in err


def test_a_job_mismatch_shows_both_values() -> None:
    mine = {"job": {"epochs": 20, "options": {"secagg": "dh"}, "seed": 0}}
    theirs = {"job": {"epochs": 10, "options": {}, "seed": 0}}
    assert job_mismatch(mine, theirs, "bank") == ["job.epochs (20 at bank, 10 at the other party)",
                                                  'job.options.secagg ("dh" at bank, absent at the other party)']
    many = job_mismatch({"job": {f"k{i}": i for i in range(10)}}, {"job": {}}, "bank")
    assert len(many) == 9 and many[-1] == "and 2 more"


# ------------------------------------------------------------------ certificates the transport would refuse


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    from securevfl.deploy.certs import load_ca, make_ca

    folder = tmp_path_factory.mktemp("ca")
    make_ca(folder)
    return load_ca(folder)


def _certificate(ca, name: str, key) -> tuple[bytes, bytes]:
    from securevfl.deploy.certs import _party_certificate, _pem_cert

    ca_cert, ca_key = ca
    now = dt.datetime.now(dt.timezone.utc)
    cert = _party_certificate(name, key.public_key(), ca_cert, ca_key, now - dt.timedelta(minutes=1),
                              now + dt.timedelta(days=1))
    return _pem_cert(cert), _pem_cert(ca_cert)


def test_a_certificate_naming_the_party_in_another_case_is_refused_before_it_starts(ca) -> None:
    from securevfl.federation.certificates import CertificateError, verify_party_certificate

    cert, root = _certificate(ca, "Shop", ec.generate_private_key(ec.SECP256R1()))
    with pytest.raises(CertificateError, match="names 'Shop', which differs in case: .* must name exactly 'shop'"):
        verify_party_certificate(cert, root, "shop")
    verify_party_certificate(cert, root, "Shop")


@pytest.mark.parametrize("key, ok", [
    (ec.generate_private_key(ec.SECP521R1()), False),
    (ec.generate_private_key(ec.SECP384R1()), True),
    (rsa.generate_private_key(65537, 2048), True),
])
def test_only_keys_the_tls_stack_accepts_pass_the_pre_flight_check(ca, key, ok) -> None:
    from securevfl.federation.certificates import CertificateError, verify_party_certificate

    cert, root = _certificate(ca, "shop", key)
    if ok:
        verify_party_certificate(cert, root, "shop")
        return
    with pytest.raises(CertificateError, match="curve secp521r1, which the TLS stack of the transport does not "
                                               "accept; use P-256 or P-384 \\(EC\\), or RSA of at least 2048 bits"):
        verify_party_certificate(cert, root, "shop")


# ------------------------------------------------------------------ packaging


def test_the_licence_metadata_is_an_spdx_string_with_its_file() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert not any(c.startswith("License ::") for c in project.get("classifiers", []))
    assert (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")


@pytest.mark.slow
def test_building_the_package_prints_no_setuptools_warning(tmp_path) -> None:
    import shutil

    source = tmp_path / "src"  # a copy: the build leaves build/ and *.egg-info next to the sources
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    for package in ("securevfl", "psi"):
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w",
                           str(tmp_path / "dist"), str(source)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    output = done.stdout + done.stderr
    assert "deprecat" not in output.lower() and "warning" not in output.lower(), output


def test_metric_labels_name_the_positive_class_and_say_summed() -> None:
    from securevfl.report.console import metric_label, summed_label

    assert metric_label("f1", np.str_("yes")) == "f1 (positive class 'yes')"
    assert metric_label("accuracy", "yes") == "accuracy" and metric_label("auc", None) == "auc"
    assert summed_label("model compute", 1) == "model compute"

"""Low audit findings on files and settings: owner-only outputs, a digested model card, bounded
manifest settings, private keys that others can read, and a directory given where a file is expected.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from org_tables import organisation_frames, write_tables

import securevfl
from securevfl.cli import main
from securevfl.deploy.certs import load_ca, load_tls_material, make_dev_pki
from securevfl.deploy.logs import party_logging
from securevfl.errors import ConfigError, ModelError
from securevfl.model.scoring import load_model
from securevfl.model.store import CARD, MANIFEST, read_part

PARTIES = ("bank", "shop", "clinic")


@pytest.fixture()
def umask_022() -> Iterator[None]:
    """The common default umask (group and others may read new files), restored afterwards."""
    before = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(before)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_tables(organisation_frames(5), tmp_path_factory.mktemp("tables"))


def _train(files: dict[str, Path], model_dir: Path, **kwargs: object) -> object:
    return securevfl.train("splitnn", data_files={p: str(files[p]) for p in PARTIES}, id_column="customer_id",
                           label_column="churn", epochs=1, batch_size=64, seed=0, device="cpu",
                           model_dir=model_dir, **kwargs)


def _private(path: Path) -> bool:
    return stat.S_IMODE(path.stat().st_mode) & 0o077 == 0


# ---------------------------------------------------------------------------------------------
# 1. outputs are owner-only whatever the umask


def test_model_parts_predictions_and_reports_are_owner_only(tmp_path: Path, files: dict[str, Path],
                                                            umask_022: None) -> None:
    out = tmp_path / "new" / "deeper"
    _train(files, out / "model", report=str(out / "reports" / "train.json"))
    for path in [out, out / "model", *sorted((out / "model").rglob("*")), *sorted((out / "reports").rglob("*")),
                 out / "reports"]:
        assert _private(path), f"{path} is {oct(stat.S_IMODE(path.stat().st_mode))}"
    data = [f"--data={p}={files[p]}" for p in PARTIES]
    rc = main(["predict", "--model-dir", str(out / "model"), *data, "--out", str(out / "pred" / "p.csv"),
               "--report", str(out / "pred" / "r.json"), "--device", "cpu", "--quiet"])
    assert rc == 0
    for path in (out / "pred", out / "pred" / "p.csv", out / "pred" / "r.json", out / "pred" / "r.md"):
        assert _private(path), f"{path} is {oct(stat.S_IMODE(path.stat().st_mode))}"


def test_an_existing_folder_keeps_its_mode(tmp_path: Path, umask_022: None) -> None:
    from psi import atomic

    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    atomic.write_text(shared / "new" / "file.txt", "x")
    assert stat.S_IMODE(shared.stat().st_mode) == 0o755  # the user's folder: left alone
    assert _private(shared / "new") and _private(shared / "new" / "file.txt")


def test_party_log_files_are_owner_only(tmp_path: Path, umask_022: None) -> None:
    log = tmp_path / "logs" / "bank.log"
    with party_logging("bank", file=log):
        logging.getLogger("securevfl.test").info("hello")
    assert log.read_text().strip().endswith("hello")
    assert _private(log) and _private(log.parent)


# ---------------------------------------------------------------------------------------------
# 2. the model card is digested like every other file


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory, files: dict[str, Path]) -> Path:
    directory = tmp_path_factory.mktemp("model") / "model"
    _train(files, directory)
    return directory


def _copy(model: Path, tmp_path: Path) -> Path:
    import shutil

    target = tmp_path / "model"
    shutil.copytree(model, target)
    return target


def test_a_tampered_model_card_is_refused(model: Path, tmp_path: Path) -> None:
    directory = _copy(model, tmp_path)
    card = directory / "bank" / CARD
    card.write_text(card.read_text().replace("splitnn", "a harmless model"))
    with pytest.raises(ModelError, match="MODEL.md") as caught:
        read_part(directory, "bank")
    assert "\n" not in str(caught.value)
    with pytest.raises(ModelError, match="MODEL.md"):
        load_model(directory)


def test_the_card_is_listed_in_the_manifest(model: Path) -> None:
    manifest = json.loads((model / "bank" / MANIFEST).read_text())
    assert manifest["files"][CARD] == hashlib.sha256((model / "bank" / CARD).read_bytes()).hexdigest()


# ---------------------------------------------------------------------------------------------
# 3. absurd settings in a consistent manifest are refused before anything is allocated


@pytest.mark.parametrize("key, value, words", [
    ("hidden", [2 ** 31], "hidden"),
    ("hidden", [8] * 1000, "hidden"),
    ("embedding_dim", 2 ** 40, "embedding_dim"),
    ("options", {"embedding_size": 2 ** 31}, "embedding_size"),
    ("options", {"joint_encoder": "256,99999999"}, "joint_encoder"),
])
def test_absurd_saved_settings_are_refused_quickly(model: Path, tmp_path: Path, key: str, value: object,
                                                    words: str) -> None:
    directory = _copy(model, tmp_path)
    for party in PARTIES:  # every part says the same: nothing but the settings is inconsistent
        path = directory / party / MANIFEST
        manifest = json.loads(path.read_text())
        manifest["extra"]["train"][key] = value
        path.write_text(json.dumps(manifest))
    started = time.perf_counter()
    with pytest.raises(ModelError, match=words) as caught:
        load_model(directory)
    assert time.perf_counter() - started < 1.0
    assert "at most" in str(caught.value) and "\n" not in str(caught.value)


# ---------------------------------------------------------------------------------------------
# 4. a private key others can read is refused


def test_a_private_key_readable_by_others_is_refused(tmp_path: Path) -> None:
    pki = make_dev_pki(["bank", "shop"], tmp_path / "pki")
    load_tls_material(pki.certs["bank"], pki.keys["bank"], pki.ca_cert)  # 0600, as written: fine
    os.chmod(pki.keys["bank"], 0o644)
    with pytest.raises(ConfigError, match=f"chmod 600 {pki.keys['bank']}") as caught:
        load_tls_material(pki.certs["bank"], pki.keys["bank"], pki.ca_cert)
    assert "\n" not in str(caught.value)
    os.chmod(pki.ca_key, 0o640)
    with pytest.raises(ConfigError, match="chmod 600"):
        load_ca(pki.directory)


# ---------------------------------------------------------------------------------------------
# 5. a directory where a file is expected says so


def test_psi_names_a_directory_given_as_a_file(tmp_path: Path, files: dict[str, Path],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "folder.csv"
    folder.mkdir()
    rc = main(["psi", "--party", f"bank={folder}", "--party", f"shop={files['shop']}", "--id-column", "customer_id",
               "--out", str(tmp_path / "out"), "--executor", "inline"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "is a directory" in err and "not found" not in err and "Traceback" not in err


def test_train_and_predict_name_a_directory_given_as_a_data_file(tmp_path: Path, files: dict[str, Path],
                                                                 model: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "folder.csv"
    folder.mkdir()
    data = [f"--data={p}={folder if p == 'shop' else files[p]}" for p in PARTIES]
    rc = main(["predict", "--model-dir", str(model), *data, "--out", str(tmp_path / "p.csv"), "--device", "cpu",
               "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "is a directory" in err and "not found" not in err and "Traceback" not in err

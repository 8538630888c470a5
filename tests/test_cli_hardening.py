"""Careless-user inputs to ``securevfl train`` / ``securevfl psi``: one clear line and exit code 2, never a traceback.

Each test here reproduces a finding of the hardening issue (bad CSV files, unwritable outputs,
path-like party names, one-party runs, out-of-range numbers).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import psi
import securevfl
import securevfl.api
from psi.errors import PSIConfigError, PSIDataError
from securevfl.checks import MAX_PARTY_NAME_LENGTH, validate_party_name
from securevfl.cli import main
from securevfl.data import PartitionSpec
from securevfl.errors import ConfigError, DataError


def _one_line_error(capsys, rc: int, *needles: str) -> str:
    """Assert a one-line ``error: ...`` on stderr with exit code 2; return that line."""
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err and "╭" not in err, err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.fixture
def good_files(tmp_path):
    rng = np.random.default_rng(0)
    n = 60
    a = pd.DataFrame({"id": [f"u{i:03d}" for i in range(n)], "x0": rng.normal(size=n),
                      "y": np.arange(n) % 2})
    b = pd.DataFrame({"id": [f"u{i:03d}" for i in range(n)], "z0": rng.normal(size=n)})
    pa, pb = tmp_path / "a.csv", tmp_path / "b.csv"
    a.to_csv(pa, index=False)
    b.to_csv(pb, index=False)
    return pa, pb


BAD_CSV = {
    "invalid-utf8": b"id,x\n\xff\xfe\x00\x80,1\n\x81abc,2\n",
    "binary": bytes(range(256)) * 4,
    "ragged-extra-field": b"id,x\nu1,1\nu2,2,3,4\nu3,3\n",
    "every-row-one-field-too-many": b"id,x\nu1,1,9\nu2,2,9\nu3,3,9\n",  # pandas takes 'id' from column 2
    "ragged-missing-field": b"x,id\n1,u1\n2\n3,u3\n",
    "unclosed-quote": b'id,x\nu1,1\n"u2,2\nu3,3\n',
    "nul-byte": b"id,x\nu1,1\nu\x002,2\n",
}


# --- finding 8: undecodable or ragged CSV -------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(BAD_CSV))
def test_psi_bad_csv_is_one_line_data_error(kind, tmp_path, good_files, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_bytes(BAD_CSV[kind])
    rc = main(["psi", "--party", f"a={bad}", "--party", f"b={good_files[1]}", "--id-column", "id",
               "--out", str(tmp_path / "out"), "--workers", "1"])
    _one_line_error(capsys, rc, "bad.csv")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", sorted(BAD_CSV))
def test_read_ids_bad_csv_raises_data_error(kind, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_bytes(BAD_CSV[kind])
    with pytest.raises(PSIDataError, match="bad.csv"):
        psi.read_ids(bad, "id")


def test_read_ids_reports_line_of_ragged_row(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_bytes(BAD_CSV["ragged-extra-field"])
    with pytest.raises(PSIDataError, match="line 3"):
        psi.read_ids(bad, "id")


@pytest.mark.parametrize("kind", sorted(BAD_CSV))
def test_train_data_bad_csv_is_one_line_data_error(kind, tmp_path, good_files, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_bytes(BAD_CSV[kind])
    rc = main(["train", "--data", f"a={bad}", "--data", f"b={good_files[1]}", "--id-column", "id",
               "--label-column", "x", "--epochs", "1", "--quiet", "--report", str(tmp_path / "r.json")])
    _one_line_error(capsys, rc, "bad.csv")


@pytest.mark.parametrize("kind", sorted(BAD_CSV))
def test_train_csv_dataset_bad_file_is_one_line_data_error(kind, tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_bytes(BAD_CSV[kind])
    rc = main(["train", "--dataset", f"csv:{bad}", "--id-column", "id", "--label-column", "x",
               "--epochs", "1", "--quiet", "--report", str(tmp_path / "r.json")])
    _one_line_error(capsys, rc, "bad.csv")


# --- finding 9: unwritable outputs are refused before any work ----------------------------------


@pytest.fixture
def no_training(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("training started although the report path is unusable")

    monkeypatch.setattr(securevfl.api, "run", fail)


def test_train_report_under_regular_file_fails_before_training(tmp_path, capsys, no_training):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc = main(["train", "--method", "local", "--epochs", "1", "--quiet",
               "--report", str(blocker / "sub" / "run.json")])
    _one_line_error(capsys, rc, str(blocker))


def test_train_report_that_is_a_directory_fails_before_training(tmp_path, capsys, no_training):
    (tmp_path / "run.json").mkdir()
    rc = main(["train", "--method", "local", "--epochs", "1", "--quiet", "--report", str(tmp_path / "run.json")])
    _one_line_error(capsys, rc, "run.json")


def test_api_train_report_checked_before_training(tmp_path, no_training):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="not a directory"):
        securevfl.train("local", "breast-cancer", epochs=1, report=blocker / "run.json")


def test_psi_out_is_a_regular_file(tmp_path, good_files, capsys, monkeypatch):
    out = tmp_path / "out"
    out.write_text("precious")
    monkeypatch.setattr(psi.io, "run_prepared", lambda *a, **k: pytest.fail("PSI ran before --out was checked"))
    rc = main(["psi", "--party", f"a={good_files[0]}", "--party", f"b={good_files[1]}", "--id-column", "id",
               "--out", str(out)])
    _one_line_error(capsys, rc, str(out))
    assert out.read_text() == "precious"


def test_psi_out_under_regular_file(tmp_path, good_files, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc = main(["psi", "--party", f"a={good_files[0]}", "--party", f"b={good_files[1]}", "--id-column", "id",
               "--out", str(blocker / "out"), "--workers", "1"])
    _one_line_error(capsys, rc, str(blocker))


def test_run_files_checks_out_dir_first(tmp_path, good_files):
    out = tmp_path / "out"
    out.write_text("x")
    with pytest.raises(PSIConfigError, match="not a directory"):
        psi.run_files({"a": good_files[0], "b": good_files[1]}, "id", out, workers=1)


# --- finding 10: party names ---------------------------------------------------------------------

BAD_NAMES = ["../escaped", "a/b", "a\\b", "", ".", "..", "a.b", "bank\n", "név", "a b",
             "x" * (MAX_PARTY_NAME_LENGTH + 1)]


@pytest.mark.parametrize("name", ["a", "bank", "Bank_2", "passive-1", "0", "x" * MAX_PARTY_NAME_LENGTH])
def test_valid_party_names(name):
    assert validate_party_name(name) == name


@pytest.mark.parametrize("name", BAD_NAMES)
def test_invalid_party_names(name):
    with pytest.raises(ConfigError) as info:
        validate_party_name(name)
    assert repr(name) in str(info.value) and "letters, digits" in str(info.value)


def test_psi_party_name_cannot_escape_out(tmp_path, good_files, capsys):
    out = tmp_path / "out" / "sub"
    rc = main(["psi", "--party", f"../escaped={good_files[0]}", "--party", f"b={good_files[1]}",
               "--id-column", "id", "--out", str(out), "--workers", "1"])
    _one_line_error(capsys, rc, "'../escaped'", "letters, digits")
    assert not list((tmp_path).rglob("escaped_*"))


@pytest.mark.parametrize("name", ["../escaped", "a.b"])
def test_psi_api_rejects_bad_party_names(name, tmp_path, good_files):
    with pytest.raises(PSIConfigError, match="letters, digits"):
        psi.run_local({name: ["1", "2"], "b": ["2", "3"]}, workers=1)
    with pytest.raises(PSIConfigError, match="letters, digits"):
        psi.run_files({name: good_files[0], "b": good_files[1]}, "id", tmp_path / "o", workers=1)
    assert not (tmp_path / "o").exists()


def test_train_data_party_name_validated(tmp_path, good_files, capsys):
    rc = main(["train", "--data", f"../a={good_files[0]}", "--data", f"b={good_files[1]}", "--id-column", "id",
               "--label-column", "y", "--quiet", "--report", str(tmp_path / "r.json")])
    _one_line_error(capsys, rc, "'../a'", "letters, digits")


def test_train_features_party_name_validated(tmp_path, capsys):
    rc = main(["train", "--features", "a.b=mean radius", "--quiet", "--report", str(tmp_path / "r.json")])
    _one_line_error(capsys, rc, "'a.b'", "letters, digits")


@pytest.mark.parametrize("name", ["a.b", "bank\n", "../x"])
def test_partition_spec_names_validated(name):
    with pytest.raises(ConfigError, match="letters, digits"):
        PartitionSpec(parties=2, party_names=("active", name))


# --- finding 12: one-party runs need no alignment ------------------------------------------------


def test_one_party_local_run_from_cli(tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = main(["train", "--method", "local", "--dataset", "breast-cancer", "--parties", "1", "--epochs", "2",
               "--quiet", "--report", str(out)])
    assert rc == 0, capsys.readouterr().err
    report = json.loads(out.read_text())
    assert report["cost"]["alignment"]["method"] == "none"
    assert any("no alignment needed" in note for note in report["notes"])
    assert report["parties"]["active"]["unaligned"] == 0


def test_one_party_local_run_from_api():
    report = securevfl.train("local", "breast-cancer", parties=1, epochs=1, alignment="plaintext")
    assert report.cost["alignment"]["method"] == "none"
    assert "accuracy" in report.metrics


# --- other careless inputs -----------------------------------------------------------------------


@pytest.mark.parametrize("args, needle", [
    (["--seed", "-1"], "seed"),
    (["--test-size", "0.999"], "test"),
])
def test_train_numbers_out_of_range(args, needle, tmp_path, capsys):
    rc = main(["train", "--method", "local", "--epochs", "1", "--quiet", "--report", str(tmp_path / "r.json"), *args])
    _one_line_error(capsys, rc, needle)


@pytest.mark.parametrize("workers", ["0", "-1"])
def test_psi_workers_must_be_positive(workers, tmp_path, good_files, capsys):
    rc = main(["psi", "--party", f"a={good_files[0]}", "--party", f"b={good_files[1]}", "--id-column", "id",
               "--out", str(tmp_path / "o"), "--workers", workers])
    _one_line_error(capsys, rc, "workers")


def test_psi_duplicate_id_column_is_refused(tmp_path, good_files):
    bad = tmp_path / "bad.csv"
    bad.write_text("id,x,id\nu1,1,u9\nu2,2,u8\n")
    with pytest.raises(PSIDataError, match="more than once"):
        psi.read_ids(bad, "id")


def test_multi_line_error_message_is_printed_on_one_line(capsys):
    from securevfl.cli import report_error

    report_error(DataError("cannot read x.csv: Error tokenizing data.\n\n  line 3\n"), debug=False)
    assert capsys.readouterr().err == "error: cannot read x.csv: Error tokenizing data. line 3\n"


@pytest.mark.parametrize("flag", ["--data", "--features", "--option"])
def test_train_pair_given_twice_is_refused(flag, tmp_path, good_files, capsys):
    rc = main(["train", flag, f"a={good_files[0]}", flag, f"a={good_files[1]}", "--id-column", "id",
               "--label-column", "y", "--quiet", "--report", str(tmp_path / "r.json")])
    _one_line_error(capsys, rc, "'a' twice")


def test_train_from_tsv_party_files(tmp_path, good_files):
    paths = {}
    for name, path in zip("ab", good_files, strict=True):
        paths[name] = tmp_path / f"{name}.tsv"
        pd.read_csv(path).to_csv(paths[name], sep="\t", index=False)
    report = securevfl.train("local", data_files=paths, id_column="id", label_column="y", epochs=1)
    assert report.parties["a"]["features"] == 1 and report.parties["b"]["features"] == 1


def test_party_file_with_one_field_too_many_per_row_is_not_read_shifted(tmp_path):
    """pandas would take the first column as an index and read every column one to the right."""
    from securevfl.data.files import party_tables_from_files

    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("id,x,y\n" + "".join(f"u{i},{i}.5,{i % 2},{100 + i}\n" for i in range(20)))
    b.write_text("id,z\n" + "".join(f"u{i},{i}\n" for i in range(20)))
    with pytest.raises(DataError, match="more fields than the header"):
        party_tables_from_files({"a": a, "b": b}, id_column="id", label_column="y")

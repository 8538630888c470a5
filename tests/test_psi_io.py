"""File I/O of the PSI: CSV/Parquet reading, clear errors, outputs, and the CLI command."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import psi
from psi.errors import PSIDataError
from securevfl.errors import ConfigError


def write_csv(path, ids, column="id", extra=True):
    frame = pd.DataFrame({column: ids})
    if extra:
        frame["feature"] = range(len(ids))
    frame.to_csv(path, index=False)
    return path


def test_csv_and_parquet_with_integer_ids(tmp_path):
    a = write_csv(tmp_path / "a.csv", ["1", "2", "3", "0042"])
    b = tmp_path / "b.parquet"
    pd.DataFrame({"id": [3, 42, 2, 99]}).to_parquet(b)
    assert psi.read_ids(b, "id") == [3, 42, 2, 99]
    assert psi.read_ids(a, "id") == ["1", "2", "3", "0042"]  # CSV text kept as written
    r = psi.run_files({"a": a, "b": b}, "id", tmp_path / "out", workers=1)
    assert r.intersection_size == 2  # "0042" != "42": IDs are compared as text
    out = pd.read_csv(tmp_path / "out" / "a_aligned.csv", dtype={"id": str})
    out_b = pd.read_csv(tmp_path / "out" / "b_aligned.csv")
    assert list(out.columns) == ["position", "id"]
    assert out["id"].astype(int).tolist() == out_b["id"].tolist()
    assert sorted(out["position"]) == [1, 2]
    un = pd.read_csv(tmp_path / "out" / "b_unaligned.csv")
    assert sorted(un["id"]) == [42, 99]
    report = json.loads((tmp_path / "out" / "psi_report.json").read_text())
    for key in (
        "intersection_size",
        "input_sizes",
        "timings",
        "bytes_per_link",
        "rounds",
        "messages_per_link",
        "wall_seconds",
    ):
        assert key in report
    assert report["input_sizes"] == {"a": 4, "b": 4} and report["intersection_size"] == 2


def test_parquet_string_and_float_integral_ids(tmp_path):
    p = tmp_path / "p.parquet"
    pd.DataFrame({"key": [1.0, 2.0, 3.0]}).to_parquet(p)
    q = write_csv(tmp_path / "q.csv", ["2", "3", "4"], column="key")
    r = psi.run_files({"p": p, "q": q}, "key", tmp_path / "o", workers=1)
    assert r.intersection_size == 2


def test_normalisation_from_files(tmp_path):
    a = write_csv(tmp_path / "a.csv", ["  Alice ", "BOB", "carol"])
    b = write_csv(tmp_path / "b.csv", ["alice", "bob", "dave"])
    assert psi.run_files({"a": a, "b": b}, "id", tmp_path / "o1", workers=1).intersection_size == 0
    r = psi.run_files({"a": a, "b": b}, "id", tmp_path / "o2", normalize="strip,casefold", workers=1)
    assert r.intersection_size == 2
    out = pd.read_csv(tmp_path / "o2" / "a_aligned.csv")
    assert set(out["id"]) == {"  Alice ", "BOB"}  # written as they appear in the party's file


def test_duplicates_in_file(tmp_path):
    a = write_csv(tmp_path / "a.csv", ["x", "y", "x"])
    b = write_csv(tmp_path / "b.csv", ["x"])
    with pytest.raises(PSIDataError, match=r"a\.csv.*'id'.*duplicate ID at rows 0 and 2"):
        psi.run_files({"a": a, "b": b}, "id", tmp_path / "o", workers=1)
    r = psi.run_files({"a": a, "b": b}, "id", tmp_path / "o", duplicates="keep_first", workers=1)
    assert r.aligned["a"].tolist() == [0]


def test_empty_file_missing_column_null_ids(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(PSIDataError, match=r"empty\.csv.*'id'.*empty"):
        psi.read_ids(empty, "id")
    header_only = tmp_path / "header.csv"
    header_only.write_text("id,feature\n")
    with pytest.raises(PSIDataError, match=r"header\.csv.*'id'.*no rows"):
        psi.read_ids(header_only, "id")
    a = write_csv(tmp_path / "a.csv", ["x"])
    with pytest.raises(PSIDataError, match=r"a\.csv: missing ID column 'user'"):
        psi.read_ids(a, "user")
    nulls = tmp_path / "n.csv"
    nulls.write_text("id,feature\nx,1\n,2\n")
    b = write_csv(tmp_path / "b.csv", ["x"])
    with pytest.raises(PSIDataError, match=r"n\.csv \(column 'id'\): null ID at row 1"):
        psi.run_files({"n": nulls, "b": b}, "id", tmp_path / "o", workers=1)
    pq = tmp_path / "n.parquet"
    pd.DataFrame({"id": ["x", None]}).to_parquet(pq)
    with pytest.raises(PSIDataError, match=r"n\.parquet \(column 'id'\): null ID at row 1"):
        psi.run_files({"n": pq, "b": b}, "id", tmp_path / "o", workers=1)
    pd.DataFrame({"other": [1]}).to_parquet(tmp_path / "m.parquet")
    with pytest.raises(PSIDataError, match=r"m\.parquet: missing ID column 'id'"):
        psi.read_ids(tmp_path / "m.parquet", "id")
    with pytest.raises(PSIDataError, match="not found"):
        psi.read_ids(tmp_path / "nope.csv", "id")
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(PSIDataError, match="unsupported file type"):
        psi.read_ids(tmp_path / "x.json", "id")


def test_na_like_strings_are_ids_not_nulls(tmp_path):
    a = write_csv(tmp_path / "a.csv", ["NA", "null", "x"])
    assert psi.read_ids(a, "id") == ["NA", "null", "x"]


def test_three_party_files_and_non_learning_modes(tmp_path):
    files = {
        "bank": write_csv(tmp_path / "bank.csv", ["a", "b", "c", "d"]),
        "shop": write_csv(tmp_path / "shop.csv", ["d", "c", "b", "z"]),
        "telco": write_csv(tmp_path / "telco.csv", ["c", "b", "y"]),
    }
    r = psi.run_files(files, "id", tmp_path / "o", workers=1)
    assert r.intersection_size == 2 and r.pairwise_sizes == {"shop": 3, "telco": 2}
    ids = {p: pd.read_csv(tmp_path / "o" / f"{p}_aligned.csv")["id"].tolist() for p in files}
    assert ids["bank"] == ids["shop"] == ids["telco"] and set(ids["bank"]) == {"b", "c"}
    r = psi.run_files(files, "id", tmp_path / "o2", mode="active_only", workers=1)
    assert (tmp_path / "o2" / "bank_aligned.csv").exists()
    assert not (tmp_path / "o2" / "shop_aligned.csv").exists()


def test_cli_command(tmp_path, capsys):
    from securevfl.cli.psi import psi_command

    a = write_csv(tmp_path / "a.csv", ["1", "2", "3"])
    b = write_csv(tmp_path / "b.csv", ["3", "2", "5", "6"])
    psi_command(
        party=[f"a={a}", f"b={b}"],
        id_column="id",
        normalize="strip",
        out=tmp_path / "out",
        mode="both",
        keep_first=False,
        workers=1,
        active=None,
        progress=False,
        executor="inline",
        ray_address=None,
        federation=None,
        as_="",
        data=None,
    )
    text = capsys.readouterr().out
    assert "|intersection| = 2" in text and "a->b" in text and "b->a" in text
    assert (tmp_path / "out" / "psi_report.json").exists()
    with pytest.raises(ConfigError, match="NAME=FILE"):
        psi_command(
            party=[str(a)],
            id_column="id",
            normalize="",
            out=tmp_path,
            mode="both",
            keep_first=False,
            workers=1,
            active=None,
            progress=False,
            executor="process",
            ray_address=None,
            federation=None,
            as_="",
            data=None,
        )
    with pytest.raises(ConfigError, match="mode"):
        psi_command(
            party=[f"a={a}", f"b={b}"],
            id_column="id",
            normalize="",
            out=tmp_path,
            mode="nope",
            keep_first=False,
            workers=1,
            active=None,
            progress=False,
            executor="process",
            ray_address=None,
            federation=None,
            as_="",
            data=None,
        )


def test_cli_via_typer(tmp_path):
    import typer
    from typer.testing import CliRunner

    from securevfl.cli.psi import psi_command

    app = typer.Typer()
    app.command("psi")(psi_command)
    app.command("noop")(lambda: None)  # keep "psi" a sub-command
    a = write_csv(tmp_path / "a.csv", ["1", "2", "3"])
    b = write_csv(tmp_path / "b.csv", ["3", "2"])
    res = CliRunner().invoke(
        app,
        [
            "psi",
            "--party",
            f"a={a}",
            "--party",
            f"b={b}",
            "--id-column",
            "id",
            "--out",
            str(tmp_path / "o"),
            "--workers",
            "1",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "|intersection| = 2" in res.output

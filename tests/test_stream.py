"""Numeric tables stream into float32 in batches exactly as the DataFrame path reads them, and fall back
to that path for anything else."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from securevfl.data import stream
from securevfl.data.columns import ColumnSpec
from securevfl.data.datasets import read_frame
from securevfl.data.files import party_table_from_file
from securevfl.data.stream import read_numeric_table


def numeric_frame(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"id": [f"{i:05d}" for i in rng.permutation(n)],  # leading zeros stay text
                          "x": rng.standard_normal(n) * 1e3, "k": rng.integers(-5, 5, n).astype(float),
                          "tiny": rng.standard_normal(n) * 1e-7, "label": rng.choice(["yes", "no"], n)})
    frame.loc[rng.choice(n, 40, replace=False), "x"] = np.nan
    return frame


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".parquet"])
def test_streamed_and_whole_reads_agree(tmp_path, monkeypatch, suffix):
    frame = numeric_frame()
    path = tmp_path / f"bank{suffix}"
    if suffix == ".parquet":
        frame.to_parquet(path, index=False)
    else:
        text = frame.to_csv(index=False, sep="\t" if suffix == ".tsv" else ",", float_format="%.9g")
        path.write_text(text.replace("\n,", "\n?,").replace(",,", ",?,"))  # blanks written as the ? marker
    monkeypatch.setattr(stream, "BLOCK_BYTES", 4096)  # many batches
    streamed = read_numeric_table(path, "parquet" if suffix == ".parquet" else "csv", id_column="id",
                                  label_column="label", spec=ColumnSpec())
    assert streamed is not None
    whole = read_frame(path, "parquet" if suffix == ".parquet" else "csv", id_column="id")
    assert list(streamed.ids) == list(whole["id"]) and streamed.ids.iloc[0].startswith(tuple("0123456789"))
    expected = whole[["x", "k", "tiny"]].to_numpy(dtype=np.float32)
    np.testing.assert_array_equal(streamed.features, expected)  # NaN where the cell was blank or ?
    assert int(np.isnan(streamed.features[:, 0]).sum()) == 40
    assert list(streamed.labels) == list(whole["label"])


def test_a_party_table_is_the_same_streamed_or_not(tmp_path, monkeypatch):
    path = tmp_path / "active.csv"
    numeric_frame().to_csv(path, index=False)
    fast, classes = party_table_from_file("active", path, id_column="id", label_column="label", is_active=True)
    monkeypatch.setattr("securevfl.data.files.read_numeric_table", lambda *a, **k: None)
    slow, slow_classes = party_table_from_file("active", path, id_column="id", label_column="label", is_active=True)
    assert classes == slow_classes and fast.feature_names == slow.feature_names
    np.testing.assert_array_equal(fast.features, slow.features)
    np.testing.assert_array_equal(fast.labels, slow.labels)
    assert list(fast.ids) == list(slow.ids)


@pytest.mark.parametrize(("change", "spec"), [
    (lambda f: f.assign(city=["a", "b", "c"] * 1000), ColumnSpec()),  # a text column: categories to encode
    (lambda f: f, ColumnSpec(categorical=("k",))),  # an integer column named categorical
    (lambda f: f.assign(x=f["x"].astype(object).where(f.index != 2500, "oops")), ColumnSpec()),  # text late on
])
def test_anything_but_numbers_goes_the_general_way(tmp_path, monkeypatch, change, spec):
    path = Path(tmp_path) / "t.csv"
    change(numeric_frame()).to_csv(path, index=False)
    monkeypatch.setattr(stream, "BLOCK_BYTES", 4096)
    assert read_numeric_table(path, "csv", id_column="id", label_column="label", spec=spec) is None


def test_a_passive_party_with_the_label_is_still_refused(tmp_path):
    path = tmp_path / "bank.csv"
    numeric_frame().to_csv(path, index=False)
    from securevfl.errors import DataError

    with pytest.raises(DataError, match="passive party 'bank' holds the label column"):
        party_table_from_file("bank", path, id_column="id", label_column="label", is_active=False)

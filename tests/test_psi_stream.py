"""Streaming PSI inputs (psi.source): Parquet read in record batches gives the same intersection."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import psi
from psi.errors import PSIDataError
from psi.source import ListIDs, ParquetIDs, check_unique_points, encode_chunk


def _write(path, values, type_=None, row_group_size=None):
    pq.write_table(pa.table({"id": pa.array(values, type_)}), path, row_group_size=row_group_size)
    return path


def test_chunks_cover_every_id_in_order(tmp_path):
    ids = [f"ü-{i}" for i in range(1000)]
    path = _write(tmp_path / "a.parquet", ids, row_group_size=300)
    src = ParquetIDs(path, "id")
    assert len(src) == 1000
    got = []
    for chunk in src.chunks(128):
        starts = np.concatenate([[0], chunk.ends[:-1]])
        got += [chunk.data[s:e].decode() for s, e in zip(starts, chunk.ends)]
    assert got == ids
    assert [len(c) for c in ListIDs(ids).chunks(400)] == [400, 400, 200]
    assert encode_chunk(["a", "bc"]).ends.tolist() == [1, 3]


@pytest.mark.parametrize("integers", [False, True])
def test_streamed_intersection_equals_the_in_memory_one(tmp_path, integers):
    a = list(range(0, 9000))
    b = list(range(5000, 14000, 2))
    fa = _write(tmp_path / "a.parquet", a if integers else [str(v) for v in a], row_group_size=1000)
    fb = _write(tmp_path / "b.parquet", b if integers else [str(v) for v in b], row_group_size=777)
    streamed = psi.run_prepared({"a": ParquetIDs(fa, "id"), "b": ParquetIDs(fb, "id")}, workers=2)
    truth = set(a) & set(b)
    assert streamed.intersection_size == len(truth)
    rows_a, rows_b = streamed.aligned["a"], streamed.aligned["b"]
    assert [a[i] for i in rows_a] == [b[i] for i in rows_b]  # row i is the same person on both sides
    assert set(a[i] for i in rows_a) == truth
    assert len(streamed.unaligned["b"]) == len(b) - len(truth)


def test_streamed_inputs_refuse_duplicates_nulls_and_empties(tmp_path):
    other = ParquetIDs(_write(tmp_path / "o.parquet", [str(i) for i in range(50)]), "id")
    dup = ParquetIDs(_write(tmp_path / "d.parquet", ["x", "y", "z", "y"]), "id")
    with pytest.raises(PSIDataError, match="duplicate ID at rows 1 and 3"):
        psi.run_prepared({"a": other, "b": dup}, workers=1)
    with pytest.raises(PSIDataError, match="null ID at row 2"):
        list(ParquetIDs(_write(tmp_path / "n.parquet", ["a", "b", None]), "id").chunks(2))
    with pytest.raises(PSIDataError, match="empty ID at row 1"):
        list(ParquetIDs(_write(tmp_path / "e.parquet", ["a", ""]), "id").chunks(8))
    with pytest.raises(PSIDataError, match="missing ID column"):
        ParquetIDs(tmp_path / "e.parquet", "user")


def test_normalisation_is_applied_per_batch(tmp_path):
    src = ParquetIDs(_write(tmp_path / "a.parquet", [" Straße ", "B"]), "id", normalize="strip,casefold")
    chunk = next(src.chunks(10))
    assert chunk.data == b"strasseb" and chunk.ends.tolist() == [7, 8]


def test_unique_check_finds_rows_that_share_only_a_prefix():
    pts = np.zeros((4, 32), np.uint8)
    pts[:, 31] = [1, 2, 3, 4]  # equal first 8 bytes, all distinct rows
    check_unique_points(pts, "x")
    pts[3] = pts[1]
    with pytest.raises(PSIDataError, match="rows 1 and 3"):
        check_unique_points(pts, "x")

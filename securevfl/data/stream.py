"""Large numeric tables, read in batches with pyarrow straight into a float32 matrix.

A party's file of a million rows read whole by pandas costs several times its size in memory
(float64 columns, then copies while the columns are prepared). When every feature column is a
number — the common case for large exports — :func:`read_numeric_table` streams the CSV or Parquet
file batch by batch (``pyarrow.csv.open_csv`` / ``ParquetFile.iter_batches``), writes each batch's
features into float32 and keeps the IDs and the label column, so the peak is about the float32
matrix, the IDs and one batch.

It returns ``None`` whenever the table needs the general path (:mod:`securevfl.data.files` reads it
as a DataFrame and gives the precise error or encodes the categories): a text, date or named
categorical column, a file pyarrow cannot parse, a missing ID or label column. Missing cells
(blank or one of the missing markers) become NaN, which the party's preprocessing imputes.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from securevfl.data.columns import ColumnSpec

#: Bytes of CSV text per batch (pyarrow's block size): the transient memory besides the result.
BLOCK_BYTES = 8 << 20


@dataclass(frozen=True)
class NumericTable:
    """A streamed table: IDs as text, float32 features, the label column as read, every column's name."""

    ids: pd.Series
    features: np.ndarray
    feature_names: tuple[str, ...]
    labels: pd.Series | None
    columns: tuple[str, ...]


def read_numeric_table(path: Path, kind: str, *, id_column: str, label_column: str | None,
                       spec: ColumnSpec, refuse: tuple[str, ...] = ()) -> NumericTable | None:
    """Stream ``path`` when all its feature columns are numbers; ``None`` when the general path must read it.

    ``label_column``: the label holder's label (kept as read); ``refuse``: columns whose presence
    is an error the general path reports (a passive party's copy of the label).
    """
    import pyarrow as pa

    batches: Generator[Any, None, None] | None = None  # pyarrow record batches
    first: Any = None
    batch: Any = None
    try:
        batches = _batches(path, kind, id_column, label_column, spec.missing_markers)
        first = next(batches, None)
        if first is None:
            return None
        names = [str(n) for n in first.schema.names]
        if id_column not in names or (label_column is not None and label_column not in names):
            return None
        if any(c in names for c in (*refuse, *spec.categorical, *spec.dates)) or len(set(names)) < len(names):
            return None
        features = [n for n in names if n not in (id_column, label_column) and n not in spec.drop]
        if not all(_numeric(first.schema.field(n).type) for n in features):
            return None
        ids: list[np.ndarray] = []
        labels: list[pd.Series] = []
        X = np.empty((_expected_rows(path, kind, first.num_rows), len(features)), dtype=np.float32)
        n = 0
        for batch in _chain(first, batches):
            id_values = batch.column(names.index(id_column))
            if id_values.null_count:
                return None  # the general path names the missing IDs
            ids.append(id_values.to_numpy(zero_copy_only=False))
            if n + batch.num_rows > len(X):  # more rows than estimated: grow by half
                X = np.concatenate([X, np.empty((max(len(X) // 2, batch.num_rows), len(features)), np.float32)])
            for j, name in enumerate(features):
                column = batch.column(names.index(name))
                if not _numeric(column.type):
                    return None
                X[n : n + batch.num_rows, j] = column.to_numpy(zero_copy_only=False)  # nulls arrive as NaN
            n += batch.num_rows
            if label_column is not None:
                labels.append(batch.column(names.index(label_column)).to_pandas())
    except (pa.ArrowException, OSError, ValueError, UnicodeDecodeError):
        return None  # unparseable here: the general path reads it and says what is wrong
    finally:
        first = batch = None
        if batches is not None:
            batches.close()
        pa.default_memory_pool().release_unused()  # hand the batches' buffers back rather than cache them
    X.resize((n, len(features)), refcheck=False)  # give back what the estimate over-allocated (in place)
    id_series = pd.Series(np.concatenate(ids), name=id_column)
    if not pd.api.types.is_numeric_dtype(id_series) and id_series.astype(str).str.contains("\0", regex=False).any():
        return None  # a binary file: the general path says so (integer IDs of a Parquet file cannot be)
    label_series = None
    if label_column is not None:
        label_series = pd.concat(labels, ignore_index=True).rename(label_column)
    return NumericTable(id_series, X, tuple(features), label_series, tuple(names))


def _batches(path: Path, kind: str, id_column: str, label_column: str | None,
             markers: tuple[str, ...]) -> Generator[Any, None, None]:
    """Record batches of ``path``: the ID column as text, every other column but the label as float64."""
    import csv

    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    if kind == "parquet":
        yield from pq.ParquetFile(path).iter_batches(batch_size=65_536)
        return
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    with path.open(newline="", encoding="utf-8") as handle:
        header = next(csv.reader(handle, delimiter=delimiter), [])
    # every feature column parsed as a number from the first row on (a text cell fails the stream)
    types = {name: pa.float64() for name in header if name not in (id_column, label_column)}
    reader = pcsv.open_csv(
        path,
        read_options=pcsv.ReadOptions(block_size=BLOCK_BYTES),
        parse_options=pcsv.ParseOptions(delimiter=delimiter),
        convert_options=pcsv.ConvertOptions(column_types={**types, id_column: pa.string()},
                                            null_values=list(dict.fromkeys(("", *markers))),
                                            strings_can_be_null=True))
    yield from reader


def _expected_rows(path: Path, kind: str, first_rows: int) -> int:
    """Rows to allocate for: Parquet says; for CSV, the file's size over the first batch's bytes per row."""
    if kind == "parquet":
        import pyarrow.parquet as pq

        return int(pq.ParquetFile(path).metadata.num_rows)
    size = path.stat().st_size
    return max(first_rows, int(size / BLOCK_BYTES * first_rows * 1.05) + 1)


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


def _numeric(arrow_type: object) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type) or pa.types.is_null(arrow_type))

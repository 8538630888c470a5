"""Per-party input files: each organisation's own table (ID column + features; labels at the active party)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from securevfl.checks import validate_party_name
from securevfl.data.datasets import numeric_feature_columns, read_frame, validate_ids
from securevfl.data.partition import PartyTable
from securevfl.errors import ConfigError, DataError


def read_table(path: Path, id_column: str | None = None) -> pd.DataFrame:
    """Read a CSV or Parquet table; missing or unreadable files are a DataError naming the path."""
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    kind = "parquet" if path.suffix.lower() in (".parquet", ".pq") else "csv"
    return read_frame(path, kind, id_column=id_column)


def party_tables_from_files(files: Mapping[str, str | Path], *, id_column: str, label_column: str,
                            active: str | None = None) -> tuple[dict[str, PartyTable], tuple[str, ...]]:
    """One PartyTable per party file. Only the active party (first, unless named) may hold the label."""
    if not files:
        raise ConfigError("training from files needs at least one --data NAME=FILE entry")
    names = [validate_party_name(n) for n in files]
    active = active or names[0]
    if active not in files:
        raise ConfigError(f"active party {active!r} has no --data file")
    tables: dict[str, PartyTable] = {}
    classes: tuple[str, ...] = ()
    for name, raw_path in files.items():
        tables[name], own_classes = party_table_from_file(name, raw_path, id_column=id_column,
                                                          label_column=label_column, is_active=name == active)
        classes = own_classes or classes
    return tables, classes


def party_table_from_file(name: str, raw_path: str | Path, *, id_column: str, label_column: str,
                          is_active: bool) -> tuple[PartyTable, tuple[str, ...]]:
    """One organisation's own table: IDs, numeric features, and (active party only) labels and classes."""
    validate_party_name(name)
    path = Path(raw_path)
    frame = read_table(path, id_column)
    where = f"{path} (party {name})"
    if id_column not in frame.columns:
        raise DataError(f"{where}: ID column {id_column!r} not found; columns are {list(frame.columns)[:10]}")
    if len(frame) == 0:
        raise DataError(f"{where}: the table is empty")
    if not is_active and label_column in frame.columns:
        raise DataError(f"{where}: passive party {name!r} holds the label column {label_column!r}; "
                        "only the active party may hold labels (drop it from that file)")
    ids = validate_ids(frame[id_column], where).to_numpy(dtype=object)
    labels = None
    classes: tuple[str, ...] = ()
    exclude = {id_column}
    if is_active:
        if label_column not in frame.columns:
            raise DataError(f"{where}: label column {label_column!r} not found at the active party")
        if frame[label_column].isna().any():
            raise DataError(f"{where}: label column {label_column!r} has missing values")
        values = frame[label_column].astype(str)
        classes = tuple(sorted(values.unique(), key=lambda v: (len(v), v)))
        if len(classes) < 2:
            raise DataError(f"{where}: label column {label_column!r} has fewer than 2 classes")
        index = {c: i for i, c in enumerate(classes)}
        labels = values.map(index).to_numpy(dtype=np.int64)
        exclude.add(label_column)
    features = numeric_feature_columns(frame, exclude, where)
    if not features and not is_active:  # a label-only active party is allowed
        raise DataError(f"{where}: no feature columns besides the ID")
    if frame[features].isna().any().any():
        raise DataError(f"{where}: feature columns have missing values; impute them first")
    table = PartyTable(name=name, ids=ids, features=frame[features].to_numpy(dtype=np.float32),
                       feature_names=tuple(features), labels=labels)
    return table, classes

"""Per-party input files: each organisation's own table (ID column + features; labels at the active party).

Each party reads its own file with its own :class:`ColumnSpec` (missing markers, dropped columns,
dates, integer categories); its feature columns may be numeric, categorical or dates, and it encodes
them itself once the training rows are known (:mod:`securevfl.data.preprocess`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from securevfl.checks import input_file_refusal, validate_party_name
from securevfl.data.columns import ColumnSpec, check_named_columns, needs_encoding
from securevfl.data.datasets import (
    check_labels,
    feature_frame,
    present_labels,
    read_frame,
    sorted_classes,
    validate_ids,
)
from securevfl.data.labels import AUTO, CLASSIFICATION, REGRESSION, regression_targets, resolve_task
from securevfl.data.partition import PartyTable
from securevfl.data.stream import read_numeric_table
from securevfl.errors import ConfigError, DataError


def read_table(path: Path, id_column: str | None = None, columns: ColumnSpec | None = None) -> pd.DataFrame:
    """Read a CSV or Parquet table; missing or unreadable files are a DataError naming the path."""
    refusal = input_file_refusal(path, "data file")
    if refusal:
        raise DataError(refusal)
    return read_frame(path, _kind(path), id_column=id_column, missing_markers=(columns or ColumnSpec()).missing_markers)


def party_tables_from_files(files: Mapping[str, str | Path], *, id_column: str, label_column: str,
                            active: str | None = None,
                            columns: ColumnSpec | Mapping[str, ColumnSpec] | None = None, task: str = AUTO,
                            ) -> tuple[dict[str, PartyTable], tuple[str, ...]]:
    """One PartyTable per party file. Only the active party (first, unless named) may hold the label.

    ``task`` (auto, classification, regression) is resolved on the active party's label column; its
    table's ``task`` says the result (``classes`` is empty for regression).

    ``columns``: one ColumnSpec for every file (each party uses the names of its own columns; a name
    in no file is a DataError), or party -> its own ColumnSpec.
    """
    if not files:
        raise ConfigError("training from files needs at least one --data NAME=FILE entry")
    names = [validate_party_name(n) for n in files]
    active = active or names[0]
    if active not in files:
        raise ConfigError(f"active party {active!r} has no --data file")
    shared = columns if isinstance(columns, ColumnSpec) or columns is None else None
    if not isinstance(columns, ColumnSpec) and columns is not None:
        unknown = sorted(set(columns) - set(files))
        if unknown:
            raise ConfigError(f"column specs given for parties without a --data file: {', '.join(unknown)}")
    tables: dict[str, PartyTable] = {}
    classes: tuple[str, ...] = ()
    for name, raw_path in files.items():
        spec = shared or (columns or {}).get(name, ColumnSpec())  # type: ignore[union-attr]
        tables[name], own_classes = party_table_from_file(
            name, raw_path, id_column=id_column, label_column=label_column, is_active=name == active,
            columns=spec, only_own_names=shared is not None, task=task)
        classes = own_classes or classes
    if shared is not None:
        held = {c for t in tables.values() for c in (*t.feature_names, *(t.columns.drop if t.columns else ()))}
        missing = [c for c in shared.named if c not in held]
        if missing:
            raise DataError(f"column {missing[0]!r} named in the column spec is in none of the files "
                            f"({', '.join(str(p) for p in files.values())})")
    return tables, classes


def party_table_from_file(name: str, raw_path: str | Path, *, id_column: str, label_column: str,
                          is_active: bool, columns: ColumnSpec | None = None,
                          only_own_names: bool = False, task: str = AUTO,
                          label_optional: bool = False) -> tuple[PartyTable, tuple[str, ...]]:
    """One organisation's own table: IDs, feature columns, and (active party only) labels and classes.

    ``label_optional``: the active party's file may lack the label column (new rows to score).

    ``columns`` is this party's spec; with ``only_own_names`` it may name columns of other files
    (a spec shared by every party), which are ignored here. A table of numbers only is streamed in
    batches into float32 (:mod:`securevfl.data.stream`); any other is read whole as a DataFrame.
    """
    validate_party_name(name)
    path = Path(raw_path)
    spec = columns or ColumnSpec()
    where = f"{path} (party {name})"
    refusal = input_file_refusal(path, "data file")
    if refusal:
        raise DataError(refusal)
    label_only_allowed = is_active  # the active party may hold no feature column (its label, or no column)
    if is_active and label_optional and label_column not in table_columns(path, _kind(path)):
        is_active = False  # scored without labels: read as a table of features only
    streamed = read_numeric_table(path, _kind(path), id_column=id_column, spec=spec,
                                  label_column=label_column if is_active else None,
                                  refuse=() if is_active else (label_column,))
    if streamed is not None:
        if not len(streamed.ids):
            raise DataError(f"{where}: the table is empty")
        raw_ids, raw_labels, names = streamed.ids, streamed.labels, streamed.columns
    else:
        frame = read_table(path, id_column, spec)
        if id_column not in frame.columns:
            raise DataError(f"{where}: ID column {id_column!r} not found; columns are {list(frame.columns)[:10]}")
        if len(frame) == 0:
            raise DataError(f"{where}: the table is empty")
        if not is_active and label_column in frame.columns:
            raise DataError(f"{where}: passive party {name!r} holds the label column {label_column!r}; "
                            "only the active party may hold labels (drop it from that file)")
        if is_active and label_column not in frame.columns:
            raise DataError(f"{where}: label column {label_column!r} not found at the active party; "
                            f"{columns_hint(label_column, frame.columns)}")
        raw_ids, names = frame[id_column], tuple(str(c) for c in frame.columns)
        raw_labels = frame[label_column] if is_active else None
    ids = validate_ids(raw_ids, where).to_numpy(dtype=object)
    classes: tuple[str, ...] = ()
    labels, resolved = None, CLASSIFICATION
    if raw_labels is not None:
        labels, classes, resolved = _labels(raw_labels, where, spec, task, one_class_ok=label_optional)
    exclude = {id_column, label_column} if is_active else {id_column}
    own = [c for c in names if c not in exclude]
    if only_own_names:
        spec = spec.restrict(own)
    for column in (id_column, label_column):
        if column in spec.named:
            raise DataError(f"{where}: the ID or label column {column!r} cannot be named in a column spec")
    check_named_columns(spec, own, where)
    X: np.ndarray | pd.DataFrame
    if streamed is not None:
        X, feature_names = streamed.features, streamed.feature_names  # numbers only: a float matrix
    else:
        features = feature_frame(frame, exclude, spec, where)
        feature_names = tuple(features.columns)
        X = features.reset_index(drop=True)
        if not needs_encoding(features, spec):
            X = features.to_numpy(dtype=np.float32)  # numbers only: a float matrix, as the bundled datasets
    if not feature_names and not label_only_allowed:  # a label-only active party is allowed
        raise DataError(f"{where}: no feature columns besides the ID")
    table = PartyTable(name=name, ids=ids, features=X, feature_names=feature_names, labels=labels,
                       columns=spec, source=where, task=resolved)
    return table, classes


def columns_hint(wanted: str, columns: Any, shown: int = 10) -> str:
    """``"did you mean 'income'? the file's columns: id, age, ... (15 in all)"``, for a column not found."""
    import difflib

    names = [str(c) for c in columns]
    close = difflib.get_close_matches(wanted, names, n=1)
    more = f", ... ({len(names)} in all)" if len(names) > shown else ""
    listed = ", ".join(repr(n) for n in names[:shown]) + more if names else "none"
    return (f"did you mean {close[0]!r}? " if close else "") + f"the file's columns: {listed}"


def table_columns(path: Path, kind: str) -> list[str]:
    """The column names of a CSV or Parquet file, read from its header only.

    An unreadable file gives [] here: the reader proper says what is wrong.
    """
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            return [str(n) for n in pq.read_schema(path).names]
        return [str(c) for c in pd.read_csv(path, nrows=0).columns]
    except (OSError, ValueError, UnicodeDecodeError, pd.errors.ParserError):
        return []


def _kind(path: Path) -> str:
    return "parquet" if path.suffix.lower() in (".parquet", ".pq") else "csv"


def _labels(raw: pd.Series, where: str, spec: ColumnSpec, task: str, one_class_ok: bool = False
            ) -> tuple[np.ndarray, tuple[str, ...], str]:
    """(labels, classes, task): class indices and names, or a float regression target and no classes.

    ``one_class_ok``: rows to score may all carry one class (their metrics then leave out the AUC).
    """
    present = present_labels(raw, where, spec.missing_markers)
    resolved = resolve_task(present, task, where)
    if resolved == REGRESSION:
        return regression_targets(present, where, constant_ok=one_class_ok), (), resolved
    values = present.astype(str) if one_class_ok else check_labels(present, where, spec.missing_markers)
    classes = sorted_classes(values)
    index = {c: i for i, c in enumerate(classes)}
    return values.map(index).to_numpy(dtype=np.int64), classes, resolved

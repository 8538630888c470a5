"""File edges of the PSI: read an ID column from CSV/Parquet, write aligned/unaligned rows + report.

CSV cells are read as text (so ``007`` stays ``007``; only empty cells are null). CSV files must
be UTF-8 with the header's number of fields on every row; anything else is a :class:`~psi.errors.PSIDataError`
naming the file (and line). Parquet columns keep their type; integers become their decimal
string (see :mod:`psi.ids`). Party names and the output folder are checked before any work.
"""

from __future__ import annotations

import csv
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from . import atomic
from .checks import check_output_dir, input_file_problem, validate_party_name
from .errors import PSIDataError
from .executors import ExecutorConfig
from .ids import prepare_ids
from .protocol import PSIConfig
from .runner import PSIResult, check_workers, run_prepared

CSV_SUFFIXES = (".csv", ".txt", ".tsv")
PARQUET_SUFFIXES = (".parquet", ".pq")


def _where(path: Path, column: str) -> str:
    return f"{path} (column {column!r})"


def _read_csv_column(path: Path, column: str, delimiter: str) -> list[object]:
    """One column of a strict UTF-8 CSV as text (empty cell -> ``None``); malformed files are a PSIDataError.

    Read with the standard ``csv`` module rather than pandas so that every row is checked: a row
    with more or fewer fields than the header (which pandas would pad, truncate, or silently read
    as an extra index column, shifting the ID column) is refused with its line number.
    """
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            reader = csv.reader(handle, delimiter=delimiter, strict=True)
            header = next(reader, None)
            while header == []:  # leading blank lines
                header = next(reader, None)
            if header is None:
                raise PSIDataError(f"{_where(path, column)}: file is empty")
            if any("\0" in name for name in header):
                raise PSIDataError(f"{path}: the header has a NUL byte (a binary file?)")
            if column not in header:
                raise PSIDataError(f"{path}: missing ID column {column!r} (columns: {header})")
            if header.count(column) > 1:
                raise PSIDataError(f"{path}: ID column {column!r} appears more than once in the header")
            index, width = header.index(column), len(header)
            values: list[object] = []
            for row in reader:
                if not row:
                    continue  # blank line, as pandas skips them
                if len(row) != width:
                    raise PSIDataError(
                        f"{path}: line {reader.line_num} has {len(row)} fields, the header has {width} "
                        "(a ragged or wrongly quoted CSV)"
                    )
                value = row[index]
                if "\0" in value:
                    raise PSIDataError(f"{path}: line {reader.line_num} has a NUL byte in the ID (a binary file?)")
                values.append(value or None)
    except UnicodeDecodeError as exc:
        raise PSIDataError(
            f"{path}: not UTF-8 text (invalid byte 0x{exc.object[exc.start]:02x}); save it as a UTF-8 CSV file"
        ) from None
    except csv.Error as exc:
        raise PSIDataError(f"{path}: not a well-formed CSV file ({_one_line(str(exc))})") from None
    return values


def _one_line(text: str) -> str:
    return " ".join(text.split())


def read_ids(path: str | os.PathLike[str], id_column: str) -> list[object]:
    """Read one ID column as a list of raw values; errors name the file and the column."""
    path = Path(path)
    problem = input_file_problem(path)
    if problem:
        raise PSIDataError(f"{path}: {problem}")
    suffix = path.suffix.lower()
    values: list[object]
    if suffix in PARQUET_SUFFIXES:
        import pyarrow.parquet as pq

        try:
            names = pq.read_schema(path).names
        except Exception as exc:  # pyarrow raises several types for unreadable files
            raise PSIDataError(f"{path}: not a readable Parquet file ({exc})") from None
        if id_column not in names:
            raise PSIDataError(f"{path}: missing ID column {id_column!r} (columns: {names})")
        values = pq.read_table(path, columns=[id_column]).column(0).to_pylist()
    elif suffix in CSV_SUFFIXES:
        values = _read_csv_column(path, id_column, "\t" if suffix == ".tsv" else ",")
    else:
        raise PSIDataError(f"{path}: unsupported file type {suffix!r} (use {CSV_SUFFIXES + PARQUET_SUFFIXES})")
    if not values:
        raise PSIDataError(f"{_where(path, id_column)}: no rows")
    return values


def write_outputs(
    result: PSIResult,
    raw_ids: Mapping[str, Sequence[object]],
    id_column: str,
    out_dir: str | os.PathLike[str],
    extra_report: Mapping[str, object] | None = None,
) -> dict[str, Path]:
    """Write ``<party>_aligned.csv``, ``<party>_unaligned.csv`` and ``psi_report.json``.

    Aligned files list the party's IDs as they appear in its own file, in the agreed order,
    with ``position`` = the 0-based data row in that file. Parties that do not learn the
    intersection in this mode get no row files.
    """
    import pandas as pd

    out = check_output_dir(out_dir)
    atomic.make_dirs(out)  # owner-only when made here
    written: dict[str, Path] = {}
    for party in result.parties:
        validate_party_name(party)  # a name is part of a file name: never a path
        rows = result.aligned[party]
        if rows is None:
            continue
        ids = np.asarray(raw_ids[party], dtype=object)
        for kind, positions in (("aligned", rows), ("unaligned", result.unaligned[party])):
            path = out / f"{party}_{kind}.csv"
            with atomic.atomic_path(path) as tmp:  # never half a file, even on a crash or a full disk
                pd.DataFrame({"position": positions, id_column: ids[positions]}).to_csv(tmp, index=False)
            written[f"{party}_{kind}"] = path
    report = result.report()
    report.update(extra_report or {})
    report["files"] = {k: str(v) for k, v in written.items()}
    path = out / "psi_report.json"
    atomic.write_text(path, json.dumps(report, indent=2, sort_keys=True))
    written["report"] = path
    return written


def run_files(
    party_files: Mapping[str, str | os.PathLike[str]],
    id_column: str,
    out_dir: str | os.PathLike[str],
    *,
    active: str | None = None,
    mode: str = "both",
    normalize: Sequence[str] | str = (),
    duplicates: str = "error",
    digest_len: int = 16,
    workers: int | None = None,
    progress: bool = False,
    urandom: Callable[[int], bytes] = os.urandom,
    executor: ExecutorConfig | None = None,
) -> PSIResult:
    """Read each party's ID column, run :func:`psi.run_prepared`, write the outputs; see there.

    ``executor`` picks where the curve work runs (default: a local process pool; see :mod:`psi.executors`).
    """
    for name in party_files:
        validate_party_name(name)
    check_output_dir(out_dir)
    check_workers(workers)
    config = PSIConfig(mode=mode, digest_len=digest_len, normalize=normalize)
    t0 = time.perf_counter()
    raw = {name: read_ids(path, id_column) for name, path in party_files.items()}
    prepared = {
        name: prepare_ids(
            raw[name],
            config.normalize,
            duplicates,
            source=_where(Path(party_files[name]), id_column),
        )
        for name in party_files
    }
    t_read = time.perf_counter() - t0
    result = run_prepared(
        prepared,
        active=active,
        config=config,
        workers=workers,
        progress=progress,
        urandom=urandom,
        executor=executor,
    )
    t1 = time.perf_counter()
    write_outputs(
        result,
        raw,
        id_column,
        out_dir,
        {
            "id_column": id_column,
            "inputs": {k: str(v) for k, v in party_files.items()},
            "read_seconds": round(t_read, 6),
        },
    )
    result.extra.update(read_seconds=round(t_read, 6), write_seconds=round(time.perf_counter() - t1, 6))
    return result

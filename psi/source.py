"""ID sources: a party's IDs as UTF-8 chunks (one buffer + end offsets), from a list or a Parquet file.

The curve engine hashes chunks, never a whole list, so a party's IDs need not all be Python
strings at once: :class:`ParquetIDs` reads record batches with pyarrow and hands their UTF-8
buffers on as they are (no per-ID Python object when no normalisation is asked for), which is
what lets a 10M-ID party run in bounded memory. :class:`ListIDs` wraps an in-memory list.

A streamed source is not de-duplicated while it is read (that would need every ID at once): the
protocol side checks its own hashed points for repeats instead (:func:`check_unique_points`), which
finds exactly the duplicate IDs (a hash collision has probability ~2^-250).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .checks import input_file_problem
from .errors import PSIDataError
from .ids import STRIP_CHARACTERS, normalize_id, parse_normalize


@dataclass(frozen=True)
class EncodedChunk:
    """Consecutive IDs as one UTF-8 buffer; ``ends[i]`` is where ID ``i`` ends (int64, cumulative)."""

    data: bytes
    ends: np.ndarray

    def __len__(self) -> int:
        return len(self.ends)


@runtime_checkable
class IDSource(Protocol):
    """A party's prepared IDs, read in chunks in a fixed order (row ``i`` is the ``i``-th ID)."""

    def __len__(self) -> int: ...

    def chunks(self, size: int) -> Iterator[EncodedChunk]:
        """Yield the IDs in order, ``size`` per chunk (the last may be shorter)."""
        ...

    @property
    def checked_unique(self) -> bool:
        """Whether the IDs are known to be distinct (else the protocol checks the hashed points)."""
        ...


def encode_chunk(items: Sequence[str]) -> EncodedChunk:
    """UTF-8 encode a list of IDs into one chunk."""
    encoded = [s.encode("utf-8") for s in items]
    ends = np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)))
    return EncodedChunk(b"".join(encoded), ends)


class ListIDs:
    """An in-memory list of prepared (normalised, distinct) IDs as a source."""

    checked_unique = True

    def __init__(self, items: Sequence[str]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def chunks(self, size: int) -> Iterator[EncodedChunk]:
        """Encode ``size`` IDs at a time."""
        for start in range(0, len(self.items), size):
            yield encode_chunk(self.items[start : start + size])


def as_source(items: Sequence[str] | IDSource) -> IDSource:
    """Wrap a list of strings; pass a source through."""
    if isinstance(items, IDSource) and not isinstance(items, list | tuple):
        return items
    return ListIDs(items)


def _arrow_chunk(column: Any, normalize: tuple[str, ...], where: str, first_row: int) -> EncodedChunk:
    """One record batch's ID column as a chunk: checked for nulls/empties, integers as decimal text."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if column.null_count:
        bad = first_row + int(np.flatnonzero(np.asarray(column.is_null()))[0])
        raise PSIDataError(f"{where}: null ID at row {bad}")
    if pa.types.is_integer(column.type):
        column = pc.cast(column, pa.string())
    elif pa.types.is_large_string(column.type):
        column = pc.cast(column, pa.string())
    elif not pa.types.is_string(column.type):
        raise PSIDataError(f"{where}: unsupported ID column type {column.type} (use text or integers)")
    trimmed = np.asarray(pc.utf8_length(pc.utf8_trim(column, characters=STRIP_CHARACTERS)))
    if len(trimmed) and not trimmed.all():  # empty, or white space only: refused on every path (psi.ids)
        raise PSIDataError(f"{where}: empty ID at row {first_row + int(np.flatnonzero(trimmed == 0)[0])}")
    if normalize:
        return encode_chunk([normalize_id(v, normalize) for v in column.to_pylist()])
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int32)[column.offset : column.offset + len(column) + 1]
    start, stop = int(offsets[0]), int(offsets[-1])
    data = column.buffers()[2]
    raw = data[start:stop].to_pybytes() if data is not None else b""
    return EncodedChunk(raw, offsets[1:].astype(np.int64) - start)


class ParquetIDs:
    """One ID column of a Parquet file, read in record batches (bounded memory).

    Integers become their decimal string; nulls and empty IDs are a :class:`PSIDataError` naming the
    row; ``normalize`` options are applied per batch. Distinctness is checked on the hashed points.
    """

    checked_unique = False

    def __init__(self, path: str | os.PathLike[str], column: str, normalize: Sequence[str] = ()) -> None:
        import pyarrow.parquet as pq

        self.path = Path(path)
        self.column = column
        self.normalize = parse_normalize(normalize)
        problem = input_file_problem(self.path)
        if problem:
            raise PSIDataError(f"{self.path}: {problem}")
        try:
            meta = pq.ParquetFile(self.path).metadata
        except Exception as exc:  # pyarrow raises several types for unreadable files
            raise PSIDataError(f"{self.path}: not a readable Parquet file ({exc})") from None
        names = meta.schema.names
        if column not in names:
            raise PSIDataError(f"{self.path}: missing ID column {column!r} (columns: {names})")
        self._rows = int(meta.num_rows)
        if not self._rows:
            raise PSIDataError(f"{self.path} (column {column!r}): no rows")

    def __len__(self) -> int:
        return self._rows

    def chunks(self, size: int) -> Iterator[EncodedChunk]:
        """Read ``size`` rows per batch and yield each as a chunk."""
        import pyarrow.parquet as pq

        where = f"{self.path} (column {self.column!r})"
        row = 0
        with pq.ParquetFile(self.path) as handle:
            for batch in handle.iter_batches(batch_size=size, columns=[self.column]):
                yield _arrow_chunk(batch.column(0), self.normalize, where, row)
                row += batch.num_rows


def check_unique_points(points: np.ndarray, where: str) -> None:
    """Raise :class:`PSIDataError` if two rows of hashed points are equal (i.e. duplicate IDs).

    Sorts the first 8 bytes as integers and compares full rows only where those agree.
    """
    if len(points) < 2:
        return
    keys = np.ascontiguousarray(points[:, :8]).view("<u8").ravel()
    order = np.argsort(keys, kind="stable")
    ks = keys[order]
    same = np.flatnonzero(ks[1:] == ks[:-1])
    if not len(same):
        return
    flagged = np.zeros(len(points), dtype=bool)
    flagged[same] = flagged[same + 1] = True
    candidates = np.sort(order[flagged])  # every row whose 8-byte prefix occurs more than once
    width = points.shape[1]
    values = np.ascontiguousarray(points[candidates]).view(f"S{width}").ravel()
    by_value = np.argsort(values, kind="stable")
    equal = np.flatnonzero(values[by_value][1:] == values[by_value][:-1])
    if len(equal):
        lo, hi = sorted((int(candidates[by_value[equal[0]]]), int(candidates[by_value[equal[0] + 1]])))
        raise PSIDataError(f"{where}: duplicate ID at rows {lo} and {hi}")


__all__ = [
    "EncodedChunk",
    "IDSource",
    "ListIDs",
    "ParquetIDs",
    "as_source",
    "check_unique_points",
    "encode_chunk",
]

"""Each party bins its own raw columns for WOE / IV, on its own rows, with no one else's help.

A numeric (or date) column gets equal-frequency cut points fitted on the rows being explored — the
SecureBoost binning (:func:`securevfl.methods.secureboost.binning.fit_bins`): at most ``max_bins − 1``
cuts between distinct values, a heavy value in a bin of its own, one bin per value for a column of
few values. A categorical column gets one bin per level for its ``max_bins − 1`` most frequent
levels, the rest in one ``other`` bin. Missing values always fall in a bin of their own, the last
(:attr:`ColumnBins.missing_bin`), so every column's bins are indices ``0 .. max_bins`` and one matrix
of bin indices serves the encrypted per-bin sums (:mod:`securevfl.privacy.paillier.histograms`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from securevfl.data.columns import CATEGORICAL, DATE, ColumnSpec, column_kinds, prepare_columns
from securevfl.errors import ConfigError

#: The SecureBoost binning's largest bin count (securevfl.methods.secureboost.binning.MAX_BINS_LIMIT).
MAX_BINS_LIMIT = 255

from securevfl.exploration.options import DEFAULT_MAX_BINS  # noqa: E402 (re-exported)


@dataclass(frozen=True)
class ColumnBins:
    """One column's bins: its kind, the cut points (numeric) or the levels (categorical), and labels."""

    name: str
    kind: str  # numeric | categorical | date
    max_bins: int
    cuts: tuple[float, ...] = ()  # numeric / date: value v falls in bin #{cuts < v}
    levels: tuple[str, ...] = ()  # categorical: level k is bin k; any other level is bin len(levels) ("other")

    @property
    def missing_bin(self) -> int:
        """The bin of missing values: the last of every column (``max_bins``)."""
        return self.max_bins

    @property
    def width(self) -> int:
        """Bin slots per column, the missing-value bin included."""
        return self.max_bins + 1

    def labels(self) -> list[str]:
        """A readable label per bin slot (unused slots: ``""``)."""
        out = [""] * self.width
        if self.kind == CATEGORICAL:
            for k, level in enumerate(self.levels):
                out[k] = level
            out[len(self.levels)] = "other"
        else:
            cuts = [_show(c, self.kind) for c in self.cuts]
            if not cuts:
                out[0] = "all"
            else:
                out[0] = f"<= {cuts[0]}"
                for k in range(1, len(cuts)):
                    out[k] = f"({cuts[k - 1]}, {cuts[k]}]"
                out[len(cuts)] = f"> {cuts[-1]}"
        out[self.missing_bin] = "missing"
        return out

    def transform(self, values: pd.Series) -> np.ndarray:
        """Each value's bin index (int64)."""
        if self.kind == CATEGORICAL:
            text = values.astype("string")
            missing = text.isna().to_numpy()
            lookup = {level: k for k, level in enumerate(self.levels)}
            out = np.array([lookup.get(v, len(self.levels)) for v in text.fillna("").tolist()], dtype=np.int64)
        else:
            numbers = _as_numbers(values, self.kind)
            missing = np.isnan(numbers)
            out = np.searchsorted(np.asarray(self.cuts, dtype=np.float64), numbers, side="left").astype(np.int64)
        out[missing] = self.missing_bin
        return out

    def as_dict(self, *, edges: bool = True) -> dict[str, object]:
        """For the report: the kind and (where the party shares them) its cut points or levels."""
        out: dict[str, object] = {"kind": self.kind, "max_bins": self.max_bins}
        if edges:
            out.update(cuts=list(self.cuts)) if self.kind != CATEGORICAL else out.update(levels=list(self.levels))
        return out


def _show(value: float, kind: str) -> str:
    if kind == DATE:
        return str(pd.Timestamp(int(value), unit="s").date())
    return f"{value:.6g}"


def _as_numbers(values: pd.Series, kind: str) -> np.ndarray:
    if kind == DATE:
        stamps = pd.to_datetime(values, errors="coerce")
        # seconds since the epoch, whatever the resolution pandas parsed at (ns before pandas 3, us since)
        seconds: np.ndarray = ((stamps - pd.Timestamp(0)) / pd.Timedelta(seconds=1)).to_numpy(dtype=np.float64,
                                                                                                na_value=np.nan)
        return seconds
    numbers: np.ndarray = pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    return numbers


def check_max_bins(max_bins: int) -> None:
    """``max_bins`` in [2, 255] (the SecureBoost binning's range)."""
    if not isinstance(max_bins, int) or not 2 <= max_bins <= MAX_BINS_LIMIT:
        raise ConfigError(f"max_bins must be an integer in [2, {MAX_BINS_LIMIT}], got {max_bins!r}")


def fit_column(name: str, values: pd.Series, kind: str, max_bins: int = DEFAULT_MAX_BINS) -> ColumnBins:
    """The bins of one column, fitted on ``values`` (the rows explored)."""
    check_max_bins(max_bins)
    if kind == CATEGORICAL:
        counts = values.astype("string").dropna().value_counts(sort=False)
        ranked = sorted(counts.items(), key=lambda kv: (-int(kv[1]), str(kv[0])))  # ties: by name, for determinism
        return ColumnBins(name, kind, max_bins, levels=tuple(str(level) for level, _ in ranked[: max_bins - 1]))
    from securevfl.methods.secureboost.binning import fit_bins  # imported here: it loads the methods (torch)

    numbers = _as_numbers(values, kind)
    cuts = fit_bins(numbers.reshape(-1, 1), max_bins).cuts[0]
    return ColumnBins(name, kind, max_bins, cuts=tuple(float(c) for c in cuts))


@dataclass(frozen=True)
class BinnedTable:
    """A party's columns binned: one :class:`ColumnBins` per column, and the rows' bin indices."""

    columns: tuple[ColumnBins, ...]
    bins: np.ndarray  # (rows, columns) int64, values in 0 .. max_bins

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def possible(self) -> np.ndarray:
        """Which bin slots each column can fill: ``(columns, max_bins + 1)`` bool (its bins and the missing one)."""
        width = self.columns[0].width if self.columns else 1
        mask = np.zeros((len(self.columns), width), dtype=bool)
        for j, column in enumerate(self.columns):
            used = len(column.levels) + 1 if column.kind == CATEGORICAL else len(column.cuts) + 1
            mask[j, :used] = True
            mask[j, column.missing_bin] = True
        return mask

    def counts(self) -> np.ndarray:
        """Rows per bin: ``(columns, max_bins + 1)`` int64."""
        width = self.columns[0].width if self.columns else 1
        return np.stack([np.bincount(self.bins[:, j], minlength=width) for j in range(len(self.columns))]) \
            if self.columns else np.zeros((0, width), dtype=np.int64)


def raw_frame(features: np.ndarray | pd.DataFrame, names: tuple[str, ...], spec: ColumnSpec | None,
              where: str) -> tuple[pd.DataFrame, dict[str, str]]:
    """A party's raw feature columns as read for exploring (markers missing, dates parsed) and each one's kind."""
    frame = features.reset_index(drop=True) if isinstance(features, pd.DataFrame) \
        else pd.DataFrame(np.asarray(features, dtype=np.float64), columns=list(names))
    spec = spec if spec is not None else ColumnSpec()
    frame = prepare_columns(frame, spec, where)
    return frame, column_kinds(frame, spec, where)


def bin_table(frame: pd.DataFrame, kinds: Mapping[str, str], max_bins: int = DEFAULT_MAX_BINS) -> BinnedTable:
    """Fit every column's bins on ``frame``'s rows and bin them."""
    columns = tuple(fit_column(str(c), frame[c], kinds[c], max_bins) for c in frame.columns)
    bins = np.stack([col.transform(frame[c]) for col, c in zip(columns, frame.columns, strict=True)], axis=1) \
        if columns else np.zeros((len(frame), 0), dtype=np.int64)
    return BinnedTable(columns, bins)


__all__ = ["DEFAULT_MAX_BINS", "BinnedTable", "ColumnBins", "bin_table", "check_max_bins", "fit_column", "raw_frame"]

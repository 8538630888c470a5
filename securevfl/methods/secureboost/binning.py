"""Each party bins its own columns: quantile cut points, missing values in a bin of their own.

A party fits cut points on its own training rows only (no one else sees them): for each feature the
distinct quantiles of its non-missing values, at most ``max_bins − 1`` cuts, so a column with few
distinct values (a 0/1 one-hot column, a small integer code) gets one bin per value and is never
merged across values. A value ``v`` falls in bin ``b = #{cuts < v}`` (``searchsorted(cuts, v,
"left")``): bins ``0 .. len(cuts)``, and the split "bin <= b" is the threshold ``v <= cuts[b]``.
Missing values (NaN) go to bin :data:`MISSING` = ``max_bins`` of every feature; a split learns on
which side they go. Non-numeric columns are refused: categories reach SecureBoost one-hot encoded by
the party's own preprocessing (:mod:`securevfl.data.preprocess`), one 0/1 column per level.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from securevfl.errors import ConfigError, DataError

MAX_BINS_LIMIT = 255


@dataclass(frozen=True)
class FeatureBins:
    """One party's cut points: ``cuts[f]`` ascending, at most ``max_bins − 1`` per feature."""

    cuts: tuple[np.ndarray, ...]
    max_bins: int

    @property
    def missing_bin(self) -> int:
        """The bin index of missing values (the same for every feature)."""
        return self.max_bins

    @property
    def n_features(self) -> int:
        return len(self.cuts)

    def transform(self, X: np.ndarray) -> np.ndarray:
        """Bin indices ``(rows, features)`` as uint8 (uint16 above 254 bins); NaN -> :attr:`missing_bin`."""
        X = numeric(X, "rows to bin")
        if X.shape[1] != self.n_features:
            raise DataError(f"rows have {X.shape[1]} features; the bins were fitted on {self.n_features}")
        dtype = np.uint8 if self.max_bins < 255 else np.uint16
        out = np.empty(X.shape, dtype=dtype)
        for f, cuts in enumerate(self.cuts):
            column = X[:, f]
            bins = np.searchsorted(cuts, column, side="left")
            bins[np.isnan(column)] = self.missing_bin
            out[:, f] = bins
        return out

    def threshold(self, feature: int, bin_index: int) -> float:
        """The value of the split "bin <= ``bin_index``": ``x <= cuts[bin_index]`` goes left (the last bin: +inf)."""
        cuts = self.cuts[feature]
        return float(cuts[bin_index]) if bin_index < len(cuts) else float("inf")


def numeric(X: np.ndarray, what: str) -> np.ndarray:
    """``X`` as a float64 matrix; a non-numeric column is a DataError naming its position."""
    X = np.asarray(X)
    if X.ndim != 2:
        raise DataError(f"{what} must be a matrix, got shape {X.shape}")
    if X.dtype.kind not in "biuf":
        for j in range(X.shape[1]):
            try:
                X[:, j].astype(np.float64)
            except (TypeError, ValueError):
                raise DataError(f"{what}: column {j} is not numeric (category columns are one-hot encoded by the "
                                "party's preprocessing before binning; pass them through a table file or "
                                "encode them)") from None
    return X.astype(np.float64, copy=False)


def fit_bins(X: np.ndarray, max_bins: int) -> FeatureBins:
    """Quantile cut points of each column of ``X`` (training rows), NaN ignored."""
    if not 2 <= max_bins <= MAX_BINS_LIMIT:
        raise ConfigError(f"max_bins must be in [2, {MAX_BINS_LIMIT}], got {max_bins}")
    X = numeric(X, "training rows")
    cuts = []
    for f in range(X.shape[1]):
        column = X[:, f]
        column = column[~np.isnan(column)]
        distinct, counts = np.unique(column, return_counts=True)
        if len(distinct) <= max_bins:
            cut = distinct[:-1]  # one bin per value: v <= distinct[i] goes left of cut i
        else:
            cut = _equal_frequency_cuts(distinct, counts, max_bins)
        cuts.append(np.ascontiguousarray(cut, dtype=np.float64))
    return FeatureBins(tuple(cuts), max_bins)


def _equal_frequency_cuts(distinct: np.ndarray, counts: np.ndarray, max_bins: int) -> np.ndarray:
    """Cuts between distinct values so each bin holds about an equal share of the rows *still unbinned*.

    A heavy value (the zeros of a mostly-zero column) takes one bin and the other bins share the rest,
    instead of plain quantiles collapsing onto it (which left such a column two or three bins).
    """
    cumulative = np.cumsum(counts)
    total = int(cumulative[-1])
    cuts: list[float] = []
    start, done = 0, 0  # first distinct value not yet binned; rows binned so far
    for bins_left in range(max_bins, 1, -1):
        target = done + (total - done) / bins_left
        i = int(np.searchsorted(cumulative, target, side="left"))
        i = max(i, start)
        if i >= len(distinct) - 1:
            break
        cuts.append(float(distinct[i]))
        done, start = int(cumulative[i]), i + 1
    return np.array(cuts, dtype=np.float64)

"""Statistics of a party's own columns, computed locally on its own rows (nothing leaves the party).

Per column: rows, missing, distinct values; a numeric (or date) column's mean, standard deviation,
minimum, quartiles and maximum; a categorical column's most frequent levels with their counts. What
the other parties see of them is each party's choice (``share_stats``: ``summary`` or ``none``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from securevfl.data.columns import CATEGORICAL, DATE

#: The most frequent levels listed for a categorical column.
TOP_LEVELS = 5
QUANTILES = (0.25, 0.5, 0.75)


def column_stats(values: pd.Series, kind: str, top: int = TOP_LEVELS) -> dict[str, Any]:
    """One column's statistics (JSON-ready floats and ints)."""
    missing = int(values.isna().sum())
    out: dict[str, Any] = {"kind": kind, "count": int(len(values) - missing), "missing": missing,
                           "missing_share": float(missing / len(values)) if len(values) else 0.0,
                           "distinct": int(values.nunique(dropna=True))}
    present = values.dropna()
    if kind == CATEGORICAL:
        counts = present.astype("string").value_counts()
        out["top"] = [[str(level), int(n)] for level, n in counts.head(top).items()]
        return out
    if kind == DATE:
        stamps = pd.to_datetime(present, errors="coerce").dropna()
        if len(stamps):
            out.update(min=str(stamps.min().date()), max=str(stamps.max().date()),
                       median=str(stamps.quantile(0.5).date()))
        return out
    numbers = pd.to_numeric(present, errors="coerce").dropna().to_numpy(dtype=np.float64)
    if len(numbers):
        q = np.quantile(numbers, QUANTILES)
        out.update(mean=float(numbers.mean()), std=float(numbers.std()), min=float(numbers.min()),
                   p25=float(q[0]), p50=float(q[1]), p75=float(q[2]), max=float(numbers.max()),
                   zeros=int((numbers == 0).sum()))
    return out


def table_stats(frame: pd.DataFrame, kinds: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Every column's statistics, by name."""
    return {str(c): column_stats(frame[c], kinds[c]) for c in frame.columns}


__all__ = ["QUANTILES", "TOP_LEVELS", "column_stats", "table_stats"]

"""The label column: a class per row (classification) or a number per row (regression).

``task="auto"`` (the default) reads a label as a regression target when it is numeric with
fractional values and many distinct ones (more than ``AUTO_REGRESSION_VALUES``); anything else is a
class label (text such as ``"<=50K"``, ``"yes"``, or integers). ``--task`` overrides the guess
either way. The active party resolves the task from its own labels; the other parties learn only
the task and the output width (the number of classes, or 1).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from securevfl.errors import ConfigError, DataError

CLASSIFICATION, REGRESSION, AUTO = "classification", "regression", "auto"
TASKS = (CLASSIFICATION, REGRESSION)
#: A numeric label with fractional values and more distinct values than this is a regression target.
AUTO_REGRESSION_VALUES = 20


def check_task(task: str) -> str:
    """``task`` if it is ``auto``, ``classification`` or ``regression``; otherwise a ConfigError."""
    if task not in (AUTO, *TASKS):
        raise ConfigError(f"unknown task {task!r}; choose auto, classification or regression")
    return task


def resolve_task(labels: pd.Series, requested: str, where: str) -> str:
    """The task of a label column (no missing values): ``requested``, or the guess for ``auto``."""
    if check_task(requested) != AUTO:
        return requested
    numeric = pd.to_numeric(labels, errors="coerce")
    if numeric.isna().any():  # text labels
        return CLASSIFICATION
    values = numeric.to_numpy(dtype=np.float64)
    fractional = bool(np.any(values != np.round(values)))
    if fractional and len(np.unique(values)) > AUTO_REGRESSION_VALUES:
        return REGRESSION
    return CLASSIFICATION


def regression_targets(labels: pd.Series, where: str, constant_ok: bool = False) -> np.ndarray:
    """A regression label column as float64; text or a constant target is a DataError naming ``where``.

    ``constant_ok``: rows to score may all carry one value (nothing is learnt from them).
    """
    numeric = pd.to_numeric(labels, errors="coerce")
    bad = labels[numeric.isna()]
    if len(bad):
        raise DataError(f"{where}: label column {labels.name!r} is not numeric (e.g. {bad.iloc[0]!r}); "
                        "a regression target must be a number (or use --task classification)")
    values = numeric.to_numpy(dtype=np.float64)
    if not np.all(np.isfinite(values)):
        raise DataError(f"{where}: label column {labels.name!r} has infinite values")
    if np.ptp(values) == 0 and not constant_ok:
        raise DataError(f"{where}: label column {labels.name!r} is constant ({values[0]:g}); nothing to learn")
    return values

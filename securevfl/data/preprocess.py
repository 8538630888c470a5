"""One party's local preprocessing: fitted on its own training rows, applied to all of its rows.

In vertical FL no one else may see a party's columns, so each party prepares its own (issue #15).
:func:`fit_party_encoder` fits scikit-learn transformers on the training rows only — test rows never
change a median, a mean, a scale or a category list — and :meth:`PartyEncoder.transform` applies them
to the training, test and unaligned rows. Nothing about the encoder crosses the wire; the other
parties learn only the number of encoded columns (a model needs its input width).

Per column kind (:func:`column_kinds`):

* numeric: median imputation (``SimpleImputer(add_indicator=True)``: a 0/1 "missing" column where the
  training rows have blanks), then standardisation (:class:`Float32StandardScaler`);
* categorical (text, boolean, pandas ``category``, or named in ``ColumnSpec.categorical``): blanks
  become a ``(missing)`` level; at most ``max_onehot`` levels in the training rows -> ``OneHotEncoder``
  whose "infrequent" column also takes levels never seen in training; more levels -> ``FeatureHasher``
  into ``hash_buckets`` columns (an unseen level lands in some bucket);
* date (named in ``ColumnSpec.dates``, or a datetime column): year, month and day of week, then as numeric.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.feature_extraction import FeatureHasher
from sklearn.impute import SimpleImputer
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer, OneHotEncoder, OrdinalEncoder, StandardScaler
from sklearn.utils.validation import validate_data

from securevfl.data.columns import CATEGORICAL, DATE, NUMERIC, ColumnSpec, column_kinds, parse_dates
from securevfl.errors import DataError

DATE_PARTS = ("year", "month", "weekday")
_DATE_ATTRS = {"year": "year", "month": "month", "weekday": "day_of_week"}  # Monday = 0
MISSING_LEVEL = "(missing)"
#: Rows encoded at a time: the encoder's transient memory is a few copies of this many rows, not of the table.
TRANSFORM_ROWS = 65_536


class Float32StandardScaler(StandardScaler):
    """``StandardScaler`` with its mean and standard deviation computed in float32.

    securevfl always standardised with float32 statistics of the training rows; scikit-learn would
    accumulate in float64. Computing them as before keeps every bundled dataset's inputs, and so every
    earlier result, bit for bit. A column whose standard deviation is at most 1e-8 is only centred.
    """

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> Float32StandardScaler:
        """Float32 mean and standard deviation of ``X`` (row order as given, C layout, as before)."""
        X = np.ascontiguousarray(validate_data(self, X, dtype=np.float32, reset=True), dtype=np.float32)
        mean, std = X.mean(axis=0), X.std(axis=0)
        self.mean_ = mean.astype(np.float64)
        self.scale_ = np.where(std > 1e-8, std, np.float32(1.0)).astype(np.float64)
        self.var_ = self.scale_**2
        self.n_samples_seen_ = len(X)
        return self


def _as_levels(series: pd.Series) -> np.ndarray:
    """Category levels as text (``3``, not ``3.0``, for integer codes read as floats); missing stays NaN."""

    def text(value: Any) -> Any:
        if value is None or (isinstance(value, float) and np.isnan(value)) or value is pd.NA or value is pd.NaT:
            return np.nan
        if isinstance(value, (float, np.floating)) and float(value).is_integer():
            return str(int(value))
        return str(value)

    return np.array([text(v) for v in series.astype(object)], dtype=object)


def _typed(frame: pd.DataFrame, kinds: dict[str, str], where: str) -> pd.DataFrame:
    """Row-wise typing before the transformers: numbers as float32, levels as text, dates as parts."""
    out: dict[str, Any] = {}
    for column, kind in kinds.items():
        series = frame[column]
        if kind == NUMERIC:
            out[column] = series.to_numpy(dtype=np.float32, na_value=np.nan)
        elif kind == CATEGORICAL:
            out[column] = _as_levels(series)
        else:
            dates = parse_dates(series, where).dt
            for part in DATE_PARTS:
                name = f"{column}_{part}"
                if name in kinds or name in out:
                    raise DataError(f"{where}: date column {column!r} gives a column {name!r}, "
                                    "which the table already has; rename one of them")
                out[name] = getattr(dates, _DATE_ATTRS[part]).to_numpy(dtype=np.float32, na_value=np.nan)
    return pd.DataFrame(out, index=range(len(frame)))


@dataclass(frozen=True)
class PartyEncoder:
    """One party's fitted preprocessing: ``transform`` maps its raw columns to the model's inputs."""

    columns: tuple[str, ...]
    kinds: dict[str, str]
    feature_names: tuple[str, ...]
    summary: dict[str, Any]
    where: str = ""
    transformer: Any = field(default=None, repr=False)

    @property
    def width(self) -> int:
        return len(self.feature_names)

    def transform(self, frame: pd.DataFrame) -> np.ndarray:
        """Encode rows of the party's table (any rows: training, test or unaligned) as float32."""
        missing = [c for c in self.columns if c not in frame.columns]
        if missing:
            raise DataError(f"{self.where or 'table'}: column {missing[0]!r} is missing")
        if self.transformer is None:
            return np.zeros((len(frame), 0), dtype=np.float32)
        out = np.empty((len(frame), self.width), dtype=np.float32)
        with warnings.catch_warnings():  # an unseen level is expected (it maps to the infrequent column)
            warnings.simplefilter("ignore", UserWarning)
            for start in range(0, len(frame), TRANSFORM_ROWS):  # row by row, so chunks change nothing
                rows = frame.iloc[start : start + TRANSFORM_ROWS][list(self.columns)].reset_index(drop=True)
                out[start : start + len(rows)] = self.transformer.transform(_typed(rows, self.kinds, self.where))
        return out

    def row_warnings(self, frame: pd.DataFrame) -> list[list[str]]:
        """Per row, what its encoding had to assume: ``imputed: COL`` or ``unseen category: COL``.

        Imputed: a blank or unreadable value; unseen: a level the training rows never had (a hashed
        column knows no levels).
        """
        notes: list[list[str]] = [[] for _ in range(len(frame))]
        if self.transformer is None or not len(frame):
            return notes
        typed = _typed(frame[list(self.columns)].reset_index(drop=True), self.kinds, self.where)
        known = self._known_levels()
        for column in self.columns:
            kind = self.kinds[column]
            values = typed[f"{column}_{DATE_PARTS[0]}" if kind == DATE else column]
            blank = pd.isna(values).to_numpy()
            for i in np.flatnonzero(blank):
                notes[i].append(f"imputed: {column}")
            if kind == CATEGORICAL and column in known:
                levels = known[column]
                for i in np.flatnonzero(~blank):
                    if values.iloc[i] not in levels:
                        notes[i].append(f"unseen category: {column}")
        return notes

    def _known_levels(self) -> dict[str, frozenset[str]]:
        """The levels each one-hot or embedded column saw in training."""
        known: dict[str, frozenset[str]] = {}
        for name, fitted, cols in getattr(self.transformer, "transformers_", ()):
            if name in ("one_hot", "codes"):
                for column, levels in zip(cols, fitted.named_steps["encode"].categories_, strict=True):
                    known[column] = frozenset(str(v) for v in levels)
        return known


def _numeric_pipeline(standardize: bool) -> Pipeline:
    steps: list[tuple[str, Any]] = [("impute", SimpleImputer(strategy="median", add_indicator=True))]
    if standardize:
        steps.append(("scale", Float32StandardScaler()))
    return Pipeline(steps)


def _levels_imputer() -> SimpleImputer:
    return SimpleImputer(strategy="constant", fill_value=MISSING_LEVEL, missing_values=np.nan)


def fit_party_encoder(frame: pd.DataFrame, spec: ColumnSpec | None = None, *, standardize: bool = True,
                      where: str = "") -> PartyEncoder:
    """Fit one party's encoder on ``frame``, which must hold ITS TRAINING ROWS ONLY (see module docstring).

    ``where`` (a file or party) prefixes errors, such as a column with no value in the training rows.
    """
    spec = spec or ColumnSpec()
    frame = frame.drop(columns=[c for c in spec.drop if c in frame.columns])
    frame.columns = [str(c) for c in frame.columns]
    where = where or "table"
    kinds = column_kinds(frame, spec, where)
    columns = tuple(kinds)
    summary: dict[str, Any] = {"fitted_rows": len(frame), "input_columns": len(columns), "standardised": standardize,
                               "numeric": [], "imputed": {}, "dates": {}, "one_hot": {}, "hashed": {},
                               "dropped": list(spec.drop)}
    if not columns:
        summary["encoded_columns"] = []
        return PartyEncoder(columns, kinds, (), summary, where)
    if len(frame) == 0:
        raise DataError(f"{where}: no training rows to fit the preprocessing on")
    typed = _typed(frame, kinds, where)
    numeric = [c for c in typed.columns if not (c in kinds and kinds[c] == CATEGORICAL)]
    empty = [c for c in numeric if typed[c].isna().all()]
    if empty:
        raise DataError(f"{where}: column {empty[0]!r} has no values in the training rows; drop it (--drop)")
    transformers: list[tuple[str, Any, list[str]]] = []
    names: list[str] = []
    if numeric:
        transformers.append(("numeric", _numeric_pipeline(standardize), numeric))
        summary["numeric"] = [c for c in columns if kinds[c] == NUMERIC]
        summary["dates"] = {c: [f"{c}_{p}" for p in DATE_PARTS] for c in columns if kinds[c] == DATE}
        missing = typed[numeric].isna().sum()
        summary["imputed"] = {c: int(missing[f"{c}_{DATE_PARTS[0]}"] if kinds[c] == DATE else missing[c])
                              for c in columns if kinds[c] != CATEGORICAL}
        summary["imputed"] = {c: n for c, n in summary["imputed"].items() if n}
    one_hot = []
    categorical = [c for c in columns if kinds[c] == CATEGORICAL]
    if spec.embed and categorical:  # integer codes for a learned embedding; placed last (see ``codes``)
        summary["embedded"] = {}
        categorical, coded = [], categorical
    for column in categorical:
        levels = pd.Series(typed[column]).fillna(MISSING_LEVEL).nunique()
        if levels <= spec.max_onehot:
            one_hot.append(column)
            summary["one_hot"][column] = int(levels)
        else:
            hasher = FeatureHasher(n_features=spec.hash_buckets, input_type="string", alternate_sign=False,
                                   dtype=np.float32)
            transformers.append((f"hashed:{column}", Pipeline([("impute", _levels_imputer()), ("hash", hasher)]),
                                 [column]))
            summary["hashed"][column] = {"levels": int(levels), "buckets": spec.hash_buckets}
    if one_hot:
        encoder = OneHotEncoder(handle_unknown="infrequent_if_exist", min_frequency=spec.min_frequency,
                                sparse_output=False, dtype=np.float32)
        transformers.append(("one_hot", Pipeline([("impute", _levels_imputer()), ("encode", encoder)]), one_hot))
    if "embedded" in summary:
        ordinal = OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1,
                                 min_frequency=spec.min_frequency, dtype=np.float32)
        transformers.append(("codes", Pipeline([("impute", _levels_imputer()), ("encode", ordinal),
                                                ("shift", FunctionTransformer(_unseen_is_zero))]), coded))
    transformer = ColumnTransformer(transformers, remainder="drop", sparse_threshold=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        transformer.fit(typed)
    for name, fitted, cols in transformer.transformers_:
        if name == "numeric":
            imputer = fitted.named_steps["impute"]
            flagged = [] if imputer.indicator_ is None else [cols[i] for i in imputer.indicator_.features_]
            names += list(cols) + [f"{c}_missing" for c in flagged]
        elif name == "one_hot":
            out = fitted.named_steps["encode"].get_feature_names_out(cols)
            names += [n.replace("_infrequent_sklearn", "_(infrequent)") for n in out]
        elif name.startswith("hashed:"):
            names += [f"{cols[0]}_hash{i}" for i in range(spec.hash_buckets)]
        elif name == "codes":
            ordinal = fitted.named_steps["encode"]
            for column, levels, rare in zip(cols, ordinal.categories_, ordinal.infrequent_categories_, strict=True):
                # codes 0 (unseen), 1.. (the levels; rare ones share the last)
                n_codes = len(levels) - (0 if rare is None else len(rare) - 1) + 1
                summary["embedded"][column] = int(n_codes)
            names += [f"{c}_code" for c in cols]
    summary["encoded_columns"] = names
    return PartyEncoder(columns, kinds, tuple(names), summary, where, transformer)


def _unseen_is_zero(codes: np.ndarray) -> np.ndarray:
    """Ordinal codes shifted by one, so a level never seen in training (-1) becomes 0."""
    return codes + 1


def code_cardinalities(summary: dict[str, Any]) -> tuple[int, ...]:
    """The number of codes of each embedded column, in order: they are the encoded table's last columns."""
    return tuple(summary.get("embedded", {}).values())


@dataclass(frozen=True)
class EncodedColumns:
    """A party's table as model inputs: every row encoded, the names and what was done."""

    X: np.ndarray
    feature_names: tuple[str, ...]
    summary: dict[str, Any]
    #: the fitted encoder that made ``X`` (what a saved model keeps); None for a peer's placeholder
    encoder: PartyEncoder | None = field(default=None, repr=False, compare=False)

    @property
    def codes(self) -> tuple[int, ...]:
        """The number of codes of each embedded column (:func:`code_cardinalities`)."""
        return code_cardinalities(self.summary)


def as_frame(features: np.ndarray | pd.DataFrame, names: Sequence[str]) -> pd.DataFrame:
    """A party's raw features as a DataFrame (a float matrix becomes float32 columns)."""
    if isinstance(features, pd.DataFrame):
        return features.reset_index(drop=True)
    return pd.DataFrame(np.asarray(features, dtype=np.float32), columns=list(names))


def encode_columns(features: np.ndarray | pd.DataFrame, names: Sequence[str], spec: ColumnSpec | None,
                   fit_rows: np.ndarray, *, standardize: bool = True, where: str = "") -> EncodedColumns:
    """Fit on the rows ``fit_rows`` (the party's training rows, in this order) and encode every row."""
    frame = as_frame(features, names)
    encoder = fit_party_encoder(frame.iloc[np.asarray(fit_rows, dtype=np.int64)], spec, standardize=standardize,
                                where=where)
    return EncodedColumns(encoder.transform(frame), encoder.feature_names, encoder.summary, encoder)


__all__ = ["CATEGORICAL", "DATE", "NUMERIC", "EncodedColumns", "Float32StandardScaler", "PartyEncoder",
           "as_frame", "column_kinds", "encode_columns", "fit_party_encoder"]

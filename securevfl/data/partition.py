"""The vertical partitioner: from one labelled table to the tables each party would really hold.

A :class:`PartitionSpec` says which features go to which party (explicit lists, a named preset,
a seeded random or contiguous split, or vertical image strips), how many training rows are
aligned (held by every party), what happens to the rest (``unaligned`` policy) and how many rows
are held out for testing. :func:`partition` returns one :class:`PartyTable` per party — IDs,
features and, at the active party only, labels — with each party's rows in its own shuffled order,
exactly what PSI would be run on. The test rows are aligned rows every party holds. A party whose
columns are all numeric gets a float32 matrix; one with categorical or date columns gets its raw
columns (a DataFrame) and its share of the dataset's :class:`ColumnSpec`, to encode them itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from securevfl.checks import validate_party_names
from securevfl.data.columns import ColumnSpec, needs_encoding
from securevfl.data.datasets import Dataset
from securevfl.data.labels import CLASSIFICATION
from securevfl.errors import ConfigError
from securevfl.settings import check_declared, integer, number, one_of, same_as, setting

SPLITS = ("random", "contiguous", "strips")
UNALIGNED_POLICIES = ("drop", "active", "spread", "disjoint")


@dataclass(frozen=True)
class PartyTable:
    """One party's local table: row IDs, raw features, and labels at the active party only.

    ``features`` is a float matrix (numeric columns) or a DataFrame of raw columns of any type.
    ``columns`` says how the party encodes them (:mod:`securevfl.data.preprocess`, fitted on its own
    training rows); ``None`` marks features that are model inputs already (a peer's placeholder in a
    deployment), used as they are. ``source`` names the file in error messages. ``task`` is the
    label holder's (``regression``: ``labels`` are float targets).
    """

    name: str
    ids: np.ndarray
    features: np.ndarray | pd.DataFrame
    feature_names: tuple[str, ...]
    labels: np.ndarray | None = None
    strip_shape: tuple[int, int] | None = None
    columns: ColumnSpec | None = field(default_factory=ColumnSpec)
    source: str = ""
    task: str = CLASSIFICATION

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.features):
            raise ConfigError(f"{self.name}: {len(self.ids)} IDs but {len(self.features)} feature rows")
        if self.labels is not None and len(self.labels) != len(self.ids):
            raise ConfigError(f"{self.name}: {len(self.ids)} IDs but {len(self.labels)} labels")

    @property
    def n_rows(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class PartitionSpec:
    """How to cut one dataset into a VFL scenario. Parties are ``active``, ``passive1``, ... by default."""

    parties: int = setting(2, help="Number of parties (1 active + passives).", rule=integer(1))
    party_names: tuple[str, ...] | None = setting(None, help="Comma-separated party names; the first is active.")
    features: Mapping[str, Sequence[str]] | None = setting(None, repeat=True,
                                                           help="PARTY=col1,col2 (repeat per party).")
    preset: str | None = setting(None, flag="--partition", help="Named partition preset.")
    split: str | None = setting(None, rule=one_of(*SPLITS, optional=True),
                                help="Feature split: random | contiguous | strips "
                                     "(default: strips for images, random otherwise).")
    active_features: int | None = setting(None, help="Number of features for the active party.",
                                          rule=integer(0, optional=True))
    aligned: int | None = setting(None, help="Number of aligned training rows (default: all).",
                                  rule=integer(1, optional=True))
    aligned_ratio: float | None = setting(None, help="Fraction of training rows that are aligned.",
                                          rule=number(0, 1, open_low=True, optional=True))
    unaligned: str = setting("drop", help="Rows outside the intersection: drop | active | spread | disjoint.",
                             rule=one_of(*UNALIGNED_POLICIES))
    test_size: float = setting(0.2, job=True, help="Fraction of rows held out for testing.",
                               rule=number(0, 1, open_low=True, open_high=True))
    seed: int = same_as("seed", 0)
    active_rows: int | None = None  # with unaligned="disjoint": rows the active party holds in all

    def __post_init__(self) -> None:
        check_declared(self)
        if self.party_names is not None:
            if len(self.party_names) != self.parties:
                raise ConfigError(f"{len(self.party_names)} party names given for {self.parties} parties")
            if len(set(self.party_names)) != len(self.party_names):
                raise ConfigError(f"party names must be distinct: {self.party_names}")
            validate_party_names(self.party_names)
        if self.features is not None:
            validate_party_names(self.features)
        if self.aligned is not None and self.aligned_ratio is not None:
            raise ConfigError("give either aligned or aligned_ratio, not both")
        integer(0).check("seed", self.seed)  # the seed every part uses (same_as): its rule is the run's
        if self.active_rows is not None and self.unaligned != "disjoint":
            raise ConfigError("active_rows is only meaningful with unaligned='disjoint'")

    @property
    def resolved_party_names(self) -> tuple[str, ...]:
        """The party names given, or ``active``, ``passive1``, ..."""
        if self.party_names is not None:
            return self.party_names
        return ("active",) + tuple(f"passive{i}" for i in range(1, self.parties))


Preset = Callable[[Dataset, PartitionSpec], PartitionSpec]
_PRESETS: dict[str, tuple[Preset, str]] = {}


def register_preset(name: str, description: str) -> Callable[[Preset], Preset]:
    """Register a named partition preset: a function that fills in a spec for a dataset."""

    def wrap(fn: Preset) -> Preset:
        _PRESETS[name] = (fn, description)
        return fn

    return wrap


def preset_names() -> list[str]:
    """Names of the registered partition presets, sorted."""
    return sorted(_PRESETS)


def resolve_preset(dataset: Dataset, spec: PartitionSpec) -> PartitionSpec:
    """Apply ``spec.preset`` (if any) and return the resulting explicit spec."""
    if spec.preset is None:
        return spec
    if spec.preset not in _PRESETS:
        raise ConfigError(f"unknown partition preset {spec.preset!r}; "
                          f"choose one of {', '.join(preset_names()) or 'none'}")
    return replace(_PRESETS[spec.preset][0](dataset, spec), preset=None)


@register_preset("views", "multi-view data (e.g. handwritten): a label-only active party and one passive party "
                 "per view, in the dataset's view order; needs --parties = views + 1")
def views_preset(dataset: Dataset, spec: PartitionSpec) -> PartitionSpec:
    """Each view of a multi-view dataset goes to its own passive party; the active party holds labels only."""
    if not dataset.views:
        raise ConfigError(f"partition 'views' needs a multi-view dataset; {dataset.name} has no views")
    if spec.parties != len(dataset.views) + 1:
        raise ConfigError(f"{dataset.name} has {len(dataset.views)} views: partition 'views' needs "
                          f"parties={len(dataset.views) + 1} (a label-only active party and one per view), "
                          f"got {spec.parties}")
    if spec.features is not None or (spec.active_features or 0) != 0:
        raise ConfigError("partition 'views' assigns the features itself: give no feature lists and no "
                          "active features")
    names = spec.resolved_party_names
    features = {names[0]: [], **{name: list(cols) for name, (_, cols) in zip(names[1:], dataset.views)}}
    return replace(spec, features=features, active_features=0)


def _strips(dataset: Dataset, names: Sequence[str], active_features: int | None) -> dict[str, list[str]]:
    """Vertical strips of an image: each party gets a contiguous band of pixel columns."""
    h, w = dataset.image_shape  # type: ignore[misc]
    out: dict[str, list[str]] = {}
    if active_features == 0:  # a label-only active party: the strips go to the passives
        out[names[0]] = []
        names = names[1:]
    if len(names) > w:
        raise ConfigError(f"cannot cut a {w}-pixel-wide image into {len(names)} vertical strips")
    bounds = np.linspace(0, w, len(names) + 1).round().astype(int)
    for name, lo, hi in zip(names, bounds[:-1], bounds[1:]):
        out[name] = [f"px_{r}_{c}" for r in range(h) for c in range(lo, hi)]
    return out


def assign_features(dataset: Dataset, spec: PartitionSpec) -> dict[str, list[str]]:
    """Feature names per party, validated: known columns, each given once, no passive left empty."""
    names = spec.resolved_party_names
    columns = list(dataset.feature_columns)
    if spec.features is not None:
        given = {n: list(spec.features.get(n, [])) for n in names}
        unknown_parties = set(spec.features) - set(names)
        if unknown_parties:
            raise ConfigError(f"features given for unknown parties {sorted(unknown_parties)}; "
                              f"parties are {list(names)}")
        known = set(columns)
        seen: dict[str, str] = {}
        for party, feats in given.items():
            for f in feats:
                if f not in known:
                    raise ConfigError(f"unknown column {f!r} given to {party}")
                if f in seen:
                    raise ConfigError(f"feature {f!r} given to both {seen[f]} and {party}")
                seen[f] = party
        assignment = given
    else:
        split = spec.split or ("strips" if dataset.image_shape else "random")
        if split == "strips":
            if dataset.image_shape is None:
                raise ConfigError(f"split 'strips' needs an image dataset; {dataset.name} is tabular")
            assignment = _strips(dataset, names, spec.active_features)
        else:
            order = list(columns)
            if split == "random":
                rng = np.random.default_rng(spec.seed)
                order = [order[i] for i in rng.permutation(len(order))]
            assignment = {}
            rest = order
            passives = names[1:]
            if spec.active_features is not None:
                if spec.active_features > len(order) - len(passives):
                    raise ConfigError(
                        f"active_features={spec.active_features} leaves fewer than one feature per passive party "
                        f"({len(order)} features, {len(passives)} passive parties)")
                assignment[names[0]] = order[: spec.active_features]
                rest = order[spec.active_features :]
                chunks = np.array_split(np.arange(len(rest)), max(1, len(passives)))
                for party, idx in zip(passives, chunks):
                    assignment[party] = [rest[i] for i in idx]
                if not passives:
                    assignment[names[0]] = order
            else:
                if len(order) < len(names):
                    raise ConfigError(f"{len(order)} features cannot be split among {len(names)} parties")
                chunks = np.array_split(np.arange(len(order)), len(names))
                for party, idx in zip(names, chunks):
                    assignment[party] = [order[i] for i in idx]
    for party in names[1:]:
        if not assignment.get(party):
            raise ConfigError(f"party {party!r} has no features")
    if not assignment.get(names[0]) and spec.active_features != 0 and spec.features is None:
        raise ConfigError(f"party {names[0]!r} has no features (pass active_features=0 for a label-only active party)")
    return {n: list(assignment.get(n, [])) for n in names}


@dataclass(frozen=True)
class PartitionedData:
    """What :func:`partition` produces: the local tables, plus the simulation's ground truth."""

    tables: dict[str, PartyTable]
    active: str
    classes: tuple[str, ...]
    test_ids: frozenset[str]
    dataset: str
    notes: tuple[str, ...] = field(default=())
    task: str = CLASSIFICATION


def _row_owners(n_train: int, n_aligned: int, policy: str, names: Sequence[str],
                rng: np.random.Generator, active_unaligned: int | None = None) -> dict[str, np.ndarray]:
    """Which training-pool rows (0..n_train-1, already shuffled) each party holds.

    With ``disjoint`` and ``active_unaligned`` set, the active party takes that many unaligned
    rows and the passive parties split the rest (instead of equal shares for every party).
    """
    aligned = np.arange(n_aligned)
    rest = np.arange(n_aligned, n_train)
    owners = {n: [aligned] for n in names}
    active, passives = names[0], list(names[1:])
    if policy == "active":
        owners[active].append(rest)
    elif policy == "spread":
        if len(passives) < 2:
            raise ConfigError("unaligned='spread' needs at least two passive parties")
        owners[active].append(rest)
        for i, chunk in enumerate(np.array_split(rest, len(passives))):
            owners[passives[i]].append(chunk)
    elif policy == "disjoint" and active_unaligned is not None:
        if not 0 <= active_unaligned <= len(rest):
            raise ConfigError(f"the active party cannot hold {active_unaligned} unaligned rows: "
                              f"{len(rest)} rows lie outside the intersection")
        owners[active].append(rest[:active_unaligned])
        for name, chunk in zip(passives, np.array_split(rest[active_unaligned:], max(1, len(passives)))):
            owners[name].append(chunk)
    elif policy == "disjoint":
        for name, chunk in zip(names, np.array_split(rest, len(names))):
            owners[name].append(chunk)
    return {n: np.concatenate(parts) for n, parts in owners.items()}


def split_train_test(n: int, labels: np.ndarray, test_size: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``0..n-1`` split into train and test (stratified when every class has two rows).

    A float regression target is not stratified.
    A split that leaves either side empty (a ``test_size`` too close to 0 or 1 for ``n`` rows) is
    a ConfigError, not scikit-learn's ValueError.
    """
    from sklearn.model_selection import train_test_split

    is_classes = np.issubdtype(np.asarray(labels).dtype, np.integer)
    stratify = labels if is_classes and len(labels) and np.bincount(labels).min() >= 2 else None
    try:
        return train_test_split(np.arange(n), test_size=test_size, random_state=seed, stratify=stratify)
    except ValueError:
        pass
    try:  # too few test rows to hold one of every class: split without stratifying
        return train_test_split(np.arange(n), test_size=test_size, random_state=seed)
    except ValueError:
        raise ConfigError(f"test_size={test_size} leaves no training or no test rows out of {n} rows") from None


def partition(dataset: Dataset, spec: PartitionSpec) -> PartitionedData:
    """Cut ``dataset`` into per-party tables following ``spec`` (see module docstring)."""
    spec = resolve_preset(dataset, spec)
    names = spec.resolved_party_names
    features = assign_features(dataset, spec)
    labels = dataset.labels()
    n = dataset.n_rows
    train_rows, test_rows = split_train_test(n, labels, spec.test_size, spec.seed)
    rng = np.random.default_rng(spec.seed + 1)
    train_rows = rng.permutation(train_rows)
    n_train = len(train_rows)
    if spec.aligned is not None:
        if spec.aligned > n_train:
            raise ConfigError(f"aligned={spec.aligned} exceeds the {n_train} training rows "
                              f"({n} rows minus {len(test_rows)} test rows)")
        n_aligned = spec.aligned
    elif spec.aligned_ratio is not None:
        n_aligned = max(1, int(round(spec.aligned_ratio * n_train)))
    else:
        n_aligned = n_train
    active_unaligned = None if spec.active_rows is None else spec.active_rows - n_aligned - len(test_rows)
    owners = _row_owners(n_train, n_aligned, spec.unaligned, names, rng, active_unaligned)
    ids = dataset.frame[dataset.id_column].to_numpy(dtype=object)
    tables = {}
    for i, name in enumerate(names):
        rows = np.concatenate([train_rows[owners[name]], test_rows])
        rows = np.random.default_rng(spec.seed + 100 + i).permutation(rows)  # each party's own order
        cols = features[name]
        own_spec = dataset.column_spec.restrict(cols)
        X: np.ndarray | pd.DataFrame
        if needs_encoding(dataset.frame[cols], own_spec):
            X = dataset.frame[cols].iloc[rows].reset_index(drop=True)
        else:
            X = (dataset.frame[cols].to_numpy(dtype=np.float32) if cols else np.zeros((n, 0), np.float32))[rows]
        strip = None
        if dataset.image_shape is not None and cols and all(c.startswith("px_") for c in cols):
            width = len({c.rsplit("_", 1)[1] for c in cols})
            if width * dataset.image_shape[0] == len(cols):
                strip = (dataset.image_shape[0], width)
        tables[name] = PartyTable(
            name=name, ids=ids[rows], features=X, feature_names=tuple(cols),
            labels=labels[rows] if i == 0 else None, strip_shape=strip, columns=own_spec,
            source=f"{dataset.name} (party {name})", task=dataset.task)
    notes = [f"{n_aligned} of {n_train} training rows aligned; unaligned policy {spec.unaligned!r}; "
             f"{len(test_rows)} test rows held by every party"]
    if dataset.column_spec.drop:
        notes.append(f"columns dropped before partitioning: {', '.join(dataset.column_spec.drop)}")
    return PartitionedData(tables=tables, active=names[0], classes=dataset.classes,
                           test_ids=frozenset(ids[test_rows]), dataset=dataset.name, notes=tuple(notes),
                           task=dataset.task)

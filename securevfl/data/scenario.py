"""A VFL scenario: every party's table plus the agreed alignment, and each party's own view of it.

Alignment comes from PSI in a real run (:func:`scenario_from_tables` with a PSI aligner) or, in
a simulation, from a plaintext intersection that the scenario records as such. The active party
then holds out test rows among the aligned positions (non-secret indices it announces); only then
does every party fit its own preprocessing (imputation, one-hot, standardisation:
:mod:`securevfl.data.preprocess`) on its own training rows — its aligned training rows and its
unaligned rows, never a test row — and apply it to all its rows. A role receives only its own
:class:`PartyData` — never another party's table.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from securevfl.data.partition import PartitionedData, PartyTable, split_train_test
from securevfl.errors import ConfigError, DataError
from securevfl.seeding import simulation_rng

if TYPE_CHECKING:
    from securevfl.data.preprocess import EncodedColumns


@dataclass(frozen=True)
class Alignment:
    """Per party: positions of its aligned rows in the agreed order, and of its unaligned rows.

    ``present`` (partial coverage, issue 44): per passive party, which agreed positions it holds (a
    boolean mask over them); its ``aligned`` rows are then those positions' rows, in order. A party
    without a mask holds every agreed position (the intersection of every party: today's default).
    """

    aligned: dict[str, np.ndarray]
    unaligned: dict[str, np.ndarray]
    method: str
    cost: dict = field(default_factory=dict)
    present: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def size(self) -> int:
        """The agreed positions (every party's rows, or with partial coverage the active party's)."""
        return max(len(rows) for rows in self.aligned.values())

    @property
    def partial(self) -> bool:
        """Whether some party does not hold some agreed position."""
        return any(not mask.all() for mask in self.present.values())

    @property
    def shared(self) -> int:
        """The agreed positions every party holds (the intersection; all of them without partial coverage)."""
        if not self.present:
            return self.size
        return int(np.logical_and.reduce(list(self.present.values())).sum())

    def patterns(self, parties: tuple[str, ...], positions: np.ndarray) -> np.ndarray:
        """Per agreed position, the parties that hold it, joined by ``+`` in ``parties``' order (``bank+shop``)."""
        return pattern_names(parties, [self.held(p, positions) for p in parties], len(positions))

    def held(self, party: str, positions: np.ndarray) -> np.ndarray:
        """Which of the agreed ``positions`` party ``party`` holds (a boolean mask over them)."""
        mask = self.present.get(party)
        return np.ones(len(positions), dtype=bool) if mask is None else mask[positions]

    def rows(self, party: str, positions: np.ndarray) -> np.ndarray:
        """Party ``party``'s table rows of the agreed ``positions`` it holds, in their order."""
        mask = self.present.get(party)
        if mask is None:
            return self.aligned[party][positions]
        rank = np.cumsum(mask) - 1
        return self.aligned[party][rank[positions[mask[positions]]]]


Aligner = Callable[[Mapping[str, PartyTable], str], Alignment]


def pattern_names(parties: Sequence[str], held: Sequence[np.ndarray], rows: int) -> np.ndarray:
    """Per row, the parties that hold it (``held``: a mask per party), joined by ``+`` in ``parties``' order."""
    code = np.zeros(rows, dtype=np.int64)
    for i, mask in enumerate(held):
        code |= np.asarray(mask, dtype=np.int64) << i
    names = np.empty(rows, dtype=object)
    for value in np.unique(code):
        names[code == value] = "+".join(p for i, p in enumerate(parties) if value >> i & 1)
    return names


def align_plaintext(tables: Mapping[str, PartyTable], active: str) -> Alignment:
    """Plaintext intersection for simulations (every party's IDs in one place): NOT private.

    Used only when the caller asks to skip PSI; the report records ``alignment: plaintext``.
    """
    common = None
    for t in tables.values():
        common = set(t.ids) if common is None else common & set(t.ids)
    order = np.array(sorted(common or ()), dtype=object)
    aligned, unaligned = {}, {}
    for name, t in tables.items():
        pos = {v: i for i, v in enumerate(t.ids)}
        aligned[name] = np.array([pos[v] for v in order], dtype=np.int64)
        mask = np.ones(len(t.ids), bool)
        mask[aligned[name]] = False
        unaligned[name] = np.flatnonzero(mask)
    return Alignment(aligned=aligned, unaligned=unaligned, method="plaintext (simulation, PSI skipped)")


def align_plaintext_covering(tables: Mapping[str, PartyTable], active: str) -> Alignment:
    """:func:`align_plaintext` over every row of the active party (each passive party matched with it alone).

    The agreed order is :func:`covering_order`'s even where every passive party holds every row (as
    deployed, where no party learns that the others do).
    """
    own = {v: i for i, v in enumerate(tables[active].ids)}
    pairs = {}
    for name, t in tables.items():
        if name != active:
            matched = [(own[v], i) for i, v in enumerate(t.ids) if v in own]
            pairs[name] = (np.array([a for a, _ in matched], np.int64), np.array([b for _, b in matched], np.int64))
    return covering_alignment(tables, active, pairs, "plaintext (simulation, PSI skipped), every active row")


def covering_order(ids: list[str]) -> np.ndarray:
    """The agreed order of the active party's rows under partial coverage: by a keyed hash of each ID.

    The key is a digest of the active party's whole ID list, which no passive party knows: a passive
    party told the positions of its rows learns where they fall in an order that says nothing about
    the active party's other IDs (sorted IDs would show which IDs lie between two of its own). The
    same IDs give the same order, in one process and deployed.
    """
    key = hashlib.sha256(b"securevfl/coverage-order/v1")
    for item in sorted(ids):
        data = item.encode("utf-8")
        key.update(len(data).to_bytes(4, "big") + data)
    secret = key.digest()
    digests = [hmac.new(secret, item.encode("utf-8"), hashlib.sha256).digest() for item in ids]
    return np.asarray(sorted(range(len(ids)), key=digests.__getitem__), dtype=np.int64)


def covering_alignment(tables: Mapping[str, PartyTable], active: str,
                       pairs: Mapping[str, tuple[np.ndarray, np.ndarray]], method: str,
                       cost: Mapping[str, Any] | None = None) -> Alignment:
    """Every row of the active party in the agreed order, each passive party holding the rows it matched.

    The order is :func:`covering_order`'s.
    ``pairs``: per passive party, the active party's rows it matched and its own matching rows (element
    for element), as pairwise PSI gives them. A passive party's unmatched rows are its unaligned ones.
    """
    order = covering_order([str(i) for i in tables[active].ids])
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    aligned = {active: order}
    unaligned = {active: np.zeros(0, np.int64)}
    present: dict[str, np.ndarray] = {}
    for name, (active_rows, own_rows) in pairs.items():
        where = position[np.asarray(active_rows, dtype=np.int64)]
        sort = np.argsort(where, kind="stable")
        mask = np.zeros(len(order), dtype=bool)
        mask[where] = True
        present[name] = mask
        aligned[name] = np.asarray(own_rows, dtype=np.int64)[sort]
        rest = np.ones(tables[name].n_rows, dtype=bool)
        rest[aligned[name]] = False
        unaligned[name] = np.flatnonzero(rest)
    return Alignment(aligned=aligned, unaligned=unaligned, method=method, cost=dict(cost or {}), present=present)


NO_ALIGNMENT_NOTE = "one party: no alignment needed"


def align_none(tables: Mapping[str, PartyTable], active: str) -> Alignment:
    """The alignment of a one-party run: all its rows, in its own order; nothing is run or revealed."""
    if len(tables) != 1:
        raise ConfigError(f"alignment 'none' is for one party; got {len(tables)} parties")
    (name, table), = tables.items()
    return Alignment(aligned={name: np.arange(table.n_rows, dtype=np.int64)},
                     unaligned={name: np.zeros(0, dtype=np.int64)},
                     method="none", cost={"note": NO_ALIGNMENT_NOTE})


def _align(aligner: Aligner, tables: Mapping[str, PartyTable], active: str) -> Alignment:
    """Run ``aligner``, except for a single party, which has nothing to align with."""
    return align_none(tables, active) if len(tables) == 1 else aligner(tables, active)


def _alignment_note(alignment: Alignment) -> str:
    if alignment.method == "none":
        return f"alignment: none ({NO_ALIGNMENT_NOTE})"
    return f"alignment: {alignment.method}"


def training_rows(aligned: np.ndarray, train: np.ndarray, unaligned: np.ndarray) -> np.ndarray:
    """A party's own rows outside the test set, in the order its preprocessing is fitted on.

    ``aligned``: its rows in the agreed order; ``train``: the training positions of that order;
    ``unaligned``: its rows outside the intersection (never test rows).
    """
    return np.concatenate([aligned[train], unaligned])


def take_rows(array: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``array[rows]``; a row-broadcast array (a deployed peer's placeholder) stays a view costing no memory."""
    if array.ndim and array.strides[0] == 0 and len(array):
        if len(rows) and (rows.min() < 0 or rows.max() >= len(array)):
            raise IndexError(f"row index out of range for {len(array)} rows")
        return np.broadcast_to(array[:1], (len(rows), *array.shape[1:]))
    return array[rows]


def encode_table(table: PartyTable, fit_rows: np.ndarray, *, standardize: bool = True) -> EncodedColumns:
    """``table``'s model inputs: its own preprocessing fitted on ``fit_rows`` only, applied to every row.

    A table without a column spec (a peer's placeholder) is used as it is.
    """
    from securevfl.data.preprocess import EncodedColumns, encode_columns

    if table.columns is None:
        X = np.asarray(table.features, dtype=np.float32)
        return EncodedColumns(X, table.feature_names, {})
    return encode_columns(table.features, table.feature_names, table.columns, fit_rows, standardize=standardize,
                          where=table.source or f"party {table.name!r}")


@dataclass(frozen=True)
class Coverage:
    """Which agreed training and test positions each passive party holds (partial coverage, issue 44).

    The active party's view holds every passive party's masks; a passive party's, its own only
    (the positions of its rows among the agreed ones: what its part in each batch needs).
    """

    train: dict[str, np.ndarray]
    test: dict[str, np.ndarray]

    def split(self, name: str) -> dict[str, np.ndarray]:
        """The masks of the ``train`` or ``test`` positions."""
        return self.train if name == "train" else self.test


@dataclass(frozen=True)
class PartyData:
    """One party's data as its role sees it (its columns encoded by its own preprocessing)."""

    name: str
    feature_names: tuple[str, ...]
    X_train: np.ndarray
    X_test: np.ndarray
    X_unaligned: np.ndarray
    ids_train: np.ndarray
    ids_unaligned: np.ndarray
    y_train: np.ndarray | None = None
    y_test: np.ndarray | None = None
    y_unaligned: np.ndarray | None = None
    strip_shape: tuple[int, int] | None = None
    n_classes: int = 2  # the model's output width: the class count, or 1 for regression
    task: str = "classification"  # or "regression" (agreed by all parties, like the class count)
    codes: tuple[int, ...] = ()  # the last len(codes) columns are category codes (0..n-1) to embed
    #: Partial coverage: who holds which agreed row (None: every party holds every one).
    coverage: Coverage | None = None

    @property
    def n_features(self) -> int:
        return self.X_train.shape[1]

    def positions(self, split: str) -> int:
        """The agreed ``train`` or ``test`` positions (every party counts them alike, held or not)."""
        X = self.X_train if split == "train" else self.X_test
        if self.coverage is None or self.name not in self.coverage.train:
            return len(X)
        return len(self.coverage.split(split)[self.name])

    def own_rows(self, split: str, positions: np.ndarray) -> np.ndarray:
        """The party's rows (indices into its ``X_train`` / ``X_test``) of the agreed ``positions`` it holds."""
        if self.coverage is None or self.name not in self.coverage.train:
            return positions
        mask = self.coverage.split(split)[self.name]
        return (np.cumsum(mask) - 1)[positions[mask[positions]]]

    def peer_masks(self, split: str, positions: np.ndarray) -> dict[str, np.ndarray] | None:
        """At the active party: which of ``positions`` each passive party holds (None: all of them)."""
        if self.coverage is None:
            return None
        return {p: mask[positions] for p, mask in self.coverage.split(split).items() if p != self.name}

    @property
    def X_local(self) -> np.ndarray:
        """All rows this party holds outside the test set (aligned training rows first)."""
        return np.concatenate([self.X_train, self.X_unaligned])


@dataclass(frozen=True)
class Scenario:
    """Tables, alignment and the train/test split over aligned positions."""

    tables: dict[str, PartyTable]
    active: str
    classes: tuple[str, ...]
    alignment: Alignment
    train: np.ndarray
    test: np.ndarray
    dataset: str = ""
    notes: tuple[str, ...] = ()
    task: str = "classification"
    _encoded: dict[tuple[str, bool], EncodedColumns] = field(default_factory=dict, init=False, repr=False,
                                                             compare=False)

    @property
    def parties(self) -> tuple[str, ...]:
        return tuple(self.tables)

    @property
    def passives(self) -> tuple[str, ...]:
        return tuple(n for n in self.tables if n != self.active)

    @property
    def n_classes(self) -> int:
        """The model's output width: the number of classes, or 1 for regression."""
        return 1 if self.task == "regression" else len(self.classes)

    def encoded(self, name: str, *, standardize: bool = True) -> EncodedColumns:
        """Party ``name``'s encoded table (fitted on its training rows once, then kept)."""
        if name not in self.tables:
            raise ConfigError(f"unknown party {name!r}; parties are {list(self.tables)}")
        key = (name, standardize)
        if key not in self._encoded:
            rows = np.concatenate([self.alignment.rows(name, self.train), self.alignment.unaligned[name]])
            self._encoded[key] = encode_table(self.tables[name], rows, standardize=standardize)
        return self._encoded[key]

    def with_alignment_cost(self, cost: Mapping[str, Any]) -> Scenario:
        """The same scenario (same rows, same fitted encodings) with the alignment's cost replaced."""
        out = replace(self, alignment=replace(self.alignment, cost=dict(cost)))
        out._encoded.update(self._encoded)  # the rows did not change: the encodings stand
        return out

    def validation(self, fraction: float = 0.2, seed: int = 0) -> Scenario:
        """The same tables with a seeded ``fraction`` of the training rows as the test set.

        For choosing settings (a learning rate, a model) without looking at the test rows: the
        test rows are left out altogether, and every party's encoding is fitted again on the
        remaining training rows.
        """
        if not 0 < fraction < 1:
            raise ConfigError(f"the validation fraction must be in (0, 1), got {fraction}")
        n = len(self.train)
        n_val = min(max(int(np.ceil(fraction * n)), 1), n - 1)
        if n_val < 1:
            raise ConfigError(f"a validation split needs at least 2 training rows, got {n}")
        order = simulation_rng(seed, "validation").permutation(n)
        return replace(self, train=np.sort(self.train[order[n_val:]]), test=np.sort(self.train[order[:n_val]]),
                       notes=(*self.notes, f"validation split: {n_val} of the {n} training rows as the test set"))

    def remember_encoding(self, name: str, encoded: EncodedColumns) -> None:
        """Keep party ``name``'s standardised encoding, fitted elsewhere on this scenario's training rows."""
        self._encoded[(name, True)] = encoded

    def party_data(self, name: str, *, standardize: bool = True) -> PartyData:
        """The view of party ``name``: its aligned train/test rows in agreed order, its own rest.

        Its columns are encoded by its own preprocessing, fitted on its training rows only
        (``standardize=False``: imputed and encoded, not scaled).
        """
        encoded = self.encoded(name, standardize=standardize)
        t = self.tables[name]
        train_rows, test_rows = self.alignment.rows(name, self.train), self.alignment.rows(name, self.test)
        rest = self.alignment.unaligned[name]
        X = encoded.X
        y = t.labels
        return PartyData(
            name=name, feature_names=encoded.feature_names,
            X_train=take_rows(X, train_rows), X_test=take_rows(X, test_rows), X_unaligned=take_rows(X, rest),
            ids_train=take_rows(t.ids, train_rows), ids_unaligned=take_rows(t.ids, rest),
            y_train=None if y is None else y[train_rows],
            y_test=None if y is None else y[test_rows],
            y_unaligned=None if y is None else y[rest],
            strip_shape=t.strip_shape if encoded.feature_names == t.feature_names else None,
            n_classes=self.n_classes, task=self.task, codes=encoded.codes, coverage=self._coverage(name))

    def _coverage(self, name: str) -> Coverage | None:
        """What party ``name`` knows of who holds which agreed row: the active party every peer's, a peer its own."""
        present = self.alignment.present
        if not self.alignment.partial:
            return None
        parties = [p for p in self.passives if p in present] if name == self.active else [name]
        return Coverage({p: self.alignment.held(p, self.train) for p in parties},
                        {p: self.alignment.held(p, self.test) for p in parties})


def scenario_from_partition(data: PartitionedData, aligner: Aligner = align_plaintext) -> Scenario:
    """Align simulated tables and keep the partition's test rows as the test set."""
    alignment = _align(aligner, data.tables, data.active)
    active_ids = data.tables[data.active].ids[alignment.aligned[data.active]]
    is_test = np.array([i in data.test_ids for i in active_ids], dtype=bool)
    return Scenario(tables=dict(data.tables), active=data.active, classes=data.classes,
                    alignment=alignment, train=np.flatnonzero(~is_test), test=np.flatnonzero(is_test),
                    dataset=data.dataset, notes=data.notes + (_alignment_note(alignment),), task=data.task)


def check_shared_classes(labels: np.ndarray, classes: tuple[str, ...], n: int, task: str = "classification") -> None:
    """The shared rows must hold two classes (a regression target: two values), or a DataError."""
    present = np.unique(labels)
    if task == "regression":
        if len(present) < 2:
            raise DataError(f"the {n} rows shared by all parties have one target value only; nothing to learn")
        return
    if len(present) < 2:
        only = classes[int(present[0])] if len(present) and int(present[0]) < len(classes) else "?"
        raise DataError(f"the {n} rows shared by all parties have one class only ({only!r}); "
                        "training needs at least two")


def scenario_from_tables(tables: Mapping[str, PartyTable], active: str, classes: tuple[str, ...], *,
                         test_size: float = 0.2, seed: int = 0, aligner: Aligner = align_plaintext,
                         dataset: str = "") -> Scenario:
    """Align real per-party tables (PSI in production) and hold out a stratified test split."""
    labels = tables[active].labels if active in tables else None
    if labels is None:
        raise DataError(f"the active party {active!r} must hold the labels")
    alignment = _align(aligner, tables, active)
    n = alignment.size
    if n < 10:
        raise DataError(f"only {n} rows are shared by all parties; at least 10 are needed to train and test")
    y = labels[alignment.aligned[active]]
    task = tables[active].task
    check_shared_classes(y, classes, n, task)
    train, test = split_train_test(n, y, test_size, seed)
    return Scenario(tables=dict(tables), active=active, classes=classes, alignment=alignment,
                    train=np.sort(train), test=np.sort(test), dataset=dataset, task=task,
                    notes=(f"{_alignment_note(alignment)}; {n} shared rows",))

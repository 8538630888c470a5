"""Every customer scored: held-out rows per coverage pattern, the default against hand-built models and LASER-VFL.

Shared by ``benchmarks/coverage.py`` (the full benchmark) and the ``coverage`` section of
``securevfl bench``. Each dataset is cut over its parties (the partitioner's columns and held-out
rows); each passive party then holds each row, training and held-out alike, with probability ``p``
(its own draw), the active party every row. Per dataset, ``p`` and seed it trains on the training
rows and scores the held-out rows four ways, for one method that trains on partial rows (``method``,
default SplitNN; any of :func:`capable_methods`):

* ``every_row``: the method as it trains by default, on every row (SplitNN: one model with absent
  embeddings, party dropout, the active party's own head);
* ``stitched``: the method on the rows every party holds (``--require-all-parties``), and the active
  party's ``local`` model for the other rows — what a user of an all-parties-only toolkit (FATE,
  SecretFlow) stitches by hand;
* ``local``: the active party's own model on its own columns (trained on all its rows);
* ``laser_vfl``: LASER-VFL (``laser-vfl``, the issue's named peer), by default: trained on every
  row, each row scored by the heads of the parties that hold it — only where the method is a
  split-learning one (:data:`LASER_PEERS`); for the others the way is left out,

and reports AUC (binary), accuracy (multi-class) or RMSE (regression) per pattern (which parties hold
the row) and over all rows. Keys: ``coverage.<dataset>.p<percent>.<way>.<pattern>.<metric>`` (means
over the seeds; the pattern ``all`` is every held-out row) for SplitNN, and
``coverage.<method>.<dataset>.p<percent>...`` for any other method (:func:`label`); the ratios of
:func:`ratios`: ``coverage.<dataset>.p<percent>.all.ratio_vs_best_baseline`` (every_row over the
better of stitched and local), ``...all.ratio_vs_laser_vfl`` (every_row over laser_vfl, where it
ran; both > 1: every_row better, RMSE inverted) and ``...train_time_ratio_vs_splitnn`` (every_row's
training time over the method's on the intersection: today's SplitNN for the default method).
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

Tick = Callable[[str], None]
#: (dataset, parties, partition split, rows kept (None: all), epochs)
Case = tuple[str, int, str, int | None, int]

BREAST_CANCER: Case = ("breast-cancer", 3, "random", None, 20)
#: The issue's tables, sized for 2 cores (``benchmarks/coverage.py``).
FULL: tuple[Case, ...] = (("adult", 3, "random", 20_000, 10), ("california-housing", 2, "random", None, 30),
                          ("mnist-5k", 4, "strips", None, 10))
#: ``benchmarks/coverage.py --quick`` (and the ``full`` size of the bench section).
QUICK: tuple[Case, ...] = (BREAST_CANCER, ("california-housing", 2, "random", 4000, 30))
#: Further cases ``--datasets`` can name: digits over 4 parties (as EASTER's figures in docs/easter.md).
EXTRA: tuple[Case, ...] = (("digits", 4, "strips", None, 10),)
WAYS = ("every_row", "stitched", "local", "laser_vfl")
DEFAULT_METHOD = "splitnn"
#: The split-learning methods LASER-VFL (itself split learning) is a peer of: the ``laser_vfl`` way runs for these.
LASER_PEERS = ("splitnn", "pyvertical", "cvfl")
#: A method's options where ``--option`` gives none: test-sized keys and no encryption where the key
#: changes only the time, not the model (hetero-lr: fixed point at 32 fraction bits; secureboost: the
#: same trees as with Paillier, tests/test_secureboost.py).
BENCH_OPTIONS: dict[str, dict[str, str]] = {
    "hetero-lr": {"key_bits": "1024"},
    "secureboost": {"encrypt": "false", "trees": "30", "max_depth": "4"},
}
#: Methods that take no ``epochs`` or ``batch_size`` (secureboost: trees, from its options).
NO_EPOCHS = ("secureboost",)
#: Metrics where lower is better (the ratios are inverted for them).
LOWER_IS_BETTER = ("rmse",)


@dataclass(frozen=True)
class CoverageBench:
    """What one measurement trains: the cases, each passive party's chance of holding a row, the seeds."""

    cases: tuple[Case, ...] = QUICK
    coverages: tuple[float, ...] = (1.0, 0.5)
    seeds: tuple[int, ...] = (0,)
    party_dropout: float | None = None  # the every-row model's --party-dropout (None: its own default)
    method: str = DEFAULT_METHOD  # every_row's and all_parties' method (any of capable_methods())
    options: Mapping[str, str] = field(default_factory=dict)  # its options, over BENCH_OPTIONS
    batch_size: int = 64  # of every way that trains in epochs

    def __post_init__(self) -> None:
        from securevfl.errors import ConfigError

        if self.method != DEFAULT_METHOD and self.method not in capable_methods():
            raise ConfigError(f"coverage bench: method {self.method!r} does not train on partial rows (or cannot "
                              f"save a model); these do: {', '.join(capable_methods())}")
        if not self.cases or not self.coverages or not self.seeds:
            raise ConfigError("coverage bench: at least one case, one coverage and one seed")
        if any(not 0.0 < p <= 1.0 for p in self.coverages):
            raise ConfigError(f"coverage bench: each coverage p must be in (0, 1], got {self.coverages}")
        if any(parties < 2 or epochs < 1 for _, parties, _, _, epochs in self.cases):
            raise ConfigError("coverage bench: each case needs >= 2 parties and >= 1 epoch")


def capable_methods() -> list[str]:
    """The methods the benchmark measures: trained on partial rows, saved and scored (not the active party's alone)."""
    from securevfl.methods.base import method_class, method_names

    return [n for n in method_names() if (c := method_class(n)).partial_rows and not c.standalone
            and not c.cannot_save]


def method_options(method: str, given: Mapping[str, str] | None = None) -> dict[str, str]:
    """``method``'s options in the benchmark: :data:`BENCH_OPTIONS`, then ``given`` over them.

    hetero-lr: a key under 2048 bits comes with ``insecure_allow_small_key`` (test-sized keys).
    """
    options = {**BENCH_OPTIONS.get(method, {}), **(given or {})}
    if method == "hetero-lr" and int(options.get("key_bits", 2048)) < 2048:
        options.setdefault("insecure_allow_small_key", "true")
    return options


def label(method: str, dataset: str) -> str:
    """A case's key part: the dataset, prefixed with the method where it is not the default."""
    return dataset if method == DEFAULT_METHOD else f"{method}.{dataset}"


def select_cases(names: list[str] | None = None, *, quick: bool = False, rows: int | None = None,
                 epochs: int | None = None) -> tuple[Case, ...]:
    """The cases ``benchmarks/coverage.py`` runs: ``names`` (None: :data:`QUICK` or :data:`FULL`).

    A name is a dataset of the run's size first (``quick``: :data:`QUICK`, else :data:`FULL`), then of
    the other size, then of :data:`EXTRA`; ``rows`` (0: all) and ``epochs`` replace every case's.
    """
    from securevfl.errors import ConfigError

    ordered = (*(QUICK if quick else FULL), *(FULL if quick else QUICK), *EXTRA)
    known = {c[0]: c for c in reversed(ordered)}  # the first of a name wins
    if names is None:
        cases = QUICK if quick else FULL
    else:
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ConfigError(f"coverage bench: unknown dataset(s) {', '.join(unknown)}; known: "
                              f"{', '.join(sorted(known))}")
        cases = tuple(known[n] for n in names)
    return tuple((name, parties, split, (rows or None) if rows is not None else kept,
                  epochs if epochs is not None else runs) for name, parties, split, kept, runs in cases)


def from_sizes(sizes: Any, *, party_dropout: float | None = None) -> CoverageBench:
    """The ``coverage`` section's measurement at a ``securevfl bench`` size (:class:`~securevfl.bench.config.Sizes`).

    ``quick``: breast-cancer at p 1.0 and 0.5, one seed; ``full``: what ``benchmarks/coverage.py --quick`` runs.
    """
    return CoverageBench(cases=tuple(sizes.coverage_cases), coverages=tuple(sizes.coverage_coverages),
                         seeds=tuple(sizes.coverage_seeds), party_dropout=party_dropout)


# ------------------------------------------------------------------------------------------- data and scoring
def party_files(name: str, parties: int, split: str, rows: int | None, p: float, seed: int,
                work: Path) -> tuple[dict[str, Path], dict[str, Path], pd.Series, str]:
    """Training and held-out files per party (passive rows kept with probability ``p``), the truth, the task."""
    import pandas as pd

    from securevfl.data import DatasetOptions, PartitionSpec, load_dataset, partition

    data = partition(load_dataset(name, DatasetOptions(seed=seed)), PartitionSpec(parties=parties, split=split,
                                                                                   seed=seed, test_size=0.25))
    rng = np.random.default_rng(seed)
    active = data.active
    ids = data.tables[active].ids
    keep_ids = set(rng.choice(ids, rows, replace=False)) if rows and rows < len(ids) else set(ids)
    train: dict[str, Path] = {}
    test: dict[str, Path] = {}
    truth = None
    for party, table in data.tables.items():
        frame = (table.features.reset_index(drop=True).copy() if isinstance(table.features, pd.DataFrame)
                 else pd.DataFrame(np.asarray(table.features, dtype=np.float64), columns=list(table.feature_names)))
        frame.insert(0, "row_id", table.ids)
        if table.labels is not None:
            labels = table.labels if data.task == "regression" else np.asarray(data.classes)[table.labels]
            frame["label"] = labels
        held = frame.row_id.isin(keep_ids) & (rng.random(len(frame)) < (1.0 if party == active else p))
        frame = frame[held]
        is_test = frame.row_id.isin(data.test_ids)
        for target, part in ((train, frame[~is_test]), (test, frame[is_test])):
            target[party] = work / f"{'train' if target is train else 'test'}_{party}.csv"
            part.to_csv(target[party], index=False)
        if party == active:
            truth = frame[is_test].set_index("row_id").label
    assert truth is not None
    return train, test, truth, data.task


def ways_of(method: str) -> tuple[str, ...]:
    """The ways measured for ``method``: :data:`WAYS`, less ``laser_vfl`` unless it is a split-learning method."""
    return tuple(w for w in WAYS if w != "laser_vfl" or method in LASER_PEERS)


def score_ways(train: dict[str, Path], test: dict[str, Path], epochs: int, seed: int, work: Path,
               active: str, party_dropout: float | None = None, seconds: dict[str, float] | None = None, *,
               method: str = DEFAULT_METHOD, options: Mapping[str, str] | None = None,
               batch_size: int = 64) -> tuple[dict[str, pd.DataFrame], pd.Series]:
    """Each way's held-out predictions (indexed by ID; the ways of :func:`ways_of`), and each row's coverage pattern.

    ``seconds``: filled with each trained model's training wall time (``all_parties``: ``method`` on
    the intersection; SplitNN: today's SplitNN). ``options``: ``method``'s (:func:`method_options`).
    """
    import securevfl

    common: dict[str, Any] = {"data_files": {p: str(f) for p, f in train.items()}, "id_column": "row_id",
                              "label_column": "label", "device": "cpu", "seed": seed}
    new = {p: str(f) for p, f in test.items()}
    frames: dict[str, pd.DataFrame] = {}
    trained = [("every_row", method, False), ("all_parties", method, True), ("local", "local", False),
               ("laser_vfl", "laser-vfl", False)]
    for way, name, require_all in [t for t in trained if t[0] in ("all_parties", *ways_of(method))]:
        # every way trains its epochs (splitnn's and local's own default, early stopping, would hold out rows)
        extra: dict[str, Any] = ({} if name in NO_EPOCHS
                                 else {"epochs": epochs, "batch_size": batch_size, "early_stopping": 0})
        if name == method and options:
            extra["options"] = dict(options)
        if way == "every_row" and party_dropout is not None:
            extra["party_dropout"] = party_dropout
        began = time.perf_counter()
        securevfl.train(name, model_dir=work / way, require_all_parties=require_all, **common, **extra)
        if seconds is not None:
            seconds[way] = time.perf_counter() - began
        data = {active: new[active]} if name == "local" else new
        frames[way] = securevfl.predict(work / way, data=data, require_all_parties=require_all,
                                        device="cpu").set_index("row_id")
    stitched = frames["local"].copy()
    columns = [c for c in stitched.columns if c in frames["all_parties"].columns]  # not `parties`
    # local's float32 scores take the other model's (float64 for hetero-lr, secureboost, easter)
    stitched = stitched.astype({c: np.float64 for c in columns if stitched[c].dtype.kind == "f"})
    stitched.loc[frames["all_parties"].index, columns] = frames["all_parties"][columns]
    frames["stitched"] = stitched
    return {w: frames[w] for w in ways_of(method)}, frames["every_row"].parties


def metric(task: str, truth: pd.Series, frame: pd.DataFrame) -> tuple[str, float]:
    """The table's metric of ``frame``'s predictions of ``truth``'s rows (AUC, accuracy or RMSE)."""
    from sklearn.metrics import accuracy_score, mean_squared_error, roc_auc_score

    if task == "regression":
        return "rmse", float(np.sqrt(mean_squared_error(truth, frame.prediction.loc[truth.index])))
    probas = [c for c in frame.columns if c.startswith("proba_")]
    if len(probas) == 2 and truth.nunique() == 2:
        positive = probas[1].removeprefix("proba_")
        return "auc", float(roc_auc_score(truth == positive, frame[probas[1]].loc[truth.index]))
    return "accuracy", float(accuracy_score(truth.astype(str), frame.prediction.loc[truth.index].astype(str)))


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------------- runs
def collect(bench: CoverageBench, work: Path, tick: Tick | None = None) -> dict[str, list[float]]:
    """Every case x coverage x seed: each key's value per seed (``tick``: a line after each seed, default stderr)."""
    tick = tick or _stderr
    values: dict[str, list[float]] = defaultdict(list)
    options = method_options(bench.method, bench.options)
    for name, parties, split, rows, epochs in bench.cases:
        for p in bench.coverages:
            prefix = f"coverage.{label(bench.method, name)}.p{round(p * 100)}"
            for seed in bench.seeds:
                folder = work / f"{name}-{p}-{seed}"
                folder.mkdir(parents=True)
                began = time.perf_counter()
                train, test, truth, task = party_files(name, parties, split, rows, p, seed, folder)
                seconds: dict[str, float] = {}
                frames, patterns = score_ways(train, test, epochs, seed, folder, next(iter(train)),
                                              bench.party_dropout, seconds, method=bench.method, options=options,
                                              batch_size=bench.batch_size)
                for way, spent in seconds.items():
                    values[f"{prefix}.{way}.train_s"].append(spent)
                for pattern in ["all", *sorted(set(patterns))]:
                    rows_of = truth.index if pattern == "all" else patterns.index[patterns == pattern]
                    subset = truth.loc[rows_of]
                    if len(subset) < 5 or (task != "regression" and subset.nunique() < 2):
                        continue
                    for way, frame in frames.items():
                        key, value = metric(task, subset, frame)
                        values[f"{prefix}.{way}.{pattern}.{key}"].append(value)
                    values[f"{prefix}.rows.{pattern}"].append(float(len(subset)))
                tick(f"  {label(bench.method, name)} p={p:g} seed {seed}: {time.perf_counter() - began:.0f} s")
    return dict(values)


def summarise(values: Mapping[str, list[float]]) -> dict[str, Any]:
    """The figures: each key's mean over the seeds, its seed spread (max - min, several seeds), the ratios."""
    figures: dict[str, Any] = {k: float(np.mean(v)) for k, v in values.items()}
    figures.update({f"{k}.seed_spread": float(np.max(v) - np.min(v)) for k, v in values.items() if len(v) > 1})
    figures.update(ratios(figures))
    return figures


def run(bench: CoverageBench, work: Path, tick: Tick | None = None) -> dict[str, Any]:
    """Every case x coverage x seed; the figures (means over the seeds) and the seed spreads."""
    return summarise(collect(bench, work, tick))


def ratios(figures: Mapping[str, Any]) -> dict[str, float]:
    """Over all held-out rows, per dataset and coverage: every_row against the others (> 1: every_row better).

    ``coverage.<dataset>.p<percent>.train_time_ratio_vs_splitnn``: every_row's training wall time over
    the method's on the intersection (SplitNN: today's SplitNN; at p = 1.0: the cost of training for
    partial rows on full coverage). ``coverage.<dataset>.p<percent>.all.ratio_vs_best_baseline``:
    every_row over the better of stitched and local; ``coverage.<dataset>.p<percent>.all.ratio_vs_laser_vfl``:
    every_row over laser_vfl (only where laser_vfl ran). For RMSE (lower is better) each ratio is
    inverted (the other's over every_row's). A ratio whose figures are missing is left out.
    """
    out: dict[str, float] = {}
    for key in [k for k in figures if k.endswith(".every_row.train_s")]:  # on the intersection: all_parties
        intersection = figures.get(key.replace(".every_row.", ".all_parties."))
        if intersection:
            out[key.replace(".every_row.train_s", ".train_time_ratio_vs_splitnn")] = figures[key] / intersection
    for key in [k for k in figures if ".every_row.all." in k and not k.endswith("seed_spread")]:
        kind = key.rsplit(".", 1)[1]
        prefix = key.split(".every_row.")[0]
        others = [figures.get(key.replace(".every_row.", f".{w}.")) for w in ("stitched", "local")]
        present = [o for o in others if o is not None]
        best = (min(present) if kind in LOWER_IS_BETTER else max(present)) if present else None
        laser = figures.get(key.replace(".every_row.", ".laser_vfl."))
        for name, other in (("ratio_vs_best_baseline", best), ("ratio_vs_laser_vfl", laser)):
            if other is not None:
                out[f"{prefix}.all.{name}"] = ((other / figures[key]) if kind in LOWER_IS_BETTER
                                               else (figures[key] / other))
    return out


def measure(bench: CoverageBench, tick: Tick | None = None) -> dict[str, Any]:
    """Every case of ``bench``: the figures (as ``benchmarks/coverage.py`` writes them) and each key's seeds."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="securevfl-bench-coverage-") as work:
        values = collect(bench, Path(work), tick or (lambda _: None))
    return {"figures": summarise(values), "samples": values, "config": asdict(bench),
            "wall_s": time.perf_counter() - started}


# ------------------------------------------------------------------------------------- tables, figures, section
RATIO_LINES = {
    "ratio_vs_best_baseline": "{key}: {value:.3f} (every_row over the better of stitched and local; > 1: every_row "
                              "better)",
    "ratio_vs_laser_vfl": "{key}: {value:.3f} (every_row over laser_vfl; > 1: every_row better)",
    "train_time_ratio_vs_splitnn": "{key}: {value:.2f} (every_row's training time over the method's on the "
                                   "intersection)",
}


def way_rows(figures: Mapping[str, Any]) -> dict[tuple[str, str, str, str], dict[str, float]]:
    """(dataset, p<percent>, pattern, metric) -> way -> value, in the figures' order.

    The dataset is the key's case part (:func:`label`): ``<method>.<dataset>`` for a method not the default.
    """
    rows: dict[tuple[str, str, str, str], dict[str, float]] = defaultdict(dict)
    for key, value in figures.items():
        parts = key.split(".")
        if parts[0] == "coverage" and len(parts) in (6, 7) and parts[-3] in WAYS and parts[-4].startswith("p"):
            name, (p, way, pattern, kind) = ".".join(parts[1:-4]), parts[-4:]
            rows[(name, p, pattern, kind)][way] = value
    return dict(rows)


def ratio_lines(figures: Mapping[str, Any]) -> list[str]:
    """One sentence per ratio (``print_table``'s last lines)."""
    out = []
    for key, value in figures.items():
        for suffix, line in RATIO_LINES.items():
            if key.endswith(suffix):
                out.append(line.format(key=key, value=value))
    return out


def print_table(figures: dict[str, Any]) -> None:
    """Per dataset and coverage: one line per pattern, the ways measured side by side."""
    rows = way_rows(figures)
    ways = [w for w in WAYS if any(w in by_way for by_way in rows.values())]
    print(f"{'dataset':24s} {'p':5s} {'pattern (metric)':34s} " + " ".join(f"{w:>10s}" for w in ways))
    for (name, p, pattern, kind), by_way in rows.items():
        text = f"{pattern} ({kind})"
        print(f"{name:24s} {p:5s} {text:34s} " + " ".join(f"{_cell(by_way.get(w), '.4f'):>10s}" for w in ways))
    for line in ratio_lines(figures):
        print(line)


COLUMNS = ["dataset", "p", "pattern", "metric", "rows", *WAYS, "every_row / best baseline (x)",
           "every_row / laser_vfl (x)", "train time / SplitNN (x)"]


def _cell(value: float | None, spec: str) -> str:
    return "-" if value is None or math.isnan(value) else format(value, spec)


def table_rows(figures: Mapping[str, Any]) -> list[list[str]]:
    """One row per dataset, p and pattern: the four ways side by side; the ratios on each ``all`` row."""
    out = []
    for (name, p, pattern, kind), by_way in way_rows(figures).items():
        prefix = f"coverage.{name}.{p}"
        rows = figures.get(f"{prefix}.rows.{pattern}")
        is_all = pattern == "all"
        out.append([name, f"{int(p[1:]) / 100:g}", pattern, kind, _cell(rows, ",.0f"),
                    *[_cell(by_way.get(w), ".4f") for w in WAYS],
                    _cell(figures.get(f"{prefix}.all.ratio_vs_best_baseline") if is_all else None, ".3f"),
                    _cell(figures.get(f"{prefix}.all.ratio_vs_laser_vfl") if is_all else None, ".3f"),
                    _cell(figures.get(f"{prefix}.train_time_ratio_vs_splitnn") if is_all else None, ".2f")])
    return out


def _unit_better(key: str) -> tuple[str, str, str]:
    """A figure's unit, better direction and note, from its key."""
    from securevfl.bench.timing import HIGHER, LOWER

    last = key.rsplit(".", 1)[1]
    if key.endswith("train_time_ratio_vs_splitnn"):
        return "x", LOWER, "every_row's training time / SplitNN's on the intersection"
    if last in ("ratio_vs_best_baseline", "ratio_vs_laser_vfl"):
        return "x", HIGHER, "every_row over the other, all held-out rows (> 1: every_row better; RMSE inverted)"
    if last == "train_s":
        return "s", LOWER, "training wall time"
    if ".rows." in key:
        return "rows", LOWER, "held-out rows of the pattern (a count, not a cost)"
    return "", LOWER if last in LOWER_IS_BETTER else HIGHER, f"held-out {last}"


def figures(data: Mapping[str, Any]) -> list[Any]:
    """``coverage.*`` figures for ``securevfl bench``: every key of the benchmark, the seeds as repetitions.

    The seed spreads are the figures' spreads (not figures of their own); the ratios are of the means.
    """
    from securevfl.bench.timing import Figure

    out = []
    samples = data["samples"]
    for key, value in data["figures"].items():
        if key.endswith(".seed_spread"):
            continue
        unit, better, note = _unit_better(key)
        seeds = tuple(float(v) for v in samples.get(key, (value,)))
        out.append(Figure(key, unit, seeds, better, note=note))
    return out


def section(data: Mapping[str, Any]) -> Any:
    """The report section: per dataset, p and pattern the four ways side by side, and the ratios."""
    from securevfl.bench.results import Section, Table

    config = data["config"]
    cases = ", ".join(f"{c[0]} ({c[1]} parties, {c[4]} epochs" + (f", {c[3]:,} rows)" if c[3] else ")")
                      for c in config["cases"])
    seeds = len(config["seeds"])
    s = Section("coverage", f"4d. Every customer scored: held-out rows per coverage pattern ({cases})",
                text=__doc__ or "")
    t = Table("Each way per coverage pattern (AUC or accuracy: higher is better; RMSE: lower); "
              "the ratios over all rows", list(COLUMNS))
    for row in table_rows(data["figures"]):
        t.add(*row)
    t.note = (f"p: each passive party's chance of holding a row; means over {seeds} seed(s) "
              f"{', '.join(map(str, config['seeds']))}; pattern: the parties that hold the row (all: every held-out "
              "row); rows: held-out rows of the pattern; a pattern with fewer than 5 rows (or one class) is left out")
    s.tables.append(t)
    s.notes += ratio_lines(data["figures"])
    s.data = dict(data)
    return s

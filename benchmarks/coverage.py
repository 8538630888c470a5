"""Every customer scored: held-out rows per coverage pattern, the default against hand-built models and LASER-VFL.

    PYTHONPATH=. .venv/bin/python benchmarks/coverage.py --quick --out out/coverage_quick.json   # about a minute
    PYTHONPATH=. .venv/bin/python benchmarks/coverage.py --out out/coverage.json

Each dataset is cut over its parties (the partitioner's columns and held-out rows); each passive party
then holds each row, training and held-out alike, with probability ``p`` (its own draw), the active
party every row. Per dataset, ``p`` and seed it trains on the training rows and scores the held-out
rows four ways:

* ``every_row``: SplitNN as it trains by default, on every row (one model: absent embeddings, party
  dropout, the active party's own head);
* ``stitched``: SplitNN on the rows every party holds (``--require-all-parties``), and the active
  party's ``local`` model for the other rows — what a user of an all-parties-only toolkit (FATE,
  SecretFlow) stitches by hand;
* ``local``: the active party's own model on its own columns (trained on all its rows);
* ``laser_vfl``: LASER-VFL (``laser-vfl``, the issue's named peer), by default: trained on every
  row, each row scored by the heads of the parties that hold it,

and reports AUC (binary), accuracy (multi-class) or RMSE (regression) per pattern (which parties hold
the row) and over all rows. Keys: ``coverage.<dataset>.p<percent>.<way>.<pattern>.<metric>`` (means
over the seeds; the pattern ``all`` is every held-out row), and the ratios of :func:`ratios`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.metrics import accuracy_score, mean_squared_error, roc_auc_score

import securevfl
from securevfl.data import DatasetOptions, PartitionSpec, load_dataset, partition

#: (dataset, parties, partition split, rows kept (None: all), epochs): the issue's tables, sized for 2 cores.
FULL = (("adult", 3, "random", 20_000, 10), ("california-housing", 2, "random", None, 30),
        ("mnist-5k", 4, "strips", None, 10))
QUICK = (("breast-cancer", 3, "random", None, 20), ("california-housing", 2, "random", 4000, 30))
WAYS = ("every_row", "stitched", "local", "laser_vfl")


def party_files(name: str, parties: int, split: str, rows: int | None, p: float, seed: int,
                work: Path) -> tuple[dict[str, Path], dict[str, Path], pd.Series, str]:
    """Training and held-out files per party (passive rows kept with probability ``p``), the truth, the task."""
    data = partition(load_dataset(name, DatasetOptions(seed=seed)), PartitionSpec(parties=parties, split=split,
                                                                                   seed=seed, test_size=0.25))
    rng = np.random.default_rng(seed)
    active = data.active
    ids = data.tables[active].ids
    keep_ids = set(rng.choice(ids, rows, replace=False)) if rows and rows < len(ids) else set(ids)
    train, test = {}, {}
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


def score_ways(train: dict[str, Path], test: dict[str, Path], epochs: int, seed: int, work: Path,
               active: str, party_dropout: float | None = None,
               seconds: dict[str, float] | None = None) -> tuple[dict[str, pd.DataFrame], pd.Series]:
    """Each way's held-out predictions (indexed by ID), and each row's coverage pattern.

    ``seconds``: filled with each trained model's training wall time (``all_parties``: SplitNN on the
    intersection, today's SplitNN).
    """
    common = {"data_files": {p: str(f) for p, f in train.items()}, "id_column": "row_id", "label_column": "label",
              "epochs": epochs, "device": "cpu", "seed": seed, "batch_size": 64}
    new = {p: str(f) for p, f in test.items()}
    frames = {}
    for way, method, require_all in (("every_row", "splitnn", False), ("all_parties", "splitnn", True),
                                     ("local", "local", False), ("laser_vfl", "laser-vfl", False)):
        extra = {"party_dropout": party_dropout} if way == "every_row" and party_dropout is not None else {}
        began = time.perf_counter()
        securevfl.train(method, model_dir=work / way, require_all_parties=require_all, **common, **extra)
        if seconds is not None:
            seconds[way] = time.perf_counter() - began
        data = {active: new[active]} if method == "local" else new
        frames[way] = securevfl.predict(work / way, data=data, require_all_parties=require_all,
                                        device="cpu").set_index("row_id")
    stitched = frames["local"].copy()
    columns = [c for c in stitched.columns if c in frames["all_parties"].columns]  # not `parties`
    stitched.loc[frames["all_parties"].index, columns] = frames["all_parties"][columns]
    frames["stitched"] = stitched
    return {w: frames[w] for w in WAYS}, frames["every_row"].parties


def metric(task: str, truth: pd.Series, frame: pd.DataFrame) -> tuple[str, float]:
    """The table's metric of ``frame``'s predictions of ``truth``'s rows (AUC, accuracy or RMSE)."""
    if task == "regression":
        return "rmse", float(np.sqrt(mean_squared_error(truth, frame.prediction.loc[truth.index])))
    probas = [c for c in frame.columns if c.startswith("proba_")]
    if len(probas) == 2 and truth.nunique() == 2:
        positive = probas[1].removeprefix("proba_")
        return "auc", float(roc_auc_score(truth == positive, frame[probas[1]].loc[truth.index]))
    return "accuracy", float(accuracy_score(truth.astype(str), frame.prediction.loc[truth.index].astype(str)))


def run(cases: tuple[tuple[str, int, str, int | None, int], ...], coverages: tuple[float, ...],
        seeds: tuple[int, ...], work: Path, party_dropout: float | None = None) -> dict[str, Any]:
    """Every case x coverage x seed; the figures (means over the seeds) and the seed spreads."""
    values: dict[str, list[float]] = defaultdict(list)
    for name, parties, split, rows, epochs in cases:
        for p in coverages:
            for seed in seeds:
                folder = work / f"{name}-{p}-{seed}"
                folder.mkdir(parents=True)
                began = time.perf_counter()
                train, test, truth, task = party_files(name, parties, split, rows, p, seed, folder)
                seconds: dict[str, float] = {}
                frames, patterns = score_ways(train, test, epochs, seed, folder, next(iter(train)), party_dropout,
                                              seconds)
                for way, spent in seconds.items():
                    values[f"coverage.{name}.p{round(p * 100)}.{way}.train_s"].append(spent)
                for pattern in ["all", *sorted(set(patterns))]:
                    rows_of = truth.index if pattern == "all" else patterns.index[patterns == pattern]
                    subset = truth.loc[rows_of]
                    if len(subset) < 5 or (task != "regression" and subset.nunique() < 2):
                        continue
                    for way in WAYS:
                        key, value = metric(task, subset, frames[way])
                        values[f"coverage.{name}.p{round(p * 100)}.{way}.{pattern}.{key}"].append(value)
                    values[f"coverage.{name}.p{round(p * 100)}.rows.{pattern}"].append(float(len(subset)))
                print(f"  {name} p={p:g} seed {seed}: {time.perf_counter() - began:.0f} s", file=sys.stderr, flush=True)
    figures: dict[str, Any] = {k: float(np.mean(v)) for k, v in values.items()}
    figures.update({f"{k}.seed_spread": float(np.max(v) - np.min(v)) for k, v in values.items() if len(v) > 1})
    figures.update(ratios(figures))
    return figures


def ratios(figures: dict[str, Any]) -> dict[str, float]:
    """Over all held-out rows, per dataset and coverage: every_row against the others (> 1: every_row better).

    ``coverage.<dataset>.p<percent>.train_time_ratio_vs_splitnn``: every_row's training wall time over
    SplitNN's on the intersection (at p = 1.0: the cost of training for partial rows on full coverage).
    ``coverage.<dataset>.p<percent>.all.ratio_vs_best_baseline``: every_row over the better of stitched and
    local; ``coverage.<dataset>.p<percent>.all.ratio_vs_laser_vfl``: every_row over laser_vfl. For RMSE
    (lower is better) each ratio is inverted (the other's over every_row's).
    """
    out: dict[str, float] = {}
    for key in [k for k in figures if k.endswith(".every_row.train_s")]:  # today's SplitNN: on the intersection
        out[key.replace(".every_row.train_s", ".train_time_ratio_vs_splitnn")] = (
            figures[key] / figures[key.replace(".every_row.", ".all_parties.")])
    for key in [k for k in figures if ".every_row.all." in k and not k.endswith("seed_spread")]:
        kind = key.rsplit(".", 1)[1]
        prefix = key.split(".every_row.")[0]
        others = [figures[key.replace(".every_row.", f".{w}.")] for w in ("stitched", "local")]
        best = min(others) if kind == "rmse" else max(others)
        laser = figures[key.replace(".every_row.", ".laser_vfl.")]
        for name, other in (("ratio_vs_best_baseline", best), ("ratio_vs_laser_vfl", laser)):
            out[f"{prefix}.all.{name}"] = (other / figures[key]) if kind == "rmse" else (figures[key] / other)
    return out


def print_table(figures: dict[str, Any]) -> None:
    """Per dataset and coverage: one line per pattern, the four ways side by side."""
    rows: dict[tuple[str, str, str], dict[str, float]] = defaultdict(dict)
    for key, value in figures.items():
        parts = key.split(".")
        if len(parts) == 6 and parts[3] in WAYS:
            _, name, p, way, pattern, kind = parts
            rows[(name, p, f"{pattern} ({kind})")][way] = value
    print(f"{'dataset':20s} {'p':5s} {'pattern (metric)':34s} " + " ".join(f"{w:>10s}" for w in WAYS))
    for (name, p, pattern), by_way in rows.items():
        print(f"{name:20s} {p:5s} {pattern:34s} " + " ".join(f"{by_way.get(w, float('nan')):10.4f}" for w in WAYS))
    for key, value in figures.items():
        if key.endswith("ratio_vs_best_baseline"):
            print(f"{key}: {value:.3f} (every_row over the better of stitched and local; > 1: every_row better)")
        elif key.endswith("ratio_vs_laser_vfl"):
            print(f"{key}: {value:.3f} (every_row over laser_vfl; > 1: every_row better)")
        elif key.endswith("train_time_ratio_vs_splitnn"):
            print(f"{key}: {value:.2f} (every_row's training time over SplitNN's on the intersection)")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse the options, run, print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="breast-cancer and california-housing (4,000 rows), "
                                                             "p 1.0 and 0.5, one seed: about a minute")
    parser.add_argument("--coverages", help="each passive party's chance of holding a row (default 1.0,0.8,0.5)")
    parser.add_argument("--seeds", help="comma-separated (default 0,1,2; --quick 0)")
    parser.add_argument("--party-dropout", type=float, help="the every-row model's --party-dropout (default: its own)")
    parser.add_argument("--out", type=Path, help="write the figures here (JSON)")
    args = parser.parse_args(argv)
    coverages = tuple(float(x) for x in (args.coverages or ("1.0,0.5" if args.quick else "1.0,0.8,0.5")).split(","))
    seeds = tuple(int(x) for x in (args.seeds or ("0" if args.quick else "0,1,2")).split(","))
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        figures = run(QUICK if args.quick else FULL, coverages, seeds, Path(work), args.party_dropout)
    figures["coverage.wall_s"] = time.perf_counter() - started
    print_table(figures)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(figures, indent=2, sort_keys=True))
        print(f"figures: {args.out}")
    return figures


if __name__ == "__main__":
    main()

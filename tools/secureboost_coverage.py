"""SecureBoost on every row of the active party against SecureBoost on the intersection stitched with ``local``.

    PYTHONPATH=. .venv/bin/python tools/secureboost_coverage.py --out out/secureboost_coverage.json
    PYTHONPATH=. .venv/bin/python tools/secureboost_coverage.py --dataset adult --rows 10000 --p 0.8

Each dataset is cut over its parties; each passive party then holds each row (training and held-out
alike) with probability ``p``, its own draw, the active party every row. Ways, scored on the held-out
rows per coverage pattern (AUC; accuracy for multi-class, RMSE for regression):

* ``every_row``: ``secureboost`` trained and scored on every row of the active party (the default);
* ``stitched``: ``secureboost`` on the rows every party holds (``require_all_parties``) for those rows,
  the active party's ``local`` model for the others;
* ``local``: the active party's own model (``local``) on every row.

SecureBoost runs with ``encrypt=false``: the same protocol and the same trees as with Paillier
(tests/test_secureboost.py), without the key's cost.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.metrics import accuracy_score, mean_squared_error, roc_auc_score

import securevfl
from securevfl.data import DatasetOptions, PartitionSpec, load_dataset, partition

WAYS = ("every_row", "stitched", "local")


def party_files(name: str, parties: int, rows: int | None, p: float, seed: int,
                work: Path) -> tuple[dict[str, Path], dict[str, Path], pd.Series, str]:
    """Training and held-out files per party (passive rows kept with probability ``p``), the truth, the task."""
    data = partition(load_dataset(name, DatasetOptions(seed=seed)), PartitionSpec(parties=parties, seed=seed,
                                                                                   test_size=0.25))
    rng = np.random.default_rng(seed)
    ids = data.tables[data.active].ids
    keep = set(rng.choice(ids, rows, replace=False)) if rows and rows < len(ids) else set(ids)
    train: dict[str, Path] = {}
    test: dict[str, Path] = {}
    truth = pd.Series(dtype=object)
    for party, table in data.tables.items():
        frame = (table.features.reset_index(drop=True).copy() if isinstance(table.features, pd.DataFrame)
                 else pd.DataFrame(np.asarray(table.features, dtype=np.float64), columns=list(table.feature_names)))
        frame.insert(0, "row_id", table.ids)
        if table.labels is not None:
            frame["label"] = table.labels if data.task == "regression" else np.asarray(data.classes)[table.labels]
        held = frame.row_id.isin(keep) & (rng.random(len(frame)) < (1.0 if party == data.active else p))
        frame = frame[held]
        is_test = frame.row_id.isin(data.test_ids)
        for target, part, kind in ((train, frame[~is_test], "train"), (test, frame[is_test], "test")):
            target[party] = work / f"{kind}_{party}.csv"
            part.to_csv(target[party], index=False)
        if party == data.active:
            truth = frame[is_test].set_index("row_id").label
    return train, test, truth, data.task


def metric(task: str, truth: pd.Series, frame: pd.DataFrame) -> tuple[str, float]:
    """AUC (binary), accuracy (multi-class) or RMSE (regression) of ``frame`` on ``truth``'s rows."""
    if task == "regression":
        return "rmse", float(np.sqrt(mean_squared_error(truth, frame.prediction.loc[truth.index])))
    probas = [c for c in frame.columns if c.startswith("proba_")]
    if len(probas) == 2:
        return "auc", float(roc_auc_score(truth == probas[1].removeprefix("proba_"), frame[probas[1]].loc[truth.index]))
    return "accuracy", float(accuracy_score(truth.astype(str), frame.prediction.loc[truth.index].astype(str)))


def score_ways(train: dict[str, Path], test: dict[str, Path], options: dict[str, Any], epochs: int, seed: int,
               work: Path) -> tuple[dict[str, pd.DataFrame], pd.Series, dict[str, float]]:
    """Each way's held-out predictions (by ID), each row's pattern, and each training's seconds."""
    active = next(iter(train))
    common = {"data_files": {p: str(f) for p, f in train.items()}, "id_column": "row_id", "label_column": "label",
              "device": "cpu", "seed": seed}
    new = {p: str(f) for p, f in test.items()}
    frames, seconds = {}, {}
    for way, method, require_all in (("every_row", "secureboost", False), ("all_parties", "secureboost", True),
                                     ("local", "local", False)):
        extra: dict[str, Any] = {"options": options} if method == "secureboost" else {"epochs": epochs}
        began = time.perf_counter()
        securevfl.train(method, model_dir=work / way, require_all_parties=require_all, **common, **extra)
        seconds[way] = time.perf_counter() - began
        data = {active: new[active]} if method == "local" else new
        frames[way] = securevfl.predict(work / way, data=data, require_all_parties=require_all,
                                        device="cpu").set_index("row_id")
    stitched = frames["local"].copy()
    columns = [c for c in stitched.columns if c in frames["all_parties"].columns]
    for column in columns:  # local's float32 scores take secureboost's float64 ones
        if stitched[column].dtype.kind == "f":
            stitched[column] = stitched[column].astype(np.float64)
    stitched.loc[frames["all_parties"].index, columns] = frames["all_parties"][columns]
    frames["stitched"] = stitched
    return {w: frames[w] for w in WAYS}, frames["every_row"].parties, seconds


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run every coverage and seed; print and (``--out``) write the means per way and pattern."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="breast-cancer")
    parser.add_argument("--parties", type=int, default=3)
    parser.add_argument("--rows", type=int, default=None, help="rows kept (default: all)")
    parser.add_argument("--p", type=float, nargs="+", default=[1.0, 0.8, 0.5])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--trees", type=int, default=30)
    parser.add_argument("--max-depth", type=int, default=4)
    parser.add_argument("--local-epochs", type=int, default=20)
    parser.add_argument("--no-shuffle", action="store_true",
                        help="candidates in feature order (ties of equal gain broken alike in every run)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    options = {"encrypt": False, "trees": args.trees, "max_depth": args.max_depth, "shuffle": not args.no_shuffle}
    figures: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for p in args.p:
            for seed in args.seeds:
                work = Path(tmp) / f"{p}-{seed}"
                work.mkdir()
                train, test, truth, task = party_files(args.dataset, args.parties, args.rows, p, seed, work)
                frames, patterns, seconds = score_ways(train, test, options, args.local_epochs, seed, work)
                for way, s in seconds.items():
                    figures.setdefault(f"p{round(p * 100)}.{way}.train_seconds", []).append(s)
                for pattern in ["all", *sorted(set(patterns))]:
                    rows = truth.index if pattern == "all" else patterns.index[patterns == pattern]
                    subset = truth.loc[rows]
                    if len(subset) < 5 or (task != "regression" and subset.nunique() < 2):
                        continue
                    figures.setdefault(f"p{round(p * 100)}.rows.{pattern}", []).append(float(len(subset)))
                    for way in WAYS:
                        key, value = metric(task, subset, frames[way])
                        figures.setdefault(f"p{round(p * 100)}.{way}.{pattern}.{key}", []).append(value)
                print(f"  {args.dataset} p={p:g} seed {seed} done", file=sys.stderr, flush=True)
    means = {k: float(np.mean(v)) for k, v in figures.items()}
    for key in sorted(means):
        print(f"{key}: {means[key]:.4f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"dataset": args.dataset, "options": options, "figures": means}, indent=2))
    return means


if __name__ == "__main__":
    main()

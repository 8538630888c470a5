"""hetero-lr on every row against hetero-lr on the intersection stitched with the active party's ``local`` model.

    PYTHONPATH=. .venv/bin/python tools/hetero_lr_coverage.py                       # adult, 4,000 rows, p = 0.8
    PYTHONPATH=. .venv/bin/python tools/hetero_lr_coverage.py --dataset breast-cancer --rows 0

The dataset is cut over ``--parties`` parties (the partitioner's columns and held-out rows); each passive
party then holds each row, training and held-out alike, with probability ``--p`` (its own draw), the
active party every row. Three ways score the held-out rows:

* ``every_row``: hetero-lr trained on every row of the active party (the default): an absent passive
  party's score left out, its absent bias in;
* ``stitched``: hetero-lr on the rows every party holds (``--require-all-parties``), and the active
  party's ``local`` model for the other rows (what an all-parties-only toolkit leaves a user to do);
* ``local``: the active party's own model on its own columns, on all its rows.

AUC per coverage pattern (which parties hold the row) and over all held-out rows, printed and written
as JSON (``--out``). Keys are test-sized (``--key-bits``, default 1024, insecure): the key size does
not change the model (fixed point at 32 fraction bits), only the time.
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
from sklearn.metrics import roc_auc_score

import securevfl
from securevfl.data import DatasetOptions, PartitionSpec, load_dataset, partition

WAYS = ("every_row", "stitched", "local")


def party_files(name: str, parties: int, rows: int, p: float, seed: int,
                work: Path) -> tuple[dict[str, Path], dict[str, Path], pd.Series, str]:
    """Training and held-out files per party (passive rows kept with probability ``p``), the truth, the active."""
    data = partition(load_dataset(name, DatasetOptions(seed=seed)), PartitionSpec(parties=parties, seed=seed,
                                                                                   test_size=0.25))
    rng = np.random.default_rng(seed)
    ids = data.tables[data.active].ids
    keep = set(rng.choice(ids, rows, replace=False)) if 0 < rows < len(ids) else set(ids)
    train: dict[str, Path] = {}
    test: dict[str, Path] = {}
    truth = None
    for party, table in data.tables.items():
        frame = (table.features.reset_index(drop=True).copy() if isinstance(table.features, pd.DataFrame)
                 else pd.DataFrame(np.asarray(table.features, dtype=np.float64), columns=list(table.feature_names)))
        frame.insert(0, "row_id", table.ids)
        if table.labels is not None:
            frame["label"] = np.asarray(data.classes)[table.labels]
        frame = frame[frame.row_id.isin(keep) & (rng.random(len(frame)) < (1.0 if party == data.active else p))]
        is_test = frame.row_id.isin(data.test_ids)
        for target, part, kind in ((train, frame[~is_test], "train"), (test, frame[is_test], "test")):
            target[party] = work / f"{kind}_{party}.csv"
            part.to_csv(target[party], index=False)
        if party == data.active:
            truth = frame[is_test].set_index("row_id").label
    assert truth is not None
    return train, test, truth, data.active


def predictions(train: dict[str, Path], test: dict[str, Path], active: str, args: argparse.Namespace,
                work: Path) -> tuple[dict[str, pd.DataFrame], pd.Series, dict[str, float]]:
    """Each way's held-out predictions (indexed by ID), each row's pattern, and each training run's seconds."""
    options = {"key_bits": args.key_bits, "insecure_allow_small_key": args.key_bits < 2048}
    common = {"data_files": {p: str(f) for p, f in train.items()}, "id_column": "row_id", "label_column": "label",
              "device": "cpu", "seed": args.seed}
    new = {p: str(f) for p, f in test.items()}
    frames: dict[str, pd.DataFrame] = {}
    seconds: dict[str, float] = {}
    for way, method, require_all in (("every_row", "hetero-lr", False), ("intersection", "hetero-lr", True),
                                     ("local", "local", False)):
        extra: dict[str, Any] = ({"options": options, "epochs": args.epochs, "batch_size": args.batch_size}
                                 if method == "hetero-lr" else {"epochs": args.local_epochs})
        started = time.perf_counter()
        securevfl.train(method, model_dir=work / way, require_all_parties=require_all, **common, **extra)
        seconds[way] = time.perf_counter() - started
        data = {active: new[active]} if method == "local" else new
        frames[way] = securevfl.predict(work / way, data=data, require_all_parties=require_all,
                                        device="cpu").set_index("row_id")
    stitched = frames["local"].copy()
    columns = [c for c in stitched.columns if c in frames["intersection"].columns]
    stitched = stitched.astype({c: np.float64 for c in columns if c.startswith("proba_")})
    stitched.loc[frames["intersection"].index, columns] = frames["intersection"][columns]
    frames["stitched"] = stitched
    return {w: frames[w] for w in WAYS}, frames["every_row"].parties, seconds


def auc(truth: pd.Series, frame: pd.DataFrame) -> float:
    """AUC of ``frame``'s positive-class probability on ``truth``'s rows (NaN where one class only)."""
    probas = [c for c in frame.columns if c.startswith("proba_")]
    positive = probas[1].removeprefix("proba_")
    if truth.nunique() < 2:
        return float("nan")
    return float(roc_auc_score(truth == positive, frame[probas[1]].loc[truth.index]))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Train the three ways, print the AUC per pattern and overall; the figures (also to ``--out``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="adult")
    parser.add_argument("--rows", type=int, default=4000, help="rows sampled (0: all)")
    parser.add_argument("--parties", type=int, default=3)
    parser.add_argument("--p", type=float, default=0.8, help="each passive party's chance of holding a row")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--local-epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--key-bits", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        train, test, truth, active = party_files(args.dataset, args.parties, args.rows, args.p, args.seed, work)
        frames, patterns, seconds = predictions(train, test, active, args, work)
    figures: dict[str, Any] = {"dataset": args.dataset, "rows": args.rows, "parties": args.parties, "p": args.p,
                               "epochs": args.epochs, "seed": args.seed, "train_s": seconds, "patterns": {}}
    groups = {"all": truth.index, **{str(k): truth.index[patterns.loc[truth.index] == k]
                                     for k in sorted(set(patterns))}}
    print(f"{args.dataset}, {args.parties} parties, p = {args.p}, seed {args.seed}: held-out AUC")
    print(f"{'pattern':<40} {'rows':>5} " + " ".join(f"{w:>10}" for w in WAYS))
    for name, index in groups.items():
        values = {w: auc(truth.loc[index], frames[w]) for w in WAYS}
        figures["patterns"][name] = {"rows": len(index), **values}
        print(f"{name:<40} {len(index):>5} " + " ".join(f"{values[w]:>10.4f}" for w in WAYS))
    print("training seconds: " + ", ".join(f"{w} {s:.1f}" for w, s in seconds.items()))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    main(sys.argv[1:])

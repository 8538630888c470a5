"""EASTER on every row against EASTER on the intersection stitched with the active party's ``local`` model.

    PYTHONPATH=. .venv/bin/python tools/easter_coverage.py                  # digits, 4 parties, p = 0.8
    PYTHONPATH=. .venv/bin/python tools/easter_coverage.py --dataset mnist-5k --epochs 10

The dataset is cut over ``--parties`` parties as in ``tools/hetero_lr_coverage.py`` (each passive party
holds each row with probability ``--p``, the active party every row). Three ways score the held-out rows:

* ``every_row``: EASTER (``secagg=dh``) trained on every row of the active party (the default): masked
  zeros in the secure sum, K per row, a row summed over two or more passive parties only;
* ``stitched``: EASTER on the rows every party holds (``--require-all-parties``), and the active party's
  ``local`` model for the other rows;
* ``local``: the active party's own model on its own columns, on all its rows.

Accuracy per coverage pattern and over all held-out rows, printed and written as JSON (``--out``).
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

import securevfl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hetero_lr_coverage import party_files  # noqa: E402

WAYS = ("every_row", "stitched", "local")


def predictions(train: dict[str, Path], test: dict[str, Path], active: str, args: argparse.Namespace,
                work: Path) -> tuple[dict[str, pd.DataFrame], pd.Series, dict[str, float]]:
    """Each way's held-out predictions (indexed by ID), each row's pattern, and each training run's seconds."""
    common = {"data_files": {p: str(f) for p, f in train.items()}, "id_column": "row_id", "label_column": "label",
              "device": "cpu", "seed": args.seed, "epochs": args.epochs}
    new = {p: str(f) for p, f in test.items()}
    frames: dict[str, pd.DataFrame] = {}
    seconds: dict[str, float] = {}
    for way, method, require_all in (("every_row", "easter", False), ("intersection", "easter", True),
                                     ("local", "local", False)):
        extra: dict[str, Any] = {"options": {"secagg": args.secagg}} if method == "easter" else {}
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


def accuracy(truth: pd.Series, frame: pd.DataFrame) -> float:
    """Accuracy of ``frame``'s most probable class on ``truth``'s rows."""
    probas = [c for c in frame.columns if c.startswith("proba_")]
    predicted = frame[probas].loc[truth.index].to_numpy().argmax(axis=1)
    classes = np.array([c.removeprefix("proba_") for c in probas])
    return float(np.mean(classes[predicted] == truth.astype(str).to_numpy())) if len(truth) else float("nan")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Train the three ways, print the accuracy per pattern and overall; the figures (also to ``--out``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--rows", type=int, default=0, help="rows sampled (0: all)")
    parser.add_argument("--parties", type=int, default=4)
    parser.add_argument("--p", type=float, default=0.8, help="each passive party's chance of holding a row")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--secagg", default="dh")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        train, test, truth, active = party_files(args.dataset, args.parties, args.rows, args.p, args.seed, work)
        frames, patterns, seconds = predictions(train, test, active, args, work)
    figures: dict[str, Any] = {"dataset": args.dataset, "rows": args.rows, "parties": args.parties, "p": args.p,
                               "epochs": args.epochs, "secagg": args.secagg, "seed": args.seed, "train_s": seconds,
                               "patterns": {}}
    groups = {"all": truth.index, **{str(k): truth.index[patterns.loc[truth.index] == k]
                                     for k in sorted(set(patterns))}}
    print(f"{args.dataset}, {args.parties} parties, p = {args.p}, seed {args.seed}: held-out accuracy")
    print(f"{'pattern':<40} {'rows':>5} " + " ".join(f"{w:>10}" for w in WAYS))
    for name, index in groups.items():
        values = {w: accuracy(truth.loc[index], frames[w]) for w in WAYS}
        figures["patterns"][name] = {"rows": len(index), **values}
        print(f"{name:<40} {len(index):>5} " + " ".join(f"{values[w]:>10.4f}" for w in WAYS))
    print("training seconds: " + ", ".join(f"{w} {s:.1f}" for w, s in seconds.items()))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    main(sys.argv[1:])

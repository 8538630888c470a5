"""A quick study of partial coverage: held-out customers scored per coverage pattern, three ways.

    PYTHONPATH=. .venv/bin/python tools/coverage_study.py [--keep 0.7] [--epochs 30] [--seeds 0,1,2] [--dropout 0.1]

Breast Cancer Wisconsin cut over three organisations (tests/org_tables.py): the bank (the active party,
labels) holds every customer, the shop and the clinic each a row with probability ``--keep``. A quarter
of the customers are held out; on the rest it trains

* ``every-row``: SplitNN with ``--every-row`` (absent embeddings, party dropout), scoring every row;
* ``stitched``: SplitNN on the rows every party holds, and the bank's ``local`` model for the rest
  (what a user of an all-parties-only toolkit builds by hand);
* ``local``: the bank's own model on its own columns,

and prints AUC and accuracy per pattern (which parties hold the held-out row), mean over the seeds.
Not a benchmark (issue 44's benchmarks/coverage.py is): a check that the capability does what it says.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.metrics import roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from org_tables import organisation_frames, write_tables  # noqa: E402

import securevfl  # noqa: E402

PARTIES = ("bank", "shop", "clinic")


def one_seed(seed: int, keep: float, epochs: int, work: Path, dropout: float = 0.1) -> dict[str, pd.Series]:
    """Train the three ways on one draw of the tables; each way's held-out scores, the patterns and the truth."""
    frames = organisation_frames(seed, keep=keep)
    frames["bank"] = organisation_frames(seed, keep=1.0)["bank"]
    held = set(frames["bank"].customer_id.sample(frac=0.25, random_state=seed))
    train = write_tables({p: f[~f.customer_id.isin(held)] for p, f in frames.items()}, work / "train")
    test = write_tables({p: f[f.customer_id.isin(held)] for p, f in frames.items()}, work / "test")
    common = dict(data_files={p: str(train[p]) for p in PARTIES}, id_column="customer_id", label_column="churn",
                  epochs=epochs, device="cpu", seed=seed)
    models = {"every-row": ("splitnn", False), "all-parties": ("splitnn", True), "local": ("local", False)}
    scores: dict[str, pd.Series] = {}
    parties = None
    for name, (method, require_all) in models.items():
        extra = {"party_dropout": dropout} if name == "every-row" else {}
        securevfl.train(method, model_dir=work / name, require_all_parties=require_all, **common, **extra)
        data = {"bank": str(test["bank"])} if method == "local" else {p: str(test[p]) for p in PARTIES}
        frame = securevfl.predict(work / name, data=data, require_all_parties=require_all, device="cpu")
        scores[name] = frame.set_index("customer_id").proba_yes
        if name == "every-row":
            parties = frame.set_index("customer_id").parties
    scores["stitched"] = scores["local"].copy()
    scores["stitched"].loc[scores["all-parties"].index] = scores["all-parties"]
    truth = frames["bank"].set_index("customer_id").churn.eq("yes").astype(int)
    assert parties is not None
    return {"parties": parties, "truth": truth, **{k: v for k, v in scores.items() if k != "all-parties"}}


def main() -> None:
    """Run the seeds and print the per-pattern table."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--keep", type=float, default=0.7)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--dropout", type=float, default=0.1, help="--party-dropout of the every-row model")
    args = parser.parse_args()
    table: dict[tuple[str, str], list[tuple[float, float, int]]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as work:
        for seed in (int(s) for s in args.seeds.split(",")):
            out = one_seed(seed, args.keep, args.epochs, Path(work) / str(seed), args.dropout)
            for pattern in sorted(set(out["parties"])) + ["all rows"]:
                ids = out["parties"].index if pattern == "all rows" else out["parties"].index[out["parties"] == pattern]
                y = out["truth"].loc[ids]
                for way in ("every-row", "stitched", "local"):
                    s = out[way].loc[ids]
                    auc = roc_auc_score(y, s) if y.nunique() > 1 else float("nan")
                    table[(pattern, way)].append((auc, float(np.mean((s > 0.5) == y)), len(ids)))
    print(f"keep {args.keep}, epochs {args.epochs}, party dropout {args.dropout}, seeds {args.seeds}: mean AUC / "
          "accuracy (rows per seed)")
    for (pattern, way), values in table.items():
        auc, acc, rows = (np.nanmean([v[i] for v in values]) for i in range(3))
        print(f"  {pattern:18s} {way:10s} auc {auc:.4f}  accuracy {acc:.4f}  rows {rows:.0f}")


if __name__ == "__main__":
    main()

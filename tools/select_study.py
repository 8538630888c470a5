"""Does ``--select "iv>=0.02"`` cost accuracy? Train with and without it, same seeds (issue 45).

SecureBoost runs with ``encrypt=false`` (identical trees, minutes instead of hours); SplitNN with early
stopping (patience 5). The selection itself always runs the secure WOE / IV protocol (2048-bit keys).

    PYTHONPATH=. .venv/bin/python tools/select_study.py --dataset adult --parties 3 --seeds 0,1,2 \
        --out out/select_adult.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np


def _run(method: str, dataset: str, parties: int, seed: int, select: str | None) -> dict[str, Any]:
    import securevfl

    settings: dict[str, Any] = {"parties": parties, "seed": seed, "alignment": "plaintext", "select": select}
    if method == "secureboost":
        settings["options"] = {"encrypt": False}
    else:
        settings["early_stopping"] = 5
    report = securevfl.train(method, dataset, **settings)
    selection = report.extra.get("selection", {})
    return {"auc": float(report.metrics["auc"]), "selection": selection.get("parties"),
            "select_cost": selection.get("cost")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="adult")
    parser.add_argument("--parties", type=int, default=3)
    parser.add_argument("--methods", default="secureboost,splitnn")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--select", default="iv>=0.02")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    for method in args.methods.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            every = _run(method, args.dataset, args.parties, seed, None)
            kept = _run(method, args.dataset, args.parties, seed, args.select)
            rows.append({"method": method, "seed": seed, "auc_all_columns": every["auc"],
                         "auc_selected": kept["auc"], "loss": every["auc"] - kept["auc"],
                         "selection": kept["selection"], "select_cost": kept["select_cost"]})
            print(json.dumps(rows[-1]))
    print(f"{'method':<12} {'seed':>4} {'all columns':>12} {'selected':>9} {'loss':>8}")
    for r in rows:
        print(f"{r['method']:<12} {r['seed']:>4} {r['auc_all_columns']:>12.4f} {r['auc_selected']:>9.4f} "
              f"{r['loss']:>+8.4f}")
    for method in args.methods.split(","):
        losses = [r["loss"] for r in rows if r["method"] == method]
        print(f"{method}: mean loss {np.mean(losses):+.4f} (goal <= 0.005)")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"dataset": args.dataset, "parties": args.parties, "select": args.select,
                                        "runs": rows}, indent=2))


if __name__ == "__main__":
    main()

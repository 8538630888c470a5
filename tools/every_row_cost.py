"""What training for partial rows costs at full coverage: SplitNN's default (every row) against the intersection.

    PYTHONPATH=. .venv/bin/python tools/every_row_cost.py [--datasets adult,mnist-5k] [--epochs 3] [--reps 3]

Issue 44's goal: "training cost of the default at p = 1.0 within 1.3x of today's SplitNN epoch". On a
bundled dataset every party holds every row (p = 1.0); the default trains with party-wise dropout and
the active party's own head (``require_all_parties=False``), today's SplitNN without them
(``require_all_parties=True``). The two runs alternate ``--reps`` times (so machine load hits both
alike); the figure is the median of the training phase's wall seconds per epoch
(``cost.phases.train.wall_s / epochs``) and the ratio of the medians. ``--threads 1`` pins torch's
intra-op threads: on a shared 2-core machine torch's default (one per core) made single runs 10-100x
slower whenever another job took a core, and the ratio meant nothing (mnist-5k 0.3 s/epoch, runs of 25 s).
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

import securevfl

#: dataset -> (parties, extra train arguments)
CASES = {"adult": (3, {}), "mnist-5k": (4, {}), "california-housing": (2, {}),
         "breast-cancer": (3, {})}


def epoch_seconds(dataset: str, every_row: bool, epochs: int, seed: int) -> float:
    """The training phase's wall seconds per epoch of one SplitNN run."""
    parties, extra = CASES[dataset]
    report = securevfl.train("splitnn", dataset=dataset, parties=parties, epochs=epochs, seed=seed, device="cpu",
                             require_all_parties=not every_row, **extra)
    return float(report.cost["phases"]["train"]["wall_s"]) / epochs


def main() -> None:
    """Alternate the two runs per dataset and print the medians and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="adult,mnist-5k,california-housing")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", help="write the figures here (JSON)")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    figures: dict[str, float] = {}
    for dataset in args.datasets.split(","):
        times: dict[bool, list[float]] = {True: [], False: []}
        for rep in range(args.reps):
            for every_row in (False, True):
                times[every_row].append(epoch_seconds(dataset, every_row, args.epochs, seed=rep))
        shared, every = statistics.median(times[False]), statistics.median(times[True])
        figures[f"every_row_cost.{dataset}.intersection_epoch_s"] = shared
        figures[f"every_row_cost.{dataset}.every_row_epoch_s"] = every
        figures[f"every_row_cost.{dataset}.ratio"] = every / shared
        print(f"{dataset:20s} intersection {shared:7.3f} s/epoch   every row {every:7.3f} s/epoch   "
              f"ratio {every / shared:.2f}  (runs: {[round(t, 2) for t in times[False]]} vs "
              f"{[round(t, 2) for t in times[True]]})", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    main()

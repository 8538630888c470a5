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
over the seeds; the pattern ``all`` is every held-out row), and the ratios of
:func:`securevfl.bench.coverage.ratios`. The measuring code is :mod:`securevfl.bench.coverage` (also
the ``coverage`` section of ``securevfl bench``, which runs breast-cancer at p 1.0 and 0.5 with
``--quick`` and this script's ``--quick`` with ``--full``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from securevfl.bench.coverage import FULL, QUICK, print_table, run


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

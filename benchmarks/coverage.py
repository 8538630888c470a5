"""Every customer scored: held-out rows per coverage pattern, the default against hand-built models and LASER-VFL.

    PYTHONPATH=. .venv/bin/python benchmarks/coverage.py --quick --out out/coverage_quick.json   # about a minute
    PYTHONPATH=. .venv/bin/python benchmarks/coverage.py --out out/coverage.json
    PYTHONPATH=. .venv/bin/python benchmarks/coverage.py --method easter --option secagg=dh --datasets digits \
        --coverages 0.8 --seeds 0 --batch-size 32
    PYTHONPATH=. .venv/bin/python benchmarks/coverage.py --method hetero-lr --option key_bits=1024 \
        --datasets adult --rows 4000 --epochs 10 --coverages 0.8 --seeds 0
    PYTHONPATH=. .venv/bin/python benchmarks/coverage.py --method secureboost --option encrypt=false \
        --option trees=30 --option max_depth=4 --datasets adult --rows 10000 --epochs 20 --seeds 0 --batch-size 32

Each dataset is cut over its parties (the partitioner's columns and held-out rows); each passive party
then holds each row, training and held-out alike, with probability ``p`` (its own draw), the active
party every row. Per dataset, ``p`` and seed it trains on the training rows and scores the held-out
rows four ways, for one method that trains on partial rows (``--method``, default splitnn; its
options ``--option KEY=VALUE``):

* ``every_row``: the method as it trains by default, on every row (SplitNN: one model with absent
  embeddings, party dropout, the active party's own head);
* ``stitched``: the method on the rows every party holds (``--require-all-parties``), and the active
  party's ``local`` model for the other rows — what a user of an all-parties-only toolkit (FATE,
  SecretFlow) stitches by hand;
* ``local``: the active party's own model on its own columns (trained on all its rows);
* ``laser_vfl``: LASER-VFL (``laser-vfl``, the issue's named peer), by default: trained on every
  row, each row scored by the heads of the parties that hold it — only for a split-learning method
  (splitnn, pyvertical, cvfl); for the others the column and its ratio are left out,

and reports AUC (binary), accuracy (multi-class) or RMSE (regression) per pattern (which parties hold
the row) and over all rows. Keys: ``coverage.<dataset>.p<percent>.<way>.<pattern>.<metric>`` (means
over the seeds; the pattern ``all`` is every held-out row) for splitnn, ``coverage.<method>.<dataset>.
p<percent>...`` for any other method, and the ratios of :func:`securevfl.bench.coverage.ratios`. The
measuring code is :mod:`securevfl.bench.coverage` (also the ``coverage`` section of ``securevfl bench``,
which runs breast-cancer at p 1.0 and 0.5 with ``--quick`` and this script's ``--quick`` with ``--full``).

Options where ``--option`` gives none (:data:`securevfl.bench.coverage.BENCH_OPTIONS`): hetero-lr
``key_bits=1024`` (with ``insecure_allow_small_key``: the key size changes only the time), secureboost
``encrypt=false trees=30 max_depth=4`` (the same trees as with Paillier). ``--epochs`` is every case's
epochs (secureboost: of ``local`` only; its trees are its option ``trees``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from securevfl.bench.coverage import DEFAULT_METHOD, CoverageBench, capable_methods, print_table, run, select_cases
from securevfl.errors import ConfigError


def _option(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--option wants KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse the options, run, print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="breast-cancer and california-housing (4,000 rows), "
                                                             "p 1.0 and 0.5, one seed: about a minute")
    parser.add_argument("--method", default=DEFAULT_METHOD,
                        help="every_row's and stitched's method: one that trains on partial rows (default splitnn)")
    parser.add_argument("--option", action="append", type=_option, default=[], metavar="KEY=VALUE",
                        help="the method's option (repeatable), e.g. secagg=dh, trees=30, encrypt=false, key_bits=1024")
    parser.add_argument("--datasets", help="comma-separated cases by dataset: breast-cancer, california-housing, "
                                           "adult, mnist-5k, digits (default: --quick's or the full run's)")
    parser.add_argument("--rows", type=int, help="rows kept of each dataset (0: all; default: each case's)")
    parser.add_argument("--epochs", type=int, help="each case's epochs (default: each case's)")
    parser.add_argument("--batch-size", type=int, default=64, help="of every way trained in epochs (default 64)")
    parser.add_argument("--coverages", help="each passive party's chance of holding a row (default 1.0,0.8,0.5)")
    parser.add_argument("--seeds", help="comma-separated (default 0,1,2; --quick 0)")
    parser.add_argument("--party-dropout", type=float, help="the every-row model's --party-dropout (default: its own)")
    parser.add_argument("--out", type=Path, help="write the figures here (JSON)")
    args = parser.parse_args(argv)
    if args.method != DEFAULT_METHOD and args.method not in capable_methods():
        parser.error(f"--method {args.method}: not one that trains on partial rows; choose from "
                     f"{', '.join(capable_methods())}")
    coverages = tuple(float(x) for x in (args.coverages or ("1.0,0.5" if args.quick else "1.0,0.8,0.5")).split(","))
    seeds = tuple(int(x) for x in (args.seeds or ("0" if args.quick else "0,1,2")).split(","))
    try:
        cases = select_cases(args.datasets.split(",") if args.datasets else None, quick=args.quick, rows=args.rows,
                             epochs=args.epochs)
        bench = CoverageBench(cases=cases, coverages=coverages, seeds=seeds, party_dropout=args.party_dropout,
                              method=args.method, options=dict(args.option), batch_size=args.batch_size)
    except ConfigError as error:
        parser.error(str(error))
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        figures = run(bench, Path(work))
    figures["coverage.wall_s"] = time.perf_counter() - started
    print_table(figures)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(figures, indent=2, sort_keys=True))
        print(f"figures: {args.out}")
    return figures


if __name__ == "__main__":
    main()

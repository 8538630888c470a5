"""SecureBoost: time per tree vs the straightforward SecureBoost, the crypto floor and XGBoost, in one run.

    PYTHONPATH=. .venv/bin/python benchmarks/secureboost.py --quick --out out/secureboost_quick.json  # ~2 min
    PYTHONPATH=. .venv/bin/python benchmarks/secureboost.py --out out/secureboost.json                # full
    PYTHONPATH=. .venv/bin/python benchmarks/secureboost.py --rows 50000 --trees 3 --depth 4 --plain-rows 2000

On **generated data** (the ``synthetic`` dataset: scikit-learn ``make_classification``, 20 features
split 10 / 10 between the active party, which holds the binary label, and one passive party; 80 %
train, 20 % test; ``alignment="plaintext"``, so no PSI time is in any figure), with 2048-bit
Paillier keys (``--key-bits``) and ``--workers`` processes per party (default 2):

* **fast** (``secureboost`` as shipped: fast backend, packing, histogram subtraction) on ``--rows``;
* the same protocol **without encryption** (``encrypt=false``) on the same rows;
* the **straightforward SecureBoost** (``backend=phe, packing=false, subtraction=false``, everything
  else equal) on ``--plain-rows`` rows, and **fast** again on those rows:
  ``speedup_vs_plain_secureboost`` = plain / fast time per tree at equal rows;
* **fast on a small table**: ``--small-rows`` rows (3,750: 3,000 training rows), depth 5, several trees:
  ``small_table_seconds_per_tree`` (the goal: <= 1 s; the cipher compression and decryption do not shrink
  with the rows, so this is where SecureBoost's fixed costs show);
* full mode only: **fast** on ``--big-rows`` rows (1,000,000), one tree (its time includes start-up);
* **XGBoost** (``tree_method="hist"``, same trees, depth, learning rate, ``max_bin``, ``n_jobs`` =
  workers) on the joined table of the same rows: ``ratio_to_xgboost`` (training seconds) and
  ``auc_gap_vs_xgboost`` (XGBoost AUC − SecureBoost AUC, same test rows);
* the **crypto floor** of each encrypted run from per-core rates measured in the same run (same key
  size): ``floor = (encryptions / encrypt_per_s + (homomorphic additions + compress squarings) /
  multiply_per_s + decryptions / decrypt_per_s) / cores``, cores = min(workers, CPUs);
  ``fraction_of_crypto_floor`` = fast time per tree / floor per tree (the goal: <= 1.25).

Time per tree is the mean over the trees after the first (the first also starts the worker
processes; it is reported on its own). The split per tree (encrypt, histogram = the passive party's
histogram + compress + re-randomise crypto seconds, decrypt, split finding, network, other) sums
the whole training, divided by the trees. The parties run in this process: there is no real network,
bytes per link are counted, and "network" is serialisation plus the active party's waiting that the
passive party's metered work does not explain. The measuring code is :mod:`securevfl.bench.secureboost`
(also the ``secureboost`` section of ``securevfl bench``); its docstring defines every figure.

``--quick``: 10,000 rows, 2 trees, depth 3; the straightforward SecureBoost on 1,000 rows, 1 tree; the small
table with 4 trees. Default (full): 100,000 rows, 5 trees, depth 5; straightforward on 10,000 rows, 1 tree;
the small table with 11 trees; 1,000,000 rows, 1 tree.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

# The parties' worker processes re-import this script's top level: keep it light (securevfl, rich
# and xgboost are imported in the functions, in this process only).

PRESETS: dict[str, dict[str, int]] = {
    "quick": {"rows": 10_000, "trees": 2, "depth": 3, "plain_rows": 1_000, "plain_trees": 1, "big_rows": 0,
              "small_rows": 3_750, "small_trees": 4},
    "full": {"rows": 100_000, "trees": 5, "depth": 5, "plain_rows": 10_000, "plain_trees": 1, "big_rows": 1_000_000,
             "small_rows": 3_750, "small_trees": 11},
}


def print_tables(data: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    from securevfl.bench import secureboost as sb

    console = Console() if sys.stdout.isatty() else Console(width=200)
    m = data["machine"]
    table = Table(title=f"SecureBoost on generated data ({data['config']['features']} features, 2 parties), "
                        f"{m['key_bits']}-bit Paillier, {m['workers']} workers per party, {m['cores']} cores; "
                        "seconds")
    for col in sb.COLUMNS:
        table.add_column(col, justify="left" if col == "configuration" else "right")
    for row in sb.table_rows(data):
        table.add_row(*row)
    console.print(table)
    console.print(sb.SPLIT_NOTE + "; " + data["network_note"], highlight=False)
    floor = Table(title="Crypto floor: counted operations at the measured per-core rates")
    for col in sb.FLOOR_COLUMNS:
        floor.add_column(col, justify="left" if col == "configuration" else "right")
    for row in sb.floor_rows(data):
        floor.add_row(*row)
    console.print(floor)
    if data.get("ablation"):
        fast = data["runs"]["fast_at_plain_rows"]
        ablation = Table(title=f"each optimisation off alone, {fast['rows']:,} rows (fast: "
                               f"{fast['seconds_per_tree']:.3g} s per tree)")
        for col in ("turned off", "trees", "s / tree", "x fast", "homomorphic additions", "decryptions", "MB sent"):
            ablation.add_column(col, justify="left" if col == "turned off" else "right")
        for label, a in data["ablation"].items():
            ablation.add_row(label, str(a["trees"]), f"{a['seconds_per_tree']:.3g}", f"{a['slowdown_vs_fast']:.2f}",
                             f"{a['operations']['homomorphic_additions']:,}", f"{a['operations']['decryptions']:,}",
                             f"{sum(a['bytes'].values()) / 1e6:.2f}")
        console.print(ablation)
    links = Table(title="bytes per link (in process: counted, not sent)")
    links.add_column("configuration")
    names = sorted({link for r in data["runs"].values() for link in r["bytes"]})
    for link in names:
        links.add_column(link, justify="right")
    for r in data["runs"].values():
        links.add_row(r["label"], *[f"{r['bytes'].get(link, 0):,}" for link in names])
    console.print(links)
    for line in sb.summary_lines(data):
        console.print(line, highlight=False)
    console.print(f"machine: {m['cpu']}, {m['cores']} cores; load average (1 min) {m['load_1m_start']} at the "
                  f"start, {m['load_1m_end']} at the end; {data['data']}", highlight=False)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10,000 rows, 2 trees, depth 3 (about 2 minutes)")
    parser.add_argument("--rows", type=int, help="generated rows of the main runs (80 %% train)")
    parser.add_argument("--trees", type=int, help="trees of the main runs")
    parser.add_argument("--depth", type=int, help="max_depth of every run")
    parser.add_argument("--workers", type=int, default=2, help="processes per party (and XGBoost's n_jobs)")
    parser.add_argument("--key-bits", type=int, default=2048, help="Paillier modulus bits (2048 or 3072)")
    parser.add_argument("--plain-rows", type=int, help="rows of the straightforward SecureBoost and the fast run "
                                                       "beside it")
    parser.add_argument("--plain-trees", type=int, help="trees of the straightforward SecureBoost")
    parser.add_argument("--big-rows", type=int, help="rows of the extra one-tree fast run (0: none)")
    parser.add_argument("--small-rows", type=int, help="rows of the small-table run (3,000 training rows, depth 5; "
                                                       "0: none)")
    parser.add_argument("--small-trees", type=int, help="trees of the small-table run")
    parser.add_argument("--features", type=int, default=20, help="generated features, split between 2 parties")
    parser.add_argument("--max-bins", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-ablation", action="store_true", help="skip the runs with one optimisation off")
    parser.add_argument("--no-plaintext", action="store_true", help="skip the encrypt=false run")
    parser.add_argument("--insecure-small-key", action="store_true", help="allow --key-bits below 2048 (tests)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON to this file")
    parser.add_argument("--quiet", action="store_true", help="no progress lines and no tables")
    args = parser.parse_args(argv)

    from securevfl.bench.secureboost import SecureBoostBench, measure

    preset = PRESETS["quick" if args.quick else "full"]

    def pick(name: str) -> int:
        value = getattr(args, name)
        return int(preset[name] if value is None else value)

    bench = SecureBoostBench(rows=pick("rows"), trees=pick("trees"), depth=pick("depth"), workers=args.workers,
                             key_bits=args.key_bits, plain_rows=pick("plain_rows"), plain_trees=pick("plain_trees"),
                             big_rows=pick("big_rows"), small_rows=pick("small_rows"),
                             small_trees=pick("small_trees"), features=args.features, max_bins=args.max_bins,
                             learning_rate=args.learning_rate, seed=args.seed, plaintext=not args.no_plaintext,
                             ablation=not args.no_ablation, insecure_allow_small_key=args.insecure_small_key)
    started = time.perf_counter()

    def log(text: str) -> None:
        if not args.quiet:
            print(f"[{time.perf_counter() - started:7.1f} s] {text}", flush=True)

    data = measure(bench, log)
    data = {**data, "benchmark": "secureboost", "quick": args.quick}
    if not args.quiet:
        print_tables(data)
    if args.out:
        from securevfl.bench.results import write_json

        write_json(args.out, data, default=float)
        if not args.quiet:
            print(f"wrote {args.out}")
    return data


if __name__ == "__main__":
    main()

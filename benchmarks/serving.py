"""Online scoring under load: three ``securevfl party --serve`` processes, closed-loop async clients.

    PYTHONPATH=. .venv/bin/python benchmarks/serving.py --quick --out out/serving_quick.json   # 20k rows, ~2 min
    PYTHONPATH=. .venv/bin/python benchmarks/serving.py --out out/serving.json                 # 100k rows

The method, the peers and the goals: :mod:`securevfl.bench.serving` (shared with the ``predict``
section of ``securevfl bench``, which runs a few of these cells). This script parses the options,
runs :func:`securevfl.bench.serving.run_benchmark`, prints its tables and writes the JSON.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from securevfl.bench.serving import DEFAULT_BATCH_WAIT_MS, ServingBenchConfig, print_tables, run_benchmark


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse the options, run the benchmark, print the tables and write the JSON."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20,000 rows per party, 5 s per cell")
    parser.add_argument("--rows", type=int, help="rows each party holds (default 100,000; --quick 20,000)")
    parser.add_argument("--train-rows", type=int, default=5000, help="rows of the training table")
    parser.add_argument("--clients", default="1,8,32", help="concurrent closed-loop clients (comma-separated)")
    parser.add_argument("--sizes", default="1,100", help="rows per request (comma-separated)")
    parser.add_argument("--duration", type=float, help="seconds measured per cell (default 20; --quick 5)")
    parser.add_argument("--warmup", type=float, help="seconds of warm-up per cell (default 2; --quick 1)")
    parser.add_argument("--batch-wait-ms", type=float, default=DEFAULT_BATCH_WAIT_MS,
                        help="the service's --batch-wait-ms for the main cells")
    parser.add_argument("--no-tls", action="store_true", help="skip the HTTPS + token cell")
    parser.add_argument("--no-budget-check", action="store_true", help="skip the flood against the default budget")
    parser.add_argument("--timeout", type=float, default=600, help="seconds a service may take to set up")
    parser.add_argument("--work-dir", type=Path, help="keep the generated files, model and logs here")
    parser.add_argument("--out", type=Path, help="write the figures as JSON to this file")
    parser.add_argument("--quiet", action="store_true", help="no progress lines and no tables")
    args = parser.parse_args(argv)
    config = ServingBenchConfig(
        rows=args.rows or (20_000 if args.quick else 100_000), train_rows=args.train_rows,
        clients=_ints(args.clients), sizes=_ints(args.sizes),
        duration_s=args.duration or (5.0 if args.quick else 20.0),
        warmup_s=args.warmup if args.warmup is not None else (1.0 if args.quick else 2.0),
        batch_wait_ms=args.batch_wait_ms, tls=not args.no_tls, budget_check=not args.no_budget_check,
        timeout_s=args.timeout)
    started = time.perf_counter()

    def log(text: str) -> None:
        if not args.quiet:
            print(f"[{time.perf_counter() - started:7.1f} s] {text}", flush=True)

    with tempfile.TemporaryDirectory(prefix="securevfl-serving-bench-") as tmp:
        work = args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        figures = run_benchmark(config, work, log)
    if not args.quiet:
        print_tables(figures)
    if args.out:
        from securevfl.bench.results import write_json

        write_json(args.out, figures, default=float)
        if not args.quiet:
            print(f"wrote {args.out}")
    return figures


if __name__ == "__main__":
    main()

"""Large tables: 1M rows x 50 columns over 3 parties — read, PSI, one epoch of SplitNN, peak memory.

Generates (and names as generated) three party files of the same customers in different row orders:
the active party holds 17 feature columns and the label, the two passive parties 17 and 16. Then,
as `securevfl train --data ...` does, each stage separately:

* **read**: every party reads its own file (`securevfl.data.files`, pyarrow in batches);
* **PSI**: ECDH PSI over the three ID columns (`psi`, X25519, all cores);
* **epoch**: one epoch of SplitNN (batch 1024) on the aligned rows, and the test evaluation.

Peak RSS is this process's resident memory sampled every 5 ms during each stage (a thread reading
`/proc/self/statm`; the high-water mark `getrusage` keeps would count the imports' transient), with
the child processes' (the file generator, the PSI workers) beside it; "data MB" is the size of the
three float32 feature matrices, so the multiple says how much memory the pipeline needs per byte of
data. The comparison in the same run is what a user would write with pandas (`pandas.read_csv`, the
C engine, then the feature columns as a float32 matrix), run on the same files in a fresh child
process: its seconds and its peak RSS growth, next to ours for the read stage.

    .venv/bin/python benchmarks/large_tables.py --quick --out out/large_tables.json   # 100k rows, ~1 min
    .venv/bin/python benchmarks/large_tables.py --out out/large_tables.json           # 1M rows, ~10 min
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import resource
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from rich.console import Console
from rich.table import Table

from securevfl.api import RunConfig, run
from securevfl.bench.results import write_json
from securevfl.data.alignment import align_with_psi
from securevfl.data.files import party_tables_from_files
from securevfl.data.scenario import scenario_from_tables
from securevfl.methods import TrainConfig

console = Console(width=120)
N_COLUMNS = 50
PARTIES = ("active", "bank", "shop")


def peak_rss_mb(who: int = resource.RUSAGE_SELF) -> float:
    """The high-water resident set size of this process (or of its finished children), MB."""
    return resource.getrusage(who).ru_maxrss / 1024  # Linux reports KiB


def rss_now_mb() -> float:
    """The resident set size of this process now, MB (Linux)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize() / 2**20


class PeakSampler:
    """The highest RSS of this process while the ``with`` block runs (sampled every 5 ms by a thread)."""

    def __enter__(self) -> PeakSampler:
        self.peak_mb = rss_now_mb()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._done.wait(0.005):
            self.peak_mb = max(self.peak_mb, rss_now_mb())

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak_mb = max(self.peak_mb, rss_now_mb())


def generate(directory: Path, rows: int, kind: str, seed: int = 0) -> dict[str, Path]:
    """Generated data: a linear label over 50 Gaussian columns, split 17/17/16, each file shuffled."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((rows, N_COLUMNS), dtype=np.float32)
    y = (X @ rng.standard_normal(N_COLUMNS) + rng.standard_normal(rows) > 0).astype(np.int8)
    ids = np.array([f"c{i}" for i in range(rows)], dtype=object)
    files = {}
    for p, (name, cols) in enumerate(zip(PARTIES, np.array_split(np.arange(N_COLUMNS), len(PARTIES)), strict=True)):
        order = rng.permutation(rows)
        frame = pd.DataFrame(X[order][:, cols], columns=[f"{name}_{c}" for c in cols])
        frame.insert(0, "id", ids[order])
        if p == 0:
            frame["label"] = y[order]
        path = directory / f"{name}.{kind}"
        if kind == "csv":
            frame.to_csv(path, index=False, float_format="%.6g")
        else:
            frame.to_parquet(path, index=False)
        files[name] = path
        del frame
    return files


#: The pandas way, run by a fresh interpreter that imports pandas only (so its peak RSS is the read's).
PANDAS_READ = """
import json, sys, time
import numpy as np, pandas as pd
import threading
def now(): return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
before, top, done = now(), [0.0], threading.Event()
def sample():
    while not done.wait(0.005):
        top[0] = max(top[0], now())
threading.Thread(target=sample, daemon=True).start()
started, held = time.perf_counter(), []
for path in sys.argv[1:]:
    frame = pd.read_csv(path, dtype={"id": str})
    held.append((frame["id"].to_numpy(), frame.drop(columns=[c for c in ("id", "label") if c in frame])
                 .to_numpy(dtype=np.float32)))
    del frame
seconds = time.perf_counter() - started
done.set()
print(json.dumps({"seconds": seconds, "growth_mb": max(top[0], now()) - before}))
"""


def pandas_read(files: dict[str, Path]) -> tuple[float, float]:
    """(seconds, peak RSS growth in MB) of pandas.read_csv + float32 features for every file, in a fresh process."""
    done = subprocess.run([sys.executable, "-c", PANDAS_READ, *map(str, files.values())], check=True,
                          capture_output=True, text=True)
    out = json.loads(done.stdout)
    return out["seconds"], out["growth_mb"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100k rows (about a minute)")
    parser.add_argument("--rows", type=int, default=None, help="rows per party (default 1M; --quick 100k)")
    parser.add_argument("--format", choices=("csv", "parquet"), default="csv")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args()
    rows = args.rows or (100_000 if args.quick else 1_000_000)
    torch.set_num_threads(2)

    with tempfile.TemporaryDirectory(prefix="securevfl-large-") as tmp:
        started = time.perf_counter()
        # generated in a child process, so this process's peak RSS counts the pipeline only
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            files = pool.submit(generate, Path(tmp), rows, args.format).result()
        generate_s = time.perf_counter() - started
        file_mb = sum(p.stat().st_size for p in files.values()) / 2**20
        gc.collect()
        baseline_mb = rss_now_mb()  # growth is measured from here; the peak so far may be the imports'

        started = time.perf_counter()
        with PeakSampler() as sampled:
            tables, classes = party_tables_from_files({n: str(p) for n, p in files.items()}, id_column="id",
                                                      label_column="label", active=PARTIES[0])
        read_s = time.perf_counter() - started
        read_peak_mb = sampled.peak_mb
        data_mb = sum(t.features.nbytes for t in tables.values()) / 2**20

        started = time.perf_counter()
        with PeakSampler() as sampled:
            scenario = scenario_from_tables(tables, PARTIES[0], classes, aligner=align_with_psi,
                                            dataset="generated")
        psi_s = time.perf_counter() - started
        psi_peak_mb = sampled.peak_mb

        config = RunConfig(method="splitnn", train=TrainConfig(epochs=1, batch_size=1024), device="cpu",
                           alignment="psi")
        started = time.perf_counter()
        with PeakSampler() as sampled:
            report = run(config, scenario=scenario)
        epoch_s = time.perf_counter() - started
        peak_mb = max(read_peak_mb, psi_peak_mb, sampled.peak_mb)

        pandas_s = pandas_growth_mb = None
        if args.format == "csv":
            pandas_s, pandas_growth_mb = pandas_read(files)

    figures = {
        "rows": rows, "columns": N_COLUMNS, "parties": len(PARTIES), "format": args.format,
        "file_mb": file_mb, "data_mb": data_mb, "generate_s": generate_s,
        "read_s": read_s, "psi_s": psi_s, "epoch_s": epoch_s,
        "peak_rss_mb": peak_mb, "peak_rss_after_read_mb": read_peak_mb, "peak_rss_after_psi_mb": psi_peak_mb,
        "rss_before_read_mb": baseline_mb,
        "children_peak_rss_mb": peak_rss_mb(resource.RUSAGE_CHILDREN),  # the generator and the PSI workers
        "peak_over_data": peak_mb / data_mb, "growth_over_data": (peak_mb - baseline_mb) / data_mb,
        "aligned_rows": int(scenario.alignment.size),
        "accuracy": report.metrics["accuracy"], "pandas_read_csv_s": pandas_s,
        "read_vs_pandas": (pandas_s / read_s) if pandas_s else None,
        "read_growth_mb": read_peak_mb - baseline_mb, "pandas_read_growth_mb": pandas_growth_mb,
        "read_memory_vs_pandas": (pandas_growth_mb / max(read_peak_mb - baseline_mb, 1.0)) if pandas_growth_mb
        else None,
        "train_phase_s": report.cost["phases"]["train"]["wall_s"],
    }
    table = Table(title=f"{rows:,} rows x {N_COLUMNS} columns over {len(PARTIES)} parties ({args.format}, "
                        f"{file_mb:,.0f} MB of files, {data_mb:,.0f} MB of float32 features)")
    for col in ("stage", "seconds", "peak RSS during (MB)"):
        table.add_column(col, justify="right" if col != "stage" else "left")
    table.add_row("read (3 parties)", f"{read_s:.1f}", f"{read_peak_mb:,.0f}")
    table.add_row("PSI (3 parties)", f"{psi_s:.1f}", f"{psi_peak_mb:,.0f}")
    table.add_row("SplitNN: 1 epoch + test", f"{epoch_s:.1f}", f"{sampled.peak_mb:,.0f}")
    console.print(table)
    if pandas_s is not None and pandas_growth_mb is not None:
        console.print(f"read: {read_s:.1f} s and {figures['read_growth_mb']:,.0f} MB of RSS growth, against "
                      f"pandas.read_csv + float32 {pandas_s:.1f} s and {pandas_growth_mb:,.0f} MB on the same files "
                      f"(speed {figures['read_vs_pandas']:.2f}x, memory {figures['read_memory_vs_pandas']:.2f}x "
                      f"in our favour when > 1)")
    console.print(f"peak RSS {peak_mb:,.0f} MB = {figures['peak_over_data']:.1f}x the feature data; it grew by "
                  f"{figures['growth_over_data']:.1f}x the data from {baseline_mb:,.0f} MB (torch loaded); "
                  f"accuracy {figures['accuracy']:.3f}")
    if args.out:
        write_json(args.out, figures)
        console.print(f"figures: {args.out}")


if __name__ == "__main__":
    sys.exit(main())

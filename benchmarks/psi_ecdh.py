"""Benchmark: our ECDH PSI (psi.run_local) vs OpenMined PSI 2.0.6 on the same inputs (50% overlap).

    .venv/bin/python benchmarks/psi_ecdh.py --quick            # 10k x 10k, both libraries (~1 min)
    .venv/bin/python benchmarks/psi_ecdh.py                    # 100k x 100k, both libraries
    .venv/bin/python benchmarks/psi_ecdh.py --n 1000000 --no-openmined   # 1M x 1M, ours only
    .venv/bin/python benchmarks/psi_ecdh.py --full             # 10M x 10M streamed from Parquet, ours only
    .venv/bin/python benchmarks/psi_ecdh.py --stream --n 2000000         # 2M x 2M streamed from Parquet
    .venv/bin/python benchmarks/psi_ecdh.py --executor ray [--ray-address auto]   # curve work on Ray

``--stream`` (implied by ``--full``) first writes each party's IDs as *generated data* to Parquet
(``--data-dir``, default ``out/bench_data``; reused when present) and then reads them in record
batches (:class:`psi.ParquetIDs`), so no party's IDs are ever all Python strings at once.

Prints a table and writes JSON (``--out``) with n_per_party, seconds, openmined_seconds,
speedup_vs_openmined, peak_rss_mb, the time split and ``fraction_of_floor`` (the X25519
multiplications the run needed, at this machine's measured rate over the workers, divided by the
measured seconds), ``floor_seconds``, ``parallel_floor_seconds`` / ``fraction_of_parallel_floor`` (the
same multiplications as bare loops on all worker processes at once, measured just before and
after our run: the floor this machine actually gives that many processes at that moment), and
``fraction_of_protocol_floor`` (the protocol floor: those multiplications plus hash-to-curve of
every own ID and validation of every received point, each at its one-core rate measured in the
same run, over the workers; ``fraction_of_parallel_protocol_floor`` scales it by what the machine
gave bare parallel loops) and ``cpu_fraction_of_floor`` (the same multiplications at
the measured *CPU* time per multiplication, over the CPU seconds of all our processes: the
fraction an idle machine would give with perfect parallelism, and far less sensitive to other
load on a shared machine). The shared measuring code lives in :mod:`securevfl.bench.primitives`
(``securevfl bench`` runs the same comparison). Peak RSS is sampled (psutil, every 100 ms)
over this process plus its worker processes, summed; our run happens before OpenMined's so the
OpenMined run does not inflate our figure (its own peak is reported separately).
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from pathlib import Path

import psutil

import psi
from securevfl.bench.results import write_json

# Worker processes (forkserver/spawn) re-import this script's top level: keep it light. rich and
# securevfl.bench (which loads matplotlib) cost about a CPU second per worker, so they are imported
# in the functions that use them, in this process only.


class PeakRSS:
    """Sample the summed RSS of this process and its children in a background thread.

    Also records each child's last-seen CPU time, so ``children_cpu`` covers worker processes
    (grandchildren via the forkserver, which ``RUSAGE_CHILDREN`` would miss).
    """

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.peak = 0
        self._child_cpu: dict[int, float] = {}
        self._children: list[psutil.Process] = []
        self._samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        me = psutil.Process()
        total = me.memory_info().rss
        self._samples += 1
        if self._samples % 10 == 1:  # listing the children scans /proc (~2 ms): once a second is enough
            self._children = me.children(recursive=True)
        for child in self._children:
            try:
                total += child.memory_info().rss
                cpu = child.cpu_times()
                self._child_cpu[child.pid] = cpu.user + cpu.system
            except psutil.Error:
                pass
        return total

    @property
    def children_cpu(self) -> float:
        """CPU seconds of all child processes seen (up to the last sample before they ended)."""
        return sum(self._child_cpu.values())

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRSS:
        self.peak = self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._sample())


def run_ours(parties: dict, workers: int | None, mode: str, executor: psi.ExecutorConfig) -> dict:
    """One run of our PSI on lists of IDs (``run_local``) or on ID sources (``run_prepared``)."""
    with PeakRSS() as rss:
        t0, c0 = time.perf_counter(), time.process_time()
        if all(isinstance(v, list) for v in parties.values()):
            result = psi.run_local(parties, mode=mode, workers=workers, executor=executor)
        else:
            result = psi.run_prepared(parties, config=psi.PSIConfig(mode=mode), workers=workers, executor=executor)
        seconds, main_cpu = time.perf_counter() - t0, time.process_time() - c0
    t = result.timings
    return {
        "seconds": round(seconds, 3),
        # CPU time of this process plus every child (forkserver and workers), sampled
        "cpu_seconds": round(main_cpu + rss.children_cpu, 3),
        "main_cpu_seconds": round(main_cpu, 3),
        "children_cpu_seconds": round(rss.children_cpu, 3),
        "intersection_size": result.intersection_size,
        "peak_rss_mb": round(rss.peak / 2**20, 1),
        "bytes_total": result.total_bytes,
        "bytes_per_link": result.bytes_per_link,
        "rounds": result.rounds,
        "workers": result.workers,
        "executor": result.extra.get("executor"),
        "split": {
            "hash_cpu_s": round(t["A"]["hash"] + t["B"]["hash"], 3),
            "scalar_mult_cpu_s": round(t["A"]["blind"] + t["B"]["blind"], 3),
            "curve_wall_s": round(t["A"]["curve_wall"] + t["B"]["curve_wall"], 3),
            "codec_s": round(t["A"]["codec"] + t["B"]["codec"], 3),
            "match_shuffle_s": round(t["A"]["match"] + t["B"]["match"], 3),
            "scalar_mults": t["A"]["scalar_mults"] + t["B"]["scalar_mults"],
            "items_hashed": t["A"]["items_hashed"] + t["B"]["items_hashed"],
        },
        "timings": t,
    }


def run_openmined(a: list[str], b: list[str]) -> dict:
    """OpenMined PSI: A is the client (learns the intersection), B the server (GCS setup)."""
    from securevfl.bench.primitives import import_openmined, openmined_intersection

    with PeakRSS() as rss:
        t0, c0 = time.perf_counter(), time.process_time()
        found, nbytes = openmined_intersection(a, b)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu, 3),
        "intersection_size": found,
        "peak_rss_mb": round(rss.peak / 2**20, 1),
        "bytes_total": nbytes,
        "version": getattr(import_openmined(), "__version__", "?"),
    }


def _bare_exchanges(count: int) -> float:
    """Run ``count`` bare X25519 multiplications (parse a point + exchange); return the wall seconds."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

    key = X25519PrivateKey.generate()
    points = [X25519PrivateKey.generate().public_key().public_bytes_raw() for _ in range(64)]
    todo = (points * (count // len(points) + 1))[:count]
    t0 = time.perf_counter()
    for p in todo:
        key.exchange(X25519PublicKey.from_public_bytes(p))
    return time.perf_counter() - t0


def parallel_seconds_per_mult(workers: int, count: int = 8000) -> float:
    """Wall seconds per multiplication with ``workers`` processes doing bare X25519 loops at once.

    The floor as this machine gives it *now* to as many processes as the run uses: on a shared or
    SMT machine, parallel loops run slower than ``single-core rate / workers`` assumes.
    """
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(int, range(workers)))  # workers started before timing
        t0 = time.perf_counter()
        list(pool.map(_bare_exchanges, [count] * workers))
        return (time.perf_counter() - t0) / (count * workers)


def x25519_cpu_per_mult(count: int = 2000, repeats: int = 3) -> float:
    """CPU seconds per X25519 multiplication (parse a point + exchange), best of ``repeats``, one core."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

    key = X25519PrivateKey.generate()
    points = [X25519PrivateKey.generate().public_key().public_bytes_raw() for _ in range(64)]
    todo = (points * (count // len(points) + 1))[:count]
    best = float("inf")
    for _ in range(repeats):
        c0 = time.process_time()
        for p in todo:
            key.exchange(X25519PublicKey.from_public_bytes(p))
        best = min(best, time.process_time() - c0)
    return best / count


def write_generated_ids(path: Path, start: int, n: int, batch: int = 1_000_000) -> None:
    """Write IDs ``user-<start..start+n>`` (generated data, not real people) as one Parquet column."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    schema = pa.schema([("id", pa.string())])
    with pq.ParquetWriter(tmp, schema) as writer:
        for lo in range(start, start + n, batch):
            nums = np.arange(lo, min(lo + batch, start + n)).astype("U10")
            ids = np.char.add("user-", np.char.zfill(nums, 10))
            writer.write_table(pa.table({"id": pa.array(ids.tolist(), pa.string())}, schema=schema))
    tmp.replace(path)


def make_ids(n: int, overlap: float) -> tuple[list[str], list[str]]:
    """The two parties' IDs in memory (see :func:`securevfl.bench.primitives.make_ids`)."""
    from securevfl.bench.primitives import make_ids as make

    return make(n, overlap)


def generated_parquet(data_dir: Path, n: int, overlap: float) -> tuple[Path, Path]:
    """The two parties' generated ID files (same IDs as :func:`make_ids`), written once and reused."""
    shift = n - round(overlap * n)
    paths = (data_dir / f"generated_psi_ids_A_{n}.parquet", data_dir / f"generated_psi_ids_B_{n}_{shift}.parquet")
    for path, start in zip(paths, (0, shift)):
        if not path.exists():
            write_generated_ids(path, start, n)
    return paths


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="10k x 10k")
    ap.add_argument("--n", type=int, default=None, help="IDs per party (default 100000)")
    ap.add_argument("--overlap", type=float, default=0.5)
    ap.add_argument("--workers", type=int, default=None, help="processes (default: all CPUs)")
    ap.add_argument("--mode", default="both", choices=["both", "active_only", "cardinality"])
    ap.add_argument("--no-openmined", action="store_true", help="skip the OpenMined run")
    ap.add_argument("--stream", action="store_true", help="read the IDs from generated Parquet files in chunks")
    ap.add_argument("--full", action="store_true", help="10M x 10M streamed from Parquet, ours only (~15+ min)")
    ap.add_argument("--data-dir", type=Path, default=Path("out/bench_data"), help="where --stream writes its inputs")
    ap.add_argument("--executor", default="process", choices=list(psi.executors.EXECUTORS),
                    help="where the curve work runs (ray: pip install 'securevfl[ray]')")
    ap.add_argument("--ray-address", default=None, help="with --executor ray: cluster address (default: local Ray)")
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = ap.parse_args(argv)
    from rich.console import Console
    from rich.table import Table

    from securevfl.bench.primitives import (
        PSIFloorRates,
        floor_seconds,
        fraction_of_floor,
        hash_to_curve_samples,
        point_validation_samples,
        usable_cores,
        x25519_mult_samples,
    )
    stream = args.stream or args.full
    n = args.n or (10_000_000 if args.full else 10_000 if args.quick else 100_000)
    executor = psi.ExecutorConfig(args.executor, args.workers, args.ray_address)
    console = Console()
    load_start = os.getloadavg()[0]
    expected = round(args.overlap * n)
    a: list[str] = []
    b: list[str] = []
    if stream:
        t0 = time.perf_counter()
        path_a, path_b = generated_parquet(args.data_dir, n, args.overlap)
        console.print(f"generated Parquet inputs ready in {time.perf_counter() - t0:.1f} s: {path_a}, {path_b}")
        parties: dict = {"A": psi.ParquetIDs(path_a, "id"), "B": psi.ParquetIDs(path_b, "id")}
    else:
        a, b = make_ids(n, args.overlap)
        parties = {"A": a, "B": b}
    console.print(
        f"PSI benchmark: {n:,} x {n:,} IDs{' streamed from Parquet' if stream else ''}, overlap "
        f"{args.overlap:.0%}, {os.cpu_count()} CPUs, executor {args.executor} (shared machine: timings are noisy)"
    )
    per_mult_before = min(x25519_mult_samples(count=2000, repeats=3))
    hash_before = min(hash_to_curve_samples(count=2000, repeats=3))
    validate_before = min(point_validation_samples(count=2000, repeats=3))
    n_workers = args.workers or os.cpu_count() or 1
    parallel_before = parallel_seconds_per_mult(n_workers)
    ours = run_ours(parties, args.workers, args.mode, executor)
    parallel_after = parallel_seconds_per_mult(n_workers)
    assert ours["intersection_size"] == expected, ours["intersection_size"]
    om = None if (args.no_openmined or stream) else run_openmined(a, b)
    # this machine's rate, one core: the best of samples taken before and after our run
    per_mult = min(per_mult_before, *x25519_mult_samples(count=2000, repeats=3))
    cpu_per_mult = x25519_cpu_per_mult()
    mults = ours["split"]["scalar_mults"]
    hashed = ours["split"]["items_hashed"]
    rates = PSIFloorRates(per_mult, min(hash_before, *hash_to_curve_samples(count=2000, repeats=3)),
                          min(validate_before, *point_validation_samples(count=2000, repeats=3)))
    protocol_floor = rates.protocol_seconds(mults, hashed, ours["workers"])
    parallel_scale = ((parallel_before + parallel_after) / 2) / (per_mult / usable_cores(ours["workers"]))
    figures = {
        "n_per_party": n,
        "streamed_from_parquet": stream,
        "executor": ours["executor"],
        "overlap": args.overlap,
        "mode": args.mode,
        "seconds": ours["seconds"],
        "throughput_items_per_s": round(2 * n / ours["seconds"], 1),
        "peak_rss_mb": ours["peak_rss_mb"],
        "openmined_seconds": om["seconds"] if om else None,
        "openmined_peak_rss_mb": om["peak_rss_mb"] if om else None,
        "openmined_bytes": om["bytes_total"] if om else None,
        "speedup_vs_openmined": round(om["seconds"] / ours["seconds"], 2) if om else None,
        "cpu_seconds": ours["cpu_seconds"],
        "main_cpu_seconds": ours["main_cpu_seconds"],
        "children_cpu_seconds": ours["children_cpu_seconds"],
        "openmined_cpu_seconds": om["cpu_seconds"] if om else None,
        # CPU-time ratio: robust to other load on a shared machine (openmined is single-threaded)
        "cpu_ratio_vs_openmined": round(om["cpu_seconds"] / ours["cpu_seconds"], 2) if om else None,
        "load_average_1min": round(os.getloadavg()[0], 2),
        "load_average_1min_at_start": round(load_start, 2),
        "bytes_total": ours["bytes_total"],
        "rounds": ours["rounds"],
        "workers": ours["workers"],
        "split": ours["split"],
        "timings": ours["timings"],
        # the floor: the X25519 multiplications alone at the measured rate, over the workers
        "x25519_us_per_mult": round(per_mult * 1e6, 2),
        "floor_seconds": round(floor_seconds(mults, per_mult, ours["workers"]), 3),
        "fraction_of_floor": round(fraction_of_floor(mults, ours["seconds"], per_mult, ours["workers"]), 3),
        "x25519_cpu_us_per_mult": round(cpu_per_mult * 1e6, 2),
        "cpu_fraction_of_floor": round(mults * cpu_per_mult / ours["cpu_seconds"], 3),
        # the protocol floor: the multiplications plus hash-to-curve of every own ID and validation of
        # every received point, at rates measured in this run (one core each), over the workers
        "hash_to_curve_us_per_id": round(rates.hash_to_curve * 1e6, 2),
        "validate_us_per_point": round(rates.validation * 1e6, 2),
        "protocol_floor_seconds": round(protocol_floor, 3),
        "fraction_of_protocol_floor": round(protocol_floor / ours["seconds"], 3),
        # the same, scaled by what this machine gave bare X25519 loops on all workers at once (the
        # parallel floor over the single-core one): the protocol floor the machine actually offers now
        "parallel_protocol_floor_seconds": round(protocol_floor * parallel_scale, 3),
        "fraction_of_parallel_protocol_floor": round(protocol_floor * parallel_scale / ours["seconds"], 3),
        # the same multiplications as bare loops on all workers at once, just before and after our run
        "parallel_us_per_mult": [round(parallel_before * 1e6, 2), round(parallel_after * 1e6, 2)],
        "parallel_floor_seconds": round(mults * (parallel_before + parallel_after) / 2, 3),
        "fraction_of_parallel_floor": round(mults * (parallel_before + parallel_after) / 2 / ours["seconds"], 3),
    }
    table = Table(title=f"PSI {n:,} x {n:,}" + (" (streamed from Parquet)" if stream else ""))
    for col in ("implementation", "seconds", "CPU s", "peak RSS (MiB)", "bytes", "|I|"):
        table.add_column(col, justify="left" if col == "implementation" else "right")
    table.add_row(
        f"securevfl psi ({args.mode}, {ours['workers']} {ours['executor']} workers)",
        f"{ours['seconds']:.2f}",
        f"{ours['cpu_seconds']:.2f}",
        f"{ours['peak_rss_mb']:.0f}",
        f"{ours['bytes_total']:,}",
        str(ours["intersection_size"]),
    )
    if om:
        table.add_row(
            f"openmined-psi {om['version']} (client learns)",
            f"{om['seconds']:.2f}",
            f"{om['cpu_seconds']:.2f}",
            f"{om['peak_rss_mb']:.0f}",
            f"{om['bytes_total']:,}",
            str(om["intersection_size"]),
        )
    console.print(table)
    split = ours["split"]
    console.print(
        f"where our time goes (CPU s, summed over parties and workers): hash-to-curve "
        f"{split['hash_cpu_s']:.2f}, scalar mults {split['scalar_mult_cpu_s']:.2f} "
        f"({split['scalar_mults']:,} mults), codec {split['codec_s']:.2f}, match/shuffle "
        f"{split['match_shuffle_s']:.2f}; curve wall {split['curve_wall_s']:.2f} s of "
        f"{ours['seconds']:.2f} s"
    )
    console.print(
        f"floor: {mults:,} X25519 multiplications at {figures['x25519_us_per_mult']:.1f} µs on "
        f"{ours['workers']} workers = {figures['floor_seconds']:.2f} s; fraction_of_floor = "
        f"{figures['fraction_of_floor']:.2f}; by CPU time (robust to other load): "
        f"{figures['cpu_fraction_of_floor']:.2f}; against bare X25519 loops on {n_workers} processes "
        f"at once (same run): floor {figures['parallel_floor_seconds']:.2f} s, fraction "
        f"{figures['fraction_of_parallel_floor']:.2f}"
    )
    console.print(
        f"[bold]protocol floor[/bold]: + hash-to-curve of {hashed:,} IDs at "
        f"{figures['hash_to_curve_us_per_id']:.1f} µs "
        f"+ validation of {mults - hashed:,} received points at {figures['validate_us_per_point']:.1f} µs = "
        f"{figures['protocol_floor_seconds']:.2f} s; [bold]fraction_of_protocol_floor = "
        f"{figures['fraction_of_protocol_floor']:.2f}[/bold] (goal >= 0.9); against the parallel rate of this run: "
        f"{figures['parallel_protocol_floor_seconds']:.2f} s, fraction "
        f"{figures['fraction_of_parallel_protocol_floor']:.2f}"
    )
    if om:
        console.print(
            f"[bold]speedup vs openmined-psi: {figures['speedup_vs_openmined']:.2f}x wall, "
            f"{figures['cpu_ratio_vs_openmined']:.2f}x CPU time[/bold] "
            f"(load average {figures['load_average_1min']})"
        )
    if args.out:
        write_json(args.out, figures)
    return figures


if __name__ == "__main__":
    main()

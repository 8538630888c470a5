"""Benchmark: our ECDH PSI (psi.run_local) vs OpenMined PSI 2.0.6 on the same inputs (50% overlap).

    .venv/bin/python benchmarks/psi_ecdh.py --quick            # 10k x 10k, both libraries (~1 min)
    .venv/bin/python benchmarks/psi_ecdh.py                    # 100k x 100k, both libraries
    .venv/bin/python benchmarks/psi_ecdh.py --n 1000000 --no-openmined   # 1M x 1M, ours only

Prints a table and writes JSON (``--out``) with n_per_party, seconds, openmined_seconds,
speedup_vs_openmined, peak_rss_mb, the time split and ``fraction_of_floor`` (the X25519
multiplications the run needed, at this machine's measured rate over the workers, divided by the
measured seconds). The shared measuring code lives in :mod:`securevfl.bench.primitives`
(``securevfl bench`` runs the same comparison). Peak RSS is sampled (psutil, every 100 ms)
over this process plus its worker processes, summed; our run happens before OpenMined's so the
OpenMined run does not inflate our figure (its own peak is reported separately).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import psutil
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psi  # noqa: E402
from securevfl.bench.primitives import (  # noqa: E402
    floor_seconds,
    fraction_of_floor,
    import_openmined,
    make_ids,
    openmined_intersection,
    x25519_mult_samples,
)


class PeakRSS:
    """Sample the summed RSS of this process and its children in a background thread.

    Also records each child's last-seen CPU time, so ``children_cpu`` covers worker processes
    (grandchildren via the forkserver, which ``RUSAGE_CHILDREN`` would miss).
    """

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.peak = 0
        self._child_cpu: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        me = psutil.Process()
        total = me.memory_info().rss
        for child in me.children(recursive=True):
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


def run_ours(a: list[str], b: list[str], workers: int | None, mode: str) -> dict:
    with PeakRSS() as rss:
        t0, c0 = time.perf_counter(), time.process_time()
        result = psi.run_local({"A": a, "B": b}, mode=mode, workers=workers)
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
        "split": {
            "hash_cpu_s": round(t["A"]["hash"] + t["B"]["hash"], 3),
            "scalar_mult_cpu_s": round(t["A"]["blind"] + t["B"]["blind"], 3),
            "curve_wall_s": round(t["A"]["curve_wall"] + t["B"]["curve_wall"], 3),
            "codec_s": round(t["A"]["codec"] + t["B"]["codec"], 3),
            "match_shuffle_s": round(t["A"]["match"] + t["B"]["match"], 3),
            "scalar_mults": t["A"]["scalar_mults"] + t["B"]["scalar_mults"],
        },
        "timings": t,
    }


def run_openmined(a: list[str], b: list[str]) -> dict:
    """OpenMined PSI: A is the client (learns the intersection), B the server (GCS setup)."""
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


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="10k x 10k")
    ap.add_argument("--n", type=int, default=None, help="IDs per party (default 100000)")
    ap.add_argument("--overlap", type=float, default=0.5)
    ap.add_argument("--workers", type=int, default=None, help="processes (default: all CPUs)")
    ap.add_argument("--mode", default="both", choices=["both", "active_only", "cardinality"])
    ap.add_argument("--no-openmined", action="store_true", help="skip the OpenMined run")
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = ap.parse_args(argv)
    n = args.n or (10_000 if args.quick else 100_000)
    console = Console()
    load_start = os.getloadavg()[0]
    a, b = make_ids(n, args.overlap)
    expected = round(args.overlap * n)
    console.print(
        f"PSI benchmark: {n:,} x {n:,} IDs, overlap {args.overlap:.0%}, "
        f"{os.cpu_count()} CPUs (shared machine: timings are noisy)"
    )
    ours = run_ours(a, b, args.workers, args.mode)
    assert ours["intersection_size"] == expected, ours["intersection_size"]
    om = None if args.no_openmined else run_openmined(a, b)
    per_mult = min(x25519_mult_samples(count=2000, repeats=3))  # this machine's rate, one core
    mults = ours["split"]["scalar_mults"]
    figures = {
        "n_per_party": n,
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
    }
    table = Table(title=f"PSI {n:,} x {n:,}")
    for col in ("implementation", "seconds", "CPU s", "peak RSS (MiB)", "bytes", "|I|"):
        table.add_column(col, justify="left" if col == "implementation" else "right")
    table.add_row(
        f"securevfl psi ({args.mode}, {ours['workers']} workers)",
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
        f"{figures['fraction_of_floor']:.2f}"
    )
    if om:
        console.print(
            f"[bold]speedup vs openmined-psi: {figures['speedup_vs_openmined']:.2f}x wall, "
            f"{figures['cpu_ratio_vs_openmined']:.2f}x CPU time[/bold] "
            f"(load average {figures['load_average_1min']})"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    main()

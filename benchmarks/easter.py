"""EASTER vs its paper's baselines (Table II layout), and the cost of DH secure aggregation.

Part 1 — accuracy: datasets cut into 4 parties (1 active + 3 passive; ``digits`` as 4 vertical
image strips), heterogeneous local models. Methods: Local (active party alone), PyVertical
(the lead's ``pyvertical``: homogeneous bottoms, CNN on image strips), PyVertical with
heterogeneous bottoms (``cvfl compress=none``), C-VFL (8-bit quantised embeddings), Agg-VFL
(logits averaged by a fixed top) and EASTER (``secagg=dh``). EASTER's cells are its parties'
own models and their mean ("Avg", the paper's headline); the baselines train one global model,
whose accuracy fills "Avg". Mean ± std over seeds.

Part 2 — overhead (key ``secagg_overhead_fraction``): EASTER's epoch time with ``secagg=dh``
(and the paper's lighter ``pairwise``) over ``secagg=none``, minus one, at batch 128, embedding
128, 4 parties, CPU, on ``mnist-5k`` (28x28 strips, the headline) and ``digits`` (8x8, tiny
models, so the fixed per-batch crypto weighs more). Epoch time is the gap between
consecutive epoch ends (setup, first epoch and evaluation excluded), runs alternated, in wall
seconds and in CPU seconds of the process (all four parties' threads; torch intra-op threads =
1). On a loaded shared machine single epochs swing by 2x; interference only adds time, so the
figures use the *minimum* epoch time over all repeats (medians reported too), and the headline
is the larger of the wall and CPU fractions. Also: the crypto ms per step by primitive (key
agreement once, masking per batch, recovery with ``drop_prob=0.2``) against the step's model
compute, and this machine's AES-CTR rate measured in the same run (``aes_ctr_gb_per_s``, the
ceiling of mask expansion). Goals (issue 32): dh <= 6 % on mnist-5k and <= 15 % on digits.

    .venv/bin/python benchmarks/easter.py --quick --out out/easter.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from psi.atomic import write_text
from securevfl.api import RunConfig, build_scenario, run
from securevfl.bench.primitives import aes_ctr_samples
from securevfl.bench.results import write_json
from securevfl.data import DatasetOptions, PartitionSpec
from securevfl.federation.runtime import run_parties
from securevfl.methods import TrainConfig, create_method

console = Console(width=150)
PARTIES = 4
BATCH = 128
EMBEDDING = 128

#: (label, method, options, TrainConfig overrides)
METHODS: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    ("Local", "local", {}, {"embedding_dim": EMBEDDING, "hidden": (128,)}),
    ("PyVertical", "pyvertical", {"bottom": "cnn"}, {"embedding_dim": EMBEDDING, "hidden": (128,)}),
    ("PyVertical-hetero", "cvfl", {"compress": "none"}, {}),
    ("C_VFL", "cvfl", {"compress": "quant", "bits": 8}, {}),
    ("Agg_VFL", "aggvfl", {}, {}),
    ("EASTER", "easter", {"secagg": "dh"}, {}),
]


def dataset_options(name: str, seed: int) -> DatasetOptions:
    return DatasetOptions(n_samples=3000, n_features=40, seed=seed) if name == "synthetic" \
        else DatasetOptions(seed=seed)


def run_cell(dataset: str, method: str, options: dict, overrides: dict, epochs: int, seed: int) -> dict:
    """One training run; returns the headline metric, per-party accuracies and cost figures."""
    config = RunConfig(
        method=method, dataset=dataset, dataset_options=dataset_options(dataset, seed),
        partition=PartitionSpec(parties=PARTIES, seed=seed), alignment="plaintext", device="cpu",
        train=TrainConfig(epochs=epochs, batch_size=BATCH, seed=seed, options=options, **overrides))
    started = time.perf_counter()
    report = run(config)
    return {
        "accuracy": report.metrics["accuracy"],
        "per_party": {p: m["accuracy"] for p, m in report.metrics.get("per_party", {}).items()},
        "wall_s": time.perf_counter() - started,
        "comm_mb": report.cost["total_bytes"] / 1e6,
        "extra": {k: v for k, v in report.extra.items()
                  if k in ("compression_ratio", "architectures", "secagg_stats")},
    }


def accuracy_table(datasets: list[str], epochs: dict[str, int], seeds: list[int], models: str = "hetero") -> dict:
    """Part 1: every method on every dataset, mean ± std over ``seeds``.

    ``models=homo`` gives every party the same architecture (the paper's Table IV); the lead's
    ``pyvertical`` and ``local`` are homogeneous either way.
    """
    out: dict[str, dict] = {}
    for dataset in datasets:
        out[dataset] = {}
        for label, method, options, overrides in METHODS:
            opts = {**options, "models": models} if method in ("cvfl", "aggvfl", "easter") else options
            runs = [run_cell(dataset, method, opts, overrides, epochs[dataset], s) for s in seeds]
            accs = [r["accuracy"] for r in runs]
            parties = sorted(runs[0]["per_party"])
            out[dataset][label] = {
                "avg": float(np.mean(accs)), "std": float(np.std(accs)),
                "per_party": {p: float(np.mean([r["per_party"][p] for r in runs])) for p in parties},
                "per_party_std": {p: float(np.std([r["per_party"][p] for r in runs])) for p in parties},
                "comm_mb": float(np.mean([r["comm_mb"] for r in runs])),
                "wall_s": float(np.mean([r["wall_s"] for r in runs])),
                "extra": runs[0]["extra"],
            }
            console.log(f"{dataset:14s} {label:18s} acc {np.mean(accs):.4f} ± {np.std(accs):.4f}")
    return out


def print_accuracy_table(table: dict, epochs: dict[str, int], seeds: list[int], models: str = "hetero") -> None:
    for dataset, rows in table.items():
        easter_parties = list(rows["EASTER"]["per_party"])
        t = Table(title=f"{dataset}: test accuracy (%), 4 parties, {models} models, "
                        f"{epochs[dataset]} epochs, {len(seeds)} seed(s)")
        t.add_column("Method")
        for p in easter_parties:
            t.add_column(p, justify="right")
        t.add_column("Avg", justify="right")
        t.add_column("comm MB", justify="right")
        for label, row in rows.items():
            def cell(mean: float, std: float) -> str:
                return f"{100 * mean:.2f}" + (f" ± {100 * std:.2f}" if len(seeds) > 1 else "")

            cells = [cell(row["per_party"][p], row["per_party_std"][p]) if p in row["per_party"] else "—"
                     for p in easter_parties]
            t.add_row(label, *cells, cell(row["avg"], row["std"]), f"{row['comm_mb']:.1f}")
        console.print(t)
        best = max((r["avg"], k) for k, r in rows.items() if k != "EASTER")
        console.print(f"  EASTER Avg / best baseline ({best[1]}): "
                      f"{rows['EASTER']['avg'] / best[0]:.3f}x")


def markdown_tables(table: dict, epochs: dict[str, int], seeds: list[int]) -> str:
    """The accuracy table in the paper's layout as Markdown (for docs/easter.md)."""
    lines = []
    for dataset, rows in table.items():
        parties = list(rows["EASTER"]["per_party"])
        lines += [f"**{dataset}** ({epochs[dataset]} epochs, seeds {seeds}; accuracy %, mean ± std)", "",
                  "| Method | " + " | ".join(parties) + " | Avg | comm MB |",
                  "|---|" + "---:|" * (len(parties) + 2)]
        for label, row in rows.items():
            cells = [f"{100 * row['per_party'][p]:.2f} ± {100 * row['per_party_std'][p]:.2f}"
                     if p in row["per_party"] else "—" for p in parties]
            lines.append(f"| {label} | " + " | ".join(cells)
                         + f" | {100 * row['avg']:.2f} ± {100 * row['std']:.2f} | {row['comm_mb']:.1f} |")
        lines.append("")
    return "\n".join(lines)


# -- part 2: overhead of secure aggregation ------------------------------------------------------


def _timed_run(scenario, secagg: str, epochs: int, seed: int, drop_prob: float = 0.0):
    config = TrainConfig(epochs=epochs, batch_size=BATCH, seed=seed,
                         options={"secagg": secagg, "embedding_size": EMBEDDING, "drop_prob": drop_prob})
    method = create_method("easter", config)
    ends: list[tuple[float, float]] = []
    started = (time.perf_counter(), time.process_time())
    result = run_parties(method.roles(scenario), active=scenario.active, seed=seed,
                         progress=lambda **_: ends.append((time.perf_counter(), time.process_time())))
    marks = np.array([started, *ends])
    gaps = np.diff(marks, axis=0)[1:] if len(ends) > 1 else np.diff(marks, axis=0)  # skip epoch 1
    snapshots = {n: m.snapshot() for n, m in result.meters.items()}
    return gaps[:, 0].tolist(), gaps[:, 1].tolist(), snapshots, result.results[scenario.active]


SCHEMES = ("none", "dh", "pairwise")
OVERHEAD_DATASETS = ("mnist-5k", "digits")  # headline first: 28x28 strips, the paper's MNIST setting
#: Issue 32's goals for dh per dataset (issue 17's were 5 % and 10 %), and pairwise on every dataset.
DH_GOALS = {"mnist-5k": 0.06, "digits": 0.15}
#: AES-CTR streams of one dh round, all parties: 3 per passive party (self mask + 2 pairwise) for 3
#: passive parties, and the active party's 3 self-mask removals.
DH_STREAMS_PER_ROUND = 12
PAIRWISE_GOAL = 0.03


def secagg_overhead(dataset: str = "mnist-5k", epochs: int = 4, repeats: int = 3, seed: int = 0) -> dict:
    """Part 2: EASTER epoch time with ``dh`` and ``pairwise`` secure aggregation vs ``none``."""
    scenario = build_scenario(RunConfig(dataset=dataset, dataset_options=dataset_options(dataset, seed),
                                        partition=PartitionSpec(parties=PARTIES, seed=seed),
                                        alignment="plaintext"))
    epoch_s: dict[str, list[float]] = {s: [] for s in SCHEMES}
    epoch_cpu: dict[str, list[float]] = {s: [] for s in SCHEMES}
    snaps: dict[str, Any] = {}
    outcomes: dict[str, Any] = {}
    _timed_run(scenario, "none", 1, seed)  # warm-up (imports, allocator, OpenSSL)
    for _ in range(repeats):
        for secagg in SCHEMES:
            wall, cpu, snapshots, outcome = _timed_run(scenario, secagg, epochs, seed)
            epoch_s[secagg] += wall
            epoch_cpu[secagg] += cpu
            snaps[secagg], outcomes[secagg] = snapshots, outcome
    # Interference from other processes only ever adds time, so the minimum over all measured
    # epochs is the robust estimate; medians are reported next to it.
    wall = {s: min(v) for s, v in epoch_s.items()}
    cpu = {s: min(v) for s, v in epoch_cpu.items()}
    wall_med = {s: statistics.median(v) for s, v in epoch_s.items()}
    cpu_med = {s: statistics.median(v) for s, v in epoch_cpu.items()}
    frac = {s: {"wall": wall[s] / wall["none"] - 1.0, "cpu": cpu[s] / cpu["none"] - 1.0,
                "wall_median": wall_med[s] / wall_med["none"] - 1.0,
                "cpu_median": cpu_med[s] / cpu_med["none"] - 1.0} for s in ("dh", "pairwise")}
    rounds = outcomes["dh"].extra["secagg_stats"]["rounds"]
    crypto: dict[str, float] = {}
    compute = 0.0
    for snap in snaps["dh"].values():
        compute += snap.compute_s
        for k, v in snap.crypto_s.items():
            crypto[k] = crypto.get(k, 0.0) + v
    setup_keys = ("secagg.keygen", "secagg.key_agreement")
    per_round = {k: v / rounds * 1e3 for k, v in crypto.items() if k not in setup_keys}
    # recovery: one run with drops
    _, _, drop_snaps, drop_outcome = _timed_run(scenario, "dh", 2, seed, drop_prob=0.2)
    stats = drop_outcome.extra["secagg_stats"]
    recover_s = sum(s.crypto_s.get("secagg.recover", 0.0) for s in drop_snaps.values())
    return {
        "dataset": dataset, "parties": PARTIES, "batch": BATCH, "embedding": EMBEDDING,
        "steps_per_epoch": -(-len(scenario.party_data(scenario.active).X_train) // BATCH),
        "cpu_threads": torch.get_num_threads(), "cpus": os.cpu_count(),
        "load_average_1m": os.getloadavg()[0],
        "epoch_wall_s_min": wall, "epoch_cpu_s_min": cpu,
        "epoch_wall_s_median": wall_med, "epoch_cpu_s_median": cpu_med,
        "epoch_wall_s_all": epoch_s, "epoch_cpu_s_all": epoch_cpu,
        "fractions": frac,
        # Conservative headline: the larger of the wall-clock and CPU-time fractions (minimum
        # epoch times over all repeats).
        "secagg_overhead_fraction": max(frac["dh"]["wall"], frac["dh"]["cpu"]),
        "pairwise_overhead_fraction": max(frac["pairwise"]["wall"], frac["pairwise"]["cpu"]),
        "setup_ms_all_parties": {k: crypto.get(k, 0.0) * 1e3 for k in setup_keys},
        "per_step_crypto_ms_all_parties": per_round,
        "per_step_crypto_ms_total": sum(per_round.values()),
        "per_step_compute_ms_all_parties": compute / rounds * 1e3,
        "crypto_over_compute": sum(per_round.values()) / (compute / rounds * 1e3),
        "recovery": {"recovered_rounds": stats["recovered_rounds"], "dropouts": stats["dropouts"],
                     "recovery_bytes": stats["recovery_bytes"],
                     "recover_ms_per_recovered_round": recover_s / max(stats["recovered_rounds"], 1) * 1e3},
    }


def overhead_figures(quick: bool) -> dict:
    """Part 2 on every overhead dataset; the headline ``secagg_overhead_fraction`` is mnist-5k's."""
    by_dataset = {}
    threads = torch.get_num_threads()
    # One intra-op thread: the parties compute one at a time, and OpenMP workers spin-waiting
    # between kernels would add CPU time that grows with wall time (noise).
    torch.set_num_threads(1)
    try:
        for dataset in OVERHEAD_DATASETS:
            by_dataset[dataset] = secagg_overhead(dataset, epochs=2 if quick else 5, repeats=2 if quick else 5)
            print_overhead(by_dataset[dataset])
    finally:
        torch.set_num_threads(threads)
    head = by_dataset[OVERHEAD_DATASETS[0]]
    # This machine's AES-CTR rate, measured in the same run: the ceiling of mask expansion.
    aes = statistics.median(1.0 / s for s in aes_ctr_samples(repeats=5))
    aes_floor_ms = DH_STREAMS_PER_ROUND * 8 * BATCH * EMBEDDING / (aes * 1e9) * 1e3
    console.print(f"AES-256-CTR on this machine: {aes:.2f} GB/s (one core); a dh round's {DH_STREAMS_PER_ROUND} "
                  f"mask streams of {BATCH}x{EMBEDDING} ring elements take {aes_floor_ms:.2f} ms at that rate")
    return {
        "aes_ctr_gb_per_s": aes,
        "dh_aes_floor_ms_per_round": aes_floor_ms,
        "dh_crypto_ms_per_round_by_dataset": {d: f["per_step_crypto_ms_total"] for d, f in by_dataset.items()},
        "by_dataset": by_dataset,
        "headline_dataset": OVERHEAD_DATASETS[0],
        "secagg_overhead_fraction": head["secagg_overhead_fraction"],
        "secagg_overhead_fraction_by_dataset": {d: f["secagg_overhead_fraction"] for d, f in by_dataset.items()},
        "pairwise_overhead_fraction_by_dataset": {d: f["pairwise_overhead_fraction"]
                                                  for d, f in by_dataset.items()},
        "dh_goal_by_dataset": dict(DH_GOALS),
        "pairwise_goal": PAIRWISE_GOAL,
    }


def print_overhead(figures: dict) -> None:
    t = Table(title=f"Secure aggregation cost in EASTER ({figures['dataset']}, {figures['parties']} parties, "
                    f"batch {figures['batch']}, embedding {figures['embedding']}, "
                    f"{figures['steps_per_epoch']} steps/epoch, CPU)")
    t.add_column("item")
    t.add_column("value", justify="right")
    for s in SCHEMES:
        t.add_row(f"epoch wall / CPU time, secagg={s} (s, min | median)",
                  f"{figures['epoch_wall_s_min'][s]:.3f} / {figures['epoch_cpu_s_min'][s]:.3f} | "
                  f"{figures['epoch_wall_s_median'][s]:.3f} / {figures['epoch_cpu_s_median'][s]:.3f}")
    for s in ("dh", "pairwise"):
        f = figures["fractions"][s]
        t.add_row(f"{s} overhead: wall, CPU (min | median)",
                  f"{f['wall']:+.3f}, {f['cpu']:+.3f} | {f['wall_median']:+.3f}, {f['cpu_median']:+.3f}")
    t.add_row("1-minute load average after the runs", f"{figures['load_average_1m']:.1f}")
    for k, v in figures["setup_ms_all_parties"].items():
        t.add_row(f"dh once: {k} (ms, all parties)", f"{v:.2f}")
    for k, v in sorted(figures["per_step_crypto_ms_all_parties"].items()):
        t.add_row(f"dh per step: {k} (ms, all parties)", f"{v:.3f}")
    t.add_row("dh per step: crypto total (ms, all parties)", f"{figures['per_step_crypto_ms_total']:.2f}")
    t.add_row("per step: model compute (ms, all parties)", f"{figures['per_step_compute_ms_all_parties']:.2f}")
    rec = figures["recovery"]
    t.add_row("dh recovery (drop_prob=0.2): ms per recovered round",
              f"{rec['recover_ms_per_recovered_round']:.2f}")
    t.add_row("dh recovery traffic (bytes, 2 epochs)", f"{rec['recovery_bytes']}")
    console.print(t)
    frac, pair = figures["secagg_overhead_fraction"], figures["pairwise_overhead_fraction"]
    goal = DH_GOALS.get(figures["dataset"], 0.10)
    console.print(f"{figures['dataset']}: secagg_overhead_fraction (dh) = {frac:+.3f} (max of wall and CPU, "
                  f"min epoch times; {'meets' if frac <= goal else 'misses'} the <= {goal:.2f} goal); pairwise "
                  f"{pair:+.3f} ({'meets' if pair <= PAIRWISE_GOAL else 'misses'} the <= {PAIRWISE_GOAL:.2f} goal)")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed, few epochs (about a minute)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON to this file")
    parser.add_argument("--datasets", default="digits,breast-cancer,synthetic")
    parser.add_argument("--skip-accuracy", action="store_true")
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--models", choices=("hetero", "homo"), default="hetero",
                        help="local architectures for cvfl / aggvfl / easter")
    args = parser.parse_args(argv)
    datasets = args.datasets.split(",")
    if args.quick:
        epochs = {"digits": 8, "breast-cancer": 8, "synthetic": 5, "mnist-5k": 3}
        seeds = [0]
    else:
        epochs = {"digits": 30, "breast-cancer": 30, "synthetic": 20, "mnist-5k": 15}
        seeds = [0, 1, 2]
    figures: dict[str, Any] = {"quick": args.quick, "epochs": epochs, "seeds": seeds, "models": args.models}
    if not args.skip_accuracy:
        table = accuracy_table(datasets, epochs, seeds, args.models)
        print_accuracy_table(table, epochs, seeds, args.models)
        figures["accuracy"] = table
    if not args.skip_overhead:
        overhead = overhead_figures(args.quick)
        figures["overhead"] = overhead
        figures["secagg_overhead_fraction"] = overhead["secagg_overhead_fraction"]
    if args.out:
        write_json(args.out, figures, default=str)
        if "accuracy" in figures:
            write_text(args.out.with_suffix(".md"), markdown_tables(figures["accuracy"], epochs, seeds))
        console.print(f"wrote {args.out}")
    return figures


if __name__ == "__main__":
    main()

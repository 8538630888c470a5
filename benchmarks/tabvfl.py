"""TabVFL benchmark: latent quality of CT / LT / TabVFL-LE / TabVFL, client failures, efficiency.

Reproduces the shape of the paper's Sec. V on the datasets available offline (the paper's five
are not): Fig. 5 (latent quality: mean accuracy / F1 / ROC-AUC of six classifiers on a 70/30
split of the finetuned latents, 5 guests, latent dimension 5), Fig. 6 / Tab. IV (test F1 of the
finetuned TabVFL with guests offline per epoch with p = 0.2 / 0.35 / 0.5, cache vs zeros vs no
failure, 2 guests) and Tab. V (runtime and traffic per phase, peak memory per design).

    .venv/bin/python benchmarks/tabvfl.py --quick --out out/tabvfl.json

CT is a centralised reference (raw features go to the host), not a private design. Timings are
wall-clock on whatever machine runs this; every party is a thread of one process, so torch is
limited to one intra-op thread (several parties' thread pools otherwise fight over the cores).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

DESIGNS = ("tabnet-ct", "tabnet-lt", "tabvfl-le", "tabvfl")
LABELS = {"tabnet-ct": "CT (central)", "tabnet-lt": "LT", "tabnet-lt-eq": "LT (same total dim)",
          "tabvfl-le": "TabVFL-LE", "tabvfl": "TabVFL"}
FAIL_PROBS = (0.2, 0.35, 0.5)
console = Console(width=150)


@dataclass(frozen=True)
class Setup:
    """One benchmark configuration (quick or full)."""

    datasets: tuple[str, ...]
    epochs: int                     # pretraining epochs = finetuning epochs
    batch_size: int = 64
    latent_dim: int = 5
    guests: int = 5
    n_samples: int = 2000           # rows of the synthetic dataset
    lr: float = 2e-2
    quality_seeds: tuple[int, ...] = (0,)
    fail_datasets: tuple[str, ...] = ("breast-cancer",)
    fail_guests: int = 2
    fail_epochs: int = 8
    fail_batch_size: int = 128
    fail_seeds: tuple[int, ...] = (0,)
    eff_dataset: str = "breast-cancer"
    eff_epochs: int = 5
    eff_batch_size: int = 512
    eff_isolated: bool = False      # one process per design, for a per-design peak memory
    lt_equal_total: bool = False    # also LT with each guest's latent = latent_dim / guests


QUICK = Setup(datasets=("breast-cancer",), epochs=5)
FULL = Setup(datasets=("breast-cancer", "digits", "synthetic"), epochs=15, quality_seeds=(0,),
             fail_datasets=("breast-cancer", "synthetic"), fail_epochs=15, fail_seeds=(0, 1, 2),
             eff_dataset="synthetic", eff_epochs=10, eff_isolated=True, lt_equal_total=True)


def train(method: str, dataset: str, *, guests: int, epochs: int, batch_size: int, setup: Setup, seed: int,
          **options: Any):
    import securevfl

    torch.set_num_threads(1)
    return securevfl.train(method, dataset, parties=guests + 1, active_features=0, epochs=epochs,
                           batch_size=batch_size, lr=setup.lr, seed=seed, device="cpu", alignment="plaintext",
                           embedding_dim=setup.latent_dim, n_samples=setup.n_samples, options=options)


def _efficiency_row(report) -> dict[str, Any]:
    e = report.extra["efficiency"]
    return {"pretrain_s": e["pretrain_s"], "finetune_s": e["finetune_s"], "train_s": e["train_s"],
            "pretrain_mb": e["pretrain_bytes"] / 1e6, "finetune_mb": e["finetune_bytes"] / 1e6,
            "setup_mb": e["setup_bytes"] / 1e6, "params": sum(e["params"].values()),
            "peak_rss_mb": e["peak_rss_mb"]}


# -- experiment 1: latent quality -----------------------------------------------------------

def latent_quality_experiment(setup: Setup) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dataset in setup.datasets:
        out[dataset] = {}
        designs = DESIGNS + (("tabnet-lt-eq",) if setup.lt_equal_total else ())
        for method in designs:
            runs = []
            options = {}
            if method == "tabnet-lt-eq":  # the paper's reading is ambiguous: show both LT latent sizes
                options = {"part_latent_dim": max(1, setup.latent_dim // setup.guests)}
            for seed in setup.quality_seeds:
                started = time.perf_counter()
                report = train(method.removesuffix("-eq"), dataset, guests=setup.guests, epochs=setup.epochs,
                               batch_size=setup.batch_size, setup=setup, seed=seed, **options)
                q = report.extra["latent_quality"]
                runs.append({"accuracy": q["accuracy"], "f1": q["f1"], "auc": q["auc"],
                             "model_accuracy": report.metrics["accuracy"], "model_f1": report.metrics["f1"],
                             "latent_dim": q["latent_dim"], "wall_s": time.perf_counter() - started,
                             "per_classifier": q["per_classifier"], "efficiency": _efficiency_row(report)})
                console.print(f"  latent quality {dataset:14s} {LABELS[method]:13s} seed {seed}: "
                              f"acc {q['accuracy']:.3f} f1 {q['f1']:.3f} auc {q['auc']:.3f} "
                              f"({runs[-1]['wall_s']:.0f} s)")
            out[dataset][method] = {
                **{k: float(np.mean([r[k] for r in runs])) for k in ("accuracy", "f1", "auc", "model_accuracy",
                                                                      "model_f1", "wall_s")},
                "latent_dim": runs[0]["latent_dim"], "seeds": list(setup.quality_seeds), "runs": runs}
    return out


# -- experiment 2: client failures ----------------------------------------------------------

def failure_experiment(setup: Setup) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dataset in setup.fail_datasets:
        def f1(dataset: str = dataset, **options: Any) -> float:
            scores = []
            for seed in setup.fail_seeds:
                report = train("tabvfl", dataset, guests=setup.fail_guests, epochs=setup.fail_epochs,
                               batch_size=setup.fail_batch_size, setup=setup, seed=seed, latent_quality=False,
                               **options)
                scores.append(report.metrics["f1"])
            return float(np.mean(scores))

        row: dict[str, Any] = {"baseline": f1(), "cache": {}, "zeros": {}}
        for p in FAIL_PROBS:
            for mode in ("cache", "zeros"):
                row[mode][str(p)] = f1(fail_prob=p, on_fail=mode)
            console.print(f"  failures {dataset:14s} p={p:<4}: cache {row['cache'][str(p)]:.3f} "
                          f"zeros {row['zeros'][str(p)]:.3f} (no failure {row['baseline']:.3f})")
        row["mean_cache"] = float(np.mean(list(row["cache"].values())))
        row["mean_zeros"] = float(np.mean(list(row["zeros"].values())))
        row["max_drop_cache"] = float(row["baseline"] - min(row["cache"].values()))
        row["max_drop_zeros"] = float(row["baseline"] - min(row["zeros"].values()))
        out[dataset] = row
    return out


def plot_failures(failures: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(failures), figsize=(4.5 * len(failures), 3.6), squeeze=False)
    for ax, (dataset, row) in zip(axes[0], failures.items()):
        ax.plot(FAIL_PROBS, [row["cache"][str(p)] for p in FAIL_PROBS], "o-", label="cache")
        ax.plot(FAIL_PROBS, [row["zeros"][str(p)] for p in FAIL_PROBS], "s-", label="zeros")
        ax.axhline(row["baseline"], color="tab:blue", linestyle="--", linewidth=1, label="no failure")
        ax.set_title(f"TabVFL, {dataset}")
        ax.set_xlabel("guest failure probability p (per epoch)")
        ax.set_ylabel("test F1")
        ax.set_xticks(FAIL_PROBS)
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- experiment 3: efficiency ---------------------------------------------------------------

def _isolated_run(method: str, setup: Setup) -> dict[str, Any]:
    """One design in a fresh process: its figures, and the memory its run adds to the process.

    The process high-water mark (``ru_maxrss``) is dominated by the libraries (~500 MB, about the
    same for every design), so the run's own footprint is sampled too: resident memory every 5 ms
    during the run, minus the resident memory just before it (after a one-epoch warm-up run).
    """
    import threading

    import psutil

    # warm up with one short run of the same design, so lazy imports and allocator pools are
    # part of the baseline rather than of the measured run
    train(method, setup.eff_dataset, guests=setup.guests, epochs=1, batch_size=setup.eff_batch_size,
          setup=setup, seed=1, latent_quality=False, pretrain_epochs=1)
    proc = psutil.Process()
    baseline = proc.memory_info().rss
    peak = [baseline]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.005):
            peak[0] = max(peak[0], proc.memory_info().rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        report = train(method, setup.eff_dataset, guests=setup.guests, epochs=setup.eff_epochs,
                       batch_size=setup.eff_batch_size, setup=setup, seed=0, latent_quality=False)
    finally:
        done.set()
        sampler.join()
    row = _efficiency_row(report)
    row["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    row["run_rss_mb"] = (peak[0] - baseline) / 2**20
    return row


def efficiency_experiment(setup: Setup, quality: dict[str, Any]) -> dict[str, Any]:
    if not setup.eff_isolated:  # quick: reuse the latent-quality runs (peak memory is process-wide)
        dataset = setup.datasets[0]
        rows = {m: quality[dataset][m]["runs"][0]["efficiency"] for m in DESIGNS}
        return {"dataset": dataset, "epochs": setup.epochs, "batch_size": setup.batch_size,
                "isolated": False, "designs": rows}
    rows = {}
    for method in DESIGNS:
        with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
            rows[method] = pool.submit(_isolated_run, method, setup).result()
        console.print(f"  efficiency {LABELS[method]:13s}: train {rows[method]['train_s']:.1f} s, "
                      f"memory added by the run {rows[method]['run_rss_mb']:.1f} MB")
    return {"dataset": setup.eff_dataset, "epochs": setup.eff_epochs, "batch_size": setup.eff_batch_size,
            "isolated": True, "designs": rows}


# -- report ----------------------------------------------------------------------------------

def ratios(results: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"latent_f1_tabvfl_over_lt": {}, "latent_f1_tabvfl_over_ct": {}}
    for dataset, rows in results["latent_quality"].items():
        out["latent_f1_tabvfl_over_lt"][dataset] = rows["tabvfl"]["f1"] / rows["tabnet-lt"]["f1"]
        out["latent_f1_tabvfl_over_ct"][dataset] = rows["tabvfl"]["f1"] / rows["tabnet-ct"]["f1"]
        if "tabnet-lt-eq" in rows:
            out.setdefault("latent_f1_tabvfl_over_lt_same_width", {})[dataset] = (
                rows["tabvfl"]["f1"] / rows["tabnet-lt-eq"]["f1"])
    out["failure_f1_cache_over_zeros"] = {d: r["mean_cache"] / r["mean_zeros"]
                                          for d, r in results["client_failures"].items()}
    eff = results["efficiency"]["designs"]
    out["train_time_tabvfl_over_lt"] = eff["tabvfl"]["train_s"] / eff["tabnet-lt"]["train_s"]
    out["train_time_tabvfl_over_le"] = eff["tabvfl"]["train_s"] / eff["tabvfl-le"]["train_s"]
    return out


def print_tables(results: dict[str, Any]) -> None:
    t = Table(title="Latent quality (mean of 6 classifiers on a 70/30 split of the latents)")
    for col in ("dataset", "design", "latent dim", "accuracy", "F1", "ROC-AUC", "model test F1", "wall s"):
        t.add_column(col)
    for dataset, rows in results["latent_quality"].items():
        for method, r in rows.items():
            t.add_row(dataset, LABELS[method], str(r["latent_dim"]), f"{r['accuracy']:.3f}", f"{r['f1']:.3f}",
                      f"{r['auc']:.3f}", f"{r['model_f1']:.3f}", f"{r['wall_s']:.0f}")
    console.print(t)
    t = Table(title="Client failures: TabVFL test F1 (guests offline per epoch with probability p)")
    for col in ("dataset", "no failure", *(f"cache p={p}" for p in FAIL_PROBS), *(f"zeros p={p}" for p in FAIL_PROBS),
                "max drop cache", "max drop zeros"):
        t.add_column(col)
    for dataset, r in results["client_failures"].items():
        t.add_row(dataset, f"{r['baseline']:.3f}", *(f"{r['cache'][str(p)]:.3f}" for p in FAIL_PROBS),
                  *(f"{r['zeros'][str(p)]:.3f}" for p in FAIL_PROBS), f"{r['max_drop_cache']:.3f}",
                  f"{r['max_drop_zeros']:.3f}")
    console.print(t)
    print_efficiency(results["efficiency"])
    for name, value in results["ratios"].items():
        if isinstance(value, dict):
            console.print(f"{name}: " + ", ".join(f"{d} {v:.3f}" for d, v in value.items()))
        else:
            console.print(f"{name}: {value:.3f}")


def print_efficiency(eff: dict[str, Any]) -> None:
    t = Table(title=f"Efficiency ({eff['dataset']}, {eff['epochs']}+{eff['epochs']} epochs, batch "
                    f"{eff['batch_size']}; peak memory {'per design process' if eff['isolated'] else 'process-wide'})")
    for col in ("design", "pretrain s", "finetune s", "total s", "pretrain MB", "finetune MB", "raw-feature MB",
                "parameters", "peak RSS MB", "run adds MB"):
        t.add_column(col)
    for method, r in eff["designs"].items():
        t.add_row(LABELS[method], f"{r['pretrain_s']:.1f}", f"{r['finetune_s']:.1f}", f"{r['train_s']:.1f}",
                  f"{r['pretrain_mb']:.2f}", f"{r['finetune_mb']:.2f}", f"{r['setup_mb']:.2f}", str(r["params"]),
                  f"{r['peak_rss_mb']:.0f}", f"{r['run_rss_mb']:.1f}" if "run_rss_mb" in r else "-")
    console.print(t)


def latent_sweep(setup: Setup, dims: list[int], out: Path | None) -> int:
    """Latent quality of the four designs at several latent dimensions (Table III's experiment)."""
    sweep = {str(d): latent_quality_experiment(replace(setup, latent_dim=d, lt_equal_total=False)) for d in dims}
    t = Table(title="Latent quality F1 by latent dimension (Table III's experiment)")
    for col in ("dataset", "design", *(f"dim {d}" for d in dims)):
        t.add_column(col)
    for dataset in setup.datasets:
        for method in DESIGNS:
            t.add_row(dataset, LABELS[method], *(f"{sweep[str(d)][dataset][method]['f1']:.3f}" for d in dims))
    console.print(t)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"setup": setup.__dict__, "latent_dims": sweep}, indent=2, default=float))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one dataset, few epochs (about 1-2 minutes)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--plot", type=Path, default=Path("out/tabvfl_failures.png"), help="failure plot (PNG)")
    parser.add_argument("--epochs", type=int, help="pretraining = finetuning epochs of the latent-quality runs")
    parser.add_argument("--latent-dim", type=int, help="latent dimension (paper: 5; Table III: 16/32/64)")
    parser.add_argument("--datasets", help="comma-separated datasets for the latent-quality runs (csv:PATH ok)")
    parser.add_argument("--efficiency-only", action="store_true",
                        help="only the efficiency table (one process per design); with --quick too")
    parser.add_argument("--latent-sweep", help="only run latent quality at these dimensions, e.g. 16,32,64 "
                                               "(the paper's Table III)")
    args = parser.parse_args(argv)
    setup = QUICK if args.quick else FULL
    if args.epochs:
        setup = replace(setup, epochs=args.epochs)
    if args.latent_dim:
        setup = replace(setup, latent_dim=args.latent_dim)
    if args.datasets:
        setup = replace(setup, datasets=tuple(d for d in args.datasets.split(",") if d))
    torch.set_num_threads(1)
    if args.latent_sweep:
        return latent_sweep(setup, [int(d) for d in args.latent_sweep.split(",") if d], args.out)
    if args.efficiency_only:
        efficiency = efficiency_experiment(replace(setup, eff_isolated=True), {})
        print_efficiency(efficiency)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            figures = {"setup": setup.__dict__, "efficiency": efficiency}
            args.out.write_text(json.dumps(figures, indent=2, default=float))
        return 0
    started = time.perf_counter()
    results: dict[str, Any] = {"setup": setup.__dict__ | {"mode": "quick" if args.quick else "full"}}
    console.print("[bold]latent quality[/]")
    results["latent_quality"] = latent_quality_experiment(setup)
    console.print("[bold]client failures[/]")
    results["client_failures"] = failure_experiment(setup)
    console.print("[bold]efficiency[/]")
    results["efficiency"] = efficiency_experiment(setup, results["latent_quality"])
    results["ratios"] = ratios(results)
    plot_failures(results["client_failures"], args.plot)
    results["plot"] = str(args.plot)
    results["wall_s"] = time.perf_counter() - started
    results["note"] = ("timings on a shared machine; CT is a centralised reference (raw features sent to the "
                       "host); F1 is binary for 2 classes, macro otherwise")
    print_tables(results)
    console.print(f"plot: {args.plot}; total {results['wall_s']:.0f} s")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2, default=float))
        console.print(f"figures: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

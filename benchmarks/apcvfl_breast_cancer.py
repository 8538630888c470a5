"""APC-VFL on Breast Cancer Wisconsin: the paper's Table 2 block and its limited-alignment study.

Reproduces Irureta et al. (APC-VFL), Appendix A partitions and Sec. 6 protocols:

1. SplitNN vs the adjusted APC-VFL (``apcvfl-splitnn``: probe on g2's joint latents) on the
   aligned rows only, 50 of them held out for testing, repeated over seeds; accuracy, comm rounds
   and cost (Meter bytes, and Appendix E's formulas) next to the paper's Table 2 numbers.
2. Limited alignment: Local (``local-logreg``), Ablation, APC-VFL (MSE), APC-VFL (MAE) and
   VFedTrans (FedSVD), each with the probe cross-validated (10 folds) on the active party's 500
   rows, averaged over a in {2,3,4,5} and over seeds (the paper's mean of means; the std is
   across the a-partitions, as in the paper's Fig. 5).

Run: ``.venv/bin/python benchmarks/apcvfl_breast_cancer.py [--quick] [--out FILE.json]``.
Rows are aligned with a plaintext intersection (PSI is not part of these methods' cost).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

import securevfl
from securevfl.methods.apcvfl import apc_footprint_bytes

PAPER_TABLE2 = {  # Table 2, Breast Cancer Wisconsin (accuracy, #comm, cost MB), mean / std
    250: {"splitnn": (1.000, 0.000, 380, 60, 27.04, 4.27), "apcvfl": (1.000, 0.000, 1, 0, 0.26, 0.0)},
    200: {"splitnn": (0.980, 0.000, 312, 61, 22.26, 4.34), "apcvfl": (0.976, 0.008, 1, 0, 0.20, 0.0)},
    150: {"splitnn": (0.952, 0.010, 156, 0, 11.22, 0.00), "apcvfl": (0.964, 0.015, 1, 0, 0.15, 0.0)},
    100: {"splitnn": (0.912, 0.010, 84, 0, 6.16, 0.00), "apcvfl": (0.956, 0.015, 1, 0, 0.10, 0.0)},
}
LIMITED_METHODS = ("local-logreg", "apcvfl-ablation", "apcvfl-mse", "apcvfl-mae", "vfedtrans")
MB = 1e6


def mean_std(values: list[float]) -> tuple[float, float]:
    return (statistics.fmean(values), statistics.pstdev(values) if len(values) > 1 else 0.0)


def splitnn_formula_bytes(epochs: int, n_train: int, batch_size: int, z_p: int = 256) -> int:
    """Appendix E.2, Eq. 7-9: forward ``epochs |D_A| z_p 4`` + backprop ``epochs ceil(|D_A|/B) p 4``."""
    p = 128 * 256 + 256
    return epochs * n_train * z_p * 4 + epochs * math.ceil(n_train / batch_size) * p * 4


def splitnn_comparison(args: argparse.Namespace, console: Console) -> list[dict[str, Any]]:
    rows = []
    common = dict(dataset="breast-cancer", preset="apcvfl-paper", device="cpu", alignment="plaintext")
    for n in args.aligned:
        for method in ("splitnn", "apcvfl-splitnn"):
            accs, rounds, msgs, mbytes, formula = [], [], [], [], []
            for seed in range(args.split_reps):
                if method == "splitnn":
                    r = securevfl.train("splitnn", aligned=n, seed=seed, epochs=args.splitnn_epochs, batch_size=8,
                                        hidden=(128,), embedding_dim=256, **common)
                    formula.append(splitnn_formula_bytes(args.splitnn_epochs, n - 50, 8))
                else:
                    r = securevfl.train("apcvfl-splitnn", aligned=n, seed=seed, epochs=args.max_epochs,
                                        batch_size=args.batch_size, **common)
                    formula.append(apc_footprint_bytes(n, [256]))
                accs.append(r.metrics["accuracy"])
                rounds.append(r.cost["rounds"])
                msgs.append(sum(r.cost["comm"]["messages"].values()))
                mbytes.append(r.cost["total_bytes"] / MB)
            paper = PAPER_TABLE2[n]["splitnn" if method == "splitnn" else "apcvfl"]
            row = {"aligned": n, "method": method, "reps": args.split_reps,
                   "accuracy": mean_std(accs), "rounds": mean_std(rounds), "messages": mean_std(msgs),
                   "cost_mb": mean_std(mbytes), "paper_formula_mb": statistics.fmean(formula) / MB,
                   "paper": {"accuracy": paper[:2], "comm": paper[2:4], "cost_mb": paper[4:]}}
            rows.append(row)
            console.log(f"table 2: {method} aligned={n}: acc {row['accuracy'][0]:.3f}")
    return rows


def limited_alignment(args: argparse.Namespace, console: Console) -> list[dict[str, Any]]:
    """Per (aligned, method): mean of the per-seed CV means, averaged over a; std across a."""
    common = dict(dataset="breast-cancer", device="cpu", alignment="plaintext", epochs=args.max_epochs,
                  batch_size=args.batch_size)
    results: dict[tuple[int, str, int], list[dict[str, float]]] = {}
    ablation_cache: dict[tuple[int, int], Any] = {}
    for n in args.aligned:
        for a in args.a:
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                for label in LIMITED_METHODS:
                    method, options = label, {"cv_folds": args.folds}
                    if label.startswith("apcvfl-m"):
                        method, options["distill_loss"] = "apcvfl", label.split("-")[1]
                    if label == "apcvfl-ablation" and (a, seed) in ablation_cache:
                        r = ablation_cache[(a, seed)]  # no passive data: identical for every aligned count
                    else:
                        r = securevfl.train(method, preset=f"apcvfl-paper-a{a}", aligned=n, seed=seed,
                                            options=options, **common)
                        if label == "apcvfl-ablation":
                            ablation_cache[(a, seed)] = r
                    results.setdefault((n, label, a), []).append({
                        "accuracy": r.extra["cv"]["accuracy"], "f1": r.extra["cv"]["f1"],
                        "bytes": r.cost["total_bytes"], "rounds": r.cost["rounds"],
                        "formula_bytes": r.extra["communication"].get("paper_footprint_bytes", 0)})
            console.log(f"limited alignment: aligned={n} a={a} done")
    rows = []
    for n in args.aligned:
        for label in LIMITED_METHODS:
            per_a = {a: statistics.fmean(x["accuracy"] for x in results[(n, label, a)]) for a in args.a}
            per_a_f1 = {a: statistics.fmean(x["f1"] for x in results[(n, label, a)]) for a in args.a}
            runs = [x for a in args.a for x in results[(n, label, a)]]
            acc_mean, acc_std = mean_std(list(per_a.values()))
            rows.append({"aligned": n, "method": label, "accuracy_mean": acc_mean, "accuracy_std_over_a": acc_std,
                         "f1_mean": statistics.fmean(per_a_f1.values()), "accuracy_per_a": per_a,
                         "cost_mb": statistics.fmean(x["bytes"] for x in runs) / MB,
                         "rounds": statistics.fmean(x["rounds"] for x in runs),
                         "paper_formula_mb": statistics.fmean(x["formula_bytes"] for x in runs) / MB})
    return rows


def fmt(ms: tuple[float, float], digits: int = 3) -> str:
    return f"{ms[0]:.{digits}f} ± {ms[1]:.{digits}f}"


def print_tables(table2: list[dict], limited: list[dict], console: Console, args: argparse.Namespace) -> dict:
    t = Table(title=f"Table 2, Breast Cancer (accuracy on 50 held-out aligned rows, {args.split_reps} reps)")
    for col in ("aligned", "method", "accuracy", "paper acc", "#comm (rounds)", "paper #comm", "cost MB (meter)",
                "cost MB (App. E)", "paper MB"):
        t.add_column(col, justify="right")
    for r in table2:
        p = r["paper"]
        t.add_row(str(r["aligned"]), r["method"], fmt(r["accuracy"]),
                  f"{p['accuracy'][0]:.3f} ± {p['accuracy'][1]:.3f}",
                  fmt(r["rounds"], 0), f"{p['comm'][0]} ± {p['comm'][1]}", fmt(r["cost_mb"], 2),
                  f"{r['paper_formula_mb']:.2f}", f"{p['cost_mb'][0]:.2f}")
    if table2:
        console.print(t)
    t = Table(title=f"Limited alignment, Breast Cancer: {args.folds}-fold CV on the active party's 500 rows, "
                    f"mean over a in {args.a} and {args.seeds} seed(s); ± = std across a")
    for col in ("aligned", "method", "accuracy", "F1", "rounds", "cost MB (meter)", "cost MB (App. E)",
                *[f"a={a}" for a in args.a]):
        t.add_column(col, justify="right")
    for r in limited:
        t.add_row(str(r["aligned"]), r["method"], f"{r['accuracy_mean']:.3f} ± {r['accuracy_std_over_a']:.3f}",
                  f"{r['f1_mean']:.3f}", f"{r['rounds']:.0f}", f"{r['cost_mb']:.3f}", f"{r['paper_formula_mb']:.3f}",
                  *[f"{r['accuracy_per_a'][a]:.3f}" for a in args.a])
    if limited:
        console.print(t)
    ratios: dict[str, Any] = {}
    if not (table2 and limited):
        return ratios
    by = {(r["aligned"], r["method"]): r for r in table2}
    lim = {(r["aligned"], r["method"]): r for r in limited}
    for n in args.aligned:
        s, a = by[(n, "splitnn")], by[(n, "apcvfl-splitnn")]
        ratios[str(n)] = {
            "splitnn_over_apcvfl_rounds": s["rounds"][0] / max(a["rounds"][0], 1),
            "splitnn_over_apcvfl_bytes": s["cost_mb"][0] / a["cost_mb"][0],
            "apcvfl_minus_splitnn_accuracy": a["accuracy"][0] - s["accuracy"][0],
            "apcvfl_mse_minus_local": lim[(n, "apcvfl-mse")]["accuracy_mean"]
            - lim[(n, "local-logreg")]["accuracy_mean"],
            "apcvfl_mse_minus_ablation": lim[(n, "apcvfl-mse")]["accuracy_mean"]
            - lim[(n, "apcvfl-ablation")]["accuracy_mean"],
            "apcvfl_mse_minus_vfedtrans": lim[(n, "apcvfl-mse")]["accuracy_mean"]
            - lim[(n, "vfedtrans")]["accuracy_mean"],
            "vfedtrans_over_apcvfl_bytes": lim[(n, "vfedtrans")]["cost_mb"] / lim[(n, "apcvfl-mse")]["cost_mb"],
        }
        r = ratios[str(n)]
        console.print(f"aligned {n}: SplitNN/APC-VFL rounds x{r['splitnn_over_apcvfl_rounds']:.0f}, bytes "
                      f"x{r['splitnn_over_apcvfl_bytes']:.1f}; "
                      f"VFedTrans/APC-VFL bytes x{r['vfedtrans_over_apcvfl_bytes']:.2f}; "
                      f"APC-VFL(MSE) - Local {r['apcvfl_mse_minus_local']:+.3f}, - Ablation "
                      f"{r['apcvfl_mse_minus_ablation']:+.3f}, - VFedTrans {r['apcvfl_mse_minus_vfedtrans']:+.3f}")
    return ratios


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="1 seed, 5 folds, 20 epochs, batch 32, aligned 250 and 100")
    parser.add_argument("--out", type=Path, help="write the figures as JSON")
    parser.add_argument("--seeds", type=int, default=5, help="training repetitions (paper: 5)")
    parser.add_argument("--first-seed", type=int, default=0, help="first seed of the limited-alignment runs")
    parser.add_argument("--parts", default="table2,limited", help="which parts to run: table2, limited")
    parser.add_argument("--folds", type=int, default=10, help="CV folds of the probe (paper: 10)")
    parser.add_argument("--split-reps", type=int, default=5, help="SplitNN-comparison repetitions (paper: 5)")
    parser.add_argument("--max-epochs", type=int, default=200, help="epoch cap with early stopping (paper: 200)")
    parser.add_argument("--batch-size", type=int, default=8, help="autoencoder batch size (paper: 8)")
    parser.add_argument("--splitnn-epochs", type=int, default=8,
                        help="SplitNN epochs (no early stopping; the paper's averages imply ~7.6 at 250 rows)")
    parser.add_argument("--aligned", default="250,200,150,100", help="aligned rows (test rows included)")
    parser.add_argument("--a", default="2,3,4,5", help="active-party feature counts")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.folds, args.split_reps, args.max_epochs, args.batch_size = 1, 5, 1, 20, 32
        args.aligned = "250,100"
    args.aligned = [int(x) for x in str(args.aligned).split(",")]
    args.a = [int(x) for x in str(args.a).split(",")]
    return args


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)  # tiny models: intra-op threads only contend on a shared machine
    console = Console(width=200)
    started = time.perf_counter()
    parts = set(args.parts.split(","))
    table2 = splitnn_comparison(args, console) if "table2" in parts else []
    limited = limited_alignment(args, console) if "limited" in parts else []
    ratios = print_tables(table2, limited, console, args)
    wall = time.perf_counter() - started
    console.print(f"wall clock {wall:.0f} s")
    if args.out:
        config = {k: v for k, v in vars(args).items() if k != "out"}
        payload = {"benchmark": "apcvfl_breast_cancer", "config": config, "table2": table2,
                   "limited_alignment": limited, "ratios": ratios, "wall_s": wall}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(payload, indent=2, default=str))
        console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

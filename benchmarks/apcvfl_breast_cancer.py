"""APC-VFL on Breast Cancer Wisconsin: the paper's Table 2, Fig. 5, a Fig. 8-shaped sweep and a λ sweep.

Reproduces Irureta et al. (APC-VFL), Appendix A partitions and Sec. 6 protocols:

1. ``table2``: SplitNN vs the adjusted APC-VFL (``apcvfl-splitnn``: probe on g2's joint latents)
   on the aligned rows only, 50 of them held out for testing, repeated over seeds; accuracy, comm
   rounds and cost (Meter bytes, and Appendix E's formulas) next to the paper's Table 2 numbers.
   SplitNN is the paper's network (Appendix B): SELU, ``g1`` extractors ``[a,64,128]`` /
   ``[p,128,256]``, ``g2`` ``[384,256,256]`` plus a class layer as head, ≤ 200 epochs with early
   stopping (patience 10) on a 10 % validation split of the aligned training rows.
2. ``limited`` (the paper's Fig. 5): Local (``local-logreg``), Ablation, APC-VFL (MSE), APC-VFL
   (MAE) and VFedTrans (FedSVD, MAE distillation), each with the probe cross-validated (10 folds)
   on the active party's 500 rows, averaged over a in {2,3,4,5} and over seeds (the paper's mean
   of means; the std is across the a-partitions, as in the paper's Fig. 5).
3. ``reduced`` (the shape of the paper's Fig. 8): the same methods with fewer aligned rows.
4. ``lambda``: APC-VFL (MSE) with several distillation weights λ (the paper fixes λ = 0.01).

Run: ``.venv/bin/python benchmarks/apcvfl_breast_cancer.py [--quick] [--parts ...] [--out FILE.json]``.
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
from psi.atomic import write_text
from securevfl.bench.results import write_json
from securevfl.methods.apcvfl import apc_footprint_bytes

PAPER_TABLE2 = {  # Table 2, Breast Cancer Wisconsin (accuracy, #comm, cost MB), mean / std
    250: {"splitnn": (1.000, 0.000, 380, 60, 27.04, 4.27), "apcvfl": (1.000, 0.000, 1, 0, 0.26, 0.0)},
    200: {"splitnn": (0.980, 0.000, 312, 61, 22.26, 4.34), "apcvfl": (0.976, 0.008, 1, 0, 0.20, 0.0)},
    150: {"splitnn": (0.952, 0.010, 156, 0, 11.22, 0.00), "apcvfl": (0.964, 0.015, 1, 0, 0.15, 0.0)},
    100: {"splitnn": (0.912, 0.010, 84, 0, 6.16, 0.00), "apcvfl": (0.956, 0.015, 1, 0, 0.10, 0.0)},
}
LIMITED_METHODS = ("local-logreg", "apcvfl-ablation", "apcvfl-mse", "apcvfl-mae", "vfedtrans")
#: The APC-VFL paper's SplitNN (Appendix B): g1 extractors as bottoms, g2 + a class layer as head, SELU.
PAPER_SPLITNN = {"activation": "selu", "active_bottom": "64,128", "passive_bottom": "128,256", "top": "256,256"}
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
    for n in args.table2_aligned:
        for method in args.table2_methods:
            accs, rounds, msgs, mbytes, formula, epochs, best = [], [], [], [], [], [], []
            for seed in range(args.split_reps):
                if method == "splitnn":
                    r = securevfl.train("splitnn", aligned=n, seed=seed, epochs=args.max_epochs, batch_size=8,
                                        early_stopping=10, val_fraction=0.1, min_improvement=args.min_improvement,
                                        options=PAPER_SPLITNN, require_all_parties=True,  # the paper's: aligned rows
                                        **common)
                    stopping = r.extra["early_stopping"]
                    trained = stopping["stopped_after_epoch"] or args.max_epochs
                    epochs.append(trained)
                    best.append(stopping["best_epoch"])
                    formula.append(splitnn_formula_bytes(trained, n - 50 - stopping["validation_rows"], 8))
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
                   "accuracy_per_seed": accs, "epochs_per_seed": epochs, "best_epoch_per_seed": best,
                   "epochs": mean_std(epochs) if epochs else None,
                   "best_epoch": mean_std(best) if best else None,
                   "paper": {"accuracy": paper[:2], "comm": paper[2:4], "cost_mb": paper[4:]}}
            if method == "splitnn":
                row["min_improvement"] = args.min_improvement
            rows.append(row)
            console.log(f"table 2: {method} aligned={n}: acc {row['accuracy'][0]:.3f}")
    return rows


def freeze(value: Any) -> Any:
    """Lists (as JSON gives them back) to tuples, recursively: a hashable cache key."""
    return tuple(freeze(v) for v in value) if isinstance(value, (list, tuple)) else value


class Runner:
    """Runs (and caches) one limited-alignment training: the probe's CV scores, bytes and rounds.

    :meth:`train` runs one method on Breast Cancer's ``apcvfl-paper-a{a}`` partition; a subclass
    trains elsewhere (``benchmarks/apcvfl_tables.py``) and names itself in :attr:`dataset`.
    """

    dataset = "breast-cancer"

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cache: dict[tuple[Any, ...], dict[str, float]] = {}
        self.file: Path | None = args.cache
        if self.file is not None and self.file.exists():
            for entry in json.loads(self.file.read_text()):
                self.cache[freeze(entry["key"])] = entry["result"]

    def settings(self) -> tuple[Any, ...]:
        """What a cached run depends on besides its key (a cache from other settings is not reused)."""
        return (self.args.max_epochs, self.args.batch_size, self.args.folds)

    def train(self, method: str, n: int, a: int, seed: int, options: dict[str, Any]) -> securevfl.RunReport:
        """One run of ``method`` with ``n`` aligned rows (test rows included) and ``a`` active features."""
        args = self.args
        return securevfl.train(method, dataset="breast-cancer", preset=f"apcvfl-paper-a{a}", aligned=n, seed=seed,
                               device="cpu", alignment="plaintext", epochs=args.max_epochs,
                               batch_size=args.batch_size, options={"cv_folds": args.folds, **options})

    def __call__(self, method: str, n: int, a: int, seed: int, options: dict[str, Any]) -> dict[str, float]:
        # the ablation uses no passive data: identical for every aligned count
        key = (method, None if method == "apcvfl-ablation" else n, a, seed,
               freeze(sorted({**options, "_settings": self.settings()}.items())))
        if self.dataset != "breast-cancer":  # Breast Cancer's keys stay as they were: old caches still load
            key = (self.dataset, *key)
        if key not in self.cache:
            r = self.train(method, n, a, seed, options)
            self.cache[key] = {"accuracy": r.extra["cv"]["accuracy"], "f1": r.extra["cv"]["f1"],
                               **({"auc": r.extra["cv"]["auc"]} if "auc" in r.extra["cv"] else {}),
                               "bytes": r.cost["total_bytes"], "rounds": r.cost["rounds"],
                               "formula_bytes": r.extra["communication"].get("paper_footprint_bytes", 0)}
            if self.file is not None:  # every finished run, so an interrupted sweep resumes where it stopped
                entries = [{"key": list(k), "result": v} for k, v in self.cache.items()]
                write_text(self.file, json.dumps(entries, default=list))
        return self.cache[key]


def resolve(label: str) -> tuple[str, dict[str, Any]]:
    """``apcvfl-mse`` -> (apcvfl, distill mse); ``apcvfl-mse-lam0.1`` adds lam=0.1; others as named."""
    if not label.startswith("apcvfl-m"):
        return label, {}
    parts = label.split("-")
    options: dict[str, Any] = {"distill_loss": parts[1]}
    if len(parts) > 2:
        options["lam"] = float(parts[2].removeprefix("lam"))
    return "apcvfl", options


def alignment_grid(runner: Runner, aligned: list[int], a_values: list[int], labels: tuple[str, ...],
                   console: Console, what: str) -> list[dict[str, Any]]:
    """Per (aligned, method): mean of the per-seed CV means, averaged over a; std across a.

    Each row also keeps every (a, seed) accuracy and the paired difference to Local per seed
    (mean over a), whose mean and std over seeds say whether "APC-VFL > Local" holds.
    """
    args = runner.args
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    results: dict[tuple[int, str, int], list[dict[str, float]]] = {}
    for n in aligned:
        for a in a_values:
            for seed in seeds:
                for label in labels:
                    method, options = resolve(label)
                    results.setdefault((n, label, a), []).append(runner(method, n, a, seed, options))
            console.log(f"{what}: aligned={n} a={a} done")
    rows = []
    for n in aligned:
        for label in labels:
            per_a = {a: statistics.fmean(x["accuracy"] for x in results[(n, label, a)]) for a in a_values}
            per_a_f1 = {a: statistics.fmean(x["f1"] for x in results[(n, label, a)]) for a in a_values}
            runs = [x for a in a_values for x in results[(n, label, a)]]
            acc_mean, acc_std = mean_std(list(per_a.values()))
            row = {"aligned": n, "method": label, "accuracy_mean": acc_mean, "accuracy_std_over_a": acc_std,
                   "f1_mean": statistics.fmean(per_a_f1.values()), "accuracy_per_a": per_a,
                   "accuracy_per_a_seed": {a: [x["accuracy"] for x in results[(n, label, a)]] for a in a_values},
                   "seeds": seeds, "cost_mb": statistics.fmean(x["bytes"] for x in runs) / MB,
                   "rounds": statistics.fmean(x["rounds"] for x in runs),
                   "paper_formula_mb": statistics.fmean(x["formula_bytes"] for x in runs) / MB}
            if all("auc" in x for x in runs):
                row["auc_mean"] = statistics.fmean(
                    statistics.fmean(x["auc"] for x in results[(n, label, a)]) for a in a_values)
            for peer, name in (("local-logreg", "minus_local"), ("vfedtrans", "minus_vfedtrans")):
                if peer in labels and label != peer:
                    row[name] = paired_gap(results, n, label, peer, a_values, len(seeds))
                    row[f"{name}_per_a"] = {a: per_a[a] - statistics.fmean(
                        x["accuracy"] for x in results[(n, peer, a)]) for a in a_values}
            rows.append(row)
    return rows


def paired_gap(results: dict[tuple[int, str, int], list[dict[str, float]]], n: int, label: str, peer: str,
               a_values: list[int], n_seeds: int, metric: str = "accuracy") -> tuple[float, float]:
    """``label`` minus ``peer`` paired by seed (mean over a per seed): mean and std over the seeds."""
    diffs = [statistics.fmean(results[(n, label, a)][i][metric] - results[(n, peer, a)][i][metric]
                              for a in a_values) for i in range(n_seeds)]
    return mean_std(diffs)


def fmt(ms: tuple[float, float], digits: int = 3) -> str:
    return f"{ms[0]:.{digits}f} ± {ms[1]:.{digits}f}"


def print_tables(table2: list[dict], grids: list[tuple[str, list[dict]]], console: Console,
                 args: argparse.Namespace) -> None:
    t = Table(title=f"Table 2, Breast Cancer (accuracy on 50 held-out aligned rows, {args.split_reps} seeds)")
    for col in ("aligned", "method", "accuracy", "paper acc", "epochs (best)", "#comm (rounds)", "paper #comm",
                "cost MB (meter)", "cost MB (App. E)", "paper MB"):
        t.add_column(col, justify="right")
    for r in table2:
        p = r["paper"]
        epochs = f"{r['epochs'][0]:.1f} ({r['best_epoch'][0]:.1f})" if r.get("epochs") else ""
        t.add_row(str(r["aligned"]), r["method"], fmt(r["accuracy"]),
                  f"{p['accuracy'][0]:.3f} ± {p['accuracy'][1]:.3f}", epochs,
                  fmt(r["rounds"], 0), f"{p['comm'][0]} ± {p['comm'][1]}", fmt(r["cost_mb"], 2),
                  f"{r['paper_formula_mb']:.2f}", f"{p['cost_mb'][0]:.2f}")
    if table2:
        console.print(t)
    for title, rows in grids:
        if not rows:
            continue
        a_values = list(rows[0]["accuracy_per_a"])
        t = Table(title=f"{title}: {args.folds}-fold CV on the active party's 500 rows, mean over a in {a_values} "
                        f"and {args.seeds} seed(s); ± = std across a; Δ Local = paired by seed, mean ± std over seeds")
        for col in ("aligned", "method", "accuracy", "Δ Local", "F1", "rounds", "cost MB (meter)", "cost MB (App. E)",
                    *[f"a={a}" for a in a_values]):
            t.add_column(col, justify="right")
        for r in rows:
            delta = fmt(r["minus_local"]) if "minus_local" in r else ""
            t.add_row(str(r["aligned"]), r["method"], f"{r['accuracy_mean']:.3f} ± {r['accuracy_std_over_a']:.3f}",
                      delta, f"{r['f1_mean']:.3f}", f"{r['rounds']:.0f}", f"{r['cost_mb']:.3f}",
                      f"{r['paper_formula_mb']:.3f}", *[f"{r['accuracy_per_a'][a]:.3f}" for a in a_values])
        console.print(t)


def ratios(table2: list[dict], limited: list[dict]) -> dict[str, Any]:
    """Headline ratios per aligned count present in both blocks."""
    by = {(r["aligned"], r["method"]): r for r in table2}
    lim = {(r["aligned"], r["method"]): r for r in limited}
    out: dict[str, Any] = {}
    for n in sorted({r["aligned"] for r in table2} | {r["aligned"] for r in limited}, reverse=True):
        r: dict[str, Any] = {}
        if (n, "splitnn") in by and (n, "apcvfl-splitnn") in by:
            s, a = by[(n, "splitnn")], by[(n, "apcvfl-splitnn")]
            r.update(splitnn_over_apcvfl_rounds=s["rounds"][0] / max(a["rounds"][0], 1),
                     splitnn_over_apcvfl_bytes=s["cost_mb"][0] / a["cost_mb"][0],
                     apcvfl_minus_splitnn_accuracy=a["accuracy"][0] - s["accuracy"][0])
        if (n, "apcvfl-mse") in lim and (n, "vfedtrans") in lim:
            r.update(apcvfl_mse_minus_local=lim[(n, "apcvfl-mse")]["minus_local"][0],
                     apcvfl_mae_minus_local=lim[(n, "apcvfl-mae")]["minus_local"][0],
                     vfedtrans_minus_local=lim[(n, "vfedtrans")]["minus_local"][0],
                     apcvfl_mse_minus_ablation=lim[(n, "apcvfl-mse")]["accuracy_mean"]
                     - lim[(n, "apcvfl-ablation")]["accuracy_mean"],
                     apcvfl_mse_minus_vfedtrans=lim[(n, "apcvfl-mse")]["accuracy_mean"]
                     - lim[(n, "vfedtrans")]["accuracy_mean"],
                     vfedtrans_over_apcvfl_bytes=lim[(n, "vfedtrans")]["cost_mb"] / lim[(n, "apcvfl-mse")]["cost_mb"])
        if r:
            out[str(n)] = r
    return out


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="1 seed, 5 folds, 20 epochs, batch 32, aligned 250 and 100 (reduced: 55), a = 2")
    parser.add_argument("--out", type=Path, help="write the figures as JSON")
    parser.add_argument("--cache", type=Path,
                        help="JSON file of finished limited-alignment runs: read at start, written after each run")
    parser.add_argument("--seeds", type=int, default=5, help="training repetitions (paper: 5)")
    parser.add_argument("--first-seed", type=int, default=0, help="first seed of the limited-alignment runs")
    parser.add_argument("--parts", default="table2,limited,reduced,lambda",
                        help="which parts to run: table2, limited (Fig. 5), reduced (Fig. 8 shape), lambda")
    parser.add_argument("--folds", type=int, default=10, help="CV folds of the probe (paper: 10)")
    parser.add_argument("--split-reps", type=int, default=5, help="Table 2 repetitions (paper: 5)")
    parser.add_argument("--max-epochs", type=int, default=200, help="epoch cap with early stopping (paper: 200)")
    parser.add_argument("--min-improvement", type=float, default=1e-3,
                        help="Table 2 SplitNN: how much the validation log loss must fall to count as better "
                             "(0: any fall, which let one seed in three run to the 200-epoch cap)")
    parser.add_argument("--batch-size", type=int, default=8, help="autoencoder batch size (paper: 8)")
    parser.add_argument("--table2-methods", default="splitnn,apcvfl-splitnn",
                        help="Table 2 methods (apcvfl-splitnn does not depend on --min-improvement)")
    parser.add_argument("--table2-aligned", default="250,200,150,100", help="Table 2 aligned rows (50 test rows incl.)")
    parser.add_argument("--aligned", default="250,200,150,100", help="Fig. 5 aligned rows (test rows included)")
    parser.add_argument("--reduced-aligned", default="75,55",
                        help="Fig. 8-shaped sweep: fewer aligned rows (> 50: the 50 aligned test rows are included)")
    parser.add_argument("--a", default="2,3,4,5", help="active-party feature counts (Fig. 5 and reduced)")
    parser.add_argument("--lambdas", default="0.1,1,10", help="λ sweep values (0.01, the paper's, is the main block's)")
    parser.add_argument("--lambda-aligned", type=int, default=250, help="aligned rows of the λ sweep")
    parser.add_argument("--lambda-a", default="2,5", help="active-party feature counts of the λ sweep")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.folds, args.split_reps, args.max_epochs, args.batch_size = 1, 5, 1, 20, 32
        args.table2_aligned, args.aligned, args.a, args.reduced_aligned = "250,100", "250,100", "2", "55"
        args.lambdas, args.lambda_a = "1", "2"
    for key in ("table2_aligned", "aligned", "reduced_aligned", "a", "lambda_a"):
        setattr(args, key, [int(x) for x in str(getattr(args, key)).split(",") if x.strip()])
    args.lambdas = [float(x) for x in str(args.lambdas).split(",") if x.strip()]
    args.table2_methods = [m for m in str(args.table2_methods).split(",") if m]
    if set(args.table2_methods) - {"splitnn", "apcvfl-splitnn"}:
        raise SystemExit("--table2-methods: splitnn and/or apcvfl-splitnn")
    return args


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)  # tiny models: intra-op threads only contend on a shared machine
    console = Console(width=200)
    started = time.perf_counter()
    parts = set(args.parts.split(","))
    unknown = parts - {"table2", "limited", "reduced", "lambda"}
    if unknown:
        raise SystemExit(f"unknown part(s) {sorted(unknown)}")
    runner = Runner(args)
    table2 = splitnn_comparison(args, console) if "table2" in parts else []
    limited = alignment_grid(runner, args.aligned, args.a, LIMITED_METHODS, console, "Fig. 5") \
        if "limited" in parts else []
    reduced = alignment_grid(runner, args.reduced_aligned, args.a, LIMITED_METHODS, console, "Fig. 8 shape") \
        if "reduced" in parts else []
    lambda_labels = ("local-logreg", "apcvfl-ablation", "apcvfl-mse",
                     *[f"apcvfl-mse-lam{lam:g}" for lam in args.lambdas])
    lambdas = alignment_grid(runner, [args.lambda_aligned], args.lambda_a, lambda_labels, console, "λ sweep") \
        if "lambda" in parts else []
    grids = [("Fig. 5 block (limited alignment)", limited), ("Fig. 8 shape (reduced alignment)", reduced),
             ("λ sweep (APC-VFL MSE; apcvfl-mse = λ 0.01, ablation = no distillation)", lambdas)]
    print_tables(table2, grids, console, args)
    headline = ratios(table2, limited + reduced)
    for n, r in headline.items():
        console.print(f"aligned {n}: " + ", ".join(f"{k} {v:+.3f}" for k, v in r.items()))
    wall = time.perf_counter() - started
    console.print(f"wall clock {wall:.0f} s")
    if args.out:
        config = {k: v for k, v in vars(args).items() if k != "out"}
        payload = {"benchmark": "apcvfl_breast_cancer", "config": config, "table2": table2,
                   "limited_alignment": limited, "reduced_alignment": reduced, "lambda_sweep": lambdas,
                   "ratios": headline, "wall_s": wall}
        write_json(args.out, payload, default=str)
        console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""hetero-lr on breast-cancer: accuracy vs scikit-learn, Paillier time split and traffic, fast vs phe.

Every run uses a 2048-bit key (the default; ~112-bit security). For each run: test accuracy of
hetero-lr, of scikit-learn's LogisticRegression on the same features centralised in plaintext
(the reference), and of the same Taylor-approximated SGD in plaintext (what the encrypted protocol
must equal up to fixed-point rounding); wall and CPU time; the time split summed over parties
(compute, serialisation, each Paillier primitive); bytes per link. The peer: the same run with
python-paillier (``backend=phe``), in the same process, with the phe/fast ratio per figure.

    .venv/bin/python benchmarks/hetero_lr.py --quick --out out/hetero_lr.json

``--quick``: one epoch per backend, 2 parties. Default: also 5-epoch runs with 2 and 3 parties.
Times are summed over party threads of one process (they overlap), so on a loaded machine a
primitive's seconds include waiting for the interpreter lock; CPU seconds are the process's.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table
from sklearn.linear_model import LogisticRegression

from securevfl.api import RunConfig, build_scenario, run
from securevfl.bench.results import write_json
from securevfl.data import PartitionSpec
from securevfl.methods import TrainConfig
from securevfl.methods.hetero_lr.reference import taylor_lr_reference

PRIMITIVES = ("encrypt", "decrypt", "add", "matmul", "mask", "rerandomize", "keygen")


def references(scenario: Any, epochs: int, batch_size: int, seed: int) -> dict[str, float]:
    """Plaintext accuracies on the same rows: scikit-learn LR and the same Taylor SGD."""
    parties = (scenario.active, *scenario.passives)
    datas = [scenario.party_data(p) for p in parties]
    active = datas[0]
    X_train = np.hstack([d.X_train for d in datas])
    X_test = np.hstack([d.X_test for d in datas])
    sk = LogisticRegression(max_iter=1000).fit(X_train, active.y_train).score(X_test, active.y_test)
    taylor = taylor_lr_reference([d.X_train for d in datas], active.y_train, epochs=epochs, batch_size=batch_size,
                                 seed=seed)
    acc = float(np.mean((taylor.logits([d.X_test for d in datas]) > 0) == active.y_test))
    return {"sklearn_accuracy": float(sk), "taylor_plaintext_accuracy": acc}


def one_run(name: str, backend: str, parties: int, epochs: int, batch_size: int, seed: int) -> dict[str, Any]:
    """Train once and collect the figures."""
    train = TrainConfig(epochs=epochs, batch_size=batch_size, seed=seed, options={"backend": backend})
    config = RunConfig(method="hetero-lr", dataset="breast-cancer", partition=PartitionSpec(parties=parties, seed=seed),
                       train=train, alignment="plaintext")
    scenario = build_scenario(config)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    report = run(config, scenario=scenario)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    cost = report.cost
    crypto = {k.removeprefix("paillier."): v for k, v in cost["crypto_s"].items() if k.startswith("paillier.")}
    losses = [h["train_loss"] for h in report.history if "train_loss" in h]
    return {
        "name": name, "backend": backend, "parties": parties, "epochs": epochs, "batch_size": batch_size,
        "key_bits": 2048, "train_rows": len(scenario.party_data(scenario.active).X_train),
        "accuracy": report.metrics["accuracy"], "auc": report.metrics.get("auc"),
        **references(scenario, epochs, batch_size, seed),
        "taylor_loss": losses, "wall_s": wall, "cpu_s": cpu,
        "compute_s": cost["compute_s"], "serialize_s": cost["serialize_s"], "crypto_s": crypto,
        "crypto_total_s": sum(crypto.values()),
        "arbiter_crypto_s": sum(cost["per_party"]["arbiter"]["crypto_s"].values()),
        "bytes": cost["comm"]["bytes"], "messages": cost["comm"]["messages"], "total_bytes": cost["total_bytes"],
        "rounds": cost["rounds"], "simulated_network_s": cost["simulated_network_s"],
    }


def seed_sweep(epochs: int, batch_size: int, seeds: range) -> list[dict[str, float]]:
    """Plaintext Taylor SGD vs scikit-learn over several partition/batch seeds (no crypto: the
    encrypted protocol equals the plaintext Taylor updates up to fixed-point rounding, as tested)."""
    rows = []
    for seed in seeds:
        config = RunConfig(method="hetero-lr", dataset="breast-cancer", partition=PartitionSpec(parties=2, seed=seed),
                           alignment="plaintext")
        rows.append({"seed": seed, **references(build_scenario(config), epochs, batch_size, seed)})
    return rows


def ratios(fast: dict[str, Any], phe: dict[str, Any]) -> dict[str, float]:
    """phe / fast for the time figures (bytes are identical by construction)."""
    out = {k: phe[k] / fast[k] for k in ("wall_s", "cpu_s", "crypto_total_s") if fast[k] > 0}
    out.update({f"paillier.{p}": phe["crypto_s"][p] / fast["crypto_s"][p]
                for p in PRIMITIVES if fast["crypto_s"].get(p, 0) > 0 and p in phe["crypto_s"]})
    out["total_bytes"] = phe["total_bytes"] / fast["total_bytes"]
    return out


def print_tables(console: Console, runs: list[dict[str, Any]], ratio: dict[str, float]) -> None:
    summary = Table(title="hetero-lr on breast-cancer, 2048-bit Paillier")
    for col in ("run", "backend", "parties", "epochs", "accuracy", "sklearn", "taylor plain", "wall s", "cpu s",
                "compute s", "serialize s", "crypto s", "MB sent"):
        summary.add_column(col, justify="right" if col not in ("run", "backend") else "left")
    for r in runs:
        summary.add_row(r["name"], r["backend"], str(r["parties"]), str(r["epochs"]), f"{r['accuracy']:.4f}",
                        f"{r['sklearn_accuracy']:.4f}", f"{r['taylor_plaintext_accuracy']:.4f}", f"{r['wall_s']:.1f}",
                        f"{r['cpu_s']:.1f}", f"{r['compute_s']:.3f}", f"{r['serialize_s']:.2f}",
                        f"{r['crypto_total_s']:.1f}", f"{r['total_bytes'] / 1e6:.2f}")
    console.print(summary)
    split = Table(title="Paillier time per primitive, seconds summed over parties (phe/fast ratio)")
    split.add_column("primitive")
    for r in runs:
        split.add_column(r["name"], justify="right")
    split.add_column("phe/fast", justify="right")
    for p in PRIMITIVES:
        split.add_row(p, *[f"{r['crypto_s'].get(p, 0.0):.2f}" for r in runs],
                      f"{ratio[f'paillier.{p}']:.1f}x" if f"paillier.{p}" in ratio else "")
    split.add_row("wall", *[f"{r['wall_s']:.1f}" for r in runs], f"{ratio['wall_s']:.1f}x")
    console.print(split)
    links = Table(title="bytes per link (per run)")
    names = sorted({link for r in runs for link in r["bytes"]})
    links.add_column("link")
    for r in runs:
        links.add_column(r["name"], justify="right")
    for link in names:
        links.add_row(link, *[f"{r['bytes'].get(link, 0):,}" for r in runs])
    console.print(links)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one epoch per backend, 2 parties (about a minute)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=5, help="epochs of the accuracy runs (not with --quick)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    console = Console() if sys.stdout.isatty() else Console(width=170)
    runs = []
    if not args.quick:
        for parties in (2, 3):
            console.print(f"fast, {parties} parties, {args.epochs} epochs ...")
            runs.append(one_run(f"fast-{parties}p-{args.epochs}ep", "fast", parties, args.epochs, args.batch_size,
                                args.seed))
    peer = {}
    for backend in ("fast", "phe"):
        console.print(f"{backend}, 2 parties, 1 epoch (peer comparison) ...")
        peer[backend] = one_run(f"{backend}-2p-1ep", backend, 2, 1, args.batch_size, args.seed)
    runs += [peer["fast"], peer["phe"]]
    ratio = ratios(peer["fast"], peer["phe"])
    print_tables(console, runs, ratio)
    sweep = seed_sweep(args.epochs, args.batch_size, range(6))
    seeds = Table(title=f"Taylor SGD ({args.epochs} epochs, batch {args.batch_size}) vs scikit-learn LR, per seed")
    for col in ("seed", "taylor (= hetero-lr)", "sklearn", "gap, points"):
        seeds.add_column(col, justify="right")
    for row in sweep:
        gap = 100 * (row["sklearn_accuracy"] - row["taylor_plaintext_accuracy"])
        seeds.add_row(str(row["seed"]), f"{row['taylor_plaintext_accuracy']:.4f}", f"{row['sklearn_accuracy']:.4f}",
                      f"{gap:.1f}")
    console.print(seeds)
    mean_gap = 100 * float(np.mean([r["sklearn_accuracy"] - r["taylor_plaintext_accuracy"] for r in sweep]))
    console.print(f"mean gap to scikit-learn over seeds 0-5: {mean_gap:.1f} points")
    console.print(f"phe/fast wall-time ratio (2 parties, 1 epoch): {ratio['wall_s']:.1f}x; "
                  f"Paillier seconds: {ratio['crypto_total_s']:.1f}x")
    results = {
        "benchmark": "hetero_lr", "dataset": "breast-cancer", "key_bits": 2048, "quick": args.quick,
        "runs": runs, "ratio_phe_over_fast": ratio, "seed_sweep": sweep, "seed_sweep_mean_gap_points": mean_gap,
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
                    "load_avg_1m": os.getloadavg()[0]},
    }
    if args.out:
        write_json(args.out, results, sort_keys=True)
        console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

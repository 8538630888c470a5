"""Paillier secure aggregation (``secagg=paillier``) against DH masking (``dh``) and plaintext (``none``).

Part 1 — one aggregation round, the step alone: 4 parties (1 active + 3 passive), each passive
vector a (batch x 128) embedding (batch 128; 64 with ``--quick``), 2048-bit Paillier key, X25519
for ``dh``. Per round: wall seconds at the active party (from the end of setup to the last sum,
divided by the rounds), crypto seconds per primitive summed over all parties, bytes and messages
on all links and per link (``link_bytes_per_round``; p1 is the paillier key holder), and
communication rounds (causal message depth). Per-round bytes, messages and
depth are ``(run with R rounds - run with 0 rounds) / R``, so one-off setup (key generation, key
exchange) is excluded from them and reported separately. Keys: ``paillier_round_seconds``,
``dh_round_seconds``, ``paillier_bytes_per_round``, ``dh_bytes_per_round``,
``paillier_vs_dh_time_ratio`` (and ``..._bytes_ratio``).

Part 2 — EASTER epoch time with each scheme (batch 128, embedding 128, 4 parties; ``digits``,
``breast-cancer`` with ``--quick``): the minimum gap between consecutive epoch ends (the first
epoch, setup and evaluation excluded), plus the test accuracy.

All parties run as threads of one process on the same CPU cores, so a round's wall time is the
sum of the parties' work on the critical path, not what separate machines would see.

    .venv/bin/python benchmarks/secagg_paillier.py --quick --out out/secagg_paillier.json
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from securevfl.api import RunConfig, build_scenario
from securevfl.bench.results import write_json
from securevfl.bench.scaling import aggregation_rounds
from securevfl.data import PartitionSpec
from securevfl.federation.runtime import run_parties
from securevfl.methods import TrainConfig, create_method

console = Console(width=140)
PARTIES = 4
PASSIVES = tuple(f"p{i}" for i in range(1, PARTIES))
EMBEDDING = 128
SCHEMES = ("none", "dh", "paillier")
ONE_OFF = {"secagg.keygen", "secagg.key_agreement", "secagg.paillier_keygen", "secagg.paillier_setup"}


def _run_rounds(scheme_name: str, rounds: int, batch: int, seed: int = 0) -> dict[str, Any]:
    """``rounds`` aggregation rounds, threaded runtime (:func:`securevfl.bench.scaling.aggregation_rounds`)."""
    return aggregation_rounds(scheme_name, rounds, batch, parties=PARTIES, embedding=EMBEDDING, seed=seed)


def round_figures(batch: int, rounds: int) -> dict[str, Any]:
    """Part 1: per-round cost of each scheme (setup excluded by differencing)."""
    out: dict[str, Any] = {}
    for name in SCHEMES:
        base = _run_rounds(name, 0, batch)
        run = _run_rounds(name, rounds, batch)
        per_round_crypto = {
            k: (v - base["crypto_s"].get(k, 0.0)) / rounds for k, v in run["crypto_s"].items() if k not in ONE_OFF
        }
        out[name] = {
            "round_seconds": run["seconds"] / rounds,
            "crypto_s_per_round": per_round_crypto,
            "crypto_s_per_round_total": sum(per_round_crypto.values()),
            "bytes_per_round": (run["bytes"] - base["bytes"]) / rounds,
            "link_bytes_per_round": {
                k: (v - base["links"].get(k, 0)) / rounds for k, v in sorted(run["links"].items())
            },
            "messages_per_round": (run["messages"] - base["messages"]) / rounds,
            "comm_rounds_per_round": (run["depth"] - base["depth"]) / rounds - 1,  # minus bench.next
            "setup_bytes": base["bytes"],
            "setup_crypto_s": {k: v for k, v in run["crypto_s"].items() if k in ONE_OFF},
        }
    return out


def _epoch_times(scenario, secagg: str, epochs: int, seed: int = 0) -> tuple[list[float], float, dict]:
    config = TrainConfig(
        epochs=epochs, batch_size=128, seed=seed, options={"secagg": secagg, "embedding_size": EMBEDDING}
    )
    method = create_method("easter", config)
    ends: list[float] = []
    started = time.perf_counter()
    result = run_parties(
        method.roles(scenario),
        active=scenario.active,
        seed=seed,
        progress=lambda **_: ends.append(time.perf_counter()),
    )
    gaps = np.diff([started, *ends])
    outcome = result.results[scenario.active]
    accuracy = float(outcome.extra["mean_party_metrics"]["accuracy"])
    crypto: dict[str, float] = {}
    for meter in result.meters.values():
        for k, v in meter.snapshot().crypto_s.items():
            crypto[k] = crypto.get(k, 0.0) + v
    return (gaps[1:] if len(gaps) > 1 else gaps).tolist(), accuracy, crypto


def epoch_figures(dataset: str, epochs: int) -> dict[str, Any]:
    """Part 2: EASTER epoch time and accuracy with each scheme on one dataset."""
    scenario = build_scenario(
        RunConfig(dataset=dataset, partition=PartitionSpec(parties=PARTIES, seed=0), alignment="plaintext")
    )
    out: dict[str, Any] = {
        "dataset": dataset,
        "epochs": epochs,
        "steps_per_epoch": -(-len(scenario.party_data(scenario.active).X_train) // 128),
    }
    for name in SCHEMES:
        gaps, accuracy, crypto = _epoch_times(scenario, name, epochs)
        out[name] = {
            "epoch_seconds_min": min(gaps),
            "epoch_seconds_all": gaps,
            "accuracy": accuracy,
            "crypto_s": {k: v for k, v in crypto.items() if k.startswith("secagg.")},
        }
    for name in ("dh", "paillier"):
        out[f"{name}_epoch_overhead_fraction"] = out[name]["epoch_seconds_min"] / out["none"]["epoch_seconds_min"] - 1
    return out


def print_tables(rounds: dict[str, Any], epochs: dict[str, Any], batch: int) -> None:
    table = Table(title=f"One aggregation round: 3 passive x ({batch} x {EMBEDDING}) values, 4 parties")
    for col in ("scheme", "round s", "crypto s (all parties)", "bytes", "messages", "comm. rounds"):
        table.add_column(col, justify="right")
    for name in SCHEMES:
        r = rounds[name]
        table.add_row(
            name,
            f"{r['round_seconds']:.3f}",
            f"{r['crypto_s_per_round_total']:.3f}",
            f"{r['bytes_per_round']:,.0f}",
            f"{r['messages_per_round']:.0f}",
            f"{r['comm_rounds_per_round']:.0f}",
        )
    console.print(table)
    prim = Table(title="Crypto seconds per round, by primitive (all parties)")
    prim.add_column("scheme")
    prim.add_column("primitive")
    prim.add_column("ms", justify="right")
    for name in ("dh", "paillier"):
        for k, v in sorted(rounds[name]["crypto_s_per_round"].items()):
            prim.add_row(name, k, f"{v * 1e3:.1f}")
    console.print(prim)
    links = Table(title="paillier: bytes per round by link (p1 is the key holder)")
    links.add_column("link")
    links.add_column("bytes", justify="right")
    for k, v in rounds["paillier"]["link_bytes_per_round"].items():
        links.add_row(k, f"{v:,.0f}")
    console.print(links)
    ep = Table(
        title=f"EASTER on {epochs['dataset']}: batch 128, embedding 128, {epochs['steps_per_epoch']} steps/epoch"
    )
    for col in ("scheme", "epoch s (min)", "overhead vs none", "accuracy"):
        ep.add_column(col, justify="right")
    for name in SCHEMES:
        over = epochs.get(f"{name}_epoch_overhead_fraction")
        ep.add_row(
            name,
            f"{epochs[name]['epoch_seconds_min']:.2f}",
            "-" if over is None else f"{over:+.0%}",
            f"{epochs[name]['accuracy']:.3f}",
        )
    console.print(ep)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="batch 64, 3 rounds, breast-cancer (about a minute)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    batch, rounds = (64, 3) if args.quick else (128, 5)
    dataset, epochs = ("breast-cancer", 2) if args.quick else ("digits", 3)
    per_round = round_figures(batch, rounds)
    epoch = epoch_figures(dataset, epochs)
    p, d = per_round["paillier"], per_round["dh"]
    figures = {
        "parties": PARTIES,
        "batch": batch,
        "embedding": EMBEDDING,
        "rounds_measured": rounds,
        "key_bits": 2048,
        "cpus": os.cpu_count(),
        "load_average_1m": os.getloadavg()[0],
        "paillier_round_seconds": p["round_seconds"],
        "dh_round_seconds": d["round_seconds"],
        "none_round_seconds": per_round["none"]["round_seconds"],
        "paillier_bytes_per_round": p["bytes_per_round"],
        "dh_bytes_per_round": d["bytes_per_round"],
        "none_bytes_per_round": per_round["none"]["bytes_per_round"],
        # p1 is the key holder (first passive party in sorted order)
        "paillier_active_to_holder_bytes_per_round": p["link_bytes_per_round"].get("A->p1", 0.0),
        "paillier_vs_dh_time_ratio": p["round_seconds"] / d["round_seconds"],
        "paillier_vs_dh_bytes_ratio": p["bytes_per_round"] / d["bytes_per_round"],
        "paillier_vs_dh_crypto_ratio": p["crypto_s_per_round_total"] / d["crypto_s_per_round_total"],
        "per_round": per_round,
        "easter": epoch,
    }
    print_tables(per_round, epoch, batch)
    console.print(
        f"paillier / dh per round: time x{figures['paillier_vs_dh_time_ratio']:.1f}, "
        f"bytes x{figures['paillier_vs_dh_bytes_ratio']:.2f}, "
        f"crypto x{figures['paillier_vs_dh_crypto_ratio']:.1f}; "
        f"EASTER epoch overhead vs none: dh {epoch['dh_epoch_overhead_fraction']:+.0%}, "
        f"paillier {epoch['paillier_epoch_overhead_fraction']:+.0%} "
        f"(shared machine, load {figures['load_average_1m']:.1f})"
    )
    if args.out:
        write_json(args.out, figures)
    return figures


if __name__ == "__main__":
    main()

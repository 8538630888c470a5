"""EASTER's Tables V-VII and Figs. 4-6(b) under the protocols the paper most plausibly used (issue 31).

Sections (``--sections``, all by default):

* ``comm`` — **Table V** with both masking rings: PyVertical, C-VFL, Agg-VFL and EASTER under ``dh``
  in Z_2^64 and in Z_2^32 (``ring_bits=32``), and under the paper's session-key ``pairwise`` masks in
  Z_2^32; MB until the validation accuracy first reaches a target and to the best epoch, and each
  over PyVertical's. The same runs give **Figs. 4-5**: the simulated transfer time to the best
  epoch (:class:`~securevfl.federation.meter.NetworkModel`, re-priced from each run's critical
  network path) for a bandwidth sweep at 10 ms, and a latency sweep at 50 Mbit/s (the paper's
  setting); and **Table VII**: the EASTER ``dh`` 64-bit runs re-priced with each passive party a
  high-performance (100 Mbit/s, 10 ms) or low-performance (10 Mbit/s, 100 ms) device, link by link
  (:func:`~securevfl.federation.meter.link_transfer_seconds`).
* ``parties`` — **Table VI**: the image is cut once into 10 fixed vertical strips (parts); with C
  parties, party k (the active party first) holds part k, so C parties see C/10 of the image and
  accuracy can rise with C, as in the paper (where C clients hold C of 10 equal feature parts).
* ``fig6b`` — **Fig. 6(b)** at a fixed total depth: EASTER with EL:PL = 4:2, 3:3, 2:4 linear
  layers (6 in all at every party), so the ratio is the only change.

    .venv/bin/python benchmarks/easter_repro.py --quick --out out/easter_repro_quick.json
    .venv/bin/python benchmarks/easter_repro.py --out out/easter_repro.json

JSON keys: ``table5`` (per dataset: ``rows`` by method label with ``mb_to_target``,
``mb_to_target_over_pyvertical``, ``mb_to_best_epoch``, ``mb_to_best_over_pyvertical``,
``bytes_per_epoch_over_pyvertical``, ``accuracy``/``accuracy_std``), ``fig4_bandwidth`` and
``fig5_latency`` (per method: simulated network seconds to the best epoch per Mbit/s or ms),
``table7`` (per device pattern: per-party accuracy, compute s, network s, total s), ``table6_fixed_parts``
(per method and C: accuracy mean/std/runs, wall s), ``fig6b_fixed_depth`` (per EL:PL: accuracy
mean/std/runs). Every section also records its dataset, epochs, seeds and learning rate.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from securevfl.api import RunConfig, build_scenario, run
from securevfl.bench.results import write_json
from securevfl.data import DatasetOptions, PartitionSpec
from securevfl.data.scenario import Scenario
from securevfl.federation.meter import NetworkModel, link_transfer_seconds
from securevfl.methods import TrainConfig

console = Console(width=160)
BATCH, EMBEDDING, PARTIES = 128, 128, 4
LR = 1e-3  # the rate the validation split chose for every federated method on mnist-5k (docs/easter.md)
VAL_FRACTION = 0.1
HIGH, LOW = NetworkModel(100.0, 10.0), NetworkModel(10.0, 100.0)  # Table VII's device kinds (our choice)
BANDWIDTHS_MBPS = (10.0, 20.0, 50.0, 100.0, 200.0)
LATENCIES_MS = (1.0, 10.0, 30.0, 50.0, 100.0)  # the paper's low 1-30, medium 30-50, high 50-100 ms
N_PARTS = 10

#: (label, method, options, TrainConfig overrides).
COMM_METHODS: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    ("PyVertical", "pyvertical", {"bottom": "cnn"}, {"embedding_dim": EMBEDDING, "hidden": (128,)}),
    ("C_VFL", "cvfl", {"compress": "quant", "bits": 8, "local_steps": 5}, {}),
    ("Agg_VFL", "aggvfl", {"local_steps": "5"}, {}),
    ("EASTER dh 64-bit", "easter", {"secagg": "dh", "ring_bits": 64}, {}),
    ("EASTER dh 32-bit", "easter", {"secagg": "dh", "ring_bits": 32}, {}),
    ("EASTER pairwise 32-bit", "easter", {"secagg": "pairwise", "ring_bits": 32}, {}),
]
SWEEP_METHODS = ("PyVertical", "C_VFL", "Agg_VFL", "EASTER dh 64-bit")
ZOO_METHODS = ("cvfl", "aggvfl", "easter")
#: The paper's Table V (FMNIST): MB to convergence; Table VI (CINIC-10): accuracy for C = 2..10.
PAPER_TABLE5_MB = {"PyVertical": 1401.62, "C_VFL": 1602.17, "Agg_VFL": 137.43, "EASTER": 840.45}
PAPER_TABLE6 = {"PyVertical": (49.98, 58.41, 63.67, 66.23, 67.40), "C_VFL": (50.17, 58.66, 63.45, 65.37, 65.91),
                "Agg_VFL": (53.17, 60.36, 66.12, 67.25, 67.66), "EASTER": (54.22, 62.57, 67.50, 72.33, 72.79)}
#: The paper's Table VII (MNIST): time (min) for device patterns 111, 110, 100, 000.
PAPER_TABLE7_MIN = {"111": 7.18, "110": 20.94, "100": 26.56, "000": 35.87}


class RecordingNetwork(NetworkModel):
    """The run's uniform network model that also keeps the per-link byte counts it was given."""

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "recorded", [])

    def transfer_seconds(self, depth_link_bytes: Any) -> float:
        self.recorded.append({d: dict(links) for d, links in depth_link_bytes.items()})  # type: ignore[attr-defined]
        return super().transfer_seconds(depth_link_bytes)


def _zoo(method: str, options: dict[str, Any], dataset: str) -> dict[str, Any]:
    if method not in ZOO_METHODS:
        return dict(options)
    return {"models": "hetero", "zoo": "paper" if dataset == "mnist-5k" else "default", **options}


def _scenario(dataset: str, seed: int, spec: PartitionSpec | None = None) -> Scenario:
    return build_scenario(RunConfig(dataset=dataset, dataset_options=DatasetOptions(seed=seed),
                                    partition=spec or PartitionSpec(parties=PARTIES, seed=seed),
                                    alignment="plaintext"))


def _train(scenario: Scenario, method: str, options: dict[str, Any], overrides: dict[str, Any], *, epochs: int,
           seed: int, select: bool, network: NetworkModel | None = None) -> dict[str, Any]:
    train = TrainConfig(epochs=epochs, batch_size=BATCH, seed=seed, lr=LR, options=options,
                        early_stopping=epochs if select and method != "local" else 0, val_fraction=VAL_FRACTION,
                        **overrides)
    started = time.perf_counter()
    report = run(RunConfig(method=method, dataset=scenario.dataset, alignment="plaintext", device="cpu",
                           train=train, network=network or NetworkModel()), scenario=scenario)
    return {"accuracy": report.metrics["accuracy"],
            "per_party": {p: m["accuracy"] for p, m in report.metrics.get("per_party", {}).items()},
            "comm_mb": report.cost["total_bytes"] / 1e6, "wall_s": time.perf_counter() - started,
            "history": report.history, "best_epoch": report.extra.get("early_stopping", {}).get("best_epoch"),
            "network_path": report.cost["network_path"], "compute_s": report.cost["compute_s"]}


def _mean_std(values: list[float]) -> tuple[float, float]:
    return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


# -- Table V, Figs. 4-5, Table VII -------------------------------------------------------------------


def comm_section(dataset: str, epochs: int, seeds: list[int], target: float) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {}
    links: list[dict[int, dict[str, int]]] = []
    for seed in seeds:
        scenario = _scenario(dataset, seed)
        for label, method, options, overrides in COMM_METHODS:
            network = RecordingNetwork() if label == "EASTER dh 64-bit" else None
            r = _train(scenario, method, _zoo(method, options, dataset), overrides, epochs=epochs, seed=seed,
                       select=True, network=network)
            if network is not None:
                links.append(network.recorded[-1])  # type: ignore[attr-defined]
                r["passives"], r["active"] = list(scenario.passives), scenario.active
            runs.setdefault(label, []).append(r)
            console.log(f"{dataset} seed {seed} {label:24s} acc {r['accuracy']:.4f} {r['comm_mb']:.1f} MB "
                        f"best epoch {r['best_epoch']} {r['wall_s']:.0f} s")
    return {"table5": table5(dataset, epochs, seeds, target, runs),
            **network_figures(dataset, epochs, seeds, runs),
            "table7": table7(dataset, epochs, seeds, runs["EASTER dh 64-bit"], links)}


def _first_epoch(history: list[dict[str, Any]], target: float) -> int | None:
    return next((int(h["epoch"]) for h in history if h.get("val_accuracy", 0.0) >= target), None)


def table5(dataset: str, epochs: int, seeds: list[int], target: float,
           runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for label, rs in runs.items():
        per_epoch = [r["comm_mb"] / epochs for r in rs]
        reach = [_first_epoch(r["history"], target) for r in rs]
        to_target = [None if e is None else e * pe for e, pe in zip(reach, per_epoch, strict=True)]
        to_best = [(r["best_epoch"] or epochs) * pe for r, pe in zip(rs, per_epoch, strict=True)]
        acc, std = _mean_std([r["accuracy"] for r in rs])
        rows[label] = {"mb_per_epoch": float(np.mean(per_epoch)),
                       "mb_to_target": None if None in to_target else float(np.mean(to_target)),  # type: ignore[arg-type]
                       "runs_reaching_target": sum(t is not None for t in to_target),
                       "mb_to_best_epoch": float(np.mean(to_best)), "best_epochs": [r["best_epoch"] for r in rs],
                       "accuracy": acc, "accuracy_std": std, "accuracy_runs": [r["accuracy"] for r in rs]}
    py = rows["PyVertical"]
    for row in rows.values():
        row["bytes_per_epoch_over_pyvertical"] = row["mb_per_epoch"] / py["mb_per_epoch"]
        row["mb_to_target_over_pyvertical"] = (row["mb_to_target"] / py["mb_to_target"]
                                               if row["mb_to_target"] and py["mb_to_target"] else None)
        row["mb_to_best_over_pyvertical"] = row["mb_to_best_epoch"] / py["mb_to_best_epoch"]
    return {"dataset": dataset, "epochs": epochs, "seeds": seeds, "lr": LR, "target_val_accuracy": target,
            "rows": rows, "paper_fmnist_mb_over_pyvertical": {k: v / PAPER_TABLE5_MB["PyVertical"]
                                                              for k, v in PAPER_TABLE5_MB.items()}}


def _to_best(r: dict[str, Any], epochs: int, model: NetworkModel) -> float:
    """Simulated transfer seconds of the run's critical path, scaled to its best epoch."""
    path = r["network_path"]
    return model.path_seconds(path["levels"], path["critical_bytes"]) * (r["best_epoch"] or epochs) / epochs


def network_figures(dataset: str, epochs: int, seeds: list[int],
                    runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    bw = {label: {str(b): float(np.mean([_to_best(r, epochs, NetworkModel(b, 10.0)) for r in rs]))
                  for b in BANDWIDTHS_MBPS} for label, rs in runs.items()}
    lat = {label: {str(m): float(np.mean([_to_best(r, epochs, NetworkModel(50.0, m)) for r in rs]))
                   for m in LATENCIES_MS} for label, rs in runs.items()}
    meta = {"dataset": dataset, "epochs": epochs, "seeds": seeds,
            "what": "simulated network seconds to the best epoch (critical path scaled by best_epoch / epochs)"}
    return {"fig4_bandwidth": {**meta, "latency_ms": 10.0, "seconds": bw},
            "fig5_latency": {**meta, "bandwidth_mbps": 50.0, "seconds": lat}}


def table7(dataset: str, epochs: int, seeds: list[int], runs: list[dict[str, Any]],
           links: list[dict[int, dict[str, int]]]) -> dict[str, Any]:
    """EASTER's runs re-priced with each passive party a high (1) or low (0) performance device."""
    rows: dict[str, Any] = {}
    for pattern in ("111", "110", "100", "000"):
        net, total = [], []
        for r, levels in zip(runs, links, strict=True):
            models: dict[str, NetworkModel] = {}
            for passive, bit in zip(r["passives"], pattern, strict=True):
                device = HIGH if bit == "1" else LOW
                models.update({f"{passive}->{r['active']}": device, f"{r['active']}->{passive}": device})
            seconds = link_transfer_seconds(levels, models, HIGH)
            net.append(seconds)
            total.append(seconds + r["wall_s"])
        rows[pattern] = {"per_party_accuracy": {p: float(np.mean([r["per_party"][p] for r in runs]))
                                                for p in runs[0]["per_party"]},
                         "network_s": float(np.mean(net)), "wall_s": float(np.mean([r["wall_s"] for r in runs])),
                         "total_s": float(np.mean(total)), "paper_mnist_min": PAPER_TABLE7_MIN[pattern]}
    return {"dataset": dataset, "epochs": epochs, "seeds": seeds, "high": asdict(HIGH), "low": asdict(LOW),
            "note": "wall s: all parties in one process (measured, the same run for every pattern); network s: "
                    "simulated over the whole run, each level at its slowest link", "rows": rows}


# -- Table VI: C of 10 fixed parts -----------------------------------------------------------------


def fixed_parts(scenario_width: int, height: int, n_parts: int = N_PARTS) -> list[list[str]]:
    """The image's pixel columns cut into ``n_parts`` fixed vertical strips, left to right."""
    bounds = np.linspace(0, scenario_width, n_parts + 1).round().astype(int)
    return [[f"px_{r}_{c}" for r in range(height) for c in range(lo, hi)] for lo, hi in zip(bounds[:-1], bounds[1:])]


def parties_section(counts: list[int], labels: list[str], epochs: int, seeds: list[int]) -> dict[str, Any]:
    parts = fixed_parts(28, 28)
    rows: dict[str, Any] = {}
    for c in counts:
        names = ("active", *(f"passive{i}" for i in range(1, c)))
        for label in labels:
            _, method, options, overrides = next(m for m in COMM_METHODS if m[0] == label)
            opts = _zoo(method, options, "mnist-5k")
            if method == "easter" and c == 2:
                opts["secagg"] = "none"  # one passive party: nothing to hide its embedding in
                opts.pop("ring_bits", None)
            runs = []
            for seed in seeds:
                spec = PartitionSpec(parties=c, seed=seed, features=dict(zip(names, parts, strict=False)))
                r = _train(_scenario("mnist-5k", seed, spec), method, opts, overrides, epochs=epochs, seed=seed,
                           select=False)
                runs.append(r)
                console.log(f"C = {c} {label:18s} seed {seed} acc {r['accuracy']:.4f} {r['wall_s']:.0f} s")
            acc, std = _mean_std([r["accuracy"] for r in runs])
            rows.setdefault(label, {})[str(c)] = {"accuracy": acc, "accuracy_std": std,
                                                  "accuracy_runs": [r["accuracy"] for r in runs],
                                                  "wall_s": float(np.mean([r["wall_s"] for r in runs])),
                                                  "comm_mb": float(np.mean([r["comm_mb"] for r in runs]))}
    return {"dataset": "mnist-5k", "epochs": epochs, "seeds": seeds, "lr": LR, "counts": counts,
            "protocol": f"{N_PARTS} fixed vertical strips of the 28x28 image; with C parties, party k holds strip k "
                        "(left to right), so C parties see C/10 of the image",
            "parts_columns": [sorted({int(x.rsplit('_', 1)[1]) for x in p}) for p in parts], "rows": rows,
            "paper_cinic10_accuracy": {k: dict(zip(map(str, (2, 4, 6, 8, 10)), v, strict=True))
                                       for k, v in PAPER_TABLE6.items()}}


# -- Fig. 6(b) at a fixed depth -----------------------------------------------------------------------


def fig6b_section(ratios: list[str], epochs: int, seeds: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    scenarios = {s: _scenario("mnist-5k", s) for s in seeds}
    for ratio in ratios:
        accs = [_train(scenarios[s], "easter", {"secagg": "none", "el_pl": ratio, "embedding_size": EMBEDDING}, {},
                       epochs=epochs, seed=s, select=False)["accuracy"] for s in seeds]
        mean, std = _mean_std(accs)
        out[ratio] = {"mean": mean, "std": std, "runs": accs}
        console.log(f"fig6b EL:PL {ratio}: {100 * mean:.2f} ± {100 * std:.2f}")
    return {"dataset": "mnist-5k", "epochs": epochs, "seeds": seeds, "lr": LR, "secagg": "none",
            "total_linear_layers": sum(int(v) for v in ratios[0].split(":")), "by_el_pl": out,
            "best_el_pl": max(out, key=lambda k: out[k]["mean"]), "paper_fmnist_best_el_pl": "1:1"}


# -- printing ----------------------------------------------------------------------------------------


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "not reached" if v is None else format(v, spec)


def print_all(fig: dict[str, Any]) -> None:
    if "table5" in fig:
        t = fig["table5"]
        table = Table(title=f"Table V ({t['dataset']}, {t['epochs']} epochs, seeds {t['seeds']}): MB to validation "
                            f"accuracy {100 * t['target_val_accuracy']:.0f} % and to the best epoch; paper FMNIST "
                            "EASTER / PyVertical = 0.60")
        for col in ("Method", "test acc %", "MB/epoch", "/ PyV", "MB to target", "/ PyV", "MB to best", "/ PyV"):
            table.add_column(col, justify="left" if col == "Method" else "right")
        for label, r in t["rows"].items():
            table.add_row(label, f"{100 * r['accuracy']:.2f} ± {100 * r['accuracy_std']:.2f}",
                          f"{r['mb_per_epoch']:.1f}", f"{r['bytes_per_epoch_over_pyvertical']:.2f}",
                          _fmt(r["mb_to_target"], ".1f"), _fmt(r["mb_to_target_over_pyvertical"]),
                          f"{r['mb_to_best_epoch']:.1f}", f"{r['mb_to_best_over_pyvertical']:.2f}")
        console.print(table)
    for key, unit in (("fig4_bandwidth", "Mbit/s"), ("fig5_latency", "ms")):
        if key in fig:
            f = fig[key]
            cols = list(next(iter(f["seconds"].values())))
            table = Table(title=f"{key}: simulated network s to the best epoch ({f['dataset']})")
            table.add_column("Method")
            for c in cols:
                table.add_column(f"{c} {unit}", justify="right")
            for label, row in f["seconds"].items():
                table.add_row(label, *(f"{row[c]:.1f}" for c in cols))
            console.print(table)
    if "table7" in fig:
        t = fig["table7"]
        table = Table(title=f"Table VII ({t['dataset']}, EASTER dh, {t['epochs']} epochs): 1 = 100 Mbit/s 10 ms, "
                            "0 = 10 Mbit/s 100 ms")
        for col in ("x1 x2 x3", "accuracy % (parties)", "wall s", "network s", "total s", "paper MNIST min"):
            table.add_column(col, justify="right")
        for pattern, r in t["rows"].items():
            accs = " / ".join(f"{100 * a:.2f}" for a in r["per_party_accuracy"].values())
            table.add_row(" ".join(pattern), accs, f"{r['wall_s']:.0f}", f"{r['network_s']:.0f}",
                          f"{r['total_s']:.0f}", f"{r['paper_mnist_min']:.2f}")
        console.print(table)
    if "table6_fixed_parts" in fig:
        p = fig["table6_fixed_parts"]
        table = Table(title=f"Table VI, C of 10 fixed strips (mnist-5k, {p['epochs']} epochs, seeds {p['seeds']}): "
                            "accuracy % / wall s (paper CINIC-10)")
        table.add_column("Method")
        for c in p["counts"]:
            table.add_column(f"C = {c}", justify="right")
        for label, cells in p["rows"].items():
            paper = p["paper_cinic10_accuracy"].get(label.split(" ")[0], {})
            table.add_row(label, *(f"{100 * cells[str(c)]['accuracy']:.1f} ± {100 * cells[str(c)]['accuracy_std']:.1f}"
                                   f" / {cells[str(c)]['wall_s']:.0f} ({paper.get(str(c), float('nan')):.1f})"
                                   for c in p["counts"]))
        console.print(table)
    if "fig6b_fixed_depth" in fig:
        f = fig["fig6b_fixed_depth"]
        table = Table(title=f"Fig. 6(b) at {f['total_linear_layers']} linear layers (mnist-5k, {f['epochs']} epochs, "
                            f"seeds {f['seeds']})")
        table.add_column("EL:PL")
        table.add_column("accuracy %", justify="right")
        for k, v in f["by_el_pl"].items():
            table.add_row(k, f"{100 * v['mean']:.2f} ± {100 * v['std']:.2f}")
        console.print(table)


def _pm(mean: float, std: float) -> str:
    return f"{100 * mean:.2f} ± {100 * std:.2f}"


def markdown(fig: dict[str, Any]) -> str:
    """The docs tables (docs/easter.md) from one or more runs' figures."""
    out: list[str] = []
    if "table5" in fig:
        t = fig["table5"]
        paper = t["paper_fmnist_mb_over_pyvertical"]
        out += [f"**Table V** ({t['dataset']}, {t['epochs']} epochs, seeds {t['seeds']}, lr {t['lr']:g}; MB to the "
                f"first epoch with validation accuracy ≥ {100 * t['target_val_accuracy']:.0f} % and to the best "
                "epoch, each / PyVertical's)", "",
                "| Method | test accuracy % | MB / epoch | / PyV | MB to target | / PyV | MB to best epoch | / PyV "
                "| paper FMNIST / PyV |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for label, r in t["rows"].items():
            p = paper.get(label.split(" ")[0])
            out.append(f"| {label} | {_pm(r['accuracy'], r['accuracy_std'])} | {r['mb_per_epoch']:.1f} | "
                       f"{r['bytes_per_epoch_over_pyvertical']:.2f} | {_fmt(r['mb_to_target'], '.1f')} | "
                       f"{_fmt(r['mb_to_target_over_pyvertical'])} | {r['mb_to_best_epoch']:.1f} | "
                       f"{r['mb_to_best_over_pyvertical']:.2f} | {'—' if p is None else f'{p:.2f}'} |")
        out.append("")
    for key, unit, fixed in (("fig4_bandwidth", "Mbit/s", "latency 10 ms"), ("fig5_latency", "ms", "50 Mbit/s")):
        if key in fig:
            f = fig[key]
            cols = list(next(iter(f["seconds"].values())))
            out += [f"**{'Fig. 4' if key.startswith('fig4') else 'Fig. 5'}** ({f['dataset']}, {fixed}; simulated "
                    f"network seconds to the best epoch, mean over seeds {f['seeds']})", "",
                    "| Method | " + " | ".join(f"{float(c):g} {unit}" for c in cols) + " |",
                    "|---|" + "---:|" * len(cols)]
            out += [f"| {label} | " + " | ".join(f"{row[c]:.1f}" for c in cols) + " |"
                    for label, row in f["seconds"].items()]
            out.append("")
    if "table7" in fig:
        t = fig["table7"]
        out += [f"**Table VII** ({t['dataset']}, EASTER `dh`, {t['epochs']} epochs, seeds {t['seeds']}; 1 = "
                f"{t['high']['bandwidth_mbps']:g} Mbit/s / {t['high']['latency_ms']:g} ms, 0 = "
                f"{t['low']['bandwidth_mbps']:g} Mbit/s / {t['low']['latency_ms']:g} ms)", "",
                "| x1 x2 x3 | accuracy % (active / passive1-3) | wall s | network s | total s | paper MNIST min |",
                "|---|---:|---:|---:|---:|---:|"]
        for pattern, r in t["rows"].items():
            accs = " / ".join(f"{100 * a:.2f}" for a in r["per_party_accuracy"].values())
            out.append(f"| {' '.join(pattern)} | {accs} | {r['wall_s']:.0f} | {r['network_s']:.0f} | "
                       f"{r['total_s']:.0f} | {r['paper_mnist_min']:.2f} |")
        out.append("")
    if "table6_fixed_parts" in fig:
        p6 = fig["table6_fixed_parts"]
        out += [f"**Table VI, C of 10 fixed strips** (mnist-5k, {p6['epochs']} epochs, seeds {p6['seeds']}, lr "
                f"{p6['lr']:g}; accuracy % mean ± std / wall s; the paper's CINIC-10 accuracy in brackets)", "",
                "| Method | " + " | ".join(f"C = {c}" for c in p6["counts"]) + " |",
                "|---|" + "---:|" * len(p6["counts"])]
        for label, cells in p6["rows"].items():
            paper6 = p6["paper_cinic10_accuracy"].get(label.split(" ")[0], {})
            out.append(f"| {label} | " + " | ".join(
                f"{_pm(cells[str(c)]['accuracy'], cells[str(c)]['accuracy_std'])} / {cells[str(c)]['wall_s']:.0f}"
                f" ({paper6.get(str(c), float('nan')):.1f})" for c in p6["counts"]) + " |")
        out.append("")
    if "fig6b_fixed_depth" in fig:
        f6 = fig["fig6b_fixed_depth"]
        out += [f"**Fig. 6(b) at {f6['total_linear_layers']} linear layers** (mnist-5k, EASTER `secagg=none`, "
                f"{f6['epochs']} epochs, seeds {f6['seeds']}, lr {f6['lr']:g}; mean accuracy of the parties' models %)",
                "", "| EL:PL | accuracy % |", "|---|---:|"]
        out += [f"| {k} | {_pm(v['mean'], v['std'])} |" for k, v in f6["by_el_pl"].items()]
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny: digits comm, C in {2, 4}, 1 seed (~1-2 min)")
    parser.add_argument("--out", help="write the figures to this JSON file (after every section)")
    parser.add_argument("--sections", default="comm,parties,fig6b")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=10, help="epochs of the comm runs (mnist-5k)")
    parser.add_argument("--sweep-epochs", type=int, default=5, help="epochs of the parties and fig6b runs")
    parser.add_argument("--markdown", nargs="+", metavar="FILE.json",
                        help="print the docs tables of earlier runs' JSON files (merged in order) and exit")
    parser.add_argument("--party-seeds", type=int, default=2, help="seeds of the parties section")
    parser.add_argument("--party-methods", default=",".join(SWEEP_METHODS),
                        help="methods of the parties section (comma-separated labels)")
    args = parser.parse_args(argv)
    if args.markdown:
        merged: dict[str, Any] = {}
        for path in args.markdown:
            merged.update(json.loads(Path(path).read_text()))
        print(markdown(merged))
        return merged
    torch.set_num_threads(1)
    sections = set(args.sections.split(","))
    seeds = [0] if args.quick else list(range(args.seeds))
    fig: dict[str, Any] = {"quick": args.quick, "cpus": os.cpu_count(), "lr": LR, "batch_size": BATCH}

    def write() -> None:
        if args.out:
            write_json(Path(args.out), fig, default=str)

    if "comm" in sections:
        dataset = "digits" if args.quick else "mnist-5k"
        fig.update(comm_section(dataset, 2 if args.quick else args.epochs, seeds,
                                0.90 if dataset == "mnist-5k" else 0.85))
        write()
    if "parties" in sections:
        counts = [2, 4] if args.quick else [2, 4, 6, 8, 10]
        labels = ["PyVertical", "EASTER dh 64-bit"] if args.quick else args.party_methods.split(",")
        fig["table6_fixed_parts"] = parties_section(counts, labels, 1 if args.quick else args.sweep_epochs,
                                                    [0] if args.quick else list(range(args.party_seeds)))
        write()
    if "fig6b" in sections:
        fig["fig6b_fixed_depth"] = fig6b_section(["4:2", "3:3", "2:4"], 1 if args.quick else args.sweep_epochs, seeds)
        write()
    print_all(fig)
    return fig


if __name__ == "__main__":
    main()

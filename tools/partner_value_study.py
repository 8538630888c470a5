"""How close is explore's partner-value estimate to the gain training actually measures? (issue 45)

For each table: the estimate (``securevfl explore --value``: a few secure SecureBoost trees on a sample
of the training rows, 2048-bit keys) against the gain measured by training each method with its
defaults on every training row and scoring the held-out test rows, with every party and without
each passive party (the active party alone: ``local`` for SplitNN; SecureBoost over the active party
for SecureBoost). SecureBoost's measured runs use ``encrypt=false`` — the same protocol in the clear,
which builds identical trees (docs/secureboost.md) — so that the study takes minutes, not hours.

    PYTHONPATH=. .venv/bin/python tools/partner_value_study.py --dataset adult --parties 3 --out out/value_adult.json
    PYTHONPATH=. .venv/bin/python tools/partner_value_study.py --dataset kdd04 --parties 3 --aligned 20000 \
        --out out/value_kdd04.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import numpy as np


def _measured(scenario: Any, method: str, parties: tuple[str, ...], seed: int) -> float:
    from securevfl.pipeline.partner_value import _subset
    from securevfl.pipeline.train import run_training
    from securevfl.run_config import run_config

    sub = _subset(scenario, parties, scenario.train, scenario.test)
    if method == "secureboost":
        config = run_config(method="secureboost", alignment="plaintext", seed=seed,
                            options={"encrypt": False})
    elif len(parties) == 1:
        config = run_config(method="local", alignment="plaintext", seed=seed, early_stopping=5)
    else:
        config = run_config(method="splitnn", alignment="plaintext", seed=seed, early_stopping=5)
    return float(run_training(config, scenario=sub).metrics["auc"])


def study(dataset: str, parties: int, aligned: int | None, methods: list[str], seed: int,
          value_rows: int, key_bits: int) -> dict[str, Any]:
    """The estimate and the measured gains of one table."""
    from securevfl.pipeline.partner_value import ValueOptions, estimate_value
    from securevfl.pipeline.train import build_scenario
    from securevfl.run_config import run_config

    settings: dict[str, Any] = {"dataset": dataset, "parties": parties, "alignment": "plaintext", "seed": seed}
    if aligned:
        settings["aligned"] = aligned
    scenario = build_scenario(run_config(**settings))
    started = time.perf_counter()
    estimate = estimate_value(scenario, ValueOptions(rows=value_rows, key_bits=key_bits, workers=2, seed=seed,
                                                     insecure_allow_small_key=key_bits < 2048),
                              progress=print)
    estimate["wall_s"] = time.perf_counter() - started
    out: dict[str, Any] = {"dataset": dataset, "parties": parties, "aligned": aligned, "seed": seed,
                           "train_rows": int(len(scenario.train)), "test_rows": int(len(scenario.test)),
                           "estimate": {k: v for k, v in estimate.items() if k != "runs"}, "measured": {}}
    for method in methods:
        aucs: dict[str, float] = {}
        every = scenario.parties
        aucs["all"] = _measured(scenario, method, every, seed)
        aucs["active only"] = _measured(scenario, method, (scenario.active,), seed)
        for p in scenario.passives:
            aucs[f"without {p}"] = (_measured(scenario, method, tuple(q for q in every if q != p), seed)
                                    if len(scenario.passives) > 1 else aucs["active only"])
        gains = {p: aucs["all"] - aucs[f"without {p}"] for p in scenario.passives}
        errors = {p: estimate["parties"][p]["gain"] - gains[p] for p in scenario.passives}
        out["measured"][method] = {"auc": aucs, "gain": gains, "estimate_minus_measured": errors,
                                   "gain_all": aucs["all"] - aucs["active only"],
                                   "within_0.01": all(abs(e) <= 0.01 for e in errors.values())}
        print(method, json.dumps(out["measured"][method]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="adult")
    parser.add_argument("--parties", type=int, default=3)
    parser.add_argument("--aligned", type=int, default=None)
    parser.add_argument("--methods", default="secureboost,splitnn")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--value-rows", type=int, default=8000)
    parser.add_argument("--key-bits", type=int, default=2048)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    results = [study(args.dataset, args.parties, args.aligned, args.methods.split(","), int(s), args.value_rows,
                     args.key_bits) for s in args.seeds.split(",")]
    print(f"{'seed':>4} {'method':<12} {'party':<10} {'estimate':>9} {'measured':>9} {'error':>8}")
    for r in results:
        for method, m in r["measured"].items():
            for p, gain in m["gain"].items():
                est = r["estimate"]["parties"][p]["gain"]
                print(f"{r['seed']:>4} {method:<12} {p:<10} {est:>+9.4f} {gain:>+9.4f} {est - gain:>+8.4f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2, default=lambda v: v.item() if isinstance(v, np.generic)
                                       else dataclasses.asdict(v)))
        print(f"written: {args.out}")


if __name__ == "__main__":
    main()

"""Which budget of the partner-value estimate tracks the measured gain? (issue 45; trees built in the clear).

SecureBoost builds the same trees with ``encrypt=false``, so the estimate's AUCs for a budget can be
found without the Paillier cost; ``tools/partner_value_study.py`` measures the gains to compare with.

    PYTHONPATH=. .venv/bin/python tools/value_budget_study.py --dataset adult --parties 3
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    from securevfl.pipeline.partner_value import ValueOptions, estimate_value
    from securevfl.pipeline.train import build_scenario
    from securevfl.run_config import run_config

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="adult")
    parser.add_argument("--parties", type=int, default=3)
    parser.add_argument("--aligned", type=int, default=None)
    parser.add_argument("--budgets", default="10x3x8000,20x3x8000,10x5x8000,20x5x8000,20x5x16000")
    parser.add_argument("--seeds", default="0", help="Seeds of the estimate's sample (its spread).")
    args = parser.parse_args()
    settings = {"dataset": args.dataset, "parties": args.parties, "alignment": "plaintext"}
    if args.aligned:
        settings["aligned"] = args.aligned
    scenario = build_scenario(run_config(**settings))
    for budget in args.budgets.split(","):
        trees, depth, rows = (int(x) for x in budget.split("x"))
        for seed in (int(s) for s in args.seeds.split(",")):
            started = time.perf_counter()
            value = estimate_value(scenario, ValueOptions(trees=trees, depth=depth, rows=rows, encrypt=False,
                                                          workers=2, seed=seed))
            gains = {p: round(e["gain"], 4) for p, e in value["parties"].items()}
            print(json.dumps({"budget": budget, "seed": seed, "gains": gains, "all": round(value["all_parties"], 4),
                              "alone": round(value["active_only"], 4),
                              "clear_s": round(time.perf_counter() - started, 1)}))


if __name__ == "__main__":
    main()

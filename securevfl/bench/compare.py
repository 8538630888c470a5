"""``securevfl bench compare OLD NEW``: per figure, the ratio of the medians and whether it regressed.

A figure *regressed* when it moved in its worse direction (slower time, lower rate or speed-up) by
more than the noise the two runs measured themselves: the larger of the two runs' spreads (median
minus best repetition), and at least ``min_change`` (5 % by default) of the old median, so a
one-repetition figure is not flagged for a 1 % wobble. A move in the better direction by more than
the same margin is an improvement; anything else is "within the spread". Two runs of different
configurations (size, matrix, dataset) do the same-named work at different sizes: the configuration
keys that differ are listed, and such a comparison says more about the configurations than the code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from securevfl.bench.results import load_results

REGRESSED, IMPROVED, SAME = "regressed", "improved", "within spread"


@dataclass(frozen=True)
class Change:
    """One figure in both runs."""

    name: str
    unit: str
    better: str
    old_median: float
    new_median: float
    ratio: float  # new / old medians
    margin: float  # allowed move, in the figure's unit
    verdict: str


def _spread(f: Mapping[str, Any]) -> float:
    best = f["min"] if f["better"] == "lower" else f["max"]
    return abs(float(f["median"]) - float(best))


def compare_figures(old: Mapping[str, Any], new: Mapping[str, Any], min_change: float = 0.05) -> list[Change]:
    """Changes for every figure present in both ``figures`` maps (results.json's ``figures``)."""
    out = []
    for name in sorted(set(old) & set(new)):
        a, b = old[name], new[name]
        om, nm = float(a["median"]), float(b["median"])
        margin = max(_spread(a), _spread(b), min_change * abs(om))
        worse = (nm - om) if a["better"] == "lower" else (om - nm)
        verdict = REGRESSED if worse > margin else IMPROVED if -worse > margin else SAME
        out.append(Change(name, a.get("unit", ""), a["better"], om, nm, nm / om if om else float("inf"), margin,
                          verdict))
    return out


def compare_files(old: str | Path, new: str | Path, min_change: float = 0.05) -> dict[str, Any]:
    """Compare two results.json files; figures only in one of them are listed by name."""
    a, b = load_results(old), load_results(new)
    changes = compare_figures(a["figures"], b["figures"], min_change)
    ca, cb = a.get("config", {}), b.get("config", {})
    differs = sorted(k for k in set(ca) | set(cb) if k != "command" and ca.get(k) != cb.get(k))
    return {"changes": changes, "config_differs": differs, "only_old": sorted(set(a["figures"]) - set(b["figures"])),
            "only_new": sorted(set(b["figures"]) - set(a["figures"])),
            "old_environment": a.get("environment", {}), "new_environment": b.get("environment", {})}

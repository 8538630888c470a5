"""The standard attack suite of one method: every applicable attack, and a defence sweep.

Used by ``securevfl attack`` and ``benchmarks/attacks.py``: one run with every attack (the
privacy section of its report), then one run per strength of a defence, each point the main-task
accuracy next to every attack's value — the privacy–utility trade-off — with an optional PNG.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from psi import atomic
from securevfl.attacks.base import attack_names


def applicable_attacks(method: str, parties: int) -> list[str]:
    """Every registered attack, less peer-inversion where it cannot apply (it needs EASTER, two passives)."""
    return [a for a in attack_names() if a != "peer-inversion" or (method == "easter" and parties >= 3)]


def privacy_utility(train: Callable[..., Any], defense: str, strengths: Sequence[float],
                    attacks: Sequence[str], **kwargs: Any) -> list[dict[str, Any]]:
    """One run per defence strength (0: none): accuracy and each attack's value."""
    points = []
    for strength in strengths:
        report = train(attacks=list(attacks), defenses={defense: strength} if strength else {}, **kwargs)
        points.append({"defense": defense, "strength": float(strength), "accuracy": report.metrics["accuracy"],
                       "crypto_s": sum(report.cost["crypto_s"].values()),
                       "attacks": {r["attack"]: r["value"] for r in report.privacy}})
    return points


def plot_privacy_utility(points: Sequence[Mapping[str, Any]], path: Path, title: str) -> Path:
    """Attack value (x) against accuracy (y), one line per attack, one marker per strength."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4))
    names = sorted({a for p in points for a, v in p["attacks"].items() if v is not None})
    for name in names:
        xs = [p["attacks"].get(name) for p in points]
        kept = [(x, p) for x, p in zip(xs, points) if x is not None]
        ax.plot([x for x, _ in kept], [p["accuracy"] for _, p in kept], marker="o", label=name)
        for x, p in kept:
            ax.annotate(f"{p['strength']:g}", (x, p["accuracy"]), fontsize=7)
    ax.set_xlabel("attack value (AUC / accuracy / R²)")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0.0, 1.0)
    ax.set_title(title)
    ax.legend(fontsize=7)
    with atomic.atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


__all__ = ["applicable_attacks", "plot_privacy_utility", "privacy_utility"]

"""RunReport: what one run measured, written as JSON (for machines) and Markdown (for people)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from psi import atomic
from securevfl.federation.meter import MeterSnapshot, NetworkModel, critical_path


def cost_from_snapshots(snapshots: Mapping[str, MeterSnapshot], network: NetworkModel) -> dict[str, Any]:
    """The report's ``cost`` block: totals over parties, per-link traffic, rounds, simulated network."""
    total = MeterSnapshot()
    for snap in snapshots.values():
        total = total.merged(snap)
    return {
        "compute_s": total.compute_s,
        "crypto_s": total.crypto_s,
        "serialize_s": total.serialize_s,
        "comm": {"bytes": dict(sorted(total.bytes.items())), "messages": dict(sorted(total.messages.items()))},
        "total_bytes": sum(total.bytes.values()),
        "rounds": total.rounds,
        "simulated_network_s": network.transfer_seconds(total.depth_link_bytes),
        "network_path": dict(zip(("levels", "critical_bytes"), critical_path(total.depth_link_bytes))),
        "network_model": asdict(network),
        "phases": {
            phase: {"bytes": total.phase_bytes.get(phase, 0),
                    "wall_s": max(s.phase_seconds.get(phase, 0.0) for s in snapshots.values())}
            for phase in dict.fromkeys(p for s in snapshots.values() for p in s.phase_seconds)
        },
        "per_party": {
            name: {"compute_s": s.compute_s, "crypto_s": s.crypto_s, "serialize_s": s.serialize_s,
                   "bytes_sent": sum(v for k, v in s.bytes.items() if k.startswith(name + "->"))}
            for name, s in snapshots.items()
        },
    }


@dataclass
class RunReport:
    """Everything a run measured. ``to_dict`` is the JSON contract documented in the README."""

    method: str
    dataset: str
    config: dict[str, Any]
    metrics: dict[str, Any]
    cost: dict[str, Any]
    wall_s: float
    parties: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    privacy: list[dict[str, Any]] = field(default_factory=list)  # attack results (securevfl.attacks)
    #: The active party's test predictions (``ids``, ``scores``) of an in-process run: for checking a
    #: saved model against the run that made it. Never written to the report files.
    test_predictions: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(replace(self, test_predictions=None))
        del out["test_predictions"]
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=jsonable)

    def to_markdown(self) -> str:
        """A human-readable summary: metrics, time split, traffic per link."""
        lines = [f"# securevfl run: {self.method} on {self.dataset}", ""]
        lines += ["## Metrics", "", "| metric | value |", "|---|---|"]
        for k, v in self.metrics.items():
            if isinstance(v, float):
                lines.append(f"| {k} | {v:.4f} |")
        per_party = self.metrics.get("per_party")
        if per_party:
            lines += ["", "| party | " + " | ".join(next(iter(per_party.values()))) + " |",
                      "|---|" + "---|" * len(next(iter(per_party.values())))]
            for party, m in per_party.items():
                lines.append(f"| {party} | " + " | ".join(f"{v:.4f}" for v in m.values()) + " |")
        c = self.cost
        n = len(c.get("per_party", {}))
        summed = f" (summed over {n} parties)" if n > 1 else ""
        lines += ["", "## Cost", "", "| category | seconds |", "|---|---|",
                  f"| model compute{summed} | {c['compute_s']:.3f} |",
                  f"| serialisation{summed} | {c['serialize_s']:.3f} |"]
        for prim, s in c["crypto_s"].items():
            lines.append(f"| crypto: {prim} | {s:.3f} |")
        lines += [f"| simulated network ({c['network_model']['bandwidth_mbps']} Mbit/s, "
                  f"{c['network_model']['latency_ms']} ms) | {c['simulated_network_s']:.3f} |",
                  f"| wall clock | {self.wall_s:.3f} |", "",
                  *([f"Model compute, crypto and serialisation are summed over the {n} parties, which run side "
                     "by side: the sum may exceed the wall clock.", ""] if n > 1 else []),
                  f"Communication rounds: {c['rounds']}; total bytes: {c['total_bytes']:,}", "",
                  "| link | bytes | messages |", "|---|---|---|"]
        for link, b in c["comm"]["bytes"].items():
            lines.append(f"| {link} | {b:,} | {c['comm']['messages'][link]:,} |")
        if self.parties:
            lines += ["", "## Parties", "", "| party | rows | features | aligned | unaligned | local preprocessing |",
                      "|---|---|---|---|---|---|"]
            for name, p in self.parties.items():
                prep = preprocessing_line(p["preprocessing"]) if p.get("preprocessing") else "not known here"
                lines.append(f"| {name} | {p['rows']} | {p['features']} | {p['aligned']} | {p['unaligned']} | "
                             f"{prep} |")
            for name, p in self.parties.items():
                if p.get("classes"):
                    positive = f"; positive class (F1, AUC): {p['positive_class']}" if "positive_class" in p else ""
                    lines += ["", f"Classes (label at {name}): {', '.join(map(str, p['classes']))}{positive}"]
                encoded = p.get("preprocessing", {}).get("encoded_columns", [])
                if encoded:
                    more = f" ... ({len(encoded)} in all)" if len(encoded) > 40 else ""
                    lines += ["", f"Encoded columns of {name}: " + ", ".join(encoded[:40]) + more]
        if self.privacy:
            lines += ["", "## Privacy (attacks on what each party received)", "",
                      "| attack | attacker | target | metric | value | random guess | own data only | note |",
                      "|---|---|---|---|---|---|---|---|"]
            for r in self.privacy:
                value = "n/a" if r["value"] is None else f"{r['value']:.3f}"
                own = "" if r.get("own_data") is None else f"{r['own_data']:.3f}"
                lines.append(f"| {r['attack']} | {r['attacker']} | {r['target']} | {r['metric']} | {value} | "
                             f"{r['baseline']:.3f} | {own} | {r['note']} |")
        if self.notes:
            lines += ["", "## Notes", ""] + [f"- {n}" for n in self.notes]
        return "\n".join(lines) + "\n"

    def save(self, path: str | Path) -> tuple[Path, Path]:
        """Write ``path`` (JSON) and the same name with ``.md``; returns both paths."""
        json_path, md_path = report_paths(path)
        atomic.write_text(json_path, self.to_json())  # never half a report, even on a crash or a full disk
        atomic.write_text(md_path, self.to_markdown())
        return json_path, md_path


def preprocessing_line(summary: Mapping[str, Any]) -> str:
    """One line for a party's preprocessing summary (``parties.<name>.preprocessing`` of a report)."""
    parts = [f"{summary.get('input_columns', 0)} columns, fitted on {summary.get('fitted_rows', 0)} training rows"]
    numeric = summary.get("numeric", [])
    if numeric:
        parts.append(f"{len(numeric)} numeric" + (" standardised" if summary.get("standardised") else ""))
    if summary.get("imputed"):
        parts.append("median + missing flag: " + ", ".join(f"{c} ({n})" for c, n in summary["imputed"].items()))
    if summary.get("dates"):
        parts.append("dates (year, month, weekday): " + ", ".join(summary["dates"]))
    if summary.get("one_hot"):
        parts.append("one-hot: " + ", ".join(f"{c} ({n})" for c, n in summary["one_hot"].items()))
    if summary.get("hashed"):
        parts.append("hashed: " + ", ".join(f"{c} ({h['levels']} levels -> {h['buckets']})"
                                            for c, h in summary["hashed"].items()))
    if summary.get("dropped"):
        parts.append("dropped: " + ", ".join(summary["dropped"]))
    return "; ".join(parts)


def report_paths(report: str | Path) -> tuple[Path, Path]:
    """The JSON and Markdown files :meth:`RunReport.save` writes for ``report``."""
    path = Path(report)
    json_path = path if path.suffix == ".json" else path.with_suffix(".json")
    return json_path, json_path.with_suffix(".md")


def jsonable(value: Any) -> Any:
    """What ``json.dumps`` cannot write itself: numpy scalars and arrays, paths."""
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")

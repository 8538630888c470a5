"""The explore report: what the active party learned, as JSON (machines), Markdown and HTML (people).

:func:`assemble_explore_report` turns the active party's :class:`~securevfl.exploration.protocol.Findings`
into an :class:`ExploreReport`; ``to_dict`` is the JSON contract (docs/explore.md), and
:mod:`securevfl.exploration.render` draws the Markdown and the HTML page from that dict alone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from psi import atomic
from securevfl.exploration.woe import iv_strength
from securevfl.report.run_report import jsonable, report_paths

if TYPE_CHECKING:  # the protocol loads Paillier and the runtime: the CLI checks report paths without them
    from securevfl.exploration.options import ExploreOptions
    from securevfl.exploration.protocol import Findings, PartyFindings

#: |r| at or above which a cross-party pair of columns is listed as redundant.
REDUNDANT_R = 0.8


def _number(value: float) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def _column_entry(found: PartyFindings, j: int) -> dict[str, Any]:
    name = found.columns[j]
    entry: dict[str, Any] = {"name": name}
    if found.kinds:
        entry["kind"] = found.kinds[j]
    if found.stats is not None and name in found.stats:
        entry["stats"] = found.stats[name]
    labels = found.bins[j].get("labels") if found.bins else None
    counts = found.counts[j] if found.counts is not None else None
    if found.woe:
        table = found.woe[j]
        entry["iv"] = table.iv
        entry["strength"] = iv_strength(table.iv)
        bins = []
        for b in range(len(table.woe)):
            rows = float(table.events[b] + table.non_events[b])
            if rows <= 0 and (counts is None or counts[b] <= 0):
                continue
            bins.append({"bin": b, "label": labels[b] if labels else f"bin {b}",
                         "rows": int(counts[b]) if counts is not None else int(rows),
                         "events": float(table.events[b]), "non_events": float(table.non_events[b]),
                         "event_rate": _number(float(table.event_rate[b])), "woe": _number(float(table.woe[b])),
                         "iv": float(table.iv_terms[b])})
        entry["bins"] = bins
    if found.bins and "cuts" in found.bins[j]:
        entry["cuts"] = found.bins[j]["cuts"]
    return entry


@dataclass
class ExploreReport:
    """Everything exploring found. ``to_dict`` is the JSON contract; ``save`` writes JSON, Markdown and HTML."""

    dataset: str
    active: str
    rows: int
    events: int | None
    positive_class: str | None
    config: dict[str, Any]
    parties: dict[str, dict[str, Any]]
    ranking: list[dict[str, Any]]
    correlation: dict[str, dict[str, Any]]
    redundant: list[dict[str, Any]]
    cost: dict[str, Any]
    learned: dict[str, str]
    notes: list[str] = field(default_factory=list)
    value: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "explore", **asdict(self)}

    def ivs(self) -> dict[str, dict[str, float]]:
        """Each party's columns' IV (where a label of two classes made WOE possible)."""
        return {p: {c["name"]: c["iv"] for c in e["columns"] if "iv" in c} for p, e in self.parties.items()}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=jsonable)

    def to_markdown(self) -> str:
        from securevfl.exploration.render import markdown

        return markdown(json.loads(self.to_json()))

    def to_html(self) -> str:
        from securevfl.exploration.render import html

        return html(json.loads(self.to_json()))

    def save(self, path: str | Path) -> tuple[Path, Path, Path]:
        """Write ``PATH.json``, ``PATH.md`` and ``PATH.html``; returns the three paths."""
        json_path, md_path, html_path = explore_paths(path)
        atomic.write_text(json_path, self.to_json())
        atomic.write_text(md_path, self.to_markdown())
        atomic.write_text(html_path, self.to_html())
        return json_path, md_path, html_path


def explore_paths(report: str | Path) -> tuple[Path, Path, Path]:
    """The JSON, Markdown and HTML files :meth:`ExploreReport.save` writes for ``report``."""
    json_path, md_path = report_paths(report)
    return json_path, md_path, json_path.with_suffix(".html")


def check_explore_paths(report: str | Path) -> None:
    """Refuse, before any work, a report path whose JSON, Markdown or HTML file could not be written."""
    from securevfl.checks import check_output_file

    for path in explore_paths(report):
        check_output_file(path, "report file")


def learned(findings: Findings, options: ExploreOptions) -> dict[str, str]:
    """What each party learned, in words (the report says it next to the figures)."""
    noised = {p: f.epsilon for p, f in findings.parties.items() if f.epsilon is not None}  # each party's own choice
    noise = ("exact" if not noised else
             "noised with two-sided geometric noise, " + ", ".join(f"ε = {e:g} per column at {p}" for p, e in
                                                                 noised.items())
             + (", exact elsewhere" if len(noised) < len(findings.parties) - 1 else "")
             + " (replace-one-row adjacency; bin edges not covered)")
    if findings.events is None:
        active = "its own columns in the clear; per passive party and column, each bin's row count"
    else:
        active = (f"its own columns in the clear; per passive party and column, each bin's row count and event "
                  f"count ({noise}), hence WOE and IV")
    if findings.correlation:
        active += "; the Pearson correlation of each of its numeric columns with each of the passive party's"
    active += ("; a passive party's column names, statistics and bin edges only where it shares them "
               "(share_stats = summary)")
    passive = ("the number of rows explored and ciphertexts under the active party's key: nothing of the label, "
               "nothing of another party's columns")
    return {"active": active, "passive": passive}


def assemble_explore_report(findings: Findings, config: Any, options: ExploreOptions, scenario: Any,
                            snapshots: Mapping[str, Any], *, wall_s: float = 0.0,
                            links: Mapping[str, Any] | None = None) -> ExploreReport:
    """The report of one exploring run, from the active party's findings and every meter it knows."""
    from securevfl.report.run_report import cost_from_snapshots

    parties: dict[str, dict[str, Any]] = {}
    ranking = []
    for name, found in findings.parties.items():
        entry: dict[str, Any] = {"role": "active" if name == findings.active else "passive",
                                 "shared": found.shared, "epsilon": found.epsilon,
                                 "columns": [_column_entry(found, j) for j in range(len(found.columns))]}
        table = scenario.tables.get(name) if hasattr(scenario, "tables") else None
        if table is not None and name == findings.active:
            entry["rows_total"] = int(table.n_rows)
        parties[name] = entry
        for column in entry["columns"]:
            if "iv" in column:
                ranking.append({"party": name, "column": column["name"], "iv": column["iv"],
                                "strength": column["strength"]})
    ranking.sort(key=lambda r: (-r["iv"], r["party"], r["column"]))
    for rank, row in enumerate(ranking, start=1):
        row["rank"] = rank
    correlation: dict[str, dict[str, Any]] = {}
    redundant: list[dict[str, Any]] = []
    for party, (mine, theirs, matrix) in findings.correlation.items():
        correlation[party] = {"active_columns": list(mine), "columns": list(theirs), "r": matrix.tolist()}
        for i, a in enumerate(mine):
            for j, b in enumerate(theirs):
                if abs(matrix[i, j]) >= REDUNDANT_R:
                    redundant.append({"active_column": a, "party": party, "column": b, "r": float(matrix[i, j])})
    redundant.sort(key=lambda r: -abs(float(r["r"])))
    cost = cost_from_snapshots(snapshots, config.network)
    cost["timing"] = dict(findings.timing)
    if links:
        cost["links"] = dict(links)
    notes = []
    classes = tuple(getattr(scenario, "classes", ()) or ())
    positive = None
    if findings.events is None:
        notes.append("the label is not of two classes (a regression target): no WOE / IV; statistics and "
                     "correlations only")
    else:
        positive_index = 1 if config.positive_class is None else [str(c) for c in classes].index(config.positive_class)
        positive = str(classes[positive_index]) if len(classes) > positive_index else None
        if len(classes) > 2:
            notes.append(f"a label of {len(classes)} classes: WOE / IV of {positive!r} against the rest")
    settings = {"max_bins": options.max_bins, "key_bits": options.key_bits, "backend": options.backend,
                "epsilon": options.epsilon, "adjustment": options.adjustment, "correlation": options.correlation,
                "share_stats": options.share_stats, "alignment": config.alignment, "seed": config.partition.seed,
                "explored_rows": "the training rows of the rows every party holds"}
    return ExploreReport(dataset=getattr(scenario, "dataset", "") or config.dataset, active=findings.active,
                         rows=findings.rows, events=findings.events, positive_class=positive, config=settings,
                         parties=parties, ranking=ranking, correlation=correlation, redundant=redundant, cost=cost,
                         learned=learned(findings, options), notes=notes, wall_s=wall_s)


__all__ = ["REDUNDANT_R", "ExploreReport", "assemble_explore_report", "check_explore_paths", "explore_paths"]

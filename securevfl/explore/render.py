"""Markdown and HTML of an explore report, drawn from its JSON dict alone (placeholder; see the helper's version)."""

from __future__ import annotations

from typing import Any


def markdown(report: dict[str, Any]) -> str:
    """The report as Markdown."""
    lines = [f"# Explore: {report['dataset']}", ""]
    for row in report["ranking"]:
        lines.append(f"- {row['rank']}. {row['party']}.{row['column']}: IV {row['iv']:.4f} ({row['strength']})")
    return "\n".join(lines) + "\n"


def html(report: dict[str, Any]) -> str:
    """The report as one HTML page."""
    return "<html><body><pre>" + markdown(report) + "</pre></body></html>"

"""Run reports: JSON and Markdown."""

from securevfl.report.run_report import RunReport, cost_from_snapshots

__all__ = ["RunReport", "cost_from_snapshots"]

"""Evaluation: metrics on held-out data."""

from securevfl.eval.metrics import classification_metrics

__all__ = ["classification_metrics"]

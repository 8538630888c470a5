"""Evaluation: metrics on held-out data."""

from securevfl.eval.metrics import (
    classification_metrics,
    imbalanced,
    positive_index,
    regression_metrics,
    task_metrics,
)

__all__ = ["classification_metrics", "imbalanced", "positive_index", "regression_metrics", "task_metrics"]

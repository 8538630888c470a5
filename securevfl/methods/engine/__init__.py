"""The split-learning engine: one party loop, and the method families written on it.

* :mod:`.loop` — :class:`PartySide` (a party's hooks) and :func:`run_side` (epochs, batches,
  history, progress, early stopping, checkpoint/resume, evaluation), for every split method;
* :mod:`.split` — :class:`SplitMethod`: bottoms, encode/decode, combine, top (SplitNN, C-VFL);
* :mod:`.aggregate` — :class:`AggregateMethod`: contributions summed by an aggregation scheme,
  one shared loss or a loss per party (Agg-VFL, EASTER);
* :mod:`.checkpoint` — each party's own checkpoints;
* :mod:`.objective` — what the active party's model minimises (cross-entropy or squared error);
* :mod:`.defenses` — the run-level defences the engine applies (gradient noise / sparsification,
  label DP).
"""

from securevfl.methods.engine.loop import (
    TEST,
    TRAIN,
    VALIDATE,
    EngineRecord,
    Evaluation,
    PartySide,
    TrainingState,
    run_side,
)
from securevfl.methods.engine.split import SplitActive, SplitMethod, SplitPassive, checked_tensor, side_role

__all__ = ["TEST", "TRAIN", "VALIDATE", "EngineRecord", "Evaluation", "PartySide", "SplitActive", "SplitMethod",
           "SplitPassive", "TrainingState", "checked_tensor", "run_side", "side_role"]

"""Entity Augmentation's pure pieces: interpolated labels, their losses, entity schedules, activation queues.

Algorithm 1 of Amalanshu et al. (2024) without any messages: what the host computes from the
guests' activations and what every party derives from the run seed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from securevfl.errors import ConfigError, DataError, ProtocolError
from securevfl.methods.entity_aug.options import LOSSES
from securevfl.seeding import simulation_rng


def interpolate_labels(labels: Sequence[np.ndarray], weights: Sequence[float],
                       n_classes: int) -> np.ndarray:
    """Algorithm 1, line 11: ``sum_i w_i onehot(labels_i) / sum_i w_i`` row by row.

    ``labels[i]`` holds the class of the entity behind part ``i`` of each concatenated input;
    ``weights[i]`` is that part's activation dimension. Each output row sums to 1.
    """
    if len(labels) != len(weights) or not labels:
        raise ConfigError(f"need one weight per label array, got {len(labels)} arrays "
                          f"and {len(weights)} weights")
    w = np.asarray(weights, dtype=np.float64)
    if np.any(w < 0) or not w.sum() > 0:
        raise ConfigError(f"weights must be >= 0 with a positive sum, got {list(weights)}")
    rows = {len(a) for a in labels}
    if len(rows) != 1:
        raise ConfigError(f"label arrays differ in length: {sorted(rows)}")
    out = np.zeros((rows.pop(), n_classes), dtype=np.float64)
    for wi, lab in zip(w, labels, strict=True):
        lab = np.asarray(lab, dtype=np.int64)
        if lab.size and (lab.min() < 0 or lab.max() >= n_classes):
            raise DataError(f"label outside 0..{n_classes - 1}")
        out[np.arange(len(lab)), lab] += wi
    return (out / w.sum()).astype(np.float32)


def soft_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy against probability targets (the usual loss for one-hot targets)."""
    return F.cross_entropy(logits, targets)


def soft_binary_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The paper's loss (Sec. 5.5): a sigmoid on every class logit, BCE against the interpolated label.

    ``-mean(t log sigmoid(z) + (1 - t) log(1 - sigmoid(z)))`` over rows and classes: PyTorch's
    ``BCEWithLogitsLoss``, which "internally calculates a sigmoid".
    """
    return F.binary_cross_entropy_with_logits(logits, targets)


def interpolated_loss(name: str, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The training loss ``name`` (``bce`` or ``ce``) against interpolated (soft) labels."""
    if name == "bce":
        return soft_binary_cross_entropy(logits, targets)
    if name == "ce":
        return soft_cross_entropy(logits, targets)
    raise ConfigError(f"loss must be one of {', '.join(LOSSES)}, got {name!r}")


def entity_schedule(n_aligned: int, n_extra: int, length: int, *, seed: int, epoch: int, party: str,
                    misalign: bool = False) -> np.ndarray:
    """One epoch of entity indices (``length`` of them) for one party.

    Indices ``0..n_aligned-1`` are the aligned rows in the agreed order; ``n_aligned..`` the
    party's other labelled rows. Unless ``misalign``, aligned rows go to slots every party derives
    from the run seed (the first draw equals :func:`securevfl.methods.base.batch_plan`'s order, so
    a fully aligned schedule is SplitNN's), and the remaining slots get the party's other rows in
    its own order, reused when it has fewer than the slots and rotated across epochs when it has
    more. With ``misalign`` all rows go in the party's own order. Pure function of its arguments.
    """
    total = n_aligned + n_extra
    if length < 1 or total < 1:
        raise ConfigError(f"empty schedule: length={length}, rows={total}")
    own = simulation_rng(seed, epoch, party)
    if misalign:
        return _fill(np.arange(total), length, own)
    if n_aligned > length:
        raise ConfigError(f"{n_aligned} aligned rows do not fit an epoch of {length} slots")
    shared = simulation_rng(seed, epoch)
    aligned_order = shared.permutation(n_aligned)
    out = np.empty(length, dtype=np.int64)
    if n_aligned == length:
        out[:] = aligned_order
        return out
    slots = np.sort(shared.choice(length, size=n_aligned, replace=False))
    free = np.ones(length, dtype=bool)
    free[slots] = False
    out[slots] = aligned_order
    n_free = int(free.sum())
    if n_extra == 0:
        # nothing else to send: reuse aligned rows
        out[free] = _fill(np.arange(n_aligned), n_free, own)
    else:
        out[free] = _fill(n_aligned + np.arange(n_extra), n_free, own)
    return out


def _fill(pool: np.ndarray, length: int, rng: np.random.Generator) -> np.ndarray:
    """``length`` items from ``pool``: whole shuffled passes, then a shuffled partial pass."""
    reps = -(-length // len(pool))
    return np.concatenate([rng.permutation(pool) for _ in range(reps)])[:length]


@dataclass
class ActivationQueue:
    """Per-guest queue at the host (Algorithm 1, ``Q_i`` and ``Q_label,i``).

    ``put`` stores an activation and the labels of its rows (resolved from the entity keys when it
    arrives, so a checkpointed queue does not depend on a run's PSI order); ``read`` returns the
    newest one and whether it arrived since the last read. When a guest misses a step the host
    reads its last activation again (fault tolerance). ``maxlen`` bounds the memory held.
    """

    maxlen: int = 1
    _items: deque = field(default_factory=deque)
    _fresh: bool = False
    reused: int = 0

    def put(self, activation: torch.Tensor, labels: np.ndarray) -> None:
        """Store the newest activation of this guest with the labels of its rows."""
        self._items.append((activation, np.asarray(labels)))
        while len(self._items) > self.maxlen:
            self._items.popleft()
        self._fresh = True

    def read(self) -> tuple[torch.Tensor, np.ndarray, bool]:
        """Return the newest activation, its labels, and whether it is new since the last read."""
        if not self._items:
            raise ProtocolError("no activation received yet from this guest; nothing to reuse")
        fresh, self._fresh = self._fresh, False
        if not fresh:
            self.reused += 1
        activation, labels = self._items[-1]
        return activation, labels, fresh

    def state_dict(self) -> dict[str, Any]:
        """The queued activations and counters, as tensors and numbers (for a checkpoint)."""
        return {"items": [[a, torch.as_tensor(k)] for a, k in self._items], "fresh": self._fresh,
                "reused": self.reused}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._items = deque((a, np.asarray(k)) for a, k in state["items"])
        self._fresh, self.reused = bool(state["fresh"]), int(state["reused"])

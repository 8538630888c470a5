"""What each party keeps of a SecureBoost model, and the joint walk of its trees.

The active party keeps the trees' structure — per node its children, the *owner* party of its split
and the owner's record id, the side of the rows the owner does not hold (``absent_left``: the
default direction it learned, partial coverage), or its leaf weight — and the lookup table of its
own splits. A passive
party keeps only its own lookup table: per record the feature, the threshold and the side of missing
values (SecureBoost's lookup table, Cheng et al. 2021, Fig. 2). Nobody holds another party's
threshold; the active party never learns which feature a passive record splits on.

Both live in torch modules of buffers (:class:`TreeArrays`, :class:`SplitTable`) so they are saved
like every other model part (safetensors: no code runs on load).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from securevfl.errors import ModelError

TREES, SPLITS = "trees", "splits"
LEAF = -1


class _Buffers(nn.Module):
    """A module of named 1-d buffers (the saved arrays)."""

    fields: tuple[tuple[str, torch.dtype], ...] = ()

    def __init__(self, arrays: Mapping[str, np.ndarray] | None = None) -> None:
        super().__init__()
        for name, dtype in self.fields:
            value = np.zeros(0) if arrays is None else np.asarray(arrays[name])
            self.register_buffer(name, torch.as_tensor(value).to(dtype).clone())

    @classmethod
    def shaped_like(cls, weights: Mapping[str, torch.Tensor]) -> _Buffers:
        """Empty buffers of the saved shapes (for loading a saved part); a missing field is a ModelError."""
        missing = [n for n, _ in cls.fields if n not in weights]
        if missing:
            raise ModelError(f"the saved {cls.__name__} lacks {', '.join(missing)}")
        return cls({n: np.zeros(tuple(weights[n].shape)) for n, _ in cls.fields})

    def array(self, name: str) -> np.ndarray:
        return np.asarray(self.get_buffer(name).detach().cpu().numpy())


class SplitTable(_Buffers):
    """A party's own splits: record r sends x to the left iff ``x[feature] <= threshold`` (NaN: ``missing_left``)."""

    fields = (("feature", torch.int64), ("threshold", torch.float64), ("missing_left", torch.int64),
              ("tree", torch.int64))

    def go_left(self, X: np.ndarray, rows: np.ndarray, records: np.ndarray) -> np.ndarray:
        """For each (row, record) query, whether the row goes left at that record."""
        feature, threshold = self.array("feature"), self.array("threshold")
        missing_left = self.array("missing_left").astype(bool)
        if len(records) and (records.min() < 0 or records.max() >= len(feature)):
            raise ModelError(f"a split record id outside this party's {len(feature)} records was asked for")
        values = X[rows, feature[records]]
        nan = np.isnan(values)
        with np.errstate(invalid="ignore"):
            left = values <= threshold[records]
        return np.where(nan, missing_left[records], left)


class TreeArrays(_Buffers):
    """Every tree's nodes, concatenated: children (or :data:`LEAF`), owner party, record, leaf weight.

    ``roots[t]`` is tree t's root node and ``output[t]`` the output column it adds to; ``absent_left[k]``
    whether a row the owner of node k does not hold goes left there (0 at the active party's nodes and
    where training had every row: XGBoost's default, right). A model saved before it had no
    ``absent_left``: every such row goes right (:meth:`with_defaults`).
    """

    fields = (("left", torch.int64), ("right", torch.int64), ("owner", torch.int64), ("record", torch.int64),
              ("value", torch.float64), ("roots", torch.int64), ("output", torch.int64),
              ("base_margin", torch.float64), ("absent_left", torch.int64))

    @staticmethod
    def with_defaults(weights: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Saved trees with ``absent_left`` (zeros, one per node) where a model saved before it lacks it."""
        out = dict(weights)
        if "absent_left" not in out and "left" in out:
            out["absent_left"] = torch.zeros(tuple(out["left"].shape), dtype=torch.int64)
        return out


class TreeBuilder:
    """The active party's growing forest (plain lists until the model is kept)."""

    def __init__(self) -> None:
        self.left: list[int] = []
        self.right: list[int] = []
        self.owner: list[int] = []
        self.record: list[int] = []
        self.value: list[float] = []
        self.roots: list[int] = []
        self.output: list[int] = []
        self.absent_left: list[int] = []

    def new_node(self) -> int:
        self.left.append(LEAF)
        self.right.append(LEAF)
        self.owner.append(LEAF)
        self.record.append(LEAF)
        self.value.append(0.0)
        self.absent_left.append(0)
        return len(self.left) - 1

    def start_tree(self, output: int) -> int:
        root = self.new_node()
        self.roots.append(root)
        self.output.append(output)
        return root

    def split(self, node: int, owner: int, record: int, absent_left: bool = False) -> tuple[int, int]:
        left, right = self.new_node(), self.new_node()
        self.left[node], self.right[node] = left, right
        self.owner[node], self.record[node] = owner, record
        self.absent_left[node] = int(absent_left)
        return left, right

    def truncate(self, trees: int) -> None:
        """Keep the first ``trees`` trees (early stopping's best round)."""
        if trees >= len(self.roots):
            return
        end = self.roots[trees]
        for name in ("left", "right", "owner", "record", "value", "absent_left"):
            del getattr(self, name)[end:]
        del self.roots[trees:]
        del self.output[trees:]

    def module(self, base_margin: np.ndarray) -> TreeArrays:
        return TreeArrays({"left": np.array(self.left), "right": np.array(self.right),
                           "owner": np.array(self.owner), "record": np.array(self.record),
                           "value": np.array(self.value), "roots": np.array(self.roots),
                           "output": np.array(self.output), "base_margin": np.asarray(base_margin),
                           "absent_left": np.array(self.absent_left, dtype=np.int64)})


class SplitRecorder:
    """A party's lookup table while training."""

    def __init__(self) -> None:
        self.feature: list[int] = []
        self.threshold: list[float] = []
        self.missing_left: list[int] = []
        self.tree: list[int] = []

    def add(self, feature: int, threshold: float, missing_left: bool, tree: int) -> int:
        self.feature.append(feature)
        self.threshold.append(threshold)
        self.missing_left.append(int(missing_left))
        self.tree.append(tree)
        return len(self.feature) - 1

    def module(self, trees: int | None = None) -> SplitTable:
        """The table (records of the first ``trees`` trees only, when given: early stopping dropped the rest)."""
        keep = len(self.tree) if trees is None else sum(1 for t in self.tree if t < trees)
        return SplitTable({"feature": np.array(self.feature[:keep], dtype=np.int64),
                           "threshold": np.array(self.threshold[:keep], dtype=np.float64),
                           "missing_left": np.array(self.missing_left[:keep], dtype=np.int64),
                           "tree": np.array(self.tree[:keep], dtype=np.int64)})

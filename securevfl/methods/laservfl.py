"""LASER-VFL: one head per feature block, trained by task-sampling over the blocks a row has (issue 44).

Paper: Valdeira, Wang, Chi, "Vertical Federated Learning with Missing Features During Training and
Inference", ICLR 2025; code: github.com/Valdeira/LASER-VFL (``models/model_utils.py``
``BaseLaserModel`` / ``FusionModel``, ``methods/laser.py``), which this follows.

**The method (their code).** Each block (party) ``k`` has a representation model ``f_k`` (their MLP
extractor: hidden layers with ReLU, a linear cut layer) and a fusion head ``g_k`` (the **mean** of the
representations it is given, then one linear layer). For a mini-batch whose observed blocks are ``O``,
each head ``k`` in ``O`` is trained, for every size ``s = 1..|O|``, on **one** subset ``S`` of ``O`` of
size ``s`` that contains ``k``, drawn uniformly (task-sampling), the blocks outside ``S`` left out of the
mean; the loss of that term is weighted ``C(|O|-1, s-1) / s``, so the sum is an unbiased estimate of
``sum over S ⊆ O of (1/|S|) sum over k in S of loss(g_k(mean of f_j, j in S))``: every subset's
predictors, averaged over its heads. Every head and representation model shares its parameters across
all the subsets it takes part in. At inference a row with observed blocks ``O`` is predicted by the
predictors of exactly ``O``: each head ``k`` in ``O`` on the mean of the observed representations.

**Mapped onto one labelled active party.** The blocks are the active party's own columns (where it
has any) and each passive party's. A passive party is SplitNN's (:class:`SplitPassive`): it embeds the
rows of the agreed batch it holds and applies the gradient it receives. The labels, and so every head,
are at the active party: it holds one head per block (``heads``, all computed there from the received
embeddings and its own), the mean over the blocks each row has, the sampling and the loss. The active
party's block is observed on every row; a passive party's block is observed on the rows it holds
(``peer_masks`` in training, ``present`` in scoring). Nothing else crosses the wire than SplitNN's
embeddings and gradients (a passive party's embedding is sent once per batch and used in every sampled
subset that contains it; its gradient sums them).

**Deviations** (each because of the setting, none in the objective):

* *Per-row patterns.* Their loader gives every row of a mini-batch the same observed blocks; here each
  row has its own. The batch's rows are grouped by pattern, each group sampled as their code samples a
  batch (one subset per head and size, from the generator ``task-sampling``, seeded per run) and its
  loss weighted by its share of the batch, so the batch loss is the mean over rows of their per-row
  objective.
* *One prediction per row.* Their final test accuracy averages the correctness of the heads of the
  observed set (one predictor each); a scored row needs one score, so the heads' predictions
  (probabilities, or values in regression) are averaged: the ensemble of the observed set's predictors.
* *Rows no block covers* (only with an active party without features, a row no passive party holds):
  their code skips such batches; here a learned constant (``prior``: the label distribution, trained on
  every row) scores them.
* ``--party-dropout`` and ``--subset-views`` do not apply (task-sampling leaves blocks out); ``--hidden`` and
  ``--embedding-dim`` size the representation models, ``--lr`` and the optimiser (Adam) are the run's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from securevfl.errors import ConfigError
from securevfl.federation.runtime import PartyContext
from securevfl.methods.base import as_tensor, register_method
from securevfl.methods.engine.loop import TRAIN, Evaluation, Losses, PartySide
from securevfl.methods.engine.split import EMBEDDING, GRADIENT, SplitActive, SplitMethod
from securevfl.networks import MLP, init_parameters, mlp_bottom
from securevfl.networks.mlp import parse_widths
from securevfl.seeding import party_generator
from securevfl.settings import setting

AGGREGATIONS = ("mean", "sum")


@dataclass(frozen=True)
class LaserVFLOptions:
    """LASER-VFL's fusion heads; the defaults are the paper code's (mean, one linear layer)."""

    aggregation: str = setting("mean", help="How a head combines the representations it is given: mean | sum.")
    head: str = setting(
        "", help="Each head's hidden widths before its output layer, comma-separated; empty: one linear layer.")
    cut_activation: bool = setting(
        False, help="Apply the activation after each representation model's cut layer (the paper's code: no).")

    def __post_init__(self) -> None:
        if self.aggregation not in AGGREGATIONS:
            raise ConfigError(f"aggregation must be one of {', '.join(AGGREGATIONS)}, got {self.aggregation!r}")
        parse_widths(self.head, "head", allow_empty=True)

    def head_widths(self) -> tuple[int, ...]:
        return parse_widths(self.head, "head", allow_empty=True)


class LaserHeads(nn.Module):
    """One fusion head per block, by block position (the active party's own first, then each passive party)."""

    def __init__(self, heads: list[nn.Module]) -> None:
        super().__init__()
        self.heads = nn.ModuleList(heads)


class Prior(nn.Module):
    """A learned constant output: the score of a row no block covers."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.logits = nn.Parameter(torch.zeros(width))

    def forward(self, rows: int) -> torch.Tensor:
        return self.logits.unsqueeze(0).expand(rows, -1)


@register_method
class LaserVFL(SplitMethod[LaserVFLOptions]):
    """One head per block at the active party, task-sampled subsets of the blocks each row has, head ensemble."""

    name = "laser-vfl"
    summary = "LASER-VFL: a head per party, task-sampled subsets of the parties holding each row, head ensemble"
    Options = LaserVFLOptions
    partial_rows = True

    def bottom(self, side: PartySide) -> nn.Module:
        data, config = side.data, self.config
        model = mlp_bottom(data.n_features, data.codes, config.hidden, config.embedding_dim,
                           final_activation=self.options.cut_activation)
        return init_parameters(model, party_generator(config.seed, side.name))

    def head(self, side: PartySide, block: str) -> nn.Module:
        """Block ``block``'s fusion head: combined representation -> outputs."""
        model = MLP(self.embedding_width(), self.options.head_widths(), side.data.n_classes)
        return init_parameters(model, party_generator(self.config.seed, f"laser-head/{block}"))

    def aggregate(self, parts: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        """Combine ``parts`` (blocks, rows, width) over the ``chosen`` (blocks, rows) ones: their mean or sum."""
        weights = chosen.to(parts.dtype).unsqueeze(-1)
        total = (parts * weights).sum(dim=0)
        if self.options.aggregation == "sum":
            return total
        return total / weights.sum(dim=0).clamp(min=1.0)

    def report(self, side: PartySide) -> dict[str, Any]:
        return {"laser_blocks": len(side.passives) + bool(side.data.n_features)}

    def active_side(self) -> type[SplitActive]:
        return LaserActive


class LaserActive(SplitActive):
    """The active party: its own block (if it has columns), one head per block, task-sampling, the ensemble."""

    method: LaserVFL

    def build(self, ctx: PartyContext) -> None:
        method = self.method
        own = method.bottom(self).to(ctx.device) if self.data.n_features else None
        blocks = ((self.name,) if own is not None else ()) + self.passives
        heads = LaserHeads([method.head(self, b) for b in blocks]).to(ctx.device)
        self.state.modules["heads"] = heads
        params = list(heads.parameters())
        if own is not None:
            self.state.modules["bottom"] = own
            params += list(own.parameters())
        elif not self.config.require_all_parties:
            prior = Prior(self.data.n_classes).to(ctx.device)
            self.state.modules["prior"] = prior
            params += list(prior.parameters())
        self.state.optimizers["model"] = torch.optim.Adam(params, lr=self.config.lr)
        self.state.generators["task_sampling"] = party_generator(self.config.seed, f"{self.name}/task-sampling")
        self.X = as_tensor(self.data.X_train, ctx.device)
        self.y = self.training_targets()

    def _blocks(self, received: list[torch.Tensor], held: dict[str, np.ndarray], X: torch.Tensor,
                rows: int) -> tuple[torch.Tensor, np.ndarray]:
        """Every block's representations (blocks, rows, width; zeros where absent) and which rows have it."""
        parts, there = [], []
        own = self.state.modules.get("bottom")
        if own is not None:
            parts.append(own(X))
            there.append(np.ones(rows, dtype=bool))
        for p, part in zip(self.passives, received, strict=True):
            mask = held.get(p)
            if mask is None:
                parts.append(part)
                there.append(np.ones(rows, dtype=bool))
                continue
            index = torch.as_tensor(np.flatnonzero(mask), device=part.device)
            parts.append(part.new_zeros((rows, part.shape[1])).index_put((index,), part))
            there.append(mask)
        return torch.stack(parts), np.stack(there)

    def _heads(self) -> nn.ModuleList:
        module = self.state.modules["heads"]
        assert isinstance(module, LaserHeads)
        return module.heads

    def task_loss(self, parts: torch.Tensor, there: np.ndarray, y: torch.Tensor) -> torch.Tensor:
        """LASER-VFL's sampled loss of a batch: per pattern of observed blocks, per head, one subset per size."""
        generator = self.state.generators["task_sampling"]
        assert isinstance(generator, torch.Generator)
        heads, rows = self._heads(), parts.shape[1]
        patterns, inverse = np.unique(there.T, axis=0, return_inverse=True)
        total = parts.new_zeros(())
        for g, pattern in enumerate(patterns):
            observed = np.flatnonzero(pattern)
            if not len(observed):  # no block: their code skips such a batch (the prior scores these rows)
                continue
            members = torch.as_tensor(np.flatnonzero(inverse.reshape(-1) == g), device=parts.device)
            share = len(members) / rows
            group = parts[:, members]
            for k in observed:
                others = observed[observed != k]
                order = others[torch.randperm(len(others), generator=generator).numpy()]
                for size in range(1, len(observed) + 1):
                    chosen = np.zeros(len(parts), dtype=bool)
                    chosen[[k, *order[: size - 1]]] = True
                    chosen_t = torch.as_tensor(chosen, device=parts.device).unsqueeze(1).expand(-1, len(members))
                    outputs = heads[int(k)](self.method.aggregate(group, chosen_t))
                    weight = share * math.comb(len(observed) - 1, size - 1) / size
                    total = total + weight * self.method.loss(self, outputs, y[members])
        return total

    def train_batch(self, ctx: PartyContext, batch: np.ndarray) -> tuple[Losses, int]:
        method, opt = self.method, self.state.optimizers["model"]
        held, leaves = self.received_leaves(ctx, batch)
        with ctx.meter.compute():
            parts, there = self._blocks(leaves, held, self.X[batch], len(batch))
            loss = self.task_loss(parts, there, self.y[batch])
            prior = self.state.modules.get("prior")
            if prior is not None:
                loss = loss + method.loss(self, prior(len(batch)), self.y[batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
            value = float(loss.detach())
        for p, leaf in zip(self.passives, leaves, strict=True):
            grad = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
            ctx.send(p, self.tag(TRAIN, GRADIENT), method.protect_gradient(self, grad, p))
        return {"loss": value}, len(batch)

    def predictions(self, parts: torch.Tensor, there: np.ndarray) -> np.ndarray:
        """Each row's score: the mean of the predictions of the heads of its observed blocks, on their combination."""
        chosen = torch.as_tensor(there, device=parts.device)
        combined = self.method.aggregate(parts, chosen)
        scores = np.stack([self.objective.predictions(head(combined)) for head in self._heads()])
        weights = there.reshape(there.shape + (1,) * (scores.ndim - 2)).astype(np.float64)
        counts = weights.sum(axis=0)
        ensemble = (scores * weights).sum(axis=0) / np.maximum(counts, 1.0)
        nobody = ~there.any(axis=0)
        prior = self.state.modules.get("prior")
        if nobody.any() and prior is not None:
            ensemble[nobody] = self.objective.predictions(prior(int(nobody.sum())))
        return ensemble

    def evaluate(self, ctx: PartyContext, X: np.ndarray, phase: str) -> Evaluation:
        held = dict(self.present or {})
        for p in self.silent:  # left out: it sends nothing and holds none of the rows
            held[p] = np.zeros(len(X), dtype=bool)
        received = [None if p in self.silent else ctx.recv(p, self.tag(phase, EMBEDDING)) for p in self.passives]
        with ctx.meter.compute(), torch.no_grad():
            parts = [torch.zeros((0, self.method.embedding_width()), device=self.device) if m is None else
                     self.method.decode(self, m, p, _count(held.get(p), len(X)), phase).to(self.device)
                     for p, m in zip(self.passives, received, strict=True)]
            blocks, there = self._blocks(parts, held, as_tensor(X, ctx.device), len(X))
            return Evaluation(self.predictions(blocks, there))


def _count(held: np.ndarray | None, rows: int) -> int:
    """The rows a passive party's message covers: those it holds, or all ``rows``."""
    return rows if held is None else int(held.sum())


__all__ = ["LaserActive", "LaserHeads", "LaserVFL", "LaserVFLOptions", "Prior"]

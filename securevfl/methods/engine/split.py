"""Split learning by combination: bottom models at every party, a top model at the active party.

Per batch, every passive party embeds its rows of the agreed batch and sends ``encode(h)``; the
active party ``decode``s each message, ``combine``s the embeddings (with its own, if it holds
features), runs the ``top`` model and the ``loss``, and returns to each passive party the
gradient with respect to its decoded embedding, which the passive party applies to its exact
embedding (straight-through where the encoding is lossy). Evaluation sends ``encode(h)`` of the
evaluated rows and scores the combination.

A method of this family subclasses :class:`SplitMethod` and overrides the hooks it changes:

====================  ===================================  =====================================
hook                  default (SplitNN)                    overridden by
====================  ===================================  =====================================
``bottom``            MLP (or a CNN on image strips)       C-VFL (heterogeneous zoo)
``top``               MLP over the combined width          C-VFL (one hidden layer)
``encode``            the embedding itself                 C-VFL (quantise / top-k), noise
``decode``            the received tensor, shape-checked   C-VFL (reconstruct)
``combine``           concatenation                        a mean, a sum
``protect_gradient``  the run's ``--defense`` (if any)      a method-specific defence
``loss``              cross-entropy                        soft targets
``local_steps``       1                                    C-VFL (Q local iterations)
====================  ===================================  =====================================

**Local iterations** (``local_steps`` Q > 1, C-VFL's Q): after one exchange, every party makes Q
optimiser steps on the same batch. The passive party reuses the gradient it received (stale after
the first step) on its recomputed embedding; the active party reuses the received embeddings
(stale after the first step) with its own fresh bottom and top. One exchange then pays for Q
updates; the gradient a passive party receives is the one of the first step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from securevfl.data.scenario import Scenario
from securevfl.errors import ProtocolError
from securevfl.federation.runtime import PartyContext
from securevfl.methods.base import (
    ActiveOutcome,
    Method,
    OptionsT,
    Role,
    as_tensor,
)
from securevfl.methods.engine.loop import TEST, TRAIN, EngineRecord, Evaluation, Losses, PartySide, run_side
from securevfl.networks import MLP, init_parameters, mlp_bottom
from securevfl.seeding import party_generator

EMBEDDING = "embedding"
GRADIENT = "gradient"


@dataclass(frozen=True)
class SideRole:
    """The runtime role that runs ``side`` through the engine.

    The side stays reachable, so the party that ran it can save what it trained
    (:meth:`PartySide.saved`) or score with it.
    """

    side: PartySide

    def __call__(self, ctx: PartyContext) -> Any:
        return run_side(ctx, self.side)


def side_role(side: PartySide) -> Role:
    """The runtime role that runs ``side`` through the engine (a :class:`SideRole`)."""
    return SideRole(side)


def checked_tensor(message: Any, sender: str, rows: int, what: str = "embedding") -> torch.Tensor:
    """``message`` as a 2-D float tensor of ``rows`` rows, else a ProtocolError naming ``sender``."""
    if not isinstance(message, torch.Tensor) or message.ndim != 2 or len(message) != rows:
        shape = tuple(message.shape) if isinstance(message, torch.Tensor) else type(message).__name__
        raise ProtocolError(f"{sender} sent a malformed {what} ({shape}); expected {rows} rows")
    if not message.is_floating_point():
        raise ProtocolError(f"{sender} sent a non-float {what}")
    return message


class SplitMethod(Method[OptionsT]):
    """Combination split learning; subclasses override hooks (see the module docstring)."""

    uses_engine = True
    partial_rows = True
    leaves_out_parties = True
    supports_defenses = True
    supports_objectives = True
    supports_category_embeddings = True

    def bottom(self, side: PartySide) -> nn.Module:
        """A party's bottom model: its features -> ``embedding_width()``."""
        data, config = side.data, self.config
        model = mlp_bottom(data.n_features, data.codes, config.hidden, config.embedding_dim)
        return init_parameters(model, party_generator(config.seed, side.name))

    def embedding_width(self) -> int:
        return self.config.embedding_dim

    def combined_width(self, side: PartySide, own: bool) -> int:
        """Width of the active party's combination: every passive embedding, plus its own if ``own``."""
        return self.embedding_width() * (len(side.passives) + own)

    def top(self, side: PartySide, width: int) -> nn.Module:
        """The active party's top model: combined width -> class logits."""
        model = MLP(width, self.config.hidden, side.data.n_classes)
        return init_parameters(model, party_generator(self.config.seed, "top"))

    def encode(self, side: PartySide, h: torch.Tensor, phase: str) -> Any:
        """What a passive party sends for its embedding ``h``."""
        return h.detach()

    def decode(self, side: PartySide, message: Any, sender: str, rows: int, phase: str) -> torch.Tensor:
        """The embedding the active party uses, from ``sender``'s message."""
        return checked_tensor(message, sender, rows)

    def protect_gradient(self, side: PartySide, grad: torch.Tensor, passive: str) -> torch.Tensor:
        """The gradient the active party returns to ``passive``: the run's ``--defense`` applied, if any."""
        return side.defend(grad)

    def combine(self, side: PartySide, parts: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat(parts, dim=1)

    def loss(self, side: PartySide, outputs: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The active party's loss: the run's objective (cross-entropy, weighted or not, or MSE)."""
        return side.objective.loss(outputs, y)

    def report(self, side: PartySide) -> dict[str, Any]:
        """Method-specific report entries (``extra``), from the active side at the end."""
        return {}

    def local_steps(self) -> int:
        """Optimiser steps every party makes per exchange on the same batch (C-VFL's Q; 1: SplitNN)."""
        return 1

    def roles(self, scenario: Scenario) -> dict[str, Role]:
        passives = self.require_passives(scenario)
        plan = self.plan(scenario)
        roles = {p: side_role(SplitPassive(self, scenario.party_data(p), plan=plan)) for p in passives}
        active = self.active_side()(self, scenario.party_data(scenario.active), passives, plan)
        roles[scenario.active] = side_role(active)
        return roles

    def active_side(self) -> type[SplitActive]:
        """The active party's side class (SplitActive; LASER-VFL's has a head per party)."""
        return SplitActive


class SplitPassive(PartySide):
    """A passive party: embed the agreed batch, send it encoded, apply the returned gradient."""

    method: SplitMethod[Any]

    def build(self, ctx: PartyContext) -> None:
        model = self.method.bottom(self).to(ctx.device)
        self.state.modules["bottom"] = model
        self.state.optimizers["bottom"] = torch.optim.Adam(model.parameters(), lr=self.config.lr)
        self.X = as_tensor(self.data.X_train, ctx.device)

    def train_batch(self, ctx: PartyContext, batch: np.ndarray) -> None:
        model, opt = self.state.modules["bottom"], self.state.optimizers["bottom"]
        batch = self.data.own_rows("train", batch)  # its rows of the agreed batch (all of them, fully covered)
        with ctx.meter.compute():
            h = model(self.X[batch])
            message = self.method.encode(self, h, TRAIN)
        ctx.send(ctx.active, self.tag(TRAIN, EMBEDDING), message)
        grad = checked_tensor(ctx.recv(ctx.active, self.tag(TRAIN, GRADIENT)), ctx.active, len(batch), "gradient")
        with ctx.meter.compute():
            grad = grad.to(self.device)
            for step in range(self.method.local_steps()):
                if step:  # a local iteration: the fresh embedding, the stale gradient
                    h = model(self.X[batch])
                opt.zero_grad()
                h.backward(grad)
                opt.step()

    def evaluate(self, ctx: PartyContext, X: np.ndarray, phase: str) -> None:
        with ctx.meter.compute(), torch.no_grad():
            message = self.method.encode(self, self.state.modules["bottom"](as_tensor(X, ctx.device)), phase)
        ctx.send(ctx.active, self.tag(phase, EMBEDDING), message)

    def own_outputs(self, X: np.ndarray) -> np.ndarray | None:
        with torch.no_grad():
            return self.state.modules["bottom"](as_tensor(X, self.device)).cpu().numpy().astype(np.float64)


class SplitActive(PartySide):
    """The active party: own bottom (if it holds features), decode, combine, top model, loss."""

    method: SplitMethod[Any]
    leave_out = collects = takes_back = True

    def build(self, ctx: PartyContext) -> None:
        method = self.method
        own = method.bottom(self).to(ctx.device) if self.data.n_features else None
        width = method.combined_width(self, own is not None)
        top = method.top(self, width).to(ctx.device)
        self.state.modules["top"] = top
        params = list(top.parameters())
        if own is not None:
            self.state.modules["bottom"] = own
            params += list(own.parameters())
        passive_width = method.combined_width(self, False) // max(1, len(self.passives))  # each passive's embedding
        absent = AbsentEmbeddings(self.passives, passive_width).to(ctx.device)
        self.state.modules["absent"] = absent
        params += list(absent.parameters())
        if own is not None and not self.config.require_all_parties:
            own_width = method.combined_width(self, True) - method.combined_width(self, False)
            alone = method.top(self, own_width).to(ctx.device)
            self.state.modules["alone"] = alone
            params += list(alone.parameters())
        self.state.optimizers["model"] = grouped_adam(params, self.config.lr)
        if self._dropout_rate():
            self.state.generators["party_dropout"] = party_generator(self.config.seed, f"{self.name}/party-dropout")
        if self.data.coverage is not None and self.config.subset_views and not self.config.require_all_parties:
            self.state.generators["subset_views"] = party_generator(self.config.seed, f"{self.name}/subset-views")
        self.X = as_tensor(self.data.X_train, ctx.device)
        self.y = self.training_targets()

    def _filled(self, p: str, part: torch.Tensor, held: np.ndarray | None, rows: int,
                dropped: torch.Tensor | None = None) -> torch.Tensor:
        """Passive party ``p``'s embeddings of ``rows`` rows: its ``part`` where held, else its absent embedding.

        ``held``: which rows ``part`` covers (None: all); ``dropped``: held rows replaced by the absent
        embedding anyway (party-wise dropout in training; a CPU bool tensor of ``rows``).
        """
        if held is None and dropped is None:
            return part
        module = self.state.modules["absent"]
        assert isinstance(module, AbsentEmbeddings)
        absent = module.embeddings[p]
        if held is None:  # every row held, some dropped: one select, the absent embedding broadcast (p = 1.0)
            assert dropped is not None
            return torch.where(dropped.to(part.device).unsqueeze(1), absent, part)
        full = absent.unsqueeze(0).expand(rows, -1)
        keep = held & ~dropped.numpy() if dropped is not None else held
        if not keep.any():
            return full
        index = torch.as_tensor(np.flatnonzero(keep), device=part.device)
        take = torch.as_tensor(np.flatnonzero(keep[held]), device=part.device)
        return full.index_put((index,), part[take])

    def _every_part(self, leaves: list[torch.Tensor], held: dict[str, np.ndarray], rows: int,
                    dropped: torch.Tensor | None = None) -> list[torch.Tensor]:
        """:meth:`_filled` for every passive party in order (``dropped``: one row mask per party, or None)."""
        return [self._filled(p, leaf, held.get(p), rows, None if dropped is None else dropped[i])
                for i, (p, leaf) in enumerate(zip(self.passives, leaves, strict=True))]

    def _absent(self, p: str, rows: int) -> torch.Tensor:
        """Passive party ``p``'s absent embedding for each of ``rows`` rows (it sent nothing)."""
        module = self.state.modules["absent"]
        assert isinstance(module, AbsentEmbeddings)
        return module.embeddings[p].unsqueeze(0).expand(rows, -1)

    def _dropped(self, rows: int) -> torch.Tensor | None:
        """Party-wise dropout: per passive party and row, whether its embedding is left out of this training step.

        A CPU bool tensor (passive parties x rows), or None without dropout.
        """
        rate = self._dropout_rate()
        if not rate:
            return None
        generator = self.state.generators["party_dropout"]
        assert isinstance(generator, torch.Generator)
        return torch.rand((len(self.passives), rows), generator=generator) < rate

    def _subset_draws(self, rows: int) -> list[torch.Tensor]:
        """``--subset-views`` masks (per passive party and row: left out), each held party out with probability 1/2.

        A probability of 1/2 makes every subset of a row's passive parties equally likely: the top model
        is trained on every pattern a row could be scored with, as LASER-VFL's task sampling trains the
        predictors of every subset (issue 44: mnist-5k at p = 0.5 rose from 0.746 to 0.756, its 0.755).
        """
        generator = self.state.generators["subset_views"]
        assert isinstance(generator, torch.Generator)
        return [torch.rand((len(self.passives), rows), generator=generator) < 0.5
                for _ in range(self.config.subset_views)]

    def _dropout_rate(self) -> float:
        """``--party-dropout`` where the model is trained for rows some party does not hold, else 0."""
        return 0.0 if self.config.require_all_parties else self.config.party_dropout

    def _forward(self, parts: list[torch.Tensor], X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The top model's outputs, and the active-alone head's (None: no such head) from the same embedding."""
        own, alone = self.state.modules.get("bottom"), self.state.modules.get("alone")
        mine = own(X) if own is not None else None
        outputs = self.state.modules["top"](self.method.combine(self, ([] if mine is None else [mine]) + parts))
        return outputs, (alone(mine) if alone is not None and mine is not None else None)

    def _loss(self, parts: list[torch.Tensor], X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The method's loss of the combined model, plus the active-alone head's on the same rows."""
        outputs, alone = self._forward(parts, X)
        loss = self.method.loss(self, outputs, y)
        return loss if alone is None else loss + self.method.loss(self, alone, y)

    def received_leaves(self, ctx: PartyContext, batch: np.ndarray) -> tuple[dict[str, np.ndarray], list[torch.Tensor]]:
        """Which rows of ``batch`` each passive party holds, and its decoded embeddings as gradient leaves."""
        held = self.data.peer_masks("train", batch) or {}
        received = [ctx.recv(p, self.tag(TRAIN, EMBEDDING)) for p in self.passives]
        with ctx.meter.compute():
            leaves = [self.method.decode(self, m, p, _count(held.get(p), len(batch)), TRAIN).to(self.device)
                      .requires_grad_(True) for p, m in zip(self.passives, received, strict=True)]
        return held, leaves

    def train_batch(self, ctx: PartyContext, batch: np.ndarray) -> tuple[Losses, int]:
        method, opt = self.method, self.state.optimizers["model"]
        held, leaves = self.received_leaves(ctx, batch)
        with ctx.meter.compute():
            dropped = self._dropped(len(batch))
            loss = self._loss(self._every_part(leaves, held, len(batch), dropped), self.X[batch], self.y[batch])
            if held and self.config.subset_views:  # LASER-style: more subsets of the held parties, same embeddings
                for extra in self._subset_draws(len(batch)):
                    loss = loss + self._loss(self._every_part(leaves, held, len(batch), extra), self.X[batch],
                                             self.y[batch])
                loss = loss / (1 + self.config.subset_views)
            opt.zero_grad()
            loss.backward()
            opt.step()
            value = float(loss.detach())
        for p, leaf in zip(self.passives, leaves, strict=True):
            grad = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)  # every row dropped: no gradient
            ctx.send(p, self.tag(TRAIN, GRADIENT), method.protect_gradient(self, grad, p))
        if method.local_steps() > 1:  # local iterations on the stale embeddings, after the gradients are out
            stale = self._every_part([leaf.detach() for leaf in leaves], held, len(batch))
            with ctx.meter.compute():
                for _ in range(method.local_steps() - 1):
                    opt.zero_grad()
                    self._loss(stale, self.X[batch], self.y[batch]).backward()
                    opt.step()
        return {"loss": value}, len(batch)

    def evaluate(self, ctx: PartyContext, X: np.ndarray, phase: str) -> Evaluation:
        held = dict(self.present or {})
        for p in self.silent:  # left out (serving): it sends nothing, its absent embedding stands in
            held[p] = np.zeros(len(X), dtype=bool)
        received = [None if p in self.silent else ctx.recv(p, self.tag(phase, EMBEDDING)) for p in self.passives]
        with ctx.meter.compute(), torch.no_grad():
            parts = [self._absent(p, len(X)) if m is None else
                     self._filled(p, self.method.decode(self, m, p, _count(held.get(p), len(X)), phase)
                                  .to(self.device), held.get(p), len(X))
                     for p, m in zip(self.passives, received, strict=True)]
            outputs, alone = self._forward(parts, as_tensor(X, ctx.device))
            if alone is not None and held:  # rows no passive party holds: the active-alone head
                nobody = ~np.logical_or.reduce([held.get(p, np.ones(len(X), dtype=bool)) for p in self.passives])
                if nobody.any():
                    outputs[torch.as_tensor(nobody, device=outputs.device)] = alone[
                        torch.as_tensor(nobody, device=alone.device)]
            return Evaluation(self.objective.predictions(outputs))

    def outcome(self, ctx: PartyContext, evaluation: Evaluation | None, record: EngineRecord) -> ActiveOutcome:
        assert evaluation is not None and self.data.y_test is not None
        return ActiveOutcome(y_true=self.data.y_test, scores=evaluation.scores, history=record.history,
                             extra={**self.method.report(self), **record.extra()})


class AbsentEmbeddings(nn.Module):
    """One learned embedding per passive party, standing in for its part of a row it does not hold.

    Trained on the rows a passive party does not hold and, with ``--party-dropout``, on held rows left
    out at random, so that the top model scores a row from the parties that hold it (issue 44).
    """

    def __init__(self, passives: tuple[str, ...], width: int) -> None:
        super().__init__()
        self.embeddings = nn.ParameterDict({p: nn.Parameter(torch.zeros(width)) for p in passives})


def grouped_adam(params: list[nn.Parameter], lr: float) -> torch.optim.Adam:
    """Adam updating its parameters in grouped (``foreach``) steps: the per-tensor step's numbers, faster.

    PyTorch groups by default only on an accelerator; on the CPU the per-parameter Python overhead of the
    plain step was most of the active party's optimiser time (its top model, own bottom, active-alone
    head and absent embeddings: 15 tensors on mnist-5k). The grouped step runs the same element-wise
    operations in the same order (bit-identical: ``tools/golden.py`` compare, 0 differences).
    """
    return torch.optim.Adam(params, lr=lr, foreach=True)


def _count(held: np.ndarray | None, rows: int) -> int:
    """The rows a passive party's message covers: those it holds, or all ``rows``."""
    return rows if held is None else int(held.sum())


__all__ = ["AbsentEmbeddings", "SideRole", "SplitActive", "SplitMethod", "SplitPassive", "TEST", "TRAIN",
           "checked_tensor", "side_role"]

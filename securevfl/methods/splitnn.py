"""SplitNN (Vertical SplitNN / PyVertical): bottom models per party, concatenation, top model.

Per batch, every passive party sends its bottom model's output for the agreed batch; the active
party concatenates them with its own bottom output, runs the top model and the loss, and sends
each passive party the gradient of the loss with respect to that party's embedding. Only the
aligned training rows are used. Paper: Ceballos et al., "SplitNN-driven Vertical Partitioning"
(2020); Romanini et al., "PyVertical" (2021).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from securevfl.data.scenario import PartyData, Scenario
from securevfl.errors import ConfigError
from securevfl.federation.runtime import PartyContext
from securevfl.methods.base import (
    ActiveOutcome,
    Method,
    Role,
    TrainConfig,
    as_tensor,
    batch_plan,
    party_generator,
    predict_scores,
    register_method,
)
from securevfl.models import MLP, StripCNN, init_parameters

EMBEDDING = "embedding"
GRADIENT = "gradient"
TEST_EMBEDDING = "test_embedding"


@dataclass(frozen=True)
class SplitNNOptions:
    """``bottom``: ``mlp`` for every party, or ``cnn`` for image strips (MLP where no strip)."""

    bottom: str = "mlp"

    def __post_init__(self) -> None:
        if self.bottom not in ("mlp", "cnn"):
            raise ConfigError(f"bottom must be 'mlp' or 'cnn', got {self.bottom!r}")


def build_bottom(data: PartyData, config: TrainConfig, kind: str, seed_name: str) -> nn.Module:
    """A party's bottom model: features -> ``config.embedding_dim``."""
    if kind == "cnn" and data.strip_shape is not None:
        model: nn.Module = StripCNN(data.strip_shape, config.embedding_dim)
    else:
        model = MLP(data.n_features, config.hidden, config.embedding_dim, final_activation=True)
    return init_parameters(model, party_generator(config.seed, seed_name))


def passive_bottom_role(data: PartyData, config: TrainConfig, kind: str) -> Role:
    """The passive side of a split network: embed the agreed batch, apply the returned gradient."""

    def role(ctx: PartyContext) -> None:
        device = ctx.device
        model = build_bottom(data, config, kind, ctx.name).to(device)
        opt = torch.optim.Adam(model.parameters(), lr=config.lr)
        X = as_tensor(data.X_train, device)
        for epoch in range(config.epochs):
            ctx.stage = f"train epoch {epoch + 1}"
            for idx in batch_plan(len(X), config.batch_size, config.seed, epoch):
                with ctx.meter.compute():
                    h = model(X[idx])
                ctx.send(ctx.active, EMBEDDING, h.detach())
                grad = ctx.recv(ctx.active, GRADIENT)
                with ctx.meter.compute():
                    opt.zero_grad()
                    h.backward(grad.to(device))
                    opt.step()
        ctx.stage = "evaluate"
        with ctx.meter.compute(), torch.no_grad():
            model.eval()
            h_test = model(as_tensor(data.X_test, device))
        ctx.send(ctx.active, TEST_EMBEDDING, h_test)

    return role


def active_top_role(data: PartyData, config: TrainConfig, kind: str, passives: tuple[str, ...]) -> Role:
    """The active side: own bottom (if it holds features), concatenation, top model, loss."""

    def role(ctx: PartyContext) -> ActiveOutcome:
        device = ctx.device
        own = build_bottom(data, config, kind, ctx.name).to(device) if data.n_features else None
        width = config.embedding_dim * (len(passives) + (1 if own is not None else 0))
        top = init_parameters(MLP(width, config.hidden, data.n_classes), party_generator(config.seed, "top")).to(device)
        params = list(top.parameters()) + (list(own.parameters()) if own is not None else [])
        opt = torch.optim.Adam(params, lr=config.lr)
        loss_fn = nn.CrossEntropyLoss()
        X = as_tensor(data.X_train, device)
        y = torch.as_tensor(data.y_train, dtype=torch.long, device=device)
        history = []
        for epoch in range(config.epochs):
            ctx.stage = f"train epoch {epoch + 1}"
            total, count = 0.0, 0
            for idx in batch_plan(len(X), config.batch_size, config.seed, epoch):
                received = [ctx.recv(p, EMBEDDING) for p in passives]
                with ctx.meter.compute():
                    leaves = [r.to(device).requires_grad_(True) for r in received]
                    parts = ([own(X[idx])] if own is not None else []) + leaves
                    loss = loss_fn(top(torch.cat(parts, dim=1)), y[idx])
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    total += float(loss.detach()) * len(idx)
                    count += len(idx)
                for p, leaf in zip(passives, leaves):
                    ctx.send(p, GRADIENT, leaf.grad)
            history.append({"epoch": epoch + 1, "train_loss": total / max(count, 1)})
            ctx.progress(epoch=epoch + 1, epochs=config.epochs, loss=history[-1]["train_loss"])
        ctx.stage = "evaluate"
        received = [ctx.recv(p, TEST_EMBEDDING) for p in passives]
        with ctx.meter.compute(), torch.no_grad():
            top.eval()
            parts = ([own.eval()(as_tensor(data.X_test, device))] if own is not None else [])
            parts += [r.to(device) for r in received]
            scores = predict_scores(top(torch.cat(parts, dim=1)))
        return ActiveOutcome(y_true=data.y_test, scores=scores, history=history)

    return role


@register_method
class SplitNN(Method):
    """Bottom model per party, concatenated embeddings, top model at the active party."""

    name = "splitnn"
    summary = "SplitNN / PyVertical: per-batch embedding and gradient exchange on aligned rows"
    Options = SplitNNOptions

    def roles(self, scenario: Scenario) -> dict[str, Role]:
        self.require_passives(scenario)
        kind = self.options.bottom
        roles = {p: passive_bottom_role(scenario.party_data(p), self.config, kind) for p in scenario.passives}
        roles[scenario.active] = active_top_role(scenario.party_data(scenario.active), self.config, kind,
                                                 scenario.passives)
        return roles


@register_method
class PyVertical(SplitNN):
    """EASTER's name for the SplitNN baseline (PyVertical); identical protocol."""

    name = "pyvertical"
    summary = "alias of splitnn, under the name EASTER's paper uses"

"""Local: the active party alone on its own features — the baseline every VFL paper reports."""

from __future__ import annotations

import torch

from securevfl.data.scenario import PartyData, Scenario
from securevfl.errors import ConfigError
from securevfl.federation.runtime import PartyContext
from securevfl.methods.base import (
    ActiveOutcome,
    Method,
    NoOptions,
    Role,
    TrainConfig,
    as_tensor,
    batch_plan,
    register_method,
)
from securevfl.methods.objective import make_objective
from securevfl.models import init_parameters, mlp_bottom
from securevfl.seeding import party_generator


def local_mlp_role(data: PartyData, config: TrainConfig) -> Role:
    """Train an MLP (same shape as a SplitNN bottom + top) on the active party's aligned rows."""

    def role(ctx: PartyContext) -> ActiveOutcome:
        if data.n_features == 0:
            raise ConfigError("local needs the active party to hold features")
        assert data.y_train is not None and data.y_test is not None  # the active party holds the labels
        device = ctx.device
        hidden = (*config.hidden, config.embedding_dim, *config.hidden)
        model = init_parameters(mlp_bottom(data.n_features, data.codes, hidden, data.n_classes,
                                           final_activation=False), party_generator(config.seed, ctx.name)).to(device)
        opt = torch.optim.Adam(model.parameters(), lr=config.lr)
        objective = make_objective(data.task, data.y_train, data.n_classes, config.class_weight)
        X = as_tensor(data.X_train, device)
        y = objective.targets(data.y_train, device)
        history = []
        for epoch in range(config.epochs):
            ctx.stage = f"train epoch {epoch + 1}"
            total = 0.0
            for idx in batch_plan(len(X), config.batch_size, config.seed, epoch):
                with ctx.meter.compute():
                    loss = objective.loss(model(X[idx]), y[idx])
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    total += float(loss.detach()) * len(idx)
            history.append({"epoch": epoch + 1, "train_loss": total / len(X)})
            ctx.progress(epoch=epoch + 1, epochs=config.epochs, loss=history[-1]["train_loss"])
        ctx.stage = "evaluate"
        with ctx.meter.compute(), torch.no_grad():
            scores = objective.predictions(model.eval()(as_tensor(data.X_test, device)))
        return ActiveOutcome(y_true=data.y_test, scores=scores, history=history)

    return role


def idle_role(ctx: PartyContext) -> None:
    """A party that takes no part (baselines where only the active party trains)."""
    return None


@register_method
class Local(Method[NoOptions]):
    """The active party's model on its own features only; passive parties stay idle."""

    name = "local"
    summary = "active party alone on its own features (baseline)"
    supports_objectives = True
    supports_category_embeddings = True

    def roles(self, scenario: Scenario) -> dict[str, Role]:
        roles: dict[str, Role] = {p: idle_role for p in scenario.passives}
        roles[scenario.active] = local_mlp_role(scenario.party_data(scenario.active), self.config)
        return roles

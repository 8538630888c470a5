"""Local: the active party alone on its own features — the baseline every VFL paper reports.

It runs on the split-learning engine (:mod:`securevfl.methods.engine`) with one side that trains
alone: the active party's MLP (the shape of a SplitNN bottom + top) on its own aligned rows, in
the agreed batch order; the passive parties take no part. So it has the engine's early stopping,
checkpoints and resume, and saves and scores like the engine's other methods — but its final model
is the active party's alone, so the saved model is **standalone** (:attr:`Local.standalone`): only
the active party saves a part, and scoring needs no passive party, no PSI and no network.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

from securevfl.data.scenario import Scenario
from securevfl.errors import ConfigError
from securevfl.federation.runtime import PartyContext
from securevfl.methods.base import ActiveOutcome, Method, NoOptions, Role, as_tensor, register_method
from securevfl.methods.engine.loop import EngineRecord, Evaluation, Losses, PartySide
from securevfl.methods.engine.split import side_role
from securevfl.networks import init_parameters, mlp_bottom
from securevfl.seeding import party_generator


class LocalActive(PartySide):
    """The active party's model on its own features: one module ``model``, Adam, no message ever."""

    def build(self, ctx: PartyContext) -> None:
        data, config = self.data, self.config
        if data.n_features == 0:
            raise ConfigError("local needs the active party to hold features")
        hidden = (*config.hidden, config.embedding_dim, *config.hidden)
        model = init_parameters(mlp_bottom(data.n_features, data.codes, hidden, data.n_classes,
                                           final_activation=False), party_generator(config.seed, ctx.name))
        self.state.modules["model"] = model.to(ctx.device)
        self.state.optimizers["model"] = torch.optim.Adam(model.parameters(), lr=config.lr)

    @functools.cached_property
    def train_tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The training rows and targets on the party's device (made at the first batch; scoring never needs them)."""
        return as_tensor(self.data.X_train, self.device), self.training_targets()

    def train_batch(self, ctx: PartyContext, batch: Any) -> tuple[Losses, int]:
        X, y = self.train_tensors
        model, opt = self.state.modules["model"], self.state.optimizers["model"]
        with ctx.meter.compute():
            loss = self.objective.loss(model(X[batch]), y[batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
        return {"loss": float(loss.detach())}, len(batch)

    def evaluate(self, ctx: PartyContext, X: np.ndarray, phase: str) -> Evaluation:
        with ctx.meter.compute(), torch.no_grad():
            return Evaluation(self.objective.predictions(self.state.modules["model"](as_tensor(X, self.device))))

    def outcome(self, ctx: PartyContext, evaluation: Evaluation | None, record: EngineRecord) -> ActiveOutcome:
        assert evaluation is not None and self.data.y_test is not None  # the active party holds the labels
        return ActiveOutcome(y_true=self.data.y_test, scores=evaluation.scores, history=record.history,
                             extra=record.extra())


class LocalIdle(PartySide):
    """A passive party of ``local``: it takes no part (and keeps nothing of the model)."""

    takes_part = False

    def build(self, ctx: PartyContext) -> None:
        return None

    def train_batch(self, ctx: PartyContext, batch: Any) -> None:  # pragma: no cover - never called
        return None

    def evaluate(self, ctx: PartyContext, X: np.ndarray, phase: str) -> None:  # pragma: no cover - never called
        return None


def idle_role(ctx: PartyContext) -> None:
    """A party that takes no part (baselines where only the active party trains)."""
    return None


@register_method
class Local(Method[NoOptions]):
    """The active party's model on its own features only; passive parties stay idle."""

    name = "local"
    summary = "active party alone on its own features (baseline)"
    run_defaults = {"epochs": 100, "early_stopping": 10, "batch_size": 128}  # splitnn's: trained as what it is beside
    uses_engine = True
    standalone = True
    partial_rows = True  # trains on every row of the active party (the others' files take no part)
    supports_objectives = True
    supports_category_embeddings = True

    def roles(self, scenario: Scenario) -> dict[str, Role]:
        roles: dict[str, Role] = {p: side_role(LocalIdle(self, scenario.party_data(p))) for p in scenario.passives}
        roles[scenario.active] = side_role(LocalActive(self, scenario.party_data(scenario.active)))
        return roles

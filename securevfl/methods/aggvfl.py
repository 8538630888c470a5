"""Agg-VFL: every party runs a full local model; a non-trainable top aggregates their predictions.

In aggregation-based VFL (the "aggVFL" family the EASTER paper compares with, e.g. Zhang et al.,
"Adaptive VFL on unbalanced features", TPDS 2022), each party k maps its features to class
logits z_k with its own model (here an embedding net + decision net from the heterogeneous zoo);
the active party combines them with a fixed, parameter-free top, z = (1/K) sum_k z_k, and trains
with CE(z, y). Because the top is a plain mean, dL/dz_k = (1/K) dL/dz is the *same* for every
party: the active party broadcasts one gradient. It also means the active party only ever needs
the *sum* of the passive logits, so the sum can go through any aggregation scheme of
:mod:`securevfl.privacy.aggregation` (``secagg=none`` by default; ``dh`` hides each party's
logits). The adaptive per-party weights of Zhang et al. are not reproduced (equal weights).

The broadcast gradient softmax(z) − onehot(y) reveals the batch labels and z (up to a per-row
constant) to every passive party, so a passive party learns the sum of the *other* parties' logits:
with two passive parties and a featureless active party that is the other party's logits, and
``secagg`` other than ``none`` then refuses the configuration unless ``allow_peer_reveal=true``
(:mod:`securevfl.methods._peer_reveal`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from securevfl.data.scenario import PartyData, Scenario
from securevfl.errors import ConfigError
from securevfl.federation.runtime import PartyContext
from securevfl.methods import _peer_reveal as peer_reveal
from securevfl.methods._easter_zoo import MODEL_CHOICES, Architecture, architectures, build_local_model
from securevfl.methods.base import (
    ActiveOutcome,
    Method,
    Role,
    TrainConfig,
    as_tensor,
    batch_plan,
    predict_scores,
    register_method,
)
from securevfl.privacy.aggregation import (
    AggregationConfig,
    AggregationScheme,
    aggregation_names,
    create_aggregation,
    resolve_key_agreement,
)

GRADIENT = "aggvfl.grad"


@dataclass(frozen=True)
class AggVFLOptions:
    """``models``: hetero | homo; ``secagg``: how the passive logits are summed.

    ``allow_peer_reveal``: accept two passive parties with a featureless active party, where each
    passive party can compute the other's logits from the broadcast gradient (refused by default).
    """

    models: str = "hetero"
    embedding_size: int = 128
    secagg: str = "none"
    key_agreement: str = "x25519"
    frac_bits: int = 16
    allow_peer_reveal: bool = False

    def __post_init__(self) -> None:
        if self.models not in MODEL_CHOICES:
            raise ConfigError(f"models must be one of {', '.join(MODEL_CHOICES)}, got {self.models!r}")
        if self.secagg not in aggregation_names():
            raise ConfigError(f"secagg must be one of {', '.join(aggregation_names())}, got {self.secagg!r}")
        resolve_key_agreement(self.key_agreement)
        if self.embedding_size < 1:
            raise ConfigError(f"embedding_size must be >= 1, got {self.embedding_size}")

    def aggregation(self) -> AggregationScheme:
        return create_aggregation(self.secagg, AggregationConfig(frac_bits=self.frac_bits,
                                                                 key_agreement=self.key_agreement))


def passive_role(data: PartyData, arch: Architecture, config: TrainConfig, options: AggVFLOptions,
                 scheme: AggregationScheme) -> Role:
    """Predict locally, contribute the logits to the sum, apply the broadcast gradient."""

    def role(ctx: PartyContext) -> None:
        device = ctx.device
        model = build_local_model(data, arch, options.embedding_size, data.n_classes, config.seed,
                                  ctx.name).to(device)
        opt = torch.optim.Adam(model.parameters(), lr=config.lr)
        agg = scheme.passive()
        agg.setup(ctx)
        X = as_tensor(data.X_train, device)
        for epoch in range(config.epochs):
            ctx.stage = f"train epoch {epoch + 1}"
            model.train()
            for idx in batch_plan(len(X), config.batch_size, config.seed, epoch):
                with ctx.meter.compute():
                    z = model(X[idx])
                agg.contribute(ctx, z.detach().cpu().numpy().astype(np.float64))
                grad = ctx.recv(ctx.active, GRADIENT)
                with ctx.meter.compute():
                    opt.zero_grad()
                    z.backward(grad.to(device))
                    opt.step()
        ctx.stage = "evaluate"
        model.eval()
        with ctx.meter.compute(), torch.no_grad():
            z_test = model(as_tensor(data.X_test, device)).cpu().numpy().astype(np.float64)
        agg.contribute(ctx, z_test)

    return role


def active_role(data: PartyData, arch: Architecture | None, config: TrainConfig, options: AggVFLOptions,
                scheme: AggregationScheme, archs: dict[str, str]) -> Role:
    """Own local model, the (secure) sum of passive logits, the mean top, CE, one gradient."""

    def role(ctx: PartyContext) -> ActiveOutcome:
        device = ctx.device
        model = None
        if arch is not None:
            model = build_local_model(data, arch, options.embedding_size, data.n_classes, config.seed,
                                      ctx.name).to(device)
            opt = torch.optim.Adam(model.parameters(), lr=config.lr)
        loss_fn = nn.CrossEntropyLoss()
        agg = scheme.active()
        agg.setup(ctx, ctx.passives)
        k = len(ctx.passives) + (model is not None)
        X = as_tensor(data.X_train, device)
        y = torch.as_tensor(data.y_train, dtype=torch.long, device=device)
        history = []
        for epoch in range(config.epochs):
            ctx.stage = f"train epoch {epoch + 1}"
            if model is not None:
                model.train()
            total, count = 0.0, 0
            for idx in batch_plan(len(X), config.batch_size, config.seed, epoch):
                with ctx.meter.compute():
                    z_own = model(X[idx]) if model is not None else None
                result = agg.aggregate(ctx)
                with ctx.meter.compute():
                    S = torch.as_tensor(result.total, dtype=torch.float32, device=device)
                    S.requires_grad_(True)
                    z = (S + z_own) / k if z_own is not None else S / k
                    loss = loss_fn(z, y[idx])
                    if model is not None:
                        opt.zero_grad()
                    loss.backward()
                    if model is not None:
                        opt.step()
                    total += float(loss.detach()) * len(idx)
                    count += len(idx)
                ctx.broadcast(ctx.passives, GRADIENT, S.grad)  # = dL/dz_k, equal for every party
            history.append({"epoch": epoch + 1, "train_loss": total / max(count, 1)})
            ctx.progress(epoch=epoch + 1, epochs=config.epochs, loss=history[-1]["train_loss"])
        ctx.stage = "evaluate"
        with ctx.meter.compute(), torch.no_grad():
            z_own = model.eval()(as_tensor(data.X_test, device)) if model is not None else None
        result = agg.aggregate(ctx)
        S = torch.as_tensor(result.total, dtype=torch.float32, device=device)
        z = (S + z_own) / k if z_own is not None else S / k
        scores = predict_scores(z)
        extra = {"architectures": archs, "secagg": options.secagg, "top": "mean of logits (fixed)",
                 "secagg_stats": agg.stats.as_dict()}
        if options.allow_peer_reveal and model is None and peer_reveal.reveals_peer(options.secagg, False,
                                                                                   len(ctx.passives)):
            extra["warnings"] = [peer_reveal.warning("aggvfl", options.secagg)]
        return ActiveOutcome(y_true=data.y_test, scores=scores, history=history, extra=extra)

    return role


@register_method
class AggVFL(Method):
    """Agg-VFL: local models per party, predictions averaged by a non-trainable top."""

    name = "aggvfl"
    summary = "Agg-VFL: per-party local models, logits averaged by a fixed top (optional secure sum)"
    Options = AggVFLOptions

    def roles(self, scenario: Scenario) -> dict[str, Role]:
        passives = self.require_passives(scenario)
        scheme = self.options.aggregation()
        scheme.validate(len(passives))
        active_data = scenario.party_data(scenario.active)
        datas = {p: scenario.party_data(p) for p in passives}
        archs = architectures([(scenario.active, active_data), *datas.items()], self.options.models)
        peer_reveal.refuse_configuration("aggvfl", self.options.secagg, scenario.active in archs, len(passives),
                                         self.options.allow_peer_reveal)
        names = {p: a.name for p, a in archs.items()}
        roles: dict[str, Role] = {p: passive_role(datas[p], archs[p], self.config, self.options, scheme)
                                  for p in passives}
        roles[scenario.active] = active_role(active_data, archs.get(scenario.active), self.config,
                                             self.options, scheme, names)
        return roles

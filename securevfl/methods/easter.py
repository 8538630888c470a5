"""EASTER: embedding aggregation for heterogeneous local models (paper 004, Wang et al.).

Every party k (the active party too, with its own features) owns a *local model*: an embedding
net f_k (features -> shared embedding size, default 128) and a decision net g_k (embedding ->
logits); architectures differ between parties (``models=hetero``, see ``_easter_zoo``). Per
batch (Algorithm 1):

1. every party embeds its slice of the agreed batch: e_k = f_k(x_k);
2. the passive embeddings are aggregated at the active party by the chosen scheme
   (``secagg=dh``: DH blinding factors, Eq. 4-6, with dropout recovery; ``none``: plaintext),
   so the active party learns only S = sum of the passive e_k; it forms the global embedding
   E = (S + e_active) / K (Eq. 7, K = parties taking part in the batch) and sends E to every
   passive party;
3. every party predicts from E with its own decision net: p_k = g_k(E); passive parties send
   their logits p_k to the active party;
4. the active party computes each party's loss L_k = CE(p_k, y) with its labels (Eq. 8) and
   returns dL_k/dp_k to party k;
5. party k backpropagates: through g_k (giving dL_k/dE), then through the global embedding into
   its own embedding net, dL_k/de_k = (1/K) dL_k/dE (other parties' embeddings are constants
   to party k: no gradient crosses to another party's model). Each party steps its own optimiser.

So each party trains its own model on its own loss, and the only cross-party coupling is the
shared global embedding; at the end there are K trained models, one per party. Test metrics
are computed per party (passive parties send their test predictions for scoring); the report's
``metrics.per_party`` lists them and ``extra`` holds their mean (the paper's "Avg" column).

Leakage inherent in the method (as in the paper): the active party sees the sum of passive
embeddings and every passive party's logits; passive parties see E and the gradient of their own
loss w.r.t. their logits (softmax - one-hot, which reveals the batch labels — the paper trusts
passive parties with that, honest-but-curious). ``secagg`` only protects the individual
passive embeddings.

**When the global embedding gives one embedding away.** A passive party p that receives E and k
computes k·E − e_p: the sum of every *other* contribution. When the only other contribution is
one party's embedding — the active party has no features (so no model) and exactly two passive
parties take part in a round — that sum *is* the other passive party's embedding, whatever
``secagg`` is (measured: to 1.4e-5, the fixed-point resolution). With ``secagg`` other than ``none`` such a
configuration is refused with a :class:`ConfigError`, and the simulated dropouts never leave only
two passive contributors; a round that would (a real dropout) fails instead of broadcasting. The
user may accept the leak explicitly with ``allow_peer_reveal=true``; the run then carries a
warning in its report and on the console. The same holds for the summed gradients of
``embed_grad=all``.

Dropouts (``drop_prob``) are simulated: each round, every passive party vanishes with that
probability (seeded, at most as many as the scheme can recover); a dropped party skips the
batch, and the others' global embedding is the mean over the parties that took part.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from securevfl.data.scenario import PartyData, Scenario
from securevfl.errors import ConfigError
from securevfl.eval import classification_metrics
from securevfl.federation.runtime import PartyContext
from securevfl.methods import _peer_reveal as peer_reveal
from securevfl.methods._easter_zoo import (
    MODEL_CHOICES,
    Architecture,
    architectures,
    build_local_model,
)
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

GLOBAL = "easter.global"
LOGITS = "easter.logits"
GRADIENT = "easter.grad"
TEST_SCORES = "easter.test_scores"
EMBED_GRAD = "easter.embed_grad"
EMBED_GRADS = ("own", "all")


@dataclass(frozen=True)
class EasterOptions:
    """EASTER's options (flags ``--secagg``, ``--key-agreement``, ``--frac-bits``, ``--drop-prob``).

    ``models``: ``hetero`` (each party its own zoo architecture) or ``homo``;
    ``embedding_size``: the shared embedding width (paper: 128); ``threshold``: Shamir threshold
    of ``secagg=dh``, above half the passive parties (0: the majority). ``embed_grad``: ``own``
    (the paper: party k's embedding net learns from L_k only) or ``all`` (extension, not in the
    paper: from the sum of every party's dL_j/dE, itself summed with the same secure aggregation —
    one more round per batch).
    ``allow_peer_reveal``: accept a round structure in which a passive party can compute another's
    embedding from the global embedding (see the module docstring); refused by default.
    """

    secagg: str = "dh"
    key_agreement: str = "x25519"
    frac_bits: int = 16
    drop_prob: float = 0.0
    models: str = "hetero"
    embedding_size: int = 128
    threshold: int = 0
    embed_grad: str = "own"
    allow_peer_reveal: bool = False

    def __post_init__(self) -> None:
        if self.embed_grad not in EMBED_GRADS:
            raise ConfigError(f"embed_grad must be one of {', '.join(EMBED_GRADS)}, got {self.embed_grad!r}")
        if self.secagg not in aggregation_names():
            raise ConfigError(f"secagg must be one of {', '.join(aggregation_names())}, got {self.secagg!r}")
        resolve_key_agreement(self.key_agreement)
        if self.models not in MODEL_CHOICES:
            raise ConfigError(f"models must be one of {', '.join(MODEL_CHOICES)}, got {self.models!r}")
        if not 0.0 <= self.drop_prob < 1.0:
            raise ConfigError(f"drop_prob must be in [0, 1), got {self.drop_prob}")
        if self.embedding_size < 1:
            raise ConfigError(f"embedding_size must be >= 1, got {self.embedding_size}")
        if self.threshold < 0:
            raise ConfigError(f"threshold must be >= 0, got {self.threshold}")

    def aggregation(self) -> AggregationScheme:
        return create_aggregation(self.secagg, AggregationConfig(
            frac_bits=self.frac_bits, key_agreement=self.key_agreement,
            threshold=self.threshold or None))


def drop_schedule(passives: tuple[str, ...], drop_prob: float, seed: int, epoch: int, batch: int,
                  max_drops: int) -> frozenset[str]:
    """Simulated dropouts of one round, the same set at every party.

    Each passive party drops independently with ``drop_prob``, capped at ``max_drops`` (the
    scheme's recovery limit). This simulates failures, not a secret: numpy's seeded generator.
    """
    if drop_prob <= 0 or max_drops <= 0:
        return frozenset()
    rng = np.random.default_rng([seed, 0xD209, epoch, batch])
    hits = [p for p, u in zip(passives, rng.random(len(passives))) if u < drop_prob]
    if len(hits) > max_drops:
        hits = sorted(hits, key=lambda p: rng.random())[:max_drops]
    return frozenset(hits)


def _raw_drops(passives: tuple[str, ...], drop_prob: float, seed: int, epoch: int, batch: int) -> int:
    return len(drop_schedule(passives, drop_prob, seed, epoch, batch, len(passives)))


class _Plan:
    """The agreed round structure: batches per epoch and who drops in each."""

    def __init__(self, n_rows: int, config: TrainConfig, options: EasterOptions,
                 passives: tuple[str, ...], max_drops: int) -> None:
        self.config, self.options, self.passives, self.max_drops = config, options, passives, max_drops
        self.n_rows = n_rows

    def rounds(self, epoch: int):
        for b, idx in enumerate(batch_plan(self.n_rows, self.config.batch_size, self.config.seed, epoch)):
            yield idx, drop_schedule(self.passives, self.options.drop_prob, self.config.seed, epoch, b,
                                     self.max_drops)


def passive_role(data: PartyData, arch: Architecture, config: TrainConfig, options: EasterOptions,
                 scheme: AggregationScheme, plan: _Plan) -> Role:
    """A passive party: embed, contribute to the secure sum, predict from E, learn from its loss."""

    def role(ctx: PartyContext) -> None:
        device = ctx.device
        model = build_local_model(data, arch, options.embedding_size, data.n_classes, config.seed,
                                  ctx.name).to(device)
        opt = torch.optim.Adam(model.parameters(), lr=config.lr)
        agg = scheme.passive()
        rounds_per_batch = 2 if options.embed_grad == "all" else 1
        ctx.stage = "secagg setup"
        agg.setup(ctx)
        X = as_tensor(data.X_train, device)
        for epoch in range(config.epochs):
            ctx.stage = f"train epoch {epoch + 1}"
            model.train()
            for idx, dropped in plan.rounds(epoch):
                if ctx.name in dropped:
                    for _ in range(rounds_per_batch):
                        agg.drop(ctx)
                    continue
                with ctx.meter.compute():
                    e = model.embed(X[idx])
                    e_np = e.detach().cpu().numpy().astype(np.float64)
                agg.contribute(ctx, e_np)
                message = ctx.recv(ctx.active, GLOBAL)
                with ctx.meter.compute():
                    E = message["E"].to(device).requires_grad_(True)
                    logits = model.decide(E)
                ctx.send(ctx.active, LOGITS, logits.detach())
                grad = ctx.recv(ctx.active, GRADIENT)
                with ctx.meter.compute():
                    opt.zero_grad()
                    logits.backward(grad.to(device))
                    grad_E = E.grad
                if options.embed_grad == "all":  # extension: sum of every party's dL_j/dE
                    agg.contribute(ctx, grad_E.cpu().numpy().astype(np.float64))
                    grad_E = ctx.recv(ctx.active, EMBED_GRAD).to(device)
                with ctx.meter.compute():
                    e.backward(grad_E / int(message["k"]))
                    opt.step()
        ctx.stage = "evaluate"
        model.eval()
        with ctx.meter.compute(), torch.no_grad():
            e_test = model.embed(as_tensor(data.X_test, device)).cpu().numpy().astype(np.float64)
        agg.contribute(ctx, e_test)
        message = ctx.recv(ctx.active, GLOBAL)
        with ctx.meter.compute(), torch.no_grad():
            scores = predict_scores(model.decide(message["E"].to(device)))
        ctx.send(ctx.active, TEST_SCORES, scores)

    return role


def active_role(data: PartyData, arch: Architecture | None, config: TrainConfig, options: EasterOptions,
                scheme: AggregationScheme, plan: _Plan, archs: dict[str, str]) -> Role:
    """The active party: its own local model, the aggregation, every party's loss."""

    def role(ctx: PartyContext) -> ActiveOutcome:
        device = ctx.device
        model = None
        if arch is not None:
            model = build_local_model(data, arch, options.embedding_size, data.n_classes, config.seed,
                                      ctx.name).to(device)
            opt = torch.optim.Adam(model.parameters(), lr=config.lr)
        loss_fn = nn.CrossEntropyLoss()
        agg = scheme.active()
        every_loss = options.embed_grad == "all"
        ctx.stage = "secagg setup"
        agg.setup(ctx, ctx.passives)
        X = as_tensor(data.X_train, device)
        y = torch.as_tensor(data.y_train, dtype=torch.long, device=device)
        history = []
        for epoch in range(config.epochs):
            ctx.stage = f"train epoch {epoch + 1}"
            if model is not None:
                model.train()
            sums: dict[str, float] = {}
            counts: dict[str, int] = {}
            for idx, dropped in plan.rounds(epoch):
                alive = tuple(p for p in ctx.passives if p not in dropped)
                e_own = None
                if model is not None:
                    with ctx.meter.compute():
                        e_own = model.embed(X[idx])
                result = agg.aggregate(ctx, dropped)
                peer_reveal.refuse_round("easter", options.secagg, model is not None, len(result.survivors),
                                         options.allow_peer_reveal)
                k = len(result.survivors) + (1 if model is not None else 0)
                with ctx.meter.compute():
                    S = torch.as_tensor(result.total, dtype=torch.float32, device=device)
                    E = (S + e_own) / k if e_own is not None else S / k
                ctx.broadcast(alive, GLOBAL, {"E": E.detach(), "k": k})
                losses = {}
                if model is not None:
                    with ctx.meter.compute():
                        E_in = E.detach().requires_grad_(True) if every_loss else E
                        own_loss = loss_fn(model.decide(E_in), y[idx])
                        opt.zero_grad()
                        own_loss.backward()
                        if not every_loss:
                            opt.step()
                    losses[ctx.name] = float(own_loss.detach())
                for p in alive:
                    logits = ctx.recv(p, LOGITS)
                    with ctx.meter.compute():
                        leaf = logits.to(device).requires_grad_(True)
                        loss = loss_fn(leaf, y[idx])
                        loss.backward()
                    losses[p] = float(loss.detach())
                    ctx.send(p, GRADIENT, leaf.grad)
                if every_loss:  # extension: every party's loss reaches every embedding net
                    grads = agg.aggregate(ctx, dropped)
                    with ctx.meter.compute():
                        G = torch.as_tensor(grads.total, dtype=torch.float32, device=device)
                        if model is not None:
                            G = G + E_in.grad
                    ctx.broadcast(alive, EMBED_GRAD, G)
                    if model is not None:
                        with ctx.meter.compute():
                            e_own.backward(G / k)
                            opt.step()
                for p, v in losses.items():
                    sums[p] = sums.get(p, 0.0) + v * len(idx)
                    counts[p] = counts.get(p, 0) + len(idx)
            per_party_loss = {p: sums[p] / counts[p] for p in sums}
            mean_loss = float(np.mean(list(per_party_loss.values())))
            history.append({"epoch": epoch + 1, "train_loss": mean_loss,
                            **{f"train_loss[{p}]": v for p, v in per_party_loss.items()}})
            ctx.progress(epoch=epoch + 1, epochs=config.epochs, loss=mean_loss)
        ctx.stage = "evaluate"
        e_test = None
        if model is not None:
            model.eval()
            with ctx.meter.compute(), torch.no_grad():
                e_test = model.embed(as_tensor(data.X_test, device))
        result = agg.aggregate(ctx, ())
        peer_reveal.refuse_round("easter", options.secagg, model is not None, len(result.survivors),
                                 options.allow_peer_reveal)
        k = len(result.survivors) + (1 if model is not None else 0)
        with ctx.meter.compute(), torch.no_grad():
            S = torch.as_tensor(result.total, dtype=torch.float32, device=device)
            E = (S + e_test) / k if e_test is not None else S / k
        ctx.broadcast(ctx.passives, GLOBAL, {"E": E, "k": k})
        per_party = {}
        if model is not None:
            with ctx.meter.compute(), torch.no_grad():
                per_party[ctx.name] = (data.y_test, predict_scores(model.decide(E)))
        for p in ctx.passives:
            per_party[p] = (data.y_test, np.asarray(ctx.recv(p, TEST_SCORES)))
        party_metrics = {p: classification_metrics(yt, s) for p, (yt, s) in per_party.items()}
        mean_metrics = {key: float(np.mean([m[key] for m in party_metrics.values()]))
                        for key in next(iter(party_metrics.values()))}
        ensemble = np.mean([s for _, s in per_party.values()], axis=0)
        raw_drops = sum(_raw_drops(plan.passives, options.drop_prob, config.seed, ep, b)
                        for ep in range(config.epochs)
                        for b in range(-(-plan.n_rows // config.batch_size)))
        extra = {
            "headline_metrics": "per_party_mean",  # api.run: metrics = mean of per_party (paper's Avg)
            "mean_party_metrics": mean_metrics,
            "ensemble_metrics": classification_metrics(data.y_test, ensemble),
            "architectures": archs,
            "secagg": options.secagg,
            "secagg_stats": {**agg.stats.as_dict(),
                             "drops_capped": raw_drops - agg.stats.dropouts},
            "embedding_size": options.embedding_size,
        }
        if options.allow_peer_reveal and model is None and options.secagg != "none":
            extra["warnings"] = [peer_reveal.warning("easter", options.secagg)]
        # api.run replaces the metrics of ``scores`` by the per-party mean (headline_metrics);
        # ``scores`` carries the active party's own model (the ensemble when it has no features).
        scores = per_party[ctx.name][1] if ctx.name in per_party else ensemble
        return ActiveOutcome(y_true=data.y_test, scores=scores, per_party=per_party,
                             history=history, extra=extra)

    return role


@register_method
class Easter(Method):
    """EASTER: heterogeneous local models trained on a securely aggregated global embedding."""

    name = "easter"
    summary = "EASTER: per-party heterogeneous models on a DH-securely aggregated global embedding"
    Options = EasterOptions

    def roles(self, scenario: Scenario) -> dict[str, Role]:
        passives = self.require_passives(scenario)
        scheme = self.options.aggregation()
        scheme.validate(len(passives))
        if self.options.drop_prob > 0 and scheme.max_dropouts(len(passives)) == 0:
            raise ConfigError(f"secagg={self.options.secagg} cannot recover from dropouts with "
                              f"{len(passives)} passive parties; use secagg=dh (and >= 3 passives)")
        active_data = scenario.party_data(scenario.active)
        datas = {p: scenario.party_data(p) for p in passives}
        ordered = [(scenario.active, active_data), *datas.items()]
        archs = architectures(ordered, self.options.models)
        max_drops = self._max_drops(scenario.active in archs, len(passives), scheme)
        plan = _Plan(len(active_data.X_train), self.config, self.options, passives, max_drops)
        names = {p: a.name for p, a in archs.items()}
        roles: dict[str, Role] = {
            p: passive_role(datas[p], archs[p], self.config, self.options, scheme, plan) for p in passives
        }
        roles[scenario.active] = active_role(active_data, archs.get(scenario.active), self.config,
                                             self.options, scheme, plan, names)
        return roles

    def _max_drops(self, active_contributes: bool, n_passives: int, scheme: AggregationScheme) -> int:
        """Dropouts per round the simulation may draw: the scheme's limit, less any that would reveal a peer."""
        options = self.options
        max_drops = scheme.max_dropouts(n_passives)
        if options.allow_peer_reveal:
            return max_drops
        peer_reveal.refuse_configuration("easter", options.secagg, active_contributes, n_passives, False)
        if options.secagg != "none" and not active_contributes:
            capped = min(max_drops, n_passives - 3)  # never fewer than three passive contributors
            if options.drop_prob > 0 and capped <= 0 < max_drops:
                raise ConfigError(f"dropouts with {n_passives} passive parties and a featureless active party "
                                  "would leave two passive contributors, who could compute each other's "
                                  f"embedding: {peer_reveal.HINT}")
            return max(capped, 0)
        return max_drops

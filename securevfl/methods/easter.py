"""EASTER: embedding aggregation for heterogeneous local models (paper 004, Wang et al.).

Every party k (the active party too, with its own features) owns a *local model*: an embedding
net f_k (features -> shared embedding size, default 128) and a decision net g_k (embedding ->
logits); architectures differ between parties (``models=hetero``, see ``securevfl.networks.zoo``). Per
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

**Rows a passive party does not hold** (every row of the active party, the default): a passive party
contributes a full-batch vector with an exact zero on the rows it does not hold, so the scheme masks
every row; E of a row is the mean over the parties summed on it (K per row); a row is summed only over
two or more passive parties (three with a featureless active party), else its holders send a zero for
it too; each passive party receives E of its summed rows only (``engine.aggregate``, docs/easter.md).

Dropouts (``drop_prob``) are simulated: each round, every passive party vanishes with that
probability (seeded, at most as many as the scheme can recover); a dropped party skips the
batch, and the others' global embedding is the mean over the parties that took part.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from securevfl.data.scenario import Scenario
from securevfl.errors import ConfigError
from securevfl.eval import task_metrics
from securevfl.methods.base import n_batches, register_method
from securevfl.methods.engine import Evaluation, PartySide, peer_reveal
from securevfl.methods.engine.aggregate import (
    AggregateActive,
    AggregateMethod,
    AggregatePlan,
    AggregationOptions,
    ensemble_scores,
    scored_rows,
)
from securevfl.networks.zoo import (
    LocalModel,
)
from securevfl.privacy.aggregation import (
    AggregationScheme,
)
from securevfl.seeding import simulation_rng
from securevfl.settings import setting

EMBED_GRADS = ("own", "all")


@dataclass(frozen=True)
class EasterOptions(AggregationOptions):
    """EASTER's options: the shared aggregation options (default ``secagg=dh``) and its own.

    ``embedding_size`` is the shared embedding width (paper: 128); ``drop_prob``: simulated dropouts
    per round; ``threshold``: Shamir threshold of ``secagg=dh``, above half the passive parties (0:
    the majority). ``embed_grad``: ``own`` (the paper: party k's embedding net learns from L_k only)
    or ``all`` (extension, not in the paper: from the sum of every party's dL_j/dE, itself summed
    with the same secure aggregation — one more round per batch).
    """

    secagg: str = setting("dh", help="How the passive contributions are summed: none | dh | pairwise | paillier.")
    drop_prob: float = setting(
        0.0, help="Probability a passive party drops out of a round (simulated, seeded), in [0, 1); not with pairwise.")
    threshold: int = setting(0, help="Shamir threshold of secagg=dh, above half the passive parties (0: the majority).")
    embed_grad: str = setting(
        "own", help="own (the paper: each embedding net learns from its own loss) | all (from every party's).")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.embed_grad not in EMBED_GRADS:
            raise ConfigError(f"embed_grad must be one of {', '.join(EMBED_GRADS)}, got {self.embed_grad!r}")
        if not 0.0 <= self.drop_prob < 1.0:
            raise ConfigError(f"drop_prob must be in [0, 1), got {self.drop_prob}")
        if self.threshold < 0:
            raise ConfigError(f"threshold must be >= 0, got {self.threshold}")

    def aggregation(self, threshold: int | None = None) -> AggregationScheme[Any]:
        return super().aggregation(threshold or self.threshold or None)


def drop_schedule(passives: tuple[str, ...], drop_prob: float, seed: int, epoch: int, batch: int,
                  max_drops: int) -> frozenset[str]:
    """Simulated dropouts of one round, the same set at every party.

    Each passive party drops independently with ``drop_prob``, capped at ``max_drops`` (the
    scheme's recovery limit). This simulates failures, not a secret: numpy's seeded generator.
    """
    if drop_prob <= 0 or max_drops <= 0:
        return frozenset()
    rng = simulation_rng(seed, 0xD209, epoch, batch)
    hits = [p for p, u in zip(passives, rng.random(len(passives))) if u < drop_prob]
    if len(hits) > max_drops:
        hits = sorted(hits, key=lambda p: rng.random())[:max_drops]
    return frozenset(hits)


def _raw_drops(passives: tuple[str, ...], drop_prob: float, seed: int, epoch: int, batch: int) -> int:
    return len(drop_schedule(passives, drop_prob, seed, epoch, batch, len(passives)))


@register_method
class Easter(AggregateMethod[EasterOptions]):
    """EASTER: heterogeneous local models trained on a securely aggregated global embedding."""

    name = "easter"
    summary = "EASTER: per-party heterogeneous models on a DH-securely aggregated global embedding"
    Options = EasterOptions
    per_party_loss = True
    partial_rows = True

    def plan(self, scenario: Scenario) -> AggregatePlan:
        """The shared plan, with the dropouts a round may draw; refuses a configuration that reveals a peer."""
        plan = super().plan(scenario)
        passives, scheme = plan.passives, plan.scheme
        if self.options.drop_prob > 0 and scheme.max_dropouts(len(passives)) == 0:
            raise ConfigError(f"secagg={self.options.secagg} cannot recover from dropouts with "
                              f"{len(passives)} passive parties; use secagg=dh (and >= 3 passives)")
        return replace(plan, max_drops=self._max_drops(scenario.active in plan.archs, len(passives), scheme))

    def contribution(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        assert isinstance(model, LocalModel)  # what local_model builds
        return model.embed(x)

    def head(self, model: nn.Module, global_value: torch.Tensor) -> torch.Tensor:
        assert isinstance(model, LocalModel)
        return model.decide(global_value)

    def contribution_width(self, side: PartySide) -> int:
        return self.options.embedding_size

    def embed_grad_all(self) -> bool:
        return self.options.embed_grad == "all"

    def dropped(self, plan: AggregatePlan, epoch: int, batch: int) -> frozenset[str]:
        return drop_schedule(plan.passives, self.options.drop_prob, self.config.seed, epoch, batch, plan.max_drops)

    def check_round(self, survivors: int, active_contributes: bool) -> None:
        o = self.options
        peer_reveal.refuse_round("easter", o.secagg, active_contributes, survivors, o.allow_peer_reveal)

    def report(self, side: AggregateActive, evaluation: Evaluation) -> dict[str, Any]:
        o, config, y = self.options, self.config, side.data.y_test
        assert y is not None
        task = side.data.task
        party_metrics = {p: task_metrics(task, *scored_rows(y, s)) for p, s in evaluation.per_party.items()}
        mean_metrics = {key: float(np.mean([m[key] for m in party_metrics.values()]))
                        for key in next(iter(party_metrics.values()))}
        ensemble = ensemble_scores(list(evaluation.per_party.values()), evaluation.scores)
        raw_drops = sum(_raw_drops(side.plan.passives, o.drop_prob, config.seed, ep, b)
                        for ep in range(config.epochs) for b in range(n_batches(len(side.rows), config.batch_size)))
        stats = side.agg.stats
        extra: dict[str, Any] = {
            "headline_metrics": "per_party_mean",  # api.run: metrics = mean of per_party (paper's Avg)
            "mean_party_metrics": mean_metrics,
            "ensemble_metrics": task_metrics(task, y, ensemble),
            "architectures": {p: a.name for p, a in side.plan.archs.items()},
            "secagg": o.secagg,
            "secagg_stats": {**stats.as_dict(), "drops_capped": raw_drops - stats.dropouts},
            "embedding_size": o.embedding_size,
        }
        if o.allow_peer_reveal and side.name not in side.plan.archs and o.secagg != "none":
            extra["warnings"] = [peer_reveal.warning("easter", o.secagg)]
        return extra

    def _max_drops(self, active_contributes: bool, n_passives: int, scheme: AggregationScheme[Any]) -> int:
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

"""Agg-VFL: every party runs a full local model; a non-trainable top aggregates their predictions.

In aggregation-based VFL (the "aggVFL" family the EASTER paper compares with, e.g. Zhang et al.,
"Adaptive VFL on unbalanced features", TPDS 2022), each party k maps its features to class
logits z_k with its own model (here an embedding net + decision net from the heterogeneous zoo);
the active party combines them with a fixed, parameter-free top, z = (1/K) sum_k z_k, and trains
with CE(z, y). Because the top is a plain mean, dL/dz_k = (1/K) dL/dz is the *same* for every
party: the active party broadcasts one gradient. It also means the active party only ever needs
the *sum* of the passive logits, so the sum can go through any aggregation scheme of
:mod:`securevfl.privacy.aggregation` (``secagg=none`` by default; ``dh`` hides each party's
logits).

``local_steps``: Zhang et al.'s framework lets each party make its own number of local updates
per round (their contribution is choosing those numbers from each party's feature count and
compute speed). ``local_steps=Q`` gives every party Q, ``local_steps=Q0,Q1,...`` one per party
(active first, then the passive parties in order). After the first, each update reuses the
round's stale values: a passive party the broadcast gradient on its fresh logits, the active
party the stale passive sum with its own fresh logits. Their closed-form choice of the numbers is
not reproduced (only the paper's abstract is available offline): the numbers are given.

The broadcast gradient softmax(z) − onehot(y) reveals the batch labels and z (up to a per-row
constant) to every passive party, so a passive party learns the sum of the *other* parties' logits:
with two passive parties and a featureless active party that is the other party's logits, and
``secagg`` other than ``none`` then refuses the configuration unless ``allow_peer_reveal=true``
(:mod:`securevfl.methods.engine.peer_reveal`).

Every row of the active party (the default): as EASTER, a masked zero for a row a passive party does not
hold, the mean over the parties summed on each row, and each passive party the gradient of its summed
rows only (docs/easter.md, "Rows a passive party does not hold").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from securevfl.data.scenario import Scenario
from securevfl.errors import ConfigError
from securevfl.methods.base import register_method
from securevfl.methods.engine import Evaluation, peer_reveal
from securevfl.methods.engine.aggregate import AggregateActive, AggregateMethod, AggregatePlan, AggregationOptions
from securevfl.settings import setting


@dataclass(frozen=True)
class AggVFLOptions(AggregationOptions):
    """The shared aggregation options (``secagg`` sums the passive logits), and ``local_steps``.

    ``local_steps``: updates per round, one number for every party or a comma-separated one per party.
    """

    local_steps: str = setting(
        "1", help="Local updates per round: one count for every party, or one per party, active first (1,2,2).")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.step_counts()

    def step_counts(self) -> tuple[int, ...]:
        """``local_steps`` as numbers (one, or one per party)."""
        try:
            counts = tuple(int(v) for v in str(self.local_steps).split(","))
        except ValueError:
            counts = ()
        if not counts or min(counts) < 1:
            raise ConfigError(f"local_steps must be a number >= 1 or one per party, comma-separated; "
                              f"got {self.local_steps!r}")
        return counts


@register_method
class AggVFL(AggregateMethod[AggVFLOptions]):
    """Agg-VFL: local models per party, predictions averaged by a non-trainable top."""

    name = "aggvfl"
    summary = "Agg-VFL: per-party local models, logits averaged by a fixed top (optional secure sum)"
    Options = AggVFLOptions
    partial_rows = True

    def plan(self, scenario: Scenario) -> AggregatePlan:
        """The shared plan, with every party's ``local_steps``; refuses a configuration that reveals a peer."""
        plan = super().plan(scenario)
        parties = (scenario.active, *plan.passives)
        counts = self.options.step_counts()
        if len(counts) not in (1, len(parties)):
            raise ConfigError(f"local_steps has {len(counts)} numbers for {len(parties)} parties "
                              f"({', '.join(parties)}): give one, or one per party")
        steps = dict(zip(parties, counts * len(parties) if len(counts) == 1 else counts, strict=True))
        peer_reveal.refuse_configuration("aggvfl", self.options.secagg, scenario.active in plan.archs,
                                         len(plan.passives), self.options.allow_peer_reveal)
        return replace(plan, local_steps=steps)

    def report(self, side: AggregateActive, evaluation: Evaluation) -> dict[str, Any]:
        o, archs = self.options, side.plan.archs
        extra: dict[str, Any] = {"architectures": {p: a.name for p, a in archs.items()}, "secagg": o.secagg,
                                 "local_steps": dict(side.plan.local_steps),
                                 "top": "mean of logits (fixed)", "secagg_stats": side.agg.stats.as_dict()}
        if o.allow_peer_reveal and side.name not in archs and peer_reveal.reveals_peer(o.secagg, False,
                                                                                   len(side.passives)):
            extra["warnings"] = [peer_reveal.warning("aggvfl", o.secagg)]
        return extra

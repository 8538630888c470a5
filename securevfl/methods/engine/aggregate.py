"""Split learning by aggregation: every party's contribution is summed by an aggregation scheme.

Per round, each passive party computes its contribution c_k on its rows of the agreed batch and
hands it to the round's aggregation (plaintext, DH secure aggregation, Paillier: any scheme of
:mod:`securevfl.privacy.aggregation`), so the active party learns only the sum S of the passive
contributions; with its own contribution it forms the global value G = (S + c_active) / K over
the K parties that took part. Then one of two loss shapes:

* **one shared loss** (``per_party_loss = False``, Agg-VFL): G is the prediction; the active party
  computes the loss on G and broadcasts dL/dS, which equals dL/dc_k for every party;
* **a loss per party** (``per_party_loss = True``, EASTER): the active party broadcasts G; every
  party predicts from G with its own ``head`` and sends its logits; the active party returns each
  party the gradient of that party's loss; each party backpropagates through its head into G and
  from there, divided by K, into its own contribution (``embed_grad_all``: the gradients with
  respect to G are themselves summed by the scheme first — one more round).

What a method derives from the scenario (the parties' architectures, the scheme, per-party step
counts, the dropout limit) is its :class:`AggregatePlan`, which every side holds. A round may drop
passive parties (:meth:`AggregateMethod.dropped`, simulated, the same at every party); they skip the
batch and K counts the survivors. Evaluation runs the same round without
gradients; with per-party losses every party's test predictions are scored.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
from torch import nn

from securevfl.data.labels import REGRESSION
from securevfl.data.scenario import PartyData, Scenario
from securevfl.errors import ConfigError, ModelError, ProtocolError
from securevfl.federation.runtime import PartyContext
from securevfl.methods.base import ActiveOutcome, Method, Role, as_tensor, predict_scores
from securevfl.methods.engine import peer_reveal
from securevfl.methods.engine.loop import TRAIN, EngineRecord, Evaluation, Losses, PartySide, agreed_batches
from securevfl.methods.engine.split import checked_tensor, side_role
from securevfl.networks.zoo import (
    MODEL_CHOICES,
    ZOO_CHOICES,
    Architecture,
    architectures,
    build_local_model,
    layered_architecture,
)
from securevfl.privacy.aggregation import (
    AggregateResult,
    AggregationConfig,
    AggregationScheme,
    aggregation_names,
    create_aggregation,
    resolve_key_agreement,
    scheme_class,
    scheme_options,
)
from securevfl.settings import setting

GLOBAL = "global"
LOGITS = "logits"
GRADIENT = "gradient"
EMBED_GRAD = "embed_grad"
SCORES = "scores"
#: Partial coverage: which of its rows of the round a passive party contributes (the others: a masked zero).
ROWS = "rows"
#: Scoring, at the first evaluation: whether a passive party is in the secure-aggregation session (a party left
#: out of the scoring can leave too few others to hide each sum: then none is, and the active party scores alone).
MEMBER = "member"
#: What an attack on a party can see besides its messages (``ctx.observe``): the sum the active party
#: learns in each round, and a passive party's own contribution.
OBSERVED_SUM, OBSERVED_CONTRIBUTION = "aggregate.sum", "aggregate.contribution"


@dataclass(frozen=True)
class AggregationOptions:
    """Options every aggregation method shares (a method's options dataclass extends this).

    ``secagg``: the scheme that sums the passive contributions, with ``key_agreement`` and
    ``frac_bits`` (its fixed-point precision), ``ring_bits`` (the ring the masked vectors travel in:
    64, or 32 for half the bytes where the range allows, ``dh`` and ``pairwise`` only) and
    ``secagg_options``, the scheme's own options
    (``--option secagg.key_bits=3072``), validated by the aggregation registry; ``models``:
    ``hetero`` (each party its own zoo architecture) or ``homo``, from the ``zoo`` ``default`` or
    ``paper`` (the paper's LeNet / MLP / CNN on image strips), or, with ``el_pl`` (``"2:1"``), the
    same MLP with that many embedding and decision layers at every party; ``embedding_size``: the width of
    the local models' embeddings; ``allow_peer_reveal``: accept a configuration in which a passive
    party can compute another's contribution (refused by default, see ``engine.peer_reveal``).
    """

    secagg: str = setting("none", help="How the passive contributions are summed: none | dh | pairwise | paillier.")
    key_agreement: str = setting(
        "x25519", help="Key agreement of dh and pairwise: x25519 | ffdh2048 | ffdh3072 | modp2048 (ffdh = ffdh2048).")
    frac_bits: int = setting(16, help="Fixed-point fraction bits of the summed values (precision 2^-frac_bits).")
    ring_bits: int = setting(
        64, help="Ring of the masked vectors, 64 | 32 (half the bytes, a smaller range; dh and pairwise only).")
    secagg_options: Mapping[str, Any] = setting(
        default_factory=dict, help="The scheme's own options, given as secagg.KEY=VALUE (e.g. secagg.key_bits=3072).")
    models: str = setting(
        "hetero", help="hetero (the party at position i takes zoo entry i, active first) | homo (every party entry 0).")
    zoo: str = setting(
        "default", help="Architectures picked from: default | paper (the paper's LeNet / MLP / CNN for image strips).")
    el_pl: str = setting(
        "", help="EL:PL (e.g. 2:1): every party the same 256-wide MLP, EL embedding, PL decision layers; empty: off.")
    embedding_size: int = setting(
        128, help="Width of the local models' embeddings (--embedding-dim and --hidden are not used).")
    allow_peer_reveal: bool = setting(
        False, help="Accept a run where a passive party can compute another's contribution (refused by default).")

    def __post_init__(self) -> None:
        if self.secagg not in aggregation_names():
            raise ConfigError(f"secagg must be one of {', '.join(aggregation_names())}, got {self.secagg!r}")
        scheme_options(self.secagg, self.secagg_options)  # refuse a bad scheme option before any party starts
        resolve_key_agreement(self.key_agreement)
        AggregationConfig(frac_bits=self.frac_bits, ring_bits=self.ring_bits)  # refuses bad frac_bits / ring_bits
        scheme_class(self.secagg).check_ring(self.ring_bits)
        if self.models not in MODEL_CHOICES:
            raise ConfigError(f"models must be one of {', '.join(MODEL_CHOICES)}, got {self.models!r}")
        if self.zoo not in ZOO_CHOICES:
            raise ConfigError(f"zoo must be one of {', '.join(ZOO_CHOICES)}, got {self.zoo!r}")
        if self.embedding_size < 1:
            raise ConfigError(f"embedding_size must be >= 1, got {self.embedding_size}")
        if self.el_pl:
            layered_architecture(self.el_pl)

    def aggregation(self, threshold: int | None = None) -> AggregationScheme[Any]:
        """The configured scheme (``threshold``: the Shamir threshold of ``dh``, None for its default)."""
        config = AggregationConfig(frac_bits=self.frac_bits, key_agreement=self.key_agreement, threshold=threshold,
                                   ring_bits=self.ring_bits)
        return create_aggregation(self.secagg, config, self.secagg_options)


AggregationOptionsT = TypeVar("AggregationOptionsT", bound="AggregationOptions")


@dataclass(frozen=True)
class AggregatePlan:
    """What an aggregation method derives from a scenario (:meth:`AggregateMethod.plan`).

    ``archs``: each party's local model architecture (an active party without features has none);
    ``scheme``: the aggregation, checked for the number of passive parties; ``passives``: the passive
    parties in order; ``local_steps``: optimiser steps per round by party (1 where absent; Agg-VFL);
    ``max_drops``: the most passive parties a simulated round may drop (EASTER).
    """

    archs: Mapping[str, Architecture]
    scheme: AggregationScheme[Any]
    passives: tuple[str, ...]
    local_steps: Mapping[str, int] = field(default_factory=dict)
    max_drops: int = 0


class AggregateMethod(Method[AggregationOptionsT]):
    """Aggregation split learning; subclasses set the loss shape and override the hooks below."""

    uses_engine = True
    supports_defenses = True
    supports_objectives = True
    supports_category_embeddings = True

    per_party_loss: ClassVar[bool] = False
    leaves_out_parties = True  # the secure aggregation is set up with the parties in scoring (or none of them)

    def plan(self, scenario: Scenario) -> AggregatePlan:
        """The scheme, checked for the passive parties, and every party's architecture from the zoo.

        ``models=hetero|homo``, or with ``el_pl`` the same layered MLP at every party.
        """
        passives = self.require_passives(scenario)
        scheme = self.options.aggregation()
        scheme.validate(len(passives))
        datas = [(p, scenario.party_data(p)) for p in (scenario.active, *passives)]
        archs = architectures(datas, self.options.models, self.options.zoo)
        if self.options.el_pl:
            archs = dict.fromkeys(archs, layered_architecture(self.options.el_pl))
        return AggregatePlan(archs, scheme, passives)

    def roles(self, scenario: Scenario) -> dict[str, Role]:
        """One engine role per party, every side holding the method's :meth:`plan`."""
        plan = self.plan(scenario)
        roles = {p: side_role(AggregatePassive(self, scenario.party_data(p), plan)) for p in plan.passives}
        roles[scenario.active] = side_role(AggregateActive(self, scenario.party_data(scenario.active), plan,
                                                           plan.passives))
        return roles

    def local_model(self, side: _AggregateSide) -> nn.Module | None:
        """A party's model of the planned architecture (None for an active party without features)."""
        arch = side.plan.archs.get(side.name)
        if arch is None:
            return None
        return build_local_model(side.data, arch, self.options.embedding_size, side.data.n_classes,
                                 self.config.seed, side.name)

    def contribution(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """What a party contributes for rows ``x`` (Agg-VFL: its logits; EASTER: its embedding)."""
        return model(x)

    def head(self, model: nn.Module, global_value: torch.Tensor) -> torch.Tensor:
        """A party's prediction from the global value (per-party losses only)."""
        raise NotImplementedError

    def embed_grad_all(self) -> bool:
        """Whether the gradients with respect to the global value are summed across parties."""
        return False

    def dropped(self, plan: AggregatePlan, epoch: int, batch: int) -> frozenset[str]:
        """Passive parties that miss round ``batch`` of ``epoch`` (simulated; none by default)."""
        return frozenset()

    def check_round(self, survivors: int, active_contributes: bool) -> None:
        """Refuse a round whose structure would reveal a party's contribution (no-op by default)."""

    def contribution_width(self, side: PartySide) -> int:
        """The width of a party's contribution (Agg-VFL: the logits; EASTER: the embedding)."""
        return side.data.n_classes

    def summable(self, active_contributes: bool, counts: np.ndarray) -> np.ndarray:
        """Partial coverage: per row, whether its passive contributions are summed (``peer_reveal.summable_rows``)."""
        o = self.options
        return peer_reveal.summable_rows(o.secagg, active_contributes, counts, o.allow_peer_reveal)

    def check_rows(self, active_contributes: bool, counts: np.ndarray) -> None:
        """Partial coverage: refuse a round some row of which was summed over too few passive parties."""
        o = self.options
        peer_reveal.refuse_rows(self.name, o.secagg, active_contributes, counts, o.allow_peer_reveal)

    def report(self, side: AggregateActive, evaluation: Evaluation) -> dict[str, Any]:
        """Method-specific report entries (``side.agg.stats`` has the aggregation's counters)."""
        return {}


def _global_message(message: Any, sender: str, rows: int) -> tuple[torch.Tensor, int]:
    if not isinstance(message, dict) or set(message) != {"E", "k"} or not isinstance(message["k"], int) \
            or message["k"] < 1:
        raise ProtocolError(f"{sender} sent a malformed global value")
    return checked_tensor(message["E"], sender, rows, "global value"), message["k"]


class _AggregateSide(PartySide):
    method: AggregateMethod[Any]
    plan: AggregatePlan

    def __init__(self, method: AggregateMethod[Any], data: PartyData, plan: AggregatePlan,
                 passives: tuple[str, ...] = ()) -> None:
        super().__init__(method, data, passives, plan)
        self.model: nn.Module | None = None
        #: Partial coverage, at a passive party while it evaluates: its mask over the positions evaluated.
        self.held: np.ndarray | None = None
        #: The scheme's side of the secure-aggregation session (scoring: set up at the first evaluation).
        self.agg: Any = None

    def local_steps(self) -> int:
        """Optimiser steps this party makes per round on the same batch (shared loss only).

        After the first, each step reuses the round's stale values: a passive party the broadcast
        gradient, the active party the sum of the passive contributions.
        """
        return self.plan.local_steps.get(self.name, 1)

    def _build_model(self, ctx: PartyContext) -> None:
        model = self.method.local_model(self)
        if model is not None:
            self.model = model.to(ctx.device)
            self.state.modules["model"] = self.model
            self.state.optimizers["model"] = torch.optim.Adam(self.model.parameters(), lr=self.config.lr)
        self.X = as_tensor(self.data.X_train, ctx.device)

    def batches(self, epoch: int) -> Iterator[tuple[np.ndarray, frozenset[str]]]:
        for b, rows in enumerate(agreed_batches(self.rows, self.config, epoch)):
            yield rows, self.method.dropped(self.plan, epoch, b)

    sums_rows = True

    def evaluate_positions(self, ctx: PartyContext, split: str, positions: np.ndarray,
                           phase: str) -> Evaluation | None:
        """:meth:`PartySide.evaluate_positions`; a passive party keeps its mask over ``positions`` meanwhile."""
        coverage = self.data.coverage
        if coverage is not None and self.data.name in coverage.train:
            self.held = coverage.split(split)[self.data.name][positions]
        try:
            return super().evaluate_positions(ctx, split, positions, phase)
        finally:
            self.held = None

    def evaluate_held(self, ctx: PartyContext, X: np.ndarray, held: np.ndarray, phase: str) -> Evaluation | None:
        """:meth:`PartySide.evaluate_held`: its vector of the round has ``len(held)`` rows, its own at ``held``."""
        self.held = held
        try:
            return self.evaluate(ctx, X, phase)
        finally:
            self.held = None


class AggregatePassive(_AggregateSide):
    """A passive party: contribute to the sum; learn from the broadcast gradient or from its own loss.

    Under partial coverage it contributes a vector of the round's full size: its values on the rows
    it holds that the active party says are summed, an exact zero elsewhere (a masked zero once the
    scheme masks it), and it receives the global value, or the gradient, of those rows only.
    """

    #: Whether it is in the secure-aggregation session (None: scoring, not told yet).
    member: bool | None = None

    def build(self, ctx: PartyContext) -> None:
        self._build_model(ctx)
        self.regroup(ctx)

    def build_for_scoring(self, ctx: PartyContext) -> None:
        """The model only: the secure-aggregation session is set up at the first evaluation (:meth:`regroup`)."""
        self._build_model(ctx)

    def regroup(self, ctx: PartyContext, passives: tuple[str, ...] = ()) -> None:
        """A new secure-aggregation session, its parties named by the active party's session message."""
        self.agg = self.plan.scheme.passive()
        self.member = True
        ctx.stage = "secagg setup"
        self.agg.setup(ctx)

    def _summed(self, ctx: PartyContext, phase: str, held: np.ndarray) -> np.ndarray:
        """Which of its rows of the round (``held``: its mask over the round's positions) are summed."""
        keep = ctx.recv(ctx.active, self.tag(phase, ROWS))
        if not isinstance(keep, np.ndarray) or keep.dtype != np.bool_ or keep.shape != (int(held.sum()),):
            raise ProtocolError(f"{ctx.active} sent a malformed row selection")
        return keep

    def _spread(self, values: np.ndarray, held: np.ndarray | None, keep: np.ndarray | None) -> np.ndarray:
        """``values`` (of the summed rows) at their positions in the round, exact zeros elsewhere."""
        if held is None or keep is None:
            return values
        full = np.zeros((len(held), self.method.contribution_width(self)), dtype=np.float64)
        full[np.flatnonzero(held)[keep]] = values
        return full

    def train_batch(self, ctx: PartyContext, batch: tuple[np.ndarray, frozenset[str]]) -> None:
        idx, dropped = batch
        method, model, opt = self.method, self.model, self.state.optimizers["model"]
        assert model is not None
        if ctx.name in dropped:
            for _ in range(2 if method.embed_grad_all() else 1):
                self.agg.drop(ctx)
            return
        held = keep = None
        rows = idx
        if self.data.coverage is not None:  # partial coverage: its rows of the batch that are summed
            held = self.data.coverage.train[self.data.name][idx]
            keep = self._summed(ctx, TRAIN, held)
            rows = self.data.own_rows("train", idx)[keep]
        with ctx.meter.compute():
            e = method.contribution(model, self.X[rows])
            e_np = e.detach().cpu().numpy().astype(np.float64)
            sent = self._spread(e_np, held, keep)
        ctx.observe(OBSERVED_CONTRIBUTION, sent)
        self.agg.contribute(ctx, sent)
        if held is not None and not len(rows):  # none of its rows summed: nothing comes back
            if method.embed_grad_all():
                self.agg.contribute(ctx, self._spread(e_np, held, keep))
            return
        if not method.per_party_loss:
            grad = checked_tensor(ctx.recv(ctx.active, self.tag(TRAIN, GRADIENT)), ctx.active, len(rows), "gradient")
            with ctx.meter.compute():
                grad = grad.to(self.device)
                for step in range(self.local_steps()):
                    if step:  # a local update: the fresh contribution, the stale gradient
                        e = method.contribution(model, self.X[rows])
                    opt.zero_grad()
                    e.backward(grad)
                    opt.step()
            return
        E, k = _global_message(ctx.recv(ctx.active, self.tag(TRAIN, GLOBAL)), ctx.active, len(rows))
        with ctx.meter.compute():
            E = E.to(self.device).requires_grad_(True)
            logits = method.head(model, E)
        ctx.send(ctx.active, self.tag(TRAIN, LOGITS), logits.detach())
        grad = checked_tensor(ctx.recv(ctx.active, self.tag(TRAIN, GRADIENT)), ctx.active, len(rows), "gradient")
        with ctx.meter.compute():
            opt.zero_grad()
            logits.backward(grad.to(self.device))
            grad_E = E.grad
        assert grad_E is not None  # the head's logits depend on E
        if method.embed_grad_all():
            self.agg.contribute(ctx, self._spread(grad_E.cpu().numpy().astype(np.float64), held, keep))
            grad_E = checked_tensor(ctx.recv(ctx.active, self.tag(TRAIN, EMBED_GRAD)), ctx.active, len(rows),
                                    "summed gradient").to(self.device)
        with ctx.meter.compute():
            e.backward(grad_E / k)
            opt.step()

    def evaluate(self, ctx: PartyContext, X: np.ndarray, phase: str) -> None:
        model, held = self.model, self.held
        assert model is not None
        keep = None
        if self.member is None:  # the first evaluation of a scoring run: in the session the active party sets up?
            member = ctx.recv(ctx.active, self.tag(phase, MEMBER))
            if not isinstance(member, bool):
                raise ProtocolError(f"{ctx.active} sent a malformed session membership")
            self.member = member
            if member:
                self.regroup(ctx)
        if not self.member:  # left out of the session: it takes no part (the active party knows)
            return
        if held is not None:  # partial coverage: X holds its rows of the positions; the summed ones
            keep = self._summed(ctx, phase, held)
            X = X[keep]
        with ctx.meter.compute(), torch.no_grad():
            e = self.method.contribution(model, as_tensor(X, ctx.device)).cpu().numpy().astype(np.float64)
            sent = self._spread(e, held, keep)
        ctx.observe(OBSERVED_CONTRIBUTION, sent)
        self.agg.contribute(ctx, sent)
        if self.method.per_party_loss and (held is None or len(X)):
            E, _ = _global_message(ctx.recv(ctx.active, self.tag(phase, GLOBAL)), ctx.active, len(X))
            with ctx.meter.compute(), torch.no_grad():
                outputs = self.method.head(model, E.to(ctx.device))
                # class probabilities; for regression the outputs on the standardised scale (the active party maps
                # them back: only it knows the target's mean and spread)
                regression = self.data.task == REGRESSION
                scores = outputs.cpu().numpy().astype(np.float64) if regression else predict_scores(outputs)
            ctx.send(ctx.active, self.tag(phase, SCORES), scores)

    def own_outputs(self, X: np.ndarray) -> np.ndarray | None:
        assert self.model is not None
        with torch.no_grad():
            return self.method.contribution(self.model, as_tensor(X, self.device)).cpu().numpy().astype(np.float64)


@dataclass(frozen=True)
class _Round:
    """Partial coverage, at the active party: who is summed on which rows of a round.

    ``summed``: per passive party, its mask over the round's rows (held, taking part and summable);
    ``counts``: the parties in each row's mean (the active party included where it contributes).
    """

    summed: dict[str, np.ndarray]
    counts: np.ndarray


class AggregateActive(_AggregateSide):
    """The active party: its own contribution, the aggregation, the loss (shared or one per party).

    Under partial coverage the global value of a row is the mean over the parties summed on it
    (K per row: the active party, where it contributes, and each passive party that holds the row, takes
    part and is summed there, see :meth:`AggregateMethod.summable`); each passive party is told which of
    its rows are summed and receives the global value (or gradient) of those rows only.
    """

    #: Serving: a passive party down is left out, and a restarted one taken back (its secure aggregation is
    #: set up again with the parties in scoring, :meth:`regroup`).
    leave_out = True
    takes_back = True
    #: The passive parties of the secure-aggregation session (None: scoring, not set up yet).
    members: tuple[str, ...] | None = None

    def build(self, ctx: PartyContext) -> None:
        self.build_for_scoring(ctx)
        self.regroup(ctx, self.passives)

    def build_for_scoring(self, ctx: PartyContext) -> None:
        """The model only: the secure-aggregation session is set up at the first evaluation (:meth:`regroup`)."""
        self._build_model(ctx)
        self.y = self.training_targets()
        self.members = None

    def regroup(self, ctx: PartyContext, passives: tuple[str, ...] = ()) -> None:
        """A new secure-aggregation session with ``passives`` (none: the active party scores alone).

        Serving calls it when the passive parties in scoring change (:meth:`can_regroup` said yes); each
        of ``passives`` has been told to set up again (:meth:`AggregatePassive.regroup`), the others are
        left out of every evaluation until the next session.
        """
        self.members = tuple(p for p in self.passives if p in passives)
        self.agg = None
        if self.members:
            self.agg = self.plan.scheme.active()
            ctx.stage = "secagg setup"
            self.agg.setup(ctx, self.members)

    def _first_session(self, ctx: PartyContext, phase: str) -> None:
        """Scoring: each passive party in scoring told whether it is in the session, which is then set up.

        Every one is, unless one is left out (:attr:`silent`) and the others' sums could not hide each
        contribution: then none is, and the active party scores alone (a model without a part of its
        own cannot: ModelError).
        """
        up = tuple(p for p in self.passives if p not in self.silent)
        members = up if self.can_regroup(up) else ()
        if not members and self.model is None:
            raise ModelError(f"the {self.method.name} model cannot score without {', '.join(sorted(self.silent))}: "
                             f"the parties left ({', '.join(up)}) cannot hide each one's part of a sum, and the "
                             "active party has no model of its own")
        for p in up:
            ctx.send(p, self.tag(phase, MEMBER), p in members)
        self.regroup(ctx, members)

    def can_regroup(self, passives: tuple[str, ...]) -> bool:
        """Whether a session with just ``passives`` can score: their sums hide each one (none: a model of its own)."""
        if not passives:
            return self.model is not None
        try:
            self.plan.scheme.validate(len(passives))
            peer_reveal.refuse_configuration(self.method.name, self.method.options.secagg, self.model is not None,
                                             len(passives), self.method.options.allow_peer_reveal)
        except ConfigError:
            return False
        return True

    def _plan_round(self, ctx: PartyContext, phase: str, held: Mapping[str, np.ndarray] | None, rows: int,
                    dropped: frozenset[str], own: bool) -> _Round | None:
        """Partial coverage: each passive party's summed rows, sent to it (its rows only); None: full coverage."""
        if held is None:
            return None
        every = np.ones(rows, dtype=bool)
        taking = {p: held.get(p, every) & (p not in dropped) for p in self.passives}
        count = _counts(taking.values(), rows)
        ok = self.method.summable(own, count)
        summed = {p: taking[p] & ok for p in self.passives}
        for p in self.passives:
            if p not in dropped:
                ctx.send(p, self.tag(phase, ROWS), summed[p][held.get(p, every)])
        counts = _counts(summed.values(), rows) + int(own)
        return _Round(summed, counts)

    def _global(self, ctx: PartyContext, own: torch.Tensor | None, dropped: frozenset[str],
                plan: _Round | None = None) -> tuple[torch.Tensor, int, tuple[str, ...], _Round | None]:
        """S (float32, on the device), K and the round's plan as summed; refuses a round that would reveal a party.

        Under partial coverage the plan keeps the passive parties actually summed (a real dropout, which
        the scheme recovers from, leaves fewer than planned), and every row is checked.
        """
        members = self.passives if self.members is None else self.members
        if self.agg is not None:
            result = self.agg.aggregate(ctx, dropped & frozenset(members))
        elif plan is not None:  # a session of no passive party (serving, :meth:`regroup`): nothing is summed
            result = AggregateResult(np.zeros((len(plan.counts), self.method.contribution_width(self))), (), ())
        else:
            raise ProtocolError("a round without a secure-aggregation session")
        ctx.observe(OBSERVED_SUM, result.total)  # what the active party learns: the sum, nothing finer
        if plan is None:
            self.method.check_round(len(result.survivors), own is not None)
        else:
            summed = {p: m if p in result.survivors else np.zeros_like(m) for p, m in plan.summed.items()}
            counts = _counts(summed.values(), len(plan.counts))
            self.method.check_rows(own is not None, counts)
            plan = _Round(summed, counts + int(own is not None))
        k = len(result.survivors) + (1 if own is not None else 0)
        with ctx.meter.compute():
            S = torch.as_tensor(result.total, dtype=torch.float32, device=self.device)
        return S, k, tuple(p for p in self.passives if p not in dropped), plan

    def _mean(self, S: torch.Tensor, own: torch.Tensor | None, k: int, plan: _Round | None) -> torch.Tensor:
        """The global value: (S + own) / K, K per row under partial coverage (a row nobody is summed on: 0)."""
        total = S + own if own is not None else S
        if plan is None:
            return total / k
        K = torch.as_tensor(np.maximum(plan.counts, 1), dtype=total.dtype, device=total.device)
        return total / K.unsqueeze(1)

    def train_batch(self, ctx: PartyContext, batch: tuple[np.ndarray, frozenset[str]]) -> tuple[Losses, int]:
        idx, dropped = batch
        model = self.model
        own = None
        if model is not None:
            with ctx.meter.compute():
                own = self.method.contribution(model, self.X[idx])
        plan = self._plan_round(ctx, TRAIN, self.data.peer_masks("train", idx), len(idx), dropped, own is not None)
        S, k, alive, plan = self._global(ctx, own, dropped, plan)
        if not self.method.per_party_loss:
            return self._shared_loss(ctx, idx, own, S, k, alive, plan), len(idx)
        return self._per_party_losses(ctx, idx, own, S, k, alive, dropped, plan), len(idx)

    def _shared_loss(self, ctx: PartyContext, idx: np.ndarray, own: torch.Tensor | None, S: torch.Tensor, k: int,
                     alive: tuple[str, ...], plan: _Round | None) -> dict[str, float]:
        model, opt = self.model, self.state.optimizers.get("model")
        valid = slice(None) if plan is None else torch.as_tensor(plan.counts > 0, device=self.device)
        with ctx.meter.compute():
            S.requires_grad_(True)
            loss = self.objective.loss(self._mean(S, own, k, plan)[valid], self.y[idx][valid])
            if opt is not None:
                opt.zero_grad()
            loss.backward()
            if opt is not None:
                opt.step()
        assert S.grad is not None
        if plan is None:
            ctx.broadcast(alive, self.tag(TRAIN, GRADIENT), self.defend(S.grad))  # = dL/dc_k, equal for all
        else:
            for p in alive:
                if plan.summed[p].any():
                    ctx.send(p, self.tag(TRAIN, GRADIENT), self.defend(S.grad[torch.as_tensor(plan.summed[p])]))
        if model is not None and opt is not None and self.local_steps() > 1:
            stale = S.detach()  # local updates of the own model against this round's passive sum
            with ctx.meter.compute():
                for _ in range(self.local_steps() - 1):
                    opt.zero_grad()
                    self.objective.loss(self._mean(stale, self.method.contribution(model, self.X[idx]), k, plan)[valid],
                                        self.y[idx][valid]).backward()
                    opt.step()
        return {"loss": float(loss.detach())}

    def _per_party_losses(self, ctx: PartyContext, idx: np.ndarray, own: torch.Tensor | None, S: torch.Tensor,
                          k: int, alive: tuple[str, ...], dropped: frozenset[str],
                          plan: _Round | None) -> dict[str, float]:
        method, model, opt = self.method, self.model, self.state.optimizers.get("model")
        every_loss = method.embed_grad_all()
        y = self.y[idx]
        with ctx.meter.compute():
            E = self._mean(S, own, k, plan)
        if plan is None:
            ctx.broadcast(alive, self.tag(TRAIN, GLOBAL), {"E": E.detach(), "k": k})
            rows: dict[str, Any] = dict.fromkeys(alive, slice(None))
        else:  # each passive party the global value of its summed rows only
            rows = {p: torch.as_tensor(plan.summed[p]) for p in alive if plan.summed[p].any()}
            for p, r in rows.items():
                ctx.send(p, self.tag(TRAIN, GLOBAL), {"E": E.detach()[r], "k": k})
        losses: dict[str, float] = {}
        if model is not None and opt is not None:
            with ctx.meter.compute():
                E_in = E.detach().requires_grad_(True) if every_loss else E
                own_loss = self.objective.loss(method.head(model, E_in), y)
                opt.zero_grad()
                own_loss.backward()
                if not every_loss:
                    opt.step()
            losses[ctx.name] = float(own_loss.detach())
        for p, r in rows.items():
            logits = checked_tensor(ctx.recv(p, self.tag(TRAIN, LOGITS)), p, len(y[r]), "logits")
            with ctx.meter.compute():
                leaf = logits.to(self.device).requires_grad_(True)
                loss = self.objective.loss(leaf, y[r])
                loss.backward()
            losses[p] = float(loss.detach())
            assert leaf.grad is not None
            ctx.send(p, self.tag(TRAIN, GRADIENT), self.defend(leaf.grad))
        if every_loss:  # extension: every party's loss reaches every contribution
            grads = self.agg.aggregate(ctx, dropped)
            with ctx.meter.compute():
                G = torch.as_tensor(grads.total, dtype=torch.float32, device=self.device)
                if model is not None:
                    assert E_in.grad is not None  # own_loss.backward() reached the detached E_in
                    G = G + E_in.grad
            if plan is None:
                ctx.broadcast(alive, self.tag(TRAIN, EMBED_GRAD), self.defend(G))
            else:
                for p, r in rows.items():
                    ctx.send(p, self.tag(TRAIN, EMBED_GRAD), self.defend(G[r]))
            if own is not None and opt is not None:
                with ctx.meter.compute():
                    own.backward(G / k if plan is None else
                                 G / torch.as_tensor(plan.counts, dtype=G.dtype, device=G.device).unsqueeze(1))
                    opt.step()
        return losses

    def evaluate(self, ctx: PartyContext, X: np.ndarray, phase: str) -> Evaluation:
        method, model = self.method, self.model
        own = None
        if model is not None:
            with ctx.meter.compute(), torch.no_grad():
                own = method.contribution(model, as_tensor(X, ctx.device))
        if self.members is None:  # the first evaluation of a scoring run: the session of the parties in scoring
            self._first_session(ctx, phase)
        others = frozenset(self.passives) - frozenset(self.members or ())  # not in the session: not asked
        plan = self._plan_round(ctx, phase, self.present, len(X), others, own is not None)
        S, k, _, plan = self._global(ctx, own, others, plan)
        with ctx.meter.compute(), torch.no_grad():
            G = self._mean(S, own, k, plan)
        contributed = None if plan is None else {p: plan.summed[p] for p in self.passives}
        if not method.per_party_loss:
            return Evaluation(self.objective.predictions(G), contributed=contributed)
        if plan is None:
            taking = tuple(p for p in self.passives if p not in others)
            ctx.broadcast(taking, self.tag(phase, GLOBAL), {"E": G, "k": k})
            rows: dict[str, np.ndarray] = {p: np.ones(len(X), dtype=bool) for p in taking}
        else:
            rows = {p: plan.summed[p] for p in self.passives if plan.summed[p].any()}
            for p, r in rows.items():
                ctx.send(p, self.tag(phase, GLOBAL), {"E": G[torch.as_tensor(r)], "k": k})
        per_party: dict[str, np.ndarray] = {}
        if model is not None:
            with ctx.meter.compute(), torch.no_grad():
                per_party[ctx.name] = self.objective.predictions(method.head(model, G))
        for p, r in rows.items():
            n = int(r.sum())
            scores = np.asarray(ctx.recv(p, self.tag(phase, SCORES)))
            if scores.shape != (n, self.data.n_classes) or not np.issubdtype(scores.dtype, np.floating):
                raise ProtocolError(f"{p} sent malformed test scores of shape {scores.shape}")
            got = self.objective.predictions(torch.as_tensor(scores)) if self.objective.regression else scores
            if plan is None:
                per_party[p] = got
            else:  # the rows it did not score: NaN (left out of its metrics and of the ensemble)
                full = np.full((len(X), *got.shape[1:]), np.nan)
                full[r] = got
                per_party[p] = full
        if plan is None:
            ensemble: np.ndarray = np.mean(list(per_party.values()), axis=0)
        else:
            ensemble = ensemble_scores(list(per_party.values()), self.objective.predictions(torch.zeros(
                (len(X), self.data.n_classes), device=self.device)))
        # the active party's own model when it has one, else the ensemble (EASTER's headline is the mean)
        return Evaluation(per_party.get(ctx.name, ensemble), per_party, contributed)

    def outcome(self, ctx: PartyContext, evaluation: Evaluation | None, record: EngineRecord) -> ActiveOutcome:
        y = self.data.y_test
        assert evaluation is not None and y is not None
        return ActiveOutcome(y_true=y, scores=evaluation.scores,
                             per_party={p: scored_rows(y, s) for p, s in evaluation.per_party.items()},
                             history=record.history,
                             extra={**self.method.report(self, evaluation), **record.extra()})


def _counts(masks: Iterable[np.ndarray], rows: int) -> np.ndarray:
    """Per row, how many of ``masks`` hold it."""
    total = np.zeros(rows, dtype=np.int64)
    for mask in masks:
        total += mask
    return total


def ensemble_scores(parts: list[np.ndarray], fallback: np.ndarray) -> np.ndarray:
    """Per row, the mean of the parts that scored it (NaN: not scored); ``fallback`` where none did."""
    if not parts:
        return fallback
    if not any(np.isnan(part).any() for part in parts):
        return np.mean(parts, axis=0)  # every part scored every row (full coverage): as before
    stacked = np.stack(parts)
    scored = ~np.isnan(stacked)
    counts = scored.sum(axis=0)
    total = np.where(scored, stacked, 0.0).sum(axis=0)
    return np.where(counts > 0, total / np.maximum(counts, 1), fallback)


def scored_rows(y: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The labels and scores of the rows a party scored (partial coverage leaves NaN on the others)."""
    if not np.issubdtype(scores.dtype, np.floating) or not np.isnan(scores).any():
        return y, scores
    rows = ~np.isnan(scores.reshape(len(scores), -1)).any(axis=1)
    return y[rows], scores[rows]

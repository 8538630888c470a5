"""The party loop every split-learning method runs: written once, for every party of every method.

A method supplies one :class:`PartySide` per party (what to build, how to train one batch, how
to evaluate a set of rows); :func:`run_side` owns the rest:

* **epochs and agreed batches**: :meth:`PartySide.batches` (by default the agreed permutation of
  the party's training rows, :func:`securevfl.methods.base.batch_plan`);
* **stages, history and progress**: ``ctx.stage`` names the epoch, the active party's per-batch
  losses become the epoch's ``train_loss`` (one per party where the method has several losses);
  the active party calls ``progress(epoch=, epochs=, loss=)`` after each epoch, and every party
  ``progress(epoch=N, epochs=, resumed=True)`` once when it resumes from epoch N's checkpoint;
* **early stopping** (``TrainConfig.early_stopping`` > 0) and **checkpoints and resume**
  (``TrainConfig.checkpoint_dir``, ``resume``, ``checkpoint_overwrite``) are parts the loop asks at
  its steps, as XGBoost's training loop asks its callbacks: :class:`~.stopping.EarlyStopping` after
  every epoch and phase (validation, the decision, the phase's best weights), and
  :class:`~.resume.Checkpoints` before the first epoch (the run every party agrees on, the state it
  resumes from) and after every epoch (a save);
* **evaluation**: the test rows go through the same :meth:`PartySide.evaluate` protocol;
* **saved models and scoring** (issue 27): after training, :meth:`PartySide.saved` is what the party
  keeps of its side (its modules' weights, at the active party the fitted objective: a regression
  target's scale, and :meth:`PartySide.model_state`: small JSON state such as a lazily built model's
  widths); :func:`score_side` rebuilds the side (:meth:`PartySide.build_for_scoring`), loads that, and
  scores new rows through the same :meth:`PartySide.evaluate` protocol as the test rows, in batches.
  So scoring a run's held-out rows reproduces its test predictions, and every privacy layer of the
  evaluation applies unchanged.

Engine messages use tags ``engine.<phase>.<what>``; a method's own use ``<method>.<phase>.<what>``.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch
from torch import nn

from securevfl.errors import ConfigError, ModelError
from securevfl.federation.runtime import PartyContext
from securevfl.methods.base import batch_plan
from securevfl.methods.engine.defenses import protect, randomized_response, secret_generator
from securevfl.methods.engine.objective import REGRESSION, Objective, make_objective
from securevfl.methods.engine.phases import EVALUATE, TEST, TRAIN, VALIDATE, EngineRecord, Phase
from securevfl.methods.engine.resume import Checkpoints
from securevfl.methods.engine.stopping import EarlyStopping
from securevfl.seeding import simulation_rng

if TYPE_CHECKING:
    from securevfl.data.scenario import PartyData
    from securevfl.methods.base import Method, TrainConfig

OWN_OUTPUTS = "engine.own_outputs.train"
#: ``ctx.observe`` names for a side's own bookkeeping, where the agreed batch plan does not say it
#: (Entity Augmentation's own schedules): the aligned training rows (-1: another row) behind the
#: gradient a passive party just received, and ``(sender, rows)`` of the embedding the active party
#: just received.
GRADIENT_ROWS = "engine.gradient_rows"
EMBEDDING_ROWS = "engine.embedding_rows"
#: Bounds on what the run agreement accepts from a peer.

Generator = torch.Generator | np.random.Generator


class Stateful(Protocol):
    """Anything else a party checkpoints (a queue, a counter): a state dict of tensors and plain values."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


@dataclass
class TrainingState:
    """What a party owns and checkpoints: modules, optimisers, random generators and other state, by name."""

    modules: dict[str, nn.Module] = field(default_factory=dict)
    optimizers: dict[str, torch.optim.Optimizer] = field(default_factory=dict)
    generators: dict[str, Generator] = field(default_factory=dict)
    others: dict[str, Stateful] = field(default_factory=dict)

    def train(self, mode: bool = True) -> None:
        for module in self.modules.values():
            module.train(mode)

    def weights(self) -> dict[str, dict[str, torch.Tensor]]:
        """A detached copy of every module's parameters and buffers."""
        return {n: {k: v.detach().clone() for k, v in m.state_dict().items()} for n, m in self.modules.items()}

    def load_weights(self, weights: Mapping[str, Mapping[str, torch.Tensor]]) -> None:
        for name, module in self.modules.items():
            module.load_state_dict(weights[name])

    def state_dict(self) -> dict[str, Any]:
        generators: dict[str, Any] = {}
        for name, g in self.generators.items():
            generators[name] = g.get_state() if isinstance(g, torch.Generator) else g.bit_generator.state
        return {"modules": self.weights(),
                "optimizers": {n: o.state_dict() for n, o in self.optimizers.items()},
                "generators": generators,
                "others": {n: o.state_dict() for n, o in self.others.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict`; the names must match what this party built."""
        for kind, own in (("modules", self.modules), ("optimizers", self.optimizers),
                          ("generators", self.generators), ("others", self.others)):
            if set(state[kind]) != set(own):
                raise ConfigError(f"checkpoint {kind} {sorted(state[kind])} do not match this run's {sorted(own)}")
        self.load_weights(state["modules"])
        for name, opt in self.optimizers.items():
            opt.load_state_dict(state["optimizers"][name])
        for name, g in self.generators.items():
            if isinstance(g, torch.Generator):
                g.set_state(state["generators"][name])
            else:
                g.bit_generator.state = state["generators"][name]
        for name, other in self.others.items():
            other.load_state_dict(state["others"][name])


@dataclass
class Evaluation:
    """The active party's view of an evaluation: scores per row, and per party where each predicts."""

    scores: np.ndarray
    per_party: dict[str, np.ndarray] = field(default_factory=dict)
    #: Per passive party, the rows its part went into, where that is fewer than the rows it holds (EASTER: a
    #: row summed over too few parties to hide each one is not summed); None: every row it holds.
    contributed: dict[str, np.ndarray] | None = None


Losses = Mapping[str, float]


@dataclass(frozen=True)
class SavedSide:
    """What one party keeps of its trained side.

    Its modules' weights, at the active party its fitted objective (the regression target's
    scale; classification keeps nothing else), and ``state``: the side's own small model state
    beyond the weights (:meth:`PartySide.model_state`; JSON values, saved in the part's manifest),
    such as the widths a lazily built model was built for. Never training data.
    """

    weights: dict[str, dict[str, torch.Tensor]]
    objective: Objective | None = None
    state: dict[str, Any] = field(default_factory=dict)


class PartySide(ABC):
    """One party's part in a split-learning method; :func:`run_side` calls its hooks."""

    def __init__(self, method: Method[Any], data: PartyData, passives: tuple[str, ...] = (),
                 plan: Any = None) -> None:
        self.method = method
        self.config = method.config
        self.data = data
        self.passives = passives  # the active side's partners; empty on a passive side
        self.plan = plan  # what the method derived from the scenario (Method.plan), the same at every side
        self.name: str = ""  # the party's name and device, set by the engine before build
        self.device: Any = "cpu"
        self.state = TrainingState()
        self.stats: dict[str, Any] = {}  # the method's own counters, for its report
        self.phase = Phase(TRAIN, self.config.epochs)  # the phase being trained (set by the engine)
        self.rows = np.arange(data.positions("train"))  # the agreed training positions it trains on
        #: While :meth:`evaluate` runs at the active party under partial coverage: each passive party's
        #: mask over the rows being evaluated (None: every party holds every row).
        self.present: dict[str, np.ndarray] | None = None
        #: While :meth:`evaluate` runs at the active party of a side that can :attr:`leave_out` a passive
        #: party: the passive parties that send nothing for this evaluation (serving: each missed its
        #: deadline, or is down), scored as holding none of the rows (their absent embedding).
        self.silent: frozenset[str] = frozenset()
        self._defense_generator: torch.Generator | None = None

    #: False for a party that only contributes at set-up (TabNet-CT's guests send raw features).
    takes_part: bool = True
    #: The active side scores without a :attr:`silent` passive party (its part left out, the model trained for
    #: it): batch scoring and serving may leave out a passive party that is down.
    leave_out: bool = False
    #: (With :attr:`leave_out`) its evaluation starts with one message from each passive party: serving collects
    #: it with a deadline and leaves out a party that misses it in that batch only.
    collects: bool = False
    #: (With :attr:`leave_out`) a passive party's scoring set-up is with the active party (and the helpers, which
    #: redo theirs in :meth:`rejoined`): serving sets up a restarted passive process again and takes it back.
    takes_back: bool = False
    #: Its evaluation sums one vector over every row evaluated (EASTER's secure sum): a passive party contributes
    #: at every place, an exact zero where it does not hold the row (:meth:`evaluate_held`).
    sums_rows: bool = False
    #: True where the active side may report no loss for an epoch (hetero-lr without loss monitoring):
    #: such an epoch's history entry holds no loss (by default its loss is 0.0).
    loss_optional: bool = False

    def phases(self) -> tuple[Phase, ...]:
        """The training phases in order; by default one ``train`` phase of ``config.epochs``."""
        return (Phase(TRAIN, self.config.epochs),)

    def end_phase(self, ctx: PartyContext, phase: Phase) -> None:  # noqa: B027 - optional hook
        """Called after the last epoch of ``phase`` that this run trained (a hook for a closing exchange)."""

    def tag(self, phase: str, what: str) -> str:
        """The message tag ``<method>.<phase>.<what>``."""
        return f"{self.method.name}.{phase}.{what}"

    @abstractmethod
    def build(self, ctx: PartyContext) -> None:
        """Create the models and optimisers (registered in :attr:`state`); may exchange set-up messages."""

    def build_for_scoring(self, ctx: PartyContext) -> None:
        """Create what scoring with a saved side needs (by default: :meth:`build`).

        A side whose :meth:`build` does training-only work (resolving training entities, queues of
        training data) builds only its models here; every party of the method must exchange the
        same set-up messages (if any) here, as scoring's evaluation protocol is then run in step.
        """
        self.build(ctx)

    def rejoined(self, ctx: PartyContext, peer: str) -> None:  # noqa: B027 - optional hook
        """A helper's side in serving: what a restarted passive party ``peer`` needs from it to set up again.

        hetero-lr's arbiter sends its public key; by default nothing.
        """

    def batches(self, epoch: int) -> Iterable[Any]:
        """The epoch's batches: by default the agreed order of :attr:`rows`, one index array per batch."""
        return agreed_batches(self.rows, self.config, epoch)

    @abstractmethod
    def train_batch(self, ctx: PartyContext, batch: Any) -> tuple[Losses, int] | None:
        """One training step; the active side returns its losses and the rows they average over."""

    @abstractmethod
    def evaluate(self, ctx: PartyContext, X: np.ndarray, phase: str) -> Evaluation | None:
        """Score ``X`` (rows of this party's table) jointly; the active side returns the scores."""

    def evaluate_positions(self, ctx: PartyContext, split: str, positions: np.ndarray,
                           phase: str) -> Evaluation | None:
        """:meth:`evaluate` the agreed ``positions`` of ``split`` (``train`` | ``test``): this party's rows of them.

        Under partial coverage a passive party evaluates the rows it holds and the active party
        learns, in :attr:`present`, which rows each passive party's answer covers.
        """
        X = self.data.X_train if split == "train" else self.data.X_test
        self.present = self.data.peer_masks(split, positions)
        try:
            return self.evaluate(ctx, X[self.data.own_rows(split, positions)], phase)
        finally:
            self.present = None

    def regroup(self, ctx: PartyContext, passives: tuple[str, ...] = ()) -> None:  # noqa: B027 - optional hook
        """Serving, a side that :attr:`sums_rows`: set its secure aggregation up again (by default nothing).

        At the active side with ``passives``, the parties now in scoring; each passive side was told.
        """

    def can_regroup(self, passives: tuple[str, ...]) -> bool:
        """The active side: whether it can score with just ``passives`` in its secure aggregation (:meth:`regroup`)."""
        return True

    def evaluate_held(self, ctx: PartyContext, X: np.ndarray, held: np.ndarray, phase: str) -> Evaluation | None:
        """A passive party: :meth:`evaluate` its rows ``X`` of an evaluation of ``len(held)`` rows, at ``held``.

        Only a side that :attr:`sums_rows` needs the places; by default they are ignored.
        """
        return self.evaluate(ctx, X, phase)

    def validation_loss(self, ctx: PartyContext, rows: np.ndarray) -> float | None:
        """The validation loss of the current unsupervised phase on the aligned training ``rows``.

        Called on every party when early stopping validates an unsupervised phase: with ``joint``
        stopping the active side returns the loss (the others take part and return None); with
        ``local`` stopping each side returns its own loss, or None to train the phase out.
        """
        raise ConfigError(f"{self.method.name} cannot validate its {self.phase.name!r} phase for early stopping")

    def restore(self, state: Mapping[str, Any]) -> None:
        """Load a checkpointed :meth:`TrainingState.state_dict` (a side that builds lazily builds first)."""
        self.state.load_state_dict(state)

    def model_state(self) -> dict[str, Any]:
        """Small JSON-safe model state beyond the weights, kept with a saved side (by default nothing).

        What :meth:`load_saved` needs to rebuild a model that :meth:`build_for_scoring` cannot build
        alone (the widths of a lazily built top model, say); never rows of training data.
        """
        return {}

    def saved(self) -> SavedSide:
        """What this party keeps of its side once trained (its own modules; never a peer's data)."""
        return SavedSide(self.state.weights(), self.objective if self.data.y_train is not None else None,
                         self.model_state())

    def load_saved(self, saved: SavedSide) -> None:
        """Load :meth:`saved` weights into the modules :meth:`build_for_scoring` made; a mismatch is a ModelError."""
        own = {n: sorted(m.state_dict()) for n, m in self.state.modules.items()}
        theirs = {n: sorted(w) for n, w in saved.weights.items()}
        if own != theirs:
            raise ModelError(f"{self.name}'s saved weights {sorted(theirs)} do not fit the model {self.method.name} "
                             f"builds here ({sorted(own)}): another method or other options")
        try:
            self.state.load_weights(saved.weights)
        except RuntimeError as exc:  # a tensor of another shape (another input width or option)
            first = str(exc).strip().splitlines()[-1].strip()
            raise ModelError(f"{self.name}'s saved weights do not fit its model here: {first}") from None

    def outcome(self, ctx: PartyContext, evaluation: Evaluation | None, record: EngineRecord) -> Any:
        """The role's return value (the active side builds its ActiveOutcome here)."""
        return None

    def own_outputs(self, X: np.ndarray) -> np.ndarray | None:
        """The party's own model outputs for rows ``X`` (what it can compute alone after training)."""
        return None

    @functools.cached_property
    def objective(self) -> Objective:
        """The active party's loss, targets and predictions, fitted on its training labels."""
        y = self.data.y_train
        assert y is not None  # the active party holds the labels
        return make_objective(self.data.task, y[self.rows], self.data.n_classes, self.config.class_weight)

    def training_labels(self) -> np.ndarray:
        """The active party's training labels, after label DP (``--defense label-dp=EPS``) if asked."""
        y = self.data.y_train
        assert y is not None  # the active party holds the labels
        epsilon = self.config.defenses.get("label-dp")
        if epsilon and self.data.task == REGRESSION:
            raise ConfigError("label-dp (randomised response) applies to class labels, not to a regression target")
        return randomized_response(y, self.data.n_classes, epsilon) if epsilon else y

    def training_targets(self) -> torch.Tensor:
        """:meth:`training_labels` as the objective's loss takes them, on the party's device."""
        return self.objective.targets(self.training_labels(), self.device)

    def defend(self, grad: torch.Tensor) -> torch.Tensor:
        """A gradient the active party returns, after the gradient defences of the run (if any)."""
        if not self.config.defenses:
            return grad
        if self._defense_generator is None:
            self._defense_generator = secret_generator()
        return protect(grad, self.config.defenses, self._defense_generator)


class _LossTotals:
    """Per-epoch averages of the active party's batch losses (weighted by rows)."""

    def __init__(self, empty_epoch_has_no_loss: bool = False) -> None:
        self.empty_epoch_has_no_loss = empty_epoch_has_no_loss  # no loss reported: an entry without one
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def add(self, losses: Losses, count: int) -> None:
        for key, value in losses.items():
            self.sums[key] = self.sums.get(key, 0.0) + value * count
            self.counts[key] = self.counts.get(key, 0) + count

    def entry(self, epoch: int, key: str = "train_loss") -> dict[str, float]:
        means = {k: self.sums[k] / max(self.counts[k], 1) for k in self.sums}
        if self.empty_epoch_has_no_loss and not means:
            return {"epoch": epoch}
        if set(means) <= {"loss"}:
            return {"epoch": epoch, key: means.get("loss", 0.0)}
        return {"epoch": epoch, key: float(np.mean(list(means.values()))),
                **{f"{key}[{k}]": v for k, v in means.items()}}


def agreed_batches(rows: np.ndarray, config: TrainConfig, epoch: int, min_rows: int = 1) -> Iterator[np.ndarray]:
    """The rows of each batch of ``epoch``: :func:`batch_plan` over ``rows``, the same at every party."""
    for idx in batch_plan(len(rows), config.batch_size, config.seed, epoch, min_rows=min_rows):
        yield rows[idx]


def split_rows(n_rows: int, config: TrainConfig) -> tuple[np.ndarray, np.ndarray]:
    """The aligned training rows a party trains on, and those that validate (none without early stopping)."""
    if not config.early_stopping:
        return np.arange(n_rows), np.arange(0)
    return validation_split(n_rows, config.val_fraction, config.seed)


def split_rows_by_id(ids: np.ndarray, config: TrainConfig) -> tuple[np.ndarray, np.ndarray]:
    """:func:`split_rows` drawn over the rows in the order of their IDs: the same rows whatever order PSI agreed.

    PSI's order differs from run to run; a party that chooses the validation rows alone (secureboost's active
    party) so validates on the same customers every time.
    """
    fit, val = split_rows(len(ids), config)
    if not len(val):
        return fit, val
    by_id = np.argsort(np.asarray(ids).astype(str), kind="stable")
    return np.sort(by_id[fit]), np.sort(by_id[val])


def validation_split(n_rows: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Training and validation rows of the aligned training set, the same at every party.

    The split is part of the agreed run configuration (not secret): a permutation seeded by the
    run seed, its last ``ceil(fraction * n)`` rows (at least one, at most ``n - 1``) validate.
    """
    n_val = min(max(int(np.ceil(fraction * n_rows)), 1), n_rows - 1)
    if n_val < 1:
        raise ConfigError(f"early stopping needs at least 2 aligned training rows, got {n_rows}")
    order = simulation_rng(seed, 0xE5).permutation(n_rows)
    return np.sort(order[: n_rows - n_val]), np.sort(order[n_rows - n_val :])


def run_side(ctx: PartyContext, side: PartySide) -> Any:
    """Run one party's side of a split-learning method from set-up to its outcome.

    Early stopping (:class:`~.stopping.EarlyStopping`) and checkpoints (:class:`~.resume.Checkpoints`)
    are parts the loop asks at its steps, not branches of it.
    """
    config = side.config
    side.rows, val_rows = split_rows(side.data.positions("train"), config)
    ctx.stage = "setup"
    side.name, side.device = ctx.name, ctx.device
    side.build(ctx)
    if not side.takes_part:
        return side.outcome(ctx, None, EngineRecord([]))
    phases = side.phases()
    early = EarlyStopping(config, phases)
    checkpoints = Checkpoints(ctx, config) if config.checkpoint_dir else None
    start, history = checkpoints.before_training(ctx, side, early) if checkpoints is not None else (0, [])
    record = EngineRecord(history, resumed_from_epoch=start, validation_rows=len(val_rows))
    total_epochs = sum(p.epochs for p in phases)
    if start:  # every party says so (a deployed party prints it; in-process only the active party's shows)
        ctx.progress(epoch=start, epochs=total_epochs, resumed=True)
    first = 0
    for phase in phases:
        epochs = range(max(start, first), first + phase.epochs)
        first += phase.epochs
        if not epochs or early.ended(phase):  # ended before the checkpoint this run resumed from
            early.after_phase(record, phase)
            continue
        ctx.meter.enter_phase(phase.name)
        side.phase = phase
        for epoch in epochs:
            ctx.stage = f"{phase.name} epoch {epoch + 1}"
            entry = _train_epoch(ctx, side, phase, epoch)
            stop = early.after_epoch(ctx, side, phase, val_rows, entry, epoch + 1, first)
            if ctx.is_active:
                history.append(entry)
            if checkpoints is not None:
                checkpoints.after_epoch(epoch + 1, side, history, early)
            if ctx.is_active and phase.loss_key in entry:
                ctx.progress(epoch=epoch + 1, epochs=total_epochs, loss=entry[phase.loss_key])
            else:  # deployed, every party reports its epochs (in one process only the active party's progress runs)
                ctx.progress(epoch=epoch + 1, epochs=total_epochs)
            if stop:
                break
        early.after_phase(record, phase)
        side.end_phase(ctx, phase)
    early.after_training(side)
    ctx.meter.enter_phase(EVALUATE)
    ctx.stage = "evaluate"
    side.state.train(False)
    evaluation = side.evaluate_positions(ctx, "test", np.arange(side.data.positions("test")), TEST)
    # what the party can compute alone with its final model (an attack may use it; computed only then)
    ctx.observe(OWN_OUTPUTS, lambda: side.own_outputs(side.data.X_train))
    return side.outcome(ctx, evaluation, record)


def _train_epoch(ctx: PartyContext, side: PartySide, phase: Phase, epoch: int) -> dict[str, float]:
    """One epoch of ``phase``'s batches; the history entry of its losses (at the active party)."""
    side.state.train(True)
    totals = _LossTotals(side.loss_optional)
    for batch in side.batches(epoch):
        losses = side.train_batch(ctx, batch)
        if losses is not None:
            totals.add(*losses)
    return totals.entry(epoch + 1, phase.loss_key)


def prepare_scoring_side(ctx: PartyContext, side: PartySide, saved: SavedSide) -> bool:
    """Build ``side`` for scoring (set-up messages included) and load its saved part, in evaluation mode.

    False for a side that takes no part after set-up (a centralised reference's raw columns).
    """
    ctx.stage = "setup"
    side.name, side.device = ctx.name, ctx.device
    if saved.objective is not None:
        side.__dict__["objective"] = saved.objective  # the fitted one; never refitted on scoring rows
    side.build_for_scoring(ctx)
    if not side.takes_part:
        return False
    side.load_saved(saved)
    side.state.train(False)
    ctx.meter.enter_phase("score")
    return True


def score_side(ctx: PartyContext, side: PartySide, saved: SavedSide, batch_rows: int,
               silent: frozenset[str] = frozenset()) -> Evaluation | None:
    """Score this party's scoring rows (``side.data.X_test``) with a saved side; the active party returns them.

    The side is built for scoring (:meth:`PartySide.build_for_scoring`: by default as for training,
    set-up messages included), its saved weights (and model state) loaded, and the
    rows go through :meth:`PartySide.evaluate` — the evaluation protocol of the validation rows,
    privacy layer and all (the test evaluation's may add extras about the training rows, such as
    TabVFL's latent quality) — ``batch_rows`` at a time (every party cuts the same batches: the row
    count is agreed). ``silent`` (the active side of a model that can :attr:`~PartySide.leave_out`): the
    passive parties left out of the whole scoring, which send nothing (their absent embedding stands in).
    """
    if batch_rows < 1:
        raise ConfigError(f"the scoring batch size must be at least 1, got {batch_rows}")
    if not prepare_scoring_side(ctx, side, saved):  # it contributed at set-up only (raw columns)
        return None
    if silent and not side.leave_out:  # known once its saved part is loaded (hetero-lr: its absent biases)
        raise ModelError(f"the {side.method.name} model cannot score without {', '.join(sorted(silent))}: "
                         "it was not trained for rows that party does not hold")
    total = side.data.positions("test")
    side.silent = silent
    parts: list[Evaluation] = []
    for start in range(0, total, batch_rows):
        ctx.stage = f"score rows {start + 1}-{min(start + batch_rows, total)} of {total}"
        positions = np.arange(start, min(start + batch_rows, total))
        evaluation = side.evaluate_positions(ctx, "test", positions, VALIDATE)
        if evaluation is not None:
            parts.append(evaluation)
        ctx.progress(rows=min(start + batch_rows, total), total=total)  # every party: its own progress lines
    if not ctx.is_active:
        return None
    if not parts:
        return Evaluation(np.zeros((0, side.data.n_classes)) if side.data.task != REGRESSION else np.zeros(0))
    per_party = {p: np.concatenate([e.per_party[p] for e in parts]) for p in parts[0].per_party}
    contributed = None
    if all(e.contributed is not None for e in parts):
        contributed = {p: np.concatenate([e.contributed[p] for e in parts if e.contributed is not None])
                       for p in parts[0].contributed or {}}
    return Evaluation(np.concatenate([e.scores for e in parts]), per_party, contributed)

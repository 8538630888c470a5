"""The party loop every split-learning method runs: written once, for every party of every method.

A method supplies one :class:`PartySide` per party (what to build, how to train one batch, how
to evaluate a set of rows); :func:`run_side` owns the rest:

* **epochs and agreed batches**: :meth:`PartySide.batches` (by default the agreed permutation of
  the party's training rows, :func:`securevfl.methods.base.batch_plan`);
* **stages, history and progress**: ``ctx.stage`` names the epoch, the active party's per-batch
  losses become the epoch's ``train_loss`` (one per party where the method has several losses);
  the active party calls ``progress(epoch=, epochs=, loss=)`` after each epoch, and every party
  ``progress(epoch=N, epochs=, resumed=True)`` once when it resumes from epoch N's checkpoint;
* **early stopping** (``TrainConfig.early_stopping`` > 0): a seeded validation split of the aligned
  training rows that all parties derive alike; after each epoch of a validated phase every party
  takes part in an evaluation of those rows, the active party computes the validation loss (the
  log loss of a supervised phase, :meth:`PartySide.validation_loss` of an unsupervised one) and
  tells the others whether it improved and whether to stop; a phase that no message needs to
  agree on (``Phase.stopping == "local"``) lets each party decide on its own validation loss.
  Each party keeps its own best weights of the phase and restores them when the phase ends
  (a later phase starts from them; the test evaluation uses the last phase's best);
* **checkpoints and resume** (``TrainConfig.checkpoint_dir``, ``resume``, ``checkpoint_overwrite``):
  each party saves its own :class:`TrainingState` at every epoch end (:mod:`.checkpoint`), with the
  run's identity (run id, job digest, a digest of its own data). Before the first epoch the parties
  agree through the active party (:func:`_agree_run`): each sends what its directory holds and
  whether that matches its own job and data; the active party decides for everyone and sends
  either the run id and the epoch to start from (the last one every party completed) or a refusal
  that every party raises alike. A fresh run refuses a directory that holds checkpoints (unless
  ``checkpoint_overwrite``: they are moved aside); a resume refuses missing checkpoints, another
  run's, another job's or another data set's, naming the party;
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
import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch
from torch import nn

from securevfl.errors import ConfigError, ModelError, ProtocolError, RunAborted
from securevfl.federation.runtime import PartyContext
from securevfl.methods.base import batch_plan
from securevfl.methods.engine.checkpoint import (
    PROBLEMS,
    CheckpointStore,
    Survey,
    data_digest,
    identity,
    is_digest,
    is_run_id,
    new_run_id,
)
from securevfl.methods.engine.defenses import protect, randomized_response, secret_generator
from securevfl.methods.engine.objective import REGRESSION, Objective, make_objective
from securevfl.seeding import simulation_rng

if TYPE_CHECKING:
    from securevfl.data.scenario import PartyData
    from securevfl.methods.base import Method, TrainConfig

TRAIN, VALIDATE, TEST, EVALUATE = "train", "validate", "test", "evaluate"
OWN_OUTPUTS = "engine.own_outputs.train"
#: ``ctx.observe`` names for a side's own bookkeeping, where the agreed batch plan does not say it
#: (Entity Augmentation's own schedules): the aligned training rows (-1: another row) behind the
#: gradient a passive party just received, and ``(sender, rows)`` of the embedding the active party
#: just received.
GRADIENT_ROWS = "engine.gradient_rows"
EMBEDDING_ROWS = "engine.embedding_rows"
RUN_STATUS = "engine.run.status"
RUN_DECISION = "engine.run.decision"
RUN_REFUSED = "engine.run.refused"  # a passive party holds the refusal (the active party waits for every one)
RUN_RELEASE = "engine.run.release"  # every party holds it: raise now
#: Bounds on what the run agreement accepts from a peer.
MAX_EPOCHS_SENT = 16
MAX_REASON_CHARS = 8000
VALIDATION = "engine.validate.decision"

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


@dataclass(frozen=True)
class Phase:
    """A stretch of epochs with one training protocol (TabVFL: ``pretrain`` then ``finetune``).

    Epochs are numbered across phases; the Meter attributes time and bytes to the phase; its
    history entries use ``loss_key``. ``stopping`` says how early stopping validates the phase:
    ``joint`` (the active party decides for everyone: the validation log loss of a ``supervised``
    phase, or :meth:`PartySide.validation_loss` of an unsupervised one), ``local`` (each party
    decides on its own :meth:`PartySide.validation_loss`; nothing is exchanged) or ``none``; by
    default ``joint`` for a supervised phase and ``none`` otherwise.
    """

    name: str
    epochs: int
    supervised: bool = True
    loss_key: str = "train_loss"
    stopping: str = ""

    def __post_init__(self) -> None:
        if self.stopping not in ("", "joint", "local", "none"):
            raise ConfigError(f"phase stopping must be 'joint', 'local' or 'none', got {self.stopping!r}")

    @property
    def early_stopping(self) -> str:
        """The effective :attr:`stopping` mode."""
        return self.stopping or ("joint" if self.supervised else "none")


@dataclass
class Evaluation:
    """The active party's view of an evaluation: scores per row, and per party where each predicts."""

    scores: np.ndarray
    per_party: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class EngineRecord:
    """What the engine did, for the method's outcome: history, and resume / early stopping facts."""

    history: list[dict[str, float]]
    resumed_from_epoch: int = 0
    best_epoch: int | None = None
    stopped_after_epoch: int | None = None
    validation_rows: int = 0
    #: per validated phase (when a method has several): its best and stopping epochs
    phases: dict[str, dict[str, int | None]] = field(default_factory=dict)

    def extra(self) -> dict[str, Any]:
        """Report entries for what was used (nothing when neither resume nor early stopping ran)."""
        out: dict[str, Any] = {}
        if self.resumed_from_epoch:
            out["resumed_from_epoch"] = self.resumed_from_epoch
        if self.validation_rows:
            out["early_stopping"] = {"best_epoch": self.best_epoch, "stopped_after_epoch": self.stopped_after_epoch,
                                     "validation_rows": self.validation_rows}
            if len(self.phases) > 1:
                out["early_stopping"]["phases"] = self.phases
        return out


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
        self.rows = np.arange(len(data.X_train))  # the aligned training rows it trains on (set before build)
        self._defense_generator: torch.Generator | None = None

    #: False for a party that only contributes at set-up (TabNet-CT's guests send raw features).
    takes_part: bool = True
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

    def batches(self, epoch: int) -> Iterable[Any]:
        """The epoch's batches: by default the agreed order of :attr:`rows`, one index array per batch."""
        return agreed_batches(self.rows, self.config, epoch)

    @abstractmethod
    def train_batch(self, ctx: PartyContext, batch: Any) -> tuple[Losses, int] | None:
        """One training step; the active side returns its losses and the rows they average over."""

    @abstractmethod
    def evaluate(self, ctx: PartyContext, X: np.ndarray, phase: str) -> Evaluation | None:
        """Score ``X`` (rows of this party's table) jointly; the active side returns the scores."""

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


def job_digest(side: PartySide) -> str:
    """The job fingerprint every checkpoint carries: method, options and training settings.

    It is the same at every party (the party's own name and data are checked apart). The epoch
    count is part of it: a resume continues exactly the run it interrupted (phase boundaries,
    failure schedules and the best weights a validated phase's last checkpoint holds depend on
    it), so training longer is a new run, not a resume. Device and checkpoint options are not.
    """
    c = side.config  # "patience": the key checkpoints were written with before the setting took its one name
    job = {"method": side.method.name, "options": side.method.describe(), "seed": c.seed, "epochs": c.epochs,
           "batch_size": c.batch_size, "lr": c.lr, "embedding_dim": c.embedding_dim, "hidden": list(c.hidden),
           "patience": c.early_stopping, "val_fraction": c.val_fraction, "class_weight": c.class_weight,
           "defenses": dict(sorted(c.defenses.items())),
           **({"min_improvement": c.min_improvement} if c.min_improvement else {})}  # older checkpoints: no key
    return hashlib.sha256(json.dumps(job, sort_keys=True, default=str).encode()).hexdigest()


class _EarlyStopping:
    def __init__(self, patience: int, min_improvement: float = 0.0) -> None:
        self.patience = patience
        self.min_improvement = min_improvement
        self.best_loss = float("inf")
        self.best_epoch: int | None = None
        self.bad_epochs = 0
        self.best_weights: dict[str, dict[str, torch.Tensor]] | None = None
        self.done = False  # the phase has ended (stopped or trained out) and its best weights are restored
        self.stopped_after: int | None = None  # the epoch after which it stopped early (None: trained out)

    def update(self, loss: float, epoch: int) -> tuple[bool, bool]:
        """(improved, stop) after an epoch whose validation loss is ``loss``."""
        if loss < self.best_loss - self.min_improvement:
            self.best_loss, self.best_epoch, self.bad_epochs = loss, epoch, 0
            return True, False
        self.bad_epochs += 1
        return False, self.bad_epochs >= self.patience

    def state(self) -> dict[str, Any]:
        return {"best_loss": self.best_loss, "best_epoch": self.best_epoch or 0, "bad_epochs": self.bad_epochs,
                "best_weights": self.best_weights or {}, "done": self.done, "stopped_after": self.stopped_after or 0}

    def load(self, state: Mapping[str, Any]) -> None:
        self.best_loss = float(state["best_loss"])
        self.best_epoch = int(state["best_epoch"]) or None
        self.bad_epochs = int(state["bad_epochs"])
        self.best_weights = dict(state["best_weights"]) or None
        self.done = bool(state.get("done", False))
        self.stopped_after = int(state.get("stopped_after", 0)) or None


def _status(config: TrainConfig, survey: Survey, job: str) -> dict[str, Any]:
    """What a party tells the active party about its checkpoint directory (never its data digest)."""
    return {"mode": "resume" if config.resume else "fresh", "overwrite": config.checkpoint_overwrite,
            "epochs": survey.epochs[-MAX_EPOCHS_SENT:], "run": survey.run, "job": job, "problem": survey.problem}


def _check_status(peer: str, status: Any) -> dict[str, Any]:
    """A peer's :func:`_status`, validated field by field (a ProtocolError naming the peer otherwise)."""
    keys = {"mode", "overwrite", "epochs", "run", "job", "problem"}
    if not isinstance(status, dict) or set(status) != keys:
        raise ProtocolError(f"{peer} sent a malformed checkpoint status")
    epochs = status["epochs"]
    if (status["mode"] not in ("resume", "fresh") or not isinstance(status["overwrite"], bool)
            or not isinstance(epochs, list) or len(epochs) > MAX_EPOCHS_SENT
            or not all(type(e) is int and 0 < e < 10**9 for e in epochs) or epochs != sorted(set(epochs))
            or not (status["run"] == "" or is_run_id(status["run"])) or not is_digest(status["job"])
            or not (status["problem"] == "" or status["problem"] in PROBLEMS)):
        raise ProtocolError(f"{peer} sent a malformed checkpoint status")
    return status


def _holds(party: str, status: Mapping[str, Any]) -> str:
    """``bank has epochs [29, 30] of run 3f2a1b2c`` (or ``bank has no checkpoint``)."""
    if not status["epochs"]:
        return f"{party} has no checkpoint"
    run = f"run {status['run'][:8]}" if status["run"] else "no identified run"
    return f"{party} has epochs {status['epochs']} of {run}"


def _decide(statuses: Mapping[str, Mapping[str, Any]], active: str) -> tuple[int, str] | str:
    """The active party's decision: ``(start epoch, run id)``, or the reason every party refuses the run."""
    mine = statuses[active]
    resuming = [p for p, s in statuses.items() if s["mode"] == "resume"]
    if 0 < len(resuming) < len(statuses):
        fresh = [p for p in statuses if p not in resuming]
        return (f"the parties disagree on --resume: {', '.join(resuming)} resume(s), {', '.join(fresh)} start(s) "
                "afresh; start every party with the same checkpoint options")
    other_jobs = [p for p, s in statuses.items() if s["job"] != mine["job"]]
    if other_jobs:
        return (f"{', '.join(other_jobs)} run(s) another job than {active} (method, options or training settings "
                "differ); start every party with the same job")
    if mine["mode"] == "fresh":
        used = [p for p, s in statuses.items() if s["epochs"] and not s["overwrite"]]
        if used:
            return ("cannot start a new run: the checkpoint directory already holds checkpoints: "
                    + ", ".join(_holds(p, statuses[p]) for p in used)
                    + "; continue that run with --resume, or move its files aside (into <party>/previous-<time>/) "
                      "with --overwrite-checkpoints, or use another --checkpoint-dir")
        return 0, new_run_id()
    if not any(s["epochs"] for s in statuses.values()):
        return "nothing to resume: no party has a checkpoint; start without --resume"
    issues = []
    for problem, text in PROBLEMS.items():
        owners = [f"{p}'s" for p, s in statuses.items() if s["problem"] == problem]
        if owners:
            names = owners[0] if len(owners) == 1 else f"{', '.join(owners[:-1])} and {owners[-1]}"
            issues.append(f"{names} checkpoints {text}")
    issues += [f"{p} has no checkpoint" for p, s in statuses.items() if not s["epochs"]]
    runs = {s["run"] for s in statuses.values() if s["epochs"] and not s["problem"]}
    if len(runs) > 1:
        issues.append("the parties' checkpoints belong to different runs")
    common = set.intersection(*(set(s["epochs"]) for s in statuses.values()))
    if not issues and not common:
        issues.append("no epoch was completed by every party")
    if issues:
        found = ", ".join(_holds(p, s) for p, s in statuses.items() if s["epochs"])
        reason = (f"cannot resume: {'; '.join(issues)} ({found}); start a new run with --overwrite-checkpoints "
                  "(the old files are moved aside) or use another --checkpoint-dir")
        return reason if len(reason) <= MAX_REASON_CHARS else reason[: MAX_REASON_CHARS - 1] + "…"
    (run,) = runs
    return max(common), run


def _agree_run(ctx: PartyContext, side: PartySide, store: CheckpointStore, job: str,
               data: str) -> tuple[int, str]:
    """Agree through the active party on the run: ``(epoch to resume from or 0, run id)``.

    Every party surveys its own directory and sends :func:`_status`; the active party decides
    (:func:`_decide`) and sends everyone either ``{"start", "run"}`` or ``{"refuse": reason}``;
    on a refusal every party raises the same ConfigError, once every passive party has
    acknowledged it (so that no party's abort overtakes the refusal on its way to another).
    A passive party also checks the decision against what it holds itself: an active party cannot
    make it resume an epoch or a run it does not have, or start afresh over its checkpoints
    without ``checkpoint_overwrite``.
    """
    config = side.config
    survey = store.survey(job, data)
    where = f" (checkpoint directory {config.checkpoint_dir})"
    if ctx.is_active:
        statuses = {ctx.name: _status(config, survey, job)}
        for p in side.passives:
            statuses[p] = _check_status(p, ctx.recv(p, RUN_STATUS))
        decided = _decide(statuses, ctx.name)
        if isinstance(decided, str):
            ctx.broadcast(side.passives, RUN_DECISION, {"refuse": decided})
            try:  # raise only once every party holds the reason: a failure's abort may overtake a message
                for p in side.passives:
                    ctx.recv(p, RUN_REFUSED)
                ctx.broadcast(side.passives, RUN_RELEASE, True)
            except (RunAborted, ProtocolError):
                pass  # a party that failed otherwise: this party still raises the reason it decided
            raise ConfigError(decided + where)
        start, run = decided
        ctx.broadcast(side.passives, RUN_DECISION, {"start": start, "run": run})
        return start, run
    ctx.send(ctx.active, RUN_STATUS, _status(config, survey, job))
    decision = ctx.recv(ctx.active, RUN_DECISION)
    if isinstance(decision, dict) and set(decision) == {"refuse"}:
        reason = decision["refuse"]
        if not isinstance(reason, str) or not 0 < len(reason) <= MAX_REASON_CHARS or not reason.isprintable():
            raise ProtocolError(f"{ctx.active} sent a malformed refusal of the run")
        ctx.send(ctx.active, RUN_REFUSED, True)
        try:
            ctx.recv(ctx.active, RUN_RELEASE)
        except (RunAborted, ProtocolError):
            pass  # the active party's abort overtook its release: the refusal is here all the same
        raise ConfigError(reason + where)
    if not isinstance(decision, dict) or set(decision) != {"start", "run"}:
        raise ProtocolError(f"{ctx.active} sent a malformed run decision")
    start, run = decision["start"], decision["run"]
    if type(start) is not int or not is_run_id(run):
        raise ProtocolError(f"{ctx.active} sent a malformed run decision")
    if config.resume and (start not in survey.epochs or survey.problem or run != survey.run):
        raise ProtocolError(f"{ctx.active} asked {ctx.name} to resume epoch {start} of run {run[:8]}; "
                            f"{_holds(ctx.name, _status(config, survey, job))}"
                            + (f" whose checkpoints {PROBLEMS[survey.problem]}" if survey.problem else ""))
    if not config.resume and (start or (survey.epochs and not config.checkpoint_overwrite)):
        raise ProtocolError(f"{ctx.active} asked {ctx.name} to start a new run over its checkpoints "
                            f"(epochs {survey.epochs}) without --overwrite-checkpoints")
    return start, run


def _load_checkpoint(ctx: PartyContext, side: PartySide, store: CheckpointStore, start: int, expected: dict[str, Any],
                     stoppers: Mapping[str, _EarlyStopping]) -> list[dict[str, float]]:
    """Restore this party's state from the agreed epoch ``start``; its identity must be ``expected``."""
    saved = store.load(start)
    if saved.get("identity") != expected:
        raise ConfigError(f"the checkpoint {store.path(start)} changed while the parties agreed to resume it")
    side.restore(saved["state"])
    states = saved["early_stopping"]
    for name, state in states.items():
        stoppers[name].load(state)
    return list(saved["history"])


def _validate(ctx: PartyContext, side: PartySide, phase: Phase, val_rows: np.ndarray, stopper: _EarlyStopping,
              entry: dict[str, float], epoch: int) -> bool:
    """Score the validation rows; the active party decides improvement and stopping for everyone.

    With ``local`` stopping each party decides alone on its own validation loss (no message).
    """
    ctx.stage = f"validate epoch {epoch}"
    side.state.train(False)
    if phase.early_stopping == "local":
        loss = side.validation_loss(ctx, val_rows)
        if loss is None:
            return False
        entry["val_loss"] = loss
        improved, stop = stopper.update(loss, epoch)
    elif ctx.is_active:
        if phase.supervised:
            evaluation = side.evaluate(ctx, side.data.X_train[val_rows], VALIDATE)
            assert evaluation is not None and side.data.y_train is not None
            y_val = side.data.y_train[val_rows]
            loss = side.objective.validation_loss(y_val, evaluation.scores)
            if not side.objective.regression:
                entry["val_accuracy"] = float(np.mean(np.argmax(evaluation.scores, axis=1) == y_val))
        else:
            loss = side.validation_loss(ctx, val_rows)
            if loss is None:
                raise ProtocolError(f"{ctx.name} computed no validation loss for the {phase.name!r} phase")
        entry["val_loss"] = loss
        improved, stop = stopper.update(loss, epoch)
        ctx.broadcast(side.passives, VALIDATION, {"improved": improved, "stop": stop})
    else:
        if phase.supervised:
            side.evaluate(ctx, side.data.X_train[val_rows], VALIDATE)
        else:
            side.validation_loss(ctx, val_rows)
        decision = ctx.recv(ctx.active, VALIDATION)
        if not isinstance(decision, dict) or set(decision) != {"improved", "stop"}:
            raise ProtocolError(f"{ctx.active} sent a malformed validation decision")
        improved, stop = bool(decision["improved"]), bool(decision["stop"])
    if improved:
        stopper.best_weights = side.state.weights()
    return stop


def _end_validated_phase(side: PartySide, stopper: _EarlyStopping) -> None:
    """A validated phase is over: go back to its best weights (what the next phase or the test starts from)."""
    stopper.done = True
    if stopper.best_weights is not None:
        side.state.load_weights(stopper.best_weights)


def _record_phase(record: EngineRecord, name: str, stopper: _EarlyStopping) -> None:
    """Report a validated phase's best epoch and where it stopped (the last phase's go to the top level)."""
    record.phases[name] = {"best_epoch": stopper.best_epoch, "stopped_after_epoch": stopper.stopped_after}
    record.best_epoch, record.stopped_after_epoch = stopper.best_epoch, stopper.stopped_after


def run_side(ctx: PartyContext, side: PartySide) -> Any:
    """Run one party's side of a split-learning method from set-up to its outcome."""
    config = side.config
    side.rows, val_rows = split_rows(len(side.data.X_train), config)
    ctx.stage = "setup"
    side.name, side.device = ctx.name, ctx.device
    side.build(ctx)
    if not side.takes_part:
        return side.outcome(ctx, None, EngineRecord([]))
    phases = side.phases()
    stoppers = {p.name: _EarlyStopping(config.early_stopping, config.min_improvement) for p in phases
                if config.early_stopping and p.early_stopping != "none"}
    store = CheckpointStore(config.checkpoint_dir, ctx.name) if config.checkpoint_dir else None
    history: list[dict[str, float]] = []
    start = 0
    stamp: dict[str, Any] = {}
    if store is not None:
        ctx.stage = "resume" if config.resume else "checkpoint agreement"
        job, data = job_digest(side), data_digest(side.data)
        start, run = _agree_run(ctx, side, store, job, data)
        stamp = identity(run, job, data, ctx.name)
        if start:
            history = _load_checkpoint(ctx, side, store, start, stamp, stoppers)
        elif config.checkpoint_overwrite:
            store.move_aside()
    record = EngineRecord(history, resumed_from_epoch=start, validation_rows=len(val_rows))
    total_epochs = sum(p.epochs for p in phases)
    if start:  # every party says so (a deployed party prints it; in-process only the active party's shows)
        ctx.progress(epoch=start, epochs=total_epochs, resumed=True)

    def save(epoch: int) -> None:
        if store is not None:
            store.save(epoch, {"identity": stamp, "state": side.state.state_dict(), "history": history,
                               "early_stopping": {n: s.state() for n, s in stoppers.items()}})

    first = 0
    for phase in phases:
        epochs = range(max(start, first), first + phase.epochs)
        first += phase.epochs
        stopper = stoppers.get(phase.name)
        if not epochs or (stopper is not None and stopper.done):
            if stopper is not None:  # ended before the checkpoint this run resumed from
                _record_phase(record, phase.name, stopper)
            continue
        ctx.meter.enter_phase(phase.name)
        side.phase = phase
        last = epochs[-1] + 1
        for epoch in epochs:
            ctx.stage = f"{phase.name} epoch {epoch + 1}"
            side.state.train(True)
            totals = _LossTotals(side.loss_optional)
            for batch in side.batches(epoch):
                losses = side.train_batch(ctx, batch)
                if losses is not None:
                    totals.add(*losses)
            entry = totals.entry(epoch + 1, phase.loss_key)
            stop = stopper is not None and _validate(ctx, side, phase, val_rows, stopper, entry, epoch + 1)
            if ctx.is_active:
                history.append(entry)
            last = epoch + 1
            if stopper is not None and stop and last < first:
                stopper.stopped_after = last
            if stopper is not None and (stop or last == first):
                _end_validated_phase(side, stopper)  # the checkpoint of a phase's last epoch holds its best weights
            save(last)
            if ctx.is_active and phase.loss_key in entry:
                ctx.progress(epoch=last, epochs=total_epochs, loss=entry[phase.loss_key])
            else:  # deployed, every party reports its epochs (in one process only the active party's progress runs)
                ctx.progress(epoch=last, epochs=total_epochs)
            if stop:
                break
        if stopper is not None:
            _record_phase(record, phase.name, stopper)
        side.end_phase(ctx, phase)
    for stopper in stoppers.values():
        if not stopper.done:  # resumed after the phase's last epoch
            _end_validated_phase(side, stopper)
    ctx.meter.enter_phase(EVALUATE)
    ctx.stage = "evaluate"
    side.state.train(False)
    evaluation = side.evaluate(ctx, side.data.X_test, TEST)
    # what the party can compute alone with its final model (an attack may use it; computed only then)
    ctx.observe(OWN_OUTPUTS, lambda: side.own_outputs(side.data.X_train))
    return side.outcome(ctx, evaluation, record)


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


def score_side(ctx: PartyContext, side: PartySide, saved: SavedSide, batch_rows: int) -> Evaluation | None:
    """Score this party's scoring rows (``side.data.X_test``) with a saved side; the active party returns them.

    The side is built for scoring (:meth:`PartySide.build_for_scoring`: by default as for training,
    set-up messages included), its saved weights (and model state) loaded, and the
    rows go through :meth:`PartySide.evaluate` — the evaluation protocol of the validation rows,
    privacy layer and all (the test evaluation's may add extras about the training rows, such as
    TabVFL's latent quality) — ``batch_rows`` at a time (every party cuts the same batches: the row
    count is agreed).
    """
    if batch_rows < 1:
        raise ConfigError(f"the scoring batch size must be at least 1, got {batch_rows}")
    if not prepare_scoring_side(ctx, side, saved):  # it contributed at set-up only (raw columns)
        return None
    X = side.data.X_test
    total = len(X)
    parts: list[Evaluation] = []
    for start in range(0, total, batch_rows):
        ctx.stage = f"score rows {start + 1}-{min(start + batch_rows, total)} of {total}"
        evaluation = side.evaluate(ctx, X[start : start + batch_rows], VALIDATE)
        if evaluation is not None:
            parts.append(evaluation)
        ctx.progress(rows=min(start + batch_rows, total), total=total)  # every party: its own progress lines
    if not ctx.is_active:
        return None
    if not parts:
        return Evaluation(np.zeros((0, side.data.n_classes)) if side.data.task != REGRESSION else np.zeros(0))
    per_party = {p: np.concatenate([e.per_party[p] for e in parts]) for p in parts[0].per_party}
    return Evaluation(np.concatenate([e.scores for e in parts]), per_party)

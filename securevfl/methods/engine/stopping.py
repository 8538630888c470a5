"""Early stopping: a part the training loop asks after every epoch (as XGBoost's ``callback.EarlyStopping``).

With ``TrainConfig.early_stopping`` > 0, after each epoch of a validated phase every party takes
part in an evaluation of the seeded validation rows; the active party computes the validation loss
(the log loss of a supervised phase, :meth:`PartySide.validation_loss` of an unsupervised one) and
tells the others whether it improved and whether to stop. A phase that no message needs to agree on
(``Phase.stopping == "local"``) lets each party decide on its own validation loss. Each party keeps
its own best weights of the phase and restores them when the phase ends (a later phase starts from
them; the test evaluation uses the last phase's best).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from securevfl.errors import ProtocolError
from securevfl.federation.runtime import PartyContext
from securevfl.methods.engine.phases import VALIDATE, EngineRecord, Phase

if TYPE_CHECKING:
    from securevfl.methods.base import TrainConfig
    from securevfl.methods.engine.loop import PartySide

VALIDATION = "engine.validate.decision"


class PhaseStopper:
    """One validated phase's early stopping: its best loss, epoch and weights, and whether it ended."""

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


def _validate(ctx: PartyContext, side: PartySide, phase: Phase, val_rows: np.ndarray, stopper: PhaseStopper,
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
            evaluation = side.evaluate_positions(ctx, "train", val_rows, VALIDATE)
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
            side.evaluate_positions(ctx, "train", val_rows, VALIDATE)
        else:
            side.validation_loss(ctx, val_rows)
        decision = ctx.recv(ctx.active, VALIDATION)
        if not isinstance(decision, dict) or set(decision) != {"improved", "stop"}:
            raise ProtocolError(f"{ctx.active} sent a malformed validation decision")
        improved, stop = bool(decision["improved"]), bool(decision["stop"])
    if improved:
        stopper.best_weights = side.state.weights()
    return stop


def _end_validated_phase(side: PartySide, stopper: PhaseStopper) -> None:
    """A validated phase is over: go back to its best weights (what the next phase or the test starts from)."""
    stopper.done = True
    if stopper.best_weights is not None:
        side.state.load_weights(stopper.best_weights)


def _record_phase(record: EngineRecord, name: str, stopper: PhaseStopper) -> None:
    """Report a validated phase's best epoch and where it stopped (the last phase's go to the top level)."""
    record.phases[name] = {"best_epoch": stopper.best_epoch, "stopped_after_epoch": stopper.stopped_after}
    record.best_epoch, record.stopped_after_epoch = stopper.best_epoch, stopper.stopped_after


class EarlyStopping:
    """What the loop asks about early stopping: after each epoch, after each phase, and at the end.

    One :class:`PhaseStopper` per validated phase (none when ``config.early_stopping`` is 0); its
    state goes into every checkpoint (:mod:`.resume`), so a resumed run stops where an uninterrupted
    one would.
    """

    def __init__(self, config: TrainConfig, phases: Sequence[Phase]) -> None:
        self.stoppers = {p.name: PhaseStopper(config.early_stopping, config.min_improvement) for p in phases
                         if config.early_stopping and p.early_stopping != "none"}

    def ended(self, phase: Phase) -> bool:
        """Whether ``phase`` ended before the checkpoint this run resumed from."""
        stopper = self.stoppers.get(phase.name)
        return stopper is not None and stopper.done

    def after_epoch(self, ctx: PartyContext, side: PartySide, phase: Phase, val_rows: np.ndarray,
                    entry: dict[str, float], epoch: int, phase_end: int) -> bool:
        """Validate after ``epoch`` (1-based); whether to stop the phase. Its last epoch restores its best weights."""
        stopper = self.stoppers.get(phase.name)
        if stopper is None:
            return False
        stop = _validate(ctx, side, phase, val_rows, stopper, entry, epoch)
        if stop and epoch < phase_end:
            stopper.stopped_after = epoch
        if stop or epoch == phase_end:
            _end_validated_phase(side, stopper)  # the checkpoint of a phase's last epoch holds its best weights
        return stop

    def after_phase(self, record: EngineRecord, phase: Phase) -> None:
        """Report a validated phase's best and stopping epochs."""
        stopper = self.stoppers.get(phase.name)
        if stopper is not None:
            _record_phase(record, phase.name, stopper)

    def after_training(self, side: PartySide) -> None:
        """Restore the best weights of a phase the run resumed after the last epoch of."""
        for stopper in self.stoppers.values():
            if not stopper.done:
                _end_validated_phase(side, stopper)

    def state(self) -> dict[str, Any]:
        return {n: s.state() for n, s in self.stoppers.items()}

    def load(self, states: Mapping[str, Any]) -> None:
        for name, state in states.items():
            self.stoppers[name].load(state)

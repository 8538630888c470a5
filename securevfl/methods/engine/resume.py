"""Checkpoints and resume: a part the training loop asks before the first epoch and after every epoch.

With ``TrainConfig.checkpoint_dir`` each party saves its own :class:`TrainingState` at every epoch
end (:mod:`.checkpoint`), with the run's identity (run id, job digest, a digest of its own data) and
the early-stopping state. Before the first epoch the parties agree through the active party
(:func:`_agree_run`): each sends what its directory holds and whether that matches its own job and
data; the active party decides for everyone and sends either the run id and the epoch to start from
(the last one every party completed) or a refusal that every party raises alike. A fresh run refuses
a directory that holds checkpoints (unless ``checkpoint_overwrite``: they are moved aside); a resume
refuses missing checkpoints, another run's, another job's or another data set's, naming the party.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from securevfl.errors import ConfigError, ProtocolError, RunAborted
from securevfl.federation.runtime import PartyContext
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
from securevfl.methods.engine.stopping import EarlyStopping

if TYPE_CHECKING:
    from securevfl.methods.base import TrainConfig
    from securevfl.methods.engine.loop import PartySide

RUN_STATUS = "engine.run.status"
RUN_DECISION = "engine.run.decision"
RUN_REFUSED = "engine.run.refused"  # a passive party holds the refusal (the active party waits for every one)
RUN_RELEASE = "engine.run.release"  # every party holds it: raise now

MAX_EPOCHS_SENT = 16
MAX_REASON_CHARS = 8000


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


def _load_checkpoint(side: PartySide, store: CheckpointStore, start: int, expected: dict[str, Any],
                     early: EarlyStopping) -> list[dict[str, float]]:
    """Restore this party's state from the agreed epoch ``start``; its identity must be ``expected``."""
    saved = store.load(start)
    if saved.get("identity") != expected:
        raise ConfigError(f"the checkpoint {store.path(start)} changed while the parties agreed to resume it")
    side.restore(saved["state"])
    early.load(saved["early_stopping"])
    return list(saved["history"])


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


class Checkpoints:
    """What the loop asks about checkpoints: where to start (agreed with every party), then a save per epoch."""

    def __init__(self, ctx: PartyContext, config: TrainConfig) -> None:
        if config.checkpoint_dir is None:
            raise ConfigError("checkpoints need a checkpoint directory")
        self.config = config
        self.store = CheckpointStore(config.checkpoint_dir, ctx.name)
        self.stamp: dict[str, Any] = {}

    def before_training(self, ctx: PartyContext, side: PartySide,
                        early: EarlyStopping) -> tuple[int, list[dict[str, float]]]:
        """The epoch to start from (0: a new run) and the history so far; a resumed state is loaded into ``side``."""
        ctx.stage = "resume" if self.config.resume else "checkpoint agreement"
        job, data = job_digest(side), data_digest(side.data)
        start, run = _agree_run(ctx, side, self.store, job, data)
        self.stamp = identity(run, job, data, ctx.name)
        if start:
            return start, _load_checkpoint(side, self.store, start, self.stamp, early)
        if self.config.checkpoint_overwrite:
            self.store.move_aside()
        return 0, []

    def after_epoch(self, epoch: int, side: PartySide, history: list[dict[str, float]], early: EarlyStopping) -> None:
        self.store.save(epoch, {"identity": self.stamp, "state": side.state.state_dict(), "history": history,
                                "early_stopping": early.state()})

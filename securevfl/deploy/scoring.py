"""One organisation's process scoring new rows with its own part of a saved model (``party --predict``).

Each party holds only its own part (``DIR/<party>/`` of a training's ``--model-dir``) and its own
new file. The phases mirror training's (:mod:`securevfl.deploy.party`) over the same mutually
authenticated links, with the job fingerprint marked ``phase = predict`` so a scoring party never
talks to a training one:

1. **Setup** (tags ``deploy.score.*``): ECDH PSI on the new IDs, exactly as training's; every
   passive party sends the active party its table shape and the fingerprint of the model its part
   belongs to; the active party checks both (the shape against what PSI showed, the fingerprint
   against its own part's: parts of two models never score together) and sends the plan: every
   aligned row is scored, none trained. A helper (``data = false``: hetero-lr's arbiter) reads no
   file, holds no part and takes no part in PSI: it receives the plan too (the number of rows every
   party scores, so it runs the same batches) and takes its options from the federation's job.
2. **Scoring**: each party rebuilds its side from its part and the rows go through the method's
   evaluation protocol (:func:`~securevfl.methods.engine.loop.score_side`), so the privacy layer of
   training protects scoring too (EASTER's embeddings summed under its ``secagg``; hetero-lr's
   partial scores encrypted under the arbiter's fresh key, :mod:`securevfl.methods.hetero_lr.scoring`).
3. **Costs**: as in training, the active party gathers the meters. Only the active party writes
   predictions; the passive parties learn what PSI tells them and nothing of the result.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from securevfl.data.labels import REGRESSION
from securevfl.deploy.alignment import LocalAlignment, psi_role, unaligned_rows
from securevfl.deploy.costs import with_cost_exchange
from securevfl.deploy.federation_file import Federation
from securevfl.deploy.links import data_party_order, helper_parties, party_links
from securevfl.deploy.party import check_roles, log_done, log_start
from securevfl.deploy.plan import TAG_PLAN, PartyShape, helper_plan_role, local_scenario, log_plan, parse_plan
from securevfl.deploy.progress import PartyWatch, rows_logger
from securevfl.deploy.threads import ThreadChoice
from securevfl.errors import ConfigError, DataError, ModelError, ProtocolError
from securevfl.federation.meter import MeterSnapshot
from securevfl.federation.runtime import PartyContext, run_party
from securevfl.methods.base import method_class
from securevfl.methods.engine.loop import SavedSide

TAG_PART = "deploy.score.part"
_HEX = re.compile(r"^[0-9a-f]{8,128}$")


@dataclass
class DeployedScoring:
    """What one party's scoring process produced; ``predictions`` and ``metrics`` only at the active party."""

    party: str
    alignment: LocalAlignment
    predictions: pd.DataFrame | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    rows: int = 0
    snapshots: dict[str, MeterSnapshot] = field(default_factory=dict)
    missing_costs: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0


def _check_part(federation: Federation, name: str, manifest: Any, standalone: bool = False) -> None:
    """Refuse a part that does not belong to this federation's job: method, parties and roles.

    ``standalone``: the model is the active party's alone, so its part lists that party alone.
    """
    job = federation.job
    if manifest.method != job.method:
        raise ModelError(f"the part in the model directory is a {manifest.method} model; the federation's job "
                         f"trains {job.method}")
    if manifest.standalone != standalone:
        raise ModelError(f"{name}'s part is {'' if manifest.standalone else 'not '}a standalone model; "
                         f"{job.method} models are {'' if standalone else 'not '}standalone")
    parties = [federation.active] if standalone else data_party_order(federation)
    if sorted(manifest.parties) != sorted(parties):
        raise ModelError(f"the model's parties are {', '.join(sorted(manifest.parties))}; the federation's "
                         f"data parties are {', '.join(sorted(parties))}")
    role = "active" if name == federation.active else "passive"
    if manifest.role != role:
        raise ModelError(f"{name}'s part was saved as the {manifest.role} party's; in this federation "
                         f"{name} is {role}")


def scoring_plan_role(table: Any, size_check: Callable[..., Any], fingerprint: str, encoded_width: int,
                      federation: Federation, n_classes: int, task: str) -> Callable[[PartyContext], dict[str, Any]]:
    """PSI, then shapes and model fingerprints in, and the plan (every aligned row scored) out."""
    psi = psi_role(table, federation)

    def role(ctx: PartyContext) -> dict[str, Any]:
        result = psi(ctx)
        rows, size = result.rows, result.size
        ctx.stage = "plan"
        own = PartyShape(table.n_rows, size, encoded_width)
        if not ctx.is_active:
            ctx.send(ctx.active, TAG_PART, {"shape": own.to_wire(), "model": fingerprint})
            plan = parse_plan(ctx.recv(ctx.active, TAG_PLAN), ctx.active, ctx.name, (ctx.active, *ctx.passives), size)
            if len(plan["train"]) or plan["shapes"][ctx.name] != own:
                raise ProtocolError(f"the scoring plan from {ctx.active} does not score every shared row of "
                                    f"{ctx.name} as it announced them")
            log_plan(ctx, plan)
            return {"rows": rows, "plan": plan}
        size_check(size)
        shapes = {ctx.name: own}
        for p in ctx.passives:
            message = ctx.recv(p, TAG_PART)
            if not isinstance(message, dict) or set(message) != {"shape", "model"} or not isinstance(
                    message["model"], str) or not _HEX.match(message["model"]):
                raise ProtocolError(f"malformed model part announcement from {p}")
            if message["model"] != fingerprint:
                raise ModelError(f"{p} holds a part of another model (model {message['model'][:12]}…; "
                                 f"{ctx.name}'s part is of model {fingerprint[:12]}…): every party must score "
                                 "with its part of one saved model")
            shapes[p] = PartyShape.from_wire(message["shape"], p, aligned=size, rows=result.peer_sizes.get(p))
        plan = {"train": np.zeros(0, np.int64), "test": np.arange(size, dtype=np.int64), "task": task,
                "n_classes": n_classes, "shapes": {n: s.to_wire() for n, s in shapes.items()}}
        # helpers (hetero-lr's arbiter) learn the plan too: the number of rows every party scores
        ctx.broadcast((*ctx.passives, *helper_parties(federation)), TAG_PLAN, plan)
        log_plan(ctx, {**plan, "shapes": shapes})
        return {"rows": rows, "plan": {**plan, "shapes": shapes}}

    return role


def standalone_refusal(federation: Federation, name: str) -> str | None:
    """Why party ``name`` takes no part in scoring the federation's model, or None where it does."""
    if method_class(federation.job.method).standalone and name != federation.active:
        return (f"the {federation.job.method} model is the active party's alone: only {federation.active} scores "
                f"(securevfl party --predict --as {federation.active}, no other party needed)")
    return None


def _score_standalone(federation: Federation, name: str, data: str | Path, model_dir: str | Path, batch_size: int,
                      device: str, progress: Callable[..., None] | None, started: float,
                      threads: ThreadChoice | None = None) -> DeployedScoring:
    """The active party scores every row of its own file with its standalone part, without connecting."""
    from securevfl.model.saving import saved_encoder, saved_side
    from securevfl.model.scoring import SavedModel, score
    from securevfl.model.store import read_part

    refusal = standalone_refusal(federation, name)
    if refusal:
        raise ConfigError(refusal)
    part = read_part(model_dir, name)
    _check_part(federation, name, part.manifest, standalone=True)
    model = SavedModel(Path(model_dir), {name: part}, encoders={name: saved_encoder(part)},
                       sides={name: saved_side(part)})
    log_start(federation, name, "predict, alone", None, threads)
    logged = rows_logger(name)

    def both(*args: Any, **info: Any) -> None:
        logged(*args, **info)
        if progress is not None:
            progress(*args, **info)

    scored = score(model, {name: data}, id_column=federation.job.id_column, batch_size=batch_size, device=device,
                   progress=both)
    rows = np.arange(scored.rows["scored"], dtype=np.int64)
    alignment = LocalAlignment(rows, np.zeros(0, np.int64), len(rows), MeterSnapshot())
    wall_s = time.perf_counter() - started
    log_done(name, f"{len(rows)} rows scored in {wall_s:.1f} s", wall_s, len(rows))
    return DeployedScoring(name, alignment, predictions=scored.predictions, metrics=scored.metrics, rows=len(rows),
                           wall_s=wall_s)


@dataclass
class _LocalPart:
    """What a party brings to a scoring run, checked before connecting: its method, part and new rows.

    A helper (``data = false``: hetero-lr's arbiter) brings no part and no rows: ``saved`` is empty.
    """

    method: Any
    seed: int
    saved: SavedSide
    classes: tuple[str, ...] = ()
    task: str = ""
    table: Any = None
    encoded: Any = None
    labels: np.ndarray | None = None
    fingerprint: str = ""
    encoded_width: int = 0


def _data_part(federation: Federation, name: str, data: str | Path | None, model_dir: str | Path | None) -> _LocalPart:
    """A data party's part (digests, version, method, role) and its new file, read and checked as in training."""
    from securevfl.methods import create_method
    from securevfl.model.saving import saved_encoder, saved_side, train_config_from
    from securevfl.model.scoring import read_new_rows
    from securevfl.model.store import read_part

    if model_dir is None or data is None:
        raise ConfigError(f"{name} scores with its own part and new rows: give --model-dir and --data")
    part = read_part(model_dir, name)
    manifest = part.manifest
    _check_part(federation, name, manifest)
    encoder, saved = saved_encoder(part), saved_side(part)
    config = train_config_from(manifest.extra.get("train", {}), str(part.path))
    job = federation.job
    classes = tuple(manifest.classes)
    table, encoded, labels = read_new_rows(part, encoder, data, id_column=job.id_column,
                                           label_column=job.label_column, classes=classes, task=manifest.task,
                                           is_active=name == federation.active)
    return _LocalPart(create_method(manifest.method, config), config.seed, saved, classes, manifest.task, table,
                      encoded, labels, manifest.job_fingerprint, encoder.width if encoder is not None else 0)


def _helper_part(federation: Federation, name: str, data: str | Path | None) -> _LocalPart:
    """A helper's method, from the federation's job (every party agreed on it): no part, no rows."""
    from securevfl.deploy.party import method_and_config
    from securevfl.model.saving import check_savable

    if data is not None:
        raise ConfigError(f"{name} has data = false in the federation file: it takes no --data")
    method, config = method_and_config(federation, "cpu")
    check_savable(method)  # a method whose models cannot be saved has nothing to score
    return _LocalPart(method, config.train.seed, SavedSide({}))


def run_deployed_scoring(federation: Federation, name: str, data: str | Path | None, model_dir: str | Path | None, *,
                         batch_size: int = 4096, device: str = "auto", progress: Callable[..., None] | None = None,
                         transport: Any = None, threads: int | ThreadChoice | None = None) -> DeployedScoring:
    """Score party ``name``'s new ``data`` with its own part under ``model_dir``, with its peers, to the end.

    A helper (``data = false``: hetero-lr's arbiter) takes neither: it holds no part of the model,
    receives the plan (the number of rows to score) and runs its scoring role (the arbiter: fresh keys).
    ``threads``: torch's threads in this process, as for training (:func:`~securevfl.deploy.party.run_deployed_party`).
    """
    from securevfl.deploy.threads import use_threads
    from securevfl.methods.engine.loop import score_side
    from securevfl.methods.engine.split import SideRole
    from securevfl.model.scoring import active_predictions
    from securevfl.networks.device import resolve_device

    threads_used = use_threads(federation, name, threads)  # before any torch work
    started = time.perf_counter()
    if batch_size < 1:
        raise ConfigError(f"--batch-size must be at least 1, got {batch_size}")
    if method_class(federation.job.method).standalone:
        if model_dir is None or data is None:
            raise ConfigError(f"{name} scores with its own part and new rows: give --model-dir and --data")
        return _score_standalone(federation, name, data, model_dir, batch_size, device, progress, started,
                                 threads_used)
    helper = not federation.party(name).data
    # everything local is checked before connecting: the part (digests, version), the method, the new file
    local = _helper_part(federation, name, data) if helper else _data_part(federation, name, data, model_dir)
    torch_device = resolve_device(device)
    job = federation.job
    data_parties = data_party_order(federation)
    passives = data_parties[1:]

    def size_check(size: int) -> None:
        if size == 0:
            raise DataError("no row is shared by every party's new file: nothing to score")

    log_start(federation, name, "predict", local.table.n_rows if local.table is not None else None, threads_used)
    with PartyWatch(name) as watch, party_links(federation, name, transport, phase="predict", watch=watch) as transport:
        if helper:
            setup_role, setup_parties = helper_plan_role(federation), (*data_parties, name)
        else:
            n_classes = 1 if local.task == REGRESSION else len(local.classes)
            setup_role = scoring_plan_role(local.table, size_check, local.fingerprint, local.encoded_width,
                                           federation, n_classes, local.task)
            setup_parties = data_parties
        setup, setup_meter = run_party(watch.role(setup_role, "plan"), name=name, active=federation.active,
                                       parties=setup_parties, passives=passives, transport=transport, finish=False,
                                       recv_timeout=federation.limits.recv_timeout_s)
        rows, plan = setup["rows"], setup["plan"]
        size = len(plan["test"])
        n_rows = local.table.n_rows if local.table is not None else 0
        alignment = LocalAlignment(rows, unaligned_rows(n_rows, rows), size, setup_meter.snapshot())
        scenario = local_scenario(name, federation, local.table, local.classes, rows, plan, cost={},
                                  encoded=local.encoded)
        roles = local.method.scoring_roles(scenario)
        check_roles(job.method, roles, tuple(federation.parties))
        role = roles[name]
        if not isinstance(role, SideRole):
            raise ModelError(f"{job.method} cannot score a saved model")
        scoring = functools.partial(score_side, side=role.side, saved=local.saved, batch_rows=batch_size)
        outcome, meter = run_party(watch.role(with_cost_exchange(scoring, alignment.snapshot, transport.link_stats),
                                             "score"), name=name,
                                   active=federation.active, parties=tuple(roles), passives=passives,
                                   transport=transport, device=torch_device, seed=local.seed, progress=progress,
                                   recv_timeout=federation.limits.recv_timeout_s)
        result = DeployedScoring(name, alignment, rows=size)
        if name == federation.active:
            evaluation, snapshots, _setups, _links, missing = outcome
            result.predictions, result.metrics = active_predictions(local.table.ids, rows, evaluation.scores,
                                                                    local.labels, local.task, local.classes,
                                                                    job.id_column)
            result.snapshots, result.missing_costs = snapshots, missing
        else:
            result.snapshots = {name: meter.snapshot()}
        links = transport.link_stats()
    result.wall_s = time.perf_counter() - started
    log_done(name, f"{size} shared rows scored in {result.wall_s:.1f} s", result.wall_s, size, links)
    return result

"""The set-up of a deployed party scoring new rows with its own part of a saved model (``party --predict``).

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
The run itself is assembled by the pipeline (:mod:`securevfl.pipeline.score`).

2. **Scoring**: each party rebuilds its side from its part and the rows go through the method's
   evaluation protocol (:func:`~securevfl.methods.engine.loop.score_side`), so the privacy layer of
   training protects scoring too (EASTER's embeddings summed under its ``secagg``; hetero-lr's
   partial scores encrypted under the arbiter's fresh key, :mod:`securevfl.methods.hetero_lr.scoring`).
3. **Costs**: as in training, the active party gathers the meters. Only the active party writes
   predictions; the passive parties learn what PSI tells them and nothing of the result.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from securevfl.deploy.alignment import psi_role
from securevfl.deploy.federation_file import Federation
from securevfl.deploy.links import data_party_order, helper_parties
from securevfl.deploy.plan import TAG_PLAN, PartyShape, log_plan, parse_plan
from securevfl.errors import ModelError, ProtocolError
from securevfl.federation.runtime import PartyContext
from securevfl.methods.base import method_class

TAG_PART = "deploy.score.part"
_HEX = re.compile(r"^[0-9a-f]{8,128}$")


def check_part(federation: Federation, name: str, manifest: Any, standalone: bool = False) -> None:
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
                      federation: Federation, n_classes: int, task: str,
                      cover: bool = False) -> Callable[[PartyContext], dict[str, Any]]:
    """PSI, then shapes and model fingerprints in, and the plan (every aligned row scored) out.

    ``cover`` (every row): every row of the active party is scored, each passive party's part where
    it holds the row (:func:`~securevfl.deploy.alignment.psi_role`).
    """
    psi = psi_role(table, federation, cover)

    def role(ctx: PartyContext) -> dict[str, Any]:
        result = psi(ctx)
        rows, size, present = result.rows, result.size, dict(result.present)
        ctx.stage = "plan"
        own = PartyShape(table.n_rows, len(rows), encoded_width)
        if not ctx.is_active:
            ctx.send(ctx.active, TAG_PART, {"shape": own.to_wire(), "model": fingerprint})
            # every data party's shape: one left out (absent, batch scoring) holds no row
            plan = parse_plan(ctx.recv(ctx.active, TAG_PLAN), ctx.active, ctx.name, data_party_order(federation),
                              size, partial=cover)
            if len(plan["train"]) or plan["shapes"][ctx.name] != own:
                raise ProtocolError(f"the scoring plan from {ctx.active} does not score every shared row of "
                                    f"{ctx.name} as it announced them")
            log_plan(ctx, plan)
            return {"rows": rows, "plan": plan, "present": present}
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
            held = int(present[p].sum()) if p in present else size
            shapes[p] = PartyShape.from_wire(message["shape"], p, aligned=held, rows=result.peer_sizes.get(p))
        for p in data_party_order(federation)[1:]:
            if p not in shapes:  # left out (not up within --party-timeout): it holds none of the rows
                shapes[p] = PartyShape(0, 0, 0)
                present[p] = np.zeros(size, dtype=bool)
        plan = {"train": np.zeros(0, np.int64), "test": np.arange(size, dtype=np.int64), "task": task,
                "n_classes": n_classes, "shapes": {n: s.to_wire() for n, s in shapes.items()}}
        # helpers (hetero-lr's arbiter) learn the plan too: the number of rows every party scores
        ctx.broadcast((*ctx.passives, *helper_parties(federation)), TAG_PLAN, plan)
        log_plan(ctx, {**plan, "shapes": shapes})
        return {"rows": rows, "plan": {**plan, "shapes": shapes}, "present": present}

    return role


def standalone_refusal(federation: Federation, name: str) -> str | None:
    """Why party ``name`` takes no part in scoring the federation's model, or None where it does."""
    if method_class(federation.job.method).standalone and name != federation.active:
        return (f"the {federation.job.method} model is the active party's alone: only {federation.active} scores "
                f"(securevfl party --predict --as {federation.active}, no other party needed)")
    return None

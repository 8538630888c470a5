"""Who takes part in a deployed batch scoring: the active party names the passive parties it left out.

With ``party --predict`` and a model trained on every row, the active party waits ``--party-timeout``
seconds for each passive party's link (:class:`~securevfl.deploy.links.Absence`); one not up by then is
left out. Before PSI the active party sends every other party the roster message (tag
``deploy.score.roster``): the left-out parties and why. PSI, the plan and the scoring then run over
the parties that are up; a left-out party holds no row (its present mask is all False), sends and
receives nothing, and a process of it that connects later is refused, saying why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from securevfl.deploy.federation_file import Federation
from securevfl.deploy.links import data_party_order
from securevfl.deploy.progress import log_event
from securevfl.errors import ProtocolError
from securevfl.federation.runtime import PartyContext

TAG_ROSTER = "deploy.score.roster"

_log = logging.getLogger(__name__)


def roster_role(federation: Federation, left: Mapping[str, str]) -> Callable[[PartyContext], dict[str, str]]:
    """The active party sends ``left`` (party -> why) to every party that takes part; the others receive it."""
    passives = data_party_order(federation)[1:]

    def role(ctx: PartyContext) -> dict[str, str]:
        ctx.stage = "roster"
        if ctx.is_active:
            ctx.broadcast(ctx.peers, TAG_ROSTER, dict(left))
            return dict(left)
        message = ctx.recv(ctx.active, TAG_ROSTER)
        if (not isinstance(message, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                     for k, v in message.items())
                or not set(message) <= set(passives) - {ctx.name}):
            raise ProtocolError(f"malformed roster from {ctx.active}: expected passive parties other than {ctx.name}")
        for peer, why in message.items():
            log_event(_log, ctx.name, "connect", "left_out", f"{ctx.active} scores without {peer}: {why}",
                      level=logging.WARNING, peer=peer, reason=why)
        return {k: v[:500] for k, v in message.items()}

    return role

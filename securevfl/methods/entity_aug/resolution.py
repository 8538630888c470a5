"""Entity resolution: which of a guest's rows the host labels (pairwise PSI), and the guests' checked messages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from securevfl.errors import ProtocolError, psi_errors
from securevfl.federation.runtime import PartyContext

PSI_MESSAGE = "entity-aug.setup.psi"


@psi_errors()
def psi_active(ctx: PartyContext, passive: str, labelled_ids: Sequence[str]) -> np.ndarray:
    """Host side of the pairwise PSI with ``guest``: its labelled rows in the pair's order."""
    from psi import CurveEngine, PSIConfig, PSIInitiator, prepare_ids

    prepared = prepare_ids(labelled_ids, source=f"party {ctx.name!r}")
    with ctx.meter.crypto("psi.pairwise"):
        initiator = PSIInitiator(prepared.items, PSIConfig(mode="both"), CurveEngine(1))
        first = initiator.start()
    ctx.send(passive, PSI_MESSAGE, first)
    while not initiator.done:
        reply = ctx.recv(passive, PSI_MESSAGE)
        with ctx.meter.crypto("psi.pairwise"):
            nxt = initiator.handle(reply)
        if nxt is not None:
            ctx.send(passive, PSI_MESSAGE, nxt)
    outcome = initiator.outcome
    assert outcome is not None and outcome.positions is not None  # set when a mode="both" session ends
    return prepared.rows[outcome.positions]


@psi_errors()
def psi_passive(ctx: PartyContext, ids: Sequence[str]) -> np.ndarray:
    """Guest side of the pairwise PSI: its rows the host labels, in the pair's order."""
    from psi import CurveEngine, PSIConfig, PSIResponder, prepare_ids

    prepared = prepare_ids(ids, source=f"party {ctx.name!r}")
    responder = PSIResponder(prepared.items, PSIConfig(mode="both"), CurveEngine(1))
    while not responder.done:
        message = ctx.recv(ctx.active, PSI_MESSAGE)
        with ctx.meter.crypto("psi.pairwise"):
            reply = responder.handle(message)
        if reply is not None:
            ctx.send(ctx.active, PSI_MESSAGE, reply)
    outcome = responder.outcome
    assert outcome is not None and outcome.positions is not None  # set when a mode="both" session ends
    return prepared.rows[outcome.positions]


def checked_activation(message: Any, passive: str, n_keys: int) -> tuple[torch.Tensor, np.ndarray]:
    """Validate a guest's ``(activation, keys)`` message; a malformed one raises ProtocolError."""
    if not (isinstance(message, tuple | list) and len(message) == 2):
        raise ProtocolError(f"{passive} sent a malformed activation message")
    activation, keys = message
    if not isinstance(activation, torch.Tensor) or activation.ndim != 2:
        raise ProtocolError(f"{passive} sent an activation that is not a 2-D tensor")
    keys = np.asarray(keys)
    if keys.ndim != 1 or keys.dtype.kind not in "iu" or len(keys) != len(activation):
        raise ProtocolError(f"{passive} sent {len(activation)} activation rows with malformed entity keys")
    if len(keys) and (keys.min() < 0 or keys.max() >= n_keys):
        raise ProtocolError(f"{passive} sent an entity key outside the {n_keys} entities the host labels")
    return activation, keys.astype(np.int64)


def id_strings(ids: np.ndarray) -> list[str]:
    """IDs as the strings the resolution compares."""
    return [str(v) for v in ids]

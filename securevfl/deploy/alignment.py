"""Phase 1 of a deployed party: ECDH PSI with its peers over the links, and the agreed row order.

The ``psi`` package's protocol cores run unchanged between the active party and each passive
party, then the N-party alignment message. Every party sorts its aligned rows by their
(normalised) IDs, as the threaded run does, and sends the active party a SHA-256 digest of that
ordered list so a mismatch stops the run (:mod:`securevfl.deploy.party` describes the phases).

**Every row** (``cover``: the default where the method can; partial coverage): no N-party step. The
agreed positions are the active party's rows in :func:`~securevfl.data.scenario.covering_order` (a hash keyed by a
digest of its whole ID list), and the active party sends each passive party the positions of the
rows their pairwise PSI matched, in that pair's agreed order. A passive party learns the positions of
its own shared rows in an order that says nothing about the active party's other IDs (their count
it learned in PSI); the active party learns, as from pairwise PSI, which of its rows each passive
party holds.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from securevfl.data.partition import PartyTable
from securevfl.deploy.federation_file import Federation
from securevfl.deploy.links import data_party_order
from securevfl.deploy.progress import log_event, sent_bytes
from securevfl.errors import ConfigError, ProtocolError, psi_errors
from securevfl.federation.meter import MeterSnapshot
from securevfl.federation.runtime import PartyContext, run_party

if TYPE_CHECKING:
    from psi import PSIInitiator, PSIResponder

TAG_PSI = "deploy.setup.psi"
TAG_DIGEST = "deploy.setup.alignment_digest"
TAG_POSITIONS = "deploy.setup.positions"

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocalAlignment:
    """One party's PSI result: its aligned rows in the agreed order, the rest, and what it cost."""

    aligned: np.ndarray
    unaligned: np.ndarray
    size: int
    snapshot: MeterSnapshot



def _ids_digest(items: list[str]) -> str:
    h = hashlib.sha256(b"securevfl/deploy/alignment/v1")
    for item in items:
        data = item.encode("utf-8")
        h.update(len(data).to_bytes(4, "big") + data)
    return h.hexdigest()


@dataclass(frozen=True)
class PsiResult:
    """One party's PSI outcome.

    Its aligned rows in the agreed order, their count, and at the active party the set size each
    passive party showed in PSI (what it may later claim as its row count).
    """

    rows: np.ndarray
    size: int
    peer_sizes: Mapping[str, int] = field(default_factory=dict)
    #: Every row (``cover``): per passive party (the active party: each; a passive party: itself), which
    #: agreed positions it holds; ``rows`` are then this party's rows of the positions it holds, in order.
    present: Mapping[str, np.ndarray] = field(default_factory=dict)


def psi_role(table: PartyTable, federation: Federation, cover: bool = False) -> Callable[[PartyContext], PsiResult]:
    """The PSI part of the setup phase for one party (``cover``: every row of the active party, see above)."""
    from psi import CurveEngine, PSIConfig, PSIInitiator, PSIResponder, prepare_ids
    from psi.protocol import Mode, global_alignment

    job = federation.job
    with psi_errors():
        config = PSIConfig(mode=job.psi.psi_mode, normalize=job.psi.normalize)
    if config.mode is not Mode.BOTH:
        raise ConfigError(f"training needs psi_mode = 'both' (every party learns its rows), got {job.psi.psi_mode!r}")

    @psi_errors()  # a bad PSI message is securevfl's ProtocolError, a bad ID its DataError
    def role(ctx: PartyContext) -> PsiResult:
        ctx.stage = "PSI"
        prepared = prepare_ids(list(table.ids), config.normalize, source=f"party {ctx.name!r}")
        own = len(prepared.items)
        peers = ctx.passives if ctx.is_active else (ctx.active,)
        log_event(_log, ctx.name, "psi", "psi_start", f"PSI: {own} IDs, with {', '.join(peers)}", rows=own,
                  peers=list(peers))
        align = len(ctx.passives) > 1 and not cover
        with CurveEngine(1) as engine:
            if ctx.is_active:
                inits: dict[str, PSIInitiator] = {}
                pair_positions: list[np.ndarray] = []
                peer_sizes: dict[str, int] = {}
                for p in ctx.passives:
                    with ctx.meter.crypto("psi"):
                        init = PSIInitiator(prepared.items, config, engine, align_follows=align)
                        message: bytes | None = init.start()
                    step = 0  # HELLO out, REPLY in; BLINDED out, DOUBLE in
                    while message is not None:
                        _psi_step(ctx, p, "sent", ctx.send(p, TAG_PSI, message),
                                  f"sent our {own} blinded IDs" if step == 1 else "")
                        answer = _bytes(ctx.recv(p, TAG_PSI), p)
                        _psi_step(ctx, p, "received", len(answer), "received its blinded IDs; blinding them, and "
                                  f"hashing and blinding our {own}" if step == 0 else "")
                        with ctx.meter.crypto("psi"):
                            message = init.handle(answer)
                        step += 1
                    inits[p] = init
                    matched, peer_sizes[p] = _pair_outcome(init, p)
                    pair_positions.append(matched)
                    _psi_pair(ctx, p, len(matched), own, peer_sizes[p])
                if cover:
                    return _cover_active(ctx, prepared, dict(zip(ctx.passives, pair_positions, strict=True)),
                                         peer_sizes)
                with ctx.meter.crypto("psi"):
                    positions, orders = global_alignment(pair_positions)
                if align:
                    for p, pair_order in zip(ctx.passives, orders, strict=True):
                        ctx.send(p, TAG_PSI, inits[p].align(pair_order))
            else:
                responder = PSIResponder(prepared.items, config, engine)
                step = 0  # HELLO in, REPLY out; BLINDED in, DOUBLE out; ALIGN in (N parties)
                while not responder.done:
                    message = _bytes(ctx.recv(ctx.active, TAG_PSI), ctx.active)
                    _psi_step(ctx, ctx.active, "received", len(message),
                              f"hashing and blinding our {own} IDs" if step == 0 else
                              "received its blinded IDs; blinding them" if step == 1 else "")
                    with ctx.meter.crypto("psi"):
                        reply = responder.handle(message)
                    if reply is not None:
                        _psi_step(ctx, ctx.active, "sent", ctx.send(ctx.active, TAG_PSI, reply),
                                  f"sent our {own} blinded IDs" if step == 0 else "")
                    step += 1
                matched, active_size = _pair_outcome(responder, ctx.active)
                _psi_pair(ctx, ctx.active, len(matched), own, active_size)
                if cover:
                    return _cover_passive(ctx, prepared, matched, active_size)
                if responder.align_follows != align:
                    raise ProtocolError(f"{ctx.active} announced a PSI alignment step contrary to the federation")
                # With an ALIGN step (N parties) the loop above handled it: the global order.
                positions = _pair_outcome(responder, ctx.active, aligned=True)[0] if align else matched
                peer_sizes = {}  # only the active party checks its peers' row counts against their PSI sets
        # The agreed order follows the session's random blinded values; every party re-sorts by the
        # (normalised) IDs, as the threaded run does, so a seeded run is the same in every session.
        items = [prepared.items[i] for i in positions]
        order = sorted(range(len(items)), key=items.__getitem__)
        rows = prepared.rows[np.asarray(positions, dtype=np.int64)[order]] if order else np.zeros(0, np.int64)
        digest = _ids_digest([items[i] for i in order])
        if ctx.is_active:
            for p in ctx.passives:
                if ctx.recv(p, TAG_DIGEST) != digest:
                    raise ProtocolError(f"the aligned rows of {p} are not in the active party's order "
                                        "(different ID normalisation?)")
        else:
            ctx.send(ctx.active, TAG_DIGEST, digest)
        log_event(_log, ctx.name, "psi", "psi_done", f"PSI: {len(items)} rows shared by every party",
                  rows=len(items), bytes=sent_bytes(ctx))
        return PsiResult(rows, len(items), peer_sizes)

    return role


def _cover_active(ctx: PartyContext, prepared: Any, matched: Mapping[str, np.ndarray],
                  peer_sizes: Mapping[str, int]) -> PsiResult:
    """Every row: the agreed order of all the active party's rows; each passive party told its rows' positions."""
    from securevfl.data.scenario import covering_order

    order = covering_order(list(prepared.items))
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order), dtype=np.int64)
    present = {}
    for p, pair in matched.items():
        where = position[np.asarray(pair, dtype=np.int64)]
        ctx.send(p, TAG_POSITIONS, where)
        present[p] = np.zeros(len(order), dtype=bool)
        present[p][where] = True
    log_event(_log, ctx.name, "psi", "psi_done", f"PSI: every one of its {len(order)} rows, each peer's where it "
              "holds them (" + ", ".join(f"{p} {int(m.sum())}" for p, m in present.items()) + ")",
              rows=len(order), bytes=sent_bytes(ctx))
    return PsiResult(prepared.rows[order], len(order), peer_sizes, present)


def _cover_passive(ctx: PartyContext, prepared: Any, matched: np.ndarray, active_size: int) -> PsiResult:
    """Every row: this passive party's shared rows at the positions the active party sends, checked first."""
    where = ctx.recv(ctx.active, TAG_POSITIONS)
    if (not isinstance(where, np.ndarray) or where.dtype != np.int64 or where.shape != (len(matched),)
            or (len(where) and (where.min() < 0 or where.max() >= active_size))
            or len(np.unique(where)) != len(where)):
        raise ProtocolError(f"malformed row positions from {ctx.active}: expected {len(matched)} distinct "
                            f"positions below {active_size}")
    sort = np.argsort(where, kind="stable")
    present = np.zeros(active_size, dtype=bool)
    present[where] = True
    log_event(_log, ctx.name, "psi", "psi_done", f"PSI: {len(matched)} of its rows among the {active_size} of "
              f"{ctx.active}", rows=len(matched), bytes=sent_bytes(ctx))
    rows = prepared.rows[np.asarray(matched, dtype=np.int64)[sort]] if len(matched) else np.zeros(0, np.int64)
    return PsiResult(rows, active_size, {}, {ctx.name: present})


def _pair_outcome(side: PSIInitiator | PSIResponder, peer: str, *, aligned: bool = False) -> tuple[np.ndarray, int]:
    """What a finished pairwise PSI gave this party: its matched positions and the peer's set size.

    ``aligned``: the positions in the N-party global order (a responder after the ALIGN step). A
    session that ended without them is the peer's protocol error, never a ``None`` passed on.
    """
    outcome = side.outcome
    positions = None if outcome is None else outcome.global_positions if aligned else outcome.positions
    if positions is None or side.peer_size is None:
        raise ProtocolError(f"the PSI session with {peer} ended without its result")
    return positions, side.peer_size


def _psi_step(ctx: PartyContext, peer: str, direction: str, size: int, stage: str) -> None:
    """One PSI message: its size (debug), and the stage it starts or ends when it does (info)."""
    if stage:
        log_event(_log, ctx.name, "psi", f"psi_{direction}", f"PSI with {peer}: {stage} ({size} bytes {direction})",
                  peer=peer, bytes=size)
    else:
        log_event(_log, ctx.name, "psi", f"psi_{direction}", f"PSI with {peer}: {direction} {size} bytes",
                  level=logging.DEBUG, peer=peer, bytes=size)


def _psi_pair(ctx: PartyContext, peer: str, common: int, own: int, peer_size: int) -> None:
    """A pairwise PSI's result: how many of this party's IDs the peer holds too."""
    log_event(_log, ctx.name, "psi", "psi_pair", f"PSI with {peer}: {common} of {own} IDs in common ({peer} holds "
              f"{peer_size})", peer=peer, rows=common, peer_rows=peer_size)


def _bytes(message: Any, sender: str) -> bytes:
    if not isinstance(message, bytes):
        raise ProtocolError(f"malformed PSI message from {sender}: expected bytes")
    return message


def unaligned_rows(n_rows: int, aligned: np.ndarray) -> np.ndarray:
    """The positions of this party's rows that are not in ``aligned`` (in row order)."""
    mask = np.ones(n_rows, dtype=bool)
    mask[aligned] = False
    return np.flatnonzero(mask)


def align_over_network(transport: Any, federation: Federation, name: str, table: PartyTable) -> LocalAlignment:
    """Run the PSI phase alone (``securevfl psi --federation``); returns this party's alignment."""
    psi, meter = run_party(psi_role(table, federation), name=name, active=federation.active,
                           parties=data_party_order(federation), transport=transport)
    return LocalAlignment(psi.rows, unaligned_rows(table.n_rows, psi.rows), psi.size, meter.snapshot())

"""Online scoring at the active party: its session, request batches, lookups, and a partner down or late.

:mod:`securevfl.deploy.serving` holds the protocol (its docstring: set-up, per request, what each party
learns) and the passive and helper roles; this module is the active party's role
(:func:`active_role`): it builds every peer's blinded index, batches the endpoint's requests, looks
their IDs up at every passive party, scores them through the method's evaluation, and answers each
request. A passive party that misses ``--party-timeout`` or whose links are down is left out of a
batch (``left_out`` in the answers, ``/health`` degraded), resynchronised by a marker, and taken back
when it returns (a restarted process: its set-up redone alone).
"""

from __future__ import annotations

import logging
import queue
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from securevfl.data.labels import REGRESSION
from securevfl.data.scenario import pattern_names
from securevfl.deploy.federation_file import Federation
from securevfl.deploy.progress import log_event
from securevfl.deploy.serving import (
    IDLE_STAGE,
    MAX_INDEX_ROWS,
    TAG_ABANDON,
    TAG_BLINDED,
    TAG_HELLO,
    TAG_INDEX,
    TAG_REQUEST,
    TAG_ROWS,
    TAG_WIDTHS,
    ServingModel,
    ServingSummary,
    SideBuilder,
    _blind,
    _hash_blind,
    _points,
    _widths,
    fresh_order,
)
from securevfl.deploy.serving_http import RequestQueue, ScoringJob, ServeMetrics
from securevfl.deploy.serving_limits import BudgetRefused, ServeSettings
from securevfl.errors import (
    Interrupted,
    ModelError,
    PeerFinishedError,
    PeerTimeoutError,
    ProtocolError,
    SecureVFLError,
)
from securevfl.federation.runtime import PartyContext

_log = logging.getLogger(__name__)


@dataclass
class _PeerIndex:
    """A passive party's index at the active party: ``H(x)^{ab}`` -> its position in the party's index."""

    positions: dict[bytes, int]


#: Each receive of a batch's evaluation waits at most this many ``--party-timeout`` s: a party that vanishes
#: inside it (SIGKILL: no goodbye, its links waiting to resume) is not waited for a whole receive timeout.
EVALUATION_DEADLINES = 4

#: A passive party's state at the active party: it takes part in scoring (``up``), or is left out of
#: every batch because its links are ``down``, it missed a deadline and its late answers are still
#: on their way (``late``), or a new process of it is being set up (``joining``).
UP, DOWN, LATE, JOINING = "up", "down", "late", "joining"


@dataclass
class _Peer:
    """A passive party as the active party's serving loop sees it."""

    index: _PeerIndex | None
    state: str = UP
    epoch: int = 0  # the process of it (the transport's PeerStatus.epoch) that sent ``index``
    sync: int = 0  # late: the marker it echoes after its last late answer
    hello: bool = False  # joining: the session's salt went to its new process
    since: float = 0.0  # time.monotonic() when it went out of scoring


@dataclass
class _Session:
    """What the active party's role holds for the whole session (built at set-up)."""

    model: ServingModel
    peers: dict[str, _Peer]
    helpers: tuple[str, ...]
    key: Any
    salt: bytes
    classes: tuple[str, ...]
    task: str
    id_column: str
    metrics: ServeMetrics
    active: str = ""
    #: Every row the active party holds is scored, each peer's part where it holds it (a model trained for it).
    every_row: bool = False
    #: Seconds each passive party has for its lookup answer, then for its evaluation message.
    timeout_s: float = 0.5
    #: The method scores without a passive party that is down (:attr:`PartySide.leave_out`).
    leave_out: bool = False
    fingerprint: str = ""
    inputs: dict[str, Any] = field(default_factory=dict)  # the WIDTHS message every party built its side for
    #: Its evaluation's first message from each passive party is collected here with the deadline
    #: (:attr:`PartySide.collects`); else only a party out before the batch is left out of it.
    collects: bool = True
    #: A restarted passive process is set up again alone and taken back (:attr:`PartySide.takes_back`).
    takes_back: bool = True
    #: The method's evaluation sums one vector over every row evaluated (:attr:`PartySide.sums_rows`): a model
    #: trained on every row is evaluated over every ID of the batch, in a random order (:func:`_round_slots`).
    sums_rows: bool = False
    #: (With :attr:`sums_rows`) the passive parties of the method's secure-aggregation session, which is set up
    #: again (:meth:`PartySide.regroup`) when the parties in scoring change; at first every passive party.
    members: tuple[str, ...] = ()
    batches: int = 0  # batches sent to the passive parties (each message of a batch carries its number)
    syncs: int = 0  # sync markers sent to late passive parties


def _next_batch(jobs: RequestQueue, first: ScoringJob, wait_s: float,
                max_rows: int) -> tuple[list[ScoringJob], bool]:
    """``first`` and the requests that arrive within ``wait_s`` of it, up to ``max_rows`` rows.

    Cancelled requests are dropped, and every request taken is claimed (its answer can no longer be
    cancelled: a client that goes away now only drops the answer); the flag says whether the service
    was told to stop meanwhile.
    """
    batch = [first] if _claim(first) else []
    rows = first.n_rows
    deadline = time.perf_counter() + wait_s
    while rows < max_rows:
        remaining = deadline - time.perf_counter()
        try:
            job = jobs.get(timeout=max(0.0, remaining))
        except queue.Empty:
            break
        if job is None:
            return batch, True
        if _claim(job):
            batch.append(job)
            rows += job.n_rows
    return batch, False


def _claim(job: ScoringJob) -> bool:
    """Whether ``job`` is still wanted; if so its answer is marked running (no longer cancellable)."""
    return not job.cancelled and job.answer.set_running_or_notify_cancel()


def _peer_index(ctx: PartyContext, key: Any, p: str, message: Any, fingerprint: str) -> tuple[int, _PeerIndex]:
    """A passive party's set-up message, checked: its encoded width and its index raised to this party's key."""
    if not isinstance(message, dict) or set(message) != {"model", "width", "index"}:
        raise ProtocolError(f"malformed serving index from {p}")
    width = _widths({p: message["width"]}, p, (p,))[p]
    if message["model"] != fingerprint:
        raise ModelError(f"{p} holds a part of another model: every party must serve with its part of "
                         "one saved model")
    points = _points(message["index"], p, MAX_INDEX_ROWS, "ID index")
    with ctx.meter.crypto("serve.index"):
        both = _blind(points, key, workers=None)
    log_event(_log, ctx.name, "serve", "index", f"serving index of {p}: {len(both)} IDs", peer=p,
              peer_rows=len(both))
    return width, _PeerIndex({bytes(row): i for i, row in enumerate(both)})


def active_role(model: ServingModel, fingerprint: str, jobs: RequestQueue,
                 federation: Federation, classes: tuple[str, ...], task: str, build_side: SideBuilder,
                 ready: Callable[[], None], idle_s: float, settings: ServeSettings,
                 metrics: ServeMetrics) -> Callable[[PartyContext], ServingSummary]:
    """Build the peers' indexes, then score the endpoint's requests, batched, until told to stop."""
    from psi.curve import BlindingKey
    from securevfl.methods.engine.loop import prepare_scoring_side

    def role(ctx: PartyContext) -> ServingSummary:
        summary = ServingSummary(ctx.name)
        ctx.stage = "serve: setup"
        salt, key = secrets.token_bytes(32), BlindingKey(secrets.token_bytes(32))
        n_classes = 1 if task == REGRESSION else len(classes)
        for p in ctx.passives:
            ctx.send(p, TAG_HELLO, {"salt": salt})
        peers: dict[str, _Peer] = {}
        widths = {ctx.name: int(model.X.shape[1])}
        for p in ctx.passives:
            epoch = ctx.channel.peer_status(p).epoch
            widths[p], index = _peer_index(ctx, key, p, ctx.recv(p, TAG_INDEX), fingerprint)
            peers[p] = _Peer(index, epoch=epoch)
            metrics.peer_up.labels(p).set(1)
        helpers = tuple(p for p in ctx.peers if p not in ctx.passives)
        inputs = {"widths": widths, "n_classes": n_classes, "task": task}
        for p in (*ctx.passives, *helpers):  # every party builds its side for the same model inputs (as a plan says)
            ctx.send(p, TAG_WIDTHS, inputs)
        model.side = build_side(widths, n_classes, task)
        prepare_scoring_side(ctx, model.side, model.saved)
        side = model.side
        every_row = bool(side.method.partial_rows and not side.config.require_all_parties)
        session = _Session(model, peers, helpers, key, salt, classes, task, federation.job.id_column, metrics,
                           ctx.name, every_row, settings.party_timeout_s, bool(side.leave_out), fingerprint, inputs,
                           collects=bool(side.leave_out and side.collects),
                           takes_back=bool(side.leave_out and side.takes_back), sums_rows=bool(side.sums_rows),
                           members=tuple(peers))
        ready()
        started = time.perf_counter()
        last = time.monotonic()
        stopping = False
        busy = False  # the last batch held more than one request: others are likely on their way
        while not stopping:
            ctx.stage = IDLE_STAGE
            try:
                job = jobs.get(timeout=min(idle_s, 0.25))
            except Interrupted:  # SIGINT / SIGTERM while idle: the service ends, the peers stop cleanly
                break
            except queue.Empty:
                _refresh(ctx, session)  # a peer down, back, late or restarted: known before the next request
                if time.monotonic() - last >= idle_s:  # tell the peers this party is alive
                    _tell(ctx, session, "idle")
                    last = time.monotonic()
                continue
            if job is None:
                break
            # wait for company only under concurrency: a lone request is scored at once (with what is queued)
            wait_s = settings.batch_wait_ms / 1e3 if busy or jobs.qsize() else 0.0
            batch, stopping = _next_batch(jobs, job, wait_s, settings.max_batch_rows)
            busy = len(batch) > 1
            metrics.queued.set(jobs.qsize())
            if not batch:
                continue
            ctx.stage = "serve: request"
            t0 = time.perf_counter()
            scored = _score_batch(ctx, session, batch)
            last = time.monotonic()
            summary.requests += len(batch)
            summary.rows_scored += scored
            latency = (time.perf_counter() - t0) * 1e3
            summary.latencies_ms.extend([latency] * len(batch))
            log_event(_log, ctx.name, "serve", "request", f"batch of {len(batch)} request(s): {scored} of "
                      f"{sum(j.n_rows for j in batch)} rows scored in {latency:.1f} ms",
                      requests=len(batch), rows=scored, asked=sum(j.n_rows for j in batch),
                      latency_ms=round(latency, 3))
        _tell(ctx, session, "stop")
        summary.wall_s = time.perf_counter() - started
        return summary

    return role


def _tell(ctx: PartyContext, session: _Session, word: str) -> None:
    """``idle`` or ``stop`` to every helper and every passive party in step with this one (not down, not joining)."""
    for p in session.helpers:
        ctx.send(p, TAG_REQUEST, word)
    for p, peer in session.peers.items():
        if peer.state in (UP, LATE):
            try:
                ctx.send(p, TAG_REQUEST, word)
            except SecureVFLError as exc:
                _down_or_raise(ctx, session, p, exc)


# ------------------------------------------------------------------ a passive party down, late, back, restarted


def _lost(ctx: PartyContext, p: str, exc: BaseException) -> bool:
    """Whether ``exc`` (raised sending to or receiving from ``p``) means that ``p`` is down: its links say so."""
    return isinstance(exc, (PeerFinishedError, ProtocolError, ConnectionError)) and not ctx.channel.peer_status(p).up


def _down_or_raise(ctx: PartyContext, session: _Session, p: str, exc: BaseException) -> None:
    """``p`` goes out of scoring as down if ``exc`` says it is lost; anything else (a live peer's fault) is raised."""
    if not _lost(ctx, p, exc):
        raise exc
    _out(session, p, DOWN, f"its links are down ({type(exc).__name__})")


def _out(session: _Session, p: str, state: str, why: str) -> None:
    """Take ``p`` out of scoring (``down``, ``late``, ``joining``): logged and counted once per outage."""
    peer = session.peers[p]
    if peer.state == UP:
        peer.since = time.monotonic()
        session.metrics.peer_outages.labels(p).inc()
        session.metrics.peer_up.labels(p).set(0)
        log_event(_log, session.active, "serve", "peer-down", f"{p} is left out of scoring: {why}",
                  level=logging.WARNING, peer=p, reason=state)
    elif peer.state != state:
        log_event(_log, session.active, "serve", "peer-state", f"{p}, out of scoring, is now {state}: {why}",
                  level=logging.INFO, peer=p, reason=state)
    peer.state = state
    session.metrics.out[p] = state


def _back(session: _Session, p: str) -> None:
    """``p`` takes part in scoring again."""
    peer = session.peers[p]
    peer.state = UP
    session.metrics.peer_up.labels(p).set(1)
    session.metrics.out.pop(p, None)
    outage = time.monotonic() - peer.since
    log_event(_log, session.active, "serve", "peer-back", f"{p} takes part in scoring again after {outage:.1f} s "
              "out", peer=p, outage_s=round(outage, 3))


def _resync(ctx: PartyContext, session: _Session, p: str, why: str) -> None:
    """``p`` is late: a sync marker goes after what it was sent, and it is back once it echoes the marker.

    Whatever it sends before the echo (its answers to the batches it missed) is dropped unread.
    """
    session.syncs += 1
    session.peers[p].sync = session.syncs
    _out(session, p, LATE, why)
    try:
        ctx.send(p, TAG_REQUEST, {"sync": session.syncs})
    except SecureVFLError as exc:
        _down_or_raise(ctx, session, p, exc)


def _refresh(ctx: PartyContext, session: _Session) -> None:
    """Each passive party's state brought up to date with its links: down, late answers drained, a restart set up.

    Never waits: what has not arrived yet is looked at again before the next batch.
    """
    for p, peer in session.peers.items():
        status = ctx.channel.peer_status(p)
        if status.epoch != peer.epoch:  # a new process of it: set up again, alone, before it is asked anything
            ctx.channel.discard(p)
            peer.epoch, peer.index, peer.hello = status.epoch, None, False
            _out(session, p, JOINING, "a new process of it connected" + (
                "" if session.takes_back else f" (a {session.model.side.method.name} model cannot take it back: "
                                             "restart the service)"))
        if not status.up:
            if peer.state != JOINING:
                _out(session, p, DOWN, "its links are down")
            continue
        try:
            if peer.state == DOWN:  # the same process, reachable again: what it owes first
                _resync(ctx, session, p, "reachable again; its late answers are dropped first")
            if peer.state == LATE:
                _drain(ctx, session, p)
            elif peer.state == JOINING and session.takes_back:
                _join(ctx, session, p)
        except SecureVFLError as exc:
            _down_or_raise(ctx, session, p, exc)


def _drain(ctx: PartyContext, session: _Session, p: str) -> None:
    """Drop what a late ``p`` sent so far; back in scoring once its echo of the sync marker is here."""
    peer = session.peers[p]
    while (message := ctx.channel.take(p, 0.0)) is not None:
        tag, value = message
        if tag == TAG_BLINDED and isinstance(value, dict) and value.get("synced") == peer.sync:
            _back(session, p)
            return


def _join(ctx: PartyContext, session: _Session, p: str) -> None:
    """A restarted ``p``: the session's salt, its new index, the model inputs (as at set-up), then a sync marker.

    It is back once it echoes the marker: its side is built by then, and the next request meets its deadline.
    """
    peer = session.peers[p]
    if not peer.hello:
        ctx.send(p, TAG_HELLO, {"salt": session.salt})
        peer.hello = True
        return
    message = ctx.channel.take(p, 0.0)
    if message is None:
        return
    tag, value = message
    if tag != TAG_INDEX:
        raise ProtocolError(f"the new process of {p} sent {tag!r} before its serving index")
    width, index = _peer_index(ctx, session.key, p, value, session.fingerprint)
    if width != session.inputs["widths"][p]:
        raise ModelError(f"the new process of {p} serves a part of encoded width {width}, the one before "
                         f"{session.inputs['widths'][p]}: every party must serve with its part of one saved model")
    ctx.send(p, TAG_WIDTHS, session.inputs)
    for h in session.helpers:  # their part of its set-up (hetero-lr's arbiter: the session's public key)
        ctx.send(h, TAG_REQUEST, {"rejoined": p})
    peer.index = index
    _resync(ctx, session, p, "set up again; back once its side is built (it echoes a sync marker)")


def _lookups(ctx: PartyContext, session: _Session, batch: list[ScoringJob], ids: list[str], number: int,
             out: dict[str, str]) -> tuple[dict[str, np.ndarray], list[BudgetRefused | None], list[str]]:
    """Each passive party's index positions of ``ids``, per request the first refusal, and the parties asked.

    Only the parties in scoring are asked; each has ``session.timeout_s`` to answer (else it is left
    out of the batch, in ``out`` with the reason, and has no positions). A position is -1 where the
    party does not hold the ID or did not look it up; a refusal is None where every party looked the
    request up.

    The IDs go out as ``H(q)^{a r}``, ``r`` fresh for this batch (so a peer cannot link an ID asked in
    two batches), and the peer's ``H(q)^{a r b}`` comes back to ``H(q)^{ab}`` with ``r``'s inverse.
    """
    from psi.curve import rerandomizing_pair

    sizes = [job.n_rows for job in batch]
    with ctx.meter.crypto("serve.blind"):
        fresh, inverse = rerandomizing_pair(base=session.key)  # H(q)^{a r} in one multiplication
        asked = _hash_blind(ids, session.salt, fresh).tobytes()
    sent: list[str] = []
    for p, peer in session.peers.items():
        if peer.state == UP:
            try:
                ctx.send(p, TAG_REQUEST, {"points": asked, "sizes": sizes, "batch": number})
                sent.append(p)
            except SecureVFLError as exc:
                _down_or_raise(ctx, session, p, exc)
                out[p] = DOWN
    positions: dict[str, np.ndarray] = {}
    refused: list[BudgetRefused | None] = [None] * len(batch)
    starts = np.cumsum([0, *sizes])
    deadline = time.monotonic() + session.timeout_s
    for p in sent:
        t0 = time.perf_counter()
        try:
            answer = ctx.recv(p, TAG_BLINDED, timeout=max(0.0, deadline - time.monotonic()))
        except PeerTimeoutError:
            _out(session, p, LATE, f"no lookup answer within {session.timeout_s:g} s")
            out[p] = LATE
            continue
        except SecureVFLError as exc:
            _down_or_raise(ctx, session, p, exc)
            out[p] = DOWN
            continue
        finally:
            session.metrics.peer_seconds.labels(p).observe(time.perf_counter() - t0)
        looked_up = np.ones(len(ids), dtype=bool)
        for j in _refused_requests(answer, p, len(batch), number):
            looked_up[starts[j]:starts[j + 1]] = False
            refused[j] = refused[j] or BudgetRefused(p, answer["reason"], answer["retry_after_s"])
            session.metrics.refusals.labels(p).inc()
        both = _points(answer["points"], p, len(ids), "blinded request")
        if len(both) != looked_up.sum():
            raise ProtocolError(f"{p} answered {len(both)} of the {int(looked_up.sum())} IDs it looked up")
        found = np.full(len(ids), -1, np.int64)
        index = session.peers[p].index
        if len(both) and index is not None:
            with ctx.meter.crypto("serve.blind"):
                both = _blind(both, inverse)
            found[looked_up] = [index.positions.get(bytes(row), -1) for row in both]
        positions[p] = found
    return positions, refused, sent


def _refused_requests(message: Any, sender: str, n_requests: int, number: int) -> list[int]:
    """The requests a passive party's lookup answer says it refused (its answer checked, of batch ``number``)."""
    if not isinstance(message, dict) or set(message) != {"points", "refused", "reason", "retry_after_s", "batch"}:
        raise ProtocolError(f"malformed lookup answer from {sender}")
    if message["batch"] != number:  # in step: a late answer is drained before the party is asked again
        raise ProtocolError(f"{sender} answered batch {message['batch']!r} when asked batch {number}")
    refused, reason, retry = message["refused"], message["reason"], message["retry_after_s"]
    if not isinstance(refused, list) or not all(isinstance(j, int) and 0 <= j < n_requests for j in refused) \
            or len(set(refused)) != len(refused) or bool(refused) != isinstance(reason, str) \
            or (isinstance(reason, str) and len(reason) > 200) \
            or not (retry is None or (isinstance(retry, float) and 0 <= retry <= 86400)):
        raise ProtocolError(f"malformed lookup answer from {sender}")
    return refused


def _collect(ctx: PartyContext, session: _Session, told: list[str], out: dict[str, str]) -> set[str]:
    """The evaluation message of each party in ``told``, waited for ``session.timeout_s`` (kept for the evaluation).

    Returns the parties whose message did not come in time (each now late, or down: in ``out``).
    """
    missing: set[str] = set()
    deadline = time.monotonic() + session.timeout_s
    for p in told:
        try:
            here = ctx.channel.poll(p, max(0.0, deadline - time.monotonic()))
        except SecureVFLError as exc:
            _down_or_raise(ctx, session, p, exc)
            out[p] = DOWN
            missing.add(p)
            continue
        if not here:
            missing.add(p)
            out[p] = LATE
            _resync(ctx, session, p, f"no evaluation message within {session.timeout_s:g} s")
    return missing


def _score_batch(ctx: PartyContext, session: _Session, batch: list[ScoringJob]) -> int:
    """One exchange for a batch of requests; each request gets its own answer. Returns the rows scored.

    Blinded lookups at every passive party in scoring, then the method's evaluation of the rows
    every party holds (a model trained on every row: every row the active party holds, each passive
    party's part where it holds the row and answered in time). A passive party left out of the batch
    (down, late, joining) is named in each answer's ``left_out``.

    A helper learns only the number of rows scored (it takes part in their evaluation).
    """
    from securevfl.methods.engine.loop import VALIDATE

    _refresh(ctx, session)
    session.batches += 1
    number = session.batches
    out = {p: peer.state for p, peer in session.peers.items() if peer.state != UP}
    ids = [item for job in batch for item in job.ids]
    held = np.concatenate([job.own for job in batch])
    refused: list[BudgetRefused | None] = [None] * len(batch)
    positions: dict[str, np.ndarray] = {}
    sent: list[str] = []
    every_row = session.every_row
    if session.peers:
        positions, refused, sent = _lookups(ctx, session, batch, ids, number, out)
        every_row = every_row and (session.leave_out or not out)  # else the model needs every party's part
        if every_row:  # the rows the active party holds, of the requests no peer refused
            starts = np.cumsum([0, *[job.n_rows for job in batch]])
            for j, refusal in enumerate(refused):
                if refusal is not None:
                    held[starts[j]:starts[j + 1]] = False
        elif out:  # a model that needs every party's part: none of this batch's rows
            held[:] = False
        else:
            for found in positions.values():
                held &= found >= 0
    rows = np.flatnonzero(held)
    evaluate = bool(every_row or len(rows))
    slots = _round_slots(len(ids), rows) if evaluate and every_row and session.sums_rows else None
    members, regroup = session.members, False
    if slots is not None:  # the session's members: the parties that answered, if their sums hide each one
        up = tuple(p for p in session.peers if p in positions)
        members = up if session.model.side.can_regroup(up) else ()
        if not members and not session.model.side.can_regroup(()):  # no secure sum, no model of its own: no row
            held[:] = False
            rows, evaluate, slots, members = rows[:0], False, None, session.members
        regroup = members != session.members
    told: list[str] = []
    for p in sent:  # positions in the peer's index: only of IDs it looked up and holds; none for a party left out
        answered = p in positions and (slots is None or p in members)
        mine = positions[p][rows] if answered else np.zeros(0, np.int64)
        own = mine[mine >= 0].astype(np.int64)
        message: dict[str, Any] = {"positions": own, "batch": number, "evaluate": evaluate and answered}
        if slots is not None and answered:  # its rows' places in the round, in the order of the places
            places = slots[mine >= 0]
            order = np.argsort(places)
            message.update(positions=own[order], slots=places[order], round=len(ids), regroup=regroup)
        try:
            ctx.send(p, TAG_ROWS, message)
        except SecureVFLError as exc:
            _down_or_raise(ctx, session, p, exc)
            out[p] = DOWN
            continue
        if answered and evaluate:
            told.append(p)
        elif p in positions:  # it answered in time, but is not in the session that scores this batch
            pass
        elif session.peers[p].state == LATE:  # its late lookup answer, then the marker's echo
            _resync(ctx, session, p, f"no lookup answer within {session.timeout_s:g} s")
    silent = {p for p in session.peers if p not in told}
    if evaluate and session.collects:
        silent |= _collect(ctx, session, told, out)
        if not session.every_row and silent:  # a model that needs every party's part: none of the rows
            for p in told:
                ctx.channel.discard(p)
            held[:] = False
            rows = rows[:0]
            evaluate = False
    for p in session.helpers:
        ctx.send(p, TAG_REQUEST, int(len(rows)))
    scores = None
    none = np.zeros(len(rows), dtype=bool)
    present = {p: none if p in silent else positions[p][rows] >= 0 for p in session.peers}
    if evaluate:
        X = np.concatenate([job.X for job in batch]) if len(batch) > 1 else batch[0].X
        side = session.model.side
        side.present = present if every_row else None
        side.silent = frozenset(silent) if session.leave_out else frozenset()
        try:
            try:  # a party that vanished inside the evaluation is waited for a few deadlines, not a receive timeout
                with ctx.channel.receive_timeout(EVALUATION_DEADLINES * session.timeout_s):
                    if slots is None:
                        scores = side.evaluate(ctx, X[rows], VALIDATE).scores
                    else:  # a round over every ID of the batch: the unscored ones are no party's rows
                        if regroup:
                            _regroup(session, side, ctx, members)
                        scores = _evaluate_round(ctx, side, X[rows], slots, present, len(ids))
            except SecureVFLError as exc:  # a party lost in the evaluation: the others stop, the bank alone scores
                if not session.leave_out or session.helpers or not every_row:
                    raise
                _cut(ctx, session, exc, number, list(session.members if slots is not None else told))
                present = {p: none for p in present}
                out.update({p: session.peers[p].state for p in session.peers if session.peers[p].state != UP})
                scores = _alone(ctx, session, side, X[rows], slots, present, len(ids))
                if scores is None:  # no model of its own: none of the batch's rows
                    held[:] = False
                    rows = rows[:0]
                    present = {p: m[:0] for p, m in present.items()}
        finally:
            side.present, side.silent = None, frozenset()
    session.metrics.batch_rows.observe(len(ids))
    session.metrics.rows.labels("scored").inc(len(rows))
    session.metrics.rows.labels("not_scored").inc(len(ids) - len(rows))
    for p, reason in out.items():
        session.metrics.left_out.labels(p, reason).inc()
    parties = _parties(session, rows, present)
    start = begin = 0  # the request's first row in the batch, and its first scored row
    for job, refusal in zip(batch, refused):
        mine = held[start:start + job.n_rows]
        scored = int(mine.sum())  # 0 for a refused request: none of its rows is held
        if refusal is not None:
            job.answer.set_exception(refusal)
        else:
            try:
                job.answer.set_result(_answer(session, job, mine, None if scores is None else
                                              scores[begin:begin + scored], parties[begin:begin + scored], out))
            except Exception as exc:  # noqa: BLE001 - one request's answer failing is that request's error
                job.answer.set_exception(exc)
        start, begin = start + job.n_rows, begin + scored
    return int(len(rows))


def _round_slots(n: int, rows: np.ndarray) -> np.ndarray:
    """The places of the scored ``rows`` in a round over the batch's ``n`` IDs, in a fresh random order.

    A method that sums one vector over every row evaluated (EASTER's secure sum) makes each passive
    party send a vector of the round's length: over every ID of the batch (which each passive party
    already sees in the lookup), so that a peer learns nothing of how many rows the active party
    scores; in a random order, so that the places say nothing of which request a row came from.
    """
    places: np.ndarray = fresh_order(n)[rows]
    return places


def _regroup(session: _Session, side: Any, ctx: PartyContext, members: tuple[str, ...]) -> None:
    """A new secure-aggregation session with ``members`` (each was told so in its rows message), logged."""
    was, session.members = session.members, members
    side.regroup(ctx, members)
    log_event(_log, ctx.name, "serve", "regroup", f"secure aggregation set up again with "
              f"{', '.join(members) or 'no passive party (the active party scores alone)'} (was "
              f"{', '.join(was) or 'none'})", members=list(members), was=list(was))


def _cut(ctx: PartyContext, session: _Session, exc: SecureVFLError, number: int, taking: list[str]) -> None:
    """A party ``taking`` part in batch ``number``'s evaluation was lost or too slow: the others stop waiting in it.

    A lost party (its links down) goes out as down; every other, a slow one included, is sent
    :data:`TAG_ABANDON` (wherever it waits in the evaluation, it stops) and a sync marker (what it sent in
    the cut evaluation is dropped unread), so it is out until it echoes. Anything else is raised.
    """
    lost = [p for p in taking if _lost(ctx, p, exc)]
    if not lost and not (isinstance(exc, PeerTimeoutError) and exc.peer in taking):  # else one is too slow: late
        raise exc
    for p in lost:
        _out(session, p, DOWN, f"lost during the evaluation of a batch ({type(exc).__name__})")
    for p in taking:
        if p in lost:
            continue
        try:
            ctx.send(p, TAG_ABANDON, number)
        except SecureVFLError as error:
            _down_or_raise(ctx, session, p, error)
            continue
        _resync(ctx, session, p, f"the evaluation of a batch was cut short: {', '.join(lost)} lost")


def _alone(ctx: PartyContext, session: _Session, side: Any, X: np.ndarray, slots: np.ndarray | None,
           present: dict[str, np.ndarray], n: int) -> np.ndarray | None:
    """The batch scored again by the active party alone (``present``: no passive party's part), after a cut.

    A method that sums over every row evaluated has no session member until the parties are back
    (:func:`_regroup` then sets it up again), and scores alone only with a model of its own (else None).
    """
    from securevfl.methods.engine.loop import VALIDATE

    if slots is not None:
        _regroup(session, side, ctx, ())
        return _evaluate_round(ctx, side, X, slots, present, n) if side.can_regroup(()) else None
    side.present, side.silent = present, frozenset(session.peers)
    scores: np.ndarray = np.asarray(side.evaluate(ctx, X, VALIDATE).scores)
    return scores


def _evaluate_round(ctx: PartyContext, side: Any, X: np.ndarray, slots: np.ndarray,
                    present: dict[str, np.ndarray], n: int) -> np.ndarray:
    """The scores of the rows ``X`` evaluated at their ``slots`` of a round of ``n`` rows (the rest: no one's).

    ``present`` (per passive party, the rows it holds) is cut in place to the rows its part went into.
    """
    from securevfl.methods.engine.loop import VALIDATE

    full = np.zeros((n, *X.shape[1:]), dtype=X.dtype)
    full[slots] = X
    side.present = {}
    for p, mask in present.items():
        side.present[p] = np.zeros(n, dtype=bool)
        side.present[p][slots] = mask
    evaluation = side.evaluate(ctx, full, VALIDATE)
    if evaluation.contributed is not None:  # a row's parties: those whose parts were summed (in place)
        for p, mask in evaluation.contributed.items():
            present[p] &= mask[slots]
    scores: np.ndarray = np.asarray(evaluation.scores)[slots]
    return scores


def _parties(session: _Session, rows: np.ndarray, present: dict[str, np.ndarray]) -> list[str]:
    """Per scored row, the parties whose parts scored it (``bank+shop``): every row's answer says so."""
    held = [np.ones(len(rows), dtype=bool), *(present[p] for p in session.peers)]
    return list(pattern_names([session.active, *session.peers], held, len(rows)))


def _answer(session: _Session, job: ScoringJob, held: np.ndarray, scores: np.ndarray | None,
            parties: list[str], left_out: Mapping[str, str]) -> dict[str, Any]:
    """One request's answer: its scored rows' predictions (with the active party's warnings), the rest named.

    ``left_out``: the passive parties left out of its batch, with why (in the answer only when some were).
    """
    from securevfl.model.scoring import prediction_records

    predictions: list[dict[str, Any]] = []
    scored = np.flatnonzero(held)
    if len(scored) and scores is not None:
        predictions = prediction_records([job.ids[i] for i in scored], scores, session.task, session.classes,
                                         session.id_column)
        for row, i, who in zip(predictions, scored, parties, strict=True):
            row["parties"] = who
            row["warnings"] = job.warnings[i]
            for note in job.warnings[i]:
                session.metrics.warnings.labels(note.split(":")[0].replace(" ", "_")).inc()
    answer: dict[str, Any] = {"predictions": predictions, "not_scored": [job.ids[i] for i in np.flatnonzero(~held)]}
    if left_out:
        answer["left_out"] = dict(left_out)
    return answer

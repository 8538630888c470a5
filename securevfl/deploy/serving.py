"""Online scoring: the parties of a saved model stay up, and the active party answers requests (``party --serve``).

This module: the protocol, the shared pieces and the passive and helper roles; the active party's role
(its session, batches and a partner down) is :mod:`securevfl.deploy.serving_active`.

Every party runs ``securevfl party --serve`` with its own part (``--model-dir``) and its current
table (``--data``): the customers it can be asked about. The active party answers ``POST /score``
on a local HTTP endpoint (``--listen``, loopback by default) with a JSON body
``{"rows": [{"<id column>": "c0042"}, ...]}``; a row may also carry the active party's own
feature values (every column its model was trained on), which then replace its table's. The
answer is ``{"predictions": [{"<id column>": ..., "prediction": ..., "proba_<class>": ...}],
"not_scored": [ids some party does not hold]}`` (and ``"left_out"``, below); ``GET /health`` says whether
the parties are up.

**Setup, once** (over the same mutually authenticated links as training, job fingerprint marked
``phase = serve``): every passive party announces the fingerprint of its part (parts of two models
never serve together) and its **blinded ID index**: ``H(x)^b`` for each of its IDs (X25519 over
the hash-to-curve of :mod:`psi.curve`, with a salt the active party drew for the session), in a
secret random order. The active party raises each to its own key: ``H(x)^{ab}``.

**Per request**: the active party sends each passive party its requested IDs blinded, ``H(q)^a``;
the passive party returns ``H(q)^{ab}``; the active party finds them in that party's index. The
rows every party holds are scored: the active party sends each passive party the index positions
of those rows, and the parties run the method's evaluation protocol on them
(:meth:`~securevfl.methods.engine.loop.PartySide.evaluate`, as batch scoring does), so the privacy
layer of training protects each request too (EASTER's embeddings summed under its ``secagg``).

**A passive party down or late** (issue 44): each passive party has ``--party-timeout`` seconds
(:attr:`ServeSettings.party_timeout_s`, default 0.5) for its lookup answer (TAG_BLINDED), then again
for its evaluation message (collected by the serving loop with :meth:`Channel.poll` before the
method's evaluation runs, for a method whose evaluation is one message per passive party:
``PartySide.leave_out``); a party that misses it, or whose links are down
(:meth:`Channel.peer_status`), is left out of the batch. A model trained on every row
(``serving_active._Session.every_row``) scores the batch's rows without it (its ``present`` all False, so its
absent embedding stands in; the side is told it is ``silent``); a model trained on the rows every
party holds scores none of the batch's rows (``not_scored``). Each answer of such a batch has
``"left_out": {"<party>": "down" | "late" | "joining"}``; ``/health`` says
``{"status": "degraded", "left_out": ...}``; ServeMetrics counts it (``peer_up``, ``peer_outages``,
``left_out``); the log has one ``peer-down`` and one ``peer-back`` event per outage.

*In step.* The REQUEST, BLINDED and ROWS messages of a batch carry its number (a passive party
checks that ROWS is its REQUEST's batch; the active party that an answer is the batch it asked).
A party left out at the lookup still gets the batch's ROWS (no rows, ``evaluate: false``) so its
loop (REQUEST -> BLINDED -> ROWS -> evaluation) never desynchronises. After a batch it was late
for, it is sent a sync marker (TAG_REQUEST ``{"sync": n}``) and asked nothing more until it echoes
it (TAG_BLINDED ``{"synced": n}``); on a FIFO link everything it sent before the echo is an answer
to a batch it missed, dropped unread — a late answer is never taken for a later batch's.

*Back.* A party whose links come back (the same process) is resynchronised the same way. A new
process of it (a restart: another transport session, which the gRPC transport accepts only for a
serving session's passive parties in a full mesh, ``GrpcTransport(replaceable=...)``) is set up
again alone — HELLO with the session's salt, its new INDEX, WIDTHS — then sent a sync marker, which
it echoes once its side is built; it is asked again from then on. A method that sums one vector over
every row evaluated (EASTER, Agg-VFL: ``PartySide.sums_rows``) evaluates each batch over every ID
asked, in a random order (``slots`` in the rows message), sets its secure aggregation up again
(``regroup``) whenever the parties in scoring change, and tells the members of a round cut short by a
lost party to stop waiting (:data:`TAG_ABANDON`); so does a SecureBoost model's (its questions come one
tree level at a time), and either scores such a batch again with the active party alone. Limits:
hetero-lr and SecureBoost leave a party out only at the lookup or when it is lost (their evaluation
has no deadline); with a helper party (hetero-lr's arbiter) a party lost inside an evaluation fails
that batch; in a star federation a passive party that stops still stops the service.

**What each party learns** — as PSI on the request: a passive party learns which of **its own**
customers are scored (the positions it must score) and how many IDs were asked, never an ID it
does not hold; the active party learns which requested IDs every party holds. As with any scoring
service (FATE-Serving's guest), the active party can ask about any ID it likes: membership of a
chosen ID in a peer's table is what it can learn, one request at a time, and the peers see every
request's size. The index reveals to the active party only the number of each peer's rows. A
passive party that misses a deadline learns nothing new: for that batch it is told no rows to score
(it knew it was late), and a sync marker carries nothing; the others see the same messages as in
any batch. A restarted passive party's new index is under a fresh key and a new random order.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from securevfl.data.labels import CLASSIFICATION, REGRESSION
from securevfl.deploy.federation_file import Federation
from securevfl.deploy.links import data_party_order
from securevfl.deploy.plan import MAX_CLASSES, MAX_FEATURES, PartyShape, local_scenario
from securevfl.deploy.progress import log_event
from securevfl.deploy.scoring import check_part
from securevfl.deploy.serving_http import (
    MAX_REQUEST_ROWS,
    RequestError,
    ScoringJob,
)
from securevfl.deploy.serving_limits import MembershipBudget, ServeSettings
from securevfl.errors import (
    ConfigError,
    DataError,
    ProtocolError,
    SecureVFLError,
    UnexpectedTagError,
)
from securevfl.federation.runtime import PartyContext

TAG_HELLO = "deploy.serve.hello"
TAG_INDEX = "deploy.serve.index"
TAG_REQUEST = "deploy.serve.request"
TAG_BLINDED = "deploy.serve.blinded"
TAG_ROWS = "deploy.serve.rows"
TAG_WIDTHS = "deploy.serve.widths"
#: The active party cut a batch's secure-aggregation round short (a party of it was lost): wherever this
#: party waits in that round, it stops waiting, and its side is set up again before it takes part again.
TAG_ABANDON = "deploy.serve.abandon"

#: The most IDs one batch of requests may look up (a batch never exceeds a request, or the active party's
#: max_batch_rows setting plus one request).
MAX_BATCH_IDS = 1_000_000 + MAX_REQUEST_ROWS
#: The most rows a passive party's ID index may hold (one 32-byte point each).
MAX_INDEX_ROWS = 50_000_000
POINT = 32
DEFAULT_LISTEN = "127.0.0.1:8470"
#: A serving party idle between requests waits in this stage: not reported as a wait.
IDLE_STAGE = "serve: waiting for a request"

_log = logging.getLogger(__name__)


@dataclass
class ServingSummary:
    """What one party's serving session did."""

    party: str
    requests: int = 0
    rows_scored: int = 0
    address: str | None = None  # the active party's endpoint
    wall_s: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)


def _hash_blind(items: Sequence[str], salt: bytes, key: Any, workers: int | None = 1) -> np.ndarray:
    """``H(x)^key`` of every item (``workers=None``: every CPU for a large batch, as PSI)."""
    from psi.curve import CurveEngine, HashBlindJob

    with CurveEngine(workers) as engine:
        points: np.ndarray = engine.run([HashBlindJob(list(items), salt, key)])[0][0]
    return points


def _blind(points: np.ndarray, key: Any, workers: int | None = 1) -> np.ndarray:
    """Received points (validated) raised to ``key``."""
    from psi.curve import BlindJob, CurveEngine

    with CurveEngine(workers) as engine:
        blinded: np.ndarray = engine.run([BlindJob(points, key)])[0][0]
    return blinded


def _points(message: Any, sender: str, most: int, what: str) -> np.ndarray:
    """``message`` as an ``(n, 32)`` array of points, n <= ``most``, else a ProtocolError naming ``sender``."""
    if not isinstance(message, (bytes, bytearray)) or len(message) % POINT or len(message) // POINT > most:
        size = len(message) if isinstance(message, (bytes, bytearray)) else type(message).__name__
        raise ProtocolError(f"{sender} sent a malformed {what} ({size} bytes; at most {most} points of {POINT})")
    return np.frombuffer(bytes(message), np.uint8).reshape(-1, POINT)


# ---------------------------------------------------------------------------------- a party's model


@dataclass
class ServingModel:
    """One party's side of the saved model, built for scoring, and its table encoded by its saved preprocessing."""

    side: Any
    saved: Any
    ids: list[str]  # its table's IDs, prepared as PSI prepares them
    X: np.ndarray  # its table encoded, row for row
    encoder: Any
    part: Any
    warnings: list[list[str]] = field(default_factory=list)  # the active party's: what each row's encoding assumed


def load_serving_model(federation: Federation, name: str, data: str | Path, model_dir: str | Path,
                        standalone: bool) -> tuple[ServingModel, Any, Any, Any]:
    """Read and check this party's part and table (before connecting); returns the model, method, config, table."""
    from psi import prepare_ids
    from securevfl.methods import create_method
    from securevfl.model.saving import saved_encoder, saved_side, train_config_from
    from securevfl.model.scoring import read_new_rows
    from securevfl.model.store import read_part

    part = read_part(model_dir, name)
    manifest = part.manifest
    check_part(federation, name, manifest, standalone=standalone)
    encoder, saved = saved_encoder(part), saved_side(part)
    config = train_config_from(manifest.extra.get("train", {}), str(part.path))
    method = create_method(manifest.method, config)
    job = federation.job
    table, encoded, _labels = read_new_rows(part, encoder, data, id_column=job.id_column,
                                            label_column=job.label_column, classes=tuple(manifest.classes),
                                            task=manifest.task, is_active=name == federation.active)
    prepared = prepare_ids(list(table.ids), job.psi.normalize, source=f"party {name!r}")
    if len(prepared.items) != table.n_rows:
        raise DataError(f"{data}: duplicate or blank IDs")
    X = encoded.X if encoded is not None else np.zeros((table.n_rows, 0), np.float32)
    notes: list[list[str]] = []
    if name == federation.active and encoder is not None and isinstance(table.features, pd.DataFrame):
        notes = encoder.row_warnings(table.features)
    model = ServingModel(side=None, saved=saved, ids=list(prepared.items), X=X, encoder=encoder, part=part,
                          warnings=notes or [[] for _ in prepared.items])
    return model, method, config, table


def only_training_ids(model: ServingModel, name: str) -> ServingModel:
    """The passive party's model serving only the customers it trained on with the active party."""
    from securevfl.model.saving import id_digest, saved_training_ids

    trained = saved_training_ids(model.part)
    if trained is None:
        raise ConfigError(f"{name}'s part was saved without its training IDs: save the model again to serve "
                          "with --serve-ids training")
    known = {bytes(row) for row in trained}
    keep = [i for i, item in enumerate(model.ids) if id_digest(item) in known]
    log_event(_log, name, "serve", "index", f"serving {len(keep)} of its {len(model.ids)} customers: those it "
              "trained on with the active party (--serve-ids training)", rows=len(keep))
    return dataclasses.replace(model, ids=[model.ids[i] for i in keep], X=model.X[keep],
                               warnings=[model.warnings[i] for i in keep])


def serving_scenario(federation: Federation, name: str, table: Any, classes: tuple[str, ...], task: str,
                      widths: Mapping[str, int], n_classes: int) -> Any:
    """A scenario of no rows with every party's encoded width: what building a scoring side needs.

    Rows reach the side with each request (:meth:`PartySide.evaluate`), never through the scenario.
    """
    empty = np.zeros(0, np.int64)
    if table is not None:
        table = dataclasses.replace(table, ids=table.ids[:0], features=table.features[:0],
                                    labels=None if table.labels is None else table.labels[:0])
    shapes = {p: PartyShape(0, 0, int(widths.get(p, 0)))
              for p in data_party_order(federation)}  # a passive party builds its side knowing no peer's width
    plan = {"train": empty, "test": empty, "task": task, "n_classes": n_classes, "shapes": shapes}
    return local_scenario(name, federation, table, classes, empty, plan, cost={})


# ---------------------------------------------------------------------------------- the roles


def _widths(message: Any, sender: str, parties: Sequence[str]) -> dict[str, int]:
    """Every party's encoded width as ``sender`` announced them, checked before anything is sized by them."""
    if not isinstance(message, dict) or sorted(message) != sorted(parties):
        named = sorted(message) if isinstance(message, dict) else "?"
        raise ProtocolError(f"{sender} sent the encoded widths of {named}; expected {sorted(parties)}")
    for party, width in message.items():
        if not isinstance(width, int) or isinstance(width, bool) or not 0 <= width <= MAX_FEATURES:
            raise ProtocolError(f"{sender} announced an encoded width of {width!r} for {party} (0..{MAX_FEATURES})")
    return dict(message)


def prepare_job(model: ServingModel, rows: Sequence[Mapping[str, Any]], id_column: str, normalize: Any,
                index: Mapping[str, int]) -> ScoringJob:
    """A request's rows as a :class:`ScoringJob`: prepared IDs, the active party's encoded rows, what it lacks.

    A row with any of the active party's trained columns must carry all of them (its own feature
    values); a row with none takes the active party's table's row. Every refusal is a RequestError
    whose text names no ID and no value (it is logged).
    """
    from psi.ids import id_to_str, normalize_id

    encoder = model.encoder
    columns = list(encoder.columns) if encoder is not None else []
    ids: list[str] = []
    for row in rows:
        raw = row.get(id_column)
        value = id_to_str(raw) if isinstance(raw, (str, int)) and not isinstance(raw, bool) else None
        if value is None or not value.strip():
            raise RequestError(f"every row needs a non-blank {id_column!r} (text or integer)")
        ids.append(normalize_id(value, normalize) if normalize else value)
    if len(set(ids)) != len(ids):
        raise RequestError(f"a request names each {id_column} once")
    trained = set(columns)
    given = [bool(trained) and not trained.isdisjoint(row) for row in rows]
    X = np.zeros((len(rows), model.X.shape[1]), np.float32)
    own = np.ones(len(rows), dtype=bool)
    notes: list[list[str]] = [[] for _ in rows]
    for i, carried in enumerate(given):
        if not carried:
            position = index.get(ids[i])
            if position is None:
                own[i] = False
            else:
                X[i] = model.X[position]
                notes[i] = list(model.warnings[position])
    carried_rows = [i for i, g in enumerate(given) if g]
    if carried_rows:
        values = _given_values([rows[i] for i in carried_rows], encoder)
        X[carried_rows] = _encode_given(values, encoder)
        for i, row_notes in zip(carried_rows, encoder.row_warnings(values)):
            notes[i] = row_notes
    return ScoringJob(ids, X, own, notes)


#: The largest magnitude of a numeric feature value (float32, the model's input type).
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _given_values(rows: Sequence[Mapping[str, Any]], encoder: Any) -> pd.DataFrame:
    """The active party's own feature values in request rows, checked, as a frame of its trained columns."""
    from securevfl.data.columns import NUMERIC

    values: dict[str, list[Any]] = {}
    for column in encoder.columns:
        kind = encoder.kinds[column]
        cells = []
        for row in rows:
            if column not in row:
                raise RequestError(f"a row with the active party's feature values lacks column {column!r}")
            cell = row[column]
            if kind == NUMERIC and cell is not None:
                if isinstance(cell, bool) or not isinstance(cell, (int, float)):
                    raise RequestError(f"column {column!r} is numeric: a {type(cell).__name__} is not a number "
                                       "(or null)")
                if not abs(cell) <= _FLOAT32_MAX:
                    raise RequestError(f"column {column!r}: a number beyond the model's range (|x| <= 3.4e38)")
            cells.append(np.nan if cell is None else cell)
        values[column] = cells
    return pd.DataFrame(values)


def _encode_given(values: pd.DataFrame, encoder: Any) -> np.ndarray:
    """The active party's own feature values encoded by its saved preprocessing."""
    try:
        encoded: np.ndarray = encoder.transform(values)
    except (SecureVFLError, ValueError, TypeError, OverflowError) as exc:
        raise RequestError(f"the active party's feature values cannot be encoded ({type(exc).__name__})") from None
    if not np.isfinite(encoded).all():
        raise RequestError("the active party's feature values encode beyond the model's range")
    return encoded


SideBuilder = Callable[[Mapping[str, int], int, str], Any]  # (every party's encoded width, classes, task) -> side


def passive_role(model: ServingModel, fingerprint: str, build_side: SideBuilder,
                  settings: ServeSettings) -> Callable[[PartyContext], ServingSummary]:
    """Announce the part and the blinded ID index, then score what the active party asks until it stops.

    Every lookup is first charged to this party's own membership budget (``settings``): a lookup
    beyond it is refused (the active party is told why and when to retry), and nothing is looked up.
    """
    from psi.curve import BlindingKey
    from securevfl.methods.engine.loop import VALIDATE

    def role(ctx: PartyContext) -> ServingSummary:
        summary = ServingSummary(ctx.name)
        budget = MembershipBudget(settings.ids_per_minute, settings.ids_per_session)
        ctx.stage = "serve: setup"
        hello = ctx.recv(ctx.active, TAG_HELLO)
        if not isinstance(hello, dict) or set(hello) != {"salt"} or not isinstance(hello["salt"], bytes) \
                or len(hello["salt"]) != 32:
            raise ProtocolError(f"malformed serving hello from {ctx.active}")
        key = BlindingKey(secrets.token_bytes(32))
        order = fresh_order(len(model.ids))
        log_event(_log, ctx.name, "serve", "index", f"serving index: hashing and blinding {len(order)} IDs",
                  rows=len(order))
        with ctx.meter.crypto("serve.index"):
            index = _hash_blind([model.ids[i] for i in order], hello["salt"], key, workers=None)
        ctx.send(ctx.active, TAG_INDEX, {"model": fingerprint, "width": int(model.X.shape[1]),
                                         "index": index.tobytes()})
        _build_announced(ctx, model, build_side)
        _warm_up(model, index, key)
        log_event(_log, ctx.name, "serve", "budget", f"membership budget: {settings.ids_per_minute or 'no limit'} "
                  f"IDs per minute, {settings.ids_per_session or 'no limit'} per session",
                  ids_per_minute=settings.ids_per_minute, ids_per_session=settings.ids_per_session)
        started = time.perf_counter()
        while (message := _next_request(ctx)) is not None:
            ctx.stage = "serve: request"
            asked, sizes, number = _lookup_request(message, ctx.active)
            summary.requests += 1
            admitted, refused = _admit(budget, sizes)
            answer: dict[str, Any] = {"refused": [i for i, why in enumerate(refused) if why], "reason": None,
                                      "retry_after_s": None, "batch": number}
            if answer["refused"]:
                reason, retry = next(why for why in refused if why)
                answer.update(reason=reason, retry_after_s=retry)
                log_event(_log, ctx.name, "serve", "refused", f"lookup {summary.requests}: {len(answer['refused'])} "
                          f"of {len(sizes)} request(s) refused ({int(len(asked) - admitted.sum())} of {len(asked)} "
                          f"IDs): {reason}", level=logging.WARNING, request=summary.requests, asked=len(asked))
            with ctx.meter.crypto("serve.blind"):
                answer["points"] = _blind(asked[admitted], key).tobytes() if admitted.any() else b""
            ctx.send(ctx.active, TAG_BLINDED, answer)
            rows = _rows_message(ctx.recv(ctx.active, TAG_ROWS), ctx.active, int(admitted.sum()), len(order),
                                 ctx.name, number, len(asked))
            positions = rows.positions
            try:
                if rows.regroup:  # the passive parties in scoring changed: a new secure-aggregation session
                    log_event(_log, ctx.name, "serve", "regroup", "secure aggregation set up again (the parties "
                              "in scoring changed)")
                    model.side.regroup(ctx)
                if rows.evaluate:  # its part in the batch, even of none of its rows (a model trained on every row)
                    if rows.held is None:
                        model.side.evaluate(ctx, model.X[order[positions]], VALIDATE)
                    else:  # its rows at their places in a round over every ID of the batch
                        model.side.evaluate_held(ctx, model.X[order[positions]], rows.held, VALIDATE)
                    summary.rows_scored += len(positions)
            except UnexpectedTagError as exc:
                if exc.received != TAG_ABANDON:
                    raise
                log_event(_log, ctx.name, "serve", "abandoned", f"request {summary.requests}: the active party cut "
                          "its secure-aggregation round short (a party of it was lost)", level=logging.WARNING)
                continue
            log_event(_log, ctx.name, "serve", "request", f"request {summary.requests}: {len(positions)} of "
                      f"{len(asked)} asked rows scored here", level=logging.DEBUG, request=summary.requests,
                      rows=len(positions), asked=len(asked))
        summary.wall_s = time.perf_counter() - started
        return summary

    return role


def fresh_order(n: int) -> np.ndarray:
    """A random order of ``n`` items, seeded from the operating system's entropy (a serving index, a round)."""
    order: np.ndarray = np.random.default_rng(np.frombuffer(os.urandom(16), np.uint32).tolist()).permutation(n)
    return order


def _warm_up(model: ServingModel, index: np.ndarray, key: Any) -> None:
    """The first lookup's and evaluation's one-off costs paid now, so that the first request meets its deadline."""
    if len(index):
        _blind(index[:1], key)
        if len(model.X) and model.side.takes_part:
            model.side.own_outputs(model.X[:1])


@dataclass(frozen=True)
class RowsToScore:
    """A batch's rows message, checked: what this passive party scores and how (:func:`_rows_message`)."""

    #: Rows of this party's index, in the order they are evaluated.
    positions: np.ndarray
    #: Whether this party takes part in the batch's evaluation.
    evaluate: bool
    #: A method that sums one vector over every row evaluated: this party's places among the batch's IDs.
    held: np.ndarray | None = None
    #: Set up the method's secure aggregation again first (the passive parties in scoring changed).
    regroup: bool = False


def _rows_message(message: Any, sender: str, looked_up: int, index_rows: int, me: str,
                  number: int, asked: int) -> RowsToScore:
    """What this party scores in batch ``number``: rows of its index, whether, and where in a round.

    The places are for a method that sums over every row evaluated: a round over the batch's ``asked`` IDs.
    With a model trained on every row the batch is always evaluated (of none of this party's rows,
    possibly), so that a peer learns nothing of how many rows the active party scores without it;
    unless this party was left out of the batch (its lookup answer came too late). A round is over
    exactly the IDs asked (the number this party already sees), the places increasing and distinct.
    """
    keys = {"positions", "evaluate", "batch"}
    if not isinstance(message, dict) or set(message) not in (keys, keys | {"slots", "round", "regroup"}):
        raise ProtocolError(f"malformed rows message from {sender}")
    if message["batch"] != number:
        raise ProtocolError(f"{sender} sent the rows of batch {message['batch']!r} in batch {number}")
    positions, evaluate = message["positions"], message["evaluate"]
    if not isinstance(positions, np.ndarray) or positions.dtype != np.int64 or positions.ndim != 1 \
            or len(positions) > looked_up or (len(positions) and (
                positions.min() < 0 or positions.max() >= index_rows)):
        raise ProtocolError(f"{sender} asked for rows outside {me}'s index")
    if not isinstance(evaluate, bool) or (len(positions) and not evaluate):
        raise ProtocolError(f"malformed rows message from {sender}")
    if "slots" not in message:
        return RowsToScore(positions, evaluate)
    slots = message["slots"]
    if message["round"] != asked or not isinstance(slots, np.ndarray) or slots.dtype != np.int64 \
            or slots.shape != positions.shape or not evaluate or not isinstance(message["regroup"], bool) or (
                len(slots) and (slots[0] < 0 or slots[-1] >= asked or np.any(np.diff(slots) <= 0))):
        raise ProtocolError(f"{sender} sent a malformed round of {asked} asked IDs")
    held = np.zeros(asked, dtype=bool)
    held[slots] = True
    return RowsToScore(positions, evaluate, held, message["regroup"])


def _lookup_request(message: Any, sender: str) -> tuple[np.ndarray, list[int], int]:
    """A batch of lookups as sent: its points, the size of each request in it, and the batch's number (checked)."""
    if not isinstance(message, dict) or set(message) != {"points", "sizes", "batch"} \
            or not isinstance(message["sizes"], list) or not isinstance(message["batch"], int) \
            or isinstance(message["batch"], bool):
        raise ProtocolError(f"malformed lookup request from {sender}")
    asked = _points(message["points"], sender, MAX_BATCH_IDS, "request")
    sizes = message["sizes"]
    if len(sizes) > len(asked) or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in sizes) \
            or sum(sizes) != len(asked):
        raise ProtocolError(f"{sender} sent request sizes that do not add up to its {len(asked)} IDs")
    return asked, sizes, message["batch"]


def _admit(budget: MembershipBudget, sizes: list[int]) -> tuple[np.ndarray, list[tuple[str, float | None] | None]]:
    """Each request of a batch charged to the budget in turn (a small one may pass where a large one did not).

    Returns the mask of admitted IDs and, per request, None (admitted) or (reason, retry-after seconds).
    """
    admitted = np.zeros(sum(sizes), dtype=bool)
    verdicts: list[tuple[str, float | None] | None] = []
    start = 0
    for n in sizes:
        why = budget.admit(n)
        if why is None:
            admitted[start:start + n] = True
        verdicts.append(why)
        start += n
    return admitted, verdicts


def _next_request(ctx: PartyContext) -> Any:
    """The active party's next request to this party (idle ticks skipped); None once it stops the service.

    A sync marker (``{"sync": n}``, sent after a batch this party answered too late) is echoed at once
    (``{"synced": n}``): the active party drops what this party sent before the echo.
    """
    while True:
        ctx.stage = IDLE_STAGE
        try:
            message = ctx.recv(ctx.active, TAG_REQUEST)
        except UnexpectedTagError as exc:  # a round this party had finished its part of was cut short: nothing to do
            if exc.received != TAG_ABANDON:
                raise
            continue
        if message == "stop":
            return None
        if isinstance(message, dict) and set(message) == {"sync"}:
            if not isinstance(message["sync"], int) or isinstance(message["sync"], bool):
                raise ProtocolError(f"malformed sync marker from {ctx.active}")
            ctx.send(ctx.active, TAG_BLINDED, {"synced": message["sync"]})
        elif message != "idle":
            return message


def _model_inputs(message: Any, sender: str, parties: Sequence[str]) -> tuple[dict[str, int], int, str]:
    """(every party's encoded width, class count, task) as the active party announced them, checked."""
    if not isinstance(message, dict) or set(message) != {"widths", "n_classes", "task"} or not isinstance(
            message["n_classes"], int) or not 1 <= message["n_classes"] <= MAX_CLASSES or message["task"] not in (
            CLASSIFICATION, REGRESSION):
        raise ProtocolError(f"malformed model inputs from {sender}")
    return _widths(message["widths"], sender, parties), message["n_classes"], message["task"]


def helper_model(federation: Federation, name: str, data: str | Path | None) -> tuple[ServingModel, Any, Any, None]:
    """A helper's method (from the federation's job, which every party agreed on): no part, no rows."""
    from securevfl.deploy.party import method_and_config
    from securevfl.methods.engine.loop import SavedSide

    if data is not None:
        raise ConfigError(f"{name} has data = false in the federation file: it takes no --data")
    method, config = method_and_config(federation, "cpu")
    empty = ServingModel(side=None, saved=SavedSide({}), ids=[], X=np.zeros((0, 0), np.float32), encoder=None,
                          part=None)
    return empty, method, config.train, None


def _build_announced(ctx: PartyContext, model: ServingModel, build_side: SideBuilder) -> None:
    """Build this party's side for the model inputs the active party announces, loaded with its saved part."""
    from securevfl.methods.engine.loop import prepare_scoring_side

    model.side = build_side(*_model_inputs(ctx.recv(ctx.active, TAG_WIDTHS), ctx.active, (ctx.active, *ctx.passives)))
    prepare_scoring_side(ctx, model.side, model.saved)


def helper_role(model: ServingModel, build_side: SideBuilder) -> Callable[[PartyContext], ServingSummary]:
    """A helper (hetero-lr's arbiter): its part in the evaluation of each request's rows, told only their count."""
    from securevfl.methods.engine.loop import VALIDATE

    def role(ctx: PartyContext) -> ServingSummary:
        summary = ServingSummary(ctx.name)
        ctx.stage = "serve: setup"
        _build_announced(ctx, model, build_side)
        started = time.perf_counter()
        while (message := _next_request(ctx)) is not None:
            if isinstance(message, dict) and set(message) == {"rejoined"}:  # a restarted passive party's set-up
                if message["rejoined"] not in ctx.passives:
                    raise ProtocolError(f"{ctx.active} named an unknown party as rejoined: {message['rejoined']!r}")
                model.side.rejoined(ctx, message["rejoined"])
                continue
            if not isinstance(message, int) or isinstance(message, bool) or not 0 <= message <= MAX_REQUEST_ROWS:
                raise ProtocolError(f"{ctx.active} sent a malformed request to helper {ctx.name}")
            summary.requests += 1
            if message:
                ctx.stage = "serve: request"
                model.side.evaluate(ctx, np.zeros((message, 0), np.float32), VALIDATE)
                summary.rows_scored += message
            log_event(_log, ctx.name, "serve", "request", f"request {summary.requests}: {message} rows",
                      level=logging.DEBUG, request=summary.requests, rows=message)
        summary.wall_s = time.perf_counter() - started
        return summary

    return role


def listen_address(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (an IPv6 host in brackets) as host and port."""
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--listen must be HOST:PORT, got {listen!r}")
    return host.strip("[]"), int(port)

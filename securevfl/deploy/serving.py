"""Online scoring: the parties of a saved model stay up, and the active party answers requests (``party --serve``).

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
(``_Session.every_row``) scores the batch's rows without it (its ``present`` all False, so its
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
it echoes once its side is built; it is asked again from then on. Limits: a method whose evaluation
is not one message per passive party (EASTER, hetero-lr, SecureBoost) leaves a party out only at
the lookup (its evaluation has no deadline) and cannot take a restarted party back; in a star
federation a passive party that stops still stops the service.

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
import queue
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from securevfl.data.labels import CLASSIFICATION, REGRESSION
from securevfl.data.scenario import pattern_names
from securevfl.deploy.federation_file import Federation
from securevfl.deploy.links import data_party_order
from securevfl.deploy.plan import MAX_CLASSES, MAX_FEATURES, PartyShape, local_scenario
from securevfl.deploy.progress import log_event
from securevfl.deploy.scoring import check_part
from securevfl.deploy.serving_http import (
    MAX_REQUEST_ROWS,
    RequestError,
    RequestQueue,
    ScoringJob,
    ServeMetrics,
)
from securevfl.deploy.serving_limits import BudgetRefused, MembershipBudget, ServeSettings
from securevfl.errors import (
    ConfigError,
    DataError,
    Interrupted,
    ModelError,
    PeerFinishedError,
    PeerTimeoutError,
    ProtocolError,
    SecureVFLError,
)
from securevfl.federation.runtime import PartyContext

TAG_HELLO = "deploy.serve.hello"
TAG_INDEX = "deploy.serve.index"
TAG_REQUEST = "deploy.serve.request"
TAG_BLINDED = "deploy.serve.blinded"
TAG_ROWS = "deploy.serve.rows"
TAG_WIDTHS = "deploy.serve.widths"

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
        order = np.random.default_rng(np.frombuffer(os.urandom(16), np.uint32).tolist()).permutation(len(model.ids))
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
            positions, evaluate = _rows_message(ctx.recv(ctx.active, TAG_ROWS), ctx.active, int(admitted.sum()),
                                                len(order), ctx.name, number)
            if evaluate:  # its part in the batch, even of none of its rows (a model trained on every row)
                model.side.evaluate(ctx, model.X[order[positions]], VALIDATE)
                summary.rows_scored += len(positions)
            log_event(_log, ctx.name, "serve", "request", f"request {summary.requests}: {len(positions)} of "
                      f"{len(asked)} asked rows scored here", level=logging.DEBUG, request=summary.requests,
                      rows=len(positions), asked=len(asked))
        summary.wall_s = time.perf_counter() - started
        return summary

    return role


def _warm_up(model: ServingModel, index: np.ndarray, key: Any) -> None:
    """The first lookup's and evaluation's one-off costs paid now, so that the first request meets its deadline."""
    if len(index):
        _blind(index[:1], key)
        if len(model.X) and model.side.takes_part:
            model.side.own_outputs(model.X[:1])


def _rows_message(message: Any, sender: str, looked_up: int, index_rows: int, me: str,
                  number: int) -> tuple[np.ndarray, bool]:
    """The rows of this party's index the active party scores in batch ``number``, and whether it is evaluated here.

    With a model trained on every row the batch is always evaluated (of none of this party's rows,
    possibly), so that a peer learns nothing of how many rows the active party scores without it;
    unless this party was left out of the batch (its lookup answer came too late).
    """
    if not isinstance(message, dict) or set(message) != {"positions", "evaluate", "batch"}:
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
    return positions, evaluate


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
        message = ctx.recv(ctx.active, TAG_REQUEST)
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


@dataclass
class _PeerIndex:
    """A passive party's index at the active party: ``H(x)^{ab}`` -> its position in the party's index."""

    positions: dict[bytes, int]


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
    #: The method's evaluation can leave a passive party out (one message from each, collected here with
    #: the deadline), and a restarted passive party can be set up again alone.
    leave_out: bool = False
    fingerprint: str = ""
    inputs: dict[str, Any] = field(default_factory=dict)  # the WIDTHS message every party built its side for
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
        every_row = bool(side.method.partial_rows and side.method.serves_partial_rows
                         and not side.config.require_all_parties)
        session = _Session(model, peers, helpers, key, salt, classes, task, federation.job.id_column, metrics,
                           ctx.name, every_row, settings.party_timeout_s, bool(side.leave_out), fingerprint, inputs)
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
                "" if session.leave_out else f" (a {session.model.side.method.name} model cannot take it back: "
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
            elif peer.state == JOINING and session.leave_out:
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
    if session.peers:
        positions, refused, sent = _lookups(ctx, session, batch, ids, number, out)
        if session.every_row:  # the rows the active party holds, of the requests no peer refused
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
    evaluate = bool(session.every_row or len(rows))
    told: list[str] = []
    for p in sent:  # positions in the peer's index: only of IDs it looked up and holds; none for a party left out
        answered = p in positions
        mine = positions[p][rows] if answered else np.zeros(0, np.int64)
        try:
            ctx.send(p, TAG_ROWS, {"positions": mine[mine >= 0].astype(np.int64), "batch": number,
                                   "evaluate": evaluate and answered})
        except SecureVFLError as exc:
            _down_or_raise(ctx, session, p, exc)
            out[p] = DOWN
            continue
        if answered and evaluate:
            told.append(p)
        elif session.peers[p].state == LATE:  # its late lookup answer, then the marker's echo
            _resync(ctx, session, p, f"no lookup answer within {session.timeout_s:g} s")
    silent = {p for p in session.peers if p not in told}
    if evaluate and session.leave_out:
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
        side.present = present if session.every_row else None
        side.silent = frozenset(silent) if session.leave_out else frozenset()
        try:
            scores = side.evaluate(ctx, X[rows], VALIDATE).scores
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


def listen_address(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (an IPv6 host in brackets) as host and port."""
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--listen must be HOST:PORT, got {listen!r}")
    return host.strip("[]"), int(port)

"""Online scoring: the parties of a saved model stay up, and the active party answers requests (``party --serve``).

Every party runs ``securevfl party --serve`` with its own part (``--model-dir``) and its current
table (``--data``): the customers it can be asked about. The active party answers ``POST /score``
on a local HTTP endpoint (``--listen``, loopback by default) with a JSON body
``{"rows": [{"<id column>": "c0042"}, ...]}``; a row may also carry the active party's own
feature values (every column its model was trained on), which then replace its table's. The
answer is ``{"predictions": [{"<id column>": ..., "prediction": ..., "proba_<class>": ...}],
"not_scored": [ids some party does not hold]}``; ``GET /health`` says whether the parties are up.

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

**What each party learns** — as PSI on the request: a passive party learns which of **its own**
customers are scored (the positions it must score) and how many IDs were asked, never an ID it
does not hold; the active party learns which requested IDs every party holds. As with any scoring
service (FATE-Serving's guest), the active party can ask about any ID it likes: membership of a
chosen ID in a peer's table is what it can learn, one request at a time, and the peers see every
request's size. The index reveals to the active party only the number of each peer's rows.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import queue
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from contextlib import nullcontext
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from securevfl.data.labels import CLASSIFICATION, REGRESSION
from securevfl.deploy.federation import Federation
from securevfl.deploy.links import data_party_order, helper_parties, party_links
from securevfl.deploy.party import log_done, log_start
from securevfl.deploy.plan import MAX_CLASSES, MAX_FEATURES, PartyShape, local_scenario
from securevfl.deploy.progress import PartyWatch, log_event
from securevfl.deploy.scoring import _check_part
from securevfl.deploy.threads import ThreadChoice, use_threads
from securevfl.errors import ConfigError, DataError, Interrupted, ModelError, ProtocolError, SecureVFLError
from securevfl.federation.runtime import PartyContext, run_party
from securevfl.federation.transport import InProcessTransport

TAG_HELLO = "deploy.serve.hello"
TAG_INDEX = "deploy.serve.index"
TAG_REQUEST = "deploy.serve.request"
TAG_BLINDED = "deploy.serve.blinded"
TAG_ROWS = "deploy.serve.rows"
TAG_WIDTHS = "deploy.serve.widths"

#: The most rows one request may ask for (each costs two X25519 multiplications and a model row).
MAX_REQUEST_ROWS = 10_000
#: The largest request body the endpoint reads.
MAX_BODY_BYTES = 16 * 1024 * 1024
#: The most rows a passive party's ID index may hold (one 32-byte point each).
MAX_INDEX_ROWS = 50_000_000
POINT = 32
DEFAULT_LISTEN = "127.0.0.1:8470"
#: A serving party idle between requests waits in this stage: not reported as a wait.
IDLE_STAGE = "serve: waiting for a request"

_log = logging.getLogger(__name__)


class RequestError(SecureVFLError):
    """A scoring request the endpoint refuses (HTTP 400); the session goes on."""


@dataclass
class ServingSummary:
    """What one party's serving session did."""

    party: str
    requests: int = 0
    rows_scored: int = 0
    address: str | None = None  # the active party's endpoint
    wall_s: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)


@dataclass
class _Job:
    rows: list[dict[str, Any]]
    answer: Future[dict[str, Any]] = field(default_factory=Future)


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
class _ServingModel:
    """One party's side of the saved model, built for scoring, and its table encoded by its saved preprocessing."""

    side: Any
    saved: Any
    ids: list[str]  # its table's IDs, prepared as PSI prepares them
    X: np.ndarray  # its table encoded, row for row
    encoder: Any
    part: Any


def _load_serving_model(federation: Federation, name: str, data: str | Path, model_dir: str | Path,
                        standalone: bool) -> tuple[_ServingModel, Any, Any, Any]:
    """Read and check this party's part and table (before connecting); returns the model, method, config, table."""
    from psi import prepare_ids
    from securevfl.methods import create_method
    from securevfl.model.saving import saved_encoder, saved_side, train_config_from
    from securevfl.model.scoring import read_new_rows
    from securevfl.model.store import read_part

    part = read_part(model_dir, name)
    manifest = part.manifest
    _check_part(federation, name, manifest, standalone=standalone)
    encoder, saved = saved_encoder(part), saved_side(part)
    config = train_config_from(manifest.extra.get("train", {}), str(part.path))
    method = create_method(manifest.method, config)
    job = federation.job
    table, encoded, _labels = read_new_rows(part, encoder, data, id_column=job.id_column,
                                            label_column=job.label_column, classes=tuple(manifest.classes),
                                            task=manifest.task, is_active=name == federation.active)
    prepared = prepare_ids(list(table.ids), job.normalize, source=f"party {name!r}")
    if len(prepared.items) != table.n_rows:
        raise DataError(f"{data}: duplicate or blank IDs")
    X = encoded.X if encoded is not None else np.zeros((table.n_rows, 0), np.float32)
    model = _ServingModel(side=None, saved=saved, ids=list(prepared.items), X=X, encoder=encoder, part=part)
    return model, method, config, table


def _serving_scenario(federation: Federation, name: str, table: Any, classes: tuple[str, ...], task: str,
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


def _active_rows(model: _ServingModel, rows: Sequence[Mapping[str, Any]], id_column: str, normalize: Any,
                 index: Mapping[str, int]) -> tuple[list[str], np.ndarray, list[str]]:
    """The request's prepared IDs, the active party's encoded rows for them, and the IDs it cannot score.

    A row with any of the active party's trained columns must carry all of them (its own feature
    values); a row with none takes the active party's table's row.
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
    given = [bool(set(columns) & set(row)) for row in rows]
    X = np.zeros((len(rows), model.X.shape[1]), np.float32)
    unknown: list[str] = []
    from_table = [i for i, g in enumerate(given) if not g]
    for i in from_table:
        position = index.get(ids[i])
        if position is None:
            unknown.append(ids[i])
        else:
            X[i] = model.X[position]
    carried = [i for i, g in enumerate(given) if g]
    if carried:
        X[carried] = _encode_given([rows[i] for i in carried], encoder)
    return ids, X, unknown


def _encode_given(rows: Sequence[Mapping[str, Any]], encoder: Any) -> np.ndarray:
    """The active party's own feature values in request rows, encoded by its saved preprocessing."""
    from securevfl.data.columns import NUMERIC

    values: dict[str, list[Any]] = {}
    for column in encoder.columns:
        kind = encoder.kinds[column]
        cells = []
        for row in rows:
            if column not in row:
                raise RequestError(f"a row with the active party's feature values lacks column {column!r}")
            cell = row[column]
            if kind == NUMERIC and (isinstance(cell, bool) or not isinstance(cell, (int, float, type(None)))):
                raise RequestError(f"column {column!r} is numeric: {cell!r} is not a number (or null)")
            if kind != NUMERIC and not isinstance(cell, (str, int, float, type(None))):
                raise RequestError(f"column {column!r}: {cell!r} is not a value")
            cells.append(np.nan if cell is None else cell)
        values[column] = cells
    try:
        encoded: np.ndarray = encoder.transform(pd.DataFrame(values))
        return encoded
    except (SecureVFLError, ValueError, TypeError) as exc:
        raise RequestError(f"the active party's feature values cannot be encoded: {exc}") from None


SideBuilder = Callable[[Mapping[str, int], int, str], Any]  # (every party's encoded width, classes, task) -> side


def _passive_role(model: _ServingModel, fingerprint: str,
                  build_side: SideBuilder) -> Callable[[PartyContext], ServingSummary]:
    """Announce the part and the blinded ID index, then score what the active party asks until it stops."""
    from psi.curve import BlindingKey
    from securevfl.methods.engine.loop import VALIDATE

    def role(ctx: PartyContext) -> ServingSummary:
        summary = ServingSummary(ctx.name)
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
        started = time.perf_counter()
        while (message := _next_request(ctx)) is not None:
            ctx.stage = "serve: request"
            asked = _points(message, ctx.active, MAX_REQUEST_ROWS, "request")
            with ctx.meter.crypto("serve.blind"):
                ctx.send(ctx.active, TAG_BLINDED, _blind(asked, key).tobytes())
            positions = ctx.recv(ctx.active, TAG_ROWS)
            if not isinstance(positions, np.ndarray) or positions.dtype != np.int64 or positions.ndim != 1 \
                    or len(positions) > len(asked) or (len(positions) and (
                        positions.min() < 0 or positions.max() >= len(order))):
                raise ProtocolError(f"{ctx.active} asked for rows outside {ctx.name}'s index")
            summary.requests += 1
            if len(positions):
                model.side.evaluate(ctx, model.X[order[positions]], VALIDATE)
                summary.rows_scored += len(positions)
            log_event(_log, ctx.name, "serve", "request", f"request {summary.requests}: {len(positions)} of "
                      f"{len(asked)} asked rows scored here", level=logging.DEBUG, request=summary.requests,
                      rows=len(positions), asked=len(asked))
        summary.wall_s = time.perf_counter() - started
        return summary

    return role


def _next_request(ctx: PartyContext) -> Any:
    """The active party's next request to this party (idle ticks skipped); None once it stops the service."""
    while True:
        ctx.stage = IDLE_STAGE
        message = ctx.recv(ctx.active, TAG_REQUEST)
        if message == "stop":
            return None
        if message != "idle":
            return message


def _model_inputs(message: Any, sender: str, parties: Sequence[str]) -> tuple[dict[str, int], int, str]:
    """(every party's encoded width, class count, task) as the active party announced them, checked."""
    if not isinstance(message, dict) or set(message) != {"widths", "n_classes", "task"} or not isinstance(
            message["n_classes"], int) or not 1 <= message["n_classes"] <= MAX_CLASSES or message["task"] not in (
            CLASSIFICATION, REGRESSION):
        raise ProtocolError(f"malformed model inputs from {sender}")
    return _widths(message["widths"], sender, parties), message["n_classes"], message["task"]


def _helper_model(federation: Federation, name: str, data: str | Path | None) -> tuple[_ServingModel, Any, Any, None]:
    """A helper's method (from the federation's job, which every party agreed on): no part, no rows."""
    from securevfl.deploy.party import method_and_config
    from securevfl.methods.engine.loop import SavedSide

    if data is not None:
        raise ConfigError(f"{name} has data = false in the federation file: it takes no --data")
    method, config = method_and_config(federation, "cpu")
    empty = _ServingModel(side=None, saved=SavedSide({}), ids=[], X=np.zeros((0, 0), np.float32), encoder=None,
                          part=None)
    return empty, method, config.train, None


def _build_announced(ctx: PartyContext, model: _ServingModel, build_side: SideBuilder) -> None:
    """Build this party's side for the model inputs the active party announces, loaded with its saved part."""
    from securevfl.methods.engine.loop import prepare_scoring_side

    model.side = build_side(*_model_inputs(ctx.recv(ctx.active, TAG_WIDTHS), ctx.active, (ctx.active, *ctx.passives)))
    prepare_scoring_side(ctx, model.side, model.saved)


def _helper_role(model: _ServingModel, build_side: SideBuilder) -> Callable[[PartyContext], ServingSummary]:
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


def _active_role(model: _ServingModel, fingerprint: str, jobs: queue.Queue[_Job | None], federation: Federation,
                 classes: tuple[str, ...], task: str, build_side: SideBuilder, ready: Callable[[], None],
                 idle_s: float) -> Callable[[PartyContext], ServingSummary]:
    """Build the peers' indexes, then answer the endpoint's requests one at a time until told to stop."""
    from psi.curve import BlindingKey
    from securevfl.methods.engine.loop import VALIDATE, prepare_scoring_side

    job_spec = federation.job

    def role(ctx: PartyContext) -> ServingSummary:
        summary = ServingSummary(ctx.name)
        ctx.stage = "serve: setup"
        salt, key = secrets.token_bytes(32), BlindingKey(secrets.token_bytes(32))
        n_classes = 1 if task == REGRESSION else len(classes)
        for p in ctx.passives:
            ctx.send(p, TAG_HELLO, {"salt": salt})
        peers: dict[str, _PeerIndex] = {}
        widths = {ctx.name: int(model.X.shape[1])}
        for p in ctx.passives:
            message = ctx.recv(p, TAG_INDEX)
            if not isinstance(message, dict) or set(message) != {"model", "width", "index"}:
                raise ProtocolError(f"malformed serving index from {p}")
            widths[p] = _widths({p: message["width"]}, p, (p,))[p]
            if message["model"] != fingerprint:
                raise ModelError(f"{p} holds a part of another model: every party must serve with its part of "
                                 "one saved model")
            points = _points(message["index"], p, MAX_INDEX_ROWS, "ID index")
            with ctx.meter.crypto("serve.index"):
                both = _blind(points, key, workers=None)
            peers[p] = _PeerIndex({bytes(row): i for i, row in enumerate(both)})
            log_event(_log, ctx.name, "serve", "index", f"serving index of {p}: {len(both)} IDs", peer=p,
                      peer_rows=len(both))
        helpers = tuple(p for p in ctx.peers if p not in ctx.passives)
        for p in (*ctx.passives, *helpers):  # every party builds its side for the same model inputs (as a plan says)
            ctx.send(p, TAG_WIDTHS, {"widths": widths, "n_classes": n_classes, "task": task})
        own = {item: i for i, item in enumerate(model.ids)}
        model.side = build_side(widths, n_classes, task)
        prepare_scoring_side(ctx, model.side, model.saved)
        ready()
        started = time.perf_counter()
        last = time.monotonic()
        while True:
            ctx.stage = IDLE_STAGE
            try:
                job = jobs.get(timeout=min(idle_s, 0.25))
            except Interrupted:  # SIGINT / SIGTERM while idle: the service ends, the peers stop cleanly
                break
            except queue.Empty:
                if time.monotonic() - last >= idle_s:  # tell the peers this party is alive
                    for p in ctx.peers:
                        ctx.send(p, TAG_REQUEST, "idle")
                    last = time.monotonic()
                continue
            if job is None:
                break
            t0 = time.perf_counter()
            try:
                ids, X, unknown = _active_rows(model, job.rows, job_spec.id_column, job_spec.normalize, own)
            except RequestError as exc:  # nothing was sent: the session goes on
                job.answer.set_exception(exc)
                continue
            ctx.stage = "serve: request"
            answer = _score_request(ctx, model, peers, helpers, key, salt, ids, X, unknown, classes, task,
                                    job_spec.id_column, VALIDATE)
            last = time.monotonic()
            summary.requests += 1
            summary.rows_scored += len(answer["predictions"])
            summary.latencies_ms.append((time.perf_counter() - t0) * 1e3)
            job.answer.set_result(answer)
            log_event(_log, ctx.name, "serve", "request", f"request {summary.requests}: {len(answer['predictions'])} "
                      f"of {len(job.rows)} rows scored in {summary.latencies_ms[-1]:.1f} ms",
                      request=summary.requests, rows=len(answer["predictions"]), asked=len(job.rows),
                      latency_ms=round(summary.latencies_ms[-1], 3))
        for p in ctx.peers:
            ctx.send(p, TAG_REQUEST, "stop")
        summary.wall_s = time.perf_counter() - started
        return summary

    return role


def _score_request(ctx: PartyContext, model: _ServingModel, peers: Mapping[str, _PeerIndex], helpers: Sequence[str],
                   key: Any, salt: bytes, ids: list[str], X: np.ndarray, unknown: list[str], classes: tuple[str, ...],
                   task: str, id_column: str, phase: str) -> dict[str, Any]:
    """One request: blinded lookups at every passive party, then the method's evaluation of the rows all hold.

    A helper learns only the number of rows scored (it takes part in their evaluation).
    """
    from securevfl.model.scoring import predictions_frame

    held = np.ones(len(ids), dtype=bool)
    missing = set(unknown)
    held[[i for i, item in enumerate(ids) if item in missing]] = False
    positions: dict[str, np.ndarray] = {}
    if peers:
        with ctx.meter.crypto("serve.blind"):
            asked = _hash_blind(ids, salt, key).tobytes()
        for p in peers:
            ctx.send(p, TAG_REQUEST, asked)
        for p, index in peers.items():
            both = _points(ctx.recv(p, TAG_BLINDED), p, len(ids), "blinded request")
            if len(both) != len(ids):
                raise ProtocolError(f"{p} answered {len(both)} of {len(ids)} blinded IDs")
            found = np.array([index.positions.get(bytes(row), -1) for row in both], dtype=np.int64)
            positions[p] = found
            held &= found >= 0
    rows = np.flatnonzero(held)
    for p in peers:
        ctx.send(p, TAG_ROWS, positions[p][rows].astype(np.int64))
    for p in helpers:
        ctx.send(p, TAG_REQUEST, int(len(rows)))
    scored_ids = np.asarray([ids[i] for i in rows], dtype=object)
    predictions: list[dict[str, Any]] = []
    if len(rows):
        evaluation = model.side.evaluate(ctx, X[rows], phase)
        frame = predictions_frame(scored_ids, evaluation.scores, task, classes, id_column)
        predictions = json.loads(frame.to_json(orient="records", double_precision=15))
    return {"predictions": predictions, "not_scored": [ids[i] for i in np.flatnonzero(~held)]}


# ---------------------------------------------------------------------------------- the endpoint


def _handler(jobs: queue.Queue[_Job | None], health: Callable[[], dict[str, Any]], timeout_s: float) -> type:
    class Handler(BaseHTTPRequestHandler):
        server_version = "securevfl-serve"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            return None  # requests are counted in the summary, not logged per line

        def _reply(self, status: int, body: Mapping[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path == "/health":
                self._reply(200, health())
            else:
                self._reply(404, {"error": "GET /health or POST /score"})

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            if self.path != "/score":
                self._reply(404, {"error": "POST /score"})
                return
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                self._reply(411, {"error": "a Content-Length is needed"})
                return
            if not 0 < length <= MAX_BODY_BYTES:
                self._reply(413, {"error": f"a request body holds 1 to {MAX_BODY_BYTES} bytes"})
                return
            try:
                body = json.loads(self.rfile.read(length))
                rows = body["rows"]
                if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
                    raise ValueError("rows must be a non-empty list of objects")
                if len(rows) > MAX_REQUEST_ROWS:
                    raise ValueError(f"at most {MAX_REQUEST_ROWS} rows per request")
            except (ValueError, KeyError, TypeError) as exc:
                self._reply(400, {"error": f'the body must be {{"rows": [{{...}}, ...]}}: {exc}'})
                return
            job = _Job(rows)
            jobs.put(job)
            try:
                self._reply(200, job.answer.result(timeout=timeout_s))
            except RequestError as exc:
                self._reply(400, {"error": str(exc)})
            except Exception as exc:  # the session failed or timed out: say so, never hang
                self._reply(503, {"error": f"{type(exc).__name__}: {exc}"})

    return Handler


def _listen_address(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--listen must be HOST:PORT, got {listen!r}")
    return host.strip("[]"), int(port)


def run_serving_party(federation: Federation, name: str, data: str | Path | None, model_dir: str | Path | None, *,
                      listen: str = DEFAULT_LISTEN, device: str = "auto", transport: Any = None,
                      on_ready: Callable[[str], None] | None = None, stop: threading.Event | None = None,
                      request_timeout_s: float = 60.0, threads: int | ThreadChoice | None = None) -> ServingSummary:
    """Serve party ``name``'s part of the model under ``model_dir`` until stopped (``stop``, SIGINT or SIGTERM).

    At the active party ``on_ready(url)`` is called once every peer is up and the endpoint listens.
    A helper (``data = false``: hetero-lr's arbiter) takes no ``data`` and no ``model_dir``: it holds
    no part, and takes its part in each request (the arbiter: fresh keys, masked decryptions).
    ``threads``: torch's threads in this process, as for training (:func:`~securevfl.deploy.party.run_deployed_party`).
    """
    from securevfl.methods.base import method_class
    from securevfl.models.device import resolve_device

    threads_used = use_threads(federation, name, threads)  # before any torch work
    started = time.perf_counter()
    helper = not federation.party(name).data
    standalone = method_class(federation.job.method).standalone
    if standalone and name != federation.active:
        raise ConfigError(f"the {federation.job.method} model is the active party's alone: only "
                          f"{federation.active} serves (no other party needed)")
    if helper:
        model, method, config, table = _helper_model(federation, name, data)
        classes, task, fingerprint = (), "", ""
    elif data is None or model_dir is None:
        raise ConfigError(f"{name} serves with its own part and its table: give --model-dir and --data")
    else:
        model, method, config, table = _load_serving_model(federation, name, data, model_dir, standalone)
        manifest = model.part.manifest
        classes, task, fingerprint = tuple(manifest.classes), manifest.task, manifest.job_fingerprint
    is_active = name == federation.active
    host, port = _listen_address(listen) if is_active else ("", 0)
    torch_device = resolve_device(device)
    passives = () if standalone else data_party_order(federation)[1:]
    parties = (federation.active,) if standalone else (*data_party_order(federation), *helper_parties(federation))
    jobs: queue.Queue[_Job | None] = queue.Queue()
    server: ThreadingHTTPServer | None = None
    summary: ServingSummary

    def build_side(widths: Mapping[str, int], n_classes: int, model_task: str) -> Any:
        """The party's scoring side, for a scenario of no rows with every party's encoded width."""
        from securevfl.data.preprocess import EncodedColumns

        scenario = _serving_scenario(federation, name, table, classes, model_task, widths, n_classes)
        if table is not None:
            names = model.encoder.feature_names if model.encoder is not None else ()
            scenario.remember_encoding(name, EncodedColumns(model.X[:0], tuple(names), {}, model.encoder))
        return method.scoring_roles(scenario)[name].side

    log_start(federation, name, "serve", len(model.ids) if table is not None else None, threads_used)
    watch = PartyWatch(name, quiet_stages=(IDLE_STAGE,))
    opened: Any = (nullcontext(InProcessTransport([name])) if standalone
                   else party_links(federation, name, transport, phase="serve", watch=watch))
    with watch, opened as link:
        if is_active:
            up = {"status": "starting"}

            def health() -> dict[str, Any]:
                return {**up, "model": fingerprint[:12], "method": method.name, "parties": list(parties)}

            server = ThreadingHTTPServer((host, port), _handler(jobs, health, request_timeout_s))
            server.daemon_threads = True
            address = f"http://{host}:{server.server_address[1]}"
            threading.Thread(target=server.serve_forever, name="securevfl-serve-http", daemon=True).start()

            def ready() -> None:
                up["status"] = "ok"
                log_event(_log, name, "serve", "ready", f"serving at {address}/score", url=f"{address}/score")
                if on_ready:
                    on_ready(address)

            if stop is not None:
                def stop_when_told() -> None:
                    stop.wait()
                    jobs.put(None)

                threading.Thread(target=stop_when_told, daemon=True).start()
            role = _active_role(model, fingerprint, jobs, federation, classes, task, build_side, ready,
                                idle_s=max(0.5, federation.limits.recv_timeout_s / 4))
        elif helper:
            role = _helper_role(model, build_side)
        else:
            role = _passive_role(model, fingerprint, build_side)
        try:
            summary, _meter = run_party(watch.role(role, "serve"), name=name, active=federation.active, parties=parties,
                                        passives=passives, transport=link, device=torch_device, seed=config.seed,
                                        recv_timeout=federation.limits.recv_timeout_s)
        finally:
            if server is not None:
                server.shutdown()
                server.server_close()
                while not jobs.empty():  # answer what is left: the service is over
                    job = jobs.get_nowait()
                    if job is not None and not job.answer.done():
                        job.answer.set_exception(ConfigError("the scoring service stopped"))
        if is_active and server is not None:
            summary.address = f"http://{host}:{server.server_address[1]}"
    summary.wall_s = time.perf_counter() - started
    timing, latency = "", {}
    if summary.latencies_ms:
        p50, p99 = np.percentile(summary.latencies_ms, [50, 99])
        timing, latency = f"; latency p50 {p50:.1f} ms, p99 {p99:.1f} ms", {"p50_ms": p50, "p99_ms": p99}
    log_done(name, f"stopped: {summary.requests} requests, {summary.rows_scored} rows scored{timing}",
             summary.wall_s, summary.rows_scored, link.link_stats() if hasattr(link, "link_stats") else None,
             requests=summary.requests, **latency)
    return summary

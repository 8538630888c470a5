"""The online scoring endpoint: a small ASGI app served by uvicorn in a thread of the active party.

uvicorn gives the endpoint TLS (and client certificates), keep-alive timeouts and graceful shutdown;
this module adds what a scoring service on a bank's network needs on top: a deadline for a client to
send its request (a slow client is closed, whatever it sends), a cap on open connections (the
longest-idle one is closed first), bearer-token authentication, a bounded queue of waiting requests
(503 with ``Retry-After`` when full), a request cancelled when its client goes away, strict JSON
(no lone surrogates, no non-finite or oversized numbers, no deep nesting) and Prometheus metrics
(``GET /metrics``: counts, latencies and per-peer times, never an ID).

It knows nothing of the model: ``prepare(rows)`` (raising :class:`RequestError`) and ``submit(job)``
(raising :class:`queue.Full`) are the serving roles' (:mod:`securevfl.deploy.serving`).
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import json
import logging
import math
import queue
import socket
import ssl
import stat
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from securevfl.deploy.progress import log_event
from securevfl.deploy.serving_limits import BudgetRefused, ServeSettings
from securevfl.errors import ConfigError, SecureVFLError

#: The most rows one request may ask for (each costs three X25519 multiplications and a model row).
MAX_REQUEST_ROWS = 10_000
#: The largest request body the endpoint reads.
MAX_BODY_BYTES = 16 * 1024 * 1024
#: The most digits of a JSON integer (an ID of 64 digits is already far beyond any key in use).
MAX_INT_DIGITS = 64
#: The most columns a request row may carry.
MAX_ROW_KEYS = 4096
#: Bodies above this size are decoded in a worker thread, not on the event loop.
_INLINE_BYTES = 64 * 1024

_log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class RequestError(SecureVFLError):
    """A scoring request the endpoint refuses (HTTP 400); the session goes on. Its text names no ID or value."""


class ServiceStopped(SecureVFLError):
    """The scoring service stopped before a request was answered (HTTP 503)."""


@dataclass
class ScoringJob:
    """One accepted request, prepared for scoring: what the serving role needs, and where its answer goes."""

    ids: list[str]
    X: Any  # the active party's encoded rows (numpy), row for row
    own: Any  # bool per row: the active party has the row (its table's, or the values the request carried)
    warnings: list[list[str]]
    answer: Future[dict[str, Any]] = field(default_factory=Future)
    cancelled: bool = False

    @property
    def n_rows(self) -> int:
        return len(self.ids)


#: Requests of at most this many rows are scored before larger ones that wait (a large request never holds
#: a small one back for longer than one batch).
SMALL_REQUEST_ROWS = 64


class RequestQueue:
    """The requests waiting to be scored, bounded: small ones (``SMALL_REQUEST_ROWS``) first, then in arrival order.

    ``put(job)`` raises :class:`queue.Full` when ``size`` wait already; ``stop()`` puts the end marker
    ahead of every waiting request (``get`` then returns None).
    """

    def __init__(self, size: int) -> None:
        self._queue: queue.PriorityQueue[tuple[int, int, ScoringJob | None]] = queue.PriorityQueue(size)
        self._order = itertools.count()

    def put(self, job: ScoringJob) -> None:
        self._queue.put_nowait((0 if job.n_rows <= SMALL_REQUEST_ROWS else 1, next(self._order), job))

    def stop(self) -> None:
        """The end marker, even when the queue is full (what waits is answered: the service stopped)."""
        while True:
            try:
                self._queue.put_nowait((-1, next(self._order), None))
                return
            except queue.Full:
                self.drain()

    def get(self, timeout: float | None = None) -> ScoringJob | None:
        """The next request (raises :class:`queue.Empty` after ``timeout``; 0: do not wait), or None: stop."""
        item = self._queue.get_nowait() if timeout is not None and timeout <= 0 else self._queue.get(timeout=timeout)
        return item[2]

    def qsize(self) -> int:
        return self._queue.qsize()

    def drain(self) -> None:
        """Answer every waiting request: the service is over."""
        while True:
            try:
                job = self._queue.get_nowait()[2]
            except queue.Empty:
                return
            if job is not None and not job.answer.done():
                job.answer.set_exception(ServiceStopped("the scoring service stopped"))


# ---------------------------------------------------------------------------------- strict JSON


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise RequestError(f"a number has more than {MAX_INT_DIGITS} digits")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise RequestError("a number is too large")
    return value


def _parse_constant(text: str) -> Any:
    raise RequestError(f"{text} is not JSON")


def decode_rows(body: bytes, max_rows: int = MAX_REQUEST_ROWS) -> list[dict[str, Any]]:
    """The rows of a request body ``{"rows": [{...}, ...]}``: flat objects of text, numbers, booleans and nulls.

    Refused (:class:`RequestError`): anything not UTF-8 JSON, lone surrogates, NaN or Infinity, a
    number too large for a float or of more than ``MAX_INT_DIGITS`` digits, nesting beyond a row.
    """
    try:
        text = body.decode("utf-8")
        document = json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant)
    except RequestError:
        raise
    except RecursionError:
        raise RequestError("the body is nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise RequestError(f'the body must be JSON {{"rows": [{{...}}, ...]}}: {type(exc).__name__}') from None
    rows = document.get("rows") if isinstance(document, dict) else None
    if not isinstance(rows, list) or not rows:
        raise RequestError('the body must be {"rows": [{...}, ...]}: a non-empty list of objects')
    if len(rows) > max_rows:
        raise RequestError(f"at most {max_rows} rows per request")
    for row in rows:
        if not isinstance(row, dict) or len(row) > MAX_ROW_KEYS:
            raise RequestError(f"every row must be an object of at most {MAX_ROW_KEYS} values")
        for key, value in row.items():
            if not (value is None or isinstance(value, (bool, int, float))):
                if not isinstance(value, str):
                    raise RequestError(f"column {_safe(key)!r}: a row holds only text, numbers and nulls")
                _check_text(value)
            _check_text(key)
    return rows


def _check_text(value: str) -> None:
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise RequestError("the body holds a lone surrogate (text that is not Unicode)") from None


def _safe(name: str) -> str:
    return name if len(name) <= 64 else name[:61] + "..."


# ---------------------------------------------------------------------------------- metrics


class ServeMetrics:
    """The endpoint's Prometheus metrics (a registry of its own: no global state, never an ID)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        ns = "securevfl_serve"
        self.requests = Counter(f"{ns}_requests", "Scoring requests by outcome", ["outcome"], registry=self.registry)
        self.latency = Histogram(f"{ns}_request_seconds", "Time from a request's arrival to its answer",
                                 buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30),
                                 registry=self.registry)
        self.rows = Counter(f"{ns}_rows", "Requested rows by outcome (scored, not_scored)", ["outcome"],
                            registry=self.registry)
        self.warnings = Counter(f"{ns}_row_warnings", "Rows scored with an assumption (unseen category, imputed)",
                                ["kind"], registry=self.registry)
        self.refusals = Counter(f"{ns}_peer_refusals", "Requests a passive party refused (its membership budget)",
                                ["peer"], registry=self.registry)
        self.peer_seconds = Histogram(f"{ns}_peer_seconds", "Time waiting for each passive party's lookup answer",
                                      ["peer"], buckets=(.0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1, 5),
                                      registry=self.registry)
        self.batch_rows = Histogram(f"{ns}_batch_rows", "Rows per scored batch (requests batched together)",
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096, 16384),
                                    registry=self.registry)
        self.queued = Gauge(f"{ns}_queued_requests", "Requests waiting to be scored", registry=self.registry)
        self.peer_up = Gauge(f"{ns}_peer_up", "1 while a passive party takes part in scoring, 0 while it is left "
                             "out (down, late or rejoining)", ["peer"], registry=self.registry)
        self.peer_outages = Counter(f"{ns}_peer_outages", "Times a passive party went out of scoring (down, late "
                                    "or restarted)", ["peer"], registry=self.registry)
        self.left_out = Counter(f"{ns}_left_out_batches", "Batches scored without a passive party, by reason "
                                "(down, late, joining)", ["peer", "reason"], registry=self.registry)
        #: The passive parties left out of scoring now (party -> reason), kept by the serving role for /health.
        self.out: dict[str, str] = {}

    def exposition(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


# ---------------------------------------------------------------------------------- the app


def read_token(path: Path) -> bytes:
    """The bearer token in ``path`` (one line), refused when others may read the file or it is short."""
    try:
        info = path.stat()
        text = path.read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"--serve-token-file {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"--serve-token-file {path}: not a file")
    if info.st_mode & 0o077:
        raise ConfigError(f"--serve-token-file {path}: readable by others (mode {stat.S_IMODE(info.st_mode):o}); "
                          f"chmod 600 {path}")
    if len(text) < 16 or b"\n" in text:
        raise ConfigError(f"--serve-token-file {path}: the token must be one line of at least 16 characters")
    return text


class ScoringApp:
    """``POST /score``, ``GET /health`` and ``GET /metrics``.

    ``/health`` says only whether the service is up: what an unauthenticated caller may know; while
    a passive party is left out of scoring it says ``{"status": "degraded", "left_out": {party:
    reason}}`` (still 200: the service answers, without that party's part).
    ``prepare(rows)`` turns a request's rows into a :class:`ScoringJob` (or raises RequestError);
    ``submit(job)`` queues it (or raises queue.Full); ``status()`` is the service's state.
    """

    def __init__(self, party: str, prepare: Callable[[list[dict[str, Any]]], ScoringJob],
                 submit: Callable[[ScoringJob], None], status: Callable[[], str], metrics: ServeMetrics,
                 settings: ServeSettings, token: bytes | None = None) -> None:
        self.party, self.prepare, self.submit, self.status = party, prepare, submit, status
        self.metrics, self.settings, self.token = metrics, settings, token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path, method = scope.get("path", ""), scope.get("method", "")
        if path == "/health" and method == "GET":
            status, out = self.status(), dict(self.metrics.out)
            await _reply(send, 200, {"status": "degraded", "left_out": out} if status == "ok" and out
                         else {"status": status})
        elif path in ("/score", "/metrics") and not self._authorised(scope):
            self._refused("unauthorized", 401, "no valid bearer token")
            await _reply(send, 401, {"error": "a valid bearer token is needed (Authorization: Bearer ...)"},
                         [(b"www-authenticate", b"Bearer")])
        elif path == "/metrics" and method == "GET":
            body, kind = self.metrics.exposition()
            await _send_bytes(send, 200, body, kind.encode())
        elif path == "/score" and method == "POST":
            await self._score(scope, receive, send)
        else:
            await _reply(send, 404, {"error": "POST /score, GET /health or GET /metrics"})

    def _authorised(self, scope: Scope) -> bool:
        if self.token is None:
            return True
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, given = value.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.token)
        return False

    def _refused(self, outcome: str, status: int, reason: str) -> None:
        self.metrics.requests.labels(outcome).inc()
        log_event(_log, self.party, "serve", "refused", f"request refused (HTTP {status}): {reason}",
                  level=logging.WARNING, status=status, outcome=outcome)

    async def _score(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        body = await self._body(scope, receive, send)
        if body is None:
            return
        try:
            if len(body) > _INLINE_BYTES:
                job = await asyncio.to_thread(self._prepare, body)
            else:
                job = self._prepare(body)
        except RequestError as exc:
            self._refused("bad_request", 400, str(exc))
            await _reply(send, 400, {"error": str(exc)})
            return
        except Exception as exc:  # noqa: BLE001 - nothing of a request may stop the service
            self._refused("error", 500, f"unexpected {type(exc).__name__} preparing it")  # no traceback: no ID
            await _reply(send, 500, {"error": "the request could not be prepared"})
            return
        try:
            self.submit(job)
        except queue.Full:
            self._refused("overloaded", 503, f"{self.settings.queue_size} requests are waiting")
            await _reply(send, 503, {"error": "the service is busy: retry later"}, [(b"retry-after", b"1")])
            return
        except ServiceStopped as exc:
            self._refused("stopped", 503, str(exc))
            await _reply(send, 503, {"error": str(exc)})
            return
        await self._answer(job, receive, send, started)

    def _prepare(self, body: bytes) -> ScoringJob:
        return self.prepare(decode_rows(body))

    async def _body(self, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        """The request body, read within the client deadline and the size limit; None once answered."""
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and (not value.isdigit() or int(value) > MAX_BODY_BYTES):
                self._refused("too_large", 413, "body over the size limit")
                await _reply(send, 413, {"error": f"a request body holds at most {MAX_BODY_BYTES} bytes"})
                return None
        chunks: list[bytes] = []
        size = 0
        deadline = time.monotonic() + self.settings.client_timeout_s
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                self._refused("client_timeout", 408, "the body did not arrive in time")
                await _reply(send, 408, {"error": "the request body did not arrive in time"},
                             [(b"connection", b"close")])
                return None
            if message["type"] == "http.disconnect":
                self.metrics.requests.labels("cancelled").inc()
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                self._refused("too_large", 413, "body over the size limit")
                await _reply(send, 413, {"error": f"a request body holds at most {MAX_BODY_BYTES} bytes"},
                             [(b"connection", b"close")])
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _answer(self, job: ScoringJob, receive: Receive, send: Send, started: float) -> None:
        """Wait for the job's answer; a client that goes away (or a request past its time) cancels the job."""
        answer: asyncio.Future[Any] = asyncio.wrap_future(job.answer)
        gone: asyncio.Future[Any] = asyncio.ensure_future(_disconnected(receive))
        try:
            done, _ = await asyncio.wait({answer, gone}, timeout=self.settings.request_timeout_s,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if answer not in done:
            job.cancelled = True
            answer.cancel()
            if gone in done:
                self.metrics.requests.labels("cancelled").inc()
                log_event(_log, self.party, "serve", "cancelled", "a client went away: its request is dropped",
                          level=logging.DEBUG)
                return
            self._refused("timeout", 504, f"no answer within {self.settings.request_timeout_s:g} s")
            await _reply(send, 504, {"error": "the request was not answered in time"})
            return
        try:
            result = answer.result()
        except RequestError as exc:
            self._refused("bad_request", 400, str(exc))
            await _reply(send, 400, {"error": str(exc)})
            return
        except BudgetRefused as exc:
            self._refused("budget", 429, str(exc))
            extra = [] if exc.retry_after_s is None else [(b"retry-after", str(math.ceil(exc.retry_after_s)).encode())]
            await _reply(send, 429, {"error": str(exc)}, extra)
            return
        except ServiceStopped as exc:
            self._refused("stopped", 503, str(exc))
            await _reply(send, 503, {"error": str(exc)})
            return
        except Exception as exc:  # noqa: BLE001 - one request's failure is answered, never the service's end
            self._refused("error", 500, type(exc).__name__)
            await _reply(send, 500, {"error": "the request could not be scored"})
            return
        self.metrics.requests.labels("ok").inc()
        self.metrics.latency.observe(time.perf_counter() - started)
        await _reply(send, 200, result)


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _reply(send: Send, status: int, body: Mapping[str, Any],
                 headers: list[tuple[bytes, bytes]] | tuple[()] = ()) -> None:
    data = json.dumps(body, ensure_ascii=True, separators=(",", ":")).encode()
    await _send_bytes(send, status, data, b"application/json", headers)


async def _send_bytes(send: Send, status: int, data: bytes, kind: bytes,
                      headers: list[tuple[bytes, bytes]] | tuple[()] = ()) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", kind), (b"content-length", str(len(data)).encode()), *headers]})
    await send({"type": "http.response.body", "body": data})


# ---------------------------------------------------------------------------------- the server


def _protocol(client_timeout_s: float, max_connections: int) -> type:
    """The h11 protocol of uvicorn with a deadline to send each request and a cap on open connections."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class DeadlineH11Protocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        _opened = 0.0

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            sock = transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._opened = self.loop.time()
            self._arm()
            if len(self.connections) > max_connections:
                idle: list[Any] = [c for c in self.connections if c is not self and getattr(c, "_idle", bool)()]
                victim = min(idle, key=lambda c: c._opened) if idle else self
                victim.transport.close()

        def _idle(self) -> bool:
            """No request of this connection is being answered (it is sending one, or between two)."""
            return self.cycle is None or self.cycle.response_complete

        def _arm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            self._deadline = self.loop.call_later(client_timeout_s, self._expire)

        def _expire(self) -> None:
            if self._idle():  # a request not sent in time (or a connection idle that long): closed
                self.transport.close()
            else:
                self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            super().connection_lost(exc)

    return DeadlineH11Protocol


class ScoringEndpoint:
    """The uvicorn server of a :class:`ScoringApp`, bound before it starts (a port in use fails here)."""

    def __init__(self, app: ScoringApp, host: str, port: int, settings: ServeSettings) -> None:
        import uvicorn

        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # IPPROTO_TCP named: asyncio sets TCP_NODELAY on accepted connections only then (else every answer on a
        # keep-alive connection waited ~40 ms for the client's delayed ACK, Nagle's algorithm)
        self._sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((host, port))
        except OSError as exc:
            self._sock.close()
            raise ConfigError(f"--listen {host}:{port}: {exc.strerror or exc}") from None
        self._sock.listen(1024)
        self.port = self._sock.getsockname()[1]
        self.scheme = "https" if settings.tls else "http"
        shown = f"[{host}]" if ":" in host else host
        self.url = f"{self.scheme}://{shown}:{self.port}"
        tls: dict[str, Any] = {}
        if settings.tls:
            tls = {"ssl_certfile": str(settings.cert), "ssl_keyfile": str(settings.key)}
            if settings.client_ca is not None:
                tls.update(ssl_ca_certs=str(settings.client_ca), ssl_cert_reqs=ssl.CERT_REQUIRED)
        config = uvicorn.Config(app, http=_protocol(settings.client_timeout_s, settings.max_connections),
                                lifespan="off", log_config=None, log_level="warning", access_log=False,
                                timeout_keep_alive=5, timeout_graceful_shutdown=5, server_header=False,
                                loop="asyncio", **tls)
        try:
            config.load()  # TLS files are read here, before any peer is waited for
        except (OSError, ssl.SSLError) as exc:
            self._sock.close()
            raise ConfigError(f"the endpoint's TLS files cannot be used: {exc}") from None
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        name="securevfl-serve-http", daemon=True)

    def start(self, timeout: float = 10.0) -> None:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self._server.started:
            raise ConfigError("the scoring endpoint did not start")

    def __enter__(self) -> ScoringEndpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop serving: open requests are answered (or dropped after 5 s), then the socket closes."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(10)
        self._sock.close()

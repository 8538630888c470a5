"""What a deployed party tells its operator: one structured event per step, and whom it is waiting for.

Library code logs through :mod:`logging` (loggers under ``securevfl``) and never installs a
handler: ``securevfl party`` does (:mod:`securevfl.deploy.logs`: text on the console, ``--log-file``,
``--log-format json``). An event is a log record whose message is the readable line and whose
:data:`EVENT_KEY` attribute holds its fields: ``party``, ``phase``, ``event`` and what applies
(``peer``, ``rows``, ``epoch``, ``bytes``...). Fields are counts, sizes, times and names: never an
ID, a feature value or key material.

:class:`PartyWatch` runs beside one party's role: it adds the party's byte counts to its progress
events (epochs, scoring batches) and, from a thread of its own, says every :data:`WAIT_REPORT_S`
seconds whom the party is waiting for (a peer that has not connected yet, or the sender of the
receive in progress, from :attr:`~securevfl.federation.runtime.Channel.waiting_for`) and for how long.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from securevfl.federation.runtime import PartyContext

#: The LogRecord attribute holding an event's fields (``party``, ``phase``, ``event``, ...).
EVENT_KEY = "securevfl_event"
#: A record with this attribute set to False is left out of a text console (the CLI prints the error itself).
CONSOLE_KEY = "securevfl_console"
#: A wait is reported once it lasts this long, and again every as long.
WAIT_REPORT_S = 5.0
#: How often the watcher looks.
POLL_S = 0.5
#: Scoring batches are reported at most this often (the last one always).
ROWS_EVERY_S = 1.0
#: A SecureBoost passive party says which tree it has served at most this often (seconds).
TREES_EVERY_S = 5.0

_log = logging.getLogger(__name__)


def log_event(logger: logging.Logger, party: str, phase: str, event: str, message: str, *,
              level: int = logging.INFO, console: bool = True, **fields: Any) -> None:
    """Log ``message`` as one event of ``party``.

    ``phase``: start, connect, psi, plan, train, wait, score, serve, cost, end; ``fields``: numbers and
    names only. ``console=False``: not on a text console (the CLI prints it its own way).
    """
    if logger.isEnabledFor(level):
        extra: dict[str, Any] = {EVENT_KEY: {"party": party, "phase": phase, "event": event, **fields}}
        if not console:
            extra[CONSOLE_KEY] = False
        logger.log(level, message, extra=extra)


def sent_bytes(ctx: PartyContext) -> int:
    """Codec bytes this party has sent in its current run (setup or training: each has its own meter)."""
    own = f"{ctx.name}->"
    return sum(n for link, n in ctx.meter.snapshot().bytes.items() if link.startswith(own))


class PartyWatch:
    """One party's progress events and its waiting reports (a daemon thread while entered).

    ``quiet_stages``: stages in which a wait is normal and not reported (a serving party idle
    between requests).
    """

    def __init__(self, party: str, *, every: float = WAIT_REPORT_S, poll: float = POLL_S,
                 quiet_stages: tuple[str, ...] = (), logger: logging.Logger | None = None) -> None:
        self.party = party
        self.every = every
        self.poll = poll
        self.quiet_stages = quiet_stages
        self.log = logger or _log
        self._ctx: PartyContext | None = None
        self._connect: tuple[Any, Mapping[str, str], float] | None = None
        self._reported: tuple[float, int] | None = None
        self._stage: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rows_at = 0.0

    def __enter__(self) -> PartyWatch:
        self._thread = threading.Thread(target=self._run, name=f"watch-{self.party}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2 * self.poll + 1)

    def event(self, phase: str, event: str, message: str, *, level: int = logging.INFO, **fields: Any) -> None:
        """Log one event of this party."""
        log_event(self.log, self.party, phase, event, message, level=level, **fields)

    # -- what the thread watches

    @contextlib.contextmanager
    def connecting(self, transport: Any, addresses: Mapping[str, str]) -> Iterator[None]:
        """While the links come up: report a peer that has not completed its handshake."""
        self._connect = (transport, addresses, time.monotonic())
        try:
            yield
        finally:
            self._connect = None

    def role(self, role: Callable[[PartyContext], Any], phase: str = "train") -> Callable[[PartyContext], Any]:
        """``role``, watched: its waits are reported and its progress calls become ``phase`` events."""

        def watched(ctx: PartyContext) -> Any:
            user = ctx.progress

            def progress(*args: Any, **info: Any) -> None:
                self._progress(ctx, phase, info)
                user(*args, **info)

            ctx.progress = progress
            self._ctx, self._reported = ctx, None
            try:
                return role(ctx)
            finally:
                self._ctx = None

        return watched

    # -- progress events

    def _progress(self, ctx: PartyContext, phase: str, info: Mapping[str, Any]) -> None:
        """An epoch's end or a scoring batch, with the bytes this party has sent so far (or a resumed run's start)."""
        if info.get("resumed"):
            self.event(phase, "resume", f"resuming from epoch {info['epoch']} (of {info.get('epochs', '?')}): its "
                       "checkpoint is loaded", epoch=info["epoch"], epochs=info.get("epochs"))
        elif "epoch" in info:
            floats = {k: float(v) for k, v in info.items() if isinstance(v, float)}
            text = " ".join(f"{k}={v:.4f}" for k, v in floats.items())
            unit = str(info.get("unit", "epochs"))  # SecureBoost's rounds are trees
            fields: dict[str, Any] = {"epoch": info["epoch"], "epochs": info.get("epochs"), "unit": unit, **floats,
                                      "bytes": sent_bytes(ctx)}
            self.event(phase, "epoch", f"{unit.rstrip('s')} {info['epoch']}/{info.get('epochs', '?')} {text}".rstrip(),
                       **fields)
        elif "tree" in info:  # a SecureBoost passive party: a tree's histograms and splits served
            now = time.monotonic()
            if now - self._rows_at >= TREES_EVERY_S:
                self._rows_at = now
                self.event(phase, "tree", f"tree {info['tree']} served (histograms and splits)", tree=info["tree"],
                           bytes=sent_bytes(ctx))
        elif "rows" in info:
            rows, total = int(info["rows"]), int(info.get("total", info["rows"]))
            now = time.monotonic()
            if rows >= total or now - self._rows_at >= ROWS_EVERY_S:
                self._rows_at = now
                self.event(phase, "rows", f"scored {rows}/{total} rows", rows=rows, total=total,
                           bytes=sent_bytes(ctx))

    # -- the thread

    def _run(self) -> None:
        while not self._stop.wait(self.poll):
            try:
                self._look(time.monotonic())
            except Exception as exc:  # noqa: BLE001 - the watcher must never end the party's run
                self.event("watch", "watch_error", f"progress watcher: {type(exc).__name__}: {exc}",
                           level=logging.DEBUG)

    def _look(self, now: float) -> None:
        connect, ctx = self._connect, self._ctx
        if connect is not None:
            self._look_connect(now, *connect)
        if ctx is not None:
            self._look_receive(now, ctx)

    def _due(self, since: float, now: float) -> bool:
        """Whether a wait that began at ``since`` is due a report now (once per ``every`` seconds)."""
        count = int((now - since) // self.every)
        if count < 1 or self._reported == (since, count):
            return False
        self._reported = (since, count)
        return True

    def _look_connect(self, now: float, transport: Any, addresses: Mapping[str, str], since: float) -> None:
        peer = missing_peer(transport)
        if peer is not None and self._due(since, now):
            waited = now - since
            self.event("connect", "waiting", f"waiting for {peer} to connect ({addresses.get(peer, '?')}) for "
                       f"{waited:.0f} s", peer=peer, stage="connect", waited_s=round(waited, 1))

    def _look_receive(self, now: float, ctx: PartyContext) -> None:
        stage = ctx.stage
        if stage != self._stage:
            self._stage = stage
            self.event("stage", "stage", f"stage: {stage}", level=logging.DEBUG, stage=stage)
        channel = ctx.channel
        waiting, since = channel.waiting_for, channel.waiting_since
        if waiting is None or stage in self.quiet_stages or not self._due(since, now):
            return
        peer, tag = waiting
        waited = now - since
        self.event("wait", "waiting", f"waiting for {peer} ({stage}: {tag}) for {waited:.0f} s", peer=peer, tag=tag,
                   stage=stage, waited_s=round(waited, 1))


def rows_logger(party: str, phase: str = "score", logger: logging.Logger | None = None) -> Callable[..., None]:
    """A ``progress(rows=, total=)`` callback logging scoring batches, for a run without a party context.

    At most one event every :data:`ROWS_EVERY_S` (the last batch always): a standalone model scored alone.
    """
    last = [0.0]

    def progress(*args: Any, rows: int = 0, total: int = 0, **_: Any) -> None:
        now = time.monotonic()
        if rows >= total or now - last[0] >= ROWS_EVERY_S:
            last[0] = now
            log_event(logger or _log, party, phase, "rows", f"scored {rows}/{total} rows", rows=rows, total=total)

    return progress


def missing_peer(transport: Any) -> str | None:
    """The first peer whose link has not completed its handshake yet (None: every link is up, or unknown).

    Asks the transport's own ``wait_ready`` with no time to wait: it names the first peer it would wait for.
    """
    from securevfl.federation.grpc_transport import PeerLostError

    try:
        transport.wait_ready(timeout=0)
    except PeerLostError as exc:
        return exc.peer
    except Exception:  # noqa: BLE001 - a refusal or an abort: the party's own wait reports it
        return None
    return None

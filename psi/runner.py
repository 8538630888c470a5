"""Run every party of a PSI in one process, passing each message through the binary codec.

This is the local stand-in for the network runner: each party has its own keys and state
machines; the runner only moves serialised bytes between them and records what it moved.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

import numpy as np

from .checks import validate_party_name
from .curve import CurveEngine
from .errors import OutOfOrderError, PSIConfigError
from .executors import ExecutorConfig, TaskExecutor, create_executor
from .ids import PreparedIDs, prepare_ids
from .protocol import Mode, PairOutcome, PSIConfig, PSIInitiator, PSIResponder, _Side, global_alignment
from .source import IDSource

_P = ParamSpec("_P")
_R = TypeVar("_R")
_T = TypeVar("_T")


@dataclass(frozen=True)
class PairwiseResult:
    """The active party's intersection with one passive party (rows in that pair's order)."""

    active: str
    passive: str
    size: int
    active_rows: np.ndarray | None
    passive_rows: np.ndarray | None


@dataclass(frozen=True)
class PSIResult:
    """Outcome of a PSI run, per party, plus cost figures.

    ``aligned[p]``: row indices into party ``p``'s input, in the agreed order shared by all
    parties (row ``i`` of every party is the same person); ``None`` where ``p`` does not learn
    the intersection in this mode. ``unaligned[p]``: its other rows, ascending.
    """

    parties: tuple[str, ...]
    active: str
    mode: str
    intersection_size: int
    input_sizes: dict[str, int]
    aligned: dict[str, np.ndarray | None]
    unaligned: dict[str, np.ndarray | None]
    pairwise: dict[str, PairwiseResult]
    timings: dict[str, dict[str, float]]
    bytes_per_link: dict[str, int]
    messages_per_link: dict[str, int]
    rounds: int
    wall_seconds: float
    workers: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pairwise_sizes(self) -> dict[str, int]:
        """|active ∩ passive| for each passive party."""
        return {name: pr.size for name, pr in self.pairwise.items()}

    @property
    def total_bytes(self) -> int:
        """Bytes sent over all links."""
        return sum(self.bytes_per_link.values())

    def report(self) -> dict[str, Any]:
        """JSON-ready summary (sizes, time split, traffic); no row positions."""
        return {
            "parties": list(self.parties),
            "active": self.active,
            "mode": self.mode,
            "intersection_size": self.intersection_size,
            "input_sizes": dict(self.input_sizes),
            "pairwise_sizes": self.pairwise_sizes,
            "timings": {p: dict(t) for p, t in self.timings.items()},
            "bytes_per_link": dict(self.bytes_per_link),
            "messages_per_link": dict(self.messages_per_link),
            "total_bytes": self.total_bytes,
            "rounds": self.rounds,
            "wall_seconds": self.wall_seconds,
            "workers": self.workers,
            **self.extra,
        }


class _Ledger:
    """Counts bytes and messages per directed link and accumulates party wall time."""

    def __init__(self, parties: Sequence[str], tap: Callable[[str, str, bytes], None] | None = None) -> None:
        self.tap = tap
        self.bytes: dict[str, int] = {}
        self.messages: dict[str, int] = {}
        self.wall = dict.fromkeys(parties, 0.0)

    def send(self, src: str, dst: str, data: bytes) -> bytes:
        link = f"{src}->{dst}"
        self.bytes[link] = self.bytes.get(link, 0) + len(data)
        self.messages[link] = self.messages.get(link, 0) + 1
        data = bytes(data)  # what crosses the wire is a plain byte string
        if self.tap is not None:
            self.tap(src, dst, data)
        return data  # what crosses the wire is a plain byte string

    def timed(self, party: str, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """``fn(*args, **kwargs)``, its wall time added to ``party``'s."""
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.wall[party] += time.perf_counter() - t0


def _run_pair(ledger: _Ledger, a_name: str, init: PSIInitiator, b_name: str, resp: PSIResponder) -> int:
    """Drive one pairwise session to the end; return the number of messages sent.

    Each message is dropped as soon as its receiver has handled it (large runs hold one at a time).
    """
    msg: bytes | None = ledger.send(a_name, b_name, ledger.timed(a_name, init.start))
    count = 1
    while msg is not None:
        reply = ledger.timed(b_name, resp.handle, msg)
        msg = None
        if reply is None:
            break
        reply = ledger.send(b_name, a_name, reply)
        count += 1
        nxt = ledger.timed(a_name, init.handle, reply)
        reply = None
        msg = None if nxt is None else ledger.send(a_name, b_name, nxt)
        nxt = None
        count += msg is not None
    return count


def _outcome(side: _Side) -> PairOutcome:
    """What one side of a session learned; the runner reads it only after driving the session to its end."""
    return _known(side.outcome, "an outcome")


def _known(value: _T | None, what: str) -> _T:
    """``value``, which a finished session always sets in the mode it ran in."""
    if value is None:  # pragma: no cover - a bug in the runner, not a bad message
        raise OutOfOrderError(f"the PSI session ended without {what}")
    return value


def _party_timings(sides: Sequence[_Side], wall: float) -> dict[str, float]:
    t = {"hash": 0.0, "blind": 0.0, "curve_wall": 0.0, "codec": 0.0, "match": 0.0}
    items = points = 0
    for s in sides:
        t["hash"] += s.timers.hash_cpu
        t["blind"] += s.timers.blind_cpu
        t["curve_wall"] += s.timers.curve_wall
        t["codec"] += s.timers.codec
        t["match"] += s.timers.match
        items += s.timers.items_hashed
        points += s.timers.points_blinded
    t = {k: round(v, 6) for k, v in t.items()}
    t["total"] = round(wall, 6)
    t["items_hashed"] = items
    t["scalar_mults"] = points
    return t


@dataclass(frozen=True)
class _Party:
    """A party's IDs as the runner needs them: what to hash, and the input row of each (``None``: row i)."""

    items: Sequence[str] | IDSource
    rows: np.ndarray | None
    n_input: int


def _party(ids: PreparedIDs | IDSource) -> _Party:
    if isinstance(ids, PreparedIDs):
        return _Party(ids.items, ids.rows, ids.n_input)
    return _Party(ids, None, len(ids))


def _rows(prepared: _Party, positions: np.ndarray | None) -> np.ndarray | None:
    if positions is None:
        return None
    return np.asarray(positions, dtype=np.int64) if prepared.rows is None else prepared.rows[positions]


def _unaligned(prepared: _Party, rows: np.ndarray | None) -> np.ndarray | None:
    if rows is None:
        return None
    mask = np.ones(prepared.n_input, dtype=bool)
    mask[rows] = False
    return np.flatnonzero(mask)


def check_workers(workers: int | None) -> None:
    """``workers`` is ``None`` (all CPUs) or a positive number of processes."""
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise PSIConfigError(f"workers must be a positive integer or None (all CPUs), got {workers!r}")


def _engine_for(executor: ExecutorConfig | TaskExecutor | None, workers: int | None,
                stack: ExitStack) -> CurveEngine:
    """A curve engine on the executor asked for; what this creates is closed with ``stack``."""
    if executor is None:
        return stack.enter_context(CurveEngine(workers))
    if isinstance(executor, ExecutorConfig):
        if workers is not None and executor.workers is None:
            executor = ExecutorConfig(executor.kind, workers, executor.ray_address)
        created = create_executor(executor, preload=["psi.curve"])
        stack.callback(created.close)
        executor = created
    return CurveEngine(executor=executor)


def run_prepared(
    prepared: Mapping[str, PreparedIDs | IDSource],
    *,
    active: str | None = None,
    config: PSIConfig | None = None,
    workers: int | None = None,
    progress: bool = False,
    urandom: Callable[[int], bytes] = os.urandom,
    engine: CurveEngine | None = None,
    tap: Callable[[str, str, bytes], None] | None = None,
    executor: ExecutorConfig | TaskExecutor | None = None,
) -> PSIResult:
    """Run the PSI on already prepared (normalised, de-duplicated) IDs. See :func:`run_local`.

    A party's IDs may also be an :class:`~psi.source.IDSource` (e.g. :class:`~psi.source.ParquetIDs`),
    read in chunks so its IDs are never all in memory as strings; rows are then the source's order.
    ``executor`` runs the curve work on a process pool (default), inline or on Ray
    (:mod:`psi.executors`). ``tap(src, dst, data)`` sees every serialised message (tests use it to
    inspect the wire).
    """
    config = config or PSIConfig()
    parties = {name: _party(ids) for name, ids in prepared.items()}
    names = tuple(validate_party_name(n) for n in prepared)
    if len(names) < 2:
        raise PSIConfigError("PSI needs at least two parties")
    check_workers(workers)
    active = names[0] if active is None else active
    if active not in parties:
        raise PSIConfigError(f"active party {active!r} is not among the parties {list(names)}")
    passives = [n for n in names if n != active]
    if config.mode is Mode.CARDINALITY and len(passives) > 1:
        raise PSIConfigError(
            "mode 'cardinality' is defined for two parties: the shuffled pairwise answers "
            "cannot be combined into an N-party count"
        )
    align = config.mode is Mode.BOTH and len(passives) > 1
    ledger = _Ledger(names, tap)
    t_start = time.perf_counter()
    with ExitStack() as stack:
        bar = None
        if engine is None:
            engine = _engine_for(executor, workers, stack)
        if progress:
            from rich.progress import Progress

            n_a = len(parties[active].items)
            total = sum(2 * n_a + 2 * len(parties[p].items) for p in passives)
            bar = stack.enter_context(Progress(transient=True))
            task = bar.add_task("PSI curve operations", total=total)
            engine.on_progress = lambda k: bar.advance(task, k)
        sides: dict[str, list[_Side]] = {n: [] for n in names}
        inits: dict[str, PSIInitiator] = {}
        resps: dict[str, PSIResponder] = {}
        flights = 0
        for p in passives:
            init = PSIInitiator(parties[active].items, config, engine, urandom=urandom, align_follows=align)
            resp = PSIResponder(parties[p].items, config, engine, urandom=urandom)
            flights = max(flights, _run_pair(ledger, active, init, p, resp))
            inits[p], resps[p] = init, resp
            sides[active].append(init)
            sides[p].append(resp)
        global_active: np.ndarray | None = None
        if config.mode is Mode.CARDINALITY:
            size = _known(_outcome(inits[passives[0]]).size, "a size")
        else:
            pair_pos = [_known(_outcome(inits[p]).positions, "positions") for p in passives]
            global_active, orders = ledger.timed(active, global_alignment, pair_pos)
            size = len(global_active)
            if align:
                for p, order in zip(passives, orders, strict=True):
                    data = ledger.send(active, p, ledger.timed(active, inits[p].align, order))
                    ledger.timed(p, resps[p].handle, data)
                flights += 1
        if engine.on_progress is not None and bar is not None:
            engine.on_progress = None
    wall = time.perf_counter() - t_start

    aligned: dict[str, np.ndarray | None] = {}
    pairwise: dict[str, PairwiseResult] = {}
    aligned[active] = _rows(parties[active], global_active)
    for p in passives:
        io, ro = _outcome(inits[p]), _outcome(resps[p])
        pairwise[p] = PairwiseResult(
            active,
            p,
            _known(io.size, "a size"),
            _rows(parties[active], io.positions),
            _rows(parties[p], ro.positions),
        )
        if config.mode is not Mode.BOTH:
            aligned[p] = None
        elif align:
            aligned[p] = _rows(parties[p], ro.global_positions)
        else:
            aligned[p] = _rows(parties[p], ro.positions)
    return PSIResult(
        parties=names,
        active=active,
        mode=config.mode.value,
        intersection_size=int(size),
        input_sizes={n: parties[n].n_input for n in names},
        aligned={n: aligned[n] for n in names},
        unaligned={n: _unaligned(parties[n], aligned[n]) for n in names},
        pairwise=pairwise,
        timings={n: _party_timings(sides[n], ledger.wall[n]) for n in names},
        bytes_per_link=dict(ledger.bytes),
        messages_per_link=dict(ledger.messages),
        rounds=flights,
        wall_seconds=round(wall, 6),
        workers=engine.workers,
        extra={"executor": engine.executor_name},
    )


def run_local(
    party_ids: Mapping[str, Sequence[object]],
    *,
    active: str | None = None,
    mode: str = "both",
    normalize: Sequence[str] | str = (),
    duplicates: str = "error",
    digest_len: int = 16,
    workers: int | None = None,
    progress: bool = False,
    urandom: Callable[[int], bytes] = os.urandom,
    tap: Callable[[str, str, bytes], None] | None = None,
    executor: ExecutorConfig | TaskExecutor | None = None,
) -> PSIResult:
    """Run ECDH PSI among all parties in this process (each with its own fresh keys).

    ``party_ids`` maps party name to its IDs (strings; integers become decimal strings); the
    first party is the active one unless ``active`` is given. ``mode``: ``"both"`` (every party
    learns its aligned rows), ``"active_only"`` (only the active party does) or
    ``"cardinality"`` (two parties; the active party learns only the size). ``normalize``:
    any of ``strip``, ``casefold``, ``nfc``. ``duplicates``: ``"error"`` or ``"keep_first"``.
    ``workers``: processes for curve work (``None``: all CPUs; ``1``: in-process).
    ``executor``: where curve work runs (an :class:`~psi.executors.ExecutorConfig`, e.g.
    ``ExecutorConfig("ray", ray_address="auto")``, or an executor to share); default a process pool.
    """
    config = PSIConfig(mode=mode, digest_len=digest_len, normalize=normalize)
    for name in party_ids:
        validate_party_name(name)
    check_workers(workers)
    with ExitStack() as stack:
        engine = _engine_for(executor, workers, stack)
        engine.warm_up(sum(len(ids) for ids in party_ids.values()))  # workers boot while the IDs are prepared
        prepared = {
            name: prepare_ids(ids, config.normalize, duplicates, source=f"party {name!r}")
            for name, ids in party_ids.items()
        }
        return run_prepared(
            prepared,
            active=active,
            config=config,
            workers=workers,
            progress=progress,
            urandom=urandom,
            tap=tap,
            engine=engine,
        )

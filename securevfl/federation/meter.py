"""The Meter: what one party spent on compute, cryptography, serialisation and communication.

Time is attributed *exclusively* to the innermost open category, so a crypto call made inside a
compute block counts as crypto, not twice. Model compute on CUDA is measured correctly by calling
the injected ``synchronize`` before each clock reading (asynchronous kernels would otherwise be
charged to whoever synchronises next). Messages are recorded per directed link ``"SRC->DST"``
together with their Lamport depth, from which communication rounds and the simulated network time
follow (see :class:`NetworkModel`). A run is cut into phases (``setup``, then the method's training
phases such as ``train`` or ``pretrain``/``finetune``, then ``evaluate``: :meth:`Meter.enter_phase`),
and each phase's wall time and sent bytes are recorded too.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from securevfl.errors import ConfigError
from securevfl.settings import setting

COMPUTE = "compute"
SERIALIZE = "serialize"
SETUP = "setup"
CRYPTO_PREFIX = "crypto."


@dataclass(frozen=True)
class NetworkModel:
    """Bandwidth and latency of every link, to turn byte and round counts into transfer time.

    Messages of the same Lamport depth are in flight at the same time, so one depth level costs
    one latency plus the largest per-link transfer at that level; levels add up.
    """

    bandwidth_mbps: float = setting(100.0, help="Simulated link bandwidth, Mbit/s.")
    latency_ms: float = setting(10.0, help="Simulated link latency, ms.")

    def __post_init__(self) -> None:
        if not self.bandwidth_mbps > 0:
            raise ConfigError(f"bandwidth_mbps must be > 0, got {self.bandwidth_mbps}")
        if not self.latency_ms >= 0:
            raise ConfigError(f"latency_ms must be >= 0, got {self.latency_ms}")

    def transfer_seconds(self, depth_link_bytes: Mapping[int, Mapping[str, int]]) -> float:
        """Critical-path transfer time for bytes grouped by depth, then by link."""
        return self.path_seconds(*critical_path(depth_link_bytes))

    def path_seconds(self, levels: int, critical_bytes: int) -> float:
        """Transfer time of a critical path of ``levels`` depth levels carrying ``critical_bytes`` in all.

        The report keeps both numbers (``cost.network_path``), so a run's simulated network time can be
        recomputed for any other bandwidth and latency without running it again (``securevfl bench``).
        """
        return levels * self.latency_ms / 1e3 + critical_bytes * 8.0 / (self.bandwidth_mbps * 1e6)


def critical_path(depth_link_bytes: Mapping[int, Mapping[str, int]]) -> tuple[int, int]:
    """Depth levels with messages, and the sum over levels of the largest per-link byte count."""
    levels = len(depth_link_bytes)
    return levels, sum(max(links.values(), default=0) for links in depth_link_bytes.values())


def link_transfer_seconds(depth_link_bytes: Mapping[int, Mapping[str, int]], links: Mapping[str, NetworkModel],
                          default: NetworkModel) -> float:
    """Critical-path transfer time when links differ: each depth level costs its slowest link.

    A link ``"SRC->DST"`` uses ``links[link]`` (else ``default``); a level costs the largest
    ``latency + bytes / bandwidth`` over its links. With every link on one model this equals
    :meth:`NetworkModel.transfer_seconds` (heterogeneous devices: EASTER's Table VII).
    """
    total = 0.0
    for level in depth_link_bytes.values():
        total += max((links.get(link, default).path_seconds(1, nbytes) for link, nbytes in level.items()),
                     default=0.0)
    return total


@dataclass
class MeterSnapshot:
    """Plain numbers copied out of one or more meters (safe to keep after the run)."""

    seconds: dict[str, float] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    messages: dict[str, int] = field(default_factory=dict)
    depth_link_bytes: dict[int, dict[str, int]] = field(default_factory=dict)
    phase_seconds: dict[str, float] = field(default_factory=dict)  # wall time per phase of the run
    phase_bytes: dict[str, int] = field(default_factory=dict)  # bytes this party sent per phase

    @property
    def rounds(self) -> int:
        """Communication rounds: the longest chain of causally dependent messages."""
        return max(self.depth_link_bytes, default=0)

    @property
    def compute_s(self) -> float:
        return self.seconds.get(COMPUTE, 0.0)

    @property
    def serialize_s(self) -> float:
        return self.seconds.get(SERIALIZE, 0.0)

    @property
    def crypto_s(self) -> dict[str, float]:
        return {
            k[len(CRYPTO_PREFIX) :]: v for k, v in sorted(self.seconds.items()) if k.startswith(CRYPTO_PREFIX)
        }

    def to_wire(self) -> dict[str, Any]:
        """Plain, codec-safe form (string keys only) to send a party's costs to the active party."""
        return {"seconds": dict(self.seconds), "bytes": dict(self.bytes), "messages": dict(self.messages),
                "depth_link_bytes": [[d, dict(links)] for d, links in sorted(self.depth_link_bytes.items())],
                "phase_seconds": dict(self.phase_seconds), "phase_bytes": dict(self.phase_bytes)}

    @classmethod
    def from_wire(cls, message: Any, sender: str) -> MeterSnapshot:
        """Inverse of :meth:`to_wire`; anything malformed is a ProtocolError naming ``sender``."""
        from securevfl.errors import ProtocolError

        def numbers(value: Any, kind: type, what: str) -> dict[str, Any]:
            if not isinstance(value, dict) or not all(
                    isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
                    and (kind is float or isinstance(v, int)) for k, v in value.items()):
                raise ProtocolError(f"malformed cost summary from {sender}: {what}")
            return {k: kind(v) for k, v in value.items()}

        if not isinstance(message, dict) or set(message) != {"seconds", "bytes", "messages", "depth_link_bytes",
                                                              "phase_seconds", "phase_bytes"}:
            raise ProtocolError(f"malformed cost summary from {sender}")
        depths = message["depth_link_bytes"]
        if not isinstance(depths, list) or not all(
                isinstance(e, list) and len(e) == 2 and isinstance(e[0], int) and not isinstance(e[0], bool)
                for e in depths):
            raise ProtocolError(f"malformed cost summary from {sender}: depth_link_bytes")
        return cls(numbers(message["seconds"], float, "seconds"), numbers(message["bytes"], int, "bytes"),
                   numbers(message["messages"], int, "messages"),
                   {d: numbers(links, int, "depth_link_bytes") for d, links in depths},
                   numbers(message["phase_seconds"], float, "phase_seconds"),
                   numbers(message["phase_bytes"], int, "phase_bytes"))

    def merged(self, other: MeterSnapshot) -> MeterSnapshot:
        """Sum of two snapshots (times and counts add; depth maps merge per link)."""
        out = MeterSnapshot(dict(self.seconds), dict(self.bytes), dict(self.messages),
                            {d: dict(links) for d, links in self.depth_link_bytes.items()},
                            dict(self.phase_seconds), dict(self.phase_bytes))
        for k, v in other.seconds.items():
            out.seconds[k] = out.seconds.get(k, 0.0) + v
        for k, v in other.phase_seconds.items():
            out.phase_seconds[k] = out.phase_seconds.get(k, 0.0) + v
        for k, v in other.phase_bytes.items():
            out.phase_bytes[k] = out.phase_bytes.get(k, 0) + v
        for k, v in other.bytes.items():
            out.bytes[k] = out.bytes.get(k, 0) + v
        for k, v in other.messages.items():
            out.messages[k] = out.messages.get(k, 0) + v
        for d, links in other.depth_link_bytes.items():
            slot = out.depth_link_bytes.setdefault(d, {})
            for k, v in links.items():
                slot[k] = slot.get(k, 0) + v
        return out


class _Block:
    """A measured block (what :meth:`Meter.measure` returns).

    Its category, and since when its own (exclusive) time runs while it is the innermost open
    block. A plain class, not a generator-based context manager: the runtime opens several per
    message.
    """

    __slots__ = ("meter", "category", "sync", "gated", "since")

    def __init__(self, meter: Meter, category: str, sync: bool, gated: bool) -> None:
        self.meter, self.category, self.sync, self.gated = meter, category, sync, gated
        self.since = 0.0

    def __enter__(self) -> None:
        meter = self.meter
        if self.gated:
            meter._enter_gate()
        if self.sync and meter._synchronize is not None:
            meter._synchronize()
        now = meter._clock()
        stack = meter._stack
        if stack:
            parent = stack[-1]
            meter._seconds[parent.category] += now - parent.since
        self.since = now
        stack.append(self)

    def __exit__(self, *exc: object) -> None:
        meter = self.meter
        try:
            if self.sync and meter._synchronize is not None:
                meter._synchronize()
            end = meter._clock()
            stack = meter._stack
            stack.pop()
            meter._seconds[self.category] += end - self.since
            if stack:
                stack[-1].since = end
        finally:
            if self.gated:
                meter._exit_gate()


class _Wait:
    """What :meth:`Meter.waiting` returns: stops the innermost block's clock and frees the compute gate."""

    __slots__ = ("meter", "depth")

    def __init__(self, meter: Meter) -> None:
        self.meter = meter
        self.depth = 0

    def __enter__(self) -> None:
        meter = self.meter
        if meter._stack:
            top = meter._stack[-1]
            meter._seconds[top.category] += meter._clock() - top.since
        self.depth = meter._gate_depth
        if meter._gate is not None and self.depth:
            meter._gate_depth = 0
            meter._gate.release()

    def __exit__(self, *exc: object) -> None:
        meter = self.meter
        if meter._gate is not None and self.depth:
            meter._gate.acquire()
            meter._gate_depth = self.depth
        if meter._stack:
            meter._stack[-1].since = meter._clock()


class Meter:
    """Per-party cost recorder. Thread-confined: one Meter belongs to one party's thread."""

    def __init__(
        self,
        party: str,
        *,
        clock: Callable[[], float] = time.perf_counter,
        synchronize: Callable[[], None] | None = None,
        compute_gate: threading.Lock | None = None,
    ) -> None:
        self.party = party
        self._gate = compute_gate
        self._gate_depth = 0
        self._clock = clock
        self._synchronize = synchronize
        self._seconds: dict[str, float] = defaultdict(float)
        self._bytes: dict[str, int] = defaultdict(int)
        self._messages: dict[str, int] = defaultdict(int)
        self._depth_link_bytes: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._stack: list[_Block] = []
        self._lock = threading.Lock()
        self._phase = SETUP
        self._phase_started = clock()
        self._phase_seconds: dict[str, float] = defaultdict(float)
        self._phase_bytes: dict[str, int] = defaultdict(int)

    # -- time ---------------------------------------------------------------------------------
    def measure(self, category: str, *, sync: bool = False) -> AbstractContextManager[None]:
        """Attribute the time spent inside the block to ``category`` (exclusive of inner blocks)."""
        return _Block(self, category, sync, False)

    def compute(self) -> AbstractContextManager[None]:
        """Model compute; synchronises the accelerator at both ends so kernels are charged here.

        With a ``compute_gate`` (the threaded runtime passes one lock to every party), one party
        computes at a time: party threads would otherwise fight over the interpreter lock on every
        small torch call, which made each party's compute several times slower than the same ops
        run alone. Waiting for the gate is not charged as compute.
        """
        return _Block(self, COMPUTE, True, self._gate is not None)

    def _enter_gate(self) -> None:
        if self._gate is not None:
            if self._gate_depth == 0:
                self._gate.acquire()
            self._gate_depth += 1

    def _exit_gate(self) -> None:
        if self._gate is not None:
            self._gate_depth -= 1
            if self._gate_depth == 0:
                self._gate.release()

    def waiting(self) -> AbstractContextManager[None]:
        """A receive: its wait is no category's time, and other parties may compute meanwhile.

        Inside an open block (a receive inside a compute block) the block's clock stops while this
        party waits, so the others' work is not charged to it; the compute gate is released too.
        """
        return _Wait(self)

    def crypto(self, primitive: str) -> AbstractContextManager[None]:
        """Cryptography, by primitive name such as ``secagg.mask`` or ``paillier.encrypt``."""
        return self.measure(CRYPTO_PREFIX + primitive)

    def serialize(self) -> AbstractContextManager[None]:
        """Encoding and decoding of wire messages."""
        return self.measure(SERIALIZE)

    def add_seconds(self, category: str, seconds: float) -> None:
        """Record time measured elsewhere (for example in a worker process)."""
        self._seconds[category] += seconds

    def enter_phase(self, name: str) -> None:
        """From now on, attribute wall time and sent bytes to phase ``name`` (the run starts in ``setup``)."""
        now = self._clock()
        with self._lock:
            self._phase_seconds[self._phase] += now - self._phase_started
            self._phase, self._phase_started = name, now

    # -- communication ------------------------------------------------------------------------
    def record_message(self, src: str, dst: str, nbytes: int, depth: int) -> None:
        """Record one message of ``nbytes`` sent on ``src->dst`` at Lamport depth ``depth``."""
        link = f"{src}->{dst}"
        with self._lock:
            if src == self.party:
                self._phase_bytes[self._phase] += nbytes
            self._bytes[link] += nbytes
            self._messages[link] += 1
            self._depth_link_bytes[depth][link] += nbytes

    def snapshot(self) -> MeterSnapshot:
        """Copy of everything recorded so far."""
        with self._lock:
            phase_seconds = dict(self._phase_seconds)
            phase_seconds[self._phase] = phase_seconds.get(self._phase, 0.0) + self._clock() - self._phase_started
            return MeterSnapshot(
                seconds=dict(self._seconds),
                bytes=dict(self._bytes),
                messages=dict(self._messages),
                depth_link_bytes={d: dict(links) for d, links in self._depth_link_bytes.items()},
                phase_seconds=phase_seconds,
                phase_bytes=dict(self._phase_bytes),
            )

"""Repeated measurements: every benchmark figure keeps its repetitions, their minimum and median.

A :class:`Figure` is one named number measured ``repeats`` times. The minimum is the best the
machine did (interference from other jobs only ever adds time); the median is the typical run; the
gap between them (``spread``) is the noise that :mod:`securevfl.bench.compare` allows before it
calls a change a regression. Peers are timed *interleaved* with ours (A, B, A, B, ...) so that a
burst of load on a shared machine hits both, and a ratio's samples pair repetition ``i`` of one
side with repetition ``i`` of the other.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

LOWER, HIGHER = "lower", "higher"


@dataclass(frozen=True)
class Figure:
    """One measured quantity: its samples (one per repetition), unit and which direction is better."""

    name: str
    unit: str
    samples: tuple[float, ...]
    better: str = LOWER
    note: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.samples:
            raise ValueError(f"figure {self.name!r} has no samples")
        if self.better not in (LOWER, HIGHER):
            raise ValueError(f"figure {self.name!r}: better must be {LOWER!r} or {HIGHER!r}")

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def max(self) -> float:
        return max(self.samples)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def best(self) -> float:
        """The best repetition: the minimum of a time, the maximum of a rate or a speed-up."""
        return self.min if self.better == LOWER else self.max

    @property
    def spread(self) -> float:
        """Distance from the median to the best repetition (the run-to-run noise, >= 0)."""
        return abs(self.median - self.best)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"unit": self.unit, "better": self.better, "repetitions": len(self.samples),
                               "samples": list(self.samples), "min": self.min, "median": self.median,
                               "max": self.max}
        if self.note:
            out["note"] = self.note
        if self.extra:
            out["extra"] = dict(self.extra)
        return out


def time_calls(fn: Callable[[], object], repeats: int, warmup: int = 1) -> tuple[float, ...]:
    """Seconds per call of ``fn`` for ``repeats`` calls, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return tuple(samples)


def interleaved(rounds: int, jobs: Mapping[str, Callable[[], object]], warmup: int = 0) -> dict[str, tuple[float, ...]]:
    """Seconds per call of every job over ``rounds`` rounds that alternate the jobs (fair under load)."""
    for _ in range(warmup):
        for fn in jobs.values():
            fn()
    samples: dict[str, list[float]] = {key: [] for key in jobs}
    for _ in range(rounds):
        for key, fn in jobs.items():
            start = time.perf_counter()
            fn()
            samples[key].append(time.perf_counter() - start)
    return {key: tuple(v) for key, v in samples.items()}


def per_second(count: int, seconds: Sequence[float]) -> tuple[float, ...]:
    """Items per second for each repetition that processed ``count`` items."""
    return tuple(count / s for s in seconds)


def ratios(numerator: Sequence[float], denominator: Sequence[float]) -> tuple[float, ...]:
    """Repetition-wise ratios of two paired sample lists (interleaved runs pair naturally)."""
    if len(numerator) != len(denominator):
        raise ValueError("paired samples must have the same number of repetitions")
    return tuple(a / b for a, b in zip(numerator, denominator))


def cpu_seconds() -> float:
    """CPU seconds this process (every thread: in-process parties are threads) and its worker processes used so far.

    This process's own time comes from :func:`time.process_time` (nanosecond clock); worker processes
    (Paillier's pool on big batches, PSI workers) add their user + system time, the live ones through
    psutil and the finished ones through the children's times the kernel kept. Unlike wall time, CPU
    time does not grow while another job holds the cores, so it is the steadier figure on a loaded machine
    (contention for caches and memory bandwidth still inflates it a little).
    """
    import psutil

    me = psutil.Process()
    own = me.cpu_times()
    total = time.process_time() + own.children_user + own.children_system
    for child in me.children(recursive=True):
        try:
            t = child.cpu_times()
        except psutil.Error:  # it ended between the listing and the read
            continue
        total += t.user + t.system
    return total


def best_rate(count: int, fn: Callable[[], object], repeat: int = 1) -> float:
    """Items per second for ``fn`` processing ``count`` items (best of ``repeat``)."""
    return count / min(time_calls(fn, repeat, warmup=0))

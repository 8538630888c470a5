"""Is a measured difference real? Two conditions' samples -> the difference, a 95 % interval and a verdict.

:func:`difference` compares condition A (a privacy option's epoch times, the deployed run's) with
condition B (the ``none`` baseline, the in-process run) and says whether A is reliably **above** B,
reliably **below** it, or **within noise** (the interval includes zero); with fewer than two samples
on a side there is no interval at all (**too few repetitions**). Only "above" or "below" may be
stated as a difference; a report prints "within noise" and the interval otherwise.

How the interval is made, and why:

* The estimate is a difference (``median(A) - median(B)``) or a relative one
  (``median(A) / median(B) - 1``) of **medians**: the median shrugs off the odd epoch a burst of
  load slowed down, and unlike the minimum its sampling spread can be estimated by resampling
  (the bootstrap is not valid for an extreme such as the minimum).
* The interval is a **bootstrap percentile** interval: the samples are resampled with replacement
  ``rounds`` times and the 2.5 and 97.5 percentiles of the resampled estimate are its ends. It
  assumes nothing about the shape of the noise (timings are skewed: load only ever adds time).
  With two or three samples a side the percentiles land on the extreme combinations, so the
  interval is the conservative range bound ``[min A / max B - 1, max A / min B - 1]``.
* Samples from several **runs** (:func:`difference_of_runs`: the epochs of each repeated training run)
  are resampled in two stages, runs first and epochs within the chosen runs second, because a
  burst of load slows every epoch of the run it hits: epochs of one run are not independent
  repetitions, runs are.
* **Paired** samples (interleaved timings A, B, A, B, ...: repetition ``i`` of both sides shared
  the same moment's load) are resampled as pairs, and the estimate is the median of the pairwise
  differences (or ratios, minus one).
* Deterministic: the resampling draws from a ``numpy.random.Generator`` seeded with the fixed
  constant :data:`SEED` (nothing here is secret), so the same samples give the same interval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

ABOVE, BELOW, NOISE, TOO_FEW = "above", "below", "within noise", "too few repetitions"
VERDICTS = (ABOVE, BELOW, NOISE, TOO_FEW)
#: Seed of the resampling generator: fixed, so that an interval is a function of the samples alone.
SEED = 20_241_128
ROUNDS = 2_000
LEVEL = 0.95


@dataclass(frozen=True)
class Difference:
    """A compared with B: the estimate, its interval ``[low, high]``, and what that says.

    ``relative``: the figures are fractions (``median(A) / median(B) - 1``), not differences in the
    samples' unit. With :data:`TOO_FEW` samples ``low == high == estimate`` and nothing is claimed.
    """

    estimate: float
    low: float
    high: float
    verdict: str
    n_a: int
    n_b: int
    relative: bool = False
    paired: bool = False
    level: float = LEVEL

    @property
    def significant(self) -> bool:
        """Whether the interval excludes zero (reliably above or below)."""
        return self.verdict in (ABOVE, BELOW)

    def scaled(self, factor: float) -> Difference:
        """The same difference in other units (``100``: a relative difference in per cent)."""
        return Difference(self.estimate * factor, self.low * factor, self.high * factor, self.verdict, self.n_a,
                          self.n_b, self.relative, self.paired, self.level)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Difference:
        return cls(**{k: data[k] for k in ("estimate", "low", "high", "verdict", "n_a", "n_b") },
                   relative=bool(data.get("relative", False)), paired=bool(data.get("paired", False)),
                   level=float(data.get("level", LEVEL)))


def verdict(low: float, high: float) -> str:
    """``above`` when the interval lies above zero, ``below`` when below, ``within noise`` when it includes zero."""
    if low > 0:
        return ABOVE
    if high < 0:
        return BELOW
    return NOISE


def _estimate(a: np.ndarray, b: np.ndarray, relative: bool) -> np.ndarray:
    """Row-wise estimate of resampled samples (shape (rounds, n)) or of plain ones (shape (n,))."""
    ma, mb = np.nanmedian(a, axis=-1), np.nanmedian(b, axis=-1)
    return ma / mb - 1.0 if relative else ma - mb


def _resample_runs(runs: Sequence[Sequence[float]], rounds: int, rng: np.random.Generator) -> np.ndarray:
    """Two-stage bootstrap: ``rounds`` rows of runs drawn with replacement, epochs drawn within each (NaN-padded)."""
    width = max(len(r) for r in runs)
    table = np.full((len(runs), width), np.nan)
    for i, r in enumerate(runs):
        table[i, :len(r)] = r
    lengths = np.array([len(r) for r in runs])
    picked = rng.integers(0, len(runs), size=(rounds, len(runs)))
    positions = (rng.random((rounds, len(runs), width)) * lengths[picked][..., None]).astype(int)
    values = table[picked[..., None], positions]
    values[np.arange(width)[None, None, :] >= lengths[picked][..., None]] = np.nan  # a shorter run: fewer epochs
    return values.reshape(rounds, -1)


def _check(name: str, samples: Sequence[float]) -> None:
    if any(not math.isfinite(x) for x in samples):
        raise ValueError(f"{name}: samples must be finite numbers")


def difference_of_runs(a_runs: Sequence[Sequence[float]], b_runs: Sequence[Sequence[float]], *,
                       relative: bool = False, level: float = LEVEL, rounds: int = ROUNDS,
                       seed: int = SEED) -> Difference:
    """A vs B, each given as the samples of one or more runs (two-stage bootstrap; see the module text)."""
    a_runs = [list(r) for r in a_runs if len(r)]
    b_runs = [list(r) for r in b_runs if len(r)]
    a_flat = [x for r in a_runs for x in r]
    b_flat = [x for r in b_runs for x in r]
    _check("A", a_flat)
    _check("B", b_flat)
    if not a_flat or not b_flat:
        raise ValueError("both conditions need samples")
    if relative and min(b_flat) <= 0:
        raise ValueError("a relative difference needs a positive baseline")
    point = float(_estimate(np.array(a_flat), np.array(b_flat), relative))
    if len(a_flat) < 2 or len(b_flat) < 2:
        return Difference(point, point, point, TOO_FEW, len(a_flat), len(b_flat), relative, False, level)
    rng = np.random.default_rng(seed)
    boot = _estimate(_resample_runs(a_runs, rounds, rng), _resample_runs(b_runs, rounds, rng), relative)
    tail = 100.0 * (1.0 - level) / 2.0
    low, high = (float(v) for v in np.percentile(boot, [tail, 100.0 - tail]))
    low, high = min(low, point), max(high, point)  # the interval always holds the estimate
    return Difference(point, low, high, verdict(low, high), len(a_flat), len(b_flat), relative, False, level)


def difference(a: Sequence[float], b: Sequence[float], *, relative: bool = False, paired: bool = False,
               level: float = LEVEL, rounds: int = ROUNDS, seed: int = SEED) -> Difference:
    """A vs B from one list of samples each; ``paired``: sample ``i`` of A belongs with sample ``i`` of B."""
    if not paired:
        return difference_of_runs([a], [b], relative=relative, level=level, rounds=rounds, seed=seed)
    if len(a) != len(b):
        raise ValueError("paired samples must have the same number of repetitions")
    _check("A", a)
    _check("B", b)
    if not a:
        raise ValueError("both conditions need samples")
    xa, xb = np.asarray(a, float), np.asarray(b, float)
    if relative and xb.min() <= 0:
        raise ValueError("a relative difference needs a positive baseline")
    per_pair = xa / xb - 1.0 if relative else xa - xb
    point = float(np.median(per_pair))
    if len(per_pair) < 2:
        return Difference(point, point, point, TOO_FEW, len(a), len(b), relative, True, level)
    idx = np.random.default_rng(seed).integers(0, len(per_pair), size=(rounds, len(per_pair)))
    boot = np.median(per_pair[idx], axis=1)
    tail = 100.0 * (1.0 - level) / 2.0
    low, high = (float(v) for v in np.percentile(boot, [tail, 100.0 - tail]))
    low, high = min(low, point), max(high, point)
    return Difference(point, low, high, verdict(low, high), len(a), len(b), relative, True, level)


def describe(d: Difference | Mapping[str, Any] | None, fmt: str = "{:+.1f}", unit: str = "") -> str:
    """A table cell: ``+12.3 % [+8.1, +16.0]``, ``within noise (-3.1 … +4.2 %)``, ``one sample: +5.0 %``."""
    if d is None:
        return "-"
    if not isinstance(d, Difference):
        d = Difference.from_dict(d)
    u = f" {unit}" if unit else ""
    if d.verdict == TOO_FEW:
        return f"{fmt.format(d.estimate)}{u} (too few repetitions for an interval)"
    if d.verdict == NOISE:
        return f"within noise ({fmt.format(d.low)} … {fmt.format(d.high)}{u})"
    return f"{fmt.format(d.estimate)}{u} [{fmt.format(d.low)}, {fmt.format(d.high)}]"

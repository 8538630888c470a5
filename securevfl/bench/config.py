"""What a ``securevfl bench`` run measures, and how big: a frozen, validated configuration.

Three sizes: ``tiny`` (seconds; for tests), ``quick`` (about 3 minutes on 2 cores) and ``full`` (the
complete matrix: larger sets, more repetitions, parties 2..10). Everything the CLI accepts is a field
here, so the Python API (:func:`securevfl.bench.run_bench`) takes exactly what the command takes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from securevfl.bench.coverage import BREAST_CANCER, QUICK, Case
from securevfl.errors import ConfigError
from securevfl.federation.meter import NetworkModel

SECTIONS = ("primitives", "methods", "scaling", "network", "predict", "secureboost", "coverage", "environment")
PRIVACY = ("none", "dh", "pairwise", "paillier")
#: Named links (both ends of the 10-1000 Mbit/s, 1-100 ms range the network section sweeps, and between).
NETWORK_PRESETS: dict[str, NetworkModel] = {
    "lan": NetworkModel(bandwidth_mbps=1000.0, latency_ms=1.0),
    "wan": NetworkModel(bandwidth_mbps=100.0, latency_ms=20.0),
    "intercontinental": NetworkModel(bandwidth_mbps=10.0, latency_ms=100.0),
}


@dataclass(frozen=True)
class Sizes:
    """How much work each measurement does."""

    repeats: int  # repetitions of every timed figure (PSI, Paillier rounds, masks, key agreement)
    psi_sizes: tuple[int, ...]  # IDs per party, ours vs openmined-psi
    psi_scaling_sizes: tuple[int, ...]  # extra sizes for the log-log fit (ours only)
    paillier_scale: int  # multiplies the Paillier operation counts (1: about 10 s for both libraries)
    mask_repeats: int  # repetitions of one (128, 128) mask expansion / key exchange
    epochs: int
    paillier_batches: tuple[int, ...]  # batch sizes of the Paillier aggregation round
    paillier_rounds: int
    wire_epochs: int = 0  # epochs of the deployed-vs-in-process SplitNN run (0: not run)
    method_rounds: int = 1  # runs of every method x privacy cell, alternating order (section 2's repetitions)
    predict_rows: int = 2_000  # rows scored by the predict section (a saved model against the floor)
    # the predict section's online part (securevfl.bench.serving.measure_online; 0 rows: not run)
    serving_rows: int = 2_000  # rows each `party --serve` process holds
    serving_duration_s: float = 3.0  # seconds measured per cell (after a warm-up of a third of it, at most 1 s)
    serving_nowait: bool = False  # also 8 clients x 1 row on a service with --batch-wait-ms 0 (batching_gain)
    # the secureboost section (securevfl.bench.secureboost; 2048-bit keys at every size)
    secureboost_rows: int = 3_000  # generated rows of the fast run (80 % train)
    secureboost_trees: int = 2
    secureboost_depth: int = 3
    secureboost_plain_rows: int = 500  # rows of the straightforward SecureBoost (1 tree) and the fast run beside it
    secureboost_features: int = 10
    secureboost_max_bins: int = 32
    secureboost_workers: int = 2  # processes per party (tiny: 1, no worker processes)
    secureboost_rate_scale: float = 0.5  # work of the per-operation rate measurements
    # the coverage section (securevfl.bench.coverage): (dataset, parties, split, rows kept, epochs) x p x seed
    coverage_cases: tuple[Case, ...] = (BREAST_CANCER,)
    coverage_coverages: tuple[float, ...] = (1.0, 0.5)  # each passive party's chance of holding a row
    coverage_seeds: tuple[int, ...] = (0,)


SIZES: dict[str, Sizes] = {
    "tiny": Sizes(repeats=2, psi_sizes=(200,), psi_scaling_sizes=(100,), paillier_scale=0, mask_repeats=5,
                  epochs=1, paillier_batches=(2, 4), paillier_rounds=1, wire_epochs=0, predict_rows=2_000,
                  serving_rows=500, serving_duration_s=0.5,
                  secureboost_rows=400, secureboost_trees=2, secureboost_depth=2, secureboost_plain_rows=100,
                  secureboost_features=4, secureboost_max_bins=8, secureboost_workers=1, secureboost_rate_scale=0.05,
                  coverage_cases=(("breast-cancer", 3, "random", None, 2),), coverage_coverages=(0.5,)),
    "quick": Sizes(repeats=3, psi_sizes=(2_000, 10_000), psi_scaling_sizes=(1_000, 5_000), paillier_scale=1,
                   mask_repeats=50, epochs=4, paillier_batches=(16, 64, 128), paillier_rounds=2, wire_epochs=5,
                   method_rounds=2, predict_rows=20_000),
    "full": Sizes(repeats=5, psi_sizes=(10_000, 100_000), psi_scaling_sizes=(1_000, 3_000, 30_000, 300_000),
                  paillier_scale=4, mask_repeats=200, epochs=5, paillier_batches=(16, 32, 64, 128, 256),
                  paillier_rounds=3, wire_epochs=8, method_rounds=3, predict_rows=200_000, serving_rows=20_000,
                  serving_duration_s=5.0, serving_nowait=True, secureboost_rows=20_000,
                  secureboost_trees=3, secureboost_depth=4, secureboost_plain_rows=2_000, secureboost_features=20,
                  secureboost_rate_scale=1.0, coverage_cases=QUICK),
}
DEFAULT_PARTIES = {"tiny": (2, 3), "quick": (2, 4, 8), "full": (2, 4, 6, 8, 10)}
DEFAULT_METHODS = ("splitnn", "easter", "aggvfl")


@dataclass(frozen=True)
class BenchConfig:
    """One benchmark run. ``size``: tiny | quick | full; the rest narrows or widens the matrix."""

    size: str = "quick"
    methods: tuple[str, ...] = DEFAULT_METHODS
    privacy: tuple[str, ...] = PRIVACY
    parties: tuple[int, ...] = ()  # secure-aggregation scaling (default per size)
    method_parties: int = 4  # parties of the method runs (1 active + passives)
    networks: tuple[str, ...] = tuple(NETWORK_PRESETS)
    custom_network: NetworkModel | None = None
    dataset: str = "breast-cancer"
    device: str = "auto"
    batch_size: int = 32
    sections: tuple[str, ...] = SECTIONS
    psi_workers: int | None = None  # processes for our PSI's curve work (None: all CPUs)
    seed: int = 0
    sizes_override: Sizes | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.size not in SIZES:
            raise ConfigError(f"unknown bench size {self.size!r}; use one of {', '.join(SIZES)}")
        unknown = [p for p in self.privacy if p not in PRIVACY]
        if unknown:
            raise ConfigError(f"unknown privacy option(s) {', '.join(unknown)}; use {', '.join(PRIVACY)}")
        unknown = [n for n in self.networks if n not in NETWORK_PRESETS]
        if unknown:
            raise ConfigError(f"unknown network preset(s) {', '.join(unknown)}; use {', '.join(NETWORK_PRESETS)}")
        unknown = [s for s in self.sections if s not in SECTIONS]
        if unknown:
            raise ConfigError(f"unknown section(s) {', '.join(unknown)}; use {', '.join(SECTIONS)}")
        if not self.methods:
            raise ConfigError("--methods names no method")
        if any(p < 2 for p in self.parties):
            raise ConfigError(f"--parties must be >= 2 each, got {self.parties}")
        if self.method_parties < 2:
            raise ConfigError(f"method_parties must be >= 2, got {self.method_parties}")
        from securevfl.methods import method_names

        unknown = [m for m in self.methods if m not in method_names()]
        if unknown:
            raise ConfigError(f"unknown method(s) {', '.join(unknown)}; use {', '.join(method_names())}")

    @property
    def sizes(self) -> Sizes:
        return self.sizes_override or SIZES[self.size]

    @property
    def scaling_parties(self) -> tuple[int, ...]:
        return self.parties or DEFAULT_PARTIES[self.size]

    def network_models(self) -> dict[str, NetworkModel]:
        """The presets asked for, plus ``custom`` when a bandwidth / latency was given."""
        out = {name: NETWORK_PRESETS[name] for name in self.networks}
        if self.custom_network is not None:
            out["custom"] = self.custom_network
        return out

    def with_size(self, size: str) -> BenchConfig:
        return replace(self, size=size)

    def to_dict(self) -> dict[str, Any]:
        s = self.sizes
        return {"size": self.size, "methods": list(self.methods), "privacy": list(self.privacy),
                "scaling_parties": list(self.scaling_parties), "method_parties": self.method_parties,
                "networks": {k: {"bandwidth_mbps": m.bandwidth_mbps, "latency_ms": m.latency_ms}
                             for k, m in self.network_models().items()},
                "dataset": self.dataset, "device": self.device, "batch_size": self.batch_size,
                "sections": list(self.sections), "psi_workers": self.psi_workers, "seed": self.seed,
                "sizes": {k: list(v) if isinstance(v, tuple) else v for k, v in vars(s).items()}}

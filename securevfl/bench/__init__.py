"""``securevfl bench``: the crypto benchmark report (primitives vs peers, methods x privacy, scaling, network).

``run_bench(BenchConfig(size="quick"), "out/bench")`` writes ``results.json`` (every figure with its
repetitions, minimum and median, plus the environment), ``report.md``, a self-contained
``report.html`` and the PNGs; ``compare_files(old, new)`` compares two ``results.json``.
"""

from securevfl.bench.compare import compare_figures, compare_files
from securevfl.bench.config import NETWORK_PRESETS, PRIVACY, SECTIONS, BenchConfig, Sizes
from securevfl.bench.suite import run_bench

__all__ = ["NETWORK_PRESETS", "PRIVACY", "SECTIONS", "BenchConfig", "Sizes", "compare_figures", "compare_files",
           "run_bench"]

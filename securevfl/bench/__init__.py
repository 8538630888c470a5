"""``securevfl bench``: the crypto benchmark report (primitives vs peers, methods x privacy, scaling, network).

``run_bench(BenchConfig(size="quick"), "out/bench")`` writes ``results.json`` (every figure with its
repetitions, minimum and median, plus the environment), ``report.md``, a self-contained
``report.html`` and the PNGs; ``compare_files(old, new)`` compares two ``results.json``.

The names below load on first use, so that importing one light submodule (``securevfl.bench.results``
in a benchmark script) does not load the whole suite: worker processes re-import a script's top level,
and the suite (torch, matplotlib, every method) made a pool of two PSI workers ready after 3.5 s
instead of 0.3 s.
"""

from __future__ import annotations

from securevfl.lazy import lazy_attributes

_LAZY = {
    "compare_figures": "securevfl.bench.compare",
    "compare_files": "securevfl.bench.compare",
    "NETWORK_PRESETS": "securevfl.bench.config",
    "PRIVACY": "securevfl.bench.config",
    "SECTIONS": "securevfl.bench.config",
    "BenchConfig": "securevfl.bench.config",
    "Sizes": "securevfl.bench.config",
    "run_bench": "securevfl.bench.suite",
}


__getattr__ = lazy_attributes(__name__, _LAZY)


__all__ = ["NETWORK_PRESETS", "PRIVACY", "SECTIONS", "BenchConfig", "Sizes", "compare_figures", "compare_files",
           "run_bench"]

"""ECDH private set intersection (PSI) for aligning the rows of vertical-federated-learning parties.

Semi-honest Diffie-Hellman PSI on Curve25519 (X25519 over salted hash-to-curve of the IDs), with a
pure message-driven protocol core (:mod:`psi.protocol`), a versioned binary codec
(:mod:`psi.codec`), multi-process curve work (:mod:`psi.curve`), ID preparation (:mod:`psi.ids`),
file I/O (:mod:`psi.io`), chunked ID sources for streaming large files (:mod:`psi.source`),
pluggable executors for the curve work (process pool or Ray, :mod:`psi.executors`) and a
one-process runner for all parties (:mod:`psi.runner`).

The package stands alone: it imports neither torch nor ``securevfl``, and owns its errors
(:mod:`psi.errors`) and the party-name rule (:mod:`psi.checks`). The names below load their module
on first use, so ``import psi.errors`` or ``psi.checks`` costs no numpy or curve code.
See docs/psi.md for the security model and measurements.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .curve import BlindingKey, CurveEngine
    from .executors import ExecutorConfig, create_executor
    from .ids import NORMALIZATIONS, PreparedIDs, parse_normalize, prepare_ids
    from .io import read_ids, run_files, write_outputs
    from .protocol import Mode, PairOutcome, PSIConfig, PSIInitiator, PSIResponder
    from .runner import PairwiseResult, PSIResult, run_local, run_prepared
    from .source import ParquetIDs

_LAZY = {
    "BlindingKey": "psi.curve",
    "CurveEngine": "psi.curve",
    "ExecutorConfig": "psi.executors",
    "create_executor": "psi.executors",
    "ParquetIDs": "psi.source",
    "NORMALIZATIONS": "psi.ids",
    "PreparedIDs": "psi.ids",
    "parse_normalize": "psi.ids",
    "prepare_ids": "psi.ids",
    "read_ids": "psi.io",
    "run_files": "psi.io",
    "write_outputs": "psi.io",
    "Mode": "psi.protocol",
    "PairOutcome": "psi.protocol",
    "PSIConfig": "psi.protocol",
    "PSIInitiator": "psi.protocol",
    "PSIResponder": "psi.protocol",
    "PairwiseResult": "psi.runner",
    "PSIResult": "psi.runner",
    "run_local": "psi.runner",
    "run_prepared": "psi.runner",
}


_SUBMODULES = frozenset(
    {"checks", "codec", "curve", "errors", "executors", "ids", "io", "protocol", "runner", "source"}
)


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:  # ``import psi; psi.codec.decode(...)`` as before the names were lazy
        return import_module(f"psi.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'psi' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*__all__, *_SUBMODULES})


__all__ = [
    "BlindingKey",
    "CurveEngine",
    "ExecutorConfig",
    "Mode",
    "NORMALIZATIONS",
    "PSIConfig",
    "PSIInitiator",
    "PSIResponder",
    "PSIResult",
    "PairOutcome",
    "PairwiseResult",
    "ParquetIDs",
    "PreparedIDs",
    "create_executor",
    "parse_normalize",
    "prepare_ids",
    "read_ids",
    "run_files",
    "run_local",
    "run_prepared",
    "write_outputs",
]

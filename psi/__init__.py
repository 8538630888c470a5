"""ECDH private set intersection (PSI) for aligning the rows of vertical-federated-learning parties.

Semi-honest Diffie-Hellman PSI on Curve25519 (X25519 over salted hash-to-curve of the IDs), with a
pure message-driven protocol core (:mod:`psi.protocol`), a versioned binary codec
(:mod:`psi.codec`), multi-process curve work (:mod:`psi.curve`), ID preparation (:mod:`psi.ids`),
file I/O (:mod:`psi.io`) and a one-process runner for all parties (:mod:`psi.runner`).
This package does not import torch. See docs/psi.md for the security model and measurements.
"""

from .curve import BlindingKey, CurveEngine
from .ids import NORMALIZATIONS, PreparedIDs, parse_normalize, prepare_ids
from .io import read_ids, run_files, write_outputs
from .protocol import Mode, PairOutcome, PSIConfig, PSIInitiator, PSIResponder
from .runner import PairwiseResult, PSIResult, run_local, run_prepared

__all__ = [
    "BlindingKey",
    "CurveEngine",
    "Mode",
    "NORMALIZATIONS",
    "PSIConfig",
    "PSIInitiator",
    "PSIResponder",
    "PSIResult",
    "PairOutcome",
    "PairwiseResult",
    "PreparedIDs",
    "parse_normalize",
    "prepare_ids",
    "read_ids",
    "run_files",
    "run_local",
    "run_prepared",
    "write_outputs",
]

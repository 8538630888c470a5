"""securevfl: secure vertical federated learning — PSI alignment, VFL methods, measured crypto.

Heavy submodules (torch) load on first use of the names below, so ``import securevfl.errors``
and the torch-free ``psi`` package stay light.
"""

from __future__ import annotations

from securevfl.errors import (
    ConfigError,
    CryptoError,
    DataError,
    EncodingOverflowError,
    PartyFailure,
    ProtocolError,
    SecureVFLError,
)
from securevfl.lazy import lazy_attributes

__version__ = "0.1.0"

_LAZY = {
    "train": "securevfl.api",
    "run": "securevfl.api",
    "RunConfig": "securevfl.run_config",
    "RunReport": "securevfl.report",
    "TrainConfig": "securevfl.methods",
    "PartitionSpec": "securevfl.data",
    "ColumnSpec": "securevfl.data",
    "DatasetOptions": "securevfl.data",
    "load_dataset": "securevfl.data",
    "method_names": "securevfl.methods",
    "dataset_names": "securevfl.data",
    "load_model": "securevfl.model.scoring",
    "predict": "securevfl.api",
    "explore": "securevfl.api",
}


__getattr__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    "ConfigError", "CryptoError", "DataError", "EncodingOverflowError", "PartyFailure", "ProtocolError",
    "SecureVFLError", "__version__", *_LAZY,
]

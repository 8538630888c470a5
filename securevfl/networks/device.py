"""Where model compute runs: ``--device auto`` (CUDA when present), ``cpu``, ``cuda[:N]``."""

from __future__ import annotations

from typing import Any

from securevfl.errors import ConfigError


def resolve_device(name: str) -> Any:
    """``auto`` -> CUDA when available, else CPU; ``cpu`` / ``cuda`` / ``cuda:N`` as given."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"unknown device {name!r}; use auto, cpu or cuda[:N]") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device 'cuda' requested but no CUDA device is available")
    return device


__all__ = ["resolve_device"]

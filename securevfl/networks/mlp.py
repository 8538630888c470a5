"""Multilayer perceptrons, initialised from an explicit generator (no global seeding)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import torch
from torch import nn

from securevfl.errors import ConfigError

ModuleT = TypeVar("ModuleT", bound=nn.Module)

def parse_widths(text: str, what: str, *, allow_empty: bool = False) -> tuple[int, ...]:
    """``"64,128"`` -> ``(64, 128)``: layer widths from an option (``""`` -> ``()`` if ``allow_empty``)."""
    try:
        widths = tuple(int(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"{what} must be comma-separated layer widths, got {text!r}") from None
    if (not widths and not allow_empty) or any(w < 1 for w in widths):
        raise ConfigError(f"{what} needs positive layer widths, got {text!r}")
    return widths


ACTIVATIONS = {"relu": nn.ReLU, "selu": nn.SELU, "tanh": nn.Tanh, "gelu": nn.GELU, "leaky_relu": nn.LeakyReLU}


def init_parameters(module: ModuleT, generator: torch.Generator) -> ModuleT:
    """Re-initialise Linear / Conv weights (Kaiming-uniform, PyTorch's default) from ``generator``.

    PyTorch's built-in init draws from the global RNG, which threads share; parties initialise
    from their own generator so runs are reproducible without global seeding.
    """
    for m in module.modules():
        if isinstance(m, nn.Embedding):  # PyTorch's default: N(0, 1)
            nn.init.normal_(m.weight, generator=generator)
        elif isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d)):
            nn.init.kaiming_uniform_(m.weight, a=5**0.5, generator=generator)
            if m.bias is not None:
                fan_in = m.weight[0].numel()
                bound = 1 / fan_in**0.5 if fan_in > 0 else 0
                nn.init.uniform_(m.bias, -bound, bound, generator=generator)
    return module


class MLP(nn.Sequential):
    """``in_dim -> hidden... -> out_dim`` with an activation between layers (none after the last)."""

    def __init__(self, in_dim: int, hidden: Sequence[int], out_dim: int, *, activation: str = "relu",
                 final_activation: bool = False, batch_norm: bool = False) -> None:
        layers: list[nn.Module] = []
        dims = [in_dim, *hidden, out_dim]
        act = ACTIVATIONS[activation]
        for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
            layers.append(nn.Linear(a, b))
            last = i == len(dims) - 2
            if not last or final_activation:
                if batch_norm and not last:
                    layers.append(nn.BatchNorm1d(b))
                layers.append(act())
        super().__init__(*layers)
        self.in_dim, self.out_dim = in_dim, out_dim

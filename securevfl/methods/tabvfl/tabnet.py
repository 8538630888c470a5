"""TabNet pieces for split training (TabVFL and its baselines), built on pytorch-tabnet's modules.

TabVFL (Rieger et al., SRDS 2024) splits TabNet's pretraining network into a U shape: each guest
keeps the first batch norm plus a square FC layer (the "feature extractor", with TabNet's
RandomObfuscator masks during pretraining) and its slice of the decoder's reconstruction layer;
the host keeps :class:`PartialEncoder` (TabNet's encoder without its first batch norm) and
:class:`PartialDecoder` (the decoder's feature transformers without the reconstruction layer).
The attention steps, GLU blocks and sparsemax come unchanged from ``pytorch_tabnet.tab_network``;
only the cut points are new here. With the FC set to the identity, the split network computes
exactly what ``TabNetPretraining`` computes (``tests/test_tabvfl.py`` checks this).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from pytorch_tabnet.tab_network import GLU_Layer, TabNetDecoder, TabNetEncoder
from torch import nn

from securevfl.errors import ConfigError
from securevfl.networks.mlp import ModuleT
from securevfl.settings import setting


@dataclass(frozen=True)
class TabNetSteps:
    """The TabNet hyper-parameters a user sets (pytorch-tabnet's names and defaults); the designs' options too."""

    n_steps: int = setting(3, help="TabNet decision steps, >= 1.")
    gamma: float = setting(
        1.3, help="Feature reuse relaxation of the attention masks, >= 1 (1: a feature is used at one step).")
    n_independent: int = setting(2, help="Step-specific GLU layers per step (n_independent and n_shared not both 0).")
    n_shared: int = setting(2, help="GLU layers shared by all steps.")
    virtual_batch_size: int = setting(128, help="Ghost batch normalisation's batch size, >= 2.")
    momentum: float = setting(0.02, help="Momentum of the batch normalisations.")
    mask_type: str = setting("sparsemax", help="Attention mask: sparsemax | entmax.")


@dataclass(frozen=True)
class TabNetShape(TabNetSteps):
    """A TabNet's whole shape: its steps and the widths (``n_d`` = latent dimension), decoder and epsilon."""

    n_d: int = 8
    n_a: int = 8
    n_indep_decoder: int = 1
    n_shared_decoder: int = 1
    epsilon: float = 1e-15

    def __post_init__(self) -> None:
        if self.n_d < 1 or self.n_a < 1:
            raise ConfigError(f"n_d and n_a must be >= 1, got {self.n_d}, {self.n_a}")
        if self.n_steps < 1:
            raise ConfigError(f"n_steps must be >= 1, got {self.n_steps}")
        if self.n_independent == 0 and self.n_shared == 0:
            raise ConfigError("n_independent and n_shared cannot both be 0")
        if self.gamma < 1:
            raise ConfigError(f"gamma must be >= 1, got {self.gamma}")
        if self.virtual_batch_size < 2:
            raise ConfigError(f"virtual_batch_size must be >= 2, got {self.virtual_batch_size}")
        if self.mask_type not in ("sparsemax", "entmax"):
            raise ConfigError(f"mask_type must be 'sparsemax' or 'entmax', got {self.mask_type!r}")


def reinit_tabnet(module: ModuleT, generator: torch.Generator) -> ModuleT:
    """Redraw every Linear weight with pytorch-tabnet's gains, from ``generator``.

    pytorch-tabnet initialises from torch's global RNG, which the party threads share; parties
    re-initialise from their own generator so runs are reproducible without global seeding.
    GLU layers get ``initialize_glu``'s gain, all other layers ``initialize_non_glu``'s.
    """
    glu_fcs = {id(m.fc) for m in module.modules() if isinstance(m, GLU_Layer)}
    for m in module.modules():
        if isinstance(m, nn.Linear):
            fan_out, fan_in = m.weight.shape
            if id(m) in glu_fcs:
                gain = np.sqrt((fan_in + fan_out) / np.sqrt(fan_in))
            else:
                gain = np.sqrt((fan_in + fan_out) / np.sqrt(4 * fan_in))
            std = float(gain * np.sqrt(2.0 / (fan_in + fan_out)))
            with torch.no_grad():
                m.weight.normal_(0.0, std, generator=generator)
                if m.bias is not None:
                    m.bias.zero_()
    return module


def make_encoder(input_dim: int, shape: TabNetShape, *, first_bn: bool) -> TabNetEncoder:
    """TabNet's encoder over ``input_dim`` columns; without ``first_bn`` it is TabVFL's PartialEnc."""
    encoder = TabNetEncoder(
        input_dim=input_dim, output_dim=input_dim, n_d=shape.n_d, n_a=shape.n_a, n_steps=shape.n_steps,
        gamma=shape.gamma, n_independent=shape.n_independent, n_shared=shape.n_shared,
        epsilon=shape.epsilon, virtual_batch_size=shape.virtual_batch_size, momentum=shape.momentum,
        mask_type=shape.mask_type, group_attention_matrix=torch.eye(input_dim))
    if not first_bn:
        encoder.initial_bn = nn.Identity()
    return encoder


def encoder_to(encoder: TabNetEncoder, device: torch.device | str) -> TabNetEncoder:
    """Move an encoder, including its plain-tensor group attention matrix, to ``device``."""
    encoder.to(device)
    encoder.group_attention_matrix = encoder.group_attention_matrix.to(device)
    return encoder


class PartialDecoder(TabNetDecoder):
    """TabNet's decoder without its reconstruction layer: summed step feature transformers -> n_d."""

    def __init__(self, shape: TabNetShape) -> None:
        super().__init__(input_dim=1, n_d=shape.n_d, n_steps=shape.n_steps, n_independent=shape.n_indep_decoder,
                         n_shared=shape.n_shared_decoder, virtual_batch_size=shape.virtual_batch_size,
                         momentum=shape.momentum)
        self.reconstruction_layer = None

    def forward(self, steps_output: list[torch.Tensor]) -> torch.Tensor:
        res: torch.Tensor | int = 0
        for transformer, step_output in zip(self.feat_transformers, steps_output):
            res = res + transformer(step_output)
        return res  # type: ignore[return-value]


class FeatureExtractor(nn.Module):
    """A guest's bottom: TabNet's first batch norm over its columns, then a square FC layer.

    The FC is TabVFL's defence against direct leakage: on standardised inputs the batch norm is
    close to the identity, so without the FC the host would receive (masked) raw features
    (paper Sec. IV-A). ``fc=False`` gives plain TabNet (the centralised reference only).
    """

    def __init__(self, n_features: int, *, fc: bool = True) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(n_features, momentum=0.01)
        self.fc: nn.Module = nn.Linear(n_features, n_features) if fc else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.bn(x))


def reconstruction_layer(in_dim: int, n_features: int) -> nn.Linear:
    """A guest's slice of the decoder's final FC (no bias, as in TabNet)."""
    return nn.Linear(in_dim, n_features, bias=False)


def obfuscate(x: torch.Tensor, ratio: float, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """TabNet's RandomObfuscator without groups: ``(masked x, obfuscated-variable mask)``."""
    probs = torch.full(x.shape, ratio, dtype=x.dtype)
    obf = torch.bernoulli(probs, generator=generator).to(x.device)
    return (1 - obf) * x, obf


def reconstruction_loss(recon: torch.Tensor, target: torch.Tensor, obf: torch.Tensor,
                        eps: float = 1e-9) -> torch.Tensor:
    """TabNet's normalised masked-reconstruction loss, with a safe variance for constant columns.

    Same as ``pytorch_tabnet.metrics.UnsupervisedLoss`` (squared error on obfuscated entries,
    divided by each column's batch variance, averaged over the obfuscated entries of a row, then
    over rows), except that a column constant within the batch is divided by 1. pytorch-tabnet
    divides it by the column's batch mean instead, which is negative for a standardised column and
    lets the loss run to minus infinity (seen on ``digits``, whose border pixels are near constant).
    """
    errors = (recon - target) * obf
    variances = torch.var(target, dim=0)
    variances = torch.where(variances > 0, variances, torch.ones_like(variances))
    per_row = (errors**2) @ (1 / variances)
    return torch.mean(per_row / (obf.sum(dim=1) + eps))


def decoder_slices(n_d: int, parts: int, mode: str) -> list[slice]:
    """Which part of the host's n_d decoder output each guest's reconstruction FC reads.

    ``full``: every guest reads all n_d values, i.e. TabNet's reconstruction layer split by its
    output columns (exactly TabNet). ``chunk``: the n_d values are cut into ``parts`` uniform
    chunks, one per part, as the paper's text describes (needs n_d >= guests).
    """
    if mode == "full":
        return [slice(0, n_d)] * parts
    if mode != "chunk":
        raise ConfigError(f"decoder_split must be 'full' or 'chunk', got {mode!r}")
    if n_d < parts:
        raise ConfigError(f"decoder_split='chunk' needs a latent dimension >= the number of guests "
                          f"({n_d} < {parts})")
    bounds = np.linspace(0, n_d, parts + 1).round().astype(int)
    return [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


def count_parameters(*modules: nn.Module | None) -> int:
    """Trainable parameters of ``modules`` (shared layers counted once)."""
    seen: set[int] = set()
    total = 0
    for module in modules:
        if module is None:
            continue
        for p in module.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                total += p.numel()
    return total

"""A small zoo of local architectures for heterogeneous VFL (EASTER and its baselines).

EASTER (paper 004, sec. IV-B, V-A2) splits each party's local network into an *embedding net*
(features -> shared embedding size) and a *decision net* (embedding -> class logits), with the
same number of layers in both (EL:PL = 1:1, the paper's best ratio, Fig. 6b). Parties pick
different architectures ("heterogeneous"), or all the same one ("homogeneous"). Image strips
get small CNNs and an MLP over the strip's pixels (the paper's MLP / CNN / LeNet choice for
MNIST); tabular parties get MLPs of different depth and width.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from securevfl.data.scenario import PartyData
from securevfl.errors import ConfigError
from securevfl.networks import MLP, StripCNN, init_parameters, mlp_bottom
from securevfl.seeding import party_generator

MODEL_CHOICES = ("hetero", "homo")
ZOO_CHOICES = ("default", "paper")


@dataclass(frozen=True)
class Architecture:
    """One zoo entry: how to embed (``cnn`` channels or ``mlp`` hidden sizes) and decide."""

    name: str
    kind: str  # "mlp" or "cnn"
    embed_layers: tuple[int, ...]  # MLP hidden sizes, or CNN channels
    decision_hidden: tuple[int, ...]
    kernel: int = 3  # CNN kernel size


TABULAR_ZOO = (
    Architecture("mlp-128", "mlp", (128,), (128,)),
    Architecture("mlp-64x64", "mlp", (64, 64), (64, 64)),
    Architecture("mlp-256", "mlp", (256,), (256,)),
    Architecture("mlp-128x64", "mlp", (128, 64), (64, 128)),
)
IMAGE_ZOO = (
    Architecture("cnn-16-32", "cnn", (16, 32), (128,)),
    Architecture("mlp-256", "mlp", (256,), (256,)),
    Architecture("cnn-8-16", "cnn", (8, 16), (64,)),
    Architecture("cnn-32", "cnn", (32,), (128,)),
)

#: The paper's MNIST/FMNIST family (Sec. V-A2: MLP, CNN, LeNet) on a party's image strip. LeNet-5:
#: two 5x5 convolutions (6 and 16 channels, ReLU, max-pool) and its 120-wide layer as the embedding
#: (``embedding_size``), its 84-wide layer in the decision net; CNN: two 3x3 convolutions (32, 64).
PAPER_IMAGE_ZOO = (
    Architecture("lenet", "cnn", (6, 16), (84,), kernel=5),
    Architecture("mlp-256", "mlp", (256,), (256,)),
    Architecture("cnn-32-64", "cnn", (32, 64), (128,)),
)


def layered_architecture(ratio: str, width: int = 256) -> Architecture:
    """An MLP local model with EL embedding layers and PL decision layers, from ``"EL:PL"``.

    Counted as linear layers (``"1:1"``: one linear layer each side of the embedding; ``"2:1"``: a
    ``width``-wide hidden layer in the embedding net only), for the paper's Fig. 6(b).
    """
    try:
        el, pl = (int(v) for v in ratio.split(":"))
    except ValueError:
        el = pl = 0
    if el < 1 or pl < 1:
        raise ConfigError(f"el_pl must be two layer counts >= 1 like '1:1' or '2:1', got {ratio!r}")
    return Architecture(f"mlp-el{el}-pl{pl}", "mlp", (width,) * (el - 1), (width,) * (pl - 1))


def zoo_for(data: PartyData, zoo: str = "default") -> tuple[Architecture, ...]:
    """The zoo a party picks from: small CNNs and MLPs for image strips, MLPs for tabular columns.

    ``zoo="paper"``: the paper's LeNet / MLP / CNN family for image strips (tabular: the default).
    """
    if zoo not in ZOO_CHOICES:
        raise ConfigError(f"zoo must be one of {', '.join(ZOO_CHOICES)}, got {zoo!r}")
    if data.strip_shape is None:
        return TABULAR_ZOO
    return PAPER_IMAGE_ZOO if zoo == "paper" else IMAGE_ZOO


def pick_architecture(data: PartyData, position: int, models: str, zoo: str = "default") -> Architecture:
    """Party at ``position`` (active = 0, passives in order) gets zoo[position] (hetero) or zoo[0]."""
    if models not in MODEL_CHOICES:
        raise ConfigError(f"models must be one of {', '.join(MODEL_CHOICES)}, got {models!r}")
    entries = zoo_for(data, zoo)
    return entries[position % len(entries)] if models == "hetero" else entries[0]


def build_embedding_net(data: PartyData, arch: Architecture, embedding_dim: int) -> nn.Module:
    """Features -> ``embedding_dim`` (ReLU output, like the SplitNN bottom models)."""
    if arch.kind == "cnn":
        if data.strip_shape is None:
            raise ConfigError(f"architecture {arch.name} needs an image strip")
        return nn.Sequential(StripCNN(data.strip_shape, embedding_dim, channels=arch.embed_layers,
                                      kernel=arch.kernel), nn.ReLU())
    return mlp_bottom(data.n_features, data.codes, arch.embed_layers, embedding_dim)


def build_decision_net(arch: Architecture, embedding_dim: int, n_out: int) -> nn.Module:
    """Embedding -> ``n_out`` logits."""
    return MLP(embedding_dim, arch.decision_hidden, n_out)


class LocalModel(nn.Module):
    """A party's full local model: embedding net followed by decision net."""

    def __init__(self, embed: nn.Module, decide: nn.Module) -> None:
        super().__init__()
        self.embed = embed
        self.decide = decide

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decide(self.embed(x))


def build_local_model(data: PartyData, arch: Architecture, embedding_dim: int, n_out: int,
                      seed: int, party: str) -> LocalModel:
    """Embedding + decision nets, initialised from the party's own generator."""
    model = LocalModel(build_embedding_net(data, arch, embedding_dim),
                       build_decision_net(arch, embedding_dim, n_out))
    return init_parameters(model, party_generator(seed, party))


def architectures(parties: Sequence[tuple[str, PartyData]], models: str,
                  zoo: str = "default") -> dict[str, Architecture]:
    """Architecture per party name, parties given in position order (active first).

    A party without features (a label-only active party) gets no model and is left out.
    """
    return {name: pick_architecture(data, i, models, zoo) for i, (name, data) in enumerate(parties)
            if data.n_features}

"""Entity Augmentation's models: a guest's bottom (its output width is its label weight) and the host's top."""

from __future__ import annotations

import torch
from torch import nn

from securevfl.data.scenario import PartyData
from securevfl.errors import ConfigError
from securevfl.methods.base import TrainConfig
from securevfl.methods.entity_aug.options import EntityAugOptions
from securevfl.networks import MLP, StripCNN, init_parameters, mlp_bottom
from securevfl.seeding import party_generator


def build_passive_model(data: PartyData, config: TrainConfig, options: EntityAugOptions,
                      seed_name: str) -> nn.Module:
    """Build a guest's bottom model; its output width is the party's interpolation weight."""
    if options.arch == "credit-card":  # Sec. 5.2: linear(5) -> linear(2) -> ReLU
        model: nn.Module = nn.Sequential(nn.Linear(data.n_features, 5), nn.Linear(5, 2), nn.ReLU())
    elif options.arch == "parkinsons":  # Sec. 5.2: linear(94) -> linear(47) -> ReLU
        model = nn.Sequential(nn.Linear(data.n_features, 94), nn.Linear(94, 47), nn.ReLU())
    elif options.arch == "handwritten":  # Sec. 5.2: linear(120) -> linear(70) -> ReLU
        model = nn.Sequential(nn.Linear(data.n_features, 120), nn.Linear(120, 70), nn.ReLU())
    elif options.bottom in ("auto", "cnn") and data.strip_shape is not None:
        model = StripCNN(data.strip_shape, config.embedding_dim)
    elif options.bottom == "cnn":
        raise ConfigError(f"bottom='cnn' needs image strips; party {data.name!r} "
                          "holds tabular features")
    else:
        model = mlp_bottom(data.n_features, data.codes, config.hidden, config.embedding_dim)
    return init_parameters(model, party_generator(config.seed, seed_name))


def build_top_model(width: int, n_classes: int, config: TrainConfig,
                     options: EntityAugOptions) -> nn.Module:
    """Build the host's top model over the concatenated activations (one logit per class)."""
    if options.arch == "credit-card":  # linear(22) -> linear(10) -> linear(8) -> linear(4) -> out
        model: nn.Module = nn.Sequential(nn.Linear(width, 22), nn.Linear(22, 10), nn.Linear(10, 8),
                                         nn.Linear(8, 4), nn.Linear(4, n_classes))
    elif options.arch == "parkinsons":
        # linear(94) -> linear(47) -> LeakyReLU -> linear(22) -> linear(10) -> LeakyReLU -> out
        model = nn.Sequential(nn.Linear(width, 94), nn.Linear(94, 47), nn.LeakyReLU(),
                              nn.Linear(47, 22), nn.Linear(22, 10), nn.LeakyReLU(),
                              nn.Linear(10, n_classes))
    elif options.arch == "handwritten":  # linear(280) -> linear(120) -> LeakyReLU -> linear(40) -> out
        model = nn.Sequential(nn.Linear(width, 280), nn.Linear(280, 120), nn.LeakyReLU(),
                              nn.Linear(120, 40), nn.Linear(40, n_classes))
    else:
        model = MLP(width, config.hidden, n_classes)
    return init_parameters(model, party_generator(config.seed, "top"))


def output_width(model: nn.Module, data: PartyData) -> int:
    """Activation dimension of a bottom model (one dry forward pass on a zero row)."""
    device = next(model.parameters()).device
    with torch.no_grad():
        return int(model(torch.zeros(1, data.n_features, device=device)).shape[1])

"""SplitNN (Vertical SplitNN / PyVertical): bottom models per party, concatenation, top model.

Per batch, every passive party sends its bottom model's output for the agreed batch; the active
party concatenates them with its own bottom output, runs the top model and the loss, and sends
each passive party the gradient of the loss with respect to that party's embedding. Only the
aligned training rows are used. Paper: Ceballos et al., "SplitNN-driven Vertical Partitioning"
(2020); Romanini et al., "PyVertical" (2021). The protocol is the engine's
:class:`~securevfl.methods.engine.SplitMethod` with its default hooks; SplitNN only chooses the
bottom model.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from securevfl.data.scenario import PartyData
from securevfl.errors import ConfigError
from securevfl.methods.base import TrainConfig, register_method
from securevfl.methods.engine import PartySide, SplitMethod
from securevfl.models import StripCNN, init_parameters, mlp_bottom
from securevfl.seeding import party_generator


@dataclass(frozen=True)
class SplitNNOptions:
    """``bottom``: ``mlp`` for every party, or ``cnn`` for image strips (MLP where no strip)."""

    bottom: str = "mlp"

    def __post_init__(self) -> None:
        if self.bottom not in ("mlp", "cnn"):
            raise ConfigError(f"bottom must be 'mlp' or 'cnn', got {self.bottom!r}")


def build_bottom(data: PartyData, config: TrainConfig, kind: str, seed_name: str) -> nn.Module:
    """A party's bottom model: features -> ``config.embedding_dim``."""
    if kind == "cnn" and data.strip_shape is not None:
        model: nn.Module = StripCNN(data.strip_shape, config.embedding_dim)
    else:
        model = mlp_bottom(data.n_features, data.codes, config.hidden, config.embedding_dim)
    return init_parameters(model, party_generator(config.seed, seed_name))


@register_method
class SplitNN(SplitMethod[SplitNNOptions]):
    """Bottom model per party, concatenated embeddings, top model at the active party."""

    name = "splitnn"
    summary = "SplitNN / PyVertical: per-batch embedding and gradient exchange on aligned rows"
    Options = SplitNNOptions

    def bottom(self, side: PartySide) -> nn.Module:
        return build_bottom(side.data, self.config, self.options.bottom, side.name)


@register_method
class PyVertical(SplitNN):
    """EASTER's name for the SplitNN baseline (PyVertical); identical protocol."""

    name = "pyvertical"
    summary = "alias of splitnn, under the name EASTER's paper uses"

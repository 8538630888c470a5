"""Torch building blocks shared by the methods (the heterogeneous zoo is :mod:`securevfl.models.zoo`)."""

from securevfl.models.cnn import StripCNN
from securevfl.models.mlp import MLP, init_parameters

__all__ = ["MLP", "StripCNN", "init_parameters"]

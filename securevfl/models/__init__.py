"""Torch building blocks shared by the methods."""

from securevfl.models.mlp import MLP, init_parameters
from securevfl.models.cnn import StripCNN

__all__ = ["MLP", "StripCNN", "init_parameters"]

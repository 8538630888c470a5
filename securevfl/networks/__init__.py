"""Torch building blocks shared by the methods (the heterogeneous zoo is :mod:`securevfl.networks.zoo`)."""

from securevfl.networks.categorical import CategoryEmbeddings, mlp_bottom, with_category_embeddings
from securevfl.networks.cnn import StripCNN
from securevfl.networks.mlp import MLP, init_parameters

__all__ = ["MLP", "CategoryEmbeddings", "StripCNN", "init_parameters", "mlp_bottom", "with_category_embeddings"]

"""Torch building blocks shared by the methods (the heterogeneous zoo is :mod:`securevfl.models.zoo`)."""

from securevfl.models.categorical import CategoryEmbeddings, mlp_bottom, with_category_embeddings
from securevfl.models.cnn import StripCNN
from securevfl.models.mlp import MLP, init_parameters

__all__ = ["MLP", "CategoryEmbeddings", "StripCNN", "init_parameters", "mlp_bottom", "with_category_embeddings"]

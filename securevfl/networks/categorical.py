"""Learned embeddings of category codes in front of a party's bottom model.

With ``ColumnSpec(embed=True)`` (``--embed-categories``) a party's categorical columns arrive as its
table's last columns, one integer code per column (0: a level never seen in training;
:mod:`securevfl.data.preprocess`). :class:`CategoryEmbeddings` looks each code up in its own
``nn.Embedding`` — width ``min(16, round(1.6 * n ** 0.56))`` for ``n`` codes, the fast.ai rule of thumb —
and passes the numeric columns and the embeddings to the bottom model behind it. Everything stays
at the party: the embeddings are part of its bottom model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from securevfl.networks.mlp import MLP


def embedding_width(n_codes: int) -> int:
    """The embedding width for a column of ``n_codes`` codes (fast.ai's rule, capped at 16)."""
    return max(1, min(16, round(1.6 * n_codes**0.56)))


class CategoryEmbeddings(nn.Module):
    """``(numeric | codes)`` rows -> ``(numeric | one embedding per code column)``."""

    def __init__(self, width: int, cardinalities: Sequence[int]) -> None:
        super().__init__()
        self.n_numeric = width - len(cardinalities)
        self.cardinalities = [int(n) for n in cardinalities]
        self.tables = nn.ModuleList(nn.Embedding(n, embedding_width(n)) for n in self.cardinalities)
        self.out_width = self.n_numeric + sum(embedding_width(n) for n in self.cardinalities)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        codes = x[:, self.n_numeric :].round().long()
        embedded = [table(codes[:, i].clamp(0, n - 1))
                    for i, (table, n) in enumerate(zip(self.tables, self.cardinalities, strict=True))]
        return torch.cat([x[:, : self.n_numeric], *embedded], dim=1)


def mlp_bottom(width: int, codes: Sequence[int], hidden: Sequence[int], out: int, *,
               final_activation: bool = True, activation: str = "relu") -> nn.Module:
    """An MLP bottom of ``width`` inputs, behind learned embeddings when the last ``len(codes)`` are codes."""
    layers = tuple(hidden)
    return with_category_embeddings(
        width, codes, lambda w: MLP(w, layers, out, activation=activation, final_activation=final_activation))


def with_category_embeddings(width: int, cardinalities: Sequence[int],
                             build: Callable[[int], nn.Module]) -> nn.Module:
    """``build(width)``, or, with code columns, the embeddings followed by ``build`` of their output width."""
    if not cardinalities:
        return build(width)
    front = CategoryEmbeddings(width, cardinalities)
    return nn.Sequential(front, build(front.out_width))

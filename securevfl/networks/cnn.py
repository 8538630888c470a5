"""A small CNN for a vertical strip of an image (height x width pixels, one channel)."""

from __future__ import annotations

import torch
from torch import nn


class StripCNN(nn.Module):
    """Conv-ReLU(-pool) blocks over a ``(h, w)`` strip, flattened into an ``out_dim`` embedding."""

    def __init__(self, strip_shape: tuple[int, int], out_dim: int, *, channels: tuple[int, ...] = (16, 32),
                 kernel: int = 3) -> None:
        super().__init__()
        h, w = strip_shape
        blocks: list[nn.Module] = []
        c_in = 1
        for c in channels:
            blocks += [nn.Conv2d(c_in, c, kernel, padding=kernel // 2), nn.ReLU()]
            if h >= 4:
                blocks.append(nn.MaxPool2d((2, 2 if w >= 4 else 1)))
                h, w = h // 2, (w // 2 if w >= 4 else w)
            c_in = c
        self.features = nn.Sequential(*blocks)
        self.head = nn.Linear(c_in * h * w, out_dim)
        self.strip_shape = strip_shape
        self.out_dim = out_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(-1, 1, *self.strip_shape)
        return self.head(self.features(x).flatten(1))

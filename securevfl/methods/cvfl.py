"""C-VFL (Castiglia et al., "Compressed-VFL", ICML 2022): split VFL with compressed embeddings.

The protocol is SplitVFL (PyVertical): every party's bottom model embeds the agreed batch, the
active party concatenates the embeddings, runs the trainable top model and returns to each
passive party the gradient w.r.t. its embedding. C-VFL's contribution is to *compress the
embeddings* a party sends: scalar quantisation to ``bits`` bits (per-message min/max, uniform
levels) and/or top-k sparsification (the ``topk_ratio`` largest-magnitude entries of each row,
with their column indices). The active party decompresses and treats the reconstruction as the
embedding; the returned gradient is applied to the party's exact embedding (straight-through).

``local_steps`` = Q > 1: C-VFL's local iterations. After one exchange of compressed embeddings
and gradients, every party makes Q steps on the same batch with the other side's stale values
(:class:`~securevfl.methods.engine.split.SplitMethod`). C-VFL's own algorithm sends every party
the server model and everybody's compressed embeddings so that each computes its exact local
gradient, which needs the labels at every party; here a passive party reuses the gradient it
received instead (as in FedBCD), so labels and the top model stay with the active party.

Bottom models come from the heterogeneous zoo (``models=hetero|homo``) used by EASTER, so
``cvfl --option compress=none`` is PyVertical with heterogeneous bottoms. The compression ratio
(compressed payload bytes / float32 bytes of the forward embeddings) is in ``extra``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from securevfl.data.scenario import Scenario
from securevfl.errors import ConfigError, ProtocolError
from securevfl.methods.base import register_method
from securevfl.methods.engine import TRAIN, PartySide, SplitMethod, checked_tensor
from securevfl.networks import MLP, init_parameters
from securevfl.networks.zoo import (
    MODEL_CHOICES,
    ZOO_CHOICES,
    Architecture,
    architectures,
    build_embedding_net,
)
from securevfl.seeding import party_generator
from securevfl.settings import setting

COMPRESSIONS = ("quant", "topk", "both", "none")


@dataclass(frozen=True)
class CVFLOptions:
    """C-VFL's options.

    ``compress``: quant | topk | both | none; ``bits`` in 1..16; ``topk_ratio`` in (0, 1];
    ``local_steps``: C-VFL's Q, optimiser steps per exchange (1: no step on stale values);
    ``models`` / ``zoo``: the bottoms, as for EASTER (:mod:`securevfl.networks.zoo`).
    """

    compress: str = setting("quant", help="Compression of the sent embeddings: quant | topk | both | none.")
    bits: int = setting(8, help="Quantisation bits per value (quant, both), 1..16.")
    topk_ratio: float = setting(0.25, help="Share of each row's values kept (topk, both), in (0, 1].")
    models: str = setting(
        "hetero", help="hetero (the party at position i takes zoo entry i, active first) | homo (every party entry 0).")
    zoo: str = setting(
        "default", help="Architectures picked from: default | paper (the paper's LeNet / MLP / CNN for image strips).")
    embedding_size: int = setting(128, help="Width of each party's embedding (--embedding-dim is not used).")
    top_hidden: int = setting(128, help="Width of the top model's hidden layer.")
    local_steps: int = setting(
        1, help="C-VFL's Q: optimiser steps per exchange, reusing the stale values after the first; >= 1.")

    def __post_init__(self) -> None:
        if self.local_steps < 1:
            raise ConfigError(f"local_steps must be >= 1, got {self.local_steps}")
        if self.compress not in COMPRESSIONS:
            raise ConfigError(f"compress must be one of {', '.join(COMPRESSIONS)}, got {self.compress!r}")
        if not 1 <= self.bits <= 16:
            raise ConfigError(f"bits must be in 1..16, got {self.bits}")
        if not 0 < self.topk_ratio <= 1:
            raise ConfigError(f"topk_ratio must be in (0, 1], got {self.topk_ratio}")
        if self.zoo not in ZOO_CHOICES:
            raise ConfigError(f"zoo must be one of {', '.join(ZOO_CHOICES)}, got {self.zoo!r}")
        if self.models not in MODEL_CHOICES:
            raise ConfigError(f"models must be one of {', '.join(MODEL_CHOICES)}, got {self.models!r}")
        if self.embedding_size < 1 or self.top_hidden < 1:
            raise ConfigError("embedding_size and top_hidden must be >= 1")


# -- compression (pure functions on numpy arrays) ------------------------------------------------


def _pack_codes(codes: np.ndarray, bits: int) -> np.ndarray:
    if bits == 8:
        return codes.astype(np.uint8)
    if bits > 8:
        return codes.astype(np.uint16)
    unpacked = np.unpackbits(codes.astype(np.uint8).reshape(-1, 1), axis=1)[:, 8 - bits :]
    return np.packbits(unpacked.reshape(-1))


def _unpack_codes(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    if bits >= 8:
        return packed.astype(np.int64)
    flat = np.unpackbits(packed)[: count * bits].reshape(count, bits)
    weights = 1 << np.arange(bits - 1, -1, -1)
    return flat.astype(np.int64) @ weights


def quantize(values: np.ndarray, bits: int) -> dict[str, Any]:
    """Uniform ``bits``-bit scalar quantisation of a float array (min/max of the message)."""
    x = np.asarray(values, dtype=np.float32).reshape(-1)
    lo = float(x.min()) if x.size else 0.0
    hi = float(x.max()) if x.size else 0.0
    levels = (1 << bits) - 1
    scale = (hi - lo) / levels if hi > lo else 1.0
    if np.float32(scale) == 0:  # a range too small for float32 levels: every value is lo, within the range
        scale = 1.0
    codes = np.clip(np.rint((x - lo) / scale), 0, levels)
    return {"lo": lo, "scale": scale, "bits": bits, "count": int(x.size), "codes": _pack_codes(codes, bits)}


def dequantize(message: dict[str, Any]) -> np.ndarray:
    """Float32 values from :func:`quantize`'s message (flat)."""
    codes = _unpack_codes(np.asarray(message["codes"]), int(message["bits"]), int(message["count"]))
    return (float(message["lo"]) + codes * float(message["scale"])).astype(np.float32)


def compress(values: np.ndarray, method: str, bits: int = 8, topk_ratio: float = 0.25) -> dict[str, Any]:
    """Compress an ``(n, d)`` float array as C-VFL does (``method``: quant|topk|both|none)."""
    x = np.asarray(values, dtype=np.float32)
    if x.ndim != 2:
        raise ConfigError("compress expects an (n, d) array")
    n, d = x.shape
    out: dict[str, Any] = {"method": method, "shape": [n, d]}
    if method == "none":
        out["values"] = x
        return out
    if method in ("topk", "both"):
        k = max(1, int(round(topk_ratio * d)))
        idx = np.argpartition(-np.abs(x), k - 1, axis=1)[:, :k] if k < d else np.tile(np.arange(d), (n, 1))
        out["indices"] = idx.astype(np.uint8 if d <= 256 else np.uint16)
        kept = np.take_along_axis(x, idx, axis=1)
        out["values"] = quantize(kept, bits) if method == "both" else kept
        return out
    if method == "quant":
        out["values"] = quantize(x, bits)
        return out
    raise ConfigError(f"unknown compression {method!r}")


def decompress(message: dict[str, Any]) -> np.ndarray:
    """Reconstruct the ``(n, d)`` float32 array from :func:`compress`'s message."""
    n, d = (int(s) for s in message["shape"])
    values = message["values"]
    dense_values = dequantize(values) if isinstance(values, dict) else np.asarray(values, np.float32)
    if "indices" not in message:
        return dense_values.reshape(n, d)
    idx = np.asarray(message["indices"]).astype(np.int64)
    if idx.shape[0] != n or idx.max(initial=0) >= d:
        raise ProtocolError("top-k indices do not fit the embedding shape")
    out = np.zeros((n, d), dtype=np.float32)
    np.put_along_axis(out, idx, dense_values.reshape(idx.shape), axis=1)
    return out


def payload_bytes(message: dict[str, Any]) -> int:
    """Bytes of the arrays and scalars in a compressed message (what the compression costs)."""
    total = 0
    for key, value in message.items():
        if isinstance(value, np.ndarray):
            total += value.nbytes
        elif isinstance(value, dict):
            total += payload_bytes(value)
        elif isinstance(value, float) and key in ("lo", "scale"):
            total += 4
    return total


# -- hooks ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CVFLPlan:
    """What C-VFL derives from a scenario: each party's bottom architecture from the zoo."""

    archs: Mapping[str, Architecture]


@register_method
class CVFL(SplitMethod[CVFLOptions]):
    """C-VFL: split VFL whose passive embeddings are quantised and/or top-k sparsified."""

    name = "cvfl"
    summary = "C-VFL: SplitVFL with compressed (quantised / top-k) embeddings, heterogeneous bottoms"
    Options = CVFLOptions

    def plan(self, scenario: Scenario) -> CVFLPlan:
        datas = [(p, scenario.party_data(p)) for p in (scenario.active, *self.require_passives(scenario))]
        return CVFLPlan(architectures(datas, self.options.models, self.options.zoo))

    def bottom(self, side: PartySide) -> nn.Module:
        net = build_embedding_net(side.data, side.plan.archs[side.name], self.options.embedding_size)
        return init_parameters(net, party_generator(self.config.seed, side.name))

    def embedding_width(self) -> int:
        return self.options.embedding_size

    def local_steps(self) -> int:
        return self.options.local_steps

    def top(self, side: PartySide, width: int) -> nn.Module:
        model = MLP(width, (self.options.top_hidden,), side.data.n_classes)
        return init_parameters(model, party_generator(self.config.seed, "top"))

    def encode(self, side: PartySide, h: torch.Tensor, phase: str) -> Any:
        o = self.options
        return compress(h.detach().cpu().numpy(), o.compress, o.bits, o.topk_ratio)

    def decode(self, side: PartySide, message: Any, sender: str, rows: int, phase: str) -> torch.Tensor:
        try:
            values = decompress(message)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ProtocolError(f"{sender} sent a malformed compressed embedding: {exc!r}") from None
        if phase == TRAIN:
            side.stats["raw"] = side.stats.get("raw", 0) + 4 * values.size
            side.stats["sent"] = side.stats.get("sent", 0) + payload_bytes(message)
        return checked_tensor(torch.as_tensor(values), sender, rows)

    def report(self, side: PartySide) -> dict[str, Any]:
        raw, sent = side.stats.get("raw", 0), side.stats.get("sent", 0)
        o = self.options
        return {"compression": o.compress, "bits": o.bits, "topk_ratio": o.topk_ratio, "local_steps": o.local_steps,
                "compression_ratio": sent / raw if raw else 1.0, "embedding_raw_bytes": raw,
                "embedding_payload_bytes": sent, "architectures": {p: a.name for p, a in side.plan.archs.items()}}

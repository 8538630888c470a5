"""FedSVD (Chai et al., KDD 2022) in numpy: lossless SVD of vertically split, masked data.

The representation learner VFedTrans uses (APC-VFL paper, Appendix E).

A trusted key generator draws a random orthogonal ``P`` (m x m, shared by all parties, m = the
aligned rows) and, per party, a random orthogonal ``Q_i`` (n_i x n_i). Party i sends
``P X_i Q_i`` to the server; the server concatenates the blocks — ``P X Q`` with ``Q`` block
diagonal — and runs an SVD ``P X Q = U' S V'^T``. Since ``P`` and ``Q`` are orthogonal,
``X = (P^T U') S (Q V')^T``: the singular values are exact and a party holding ``P`` recovers
``U = P^T U'``. The server never sees ``X``, ``P`` or ``Q``.

Masks are secrets: they are expanded from a 32-byte seed (``secrets.token_bytes`` unless a
``urandom`` callable is injected for tests) with the AES-CTR PRG of :mod:`securevfl.privacy.primitives.prg`,
turned into Gaussians by Box-Muller and into Haar-random orthogonal matrices by the sign-corrected
QR decomposition (Mezzadri, "How to generate random matrices from the classical compact groups",
Notices AMS 2007). ``np.random`` is never used for them.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from securevfl.errors import ConfigError
from securevfl.privacy.primitives.prg import prg_uint64

Urandom = Callable[[int], bytes]
_TWO53 = float(1 << 53)


def prg_gaussian(seed: bytes, shape: tuple[int, ...], step: str) -> np.ndarray:
    """Standard normal array of ``shape`` from the AES-CTR keystream of ``(seed, step)`` (Box-Muller)."""
    count = int(np.prod(shape, dtype=np.int64))
    pairs = (count + 1) // 2
    raw = prg_uint64(seed, 2 * pairs, 0, step) >> np.uint64(11)  # 53-bit uniforms
    u1 = (raw[:pairs].astype(np.float64) + 1.0) / _TWO53  # in (0, 1]: log is finite
    u2 = raw[pairs:].astype(np.float64) / _TWO53
    radius = np.sqrt(-2.0 * np.log(u1))
    normals = np.concatenate([radius * np.cos(2 * np.pi * u2), radius * np.sin(2 * np.pi * u2)])
    return normals[:count].reshape(shape)


def haar_orthogonal(n: int, seed: bytes, step: str) -> np.ndarray:
    """A Haar-distributed random ``n x n`` orthogonal matrix expanded from ``seed`` under ``step``."""
    if n < 1:
        raise ConfigError(f"an orthogonal mask needs n >= 1, got {n}")
    q, r = np.linalg.qr(prg_gaussian(seed, (n, n), step))
    signs = np.sign(np.diag(r))
    signs[signs == 0] = 1.0
    return q * signs


@dataclass(frozen=True)
class FedSVDMasks:
    """The key generator's output: ``P`` for every party and one ``Q_i`` per party (secret)."""

    P: np.ndarray = field(repr=False)
    Q: Mapping[str, np.ndarray] = field(repr=False)

    def __repr__(self) -> str:
        return f"FedSVDMasks(m={self.P.shape[0]}, blocks={ {k: v.shape[0] for k, v in self.Q.items()} })"


def generate_masks(n_rows: int, widths: Mapping[str, int], urandom: Urandom | None = None) -> FedSVDMasks:
    """Draw ``P`` (n_rows x n_rows) and ``Q_i`` (width_i x width_i) from a fresh 32-byte seed."""
    seed = (urandom or secrets.token_bytes)(32)
    if len(seed) != 32:
        raise ConfigError("the mask seed must be 32 bytes")
    P = haar_orthogonal(n_rows, seed, "fedsvd.P")
    Q = {name: haar_orthogonal(w, seed, f"fedsvd.Q.{name}") for name, w in widths.items()}
    return FedSVDMasks(P=P, Q=Q)


def mask_block(P: np.ndarray, X: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """A party's masked block ``P X_i Q_i`` (what it sends to the server)."""
    if P.shape != (len(X), len(X)) or Q.shape != (X.shape[1], X.shape[1]):
        raise ConfigError(f"mask shapes {P.shape}, {Q.shape} do not fit a {X.shape} block")
    return P @ X.astype(np.float64) @ Q


def server_svd(blocks: Sequence[np.ndarray], rank: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The server's step: SVD of the concatenated masked blocks; returns ``(U' S, S)`` (top ``rank``)."""
    masked = np.concatenate([np.asarray(b, dtype=np.float64) for b in blocks], axis=1)
    U, S, _ = np.linalg.svd(masked, full_matrices=False)
    k = len(S) if rank is None else min(rank, len(S))
    return U[:, :k] * S[:k], S[:k]


def unmask_left(P: np.ndarray, masked_us: np.ndarray) -> np.ndarray:
    """The active party's step: ``U S = P^T (U' S)``, the representation of its aligned rows."""
    return P.T @ np.asarray(masked_us, dtype=np.float64)


def fedsvd_footprint_bytes(n_rows: int, active_width: int, passive_widths: Sequence[int]) -> int:
    """Appendix E, Eq. 10 (two parties; generalised by summing over passive parties).

    ``(2|D_A|^2 + x_t x_total + sum x_d x_total + |D_A| x_t + sum |D_A| x_d + |D_A| x_total) * 4``.
    """
    total = active_width + sum(passive_widths)
    parties = 1 + len(passive_widths)
    elements = (parties * n_rows**2 + active_width * total + sum(d * total for d in passive_widths)
                + n_rows * active_width + sum(n_rows * d for d in passive_widths) + n_rows * total)
    return int(elements * 4)


__all__ = ["FedSVDMasks", "fedsvd_footprint_bytes", "generate_masks", "haar_orthogonal", "mask_block",
           "prg_gaussian", "server_svd", "unmask_left"]

"""Uniform additive masks in the Paillier plaintext ring Z_n (hetero-lr's arbiter round trip).

A party holding an encrypted gradient [[g]] (one ciphertext per value, fixed point at
``scale_bits``) draws r uniformly from Z_n for every value, sends [[g + r mod n]] to the key holder
(the arbiter) and gets back the decrypted residues. Because r is uniform and used once,
``(encode(g) + r) mod n`` is uniform in Z_n whatever g is: the arbiter's view is independent of the
gradient (perfect, not statistical, hiding; the one-time pad over Z_n). The party subtracts r and
decodes the signed fixed-point value.

Why this module exists (used by :mod:`securevfl.methods.hetero_lr`):
:class:`~securevfl.privacy.paillier.EncryptedTensor` adds plaintext *reals* (fixed-point
encoded, bounded by n/3), so it cannot add a uniform element of the whole ring. The smallest
sound workaround is to add the raw residue with the backend's public ``add_plain_raw``
(c * (1 + r n) mod n^2 = E(m + r)) and rebuild the tensor around it.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence

import numpy as np

from securevfl.errors import ConfigError, ProtocolError
from securevfl.privacy.paillier.encoding import decode_signed, from_fixed_ints
from securevfl.privacy.paillier.tensor import EncryptedTensor

RandBelow = Callable[[int], int]
"""A ``secrets.randbelow``-like callable: uniform integer in [0, bound). Injectable for tests."""


def draw_ring_masks(n: int, count: int, randbelow: RandBelow | None = None) -> list[int]:
    """``count`` independent uniform elements of Z_n (from ``secrets`` unless injected)."""
    randbelow = randbelow or secrets.randbelow
    return [int(randbelow(n)) for _ in range(count)]


def add_ring_masks(tensor: EncryptedTensor, masks: Sequence[int]) -> EncryptedTensor:
    """[[v]] -> [[v + r mod n]] elementwise (an un-obfuscated tensor: re-randomise before sending)."""
    if tensor.is_packed:
        raise ConfigError("ring masks apply to unpacked tensors only")
    flat = tensor.ciphertexts.ravel().tolist()
    if len(masks) != len(flat):
        raise ConfigError(f"{len(masks)} masks for {len(flat)} ciphertexts")
    masked = tensor.backend.add_plain_raw(flat, masks)
    data = np.empty(len(masked), dtype=object)
    data[:] = masked
    return EncryptedTensor(tensor.backend, data.reshape(tensor.ciphertexts.shape), shape=tensor.shape,
                           scale_bits=tensor.scale_bits, obfuscated=False, fingerprint=tensor.fingerprint)


def remove_ring_masks(residues: Sequence[int], masks: Sequence[int], n: int, scale_bits: int) -> np.ndarray:
    """(residue - r) mod n, decoded as signed fixed point at ``scale_bits`` (float64, flat)."""
    if len(residues) != len(masks):
        raise ProtocolError(f"expected {len(masks)} decrypted values, got {len(residues)}")
    ints = decode_signed([(int(c) - int(r)) % n for c, r in zip(residues, masks, strict=True)], n)
    return from_fixed_ints(ints, scale_bits)


__all__ = ["RandBelow", "add_ring_masks", "draw_ring_masks", "remove_ring_masks"]

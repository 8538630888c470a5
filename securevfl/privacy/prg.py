"""AES-CTR pseudorandom generator that expands a 32-byte seed into uint64 mask arrays.

The mask for (seed, round, step) is the AES-256-CTR keystream under key = seed with the initial
counter block ``round (8 bytes BE) || step_id (4 bytes BE) || 0 (4 bytes)``. The low 32 bits
are the block counter, so one call may produce at most 2^32 blocks (64 GiB) before the counter
would carry into the step field; we refuse larger requests, so distinct (round, step) pairs
never share keystream under the same seed (NIST SP 800-38A, appendix B: counter blocks must be
unique per key). Step labels are strings mapped to 32 bits by SHA-256; the protocol's labels
are fixed constants (checked distinct in the tests), and integers in [0, 2^32) are accepted as-is.

Unlike numpy's MT19937 (used e.g. by Flower's SecAgg+ mask expansion), AES-CTR is a
cryptographic PRG: its output is indistinguishable from uniform without the seed.
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from securevfl.errors import ConfigError

CHUNK_BYTES = 1 << 17  # 128 KiB per update call: the sweet spot for AES-CTR via OpenSSL
_MAX_BLOCKS = 1 << 32
_ZERO_CHUNK = bytes(CHUNK_BYTES)
_VALID_KEY_BYTES = (16, 32)

STEP_PAIRWISE = "pairwise"
STEP_SELF = "self"


def step_id(step: str | int) -> int:
    """Map a step label to the 32-bit field of the counter block."""
    if isinstance(step, bool):
        raise ConfigError("step must be a str or an int, not bool")
    if isinstance(step, int):
        if not 0 <= step < (1 << 32):
            raise ConfigError(f"integer step must be in [0, 2^32), got {step}")
        return step
    if isinstance(step, str) and step:
        return int.from_bytes(hashlib.sha256(step.encode("utf-8")).digest()[:4], "big")
    raise ConfigError(f"step must be a non-empty str or an int, got {step!r}")


def counter_block(round_index: int, step: str | int) -> bytes:
    """Build the initial CTR block: round (8 B) || step_id (4 B) || zero block counter (4 B)."""
    if isinstance(round_index, bool) or not isinstance(round_index, int | np.integer):
        raise ConfigError(f"round_index must be an int, got {round_index!r}")
    if not 0 <= int(round_index) < (1 << 64):
        raise ConfigError(f"round_index must be in [0, 2^64), got {round_index}")
    return struct.pack(">QII", int(round_index), step_id(step), 0)


def prg_bytes(seed: bytes, n_bytes: int, round_index: int, step: str | int) -> bytearray:
    """``n_bytes`` of AES-CTR keystream for (seed, round, step), written in 128 KiB chunks."""
    if len(seed) not in _VALID_KEY_BYTES:
        raise ConfigError(f"PRG seed must be 16 or 32 bytes, got {len(seed)}")
    if n_bytes < 0:
        raise ConfigError(f"n_bytes must be >= 0, got {n_bytes}")
    if (n_bytes + 15) // 16 > _MAX_BLOCKS:
        raise ConfigError("PRG request exceeds 2^32 AES blocks for one (round, step)")
    encryptor = Cipher(
        algorithms.AES(seed), modes.CTR(counter_block(round_index, step))
    ).encryptor()
    # update_into needs len(data) + block_size - 1 bytes of room; keep a 16-byte tail.
    out = bytearray(n_bytes + 16)
    view = memoryview(out)
    pos = 0
    while pos < n_bytes:
        size = min(CHUNK_BYTES, n_bytes - pos)
        data = _ZERO_CHUNK if size == CHUNK_BYTES else bytes(size)
        pos += encryptor.update_into(data, view[pos : pos + size + 15])
    del view
    return out


def prg_uint64(
    seed: bytes, shape: int | tuple[int, ...], round_index: int, step: str | int
) -> np.ndarray:
    """Uniform uint64 array of ``shape`` expanded from ``seed`` for (round, step).

    Deterministic: the same (seed, round, step, shape) always yields the same array, and a
    larger shape extends a smaller one (same keystream prefix).
    """
    shape_t = (shape,) if isinstance(shape, int | np.integer) else tuple(int(s) for s in shape)
    if any(s < 0 for s in shape_t):
        raise ConfigError(f"shape must be non-negative, got {shape_t}")
    count = int(np.prod(shape_t, dtype=np.int64)) if shape_t else 1
    buf = prg_bytes(seed, 8 * count, round_index, step)
    return (
        np.frombuffer(buf, dtype="<u8", count=count).astype(np.uint64, copy=False).reshape(shape_t)
    )


__all__ = [
    "CHUNK_BYTES",
    "STEP_PAIRWISE",
    "STEP_SELF",
    "counter_block",
    "prg_bytes",
    "prg_uint64",
    "step_id",
]

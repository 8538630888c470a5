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

import functools
import hashlib
import math
import struct
import threading
from collections.abc import Iterable

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
        return _label_id(str(step))
    raise ConfigError(f"step must be a non-empty str or an int, got {step!r}")


@functools.lru_cache(maxsize=64)
def _label_id(step: str) -> int:
    # Cached: the protocol uses a handful of constant labels, hashed once instead of per mask.
    return int.from_bytes(hashlib.sha256(step.encode("utf-8")).digest()[:4], "big")


def counter_block(round_index: int, step: str | int, block: int = 0) -> bytes:
    """Build a CTR block: round (8 B) || step_id (4 B) || block counter (4 B, 0 for the first).

    ``block`` > 0 starts the keystream of (round, step) at that 16-byte block, so a mask can be
    extended beyond a prefix already expanded without recomputing the prefix.
    """
    if isinstance(round_index, bool) or not isinstance(round_index, int | np.integer):
        raise ConfigError(f"round_index must be an int, got {round_index!r}")
    if not 0 <= int(round_index) < (1 << 64):
        raise ConfigError(f"round_index must be in [0, 2^64), got {round_index}")
    if not 0 <= block < _MAX_BLOCKS:
        raise ConfigError(f"block counter must be in [0, 2^32), got {block}")
    return struct.pack(">QII", int(round_index), step_id(step), block)


def _check_seed(seed: bytes) -> None:
    if len(seed) not in _VALID_KEY_BYTES:
        raise ConfigError(f"PRG seed must be 16 or 32 bytes, got {len(seed)}")


def _check_size(n_bytes: int) -> None:
    if n_bytes < 0:
        raise ConfigError(f"n_bytes must be >= 0, got {n_bytes}")
    if (n_bytes + 15) // 16 > _MAX_BLOCKS:
        raise ConfigError("PRG request exceeds 2^32 AES blocks for one (round, step)")


def _keystream_into(seed: bytes, block: bytes, out: memoryview, n_bytes: int) -> None:
    """Write ``n_bytes`` of AES-CTR keystream into ``out`` (which has 16 spare bytes)."""
    encryptor = Cipher(algorithms.AES(seed), modes.CTR(block)).encryptor()
    pos = 0
    while pos < n_bytes:
        size = min(CHUNK_BYTES, n_bytes - pos)
        data = _ZERO_CHUNK if size == CHUNK_BYTES else _ZERO_CHUNK[:size]
        # update_into needs len(data) + block_size - 1 bytes of room.
        pos += encryptor.update_into(data, out[pos : pos + size + 15])


def _shape_tuple(shape: int | tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    shape_t = (int(shape),) if isinstance(shape, int | np.integer) else tuple(map(int, shape))
    if any(s < 0 for s in shape_t):
        raise ConfigError(f"shape must be non-negative, got {shape_t}")
    return shape_t, math.prod(shape_t)


def prg_bytes(seed: bytes, n_bytes: int, round_index: int, step: str | int) -> bytearray:
    """``n_bytes`` of AES-CTR keystream for (seed, round, step) (plus 16 trailing spare bytes)."""
    _check_seed(seed)
    _check_size(n_bytes)
    out = bytearray(n_bytes + 16)
    with memoryview(out) as view:
        _keystream_into(seed, counter_block(round_index, step), view, n_bytes)
    return out


def prg_uint64(
    seed: bytes, shape: int | tuple[int, ...], round_index: int, step: str | int
) -> np.ndarray:
    """Uniform uint64 array of ``shape`` expanded from ``seed`` for (round, step).

    Deterministic: the same (seed, round, step, shape) always yields the same array, and a
    larger shape extends a smaller one (same keystream prefix).
    """
    shape_t, count = _shape_tuple(shape)
    buf = prg_bytes(seed, 8 * count, round_index, step)
    return (
        np.frombuffer(buf, dtype="<u8", count=count).astype(np.uint64, copy=False).reshape(shape_t)
    )


_local = threading.local()
_SCRATCH_CACHE_BYTES = 1 << 22  # keep at most 4 MiB of keystream scratch per thread


def _scratch(n_bytes: int) -> bytearray:
    """A scratch buffer of ``n_bytes`` (contents undefined), reused per thread when small.

    Reusing it saves allocating (and faulting in) fresh pages for every stream of every round.
    The buffer holds keystream only between the writes and the add of one stream.
    """
    if n_bytes > _SCRATCH_CACHE_BYTES:
        return bytearray(n_bytes)
    buf: bytearray | None = getattr(_local, "scratch", None)
    if buf is None or len(buf) < n_bytes:
        buf = bytearray(max(n_bytes, CHUNK_BYTES + 16))
        _local.scratch = buf
    return buf


def add_prg_streams(
    values: np.ndarray,
    plus_seeds: Iterable[bytes],
    minus_seeds: Iterable[bytes],
    round_index: int,
    step: str | int,
    offset: int = 0,
) -> np.ndarray:
    """In place: ``values += sum PRG(plus) - sum PRG(minus)`` (mod 2^64) for (round, step).

    Equivalent to adding :func:`prg_uint64` outputs, but reuses one scratch buffer and
    computes the counter block once: the hot path of masking with many peers. With ``offset``
    the streams are read from element ``offset`` on (``values`` gets elements offset ..
    offset + size - 1 of each stream), which extends a mask expanded for a shorter input.
    """
    if values.dtype != np.uint64 or not values.flags.c_contiguous:
        raise ConfigError("values must be a C-contiguous uint64 array")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ConfigError(f"offset must be an int >= 0, got {offset!r}")
    skip = offset & 1  # two uint64 per AES block: start at the block holding element ``offset``
    count = values.size + skip
    n_bytes = 8 * count
    _check_size(8 * (offset + values.size))
    block = counter_block(round_index, step, (offset - skip) // 2)
    scratch = _scratch(n_bytes + 16)
    stream = np.frombuffer(scratch, dtype="<u8", count=count)[skip:].reshape(values.shape)
    with memoryview(scratch) as view:
        for seeds, op in ((plus_seeds, np.add), (minus_seeds, np.subtract)):
            for seed in seeds:
                _check_seed(seed)
                _keystream_into(seed, block, view, n_bytes)
                op(values, stream, out=values)
    return values


__all__ = [
    "CHUNK_BYTES",
    "add_prg_streams",
    "STEP_PAIRWISE",
    "STEP_SELF",
    "counter_block",
    "prg_bytes",
    "prg_uint64",
    "step_id",
]

"""Deterministic stand-ins for secret randomness, for tests only (never used for real keys)."""

import hashlib


def det_randbits(seed: bytes):
    """A ``randbits(k)`` drawing from SHAKE-256 over a counter, reproducible from ``seed``."""
    counter = [0]

    def randbits(k: int) -> int:
        counter[0] += 1
        raw = hashlib.shake_256(seed + counter[0].to_bytes(8, "big")).digest((k + 7) // 8)
        return int.from_bytes(raw, "big") >> (8 * len(raw) - k)

    return randbits

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


class CountingUrandom:
    """A ``urandom(n)`` stand-in: SHA-256 in counter mode over ``seed``, reproducible (tests only)."""

    def __init__(self, seed: bytes):
        self.seed, self.counter = seed, 0

    def __call__(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            out += hashlib.sha256(self.seed + self.counter.to_bytes(8, "big")).digest()
            self.counter += 1
        return out[:n]

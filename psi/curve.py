"""Curve25519 work for ECDH PSI: hash IDs onto the curve and blind points with X25519.

Blinding is X25519 (RFC 7748) with a party's fresh private key ``a``: ``blind_a(P) = x([a]P)``.
Scalar multiplication commutes, so ``blind_b(blind_a(H(x))) == blind_a(blind_b(H(x)))``, which is
what DH-PSI (Meadows 1986; Huberman, Franklin & Hogg 1999; De Cristofaro & Tsudik 2010) needs.

Hashing IDs to points — why not just feed SHA-256 output to X25519
------------------------------------------------------------------
X25519 accepts any 32 bytes as a u-coordinate. About half of all u-coordinates belong to points of
the *quadratic twist* rather than the curve. The twist is cryptographically fine (its order is
4 * prime, which is why X25519 needs no point validation), but curve/twist membership is
*preserved* by scalar multiplication and anyone can test it with one Legendre symbol. A party
receiving ``x([a]H(x))`` would therefore learn the bit "is H(salt, x) on the twist?" for every
item of the other party, including items outside the intersection: one bit of a random oracle of
``x`` per item per session. Against low-entropy IDs (phone numbers) that halves the candidate set
per session, and the bits from repeated sessions with fresh salts accumulate. That is a leak
beyond the ideal PSI functionality, so we do not use the raw encoding.

Instead we use try-and-increment onto the curve itself: ``u_c = SHA-256(DST || salt || id || c) mod
2^255`` for ``c = 0, 1, ...``; the first ``u_c < p`` with ``u^3 + A u^2 + u`` a non-zero square mod
``p`` is the point. Modelling SHA-256 as a random oracle, the output is uniform over the
u-coordinates of E(F_p) minus the 2-torsion, i.e. a random oracle into E/{±1}; the X25519 clamp (a
multiple of the cofactor 8) then maps it into the prime-order subgroup. Security of the blinded
values then rests on DDH in that subgroup (x-only form), as in the standard DH-PSI proof in the
random-oracle model. Expected cost: two SHA-256 and two Legendre symbols per ID (~4 µs with gmpy2;
~10 % of the two X25519 multiplications each ID needs). Try-and-increment is not constant-time in
the number of tries; that timing is local to the party that owns the ID (it never crosses the wire)
and is outside the semi-honest network model. A constant-time alternative is Elligator 2 (RFC 9380,
section 6.7.1), at the same cost order.

Received points are validated (canonical encoding, on the curve, not of small order) before use:
an honest peer only ever sends such points, so anything else is a protocol error.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.context import BaseContext
from typing import TypeVar

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from .errors import InvalidPointError, PSICryptoError

FIELD_PRIME = 2**255 - 19
CURVE_A = 486662
POINT_BYTES = 32
_MASK_255 = (1 << 255) - 1
_HALF = (FIELD_PRIME - 1) // 2
HASH_DST = b"securevfl/psi/v1/hash-to-curve25519/try-and-increment"
_MAX_TRIES = 256

_Task = TypeVar("_Task")
_Out = TypeVar("_Out")

try:  # gmpy2 is a declared dependency of securevfl; the pure-Python path gives identical results.
    import gmpy2 as _gmpy2

    _P_MPZ = _gmpy2.mpz(FIELD_PRIME)
    _jacobi: Callable[[int, int], int] = _gmpy2.jacobi  # gmpy2 ships no types: this is its signature here

    def _is_nonzero_square(value: int) -> bool:
        """Euler's criterion via GMP's Jacobi symbol (equal to Legendre's, ``p`` being prime)."""
        return _jacobi(value, _P_MPZ) == 1

except ImportError:  # pragma: no cover - exercised only without gmpy2

    def _is_nonzero_square(value: int) -> bool:
        """Euler's criterion: ``value^((p-1)/2) == 1 (mod p)``."""
        return pow(value, _HALF, FIELD_PRIME) == 1


def _curve_rhs(u: int) -> int:
    """Return ``u^3 + A u^2 + u mod p``: a non-zero square iff ``u`` is on the curve (not twist)."""
    return (u * (u * (u + CURVE_A) + 1)) % FIELD_PRIME


def is_on_curve(point: bytes) -> bool:
    """Whether 32 bytes are a canonical u-coordinate of a point of Curve25519 (not the twist)."""
    u = int.from_bytes(point, "little")
    return u < FIELD_PRIME and _is_nonzero_square(_curve_rhs(u))


def hash_prefix(salt: bytes) -> bytes:
    """Domain-separated, session-salted prefix of every hash-to-curve input."""
    return len(HASH_DST).to_bytes(1, "little") + HASH_DST + len(salt).to_bytes(1, "little") + salt


_COUNTERS = [bytes((c,)) for c in range(_MAX_TRIES)]


def hash_to_curve(item: bytes, prefix: bytes) -> bytes:
    """Hash one encoded ID to a u-coordinate on Curve25519 (try-and-increment, see module doc)."""
    base = prefix + item
    sha256, from_bytes = hashlib.sha256, int.from_bytes
    for counter in _COUNTERS:
        u = from_bytes(sha256(base + counter).digest(), "little") & _MASK_255
        if u < FIELD_PRIME and _is_nonzero_square((u * (u * (u + CURVE_A) + 1)) % FIELD_PRIME):
            return u.to_bytes(POINT_BYTES, "little")
    raise PSICryptoError("hash to curve failed")  # probability 2^-256


@dataclass(frozen=True)
class BlindingKey:
    """A party's per-session X25519 exponent. ``repr`` never shows the secret."""

    secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.secret, bytes) or len(self.secret) != 32:
            raise PSICryptoError("invalid blinding key")

    @classmethod
    def generate(cls, urandom: Callable[[int], bytes] = os.urandom) -> BlindingKey:
        """Draw a fresh key from ``urandom`` (injectable so tests can be deterministic)."""
        return cls(bytes(urandom(32)))

    def __repr__(self) -> str:
        return "BlindingKey(<secret>)"


@dataclass
class CurveStats:
    """Where curve time went: CPU seconds in workers (hash, blind) and wall seconds waiting."""

    hash_cpu: float = 0.0
    blind_cpu: float = 0.0
    wall: float = 0.0
    hashed: int = 0
    blinded: int = 0

    def add(self, other: CurveStats) -> None:
        """Accumulate ``other`` into this record."""
        self.hash_cpu += other.hash_cpu
        self.blind_cpu += other.blind_cpu
        self.wall += other.wall
        self.hashed += other.hashed
        self.blinded += other.blinded


# ---------------------------------------------------------------- worker functions (picklable)


def _exchange_all(secret: bytes, points: list[bytes], out_len: int) -> bytes:
    key = X25519PrivateKey.from_private_bytes(secret)
    exchange = key.exchange
    from_bytes = X25519PublicKey.from_public_bytes
    if out_len == POINT_BYTES:
        return b"".join([exchange(from_bytes(p)) for p in points])
    return b"".join([exchange(from_bytes(p))[:out_len] for p in points])


def _hash_blind_chunk(
    task: tuple[bytes, bytes, bytes, np.ndarray],
) -> tuple[bytes, float, float]:
    """Hash a chunk of concatenated IDs onto the curve and blind them; return bytes and timings."""
    prefix, secret, buf, ends = task
    t0 = time.process_time()
    points = []
    start = 0
    for end in ends.tolist():
        points.append(hash_to_curve(buf[start:end], prefix))
        start = end
    t1 = time.process_time()
    try:
        out = _exchange_all(secret, points, POINT_BYTES)
    except ValueError:  # a hashed ID landed on a small-order point: probability ~2^-250
        raise PSICryptoError("hash to curve produced a small-order point") from None
    return out, t1 - t0, time.process_time() - t1


def _blind_chunk(task: tuple[bytes, bytes, int, int]) -> tuple[bytes, float, float, int]:
    """Validate and blind a chunk of received points; return bytes, timings, bad index or -1."""
    secret, buf, out_len, first_index = task
    t0 = time.process_time()
    points = [buf[i : i + POINT_BYTES] for i in range(0, len(buf), POINT_BYTES)]
    for i, p in enumerate(points):
        if not is_on_curve(p):
            return b"", 0.0, time.process_time() - t0, first_index + i
    try:
        out = _exchange_all(secret, points, out_len)
    except ValueError:  # all-zero shared secret: a small-order point
        for i, p in enumerate(points):
            try:
                _exchange_all(secret, [p], out_len)
            except ValueError:
                return b"", 0.0, time.process_time() - t0, first_index + i
        raise
    return out, 0.0, time.process_time() - t0, -1


# ---------------------------------------------------------------- engine


ProgressCallback = Callable[[int], None]


class CurveEngine:
    """Batch curve work, spread over processes in large chunks of concatenated 32-byte points.

    ``workers=None`` uses every CPU; ``workers<=1`` (or a small batch) runs in this process.
    Pass ``executor`` to share a pool. Use as a context manager to shut an owned pool down.
    """

    def __init__(
        self,
        workers: int | None = None,
        *,
        chunk_items: int = 8192,
        min_parallel_items: int = 4096,
        executor: Executor | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> None:
        self.workers = (os.cpu_count() or 1) if workers is None else max(1, int(workers))
        self.chunk_items = max(1, int(chunk_items))
        self.min_parallel_items = min_parallel_items
        self.on_progress = on_progress
        self._executor = executor
        self._owns_executor = False

    def __enter__(self) -> CurveEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Shut down the pool if this engine created it."""
        if self._owns_executor and self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
        self._executor = None
        self._owns_executor = False

    def _pool(self, n_items: int) -> Executor | None:
        if self.workers <= 1 or n_items < self.min_parallel_items:
            return None
        if self._executor is None:
            import multiprocessing

            # forkserver: safe with threads in the parent (fork is not), and with the preload
            # each worker starts with this module already imported (no per-worker import cost)
            methods = multiprocessing.get_all_start_methods()
            ctx: BaseContext
            if "forkserver" in methods:
                ctx = multiprocessing.get_context("forkserver")
                ctx.set_forkserver_preload([__name__])
            else:  # pragma: no cover - non-POSIX
                ctx = multiprocessing.get_context("spawn")
            self._executor = ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx)
            self._owns_executor = True
        return self._executor

    def _chunk_size(self, n: int) -> int:
        # at least 4 chunks per worker for balance, at most chunk_items per chunk
        per = -(-n // (self.workers * 4)) if n else 1
        return max(256, min(self.chunk_items, per))

    def _run(self, func: Callable[[_Task], _Out], tasks: Iterator[_Task], n_items: int) -> Iterator[_Out]:
        pool = self._pool(n_items)
        if pool is None:
            for task in tasks:
                yield func(task)
        else:
            yield from pool.map(func, tasks)

    def hash_and_blind(self, items: Sequence[str], salt: bytes, key: BlindingKey) -> tuple[np.ndarray, CurveStats]:
        """Return ``x([key] H(salt, item))`` for every item as an ``(n, 32)`` uint8 array."""
        n = len(items)
        prefix = hash_prefix(salt)
        size = self._chunk_size(n)
        stats = CurveStats(hashed=n, blinded=n)

        def tasks() -> Iterator[tuple[bytes, bytes, bytes, np.ndarray]]:
            for start in range(0, n, size):
                encoded = [s.encode("utf-8") for s in items[start : start + size]]
                ends = np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)))
                yield prefix, key.secret, b"".join(encoded), ends

        out = np.empty((n, POINT_BYTES), np.uint8)
        t0 = time.perf_counter()
        row = 0
        for data, t_hash, t_blind in self._run(_hash_blind_chunk, tasks(), n):
            k = len(data) // POINT_BYTES
            out[row : row + k] = np.frombuffer(data, np.uint8).reshape(k, POINT_BYTES)
            row += k
            stats.hash_cpu += t_hash
            stats.blind_cpu += t_blind
            if self.on_progress:
                self.on_progress(k)
        stats.wall = time.perf_counter() - t0
        return out, stats

    def blind(self, points: np.ndarray, key: BlindingKey, out_len: int = POINT_BYTES) -> tuple[np.ndarray, CurveStats]:
        """Validate received points and return ``x([key] P)`` truncated to ``out_len`` bytes.

        Raises :class:`InvalidPointError` (naming the index) for a point that is not canonical,
        not on the curve, or of small order.
        """
        points = np.ascontiguousarray(points, dtype=np.uint8).reshape(-1, POINT_BYTES)
        n = len(points)
        size = self._chunk_size(n)
        stats = CurveStats(blinded=n)
        raw = points.tobytes()
        step = size * POINT_BYTES

        def tasks() -> Iterator[tuple[bytes, bytes, int, int]]:
            for start in range(0, n, size):
                yield (
                    key.secret,
                    raw[start * POINT_BYTES : start * POINT_BYTES + step],
                    out_len,
                    start,
                )

        out = np.empty((n, out_len), np.uint8)
        t0 = time.perf_counter()
        row = 0
        for data, _, t_blind, bad in self._run(_blind_chunk, tasks(), n):
            if bad >= 0:
                raise InvalidPointError(
                    f"received point #{bad} is not a valid Curve25519 point "
                    "(non-canonical, on the twist, or of small order)"
                )
            k = len(data) // out_len
            out[row : row + k] = np.frombuffer(data, np.uint8).reshape(k, out_len)
            row += k
            stats.blind_cpu += t_blind
            if self.on_progress:
                self.on_progress(k)
        stats.wall = time.perf_counter() - t0
        return out, stats

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
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from .errors import InvalidPointError, PSICryptoError, PSIDataError
from .executors import InlineExecutor, ProcessExecutor, TaskExecutor
from .source import IDSource, as_source

FIELD_PRIME = 2**255 - 19
CURVE_A = 486662
POINT_BYTES = 32
_MASK_255 = (1 << 255) - 1
_HALF = (FIELD_PRIME - 1) // 2
HASH_DST = b"securevfl/psi/v1/hash-to-curve25519/try-and-increment"
_MAX_TRIES = 256

try:  # gmpy2 is a declared dependency of securevfl; the pure-Python path gives identical results.
    import gmpy2 as _gmpy2

    _P_MPZ = _gmpy2.mpz(FIELD_PRIME)
    _jacobi: Callable[[int, int], int] = _gmpy2.jacobi  # gmpy2 ships no types: this is its signature here

    def _is_nonzero_square(value: int) -> bool:
        """Euler's criterion via GMP's Jacobi symbol (equal to Legendre's, ``p`` being prime).

        ``value`` need not be reduced mod p: the symbol depends only on the residue, and GMP
        reduces faster than a Python ``%`` would.
        """
        return _jacobi(value, _P_MPZ) == 1

except ImportError:  # pragma: no cover - exercised only without gmpy2

    def _is_nonzero_square(value: int) -> bool:
        """Euler's criterion: ``value^((p-1)/2) == 1 (mod p)``."""
        return pow(value % FIELD_PRIME, _HALF, FIELD_PRIME) == 1


def _curve_rhs(u: int) -> int:
    """Return ``u^3 + A u^2 + u mod p``: a non-zero square iff ``u`` is on the curve (not twist)."""
    return (u * (u * (u + CURVE_A) + 1)) % FIELD_PRIME


def is_on_curve(point: bytes) -> bool:
    """Whether 32 bytes are a canonical u-coordinate of a point of Curve25519 (not the twist)."""
    u = int.from_bytes(point, "little")
    return u < FIELD_PRIME and _is_nonzero_square(u * (u * (u + CURVE_A) + 1))


def hash_prefix(salt: bytes) -> bytes:
    """Domain-separated, session-salted prefix of every hash-to-curve input."""
    return len(HASH_DST).to_bytes(1, "little") + HASH_DST + len(salt).to_bytes(1, "little") + salt


_COUNTERS = [bytes((c,)) for c in range(_MAX_TRIES)]


def hash_to_curve(item: bytes, prefix: bytes) -> bytes:
    """Hash one encoded ID to a u-coordinate on Curve25519 (try-and-increment, see module doc)."""
    return _hash_many(item, np.array([len(item)], np.int64), prefix)[0]


def _hash_many(buf: bytes, ends: np.ndarray, prefix: bytes) -> list[bytes]:
    """Hash consecutive encoded IDs (``buf`` split at ``ends``) onto the curve; the hot loop.

    Same values as one :func:`hash_to_curve` per ID. The SHA-256 state after the prefix is computed
    once and copied per try, and the Jacobi symbol is taken of the unreduced ``u^3 + A u^2 + u``
    (the symbol depends only on its residue mod p, and GMP reduces faster than a Python ``%``).
    """
    midstate = hashlib.sha256(prefix)
    from_bytes, p, a, mask = int.from_bytes, FIELD_PRIME, CURVE_A, _MASK_255
    square = _is_nonzero_square
    out: list[bytes] = []
    append = out.append
    start = 0
    for end in ends.tolist():
        item = buf[start:end]
        start = end
        for counter in _COUNTERS:
            h = midstate.copy()
            h.update(item + counter)
            u = from_bytes(h.digest(), "little") & mask
            if u < p and square(u * (u * (u + a) + 1)):
                append(u.to_bytes(POINT_BYTES, "little"))
                break
        else:  # pragma: no cover - probability 2^-256
            raise PSICryptoError("hash to curve failed")
    return out


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


#: The order of Curve25519's prime-order subgroup (RFC 7748).
GROUP_ORDER = 2**252 + 27742317777372353535851937790883648493


def _clamp(secret: bytes) -> int:
    """The scalar X25519 multiplies by for ``secret`` (RFC 7748 ``decodeScalar25519``)."""
    value = int.from_bytes(secret, "little")
    return (value & ~7 & ((1 << 255) - 1)) | (1 << 254)


def _clamped_form(scalar: int) -> int | None:
    """The X25519 scalar acting as ``scalar mod l`` on every point, or None (about half of all scalars).

    It is a multiple of 8 in ``[2^254, 2^255)``: clamping leaves it as it is.
    """
    value = 8 * (scalar * pow(8, -1, GROUP_ORDER) % GROUP_ORDER)
    return value if 1 << 254 <= value < 1 << 255 else None


def rerandomizing_pair(urandom: Callable[[int], bytes] = os.urandom,
                       base: BlindingKey | None = None) -> tuple[BlindingKey, BlindingKey]:
    """A fresh factor ``r`` and its inverse ``r'``: a point blinded with ``r``, then ``r'``, is itself again.

    For points of the prime-order subgroup, ``[r' r mod l] P = P``. With ``base`` (a key ``a``), the first
    key is ``a r`` instead: one multiplication of a hashed ID gives ``H(x)^{a r}``.

    It hides a point that is already blinded (``H(x)^a``) behind a fresh factor for one exchange: a peer
    who raises ``H(x)^{a r}`` to its key ``b`` cannot link it to the same ``x`` in another exchange, and
    the sender removes ``r`` from the answer. X25519 clamps every scalar (a multiple of 8 with bit 254
    set), so each key is the clamped-form representative of its value mod ``l``; draws of ``r`` whose
    keys have none are redrawn.
    """
    while True:
        fresh = BlindingKey.generate(urandom)
        scalar = _clamp(fresh.secret) % GROUP_ORDER
        inverse = _clamped_form(pow(scalar, -1, GROUP_ORDER))
        first = scalar if base is None else _clamped_form(_clamp(base.secret) * scalar)
        if inverse is not None and first is not None:
            key = fresh if base is None else BlindingKey(first.to_bytes(32, "little"))
            return key, BlindingKey(inverse.to_bytes(32, "little"))


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


def _hash_blind_chunk(prefix: bytes, secret: bytes, buf: bytes, ends: np.ndarray) -> tuple[bytes, float, float, int]:
    """Hash a chunk of concatenated IDs onto the curve and blind them; return bytes and timings."""
    t0 = time.process_time()
    points = _hash_many(buf, ends, prefix)
    t1 = time.process_time()
    try:
        out = _exchange_all(secret, points, POINT_BYTES)
    except ValueError:  # a hashed ID landed on a small-order point: probability ~2^-250
        raise PSICryptoError("hash to curve produced a small-order point") from None
    return out, t1 - t0, time.process_time() - t1, -1


def first_off_curve(points: Sequence[bytes]) -> int:
    """Index of the first point that is not a canonical u-coordinate on the curve, or -1 (the hot loop)."""
    from_bytes, p, a, square = int.from_bytes, FIELD_PRIME, CURVE_A, _is_nonzero_square
    for i, point in enumerate(points):
        u = from_bytes(point, "little")
        if not (u < p and square(u * (u * (u + a) + 1))):
            return i
    return -1


def hash_ids(ids: Sequence[bytes], salt: bytes) -> list[bytes]:
    """Hash encoded IDs onto the curve as the protocol does, in one batch (same values as :func:`hash_to_curve`)."""
    ends = np.cumsum([len(i) for i in ids], dtype=np.int64)
    return _hash_many(b"".join(ids), ends, hash_prefix(salt))


def _blind_chunk(secret: bytes, buf: bytes, out_len: int, first_index: int) -> tuple[bytes, float, float, int]:
    """Validate and blind a chunk of received points; return bytes, timings, bad index or -1."""
    t0 = time.process_time()
    points = [buf[i : i + POINT_BYTES] for i in range(0, len(buf), POINT_BYTES)]
    bad = first_off_curve(points)
    if bad >= 0:
        return b"", 0.0, time.process_time() - t0, first_index + bad
    try:
        out = _exchange_all(secret, points, out_len)
    except ValueError:  # all-zero shared secret: a small-order point
        for i, point in enumerate(points):
            try:
                _exchange_all(secret, [point], out_len)
            except ValueError:
                return b"", 0.0, time.process_time() - t0, first_index + i
        raise
    return out, 0.0, time.process_time() - t0, -1


def _curve_task(task: tuple[int, tuple[Any, ...]]) -> tuple[bytes, float, float, int]:
    """Run one task of either kind: ``(0, hash-and-blind args)`` or ``(1, blind args)``."""
    kind, args = task
    return _hash_blind_chunk(*args) if kind == 0 else _blind_chunk(*args)


# ---------------------------------------------------------------- jobs


@dataclass(frozen=True)
class HashBlindJob:
    """Hash a party's own IDs (a list or an :class:`~psi.source.IDSource`) and blind them with ``key``."""

    items: Sequence[str] | IDSource
    salt: bytes
    key: BlindingKey


@dataclass(frozen=True)
class BlindJob:
    """Validate received points and blind them with ``key``, truncated to ``out_len`` bytes."""

    points: np.ndarray
    key: BlindingKey
    out_len: int = POINT_BYTES

    def __post_init__(self) -> None:
        object.__setattr__(self, "points", np.ascontiguousarray(self.points, dtype=np.uint8).reshape(-1, POINT_BYTES))


CurveJob = HashBlindJob | BlindJob


def _job_size(job: CurveJob) -> int:
    return len(job.items) if isinstance(job, HashBlindJob) else len(job.points)


def _job_tasks(job: CurveJob, size: int) -> Iterator[tuple[int, tuple[Any, ...]]]:
    """The tasks of one job, ``size`` items each."""
    if isinstance(job, HashBlindJob):
        prefix, secret = hash_prefix(job.salt), job.key.secret
        for chunk in as_source(job.items).chunks(size):
            yield 0, (prefix, secret, chunk.data, chunk.ends)
        return
    for start in range(0, len(job.points), size):
        yield 1, (job.key.secret, job.points[start : start + size].tobytes(), job.out_len, start)


# ---------------------------------------------------------------- engine


ProgressCallback = Callable[[int], None]


class CurveEngine:
    """Batch curve work in chunks of concatenated 32-byte points, on a :class:`~psi.executors.TaskExecutor`.

    ``workers=None`` uses every CPU; ``workers<=1`` (or a batch under ``min_parallel_items``) runs in
    this process. Pass ``executor`` (e.g. a :class:`~psi.executors.RayExecutor`) to run elsewhere or
    share one; an engine only closes an executor it created. Several jobs given to :meth:`run` share
    one stream of tasks, so the workers never wait at a barrier between them.
    """

    def __init__(
        self,
        workers: int | None = None,
        *,
        chunk_items: int = 2048,
        min_parallel_items: int = 4096,
        executor: TaskExecutor | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> None:
        if executor is not None:
            self.workers = executor.workers
        else:
            self.workers = (os.cpu_count() or 1) if workers is None else max(1, int(workers))
        self.chunk_items = max(1, int(chunk_items))
        self.min_parallel_items = min_parallel_items
        self.on_progress = on_progress
        self._executor = executor
        self._owns_executor = False
        self._inline = InlineExecutor()

    def __enter__(self) -> CurveEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Shut down the executor if this engine created it."""
        if self._owns_executor and self._executor is not None:
            self._executor.close()
            self._executor = None
        self._owns_executor = False

    @property
    def executor_name(self) -> str:
        """``inline``, ``process`` or ``ray``: where large batches run."""
        if self._executor is not None:
            return self._executor.name
        return "inline" if self.workers <= 1 else "process"

    def warm_up(self, n_items: int) -> None:
        """Start the workers a batch of ``n_items`` will use, in the background (no-op inline)."""
        executor = self._pick(n_items)
        start = getattr(executor, "start", None)
        if callable(start):
            start()

    def _pick(self, n_items: int) -> TaskExecutor:
        if self.workers <= 1 or n_items < self.min_parallel_items:
            return self._inline
        if self._executor is None:
            self._executor = ProcessExecutor(self.workers, preload=[__name__])
            self._owns_executor = True
        return self._executor

    def _chunk_size(self, n: int) -> int:
        # at least 4 chunks per worker for balance, at most chunk_items per chunk
        per = -(-n // (self.workers * 4)) if n else 1
        return max(256, min(self.chunk_items, per))

    def run(self, jobs: Sequence[CurveJob]) -> list[tuple[np.ndarray, CurveStats]]:
        """Run several jobs as one stream of tasks; return each job's ``(n, width)`` array and stats.

        Raises :class:`InvalidPointError` (naming the index) for a received point that is not
        canonical, not on the curve, or of small order.
        """
        sizes = [_job_size(j) for j in jobs]
        total = sum(sizes)
        chunk = self._chunk_size(total)
        outs = [
            np.empty((n, POINT_BYTES if isinstance(j, HashBlindJob) else j.out_len), np.uint8)
            for j, n in zip(jobs, sizes, strict=True)
        ]
        stats = [
            CurveStats(hashed=n if isinstance(j, HashBlindJob) else 0, blinded=n)
            for j, n in zip(jobs, sizes, strict=True)
        ]
        owner: list[int] = []

        def tasks() -> Iterator[tuple[int, tuple[Any, ...]]]:
            for index, job in enumerate(jobs):
                for task in _job_tasks(job, chunk):
                    owner.append(index)
                    yield task

        rows = [0] * len(jobs)
        t0 = time.perf_counter()
        for position, (data, t_hash, t_blind, bad) in enumerate(self._pick(total).map(_curve_task, tasks())):
            index = owner[position]
            if bad >= 0:
                raise InvalidPointError(
                    f"received point #{bad} is not a valid Curve25519 point "
                    "(non-canonical, on the twist, or of small order)"
                )
            out = outs[index]
            k = len(data) // out.shape[1]
            out[rows[index] : rows[index] + k] = np.frombuffer(data, np.uint8).reshape(k, out.shape[1])
            rows[index] += k
            stats[index].hash_cpu += t_hash
            stats[index].blind_cpu += t_blind
            if self.on_progress:
                self.on_progress(k)
        wall = time.perf_counter() - t0
        for index, st in enumerate(stats):
            st.wall = wall * sizes[index] / total if total else 0.0
            if rows[index] != sizes[index]:  # a source yielded a different number of IDs than it declared
                raise PSIDataError(f"the ID source yielded {rows[index]} IDs, it declared {sizes[index]}")
        return list(zip(outs, stats, strict=True))

    def hash_and_blind(self, items: Sequence[str] | IDSource, salt: bytes,
                       key: BlindingKey) -> tuple[np.ndarray, CurveStats]:
        """Return ``x([key] H(salt, item))`` for every item as an ``(n, 32)`` uint8 array."""
        return self.run([HashBlindJob(items, salt, key)])[0]

    def blind(self, points: np.ndarray, key: BlindingKey, out_len: int = POINT_BYTES) -> tuple[np.ndarray, CurveStats]:
        """Validate received points and return ``x([key] P)`` truncated to ``out_len`` bytes.

        Raises :class:`InvalidPointError` (naming the index) for a point that is not canonical,
        not on the curve, or of small order.
        """
        return self.run([BlindJob(points, key, out_len)])[0]

"""``fast``: gmpy2 Paillier with g = n + 1, CRT decryption and DJN fixed-base randomness.

Encryption is ``c = (1 + m n) * h_s^r mod n^2`` (Damgård, Jurik, Nielsen, "A generalization of
Paillier's public-key system with applications to electronic voting", IJIS 9(6), 2010,
the variant with a fixed n-th residue base and short random exponents):
``h_s = (-x^2)^n mod n^2`` is fixed per key and only the short exponent r is fresh, so the
random part ``h_s^r`` is a fixed-base exponentiation served from a precomputed window table
(8-bit windows: r_bits / 8 rows of 256 entries; 56 x 256 x 512 B ~ 7 MiB for r = 448 bits at
2048-bit n), i.e. about r_bits / 8 modular multiplications per ciphertext instead of a
2048-bit exponentiation. The key holder, who encrypts every row of every round, uses 10-bit
windows (45 rows of 1,024 entries mod p^2 and q^2, ~23 MiB, built in ~0.1 s): 45 multiplications
per half instead of 56, about 30 % less time per encryption.

Short exponent length. Semantic security rests on h_s^r with short r being indistinguishable
from a random n-th residue (DJN's assumption). Generic attacks on a short exponent (Pollard's
lambda / baby-step giant-step, van Oorschot–Wiener 1996) cost 2^(r_bits / 2), so r_bits = 2 * kappa
is the floor for kappa-bit security (224 at 2048-bit n, kappa = 112; 256 at 3072-bit n). The
default doubles that floor: **448 bits for n <= 2048, 512 bits above** (4 * kappa, margin against
multi-target/batch variants since millions of ciphertexts share one h_s). Lower values are refused.

A backend that holds the private key evaluates h_s^r mod p^2 and mod q^2 from two half-size
tables and recombines by CRT (same ciphertext, ~1.5x faster encryption for the key holder).

Decryption uses CRT (Paillier 1999, section 7): m_p = L_p(c^(p-1) mod p^2) h_p mod p, likewise
mod q, then Garner recombination; about 3-4x faster than working mod n^2.

Large inputs (>= ``parallel_min_items``) are spread in chunks over a
:class:`psi.executors.TaskExecutor`: a local process pool by default, or a Ray cluster
(``executor=ExecutorConfig("ray", ray_address=...)``). Each worker builds its own window table once
per key and caches it. The private key (p, q) only travels to *local* executors (over the pool's
pipe); on a Ray cluster workers get the public key alone, so encryption there skips the CRT
speed-up and decryption stays in this process. Randomness is always drawn in the parent (from
``randbits``), so results do not depend on the number or kind of workers.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from typing import Any

import gmpy2
from gmpy2 import mpz

from psi.executors import ExecutorConfig, ProcessExecutor, TaskExecutor, create_executor
from securevfl.errors import ConfigError

from .keys import PaillierPrivateKey, PaillierPublicKey, RandBits
from .tensor import PaillierBackend

WINDOW_BITS = 8
#: The key holder's windows (CRT tables mod p^2 and q^2): wider, since it encrypts every row of every round.
CRT_WINDOW_BITS = 10


def security_bits(n_bits: int) -> int:
    """Approximate symmetric-equivalent strength of an RSA/Paillier modulus (SP 800-57)."""
    if n_bits >= 15360:
        return 256
    if n_bits >= 7680:
        return 192
    if n_bits >= 3072:
        return 128
    if n_bits >= 2048:
        return 112
    return 80


def default_r_bits(n_bits: int) -> int:
    """Default DJN exponent length: 4 * kappa rounded up to a multiple of 64 (448 at 2048)."""
    return max(448, -(-4 * security_bits(n_bits) // 64) * 64)


class FastEngine:
    """Pure integer Paillier arithmetic for one key; shared by the parent and worker processes."""

    def __init__(
        self,
        n: int,
        hs: int,
        r_bits: int,
        p: int | None = None,
        q: int | None = None,
        use_table: bool = True,
        crt_encrypt: bool = True,
    ) -> None:
        self.n = mpz(n)
        self.nsq = self.n * self.n
        self.hs = mpz(hs)
        self.r_bits = r_bits
        self.use_table = use_table
        self._table: list[list[mpz]] | None = None
        self._table_q: list[list[mpz]] = []
        self._psq_inv = mpz(0)
        self.has_private = p is not None
        self.crt_encrypt = crt_encrypt and p is not None and q is not None
        self.window_bits = CRT_WINDOW_BITS if self.crt_encrypt else WINDOW_BITS
        self.windows = -(-r_bits // self.window_bits)
        if p is not None and q is not None:
            p, q = sorted((mpz(p), mpz(q)))
            self.p, self.q = p, q
            self.psq, self.qsq = p * p, q * q
            g = self.n + 1
            self.hp = gmpy2.invert((gmpy2.powmod(g, p - 1, self.psq) - 1) // p, p)
            self.hq = gmpy2.invert((gmpy2.powmod(g, q - 1, self.qsq) - 1) // q, q)
            self.p_inv = gmpy2.invert(p, q)

    def _build_table(self, base: mpz, modulus: mpz) -> list[list[mpz]]:
        """T[i][j] = base^(j * 2^(w i)) mod modulus for i < windows, j < 2^w (w = ``window_bits``)."""
        table = []
        for _ in range(self.windows):
            row = [mpz(1), base]
            for _ in range(2, 1 << self.window_bits):
                row.append(row[-1] * base % modulus)
            table.append(row)
            base = row[-1] * base % modulus  # base^(2^w)
        return table

    @property
    def table(self) -> list[list[mpz]]:
        """Build the fixed-base window tables on first use (mod n^2; mod p^2 and q^2 if private).

        With the private key, h_s^r is computed mod p^2 and mod q^2 (half-size numbers, about
        3x cheaper multiplications) and recombined by CRT: the key holder encrypts ~1.5x faster.
        """
        if self._table is None:
            if self.crt_encrypt:
                self._table = self._build_table(self.hs % self.psq, self.psq)
                self._table_q = self._build_table(self.hs % self.qsq, self.qsq)
                self._psq_inv = gmpy2.invert(self.psq, self.qsq)
            else:
                self._table = self._build_table(self.hs, self.nsq)
        return self._table

    def table_bytes(self) -> int:
        """Memory held by the window table's integers (bytes of magnitude)."""
        return int(self.windows * (1 << self.window_bits) * ((self.nsq.bit_length() + 7) // 8))

    def hs_pow(self, r: int) -> mpz:
        """h_s^r mod n^2 by the fixed-base table (about r_bits / 8 multiplications)."""
        if not self.use_table:
            return gmpy2.powmod(self.hs, r, self.nsq)
        table = self.table
        if not self.crt_encrypt:
            nsq = self.nsq
            acc = mpz(1)
            for row, byte in zip(table, int(r).to_bytes(self.windows, "little"), strict=True):
                if byte:
                    acc = acc * row[byte] % nsq
            return acc
        psq, qsq = self.psq, self.qsq
        rest, width, mask = int(r), self.window_bits, (1 << self.window_bits) - 1
        if rest >> (width * self.windows):
            raise ValueError(f"a DJN exponent of more than {self.r_bits} bits")
        acc_p, acc_q = mpz(1), mpz(1)
        for row_p, row_q in zip(table, self._table_q, strict=True):
            digit = rest & mask
            rest >>= width
            if digit:
                acc_p = acc_p * row_p[digit] % psq
                acc_q = acc_q * row_q[digit] % qsq
        return acc_p + psq * ((acc_q - acc_p) * self._psq_inv % qsq)

    def encrypt(self, plaintexts: Sequence[int], rs: Sequence[int]) -> list[mpz]:
        """Encrypt: c = (1 + m n) h_s^r mod n^2 for each (m, r)."""
        n, nsq = self.n, self.nsq
        hs_pow = self.hs_pow
        return [(mpz(m) * n + 1) * hs_pow(r) % nsq for m, r in zip(plaintexts, rs, strict=True)]

    def randomness(self, rs: Sequence[int]) -> list[mpz]:
        """The random factors h_s^r mod n^2 of future encryptions (precomputed ahead of the plaintexts)."""
        hs_pow = self.hs_pow
        return [hs_pow(r) for r in rs]

    def rerandomize(self, ciphertexts: Sequence[Any], rs: Sequence[int]) -> list[mpz]:
        """Re-randomise: c * h_s^r mod n^2."""
        nsq = self.nsq
        hs_pow = self.hs_pow
        return [mpz(c) * hs_pow(r) % nsq for c, r in zip(ciphertexts, rs, strict=True)]

    def decrypt(self, ciphertexts: Sequence[Any]) -> list[int]:
        """CRT decryption to residues in [0, n)."""
        p, q, psq, qsq = self.p, self.q, self.psq, self.qsq
        hp, hq, p_inv = self.hp, self.hq, self.p_inv
        pm1, qm1 = p - 1, q - 1
        powmod = gmpy2.powmod
        out = []
        for c in ciphertexts:
            c = mpz(c)
            mp = (powmod(c % psq, pm1, psq) - 1) // p * hp % p
            mq = (powmod(c % qsq, qm1, qsq) - 1) // q * hq % q
            out.append(int(mp + (mq - mp) * p_inv % q * p))
        return out

    def mul(self, ciphertexts: Sequence[Any], scalars: Sequence[int]) -> list[mpz]:
        """Multiply: c^k mod n^2 for signed k (gmpy2.powmod inverts c for negative k)."""
        nsq = self.nsq
        powmod = gmpy2.powmod
        out = []
        for c, k in zip(ciphertexts, scalars, strict=True):
            k = int(k)
            if k == 1:
                out.append(mpz(c))
            elif k == 0:
                out.append(mpz(1))
            else:
                out.append(powmod(mpz(c), k, nsq))
        return out


    def linear_combine(
        self, ciphertexts: Sequence[Any], coeffs: Sequence[Sequence[int]]
    ) -> tuple[list[mpz], list[mpz]]:
        """Compute partial products for out_j = prod_i c_i^coeffs[j][i], split by sign.

        Straus/Shamir interleaving with 4-bit windows: per ciphertext a 16-entry table
        (14 multiplications), per output ceil(bits / 4) shared 4-fold squarings, and per
        (i, j) at most ceil(bits / 4) multiplications, instead of one full powmod per (i, j).
        Returns (positive part, negative part); the caller multiplies the positive part by the
        inverse of the negative part, one inversion per output instead of one per term.
        """
        nsq = self.nsq
        tables = []
        for c in ciphertexts:
            c = mpz(c)
            row = [mpz(1), c]
            for _ in range(2, 16):
                row.append(row[-1] * c % nsq)
            tables.append(row)
        positives: list[Any] = []
        negatives: list[Any] = []
        for krow in coeffs:
            pos_terms = [(t, int(k)) for t, k in zip(tables, krow, strict=True) if k > 0]
            neg_terms = [(t, -int(k)) for t, k in zip(tables, krow, strict=True) if k < 0]
            for terms, sink in ((pos_terms, positives), (neg_terms, negatives)):
                acc = mpz(1)
                windows = -(-max((e.bit_length() for _, e in terms), default=0) // 4)
                for w in range(windows - 1, -1, -1):
                    if acc != 1:
                        acc = gmpy2.powmod(acc, 16, nsq)
                    shift = 4 * w
                    for table, e in terms:
                        digit = (e >> shift) & 15
                        if digit:
                            acc = acc * table[digit] % nsq
                sink.append(acc)
        return positives, negatives


# Worker-side cache: one engine (and window table) per key, built on a worker's first task for it.
_WORKER_ENGINES: dict[tuple[Any, ...], FastEngine] = {}


def _engine_task(task: tuple[tuple[Any, ...], str, tuple[Sequence[Any], ...]]) -> Any:
    """Run ``method`` on a chunk with the (cached) engine for ``engine_args``; executed by a worker."""
    engine_args, method, args = task
    engine = _WORKER_ENGINES.get(engine_args)
    if engine is None:
        _WORKER_ENGINES.clear()  # keep one key's tables per worker
        engine = _WORKER_ENGINES[engine_args] = FastEngine(*engine_args)
    return getattr(engine, method)(*args)


# Rough cost of one item relative to one table-DJN encryption, for the parallel threshold:
# a CRT decryption is two 1024-bit exponentiations, about 10 encryptions.
_RELATIVE_COST = {"encrypt": 1, "randomness": 1, "rerandomize": 1, "mul": 1, "decrypt": 10}


class FastBackend(PaillierBackend):
    """gmpy2 Paillier: DJN table randomness, CRT decryption, optional process parallelism."""

    name = "fast"

    def __init__(
        self,
        public_key: PaillierPublicKey,
        private_key: PaillierPrivateKey | None = None,
        *,
        randbits: RandBits | None = None,
        r_bits: int | None = None,
        use_table: bool = True,
        crt_encrypt: bool = True,
        workers: int | None = None,
        parallel_min_items: int = 1024,
        mp_start_method: str | None = None,
        executor: TaskExecutor | ExecutorConfig | None = None,
    ) -> None:
        super().__init__(public_key, private_key, randbits=randbits)
        n_bits = public_key.bits
        floor = 2 * security_bits(n_bits)
        self.r_bits = default_r_bits(n_bits) if r_bits is None else int(r_bits)
        if self.r_bits < floor:
            raise ConfigError(
                f"r_bits={self.r_bits} is below 2 * security level ({floor}) for {n_bits}-bit n"
            )
        self.workers = max(1, os.cpu_count() or 1) if workers is None else int(workers)
        if self.workers < 1:
            raise ConfigError("workers must be >= 1")
        self.parallel_min_items = int(parallel_min_items)
        self.mp_start_method = mp_start_method or (
            "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        )
        p = private_key.p if private_key is not None else None
        q = private_key.q if private_key is not None else None
        self._engine_args = (public_key.n, public_key.hs, self.r_bits, p, q, use_table,
                             crt_encrypt)
        self._public_engine_args = (public_key.n, public_key.hs, self.r_bits, None, None, use_table, False)
        self.engine = FastEngine(*self._engine_args)
        self._owns_executor = not isinstance(executor, TaskExecutor)
        self._executor_config = executor if isinstance(executor, ExecutorConfig) else None
        self._executor: TaskExecutor | None = executor if isinstance(executor, TaskExecutor) else None
        if self._executor is not None:
            self.workers = self._executor.workers
        elif self._executor_config is not None:
            kind, wanted = self._executor_config.kind, self._executor_config.workers
            self.workers = 1 if kind == "inline" else wanted or (2 if kind == "ray" else self.workers)

    # -- parallel plumbing ---------------------------------------------------------------------
    def _executor_or_none(self, items: int) -> TaskExecutor | None:
        """The executor for a batch of this weight, or ``None`` to run it in this process."""
        if self.workers <= 1 or items < self.parallel_min_items:
            return None
        if self._executor is None:
            config = self._executor_config
            if config is not None and config.kind == "ray":
                self._executor = create_executor(config)
            else:
                self._executor = ProcessExecutor(self.workers, start_method=self.mp_start_method, preload=[__name__])
            self.workers = self._executor.workers
        return self._executor

    def _task_args(self, executor: TaskExecutor) -> tuple[Any, ...]:
        """The key material a worker needs: the private key only for executors on this machine."""
        return self._engine_args if executor.local else self._public_engine_args

    def _run(self, method: str, *columns: Sequence[Any]) -> list[Any]:
        items = len(columns[0])
        weight = _RELATIVE_COST.get(method, 1)
        executor = self._executor_or_none(items * weight)
        local: Callable[..., list[Any]] = getattr(self.engine, method)
        if executor is None or (method == "decrypt" and not executor.local):
            return local(*columns)
        chunk = max(max(1, 64 // weight), -(-items // (executor.workers * 4)))
        args = self._task_args(executor)
        tasks = ((args, method, tuple(list(col[i : i + chunk]) for col in columns)) for i in range(0, items, chunk))
        out: list[Any] = []
        for part in executor.map(_engine_task, tasks):
            out.extend(part)
        return out

    def close(self) -> None:
        """Release the workers if this backend started them (they are recreated on demand)."""
        if self._executor is not None and self._owns_executor:
            self._executor.close()
            self._executor = None

    def __del__(self) -> None:
        executor = getattr(self, "_executor", None)
        if isinstance(executor, ProcessExecutor) and getattr(self, "_owns_executor", False):
            executor.close(wait=False)

    # -- integer layer -------------------------------------------------------------------------
    def _draw_rs(self, count: int) -> list[int]:
        bits = self.r_bits
        return [self.randbits(bits) for _ in range(count)]

    def encrypt_raw(self, plaintexts: Sequence[int]) -> list[Any]:
        """DJN encryption with fresh short exponents."""
        plaintexts = [int(m) for m in plaintexts]
        n = self.public_key.n
        for m in plaintexts:
            if not 0 <= m < n:
                raise ConfigError("raw plaintext must be in [0, n)")
        return self._run("encrypt", plaintexts, self._draw_rs(len(plaintexts)))

    def precompute_randomness(self, count: int) -> list[Any]:
        """``count`` fresh random factors h_s^r for :meth:`encrypt_with` (the costly part of an encryption).

        Computed ahead — while the party waits for a peer — they make the later encryption one
        multiplication per value. Each factor must be used once: :meth:`encrypt_with` consumes them.
        """
        return self._run("randomness", self._draw_rs(count))

    def encrypt_with(self, plaintexts: Sequence[int], randomness: list[Any]) -> list[Any]:
        """Encrypt with precomputed factors: c = (1 + m n) R mod n^2; the factors used are removed from the list."""
        plaintexts = [int(m) for m in plaintexts]
        if len(randomness) < len(plaintexts):
            raise ConfigError(f"{len(plaintexts)} plaintexts but {len(randomness)} precomputed factors")
        n, nsq = self.engine.n, self.engine.nsq
        if any(not 0 <= m < n for m in plaintexts):
            raise ConfigError("raw plaintext must be in [0, n)")
        factors = randomness[: len(plaintexts)]
        del randomness[: len(plaintexts)]  # never reuse a factor
        return [(mpz(m) * n + 1) * r % nsq for m, r in zip(plaintexts, factors, strict=True)]

    def rerandomize_raw(self, ciphertexts: Sequence[Any]) -> list[Any]:
        """Multiply by h_s^r for fresh r."""
        ciphertexts = list(ciphertexts)
        return self._run("rerandomize", ciphertexts, self._draw_rs(len(ciphertexts)))

    def decrypt_raw(self, ciphertexts: Sequence[Any]) -> list[int]:
        """CRT decryption."""
        self.require_private_key()
        return self._run("decrypt", list(ciphertexts))

    def add_raw(self, a: Sequence[Any], b: Sequence[Any]) -> list[Any]:
        """Add: a * b mod n^2."""
        nsq = self.engine.nsq
        return [x * y % nsq for x, y in zip(a, b, strict=True)]

    def mul_raw(self, ciphertexts: Sequence[Any], scalars: Sequence[int]) -> list[Any]:
        """Multiply: c^k mod n^2, parallel for large inputs."""
        return self._run("mul", list(ciphertexts), [int(k) for k in scalars])

    def linear_combine_raw(
        self, ciphertexts: Sequence[Any], coeffs: Sequence[Sequence[int]]
    ) -> list[Any]:
        """Compute out_j = prod_i c_i^coeffs[j][i] by Straus interleaving, in parallel if large."""
        ciphertexts = list(ciphertexts)
        coeffs = [[int(k) for k in row] for row in coeffs]
        items = len(ciphertexts)
        executor = self._executor_or_none(items * max(1, len(coeffs)) // 4)
        if executor is None or items < 2 * executor.workers:
            partials = [self.engine.linear_combine(ciphertexts, coeffs)]
        else:
            chunk = -(-items // (executor.workers * 2))
            args = self._task_args(executor)
            tasks = ((args, "linear_combine", (ciphertexts[i : i + chunk], [row[i : i + chunk] for row in coeffs]))
                     for i in range(0, items, chunk))
            partials = list(executor.map(_engine_task, tasks))
        nsq = self.engine.nsq
        out = []
        for j in range(len(coeffs)):
            pos, neg = mpz(1), mpz(1)
            for positives, negatives in partials:
                pos = pos * positives[j] % nsq
                neg = neg * negatives[j] % nsq
            out.append(pos if neg == 1 else pos * gmpy2.invert(neg, nsq) % nsq)
        return out

    def add_plain_raw(self, ciphertexts: Sequence[Any], plaintexts: Sequence[int]) -> list[Any]:
        """Add plaintext: c * (1 + m n) mod n^2."""
        n, nsq = self.engine.n, self.engine.nsq
        return [mpz(c) * ((int(m) % n) * n + 1) % nsq
                for c, m in zip(ciphertexts, plaintexts, strict=True)]

    def from_int(self, value: int) -> Any:
        """Ciphertexts are gmpy2 mpz."""
        return mpz(value)

"""Section 1: our primitives against their peers, measured in the same run, interleaved.

* **PSI** — ``psi.run_local`` (X25519 ECDH PSI, both parties in this process, curve work in worker
  processes) against ``openmined-psi`` (C++, P-256, client learns the intersection) on the same IDs,
  50 % overlap. The physical floor is the X25519 scalar multiplications the protocol needs (4 per pair
  of IDs) at this machine's measured rate, spread over the worker processes:
  ``fraction_of_floor = floor seconds / measured seconds`` (1.0 would be all curve work, nothing else).
* **Paillier** (2048-bit n) — securevfl's ``fast`` backend (gmpy2, DJN short exponents, fixed-base
  table) unpacked (one value per ciphertext) and packed (32-bit slots, values per second), against
  python-paillier (``phe``, its own ``EncryptedNumber`` API): encrypt, decrypt, add, multiply by an int.
* **Secure-aggregation mask expansion** — our AES-256-CTR keystream into Z_2^64 (``prg_uint64``)
  against Flower SecAgg+'s ``pseudo_rand_gen`` *reimplemented from its published algorithm* (seed folded
  to 32 bits by XOR, numpy MT19937 ``RandomState(seed32).randint``): not a cryptographic PRG, timed
  only as the speed a peer accepts; Flower itself is not installed.
* **Key agreement** — X25519 against RFC 7919 ffdhe2048 (keygen and one validated exchange per pair).
"""

from __future__ import annotations

import importlib
import math
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from types import ModuleType
from typing import Any

import numpy as np

from securevfl.bench.timing import HIGHER, Figure, interleaved, per_second, ratios, time_calls

MASK_SHAPE = (128, 128)
Tick = Callable[[str], None]


# ----------------------------------------------------------------------------------------- PSI
def make_ids(n: int, overlap: float = 0.5) -> tuple[list[str], list[str]]:
    """Two ID lists of n each sharing round(overlap * n) IDs (deterministic, not secret)."""
    shift = n - round(overlap * n)
    a = [f"user-{i:010d}" for i in range(n)]
    b = [f"user-{i:010d}" for i in range(shift, shift + n)]
    return a, b


def import_openmined() -> ModuleType:
    """The openmined-psi module (2.0.6 installs it as ``private_set_intersection.python``)."""
    try:
        return importlib.import_module("openmined_psi")
    except ImportError:
        return importlib.import_module("private_set_intersection.python")


def openmined_intersection(a: Sequence[str], b: Sequence[str]) -> tuple[int, int]:
    """OpenMined PSI with A as the client (learns the intersection), B the server (GCS setup).

    Returns the intersection size and the bytes of the three messages.
    """
    psi_om = import_openmined()
    server = psi_om.server.CreateWithNewKey(True)
    client = psi_om.client.CreateWithNewKey(True)
    setup = server.CreateSetupMessage(1e-9, len(a), list(b))
    request = client.CreateRequest(list(a))
    response = server.ProcessRequest(request)
    found = client.GetIntersection(setup, response)
    return len(found), setup.ByteSize() + request.ByteSize() + response.ByteSize()


def x25519_mult_samples(count: int = 1000, repeats: int = 3) -> tuple[float, ...]:
    """Seconds per X25519 scalar multiplication as PSI does one (parse a point, ``exchange``), one core."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    key = X25519PrivateKey.generate()
    points = [X25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
              for _ in range(64)]
    todo = (points * (count // len(points) + 1))[:count]

    def run() -> None:
        for p in todo:
            key.exchange(X25519PublicKey.from_public_bytes(p))

    return tuple(s / count for s in time_calls(run, repeats))


def hash_to_curve_samples(count: int = 1000, repeats: int = 3) -> tuple[float, ...]:
    """Seconds per ID hashed onto the curve (try-and-increment, as PSI hashes a batch), one core."""
    from psi.curve import hash_ids

    ids = [f"user-{i:010d}".encode() for i in range(count)]
    return tuple(s / count for s in time_calls(partial(hash_ids, ids, b"\x00" * 32), repeats))


def point_validation_samples(count: int = 1000, repeats: int = 3) -> tuple[float, ...]:
    """Seconds per received point validated (canonical, on the curve), as PSI checks a chunk, one core."""
    from psi.curve import first_off_curve, hash_ids

    points = hash_ids([f"user-{i:010d}".encode() for i in range(count)], b"\x01" * 32)  # valid points
    return tuple(s / count for s in time_calls(partial(first_off_curve, points), repeats))


@dataclass(frozen=True)
class PSIFloorRates:
    """Seconds per operation of the PSI protocol's curve work, measured on one core in the same run."""

    mult: float
    hash_to_curve: float
    validation: float

    def protocol_seconds(self, scalar_mults: int, items_hashed: int, workers: int) -> float:
        """The protocol's curve work alone on ``workers`` cores: every multiplication, hash and validation.

        Every received point is validated before it is blinded, so validations = multiplications
        minus own items hashed (each hashed item is blinded once too).
        """
        validations = max(scalar_mults - items_hashed, 0)
        work = scalar_mults * self.mult + items_hashed * self.hash_to_curve + validations * self.validation
        return work / usable_cores(workers)


def usable_cores(workers: int) -> int:
    """The cores ``workers`` processes can use here: the floors' divisor."""
    return max(1, min(workers, os.cpu_count() or 1))


def floor_seconds(scalar_mults: int, seconds_per_mult: float, workers: int) -> float:
    """Time the scalar multiplications alone take on ``workers`` cores (no hashing, IPC or matching)."""
    return scalar_mults * seconds_per_mult / usable_cores(workers)


def fraction_of_floor(scalar_mults: int, seconds: float, seconds_per_mult: float, workers: int) -> float:
    """Floor seconds / measured seconds: 1.0 is a run that does nothing but its curve work."""
    return floor_seconds(scalar_mults, seconds_per_mult, workers) / seconds


def psi_ours(a: Sequence[str], b: Sequence[str], workers: int | None = None) -> Any:
    """One run of our ECDH PSI between parties A and B (fresh keys); returns the PSIResult."""
    import psi

    return psi.run_local({"A": list(a), "B": list(b)}, workers=workers)


def psi_figures(sizes: Sequence[int], repeats: int, workers: int | None, tick: Tick,
                with_openmined: bool = True) -> dict[int, dict[str, Any]]:
    """Our PSI and openmined-psi, alternated, ``repeats`` times per size; per size the samples and costs."""
    import time

    out: dict[int, dict[str, Any]] = {}
    for n in sizes:
        a, b = make_ids(n)
        expected = round(0.5 * n)
        ours: list[float] = []
        theirs: list[float] = []
        row: dict[str, Any] = {}
        for rep in range(repeats):
            tick(f"PSI {n:,} x {n:,}: ours, repetition {rep + 1}/{repeats}")
            start = time.perf_counter()
            result = psi_ours(a, b, workers)
            ours.append(time.perf_counter() - start)
            if result.intersection_size != expected:
                raise AssertionError(f"PSI found {result.intersection_size} shared IDs, expected {expected}")
            t = result.timings
            row.update(scalar_mults=int(t["A"]["scalar_mults"] + t["B"]["scalar_mults"]),
                       items_hashed=int(t["A"]["items_hashed"] + t["B"]["items_hashed"]),
                       bytes=int(result.total_bytes), rounds=int(result.rounds), workers=int(result.workers))
            if with_openmined:
                tick(f"PSI {n:,} x {n:,}: openmined-psi, repetition {rep + 1}/{repeats}")
                start = time.perf_counter()
                size, nbytes = openmined_intersection(a, b)
                theirs.append(time.perf_counter() - start)
                if size != expected:
                    raise AssertionError(f"openmined-psi found {size} shared IDs, expected {expected}")
                row["openmined_bytes"] = nbytes
        row["ours_s"] = tuple(ours)
        if theirs:
            row["openmined_s"] = tuple(theirs)
        out[n] = row
    return out


# ------------------------------------------------------------------------------------ Paillier
@dataclass(frozen=True)
class PaillierCounts:
    """Items per timed call of each Paillier job."""

    phe_enc: int
    phe_dec: int
    phe_ops: int
    fast: int
    fast_ops: int
    packed_rows: int

    @classmethod
    def scaled(cls, scale: int) -> PaillierCounts:
        if scale <= 0:  # tiny: a smoke run
            return cls(phe_enc=4, phe_dec=4, phe_ops=20, fast=20, fast_ops=40, packed_rows=1)
        return cls(phe_enc=60 * scale, phe_dec=60 * scale, phe_ops=500 * scale, fast=1000 * scale,
                   fast_ops=2000 * scale, packed_rows=20 * scale)


@dataclass
class PaillierCore:
    """Per-round rates of the core jobs, and the ciphertexts they made (for further jobs)."""

    rates: dict[str, tuple[float, ...]]
    enc: Any  # fast, unpacked
    penc: Any  # fast, packed
    phe_ciphertexts: list[Any]
    packed_values: np.ndarray
    slots: int


def paillier_core(fast: Any, phe_pub: Any, phe_priv: Any, counts: PaillierCounts, rounds: int,
                  rng: np.random.Generator, spec: Any) -> PaillierCore:
    """Encrypt, decrypt, add and multiply-by-int for ``phe`` and ``fast`` (unpacked, packed), interleaved.

    Rates are per round (values per second); keys as ``benchmarks/paillier.py`` reports them
    (``phe_encrypt_per_s``, ``fast_encrypt_per_s``, ``fast_packed_encrypt_values_per_s``, ...).
    """
    import secrets

    x = rng.normal(size=max(counts.phe_enc, counts.phe_ops))
    xf = rng.normal(size=max(counts.fast, counts.fast_ops))
    slots = fast.encrypt(np.zeros(1), packing=spec).layout.slots
    xp = rng.normal(size=(counts.packed_rows, slots))
    hold: dict[str, Any] = {}
    phe_enc: list[Any] = []
    enc_s = interleaved(rounds, {
        "phe_encrypt_per_s": lambda: phe_enc.extend(phe_pub.encrypt(float(v)) for v in x[:counts.phe_enc]),
        "fast_encrypt_per_s": lambda: hold.__setitem__("enc", fast.encrypt(xf)),
        "fast_packed_encrypt_values_per_s": lambda: hold.__setitem__("penc", fast.encrypt(xp, packing=spec)),
    })
    enc, penc = hold["enc"], hold["penc"]
    pool = (phe_enc * (counts.phe_ops // len(phe_enc) + 1))[:counts.phe_ops]
    dec_s = interleaved(rounds, {
        "phe_decrypt_per_s": lambda: [phe_priv.decrypt(c) for c in pool[:counts.phe_dec]],
        "fast_decrypt_per_s": lambda: fast.decrypt(enc[:counts.phe_dec]),
        "fast_packed_decrypt_values_per_s": lambda: fast.decrypt(penc),
    })
    big = enc[:counts.fast_ops]
    ints = [secrets.randbelow(2**16) for _ in range(counts.phe_ops)]
    ints_arr = np.array([secrets.randbelow(2**16) for _ in range(big.size)], dtype=np.int64)
    shifted = pool[1:] + pool[:1]
    ops_s = interleaved(rounds, {
        "phe_add_per_s": lambda: [a + b for a, b in zip(pool, shifted)],
        "fast_add_per_s": lambda: big + big,
        "fast_packed_add_values_per_s": lambda: penc + penc,
        "phe_scalar_mul_int_per_s": lambda: [c * k for c, k in zip(pool, ints)],
        "fast_scalar_mul_int_per_s": lambda: big * ints_arr,
        "fast_packed_scalar_mul_values_per_s": lambda: penc * 3,
    })
    counts_by_key = {
        "phe_encrypt_per_s": counts.phe_enc, "fast_encrypt_per_s": xf.size, "fast_packed_encrypt_values_per_s": xp.size,
        "phe_decrypt_per_s": counts.phe_dec, "fast_decrypt_per_s": min(counts.phe_dec, enc.size),
        "fast_packed_decrypt_values_per_s": xp.size, "phe_add_per_s": len(pool), "fast_add_per_s": big.size,
        "fast_packed_add_values_per_s": xp.size, "phe_scalar_mul_int_per_s": len(pool),
        "fast_scalar_mul_int_per_s": big.size, "fast_packed_scalar_mul_values_per_s": xp.size,
    }
    seconds = {**enc_s, **dec_s, **ops_s}
    rates = {k: per_second(counts_by_key[k], s) for k, s in seconds.items()}
    return PaillierCore(rates=rates, enc=enc, penc=penc, phe_ciphertexts=pool, packed_values=xp, slots=slots)


def paillier_figures(scale: int, rounds: int, tick: Tick, bits: int = 2048) -> dict[str, Any]:
    """Fresh 2048-bit key pair, then :func:`paillier_core`; rates per round and the key facts."""
    import time

    from securevfl.privacy.paillier import PackingSpec, create_backend, generate_keypair, to_phe_keys

    tick("Paillier: key pair and fixed-base table")
    start = time.perf_counter()
    pk, sk = generate_keypair(bits)
    keygen_s = time.perf_counter() - start
    phe_pub, phe_priv = to_phe_keys(pk, sk)
    fast: Any = create_backend("fast", pk, sk, workers=1)  # the fast backend's engine and r_bits
    start = time.perf_counter()
    _ = fast.engine.table
    table_s = time.perf_counter() - start
    tick("Paillier: phe vs fast, interleaved")
    spec = PackingSpec(slot_bits=32, max_summands=16, frac_bits=16)
    core = paillier_core(fast, phe_pub, phe_priv, PaillierCounts.scaled(scale), rounds, np.random.default_rng(0),
                         spec)
    return {"rates": core.rates, "key_bits": bits, "r_bits": fast.r_bits, "keygen_s": keygen_s,
            "table_build_s": table_s, "slots": core.slots, "slot_bits": spec.slot_bits}


# ---------------------------------------------------------------- mask expansion, key agreement
def flower_mt19937_expand(seed: bytes, shape: tuple[int, ...]) -> np.ndarray:
    """Flower SecAgg+'s ``pseudo_rand_gen``, reimplemented from its published algorithm (not a CSPRNG)."""
    seed32 = 0
    for i in range(0, len(seed), 4):
        seed32 ^= int.from_bytes(seed[i : i + 4], "little")
    return np.random.RandomState(seed32).randint(0, 2**32 - 1, shape, dtype=np.int64)


def mask_expansion_samples(repeats: int, shape: tuple[int, ...] = MASK_SHAPE) -> dict[str, tuple[float, ...]]:
    """Seconds per expansion of one mask of ``shape``: ours (AES-CTR, Z_2^64) and Flower's MT19937, alternated."""
    from securevfl.privacy.primitives.prg import prg_uint64

    seed = bytes(range(32))
    counter = iter(range(10**9))
    return interleaved(repeats, {
        "ours_aes_ctr": lambda: prg_uint64(seed, shape, next(counter), "bench"),
        "flower_mt19937": lambda: flower_mt19937_expand(seed, shape),
    }, warmup=2)


def aes_ctr_samples(repeats: int, n_bytes: int = 1 << 23) -> tuple[float, ...]:
    """Seconds per GB (10^9 bytes) of AES-256-CTR keystream written into a reused buffer, one core.

    The ceiling of mask expansion on this machine (OpenSSL through ``cryptography``, one context
    per call as the masks use): :func:`~securevfl.privacy.primitives.prg.prg_bytes` minus the
    allocation.
    """
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    zeros, out = bytes(n_bytes), bytearray(n_bytes + 16)
    key, block = bytes(range(32)), bytes(16)

    def run() -> None:
        Cipher(algorithms.AES(key), modes.CTR(block)).encryptor().update_into(zeros, out)

    return tuple(s * 1e9 / n_bytes for s in time_calls(run, max(3, repeats), warmup=2))


def key_agreement_samples(repeats: int, schemes: Sequence[str] = ("x25519", "ffdh2048")) -> dict[str, dict[str, Any]]:
    """Seconds per key generation and per exchange (validated, and pre-validated) for each scheme."""
    from securevfl.privacy.primitives.key_agreement import create_key_agreement

    rows: dict[str, dict[str, Any]] = {}
    for name in schemes:
        ka = create_key_agreement(name)
        a, b = ka.generate(), ka.generate()
        rows[name] = {
            "keygen": time_calls(ka.generate, repeats, warmup=2),
            "exchange": time_calls(partial(ka.exchange, a.private, b.public), repeats, warmup=2),
            "exchange_prevalidated": time_calls(partial(ka.exchange, a.private, b.public, validate=False), repeats,
                                                warmup=2),
        }
    return rows


# ----------------------------------------------------------------------------------- the section
def measure(sizes: Any, psi_workers: int | None, tick: Tick) -> dict[str, Any]:
    """Run every primitive measurement of section 1; plain data for :func:`figures` and the plots."""
    tick("X25519 multiplication, hash-to-curve and point-validation rates (the PSI floors)")
    count = 200 if sizes.paillier_scale <= 0 else 2000
    x25519 = x25519_mult_samples(count=count, repeats=sizes.repeats)
    hashing = hash_to_curve_samples(count=count, repeats=sizes.repeats)
    validation = point_validation_samples(count=count, repeats=sizes.repeats)
    psi_rows = psi_figures(sizes.psi_sizes, sizes.repeats, psi_workers, tick)
    paillier = paillier_figures(sizes.paillier_scale, sizes.repeats, tick)
    tick("mask expansion and key agreement")
    masks = mask_expansion_samples(sizes.mask_repeats)
    aes = aes_ctr_samples(repeats=sizes.mask_repeats)
    kas = key_agreement_samples(max(5, sizes.mask_repeats // 5))
    return {"x25519_s_per_mult": x25519, "hash_to_curve_s_per_id": hashing, "validation_s_per_point": validation,
            "psi": psi_rows, "paillier": paillier, "masks": masks, "aes_ctr_s_per_gb": aes, "key_agreement": kas}


PAILLIER_OPS = (  # label, phe key, fast key, fast packed key
    ("encrypt", "phe_encrypt_per_s", "fast_encrypt_per_s", "fast_packed_encrypt_values_per_s"),
    ("decrypt", "phe_decrypt_per_s", "fast_decrypt_per_s", "fast_packed_decrypt_values_per_s"),
    ("add", "phe_add_per_s", "fast_add_per_s", "fast_packed_add_values_per_s"),
    ("scalar multiply (int < 2^16)", "phe_scalar_mul_int_per_s", "fast_scalar_mul_int_per_s",
     "fast_packed_scalar_mul_values_per_s"),
)


def figures(data: dict[str, Any]) -> list[Figure]:
    """The section's named figures (with ratios computed repetition by repetition)."""
    out: list[Figure] = []
    per_mult = data["x25519_s_per_mult"]
    out.append(Figure("primitives.x25519.us_per_mult", "µs", tuple(s * 1e6 for s in per_mult),
                      note="parse a point + exchange, one core"))
    for n, row in data["psi"].items():
        ours = row["ours_s"]
        out.append(Figure(f"primitives.psi.{n}.ours_s", "s", ours))
        floor = floor_seconds(row["scalar_mults"], min(per_mult), row["workers"])
        out.append(Figure(f"primitives.psi.{n}.floor_s", "s", (floor,),
                          note=f"{row['scalar_mults']:,} X25519 multiplications on {row['workers']} workers"))
        out.append(Figure(f"primitives.psi.{n}.fraction_of_floor", "", tuple(floor / s for s in ours), HIGHER))
        if "hash_to_curve_s_per_id" in data and "items_hashed" in row:
            rates = PSIFloorRates(min(per_mult), min(data["hash_to_curve_s_per_id"]),
                                  min(data["validation_s_per_point"]))
            whole = rates.protocol_seconds(row["scalar_mults"], row["items_hashed"], row["workers"])
            out.append(Figure(f"primitives.psi.{n}.protocol_floor_s", "s", (whole,),
                              note="multiplications + hash-to-curve + point validation at this run's rates"))
            out.append(Figure(f"primitives.psi.{n}.fraction_of_protocol_floor", "", tuple(whole / s for s in ours),
                              HIGHER))
        if "openmined_s" in row:
            out.append(Figure(f"primitives.psi.{n}.openmined_s", "s", row["openmined_s"]))
            out.append(Figure(f"primitives.psi.{n}.speedup_vs_openmined", "x", ratios(row["openmined_s"], ours),
                              HIGHER))
    rates = data["paillier"]["rates"]
    for label, phe, fast, packed in PAILLIER_OPS:
        op = label.split(" (")[0].replace(" ", "_")
        out.append(Figure(f"primitives.paillier.{op}.phe_per_s", "values/s", rates[phe], HIGHER))
        out.append(Figure(f"primitives.paillier.{op}.fast_per_s", "values/s", rates[fast], HIGHER))
        out.append(Figure(f"primitives.paillier.{op}.fast_packed_per_s", "values/s", rates[packed], HIGHER))
        out.append(Figure(f"primitives.paillier.{op}.fast_vs_phe", "x", ratios(rates[fast], rates[phe]), HIGHER))
        out.append(Figure(f"primitives.paillier.{op}.packed_vs_phe", "x", ratios(rates[packed], rates[phe]), HIGHER))
    masks = data["masks"]
    out.append(Figure("primitives.mask.ours_aes_ctr_ms", "ms", tuple(s * 1e3 for s in masks["ours_aes_ctr"])))
    out.append(Figure("primitives.mask.flower_mt19937_ms", "ms", tuple(s * 1e3 for s in masks["flower_mt19937"]),
                      note="Flower SecAgg+ pseudo_rand_gen, reimplemented"))
    out.append(Figure("primitives.mask.speedup_vs_flower", "x",
                      ratios(masks["flower_mt19937"], masks["ours_aes_ctr"]), HIGHER))
    if "aes_ctr_s_per_gb" in data:
        out.append(Figure("primitives.mask.aes_ctr_gb_per_s", "GB/s", tuple(1 / s for s in data["aes_ctr_s_per_gb"]),
                          HIGHER, note="AES-256-CTR keystream into a reused buffer, one core (the masks' ceiling)"))
        out.append(Figure("primitives.mask.expansion_gb_per_s", "GB/s",
                          tuple(8 * math.prod(MASK_SHAPE) / s / 1e9 for s in masks["ours_aes_ctr"]), HIGHER,
                          note=f"a {MASK_SHAPE[0]} x {MASK_SHAPE[1]} uint64 mask, fresh array"))
    kas = data["key_agreement"]
    for name, row in kas.items():
        for what, samples in row.items():
            out.append(Figure(f"primitives.key_agreement.{name}.{what}_ms", "ms", tuple(s * 1e3 for s in samples)))
    if "x25519" in kas and "ffdh2048" in kas:
        out.append(Figure("primitives.key_agreement.x25519_speedup_vs_ffdh2048", "x",
                          ratios(kas["ffdh2048"]["exchange"], kas["x25519"]["exchange"]), HIGHER))
    return out


def _med(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def section(data: dict[str, Any], figs: dict[str, Figure]) -> Any:
    """Section 1 of the report: tables (units in the headers), text and the figure file."""
    from securevfl.bench.results import Section, Table

    s = Section("primitives", "1. Primitives against their peers (same run, interleaved)", text=__doc__ or "")
    psi_t = Table("ECDH PSI, 50 % overlap, both parties on this machine",
                  ["IDs per party", "ours median (s)", "ours min (s)", "openmined-psi median (s)",
                   "openmined-psi min (s)", "speed-up (x, median)", "floor (s)", "fraction of floor (median)",
                   "bytes ours / openmined"])
    for n, row in data["psi"].items():
        has_om = f"primitives.psi.{n}.openmined_s" in figs
        om = figs.get(f"primitives.psi.{n}.openmined_s")
        sp = figs.get(f"primitives.psi.{n}.speedup_vs_openmined")
        psi_t.add(f"{n:,}", f"{figs[f'primitives.psi.{n}.ours_s'].median:.3f}",
                  f"{figs[f'primitives.psi.{n}.ours_s'].min:.3f}",
                  f"{om.median:.3f}" if om else "-", f"{om.min:.3f}" if om else "-",
                  f"{sp.median:.2f}" if sp else "-", f"{figs[f'primitives.psi.{n}.floor_s'].median:.3f}",
                  f"{figs[f'primitives.psi.{n}.fraction_of_floor'].median:.2f}",
                  f"{row['bytes']:,} / {row.get('openmined_bytes', 0):,}" if has_om else f"{row['bytes']:,}")
    psi_t.note = (f"floor = 4 X25519 multiplications per ID pair at "
                  f"{figs['primitives.x25519.us_per_mult'].min:.1f} µs each (measured here), over the workers")
    if data.get("hash_to_curve_s_per_id"):
        psi_t.columns += ["protocol floor (s)", "fraction of protocol floor (median)"]
        for row_cells, n in zip(psi_t.rows, data["psi"]):
            whole = figs.get(f"primitives.psi.{n}.protocol_floor_s")
            frac = figs.get(f"primitives.psi.{n}.fraction_of_protocol_floor")
            row_cells += [f"{whole.median:.3f}" if whole else "-", f"{frac.median:.2f}" if frac else "-"]
        psi_t.note += (f"; protocol floor = the same multiplications + hash-to-curve of every own ID "
                       f"({min(data['hash_to_curve_s_per_id']) * 1e6:.1f} µs) + validation of every received point "
                       f"({min(data['validation_s_per_point']) * 1e6:.1f} µs), rates measured in this run")
    s.tables.append(psi_t)
    p = data["paillier"]
    pt = Table(f"Paillier, {p['key_bits']}-bit n (fast: DJN r = {p['r_bits']} bits, fixed-base table; packed: "
               f"{p['slots']} slots of {p['slot_bits']} bits), medians",
               ["operation", "phe (values/s)", "fast (values/s)", "fast packed (values/s)", "fast / phe (x)",
                "packed / phe (x)"])
    for label, *_ in PAILLIER_OPS:
        op = label.split(" (")[0].replace(" ", "_")
        k = f"primitives.paillier.{op}"
        pt.add(label, f"{figs[k + '.phe_per_s'].median:,.0f}", f"{figs[k + '.fast_per_s'].median:,.0f}",
               f"{figs[k + '.fast_packed_per_s'].median:,.0f}", f"{figs[k + '.fast_vs_phe'].median:,.1f}",
               f"{figs[k + '.packed_vs_phe'].median:,.1f}")
    s.tables.append(pt)
    mt = Table(f"Secure-aggregation mask expansion, one {MASK_SHAPE[0]} x {MASK_SHAPE[1]} mask",
               ["PRG", "median (ms)", "min (ms)", "cryptographic"])
    mt.add("ours: AES-256-CTR into Z_2^64", f"{figs['primitives.mask.ours_aes_ctr_ms'].median:.3f}",
           f"{figs['primitives.mask.ours_aes_ctr_ms'].min:.3f}", "yes")
    mt.add("Flower SecAgg+ pseudo_rand_gen (MT19937, 32-bit seed; reimplemented)",
           f"{figs['primitives.mask.flower_mt19937_ms'].median:.3f}",
           f"{figs['primitives.mask.flower_mt19937_ms'].min:.3f}", "no (2^32 seeds)")
    mt.note = f"ours is {figs['primitives.mask.speedup_vs_flower'].median:.2f}x the speed of Flower's (median)"
    s.tables.append(mt)
    kt = Table("Key agreement (per pair)", ["scheme", "keygen median (ms)", "exchange median (ms)",
                                             "exchange, pre-validated median (ms)"])
    for name in data["key_agreement"]:
        k = f"primitives.key_agreement.{name}"
        kt.add(name, f"{figs[k + '.keygen_ms'].median:.3f}", f"{figs[k + '.exchange_ms'].median:.3f}",
               f"{figs[k + '.exchange_prevalidated_ms'].median:.3f}")
    if "primitives.key_agreement.x25519_speedup_vs_ffdh2048" in figs:
        kt.note = (f"X25519 exchange is {figs['primitives.key_agreement.x25519_speedup_vs_ffdh2048'].median:.1f}x "
                   "faster than ffdhe2048 (median)")
    s.tables.append(kt)
    s.data = {"paillier": {k: v for k, v in p.items() if k != "rates"},
              "psi": {str(n): {k: v for k, v in row.items() if not k.endswith("_s")} for n, row in data["psi"].items()}}
    return s

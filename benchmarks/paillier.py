"""Paillier throughput: python-paillier (``phe``) vs securevfl's ``fast`` backend, same run.

Per-value rates at 2048-bit keys for encrypt / decrypt / ciphertext add / scalar multiply, for
phe's own API (EncryptedNumber, default obfuscation), ``fast`` unpacked (one value per
ciphertext) and ``fast`` packed (63 x 32-bit slots per ciphertext), plus ablations (no CRT
encryption, i.e. a party with only the public key; no fixed-base table) and the process pool.

    .venv/bin/python benchmarks/paillier.py --quick --out out/paillier.json
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from psi.executors import ExecutorConfig
from securevfl.bench.primitives import PaillierCounts, paillier_core
from securevfl.bench.results import write_json
from securevfl.bench.timing import best_rate as rate
from securevfl.bench.timing import interleaved as interleaved_seconds
from securevfl.bench.timing import per_second
from securevfl.privacy.paillier import (
    PackingSpec,
    create_backend,
    generate_keypair,
    to_phe_keys,
)


def interleaved(rounds: int, jobs: dict[str, tuple[int, Callable[[], object]]]) -> dict[str, float]:
    """Best rate per job over ``rounds`` rounds that alternate the jobs (fair under load)."""
    seconds = interleaved_seconds(rounds, {key: fn for key, (_, fn) in jobs.items()})
    return {key: max(per_second(jobs[key][0], s)) for key, s in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="about one minute")
    parser.add_argument("--out", type=Path, help="write the figures as JSON")
    parser.add_argument("--bits", type=int, default=2048, choices=[2048, 3072])
    parser.add_argument("--workers", type=int, default=2, help="processes for the parallel rows")
    parser.add_argument("--executor", default="process", choices=["process", "ray"],
                        help="where the parallel rows run: a local process pool or a Ray cluster")
    parser.add_argument("--ray-address", default=None, help="with --executor ray: the cluster (default: local Ray)")
    args = parser.parse_args()

    scale = 1 if args.quick else 4
    n_phe_enc, n_phe_dec, n_phe_ops = 300 * scale, 300 * scale, 2000 * scale
    n_fast, n_fast_dec, n_ops = 2000 * scale, 300 * scale, 4000 * scale
    packed_rows = 60 * scale  # ciphertexts in the packed runs
    rng = np.random.default_rng(0)
    console = Console()

    t0 = time.perf_counter()
    pk, sk = generate_keypair(args.bits)
    keygen_s = time.perf_counter() - t0
    phe_pub, phe_priv = to_phe_keys(pk, sk)
    fast = create_backend("fast", pk, sk, workers=1)
    fast_public = create_backend("fast", pk, workers=1)
    fast_notable = create_backend("fast", pk, workers=1, use_table=False)
    t0 = time.perf_counter()
    _ = fast.engine.table
    _ = fast_public.engine.table
    table_s = (time.perf_counter() - t0) / 2
    results: dict[str, float | int | str] = {
        "key_bits": args.bits,
        "r_bits": fast.r_bits,
        "keygen_s": round(keygen_s, 3),
        "table_build_s": round(table_s, 3),
        "table_mib": round(fast.engine.table_bytes() / 2**20, 2),
    }

    # ---- phe vs fast (unpacked, packed): encrypt, decrypt, add, x int — shared with `securevfl bench` ----------
    rounds = 5
    counts = PaillierCounts(phe_enc=n_phe_enc // rounds, phe_dec=n_phe_dec // rounds, phe_ops=n_phe_ops,
                            fast=n_fast, fast_ops=n_ops, packed_rows=packed_rows)
    spec = PackingSpec(slot_bits=32, max_summands=16, frac_bits=16)
    core = paillier_core(fast, phe_pub, phe_priv, counts, rounds, rng, spec)
    results.update({key: max(samples) for key, samples in core.rates.items()})
    enc, penc, pool, xp, slots = core.enc, core.penc, core.phe_ciphertexts, core.packed_values, core.slots
    xf = rng.normal(size=n_fast)

    # ---- ablations: a party with only the public key (no CRT), no fixed-base table ---------------
    n_nt = max(20, n_fast // 50)
    results.update(interleaved(rounds, {
        "fast_public_key_encrypt_per_s": (n_fast // 2, lambda: fast_public.encrypt(xf[: n_fast // 2])),
        "fast_no_table_encrypt_per_s": (n_nt, lambda: fast_notable.encrypt(xf[:n_nt])),
    }))
    holder: dict[str, object] = {}

    # ---- homomorphic operations with float weights ----------------------------------------------
    floats = rng.normal(size=n_phe_ops).tolist()
    results["phe_scalar_mul_float_per_s"] = rate(
        n_phe_ops, lambda: [c * k for c, k in zip(pool, floats, strict=True)], 2)
    big = enc[:n_ops]
    floats_arr = rng.normal(size=big.size)
    results["fast_scalar_mul_float_per_s"] = rate(big.size, lambda: big * floats_arr, 2)
    results["fast_bytes_per_value_unpacked"] = enc.nbytes / enc.size
    results["fast_bytes_per_value_packed"] = penc.nbytes / penc.size
    results["packed_slots"] = slots
    results["packed_max_abs_error"] = float(np.max(np.abs(fast.decrypt(penc + penc) - 2 * xp)))

    # ---- gradient-style product X^T @ enc(residual), float weights ----------------------------
    d = 10
    b_phe, b_fast = 50 * scale, 200 * scale
    xw = rng.normal(size=(b_fast, d))
    phe_vec = pool[:b_phe]
    results["phe_matvec_terms_per_s"] = rate(b_phe * d, lambda: [
        sum((c * float(w) for c, w in zip(phe_vec, col, strict=True)), 0)
        for col in xw[:b_phe].T])
    vec = big[:b_fast]
    results["fast_matvec_terms_per_s"] = rate(b_fast * d, lambda: xw.T @ vec, 2)
    results["fast_matvec_naive_terms_per_s"] = rate(
        b_fast * d, lambda: (vec.reshape(b_fast, 1) * xw).sum(axis=0))

    # ---- fast, process pool --------------------------------------------------------------------
    if args.workers > 1:
        executor = ExecutorConfig(args.executor, args.workers, args.ray_address)
        with create_backend("fast", pk, sk, parallel_min_items=64, executor=executor) as par:
            t0 = time.perf_counter()
            par.encrypt(xf[:128])  # starts the pool and builds each worker's table
            results["pool_startup_s"] = round(time.perf_counter() - t0, 3)
            results["fast_parallel_encrypt_per_s"] = rate(
                n_fast, lambda: holder.__setitem__("penc2", par.encrypt(xf)), 2)
            results["fast_parallel_decrypt_per_s"] = rate(
                n_fast_dec, lambda: par.decrypt(holder["penc2"][:n_fast_dec]), 2)
            results["fast_parallel_packed_encrypt_values_per_s"] = rate(
                xp.size, lambda: holder.__setitem__("pp", par.encrypt(xp, packing=spec)), 2)
            results["fast_parallel_packed_decrypt_values_per_s"] = rate(
                xp.size, lambda: par.decrypt(holder["pp"]), 2)
        results["workers"] = args.workers
        results["executor"] = args.executor

    # ---- ratios ------------------------------------------------------------------------------
    phe_e, phe_d = results["phe_encrypt_per_s"], results["phe_decrypt_per_s"]
    results["encrypt_speedup_vs_phe"] = results["fast_packed_encrypt_values_per_s"] / phe_e
    results["decrypt_speedup_vs_phe"] = results["fast_packed_decrypt_values_per_s"] / phe_d
    results["encrypt_speedup_vs_phe_unpacked"] = results["fast_encrypt_per_s"] / phe_e
    results["decrypt_speedup_vs_phe_unpacked"] = results["fast_decrypt_per_s"] / phe_d
    results["encrypt_speedup_vs_phe_public_key_only"] = (
        results["fast_public_key_encrypt_per_s"] / phe_e)
    results["add_speedup_vs_phe_unpacked"] = results["fast_add_per_s"] / results["phe_add_per_s"]
    results["scalar_mul_int_speedup_vs_phe_unpacked"] = (
        results["fast_scalar_mul_int_per_s"] / results["phe_scalar_mul_int_per_s"])
    results["scalar_mul_float_speedup_vs_phe_unpacked"] = (
        results["fast_scalar_mul_float_per_s"] / results["phe_scalar_mul_float_per_s"])
    results["matvec_speedup_vs_phe"] = (
        results["fast_matvec_terms_per_s"] / results["phe_matvec_terms_per_s"])
    results["quick"] = bool(args.quick)
    results["cpu_count"] = os.cpu_count() or 0
    results["machine"] = platform.platform()

    table = Table(title=f"Paillier per-value throughput, {args.bits}-bit n, r = {fast.r_bits} bits")
    table.add_column("operation")
    for col in ("phe /s", "fast /s", "fast packed values/s", "fast/phe", "packed/phe"):
        table.add_column(col, justify="right")

    def fmt(v: object) -> str:
        return f"{v:,.0f}" if isinstance(v, (int, float)) else "-"

    rows = [
        ("encrypt", "phe_encrypt_per_s", "fast_encrypt_per_s", "fast_packed_encrypt_values_per_s"),
        ("decrypt", "phe_decrypt_per_s", "fast_decrypt_per_s", "fast_packed_decrypt_values_per_s"),
        ("add ciphertexts", "phe_add_per_s", "fast_add_per_s", "fast_packed_add_values_per_s"),
        ("x int (<2^16)", "phe_scalar_mul_int_per_s", "fast_scalar_mul_int_per_s",
         "fast_packed_scalar_mul_values_per_s"),
        ("x float", "phe_scalar_mul_float_per_s", "fast_scalar_mul_float_per_s", None),
        ("X^T @ enc (terms)", "phe_matvec_terms_per_s", "fast_matvec_terms_per_s", None),
    ]
    for label, p, f, pk_ in rows:
        pv, fv = results[p], results[f]
        packed = results[pk_] if pk_ else None
        table.add_row(label, fmt(pv), fmt(fv), fmt(packed), f"{fv / pv:.1f}x",
                      f"{packed / pv:.1f}x" if packed else "-")
    console.print(table)
    extra = Table(title="ablations and pool")
    extra.add_column("figure")
    extra.add_column("value", justify="right")
    for key in ("fast_public_key_encrypt_per_s", "fast_no_table_encrypt_per_s",
                "fast_matvec_naive_terms_per_s",
                "fast_parallel_encrypt_per_s", "fast_parallel_decrypt_per_s",
                "fast_parallel_packed_encrypt_values_per_s",
                "fast_parallel_packed_decrypt_values_per_s", "pool_startup_s", "table_build_s",
                "table_mib", "keygen_s", "fast_bytes_per_value_unpacked",
                "fast_bytes_per_value_packed", "packed_max_abs_error"):
        if key in results:
            value = results[key]
            extra.add_row(key, f"{value:,.3g}" if value < 100 else f"{value:,.0f}")
    console.print(extra)
    console.print(
        f"encrypt_speedup_vs_phe = {results['encrypt_speedup_vs_phe']:.1f}x packed "
        f"({results['encrypt_speedup_vs_phe_unpacked']:.1f}x unpacked); "
        f"decrypt_speedup_vs_phe = {results['decrypt_speedup_vs_phe']:.1f}x packed "
        f"({results['decrypt_speedup_vs_phe_unpacked']:.2f}x unpacked)"
    )
    if args.out:
        write_json(args.out, results, sort_keys=True)
        console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

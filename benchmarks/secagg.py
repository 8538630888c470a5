"""Secure-aggregation benchmark: mask throughput, key agreement, Shamir, dropout recovery.

Run: ``.venv/bin/python benchmarks/secagg.py [--quick] [--out FILE.json]``.

Sections are separate functions so that more can be added (the EASTER end-to-end overhead
section belongs to whoever writes the EASTER method). The peer comparison reimplements the
three-line mask expansion of Flower's SecAgg+ (``pseudo_rand_gen``: the seed is folded to 32
bits by XOR and expanded with numpy's MT19937 ``RandomState(seed32).randint``), which is not a
cryptographic PRG (2^32 seeds can be brute-forced); ours is AES-CTR. Newer Flower releases may
have replaced it; we time the MT19937 version the brief names, without installing flwr. The mask,
peer and key-agreement measurements are shared with ``securevfl bench``
(:mod:`securevfl.bench.primitives`, :mod:`securevfl.bench.scaling`).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from securevfl.bench.primitives import key_agreement_samples, mask_expansion_samples
from securevfl.bench.results import write_json
from securevfl.bench.scaling import mask_scaling
from securevfl.bench.timing import time_calls
from securevfl.privacy.primitives.shamir import reconstruct_secret, split_secret
from securevfl.privacy.secagg import (
    AggregatorSecAggState,
    PassiveSecAggState,
    SecAggConfig,
    advertise_keys,
    aggregate,
    collect_adverts,
    collect_setups,
    masked_input,
    receive_keys,
    receive_setup,
    share_keys,
    unmask_request,
    unmask_response,
)

SHAPE = (128, 128)
console = Console()


def _time(fn: Callable[[], object], repeats: int, warmup: int = 2) -> float:
    """Median seconds per call."""
    return statistics.median(time_calls(fn, repeats, warmup))


def bench_mask_throughput(party_counts: list[int], repeats: int) -> dict:
    """Per-party encode+mask time and aggregator sum+decode time for a (128,128) float32 batch."""
    out_bytes = int(np.prod(SHAPE)) * 8
    rows = {}
    for n, samples in mask_scaling(party_counts, repeats).items():
        per_party = statistics.median(samples["mask_per_party"])
        rows[n] = {
            "mask_ms_per_party": per_party * 1e3,
            "sum_decode_ms": statistics.median(samples["sum_decode"]) * 1e3,
            "mask_mb_per_s": out_bytes / per_party / 1e6,
            "seed_setup_ms_per_party": statistics.median(samples["setup_per_party"]) * 1e3,
        }
    return rows


def bench_flower_peer(repeats: int) -> dict:
    """Our AES-CTR expansion vs Flower SecAgg+'s MT19937 expansion, same (128,128) shape."""
    samples = mask_expansion_samples(repeats, SHAPE)
    ours, theirs = statistics.median(samples["ours_aes_ctr"]), statistics.median(samples["flower_mt19937"])
    return {
        "ours_aes_ctr_ms": ours * 1e3,
        "flower_mt19937_ms": theirs * 1e3,
        "speed_ratio_ours_over_flower": theirs / ours,
        "note": "ours: AES-256-CTR, 64-bit ring elements (cryptographic PRG); Flower: MT19937 "
        "from a 32-bit folded seed, 32-bit range in int64 (not cryptographic, brute-forceable)",
    }


def bench_key_agreement(repeats: int) -> dict:
    """Key generation and one exchange per pair for X25519 and FFDH-2048 (incl. validation)."""
    return {
        name: {f"{what}_ms": statistics.median(samples) * 1e3 for what, samples in row.items()}
        for name, row in key_agreement_samples(repeats).items()
    }


def bench_shamir(party_counts: list[int], repeats: int) -> dict:
    """Split a 32-byte secret into n shares (t = n//2+1) and reconstruct from t."""
    rows = {}
    secret = bytes(range(32))
    for n in party_counts:
        t = max(2, n // 2 + 1)
        shares = split_secret(secret, t, range(1, n + 1))
        rows[n] = {
            "threshold": t,
            "split_ms": _time(lambda n=n, t=t: split_secret(secret, t, range(1, n + 1)), repeats)
            * 1e3,
            "reconstruct_ms": _time(lambda s=shares, t=t: reconstruct_secret(s[:t]), repeats) * 1e3,
        }
    return rows


def _protocol_round(n: int, drop: bool, x: np.ndarray, repeats: int) -> dict:
    """Time each step of one double-masked round with n parties (one drops after setup).

    The steps are pure functions of frozen states, so each is simply re-run on the same
    inputs ``repeats`` times and the median taken.
    """
    cfg = SecAggConfig(b"bench", tuple(f"p{i:02d}" for i in range(n)), max(2, n // 2 + 1))
    parties = {p: PassiveSecAggState.create(cfg, p) for p in cfg.parties}
    agg = AggregatorSecAggState.create(cfg)
    agg, directory = collect_adverts(agg, [advertise_keys(s) for s in parties.values()])
    parties = {p: receive_keys(s, directory) for p, s in parties.items()}
    setups = []
    for p in cfg.parties:
        parties[p], setup = share_keys(parties[p], 0)
        setups.append(setup)
    agg, bundles = collect_setups(agg, setups)
    me = cfg.parties[-1]
    receive_s = _time(lambda: receive_setup(parties[me], bundles[me]), repeats)
    parties = {p: receive_setup(parties[p], bundles[p]) for p in cfg.parties}
    mask_s = _time(lambda: masked_input(parties[me], x, 0), repeats)
    senders = cfg.parties[1:] if drop else cfg.parties
    masked = []
    for p in senders:
        parties[p], message = masked_input(parties[p], x, 0)
        masked.append(message)
    agg, request = unmask_request(agg, masked)
    respond_s = _time(lambda: unmask_response(parties[me], request), repeats)
    responses = []
    for p in request.survivors:
        parties[p], response = unmask_response(parties[p], request)
        responses.append(response)
    aggregate_s = _time(lambda: aggregate(agg, responses), repeats)
    return {
        "party_receive_setup_ms": receive_s * 1e3,
        "party_mask_and_next_setup_ms": mask_s * 1e3,
        "party_unmask_response_ms": respond_s * 1e3,
        "aggregator_unmask_ms": aggregate_s * 1e3,
    }


def bench_recovery(party_counts: list[int], repeats: int) -> dict:
    """Double-masked protocol round costs, without and with one dropped party."""
    x = np.random.default_rng(1).normal(size=SHAPE).astype(np.float32)
    rows = {}
    for n in party_counts:
        runs = {
            "no_drop": _protocol_round(n, False, x, repeats),
            "one_dropped": _protocol_round(n, True, x, repeats),
        }
        runs["recovery_extra_ms"] = (
            runs["one_dropped"]["aggregator_unmask_ms"] - runs["no_drop"]["aggregator_unmask_ms"]
        )
        rows[n] = runs
    return rows


def bench_easter_overhead(quick: bool, figures: dict) -> None:
    """EASTER section (owned by the EASTER method's author): DH secure aggregation's share of
    EASTER's epoch time at batch 128, embedding 128, 4 parties, CPU. Implemented in
    ``benchmarks/easter.py`` (``secagg_overhead``); adds ``secagg_overhead_fraction`` here."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("easter_bench", Path(__file__).with_name("easter.py"))
    easter_bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(easter_bench)
    overhead = easter_bench.overhead_figures(quick)
    figures["easter_overhead"] = overhead
    figures["secagg_overhead_fraction"] = overhead["secagg_overhead_fraction"]
    figures["secagg_overhead_fraction_by_dataset"] = overhead["secagg_overhead_fraction_by_dataset"]
    figures["pairwise_overhead_fraction_by_dataset"] = overhead["pairwise_overhead_fraction_by_dataset"]
    figures["aes_ctr_gb_per_s"] = overhead["aes_ctr_gb_per_s"]
    figures["dh_crypto_ms_per_round_by_dataset"] = overhead["dh_crypto_ms_per_round_by_dataset"]
    # issue 47: keys once per session (the default) against fresh keys every round, in the same run
    for key in ("secagg_round_crypto_ms", "secagg_round_crypto_ms_by_dataset",
                "secagg_round_crypto_ms_per_round_keys_by_dataset", "secagg_round_crypto_ratio_vs_per_round_keys",
                "per_round_keys_overhead_fraction_by_dataset"):
        figures[key] = overhead[key]
    print_overhead_summary(overhead)


def print_overhead_summary(overhead: dict) -> None:
    """One column per dataset: the overhead fractions and where dh's milliseconds go per step."""
    by_dataset = overhead["by_dataset"]
    keys = sorted({k for f in by_dataset.values() for k in f["per_step_crypto_ms_all_parties"]})
    table = Table(title="secagg_overhead_fraction per dataset (EASTER, 4 parties, batch 128, embedding 128)")
    table.add_column("item")
    for name in by_dataset:
        table.add_column(name, justify="right")
    rows = [
        ("secagg_overhead_fraction (dh)", lambda f: f"{f['secagg_overhead_fraction']:+.3f}"),
        ("pairwise_overhead_fraction", lambda f: f"{f['pairwise_overhead_fraction']:+.3f}"),
        *((f"dh per step: {k} ms", lambda f, k=k: f"{f['per_step_crypto_ms_all_parties'].get(k, 0.0):.3f}")
          for k in keys),
        ("dh per step: crypto total ms", lambda f: f"{f['per_step_crypto_ms_total']:.2f}"),
        ("per step: model compute ms", lambda f: f"{f['per_step_compute_ms_all_parties']:.2f}"),
    ]
    for label, cell in rows:
        table.add_row(label, *(cell(f) for f in by_dataset.values()))
    console.print(table)
    console.print("Per-step ms are time inside the meter's crypto scopes, summed over all parties (the parties "
                  "run one at a time, as greenlets of one thread); fractions are the larger of the wall and CPU "
                  "fractions (minimum epoch times over none).")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (about a minute)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON to this file")
    args = parser.parse_args(argv)
    repeats = 50 if args.quick else 200
    proto_repeats = 10 if args.quick else 30
    counts = [2, 4, 8, 16, 32]

    masks = bench_mask_throughput(counts, repeats)
    table = Table(title=f"Masking one {SHAPE} float32 batch (2^-16 fixed point, Z_2^64)")
    for col in ("parties", "encode+mask ms/party", "MB/s masked out", "sum+decode ms"):
        table.add_column(col, justify="right")
    for n, row in masks.items():
        table.add_row(
            str(n),
            f"{row['mask_ms_per_party']:.3f}",
            f"{row['mask_mb_per_s']:.0f}",
            f"{row['sum_decode_ms']:.3f}",
        )
    console.print(table)

    peer = bench_flower_peer(repeats * 4)
    console.print(
        f"PRG expansion of one {SHAPE} mask: ours (AES-CTR) {peer['ours_aes_ctr_ms']:.3f} ms, "
        f"Flower SecAgg+ MT19937 {peer['flower_mt19937_ms']:.3f} ms -> ours is "
        f"{peer['speed_ratio_ours_over_flower']:.2f}x the speed of theirs. {peer['note']}."
    )

    kas = bench_key_agreement(repeats)
    table = Table(title="Key agreement (per pair)")
    for col in ("scheme", "keygen ms", "exchange ms", "exchange (pre-validated) ms"):
        table.add_column(col, justify="right")
    for name, row in kas.items():
        table.add_row(
            name,
            f"{row['keygen_ms']:.3f}",
            f"{row['exchange_ms']:.3f}",
            f"{row['exchange_prevalidated_ms']:.3f}",
        )
    console.print(table)

    shamir = bench_shamir([4, 8, 16, 32], repeats)
    table = Table(title="Shamir sharing of a 32-byte secret over GF(2^521-1)")
    for col in ("n", "t", "split ms", "reconstruct ms"):
        table.add_column(col, justify="right")
    for n, row in shamir.items():
        table.add_row(
            str(n), str(row["threshold"]), f"{row['split_ms']:.3f}", f"{row['reconstruct_ms']:.3f}"
        )
    console.print(table)

    recovery = bench_recovery([4, 16] if args.quick else [4, 8, 16, 32], proto_repeats)
    table = Table(title=f"Double-masked protocol round, {SHAPE} batch (x25519, t = n//2+1)")
    for col in (
        "n",
        "drop",
        "party receive setup ms",
        "party mask+next setup ms",
        "party respond ms",
        "aggregator unmask ms",
    ):
        table.add_column(col, justify="right")
    for n, runs in recovery.items():
        for key in ("no_drop", "one_dropped"):
            row = runs[key]
            table.add_row(
                str(n),
                key,
                f"{row['party_receive_setup_ms']:.2f}",
                f"{row['party_mask_and_next_setup_ms']:.2f}",
                f"{row['party_unmask_response_ms']:.2f}",
                f"{row['aggregator_unmask_ms']:.2f}",
            )
    console.print(table)

    figures = {
        "shape": list(SHAPE),
        "quick": args.quick,
        "mask_mb_per_s": {
            **{str(n): round(row["mask_mb_per_s"], 1) for n, row in masks.items()},
            "headline_4_parties": round(masks[4]["mask_mb_per_s"], 1),
        },
        "mask": {str(n): row for n, row in masks.items()},
        "peer_flower_mt19937": peer,
        "key_agreement": kas,
        "shamir": {str(n): row for n, row in shamir.items()},
        "protocol_round": {str(n): row for n, row in recovery.items()},
    }
    bench_easter_overhead(args.quick, figures)
    if args.out:
        write_json(args.out, figures)
        console.print(f"wrote {args.out}")
    return figures


if __name__ == "__main__":
    main()

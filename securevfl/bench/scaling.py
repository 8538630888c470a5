"""Section 3: how the costs grow with parties (secure aggregation), set size (PSI) and batch (Paillier).

* **Secure aggregation vs parties** — one (128, 128) float32 batch as 2^-16 fixed point in Z_2^64:
  per party, the pairwise seed setup (n - 1 X25519 exchanges + HKDF) and encode + mask (n - 1 AES-CTR
  streams); at the aggregator, the ring sum and decode of n masked inputs.
* **PSI vs set size** — our PSI at every size of section 1 plus extra ones (ours only), and
  openmined-psi at section 1's sizes; the exponent is the slope of ``np.polyfit`` on log(size) and
  log(seconds) of the medians (1.0 = linear). At small sets fixed costs (starting the worker processes,
  key generation) flatten our slope below 1; the large sizes of ``--full`` show the linear regime.
* **Paillier aggregation vs batch** — one ``secagg=paillier`` aggregation round through the threaded
  runtime (1 active + 3 passive parties, each passive vector a batch x 128 embedding, 2048-bit key):
  per-round wall time at the active party (setup excluded) and the crypto seconds of all parties.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

import numpy as np

from securevfl.bench.methods import SESSION_SETUP_PRIMITIVES
from securevfl.bench.timing import Figure, interleaved, time_calls
from securevfl.federation.transport import InProcessTransport

SHAPE = (128, 128)
EMBEDDING = 128
Tick = Callable[[str], None]


# --------------------------------------------------------------------- secure aggregation vs parties
def mask_scaling(party_counts: Sequence[int], repeats: int) -> dict[int, dict[str, tuple[float, ...]]]:
    """Seconds per call: a party's seed setup and encode+mask, the aggregator's sum+decode, per n."""
    from securevfl.privacy.primitives.key_agreement import create_key_agreement
    from securevfl.privacy.primitives.masking import derive_pairwise_seeds, mask_values

    ka = create_key_agreement("x25519")
    rng = np.random.default_rng(0)
    rows: dict[int, dict[str, tuple[float, ...]]] = {}
    for n in party_counts:
        names = [f"p{i:02d}" for i in range(n)]
        keys = {p: ka.generate() for p in names}
        me = names[n // 2]
        peers = {p: keys[p].public for p in names if p != me}
        seeds = derive_pairwise_seeds(ka, me, keys[me], peers, b"bench")
        x = rng.normal(size=SHAPE).astype(np.float32)
        counter = iter(range(10**9))
        masked = [mask_values(x, me, seeds, 0, n_terms=n) for _ in range(n)]

        def mask_once(x: np.ndarray = x, me: str = me, seeds: dict[str, bytes] = seeds,
                      counter: Iterator[int] = counter, n: int = n) -> np.ndarray:
            return mask_values(x, me, seeds, next(counter), n_terms=n)

        rows[n] = interleaved(repeats, {
            "setup_per_party": partial(derive_pairwise_seeds, ka, me, keys[me], peers, b"bench"),
            "mask_per_party": mask_once,
            "sum_decode": partial(_sum_decode, masked),
        }, warmup=2)
    return rows


def _sum_decode(masked: list[np.ndarray]) -> np.ndarray:
    from securevfl.privacy.primitives.fixed_point import decode, ring_sum

    return decode(ring_sum(masked))


# ------------------------------------------------------------------- Paillier aggregation vs batch
class CountingTransport(InProcessTransport):
    """In-process transport that tallies the aggregation scheme's messages (tags ``agg.*``)."""

    def __init__(self, parties: list[str]) -> None:
        super().__init__(parties)
        self.bytes = self.messages = self.depth = 0
        self.links: dict[str, int] = {}
        self._lock = threading.Lock()

    def send(self, envelope: Any) -> None:
        with self._lock:
            self.depth = max(self.depth, envelope.depth)
            if envelope.tag.startswith("agg."):
                self.bytes += envelope.size
                self.messages += 1
                link = f"{envelope.src}->{envelope.dst}"
                self.links[link] = self.links.get(link, 0) + envelope.size
        super().send(envelope)


def aggregation_rounds(scheme_name: str, rounds: int, batch: int, *, parties: int = 4, embedding: int = EMBEDDING,
                       seed: int = 0, warmup_rounds: int = 0) -> dict[str, Any]:
    """``rounds`` aggregation rounds through the threaded runtime; totals over all parties.

    After each sum the active party broadcasts a small ``bench.next`` message that the passive
    parties wait for (as EASTER's global embedding), so rounds are causally chained and the message
    depth counts each round's hops (plus that one). ``round_s`` holds each round's wall time at the
    active party after ``warmup_rounds`` untimed ones (the first round pays for lazy set-up: tables,
    threads); ``seconds`` their sum (setup excluded). Every sum is checked against the plain sum.
    Bytes, messages, depth and crypto seconds count every round, warm-up included.
    """
    from securevfl.federation.runtime import run_parties
    from securevfl.privacy.aggregation import AggregationConfig, create_aggregation

    passives = tuple(f"p{i}" for i in range(1, parties))
    rng = np.random.default_rng(seed)
    inputs = [{p: rng.normal(scale=3.0, size=(batch, embedding)) for p in passives}
              for _ in range(rounds + warmup_rounds)]
    scheme = create_aggregation(scheme_name, AggregationConfig(frac_bits=16))
    round_s: list[float] = []

    def passive(ctx: Any) -> None:
        half = scheme.passive()
        half.setup(ctx)
        for values in inputs:
            half.contribute(ctx, values[ctx.name])
            ctx.recv(ctx.active, "bench.next")

    def active(ctx: Any) -> list[Any]:
        half = scheme.active()
        half.setup(ctx, ctx.passives)
        out = []
        for _ in inputs:
            start = time.perf_counter()
            out.append(half.aggregate(ctx))
            ctx.broadcast(ctx.passives, "bench.next", 0)
            round_s.append(time.perf_counter() - start)
        return out

    transport = CountingTransport(["A", *passives])
    result = run_parties({"A": active, **{p: passive for p in passives}}, active="A", transport=transport)
    crypto: dict[str, float] = {}
    for meter in result.meters.values():
        for k, v in meter.snapshot().crypto_s.items():
            crypto[k] = crypto.get(k, 0.0) + v
    for values, res in zip(inputs, result.results["A"] or []):  # the sum must be right
        if np.max(np.abs(res.total - sum(values.values()))) > len(passives) * 2.0**-16:
            raise AssertionError(f"{scheme_name}: aggregated sum differs from the plain sum")
    timed = round_s[warmup_rounds:]
    return {"seconds": float(sum(timed)), "round_s": tuple(timed), "crypto_s": crypto, "bytes": transport.bytes,
            "messages": transport.messages, "depth": transport.depth, "links": dict(transport.links)}


def paillier_batch_scaling(batches: Sequence[int], rounds: int, tick: Tick) -> dict[int, dict[str, Any]]:
    """Per-round time and crypto of ``secagg=paillier`` for each batch size (4 parties, one warm-up round)."""
    out = {}
    for batch in batches:
        tick(f"Paillier aggregation, batch {batch} x {EMBEDDING}, {rounds} round(s)")
        run = aggregation_rounds("paillier", rounds, batch, warmup_rounds=1)
        per_round_crypto = (sum(v for k, v in run["crypto_s"].items() if k not in SESSION_SETUP_PRIMITIVES)
                            / (rounds + 1))
        out[batch] = {"round_s": run["round_s"], "crypto_s_per_round": per_round_crypto}
    return out


# ------------------------------------------------------------------------------- PSI vs set size
def fitted_exponent(sizes: Sequence[float], seconds: Sequence[float]) -> float | None:
    """Slope of log(seconds) against log(size) (``np.polyfit``, degree 1); None under two points."""
    if len(sizes) < 2:
        return None
    return float(np.polyfit(np.log(np.asarray(sizes, float)), np.log(np.asarray(seconds, float)), 1)[0])


def psi_scaling(extra_sizes: Sequence[int], repeats: int, workers: int | None,
                tick: Tick) -> dict[int, tuple[float, ...]]:
    """Our PSI alone at the sizes section 1 did not run."""
    from securevfl.bench.primitives import make_ids, psi_ours

    out: dict[int, tuple[float, ...]] = {}
    for n in extra_sizes:
        a, b = make_ids(n)
        tick(f"PSI scaling: {n:,} x {n:,}, ours")
        out[n] = time_calls(partial(psi_ours, a, b, workers), repeats, warmup=0)
    return out


# ----------------------------------------------------------------------------------- the section
def measure(sizes: Any, parties: Sequence[int], psi_section: dict[int, dict[str, Any]], psi_workers: int | None,
            tick: Tick) -> dict[str, Any]:
    """Everything section 3 measures; PSI sizes that section 1 ran are reused, not run again."""
    tick(f"secure aggregation for {', '.join(map(str, parties))} parties")
    masks = mask_scaling(parties, sizes.mask_repeats)
    extra = [n for n in sizes.psi_scaling_sizes if n not in psi_section]
    ours = {n: row["ours_s"] for n, row in psi_section.items()}
    ours.update(psi_scaling(extra, sizes.repeats, psi_workers, tick))
    openmined = {n: row["openmined_s"] for n, row in psi_section.items() if "openmined_s" in row}
    paillier = paillier_batch_scaling(sizes.paillier_batches, sizes.paillier_rounds, tick)
    return {"secagg": masks, "psi_ours": dict(sorted(ours.items())), "psi_openmined": dict(sorted(openmined.items())),
            "paillier": paillier}


def psi_exponents(data: dict[str, Any]) -> dict[str, float | None]:
    """Fitted log-log exponents of ours and openmined-psi (medians; None under two sizes)."""
    import statistics

    out = {}
    for key in ("psi_ours", "psi_openmined"):
        rows = data[key]
        out[key] = fitted_exponent(list(rows), [statistics.median(v) for v in rows.values()])
    return out


def figures(data: dict[str, Any]) -> list[Figure]:
    """Per party count, set size and batch size: the timed repetitions."""
    out = []
    for n, row in data["secagg"].items():
        for what, samples in row.items():
            out.append(Figure(f"scaling.secagg.{n}.{what}_ms", "ms", tuple(s * 1e3 for s in samples)))
    for n, samples in data["psi_ours"].items():
        out.append(Figure(f"scaling.psi.{n}.ours_s", "s", tuple(samples)))
    for batch, row in data["paillier"].items():
        out.append(Figure(f"scaling.paillier.{batch}.round_s", "s", tuple(row["round_s"])))
    return out


def section(data: dict[str, Any], figs: dict[str, Figure]) -> Any:
    """Section 3 of the report: three tables, one per curve."""
    from securevfl.bench.results import Section, Table

    s = Section("scaling", "3. Scaling", text=__doc__ or "")
    t = Table(f"Secure aggregation (DH pairwise masks) of one {SHAPE[0]} x {SHAPE[1]} batch, medians",
              ["parties", "seed setup per party (ms)", "encode + mask per party (ms)", "sum + decode (ms)",
               "all parties + aggregator (ms)"])
    for n in data["secagg"]:
        k = f"scaling.secagg.{n}"
        setup, mask, agg = (figs[f"{k}.{w}_ms"].median for w in ("setup_per_party", "mask_per_party", "sum_decode"))
        t.add(n, f"{setup:.3f}", f"{mask:.3f}", f"{agg:.3f}", f"{n * mask + agg:.3f}")
    s.tables.append(t)
    exps = psi_exponents(data)
    p = Table("PSI time vs set size (IDs per party, 50 % overlap), medians",
              ["IDs per party", "ours (s)", "openmined-psi (s)"])
    for n, samples in data["psi_ours"].items():
        om = data["psi_openmined"].get(n)
        import statistics

        p.add(f"{n:,}", f"{statistics.median(samples):.3f}", f"{statistics.median(om):.3f}" if om else "-")
    p.note = ("fitted exponent (log-log slope): ours " + (f"{exps['psi_ours']:.2f}" if exps["psi_ours"] else "n/a")
              + ", openmined-psi " + (f"{exps['psi_openmined']:.2f}" if exps["psi_openmined"] else "n/a")
              + f" ({len(data['psi_openmined'])} point(s))")
    s.tables.append(p)
    q = Table(f"Paillier aggregation round, 1 active + 3 passive, batch x {EMBEDDING} values per passive party",
              ["batch (rows)", "round median (s)", "round min (s)", "crypto per round, all parties (s)",
               "values aggregated per second (values/s)"])
    for batch, row in data["paillier"].items():
        f = figs[f"scaling.paillier.{batch}.round_s"]
        q.add(batch, f"{f.median:.3f}", f"{f.min:.3f}", f"{row['crypto_s_per_round']:.3f}",
              f"{3 * batch * EMBEDDING / f.median:,.0f}")
    q.note = "one warm-up round first (not timed); crypto per round averages every round, the warm-up included"
    s.tables.append(q)
    s.data = {"psi_exponents": exps,
              "paillier": {str(b): {k: v for k, v in r.items() if k != "round_s"} for b, r in data["paillier"].items()}}
    return s

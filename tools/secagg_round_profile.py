"""Where a ``dh`` round's crypto goes: every party's steps of the double-masked protocol, timed alone.

The same calls, in the same order, as :mod:`securevfl.privacy.aggregation.dh` makes them inside a run
(mask expanded ahead, next setup drawn ahead, a workspace per party), without the model or a transport,
so each step's cost is measured without the rest of the run around it. ``--evict MB`` touches that many
megabytes between rounds, as a model's compute does, to show the cost of cold caches.

    python tools/secagg_round_profile.py --rounds 300 [--evict 32] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import time
from collections import defaultdict

import numpy as np

from securevfl.privacy import secagg as sa
from securevfl.privacy.primitives.buffers import Workspace


def run(rounds: int, parties: int, batch: int, width: int, rekey_every: int, evict_mb: int) -> dict[str, float]:
    """Milliseconds per round of each step, all parties summed, over ``rounds`` rounds of one session."""
    names = tuple(f"p{i}" for i in range(1, parties + 1))
    config = sa.SecAggConfig(session_id=os.urandom(16), parties=names, threshold=sa.default_threshold(parties),
                             rekey_every=rekey_every)
    spent: dict[str, list[float]] = defaultdict(list)
    states = {p: sa.PassiveSecAggState.create(config, p) for p in names}
    agg = sa.AggregatorSecAggState.create(config)
    agg, directory = sa.collect_adverts(agg, [sa.advertise_keys(s) for s in states.values()])
    states = {p: sa.receive_keys(s, directory) for p, s in states.items()}
    setups = []
    for p in names:
        states[p], setup = sa.share_keys(states[p], 0)
        setups.append(setup)
    agg, bundles = sa.collect_setups(agg, setups)
    spaces = {p: Workspace() for p in names + ("active",)}
    masks: dict[str, sa.RoundMask] = {}
    nexts: dict[str, sa.RoundSetup] = {}
    size = batch * width
    rng = np.random.default_rng(0)
    inputs = {p: rng.normal(size=(batch, width)).astype(np.float32) for p in names}
    evict = np.zeros(evict_mb * (1 << 20) // 8) if evict_mb else None

    def timed(step: str, fn, *args, **kwargs):
        t = time.perf_counter()
        out = fn(*args, **kwargs)
        spent[step].append(time.perf_counter() - t)
        return out

    def prepare(p: str, bundle: sa.SetupBundle) -> None:
        states[p] = timed("receive_setup", sa.receive_setup, states[p], bundle)
        r = bundle.round_index
        masks[p] = timed("mask_expand", sa.round_mask, states[p], r, size, spaces[p].take("mask", size))
        states[p], nexts[p] = timed("share_keys", sa.share_keys, states[p], r + 1)

    for p, b in bundles.items():
        prepare(p, b)
    for r in range(rounds):
        if evict is not None:
            evict += 1.0
        messages = []
        for p in names:
            states[p], m = timed("mask", sa.masked_input, states[p], inputs[p], r, mask=masks[p],
                                 next_setup=nexts[p], workspace=spaces[p])
            messages.append(m)
        agg, request = timed("unmask", sa.unmask_request, agg, messages)
        agg, bundles = timed("relay", sa.collect_setups, agg, [m.next_setup for m in messages])
        responses = []
        for p in names:
            states[p], resp = timed("unmask_response", sa.unmask_response, states[p], request)
            responses.append(resp)
        agg, _total = timed("unmask", sa.aggregate, agg, responses, spaces["active"])
        for p, b in bundles.items():
            prepare(p, b)
    # ms per round, all parties summed (the ``secagg_round_crypto_ms`` of benchmarks/easter.py)
    per_round = {k: sum(v) / rounds * 1e3 for k, v in spent.items()}
    per_round["total"] = sum(per_round.values())
    return per_round


def main() -> None:
    """Print each step's median milliseconds per round over the repeats (or a profile)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--parties", type=int, default=3, help="passive parties")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--rekey-every", type=int, default=0)
    parser.add_argument("--evict", type=int, default=0, help="MB touched between rounds (a model's compute)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="cProfile one repeat, top 25 by own time")
    a = parser.parse_args()
    args = (a.rounds, a.parties, a.batch, a.width, a.rekey_every, a.evict)
    if a.profile:
        prof = cProfile.Profile()
        prof.runcall(run, *args)
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        return
    runs = [run(*args) for _ in range(a.repeats)]
    for key in runs[0]:
        print(f"{key:16s} {statistics.median(r[key] for r in runs):7.3f} ms/round")


if __name__ == "__main__":
    main()

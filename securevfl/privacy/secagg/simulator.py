"""All parties and the aggregator of the double-masked protocol in one process, for tests and benchmarks."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from securevfl.privacy.secagg.aggregator import (
    AggregatorSecAggState,
    aggregate,
    collect_adverts,
    collect_setups,
    unmask_request,
)
from securevfl.privacy.secagg.config import SecAggConfig, Urandom
from securevfl.privacy.secagg.messages import MaskedInput, RoundSetup, UnmaskResponse
from securevfl.privacy.secagg.passive import (
    PassiveSecAggState,
    advertise_keys,
    masked_input,
    receive_keys,
    receive_setup,
    share_keys,
    unmask_response,
)


@dataclass(frozen=True)
class SimulatedRound:
    """One simulated round: the recovered sum, the plaintext sum over survivors, who was in."""

    round_index: int
    aggregate: np.ndarray = field(repr=False)
    expected: np.ndarray = field(repr=False)
    survivors: tuple[str, ...]
    dropped: tuple[str, ...]


def simulate_secagg(
    config: SecAggConfig,
    inputs: Sequence[Mapping[str, np.ndarray]],
    drop_before_input: Mapping[int, Collection[str]] | None = None,
    drop_before_unmask: Mapping[int, Collection[str]] | None = None,
    rejoin: Mapping[int, Collection[str]] | None = None,
    urandom: Urandom | None = None,
) -> list[SimulatedRound]:
    """Run all parties and the aggregator in one process (no threads) for ``len(inputs)`` rounds.

    ``drop_before_input[r]``: parties that vanish in round r after the others masked against
    them (they set up round r but send no input). ``drop_before_unmask[r]``: parties that send
    their input in round r and then vanish before the unmask step. Dropped parties stay away
    until ``rejoin[r]`` names them: they send a fresh setup during round r - 1 and take part
    again from round r. Returns, per round, the recovered and the plaintext sum of survivors.
    """
    drop_in = {r: set(v) for r, v in (drop_before_input or {}).items()}
    drop_un = {r: set(v) for r, v in (drop_before_unmask or {}).items()}
    rejoin_at = {r: set(v) for r, v in (rejoin or {}).items()}
    parties = {p: PassiveSecAggState.create(config, p, urandom) for p in config.parties}
    agg = AggregatorSecAggState.create(config)
    agg, directory = collect_adverts(agg, [advertise_keys(s) for s in parties.values()])
    parties = {p: receive_keys(s, directory) for p, s in parties.items()}
    alive = set(config.parties)
    setups: list[RoundSetup] = []
    for p in sorted(parties):
        parties[p], setup = share_keys(parties[p], 0)
        setups.append(setup)
    agg, bundles = collect_setups(agg, setups)
    for p, bundle in bundles.items():
        parties[p] = receive_setup(parties[p], bundle)
    results: list[SimulatedRound] = []
    for r, round_inputs in enumerate(inputs):
        alive -= drop_in.get(r, set())
        masked: list[MaskedInput] = []
        for p in sorted(agg.round_publics[r]):
            if p in alive:
                parties[p], message = masked_input(parties[p], round_inputs[p], r)
                masked.append(message)
        agg, request = unmask_request(agg, masked)
        alive -= drop_un.get(r, set())
        responses: list[UnmaskResponse] = []
        for p in request.survivors:
            if p in alive:
                parties[p], response = unmask_response(parties[p], request)
                responses.append(response)
        agg, total = aggregate(agg, responses)
        expected = np.sum([np.asarray(round_inputs[p], dtype=np.float64) for p in request.survivors], axis=0)
        results.append(SimulatedRound(r, total, expected, request.survivors, request.dropped))
        if r + 1 == len(inputs):
            break
        next_setups = [m.next_setup for m in masked if m.next_setup is not None]
        for p in sorted(rejoin_at.get(r + 1, set()) - alive):
            parties[p], setup = share_keys(parties[p], r + 1)
            next_setups.append(setup)
            alive.add(p)
        agg, bundles = collect_setups(agg, next_setups)
        for p, bundle in bundles.items():
            if p in alive:
                parties[p] = receive_setup(parties[p], bundle)
    return results


__all__ = ["SimulatedRound", "simulate_secagg"]

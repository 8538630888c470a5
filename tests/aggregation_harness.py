"""Shared test harness for aggregation schemes: run rounds through the real runtime, record traffic."""

from __future__ import annotations

import threading

import numpy as np

from securevfl.federation import codec
from securevfl.federation.runtime import run_parties
from securevfl.federation.transport import InProcessTransport

PASSIVES = ("p1", "p2", "p3")


class RecordingTransport(InProcessTransport):
    """In-process transport that keeps a copy of every envelope (what a wiretap would see)."""

    def __init__(self, parties) -> None:
        super().__init__(list(parties))
        self.envelopes = []
        self._lock = threading.Lock()

    def send(self, envelope) -> None:
        with self._lock:
            self.envelopes.append(envelope)
        super().send(envelope)

    def received_by(self, party: str):
        return [e for e in self.envelopes if e.dst == party]


def round_roles(scheme_of, inputs, drops):
    """The active and passive roles of ``len(inputs)`` rounds; ``scheme_of(party)`` gives each its scheme.

    The active role returns (the round results, its stats); dropped passives skip their round.
    """

    def passive(ctx):
        half = scheme_of(ctx.name).passive()
        half.setup(ctx)
        for r, values in enumerate(inputs):
            if ctx.name in drops.get(r, ()):
                half.drop(ctx)
            else:
                half.contribute(ctx, values[ctx.name])

    def active(ctx):
        half = scheme_of(ctx.name).active()
        half.setup(ctx, ctx.passives)
        return [half.aggregate(ctx, drops.get(r, ())) for r in range(len(inputs))], half.stats

    return active, passive


def run_rounds(scheme, inputs, drops=None, passives=PASSIVES, transport=None):
    """Run ``len(inputs)`` rounds of ``scheme`` with active party "A"; return (results, stats), meters."""
    active, passive = round_roles(lambda party: scheme, inputs, drops or {})
    roles = {"A": active, **{p: passive for p in passives}}
    result = run_parties(roles, active="A", transport=transport)
    return result.results["A"], result.meters


def random_inputs(rounds, shape, passives=PASSIVES, seed=0):
    """``rounds`` dicts of party -> normal(0, 3) array of ``shape``."""
    rng = np.random.default_rng(seed)
    return [{p: rng.normal(scale=3.0, size=shape) for p in passives} for _ in range(rounds)]


def setups_sent(envelopes):
    """Every dh round setup a passive party sent (alone, rejoining, or riding on an input): (party, round, key)."""
    from securevfl.privacy.aggregation.dh import TAG_INPUT, TAG_REJOIN, TAG_SETUP
    from securevfl.privacy.secagg import wire

    out = []
    for e in envelopes:
        message = codec.decode(e.payload)
        if e.tag in (TAG_SETUP, TAG_REJOIN):
            setup = wire.parse_setup(message, e.src)
        elif e.tag == TAG_INPUT:
            setup = wire.parse_input(message, e.src).next_setup
        else:
            continue
        if setup is not None:
            out.append((setup.party, setup.round_index, setup.mask_public))
    return out

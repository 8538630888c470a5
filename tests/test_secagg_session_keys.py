"""Session-scoped mask keys for ``dh`` secure aggregation (issue 47).

``rekey_every=1`` is today's protocol, message for message: a transcript digest recorded before
session keys existed pins it. The session mode (``rekey_every=0``, the default, or k > 1) agrees a
mask key pair once per key epoch and derives each round's pairwise seeds from it; a dropped party's
masks are recovered from the survivors' round seeds with it, so nothing that masks another round
is ever revealed.
"""

from __future__ import annotations

import hashlib

import numpy as np
from aggregation_harness import PASSIVES, RecordingTransport, random_inputs, round_roles
from deterministic_random import CountingUrandom

from securevfl.federation.runtime import run_parties
from securevfl.privacy.aggregation import AggregationConfig, create_aggregation

#: SHA-256 of the dh transcript below, recorded with the protocol before session keys (fresh keys each round).
PER_ROUND_TRANSCRIPT = "89f63328784db95ed7f2d8514df7b68735349e11add9cda08740aa89f8819615"


def dh_transcript(drops: dict[int, tuple[str, ...]], rounds: int = 5, **options) -> tuple[str, list]:
    """A dh run over ``rounds`` rounds with deterministic randomness per party: the digest of every message, results."""
    inputs = random_inputs(rounds, (4, 3))
    schemes = {p: create_aggregation("dh", AggregationConfig(frac_bits=16, urandom=CountingUrandom(p.encode()),
                                                              **options))
               for p in ("A", *PASSIVES)}
    active, passive = round_roles(lambda party: schemes[party], inputs, drops)
    transport = RecordingTransport(["A", *PASSIVES])
    result = run_parties({"A": active, **{p: passive for p in PASSIVES}}, active="A", transport=transport)
    results, _ = result.results["A"]
    for r, res in enumerate(results):
        alive = [p for p in PASSIVES if p not in drops.get(r, ())]
        assert np.allclose(res.total, sum(inputs[r][p] for p in alive), atol=1e-3)
    per_link: dict[tuple[str, str, str], list[bytes]] = {}
    for e in transport.envelopes:  # the order within a link is fixed; across links it is the scheduler's
        per_link.setdefault((e.src, e.dst, e.tag), []).append(bytes(e.payload))
    digest = hashlib.sha256()
    for key in sorted(per_link):
        digest.update(repr(key).encode())
        for payload in per_link[key]:
            digest.update(hashlib.sha256(payload).digest())
    return digest.hexdigest(), transport.envelopes


def test_rekey_every_round_is_todays_protocol_byte_for_byte():
    digest, _ = dh_transcript({1: ("p3",), 3: ("p1",)})
    assert digest == PER_ROUND_TRANSCRIPT

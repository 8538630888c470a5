"""Session-scoped mask keys for ``dh`` secure aggregation (issue 47).

``rekey_every=1`` is the protocol before session keys, message for message: a transcript digest
recorded before they existed pins it. The session mode (``rekey_every=0``, the default, or k > 1)
agrees a mask key pair once per key epoch and derives each round's pairwise seeds from it; a
dropped party's masks are recovered from the survivors' round seeds with it, so nothing that
masks another round is ever revealed. One test per claim of docs/easter.md's "Keys once per session".
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from aggregation_harness import PASSIVES, RecordingTransport, random_inputs, round_roles, setups_sent
from deterministic_random import CountingUrandom
from secagg_rounds import set_up_round0, survivors_respond

from securevfl.errors import ConfigError, ProtocolError
from securevfl.federation import codec
from securevfl.federation.runtime import run_parties
from securevfl.privacy import secagg as sa
from securevfl.privacy.aggregation import AggregationConfig, create_aggregation
from securevfl.privacy.aggregation.dh import TAG_RESPONSE
from securevfl.privacy.primitives.fixed_point import encode, to_ring
from securevfl.privacy.primitives.masking import add_pairwise_mask
from securevfl.privacy.primitives.prg import STEP_SELF, add_prg_streams
from securevfl.privacy.primitives.shamir import reconstruct_secret
from securevfl.privacy.secagg import wire
from securevfl.privacy.secagg.derive import round_seed

#: SHA-256 of the dh transcript below, recorded with the protocol before session keys (fresh keys each round).
PER_ROUND_TRANSCRIPT = "89f63328784db95ed7f2d8514df7b68735349e11add9cda08740aa89f8819615"
DROPS = {1: ("p3",), 3: ("p1",)}


def dh_transcript(drops: dict[int, tuple[str, ...]], rounds: int = 5, **options) -> tuple[str, list]:
    """A dh run of ``rounds`` rounds, deterministic randomness per party: the digest of every message, envelopes."""
    inputs = random_inputs(rounds, (4, 3))
    schemes = {p: create_aggregation("dh", AggregationConfig(frac_bits=16, urandom=CountingUrandom(p.encode())),
                                     options)
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


def _mask_keys(envelopes) -> dict[str, list[tuple[int, bytes]]]:
    """Per party, (round, mask public key) of every setup it sent, in round order."""
    out: dict[str, list[tuple[int, bytes]]] = {}
    for party, r, key in setups_sent(envelopes):
        out.setdefault(party, []).append((r, key))
    return {p: sorted(v) for p, v in out.items()}


def test_rekey_every_round_is_the_protocol_before_session_keys_byte_for_byte():
    digest, _ = dh_transcript(DROPS, rekey_every=1)
    assert digest == PER_ROUND_TRANSCRIPT


def test_session_keys_are_agreed_once_and_sums_stay_exact():
    _, envelopes = dh_transcript({}, rounds=6)  # the default: rekey_every=0
    for party, keys in _mask_keys(envelopes).items():
        assert len({k for _, k in keys}) == 1, party  # one key pair for the whole session
        assert [r for r, _ in keys] == list(range(7))  # still one setup (a fresh self seed) per round (+ one ahead)


@pytest.mark.parametrize("every", [2, 3])
def test_rekey_every_k_rounds(every):
    _, envelopes = dh_transcript({}, rounds=7, rekey_every=every)
    for keys in _mask_keys(envelopes).values():
        epochs = [k for _, k in keys]
        assert all((epochs[r] == epochs[r - 1]) == (r % every != 0) for r in range(1, len(epochs)))


def test_a_recovery_makes_every_survivor_rekey():
    """p3 drops in round 1: from round 3 (round 2's setups rode on round 1's inputs) every survivor has a new key."""
    _, envelopes = dh_transcript({1: ("p3",)}, rounds=5)
    keys = _mask_keys(envelopes)
    for p in ("p1", "p2"):
        by_round = dict(keys[p])
        assert by_round[0] == by_round[1] == by_round[2] != by_round[3] == by_round[4]


def test_recovery_reveals_round_seeds_only():
    """The survivors' answer about a dropped party: their round seed with it; no key share, nothing of another round."""
    _, envelopes = dh_transcript({2: ("p3",)}, rounds=4)
    revealed = [wire.parse_response(codec.decode(e.payload), e.src) for e in envelopes if e.tag == TAG_RESPONSE]
    about_p3 = [r for r in revealed if r.pair_seeds]
    assert {r.round_index for r in about_p3} == {2} and {r.party for r in about_p3} == {"p1", "p2"}
    assert all(not r.key_shares for r in revealed)


def _session(n: int = 3, rekey_every: int = 0) -> sa.SecAggConfig:
    return sa.SecAggConfig(b"session-keys", tuple(f"p{i}" for i in range(n)), sa.default_threshold(n),
                           rekey_every=rekey_every)


def _next_round(cfg, parties, agg, inputs, r, dropped=()):
    """Round r: inputs of all but ``dropped`` (their round r + 1 setups ride along; dropped ones rejoin)."""
    masked = []
    for p in cfg.parties:
        if p not in dropped:
            parties[p], message = sa.masked_input(parties[p], inputs[p], r)
            masked.append(message)
    agg, request, responses = survivors_respond(parties, agg, masked)
    agg, total = sa.aggregate(agg, responses)
    setups = [m.next_setup for m in masked]
    for p in dropped:
        parties[p], setup = sa.share_keys(parties[p], r + 1)
        setups.append(setup)
    agg, bundles = sa.collect_setups(agg, setups)
    parties.update({p: sa.receive_setup(parties[p], bundles[p]) for p in cfg.parties})
    return agg, total, masked, responses


def test_masks_of_two_rounds_are_independent():
    """One epoch key, two rounds: different round seeds, and neither mask is the other's (nor a shift of it)."""
    cfg = _session()
    parties, _, _, _ = set_up_round0(cfg, CountingUrandom(b"rounds"))
    p0 = parties["p0"]
    seeds0 = p0.round_views[0].round_seeds
    epoch = {p: v[2] for p, v in p0.epoch_seeds.items()}
    assert all(seeds0[p] not in (epoch[p], round_seed(epoch[p], 1)) for p in seeds0)
    assert round_seed(epoch["p1"], 0) == seeds0["p1"]
    m0 = np.zeros(4096, np.uint64)
    m1 = np.zeros(4096, np.uint64)
    add_pairwise_mask(m0, "p0", seeds0, 0, cfg.step)
    add_pairwise_mask(m1, "p0", {p: round_seed(epoch[p], 1) for p in epoch}, 1, cfg.step)
    difference = m1 - m0
    assert len(np.unique(difference)) > 4000  # no constant shift: the rounds' masks are unrelated
    assert not np.any(m0 == m1)


def test_an_earlier_input_of_a_dropped_party_stays_hidden():
    """The attack that session keys invite, tried: p2 survives round 0 (its self seed is revealed) and drops in
    round 1 (its masks recovered). What the aggregator then holds does not unmask p2's round-0 input."""
    cfg = _session()
    rng = np.random.default_rng(3)
    inputs = [{p: rng.normal(size=64) for p in cfg.parties} for _ in range(2)]
    parties, agg, _, _ = set_up_round0(cfg, CountingUrandom(b"attack"))
    agg, total0, masked0, responses0 = _next_round(cfg, parties, agg, inputs[0], 0)
    agg, total1, _, responses1 = _next_round(cfg, parties, agg, inputs[1], 1, dropped=("p2",))
    assert np.allclose(total0, sum(inputs[0].values()), atol=1e-3)
    assert np.allclose(total1, inputs[1]["p0"] + inputs[1]["p1"], atol=1e-3)
    b2 = reconstruct_secret([r.self_seed_shares["p2"] for r in responses0][:cfg.threshold])
    revealed = {r.party: r.pair_seeds["p2"] for r in responses1}  # round 1's seeds of p2 with p0 and p1
    guess = next(m.masked for m in masked0 if m.party == "p2").astype(np.uint64)
    add_prg_streams(guess, [], [b2], 0, STEP_SELF)  # strip the revealed self mask of round 0 ...
    add_pairwise_mask(guess, "p2", revealed, 0, cfg.step)  # ... and the pairwise masks, from round 1's seeds
    truth = to_ring(encode(inputs[0]["p2"], cfg.frac_bits, len(cfg.parties), cfg.ring_bits), cfg.ring_bits)
    assert not np.any(to_ring(guess, cfg.ring_bits) == truth)


def test_a_revealed_round_seed_masks_no_later_round():
    cfg = _session()
    rng = np.random.default_rng(4)
    parties, agg, _, _ = set_up_round0(cfg, CountingUrandom(b"later"))
    revealed: set[bytes] = set()
    used: list[bytes] = []
    for r in range(5):
        used += [s for state in parties.values() for s in state.round_views[r].round_seeds.values()]
        agg, _, _, responses = _next_round(cfg, parties, agg, {p: rng.normal(size=8) for p in cfg.parties}, r,
                                           dropped=("p1",) if r == 1 else ())
        if r == 1:
            revealed = {s for resp in responses for s in resp.pair_seeds.values()}
            later = len(used)
    assert revealed and not revealed & set(used[later:])


def test_drops_before_input_and_before_unmask_in_one_round_need_per_round_keys():
    """Session mode needs every survivor's round seed after a drop; the error names the way out."""
    cfg = _session(5)
    rounds = [{p: np.ones(3) for p in cfg.parties}]
    with pytest.raises(sa.InsufficientSurvivorsError, match="rekey_every=1"):
        sa.simulate_secagg(cfg, rounds, drop_before_input={0: ["p0"]}, drop_before_unmask={0: ["p1"]})
    per_round = sa.simulate_secagg(_session(5, rekey_every=1), rounds, drop_before_input={0: ["p0"]},
                                   drop_before_unmask={0: ["p1"]})
    assert np.allclose(per_round[0].aggregate, 4.0, atol=1e-3)


@pytest.mark.parametrize("rekey_every", [0, 2])
def test_session_mode_simulation_with_drops_and_rejoins(rekey_every):
    cfg = _session(5, rekey_every)
    rng = np.random.default_rng(5)
    rounds = [{p: rng.normal(size=(3, 2)) for p in cfg.parties} for _ in range(7)]
    out = sa.simulate_secagg(cfg, rounds, drop_before_input={1: ["p3"], 3: ["p0"]},
                             drop_before_unmask={4: ["p2"]}, rejoin={3: ["p3"], 6: ["p0", "p2"]})
    for res in out:
        assert np.allclose(res.aggregate, res.expected, atol=1e-3)


def test_a_round_is_never_set_up_twice_in_session_mode():
    cfg = _session()
    parties, _, _, _ = set_up_round0(cfg, CountingUrandom(b"twice"))
    state, _ = sa.share_keys(parties["p0"], 3)
    with pytest.raises(ProtocolError, match="already set up"):
        sa.share_keys(state, 2)


def test_rekey_every_is_checked_and_travels_with_the_session():
    with pytest.raises(ConfigError, match="rekey_every"):
        _session(rekey_every=-1)
    with pytest.raises(ConfigError, match="rekey_every"):
        create_aggregation("dh", AggregationConfig(), {"rekey_every": "-2"})
    cfg = _session(rekey_every=4)
    message = wire.session_to_wire(cfg)
    assert wire.parse_session(message, "x25519", cfg.frac_bits).rekey_every == 4
    assert wire.K_REKEY_EVERY not in wire.session_to_wire(_session(rekey_every=1))
    with pytest.raises(ProtocolError):
        wire.parse_session({**message, wire.K_REKEY_EVERY: -1}, "x25519", cfg.frac_bits)


def test_a_passive_party_refuses_another_rekey_every_than_its_plan():
    inputs = random_inputs(1, (2,))
    schemes = {"A": create_aggregation("dh", AggregationConfig(), {"rekey_every": 0}),
               **{p: create_aggregation("dh", AggregationConfig(), {"rekey_every": 1}) for p in PASSIVES}}
    active, passive = round_roles(lambda party: schemes[party], inputs, {})
    with pytest.raises(Exception, match="rekey_every"):
        run_parties({"A": active, **{p: passive for p in PASSIVES}}, active="A")

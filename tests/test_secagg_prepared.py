"""Work done ahead of the input (issue #17): masks expanded early, next setups drawn early.

Checked against the unprepared path as the oracle: a mask expanded ahead (shorter, equal or
longer than the input) gives the same masked input bit for bit; a prepared setup is bound to
one round and one party and is never sent twice; over a run every round's mask key is fresh.
"""

from __future__ import annotations

import numpy as np
import pytest
from aggregation_harness import PASSIVES, RecordingTransport, random_inputs, round_roles, setups_sent
from deterministic_random import CountingUrandom
from secagg_rounds import set_up_round0, survivors_respond

from securevfl.errors import ConfigError, ProtocolError
from securevfl.federation.runtime import run_parties
from securevfl.privacy import secagg as sa
from securevfl.privacy.aggregation import AggregationConfig, create_aggregation
from securevfl.privacy.primitives.key_agreement import create_key_agreement
from securevfl.privacy.primitives.masking import add_pairwise_mask, derive_pairwise_seeds
from securevfl.privacy.primitives.prg import add_prg_streams, prg_uint64

SHAPE = (7, 5)  # odd flat size: masks are cut and extended at odd offsets too


def _set_up(n: int = 3, seed: bytes = b"prepared"):
    """Passive states with round 0 set up (no input sent yet), and the aggregator."""
    cfg = sa.SecAggConfig(b"session-prepared", tuple(f"p{i}" for i in range(n)), sa.default_threshold(n))
    parties, agg, _, _ = set_up_round0(cfg, CountingUrandom(seed))
    return cfg, parties, agg


@pytest.mark.parametrize("offset", [0, 1, 2, 5, 16, 33])
@pytest.mark.parametrize("size", [0, 1, 4, 9])
def test_prg_streams_at_an_offset_are_the_slice_of_the_full_streams(offset, size):
    seeds = [bytes([i]) * 32 for i in range(1, 4)]
    full = np.zeros(offset + size, dtype=np.uint64)
    add_prg_streams(full, seeds[:2], seeds[2:], 7, "step")
    part = np.zeros(size, dtype=np.uint64)
    add_prg_streams(part, seeds[:2], seeds[2:], 7, "step", offset)
    assert np.array_equal(part, full[offset:])
    expected = (prg_uint64(seeds[0], offset + size, 7, "step") + prg_uint64(seeds[1], offset + size, 7, "step")
                - prg_uint64(seeds[2], offset + size, 7, "step"))
    assert np.array_equal(part, expected[offset:])


def test_pairwise_mask_at_an_offset_is_the_slice_of_the_full_mask():
    ka = create_key_agreement("x25519")
    keys = {p: ka.generate(CountingUrandom(p.encode())) for p in ("a", "b", "c")}
    seeds = derive_pairwise_seeds(ka, "b", keys["b"], {p: keys[p].public for p in ("a", "c")}, b"s")
    full = add_pairwise_mask(np.zeros(12, dtype=np.uint64), "b", seeds, 3)
    tail = add_pairwise_mask(np.zeros(7, dtype=np.uint64), "b", seeds, 3, offset=5)
    assert np.array_equal(tail, full[5:])


def test_prg_refuses_a_bad_offset():
    with pytest.raises(ConfigError):
        add_prg_streams(np.zeros(4, dtype=np.uint64), [bytes(32)], [], 0, "s", -1)


def test_key_pair_handle_gives_the_same_secrets_as_the_bytes():
    ka = create_key_agreement("x25519")
    me, peer = ka.generate(CountingUrandom(b"me")), ka.generate(CountingUrandom(b"peer"))
    assert me.handle is not None
    assert ka.exchange_many(me, [peer.public]) == ka.exchange_many(me.private, [peer.public])
    assert ka.exchange_many(me, [peer.public]) == [ka.exchange(me.private, peer.public)]


@pytest.mark.parametrize("mask_size", [None, 0, 1, 20, 35, 36, 100])
def test_a_mask_expanded_ahead_gives_the_same_masked_input(mask_size):
    """Shorter masks are extended, longer ones cut: always equal to masking without one (in place)."""
    cfg, parties, _ = _set_up()
    x = np.random.default_rng(1).normal(size=SHAPE)
    for state in parties.values():
        _, plain = sa.masked_input(state, x, 0, prepare_next=False)
        mask = None if mask_size is None else sa.round_mask(state, 0, mask_size)
        _, prepared = sa.masked_input(state, x, 0, prepare_next=False, mask=mask)
        assert prepared.masked.dtype == np.uint64 and prepared.masked.shape == SHAPE
        assert np.array_equal(prepared.masked, plain.masked)


def test_masks_expanded_ahead_still_sum_to_the_plain_sum():
    cfg, parties, agg = _set_up(4)
    xs = {p: np.random.default_rng(i).normal(size=SHAPE) for i, p in enumerate(parties)}
    inputs = []
    for p, state in parties.items():
        parties[p], message = sa.masked_input(state, xs[p], 0, mask=sa.round_mask(state, 0, 16))
        inputs.append(message)
    agg, request, responses = survivors_respond(parties, agg, inputs)
    _, total = sa.aggregate(agg, responses)
    assert np.allclose(total, sum(xs.values()), atol=4 * 2.0**-cfg.frac_bits)


def test_a_fortran_ordered_input_is_masked_like_its_c_ordered_copy():
    _, parties, _ = _set_up()
    x = np.random.default_rng(2).normal(size=SHAPE)
    state = parties["p0"]
    _, c_order = sa.masked_input(state, x, 0, prepare_next=False, mask=sa.round_mask(state, 0, 20))
    _, f_order = sa.masked_input(state, np.asfortranarray(x), 0, prepare_next=False, mask=sa.round_mask(state, 0, 20))
    assert np.array_equal(f_order.masked, c_order.masked)


def test_a_mask_of_another_round_or_party_is_refused():
    _, parties, _ = _set_up()
    a, b = parties["p0"], parties["p1"]
    x = np.ones(SHAPE)
    with pytest.raises(ProtocolError, match="prepared mask"):
        sa.masked_input(a, x, 0, mask=sa.round_mask(b, 0, x.size))
    with pytest.raises(ProtocolError, match="prepared mask"):
        sa.masked_input(a, x, 0, mask=sa.RoundMask("p0", 1, np.zeros(x.size, dtype=np.uint64)))
    with pytest.raises(ProtocolError, match="no setup for round 1"):
        sa.round_mask(a, 1, 4)
    with pytest.raises(ConfigError):
        sa.round_mask(a, 0, -1)


def test_no_mask_for_a_round_already_masked():
    _, parties, _ = _set_up()
    state, _ = sa.masked_input(parties["p0"], np.ones(SHAPE), 0)
    with pytest.raises(ProtocolError, match="already sent"):
        sa.round_mask(state, 0, 4)


def test_a_prepared_setup_rides_once_and_only_for_its_round():
    _, parties, _ = _set_up()
    state = parties["p0"]
    state, setup = sa.share_keys(state, 1)  # drawn ahead, before round 0's input
    with pytest.raises(ProtocolError, match="already set up"):
        sa.share_keys(state, 1)  # the key pair of round 1 is drawn once
    with pytest.raises(ProtocolError, match="pending setup"):
        sa.masked_input(state, np.ones(SHAPE), 0, next_setup=sa.share_keys(parties["p0"], 1)[1])  # another draw
    with pytest.raises(ProtocolError, match="pending setup"):
        sa.masked_input(parties["p1"], np.ones(SHAPE), 0, next_setup=setup)  # another party's
    after, message = sa.masked_input(state, np.ones(SHAPE), 0, next_setup=setup)
    assert message.next_setup is setup
    # Round 0 is masked: the setup cannot ride on a second input, nor be re-drawn for round 1.
    with pytest.raises(ProtocolError, match="already sent"):
        sa.masked_input(after, np.ones(SHAPE), 0, next_setup=setup)
    with pytest.raises(ProtocolError, match="already set up"):
        sa.share_keys(after, 1)


def test_prepare_next_without_a_prepared_setup_still_draws_one():
    _, parties, _ = _set_up()
    state, message = sa.masked_input(parties["p0"], np.ones(SHAPE), 0)
    assert message.next_setup is not None and message.next_setup.round_index == 1
    assert 1 in state.round_secrets


def test_every_round_of_a_dh_run_has_fresh_keys_sent_once():
    """With setups drawn ahead, each (party, round) still gets one setup, and (rekey_every=1) no mask key repeats."""
    rounds, drops = 6, {1: ("p3",), 3: ("p1",), 4: ("p1",)}
    inputs = random_inputs(rounds, (5, 3))
    scheme = create_aggregation("dh", AggregationConfig(frac_bits=16), {"rekey_every": 1})
    active, passive = round_roles(lambda party: scheme, inputs, drops)
    transport = RecordingTransport(["A", *PASSIVES])
    result = run_parties({"A": active, **{p: passive for p in PASSIVES}}, active="A", transport=transport)
    results, _ = result.results["A"]
    for r, res in enumerate(results):
        alive = [p for p in PASSIVES if p not in drops.get(r, ())]
        assert np.allclose(res.total, sum(inputs[r][p] for p in alive), atol=1e-3)
    sent = setups_sent(transport.envelopes)
    keys = [k for _, _, k in sent]
    assert len(set(keys)) == len(keys)  # a key pair is never used for two rounds
    slots = [(p, r) for p, r, _ in sent]
    assert len(set(slots)) == len(slots)  # one setup per party and round
    assert {r for _, r in slots} >= set(range(rounds))

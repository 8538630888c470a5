import dataclasses

import numpy as np
import pytest
from deterministic_random import CountingUrandom
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import stats
from secagg_rounds import survivors_respond

from securevfl.errors import ConfigError, CryptoError, ProtocolError, SecureVFLError
from securevfl.privacy.primitives.fixed_point import encode
from securevfl.privacy.primitives.key_agreement import PublicKey
from securevfl.privacy.primitives.masking import pairwise_mask
from securevfl.privacy.primitives.prg import STEP_SELF, prg_uint64
from securevfl.privacy.primitives.shamir import reconstruct_secret
from securevfl.privacy.secagg import (
    AggregatorSecAggState,
    InsufficientSurvivorsError,
    PassiveSecAggState,
    SecAggConfig,
    ShareVerificationError,
    UnmaskRequest,
    advertise_keys,
    aggregate,
    collect_adverts,
    collect_setups,
    default_threshold,
    masked_input,
    receive_keys,
    receive_setup,
    round_pairwise_seeds,
    share_keys,
    simulate_secagg,
    unmask_response,
)


def _config(n, t=None, **kw):
    parties = tuple(f"passive{i}" for i in range(n))
    return SecAggConfig(b"sess", parties, t or default_threshold(n), **kw)


def _inputs(cfg, rounds, shape=(6, 4), seed=0):
    rng = np.random.default_rng(seed)
    return [{p: rng.normal(0, 10, size=shape) for p in cfg.parties} for _ in range(rounds)]


def _check(results, frac_bits=16):
    for res in results:
        n = len(res.survivors) + len(res.dropped)
        assert np.all(np.abs(res.aggregate - res.expected) <= n * 2.0**-frac_bits), res


def _setup(cfg, urandom=None):
    """Run the protocol up to the point where every party can mask round 0."""
    parties = {p: PassiveSecAggState.create(cfg, p, urandom) for p in cfg.parties}
    agg = AggregatorSecAggState.create(cfg)
    agg, directory = collect_adverts(agg, [advertise_keys(s) for s in parties.values()])
    parties = {p: receive_keys(s, directory) for p, s in parties.items()}
    setups = []
    for p in cfg.parties:
        parties[p], setup = share_keys(parties[p], 0)
        setups.append(setup)
    agg, bundles = collect_setups(agg, setups)
    parties = {p: receive_setup(parties[p], bundles[p]) for p in cfg.parties}
    return parties, agg, bundles


def test_no_dropout_rounds_are_exact():
    cfg = _config(4)
    _check(simulate_secagg(cfg, _inputs(cfg, 3)))


@settings(max_examples=8, deadline=None)
@given(st.integers(3, 6), st.data())
def test_drop_after_masking_recovers_survivor_sum(n, data):
    cfg = _config(n)
    max_drops = n - cfg.threshold
    dropped = data.draw(st.sets(st.sampled_from(cfg.parties), min_size=1, max_size=max(1, max_drops)))
    assume(len(dropped) <= max_drops)  # enough survivors to unmask
    round_ = data.draw(st.integers(0, 1))
    results = simulate_secagg(cfg, _inputs(cfg, 2), drop_before_input={round_: dropped})
    _check(results)
    assert set(results[round_].dropped) == dropped
    assert not set(results[round_].survivors) & dropped


def test_drop_before_unmask_and_rejoin():
    cfg = _config(5, 3)
    results = simulate_secagg(
        cfg,
        _inputs(cfg, 6),
        drop_before_input={1: {"passive2"}},
        drop_before_unmask={2: {"passive4"}},
        rejoin={4: {"passive2"}},
    )
    _check(results)
    assert results[1].dropped == ("passive2",)
    assert "passive4" in results[2].survivors  # its input arrived: counted, self mask recovered
    assert results[3].dropped == ("passive4",)  # set up round 3 (piggyback), then gone
    assert "passive2" in results[4].survivors


def test_ffdh_backend_round():
    cfg = _config(3, 2, key_agreement="ffdh2048")
    _check(simulate_secagg(cfg, _inputs(cfg, 2), drop_before_input={1: {"passive0"}}))


def test_survivor_refuses_both_secrets_of_one_party():
    cfg = _config(4, 3)
    parties, agg, _ = _setup(cfg)
    xs = _inputs(cfg, 1)[0]
    for p in cfg.parties:
        parties[p], _ = masked_input(parties[p], xs[p], 0)
    both = UnmaskRequest(0, cfg.parties, ("passive3",))
    with pytest.raises(ProtocolError, match="both"):
        unmask_response(parties["passive0"], both)
    # answering once, then being asked again with passive3 flipped to "dropped", is refused too
    honest = UnmaskRequest(0, cfg.parties, ())
    state, _ = unmask_response(parties["passive0"], honest)
    flipped = UnmaskRequest(0, cfg.parties[:3], ("passive3",))
    with pytest.raises(ProtocolError):
        unmask_response(state, flipped)


def test_request_must_match_participants():
    cfg = _config(4, 3)
    parties, agg, _ = _setup(cfg)
    xs = _inputs(cfg, 1)[0]
    parties["passive0"], _ = masked_input(parties["passive0"], xs["passive0"], 0)
    with pytest.raises(ProtocolError):  # omits passive3 entirely
        unmask_response(parties["passive0"], UnmaskRequest(0, cfg.parties[:3], ()))
    with pytest.raises(ProtocolError):  # lists the responder as dropped
        unmask_response(parties["passive0"], UnmaskRequest(0, cfg.parties[1:], ("passive0",)))


def test_fewer_than_t_survivors_fails():
    cfg = _config(5, 3)
    with pytest.raises(InsufficientSurvivorsError):
        simulate_secagg(cfg, _inputs(cfg, 1), drop_before_input={0: {"passive0", "passive1", "passive2"}})
    # enough inputs, but too few parties answer the unmask request
    with pytest.raises(InsufficientSurvivorsError):
        simulate_secagg(cfg, _inputs(cfg, 1), drop_before_unmask={0: {"passive0", "passive1", "passive2"}})
    assert issubclass(InsufficientSurvivorsError, SecureVFLError)


def test_threshold_validation():
    with pytest.raises(ConfigError):
        _config(4, 1)
    with pytest.raises(ConfigError):
        _config(4, 5)
    with pytest.raises(ConfigError, match=r"t > n/2"):  # t <= n/2: see test_secagg_hardening.py
        _config(4, 2)
    with pytest.raises(ConfigError, match="int"):
        _config(4, 3.0)
    with pytest.raises(ConfigError):
        SecAggConfig(b"s", ("a",), 2)
    with pytest.raises(ConfigError):
        SecAggConfig(b"s", ("a", "a"), 2)
    with pytest.raises(ConfigError, match="x25519"):
        _config(3, 2, key_agreement="nope")
    assert default_threshold(2) == 2 and default_threshold(5) == 3


def test_tampered_share_ciphertext_raises_crypto_error():
    cfg = _config(3, 2)
    parties = {p: PassiveSecAggState.create(cfg, p) for p in cfg.parties}
    agg = AggregatorSecAggState.create(cfg)
    agg, directory = collect_adverts(agg, [advertise_keys(s) for s in parties.values()])
    parties = {p: receive_keys(s, directory) for p, s in parties.items()}
    setups = []
    for p in cfg.parties:
        parties[p], setup = share_keys(parties[p], 0)
        setups.append(setup)
    agg, bundles = collect_setups(agg, setups)
    bundle = bundles["passive1"]
    blob = bytearray(bundle.encrypted_shares["passive0"])
    blob[-1] ^= 1
    bad = dataclasses.replace(bundle, encrypted_shares={**bundle.encrypted_shares, "passive0": bytes(blob)})
    with pytest.raises(CryptoError):
        receive_setup(parties["passive1"], bad)
    # swapping ciphertexts between senders is caught by the associated data
    swapped = dataclasses.replace(
        bundle,
        encrypted_shares={
            "passive0": bundle.encrypted_shares["passive2"],
            "passive2": bundle.encrypted_shares["passive0"],
        },
    )
    with pytest.raises(CryptoError):
        receive_setup(parties["passive1"], swapped)


def test_round_cannot_be_masked_twice_or_set_up_twice():
    cfg = _config(3, 2)
    parties, _, _ = _setup(cfg)
    state, _ = masked_input(parties["passive0"], np.zeros(3), 0)
    with pytest.raises(ProtocolError):
        masked_input(state, np.ones(3), 0)
    with pytest.raises(ProtocolError):
        share_keys(state, 1)  # round 1 was already set up by the piggyback


def test_deterministic_with_injected_urandom():
    cfg = _config(3, 2)
    xs = _inputs(cfg, 1)[0]
    outs = []
    for _ in range(2):
        parties, _, _ = _setup(cfg, CountingUrandom(b"fixed"))
        _, msg = masked_input(parties["passive1"], xs["passive1"], 0, prepare_next=False)
        outs.append(msg.masked)
    assert np.array_equal(outs[0], outs[1])


def test_late_input_of_dropped_party_stays_hidden():
    """After recovery the aggregator knows d's pairwise masks, but d's self mask still hides it."""
    cfg = _config(3, 2)
    parties, agg, bundles = _setup(cfg)
    x = np.full(20_000, 3.0)
    masked = {}
    for p in cfg.parties:
        parties[p], masked[p] = masked_input(parties[p], x, 0, prepare_next=False)
    agg, request, responses = survivors_respond(parties, agg, [masked["passive0"], masked["passive1"]])
    assert all(not r.self_seed_shares.keys() & set(request.dropped) for r in responses)
    agg, total = aggregate(agg, responses)
    assert np.allclose(total, 6.0, atol=2**-14)
    # The late message of passive2 arrives. The aggregator strips everything it can know:
    # passive2's reconstructed round key gives all of passive2's pairwise masks.
    key = reconstruct_secret([r.key_shares["passive2"] for r in responses][: cfg.threshold])
    ka = cfg.agreement()
    publics = {p: PublicKey.from_bytes(b) for p, b in bundles["passive2"].mask_publics.items()}
    keys = ka.keypair_from_private(key)
    seeds = round_pairwise_seeds(cfg, ka, 0, "passive2", keys, {j: publics[j] for j in ("passive0", "passive1")})
    late = masked["passive2"].masked.copy()
    late -= pairwise_mask("passive2", seeds, late.shape, 0, cfg.step)
    encoded = encode(x, cfg.frac_bits, 3)
    assert not np.array_equal(late, encoded)  # still hidden by passive2's self mask
    counts = np.bincount((late >> np.uint64(56)).astype(np.int64), minlength=256)
    assert stats.chisquare(counts).pvalue > 1e-4
    # sanity check that the test can fail: with the self seed as well, the input is exposed
    self_seed = parties["passive2"].round_secrets[0].self_seed
    late -= prg_uint64(self_seed, late.shape, 0, STEP_SELF)
    assert np.array_equal(late, encoded)


def test_mask_keys_are_fresh_every_round():
    cfg = _config(3, 2)
    parties, _, bundles = _setup(cfg)
    state, msg = masked_input(parties["passive0"], np.zeros(2), 0)
    assert msg.next_setup is not None and msg.next_setup.round_index == 1
    assert msg.next_setup.mask_public != bundles["passive0"].mask_publics["passive0"]
    assert state.round_secrets[1].self_seed != state.round_secrets[0].self_seed
    assert "passive" in repr(state) and state.round_secrets[0].self_seed.hex() not in repr(state)


@settings(max_examples=6, deadline=None)
@given(st.integers(2, 10), st.data())
def test_protocol_exact_for_random_shapes(n, data):
    cfg = _config(n)
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32)))
    inputs = [{p: rng.uniform(-1e4, 1e4, size=shape) for p in cfg.parties}]
    _check(simulate_secagg(cfg, inputs))


def _one_round_with_drop(cfg):
    parties, agg, _ = _setup(cfg)
    xs = _inputs(cfg, 1)[0]
    masked = []
    for p in cfg.parties[:-1]:
        parties[p], m = masked_input(parties[p], xs[p], 0, prepare_next=False)
        masked.append(m)
    agg, request, responses = survivors_respond(parties, agg, masked)
    return agg, responses


def test_aggregator_rejects_foreign_and_corrupt_shares():
    cfg = _config(4, 3)
    agg, responses = _one_round_with_drop(cfg)
    first, second = responses[0], responses[1]
    # a response carrying another party's share indices is refused
    forged = dataclasses.replace(first, self_seed_shares=second.self_seed_shares)
    with pytest.raises(ProtocolError):
        aggregate(agg, [forged, *responses[1:]])
    with pytest.raises(ProtocolError, match="two unmask responses"):  # a replayed response
        aggregate(agg, [first, first, *responses[1:]])
    # a corrupted key share reconstructs a key that does not match the owner's commitment
    dropped = cfg.parties[-1]
    share = first.key_shares[dropped]
    bad = dataclasses.replace(share, y=(share.y + 1) % (2**521 - 1))
    corrupt = dataclasses.replace(first, key_shares={dropped: bad})
    with pytest.raises(ShareVerificationError, match=dropped) as excinfo:
        aggregate(agg, [corrupt, *responses[1:]])
    assert excinfo.value.party == dropped and excinfo.value.suspects == ()  # no spare response
    # the honest responses still work on the same (unchanged, frozen) state
    _, total = aggregate(agg, responses)
    assert total.shape == (6, 4)


def test_aggregate_needs_t_responses():
    cfg = _config(4, 3)
    agg, responses = _one_round_with_drop(cfg)
    with pytest.raises(InsufficientSurvivorsError):
        aggregate(agg, responses[:2])

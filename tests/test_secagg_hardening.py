"""Hardening of the double-masked secure aggregation against a deviating aggregator or responder.

* A threshold t <= n/2 lets an aggregator split the unmask step between two disjoint groups and
  unmask one party (the attack is reproduced on the pure core); such configs are refused.
* A corrupted Shamir share can no longer silently corrupt the sum: reconstructed self-mask
  seeds and mask keys are checked against SHA-256 commitments published in the round setup.
* Every wire parser of the ``dh`` scheme returns a well-typed message or raises ProtocolError.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
from deterministic_random import CountingUrandom
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from secagg_rounds import set_up_round0, survivors_respond

from securevfl.errors import ConfigError, ProtocolError
from securevfl.privacy import secagg as sa
from securevfl.privacy.aggregation import AggregationConfig, create_aggregation
from securevfl.privacy.primitives.fixed_point import encode
from securevfl.privacy.primitives.key_agreement import PublicKey
from securevfl.privacy.primitives.masking import pairwise_mask
from securevfl.privacy.primitives.prg import STEP_SELF, prg_uint64
from securevfl.privacy.primitives.shamir import SHARE_BYTES, Share, reconstruct_secret
from securevfl.privacy.secagg import wire as sw

SHAPE = (6, 4)




def _parties(n):
    return tuple(f"passive{i}" for i in range(n))


def _config(n, t=None):
    return sa.SecAggConfig(b"sess", _parties(n), t or sa.default_threshold(n))


def _unchecked_config(n, t):
    """A config with threshold ``t`` that skips validation: what the code accepted before."""
    cfg = _config(n)
    object.__setattr__(cfg, "threshold", t)
    return cfg


def _inputs(cfg, seed=0):
    rng = np.random.default_rng(seed)
    return {p: rng.normal(0, 10, size=SHAPE) for p in cfg.parties}


# ------------------------------------------------------------------ finding 5: t > n/2


def _split_view_attack(cfg, target="passive0"):
    """A malicious aggregator asks one group for self-seed shares and another for key shares.

    Group A answers the honest request (everyone survived: shares of b_target); group B is told
    the target dropped (shares of sk_target). Every party answers at most one request per round
    and never reveals both secrets of one party, yet if both groups reach t the aggregator
    strips every mask of the target. Returns the target's recovered ring vector, or None.
    """
    parties, _, bundles, _ = set_up_round0(cfg)
    xs = _inputs(cfg)
    masked = {}
    for p in cfg.parties:
        parties[p], masked[p] = sa.masked_input(parties[p], xs[p], 0, prepare_next=False)
    others = [p for p in cfg.parties if p != target]
    honest = sa.UnmaskRequest(0, cfg.parties, ())
    fake = sa.UnmaskRequest(0, tuple(others), (target,))
    group_a = [target, *others][: cfg.threshold]
    seed_shares = []
    for p in group_a:
        parties[p], resp = sa.unmask_response(parties[p], honest)
        seed_shares.append(resp.self_seed_shares[target])
    key_shares = []
    for p in others:  # parties of group A refuse a second request; the rest answer
        try:
            parties[p], resp = sa.unmask_response(parties[p], fake)
        except ProtocolError:
            continue
        key_shares.append(resp.key_shares[target])
    if len(key_shares) < cfg.threshold:
        return None, xs[target]
    self_seed = reconstruct_secret(seed_shares)
    mask_key = reconstruct_secret(key_shares)
    publics = {j: PublicKey.from_bytes(bundles[target].mask_publics[j]) for j in others}
    agreement = cfg.agreement()
    seeds = sa.round_pairwise_seeds(cfg, agreement, 0, target, agreement.keypair_from_private(mask_key), publics)
    y = masked[target].masked.copy()
    y -= pairwise_mask(target, seeds, y.shape, 0, cfg.step)
    y -= prg_uint64(self_seed, y.shape, 0, STEP_SELF)
    return y, xs[target]


def test_threshold_at_most_half_lets_split_requests_unmask_a_party_so_it_is_refused():
    # The attack is real: at t = 2 of 4 two disjoint pairs answer and passive0 is exposed.
    cfg = _unchecked_config(4, 2)
    recovered, x = _split_view_attack(cfg)
    assert recovered is not None
    assert np.array_equal(recovered, encode(x, cfg.frac_bits, 4))
    # At t = 3 > n/2 any two groups of t overlap; the overlap refuses the second request.
    recovered, _ = _split_view_attack(_config(4, 3))
    assert recovered is None
    # ... so a threshold at or below n/2 is refused where the config is made.
    with pytest.raises(ConfigError, match=r"threshold 2 is at most n/2 = 2 for 4 parties.*t > n/2"):
        sa.SecAggConfig(b"sess", _parties(4), 2)
    with pytest.raises(ConfigError, match=r"n/2 = 3 for 6 parties"):
        sa.SecAggConfig(b"sess", _parties(6), 3)
    sa.SecAggConfig(b"sess", _parties(3), 2)  # 2 > 1.5
    sa.SecAggConfig(b"sess", _parties(6), 4)


def test_low_threshold_from_user_options_is_one_config_error_line():
    scheme = create_aggregation("dh", AggregationConfig(threshold=2))
    with pytest.raises(ConfigError, match=r"t > n/2") as excinfo:
        scheme.validate(4)
    assert "\n" not in str(excinfo.value)
    scheme.validate(3)  # 2 > 3/2
    with pytest.raises(ConfigError):
        AggregationConfig(threshold=True)
    with pytest.raises(ConfigError):
        AggregationConfig(threshold=1)


def test_passive_refuses_a_session_with_a_minority_threshold():
    wire = {"session_id": b"s" * 16, "parties": list(_parties(4)), "threshold": 2}
    with pytest.raises(ProtocolError, match="n/2"):
        sw.parse_session(wire, "x25519", 16)


# ------------------------------------------------------------------ finding 6: commitments


def _unmask_round(cfg, drop=()):
    parties, agg, _, setups = set_up_round0(cfg)
    xs = _inputs(cfg)
    masked = []
    for p in cfg.parties:
        if p not in drop:
            parties[p], m = sa.masked_input(parties[p], xs[p], 0, prepare_next=False)
            masked.append(m)
    agg, request, responses = survivors_respond(parties, agg, masked)
    expected = sum(xs[p] for p in request.survivors)
    return agg, responses, expected, setups


def _flip_share_byte(response, field_name, owner):
    """Flip the last byte of one share value on the wire (as a faulty or lying responder would)."""
    wire = sw.response_to_wire(response)
    blob = bytearray(wire[field_name][owner])
    blob[-1] ^= 0x01
    wire[field_name][owner] = bytes(blob)
    return sw.parse_response(wire)


def test_corrupted_self_seed_share_raises_naming_the_party():
    cfg = _config(4)  # t = 3
    agg, responses, expected, _ = _unmask_round(cfg)
    _, total = sa.aggregate(agg, responses)  # control: honest responses give the sum
    assert np.allclose(total, expected, atol=4 * 2.0**-16)
    bad = [responses[0], _flip_share_byte(responses[1], "self_seed_shares", "passive2"), *responses[2:]]
    with pytest.raises(ProtocolError, match="passive2") as excinfo:
        sa.aggregate(agg, bad)  # before the fix: a sum off by ~1e14, no error
    err = excinfo.value
    assert err.party == "passive2" and err.secret == "self-mask seed"
    assert err.suspects == ("passive1",)  # identified with the fourth (spare) response
    assert "passive1" in str(err)


def test_corrupted_share_without_spare_response_still_raises():
    cfg = _config(3)  # t = 2, one dropped: exactly t responses, no spare
    agg, responses, _, _ = _unmask_round(cfg, drop=("passive2",))
    bad = [_flip_share_byte(responses[0], "self_seed_shares", "passive1"), responses[1]]
    with pytest.raises(ProtocolError, match="passive1") as excinfo:
        sa.aggregate(agg, bad)
    assert excinfo.value.party == "passive1" and excinfo.value.suspects == ()


def test_corrupted_key_share_of_dropped_party_raises_naming_it():
    cfg = _config(5)  # t = 3, one dropped, four responses
    agg, responses, expected, _ = _unmask_round(cfg, drop=("passive4",))
    bad = [*responses[:2], _flip_share_byte(responses[2], "key_shares", "passive4"), responses[3]]
    with pytest.raises(ProtocolError, match="passive4") as excinfo:
        sa.aggregate(agg, bad)
    assert excinfo.value.secret == "mask key" and excinfo.value.suspects == ("passive2",)
    # the caller can drop the suspect and aggregate again on the same (frozen) state
    honest = [r for r in bad if r.party not in excinfo.value.suspects]
    _, total = sa.aggregate(agg, honest)
    assert np.allclose(total, expected, atol=5 * 2.0**-16)


def test_commitment_that_does_not_match_the_dealt_secret_names_the_dealer():
    cfg = _config(4)

    def tamper(party, setup):  # a dealer whose commitment does not match its shares
        return dataclasses.replace(setup, seed_commitment=bytes(32)) if party == "passive3" else setup

    parties, agg, _, _ = set_up_round0(cfg, tamper=tamper)
    masked = []
    for p in cfg.parties:
        parties[p], m = sa.masked_input(parties[p], np.ones(3), 0, prepare_next=False)
        masked.append(m)
    agg, request, responses = survivors_respond(parties, agg, masked)
    with pytest.raises(ProtocolError, match="passive3") as excinfo:
        sa.aggregate(agg, responses)
    assert excinfo.value.party == "passive3" and excinfo.value.suspects == ()


def test_setup_commitments_are_validated_on_receipt():
    cfg = _config(3)
    _, _, _, setups = set_up_round0(cfg)
    setup = setups[0]
    assert len(setup.seed_commitment) == len(setup.key_commitment) == sa.COMMITMENT_BYTES
    assert setup.seed_commitment.hex() not in repr(setup)
    wire = sw.setup_to_wire(setup)
    assert sw.parse_setup(wire) == setup
    for key, value in (("seed_commitment", b"short"), ("key_commitment", "x" * 32), ("seed_commitment", None)):
        with pytest.raises(ProtocolError, match="commitment"):
            sw.parse_setup({**wire, key: value})
    missing = {k: v for k, v in wire.items() if k != "key_commitment"}
    with pytest.raises(ProtocolError, match="key_commitment"):
        sw.parse_setup(missing)
    # the pure core refuses a setup whose commitment has the wrong length, too
    bad = dataclasses.replace(setup, key_commitment=b"\x00" * 31)
    with pytest.raises(ProtocolError, match="commitment"):
        sa.collect_setups(sa.AggregatorSecAggState.create(cfg), [bad, *setups[1:]])


def test_commitments_are_domain_separated():
    cfg = _config(3)
    secret = bytes(32)
    base = sa.commit_secret(cfg, 0, "passive0", sa.SELF_SEED, secret)
    assert base != sa.commit_secret(cfg, 1, "passive0", sa.SELF_SEED, secret)
    assert base != sa.commit_secret(cfg, 0, "passive1", sa.SELF_SEED, secret)
    assert base != sa.commit_secret(cfg, 0, "passive0", sa.MASK_KEY, secret)
    other = sa.SecAggConfig(b"other", cfg.parties, cfg.threshold)
    assert base != sa.commit_secret(other, 0, "passive0", sa.SELF_SEED, secret)


# ------------------------------------------------------------------ fuzzing the wire parsers


@functools.lru_cache(maxsize=1)
def _valid_wires() -> dict[str, list]:
    """Valid wire dicts of every ``dh`` message, from a real three-party round with a dropout."""
    cfg = sa.SecAggConfig(b"s" * 16, ("p1", "p2", "p3"), 2)
    parties, agg, bundles, setups = set_up_round0(cfg, CountingUrandom(b"fuzz"))
    masked = []
    for p in ("p1", "p2"):
        parties[p], m = sa.masked_input(parties[p], np.arange(4.0), 0)
        masked.append(m)
    agg, request, responses = survivors_respond(parties, agg, masked)
    advert = sa.advertise_keys(parties["p1"])
    return {
        "session": [sw.session_to_wire(cfg)],
        "advert": [sw.advert_to_wire(advert)],
        "directory": [sw.directory_to_wire(sa.KeyDirectory(agg.channel_publics))],
        "setup": [sw.setup_to_wire(s) for s in setups],
        "bundle": [sw.bundle_to_wire(b) for b in bundles.values()],
        "input": [sw.input_to_wire(m) for m in masked],
        "request": [sw.request_to_wire(request, None)],
        "response": [sw.response_to_wire(r) for r in responses],
    }


def _parse(kind, wire):
    if kind == "session":
        return sw.parse_session(wire, "x25519", 16)
    if kind == "advert":
        return sw.parse_advert(wire)
    if kind == "directory":
        return sw.parse_directory(wire)
    if kind == "request":
        return sw.parse_request(wire)[0]
    return getattr(sw, f"parse_{kind}")(wire)


_TYPES = {
    "session": sa.SecAggConfig,
    "advert": sa.KeyAdvert,
    "directory": sa.KeyDirectory,
    "setup": sa.RoundSetup,
    "bundle": sa.SetupBundle,
    "input": sa.MaskedInput,
    "request": sa.UnmaskRequest,
    "response": sa.UnmaskResponse,
}

_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=80)
    | st.sampled_from([np.zeros(3, dtype=np.uint64), np.ones((2, 2)), np.int64(3), 2**40, b"\x00" * SHARE_BYTES])
)
_values = st.recursive(
    _leaves, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=6), c, max_size=4), max_leaves=10
)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*prefix, i))


def _copy(obj):
    if isinstance(obj, dict):
        return {k: _copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_copy(v) for v in obj]
    return obj


@st.composite
def _mutated(draw, kind):
    wire = _copy(draw(st.sampled_from(_valid_wires()[kind])))
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(wire) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = wire
        for step in path[:-1]:
            parent = parent[step]
        last = path[-1]
        op = draw(st.sampled_from(["replace", "delete", "truncate", "extend", "add_key"]))
        value = parent[last]
        if op == "delete" and isinstance(parent, dict):
            del parent[last]
        elif op == "truncate" and isinstance(value, bytes | str | list):
            parent[last] = value[: draw(st.integers(0, max(len(value) - 1, 0)))]
        elif op == "extend" and isinstance(value, bytes):
            parent[last] = value + draw(st.binary(min_size=1, max_size=8))
        elif op == "add_key" and isinstance(value, dict):
            value[draw(st.text(max_size=6))] = draw(_values)
        else:
            parent[last] = draw(_values)
    return wire


def _check_parser(kind, wire):
    try:
        message = _parse(kind, wire)
    except ProtocolError:
        return
    assert isinstance(message, _TYPES[kind])


_KINDS = sorted(_TYPES)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_KINDS), st.data())
def test_dh_wire_parsers_accept_or_raise_protocol_error(kind, data):
    wire = data.draw(_mutated(kind) | _values)
    _check_parser(kind, wire)


def test_dh_wire_parsers_round_trip_valid_messages():
    for kind, wires in _valid_wires().items():
        for wire in wires:
            assert isinstance(_parse(kind, wire), _TYPES[kind])


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2 * SHARE_BYTES) | st.binary(min_size=SHARE_BYTES, max_size=SHARE_BYTES))
def test_share_from_bytes_accepts_or_raises_protocol_error(blob):
    try:
        share = Share.from_bytes(blob)
    except ProtocolError:  # refused: a wrong length, or a field outside its range
        if len(blob) == SHARE_BYTES:
            x, threshold, secret_len = (int.from_bytes(blob[a:b], "big") for a, b in ((0, 4), (4, 6), (6, 8)))
            y = int.from_bytes(blob[8:], "big")
            assert x == 0 or threshold == 0 or not 1 <= secret_len <= 64 or y >= (1 << 521) - 1
    else:
        assert share.to_bytes() == blob


def test_share_from_bytes_refuses_non_bytes():
    for value in (None, 74, "x" * 74, [0] * 74):
        with pytest.raises(ProtocolError):
            Share.from_bytes(value)


@pytest.mark.slow
@settings(max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_KINDS), st.data())
def test_dh_wire_parsers_fuzz_long(kind, data):
    _check_parser(kind, data.draw(_mutated(kind) | _values))

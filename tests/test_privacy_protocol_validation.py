"""Every message a party of an aggregation scheme receives is validated: malformed means ProtocolError.

An honest run of each scheme is recorded; then one party is replayed alone against the recorded
messages with one of them mutated (a field replaced, deleted, truncated, re-typed, a key added,
the whole message swapped for junk). The replay must finish or raise ProtocolError (a subclass
included, e.g. InsufficientSurvivorsError or a failed share decryption); never KeyError,
TypeError, IndexError, ValueError, .... Running out of recorded messages stands for a peer that
never answers (a timeout in a deployment), which is allowed.
"""

from __future__ import annotations

import contextlib
import functools
from collections import defaultdict
from unittest import mock

import numpy as np
import pytest
from aggregation_harness import PASSIVES, RecordingTransport, random_inputs, round_roles
from deterministic_random import CountingUrandom
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from paillier_setup import FRAC_BITS, TEST_KEY_BITS

from securevfl.errors import ProtocolError
from securevfl.federation import codec
from securevfl.federation.runtime import run_parties
from securevfl.privacy.aggregation import AggregationConfig, create_aggregation
from securevfl.privacy.aggregation import paillier as pa
from securevfl.privacy.paillier import generate_keypair
from securevfl.privacy.primitives import wire

ROUNDS = 2
DROPS = {1: ("p3",)}  # round 1: p3 drops (schemes with dropout recovery)
OPTIONS = {"paillier": {"key_bits": TEST_KEY_BITS, "insecure_allow_small_key": True}}


@functools.lru_cache(maxsize=1)
def _keypair():
    return generate_keypair(TEST_KEY_BITS, insecure_allow_small_key=True)


def _scheme(name: str, party: str):
    """One scheme object per party, each with its own reproducible randomness."""
    config = AggregationConfig(frac_bits=FRAC_BITS, urandom=CountingUrandom(f"{name}/{party}".encode()))
    return create_aggregation(name, config, OPTIONS.get(name))


def _roles(name: str, inputs, drops):
    active, passive = round_roles(lambda party: _scheme(name, party), inputs, drops)
    return (lambda ctx: [r.total for r in active(ctx)[0]]), passive


def _patched(name: str):
    if name == "paillier":  # keygen is the slow part: the key holder reuses one small key
        return mock.patch.object(pa, "generate_keypair", lambda *a, **k: _keypair())
    return contextlib.nullcontext()


@functools.cache
def _recording(name: str):
    """Messages each party received in an honest run, in order, per (src, tag); and the inputs."""
    drops = {} if name == "pairwise" else DROPS
    inputs = random_inputs(ROUNDS, (2, 5))
    active, passive = _roles(name, inputs, drops)
    transport = RecordingTransport(["A", *PASSIVES])
    with _patched(name):
        result = run_parties({"A": active, **{p: passive for p in PASSIVES}}, active="A", transport=transport)
    for r, total in enumerate(result.results["A"]):
        alive = [p for p in PASSIVES if p not in drops.get(r, ())]
        assert np.allclose(total, sum(inputs[r][p] for p in alive), atol=1e-3)
    received = defaultdict(list)
    for e in transport.envelopes:
        received[e.dst].append((e.src, e.tag, codec.decode(e.payload)))
    return dict(received), inputs, drops


class _Starved(Exception):
    """The replayed party waits for a message the recording does not have (a silent peer)."""


class _Meter:
    def crypto(self, primitive):
        return contextlib.nullcontext()


class ScriptedContext:
    """A PartyContext stand-in: ``recv`` replays recorded messages, ``send`` only encodes."""

    def __init__(self, name, inbox):
        self.name, self.active, self.passives = name, "A", PASSIVES
        self.meter = _Meter()
        self._inbox = defaultdict(list)
        for src, tag, message in inbox:
            self._inbox[src, tag].append(message)

    def send(self, dst, tag, value):
        return len(codec.encode(value))

    def broadcast(self, dsts, tag, value):
        for dst in dsts:
            self.send(dst, tag, value)

    def recv(self, src, tag):
        queue = self._inbox[src, tag]
        if not queue:
            raise _Starved(f"{self.name} waits for {tag} from {src}")
        return queue.pop(0)


# ------------------------------------------------------------------ mutations


_junk = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=6)
    | st.binary(max_size=40)
    | st.sampled_from([np.zeros(3, dtype=np.uint64), np.ones((2, 5)), np.array(["x"]), np.int64(3), b"\x00" * 32]),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
    max_leaves=6,
)


def _copy(value):
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


def _mutate_leaf(data, value):
    op = data.draw(st.sampled_from(["junk", "truncate", "flip", "extend", "retype"]))
    if op == "truncate" and isinstance(value, bytes | list | str) and value:
        return value[: data.draw(st.integers(0, len(value) - 1))]
    if op == "flip" and isinstance(value, bytes) and value:
        i = data.draw(st.integers(0, len(value) - 1))
        return value[:i] + bytes([value[i] ^ data.draw(st.integers(1, 255))]) + value[i + 1:]
    if op == "extend" and isinstance(value, bytes | list):
        return value + (data.draw(st.binary(min_size=1, max_size=8)) if isinstance(value, bytes) else [None])
    if op == "retype" and isinstance(value, np.ndarray):
        return data.draw(st.sampled_from([value.astype(np.float64), value.reshape(-1)[:-1], value.astype(np.int64),
                                          value.reshape(1, -1)]))
    if op == "retype" and isinstance(value, int) and not isinstance(value, bool):
        return data.draw(st.sampled_from([-1, value + 1, 2**64, str(value), float(value)]))
    return data.draw(_junk)


def _mutated(data, message):
    message = _copy(message)
    paths = list(_paths(message))
    path = data.draw(st.sampled_from(paths))
    if not path:
        return _mutate_leaf(data, message)
    parent = message
    for step in path[:-1]:
        parent = parent[step]
    key = path[-1]
    if isinstance(parent, dict) and data.draw(st.integers(0, 4)) == 0:
        del parent[key]
    elif isinstance(parent, dict) and data.draw(st.integers(0, 4)) == 0:
        parent[data.draw(st.text(max_size=6))] = data.draw(_junk)
    else:
        parent[key] = _mutate_leaf(data, parent[key])
    return message


def _replay(name: str, party: str, data) -> None:
    received, inputs, drops = _recording(name)
    inbox = list(received[party])
    i = data.draw(st.integers(0, len(inbox) - 1), label="message")
    src, tag, message = inbox[i]
    inbox[i] = (src, tag, _mutated(data, message))
    active, passive = _roles(name, inputs, drops)
    ctx = ScriptedContext(party, inbox)
    try:
        with _patched(name):
            active(ctx) if party == "A" else passive(ctx)
    except (ProtocolError, _Starved):
        pass


CASES = [("none", "A"), ("pairwise", "A"), ("pairwise", "p1"), ("dh", "A"), ("dh", "p1"), ("dh", "p3")]
PAILLIER_CASES = [("paillier", "A"), ("paillier", "p1"), ("paillier", "p2")]  # p1 holds the key


@pytest.mark.parametrize("name,party", CASES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_malformed_message_raises_protocol_error(name, party, data):
    _replay(name, party, data)


@pytest.mark.parametrize("name,party", PAILLIER_CASES)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_malformed_paillier_message_raises_protocol_error(name, party, data):
    _replay(name, party, data)


@pytest.mark.parametrize("name,party", [*CASES, *PAILLIER_CASES])
def test_the_unmodified_recording_replays_cleanly(name, party):
    received, inputs, drops = _recording(name)
    active, passive = _roles(name, inputs, drops)
    with _patched(name):
        active(ScriptedContext(party, received[party])) if party == "A" else passive(
            ScriptedContext(party, received[party]))


# ------------------------------------------------------------------ the field readers


_readers = {
    "mapping": lambda v: wire.mapping(v, "m"),
    "string": lambda v: wire.string(v, "s"),
    "integer": lambda v: wire.integer(v, "i"),
    "blob": lambda v: wire.blob(v, "b", 4),
    "names": lambda v: wire.names(v, "n"),
    "str_map": lambda v: wire.str_map(v, "m", wire.blob),
    "uint64_array": lambda v: wire.uint64_array(v, "u"),
    "real_array": lambda v: wire.real_array(v, "r"),
    "public_key": lambda v: wire.public_key(v, "x25519", "k"),
}


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(_readers)), _junk)
def test_field_readers_return_or_raise_protocol_error(reader, value):
    with contextlib.suppress(ProtocolError):
        _readers[reader](value)


@pytest.mark.parametrize("party", [np.array([0, 0, 0], dtype=np.uint64), None, 3, ["p1"]])
def test_a_paillier_message_of_a_party_field_not_a_name_is_a_protocol_error(party):
    """Found by the fuzzing above: an array in ``party`` made the check raise numpy's ValueError instead."""
    from securevfl.privacy.aggregation import paillier_wire

    with pytest.raises(ProtocolError, match="from p1"):
        paillier_wire._party({paillier_wire.K_PARTY: party}, "p1", "commitment")

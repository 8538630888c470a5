"""Hardening of ``--option secagg=paillier``: a deviating active party or relay, and fuzzed wire messages.

Each attack test runs the real parties through the runtime with one party deviating, and checks
both that the run stops with a ProtocolError at the honest party and that the attacker obtained
nothing. ``test_the_attack_works_without_the_key_holder_checks`` is the negative control: with the
key holder's checks switched off the same attack recovers the victim's vector exactly, which is
what the pre-hardening protocol (the active party submitted "the masked sum") allowed.
"""

from __future__ import annotations

import re
import secrets

import numpy as np
import pytest
from aggregation_harness import PASSIVES, RecordingTransport, random_inputs, run_rounds
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from paillier_setup import FRAC_BITS, TEST_KEY_BITS

from securevfl.errors import ConfigError, CryptoError, PartyFailure, ProtocolError
from securevfl.federation import codec
from securevfl.federation.transport import Envelope
from securevfl.privacy.aggregation import paillier as pa
from securevfl.privacy.aggregation import paillier_wire as pw
from securevfl.privacy.paillier import FastBackend, PaillierPublicKey, generate_keypair

HOLDER, VICTIM, OTHER = "p1", "p2", "p3"




def _ints(data: bytes, width: int) -> list[int]:
    return [int.from_bytes(data[i : i + width], "big") for i in range(0, len(data), width)]


# ---------------------------------------------------------------- a deviating active party (finding 4)


def _deviating(scheme, attack: str, public_key: PaillierPublicKey):
    """The scheme with an active half whose ``forward`` tries to get VICTIM's ciphertexts decrypted alone."""

    class DeviatingActive(pa.PaillierActive):
        def forward(self, ctx, contributors, inputs):
            victim = inputs[VICTIM].ct
            parties, ct = [VICTIM, OTHER], {VICTIM: victim, OTHER: inputs[OTHER].ct}
            if attack == "single":  # the victim's ciphertexts as "the sum"
                parties, ct = [VICTIM], {VICTIM: victim}
            elif attack == "copy":  # the victim's ciphertexts under another party's name
                ct[OTHER] = victim
            elif attack == "forged":  # Enc(s) for a known s in another's place: D = m_v + r_v + s
                width = (public_key.nsquare.bit_length() + 7) // 8
                count = len(victim) // width
                forged = FastBackend(public_key, workers=1).encrypt_raw([secrets.randbelow(public_key.n)] * count)
                ct[OTHER] = pw.ct_to_bytes(forged, width)
            elif attack == "duplicate":  # one contribution counted twice
                parties = [VICTIM, VICTIM, OTHER]
            elif attack == "holder absent":  # names the key holder after it dropped
                parties = [HOLDER, VICTIM]
                ct = {VICTIM: victim}
            ctx.send(self.holder, pw.TAG_FORWARD, {pw.K_ROUND: self.round, pw.K_PARTIES: parties, pw.K_CT: ct})

    scheme.active = lambda: DeviatingActive(scheme.config, scheme.options)
    return scheme


@pytest.mark.parametrize(
    "attack, blamed",
    [("single", "fewer|at least 2"), ("copy", OTHER), ("forged", OTHER), ("duplicate", "twice"),
     ("holder absent", "did not contribute")],
)
def test_key_holder_refuses_a_deviating_active_party(scheme, keypair, attack, blamed):
    transport = RecordingTransport(["A", *PASSIVES])
    drops = {0: {HOLDER}} if attack == "holder absent" else {}
    with pytest.raises(PartyFailure) as info:
        run_rounds(_deviating(scheme, attack, keypair[0]), random_inputs(1, (4, 64), seed=3), drops,
                   transport=transport)
    assert info.value.party == HOLDER
    assert isinstance(info.value.cause, ProtocolError)
    assert re.search(blamed, str(info.value.cause))
    assert not any(e.tag == pw.TAG_DECRYPTED for e in transport.envelopes)  # nothing was decrypted


def _recovered_victim(transport, keypair, length):
    """What the deviating active party reads from the wire: D - r_victim, unpacked as one term."""
    n_bytes = (keypair[0].n.bit_length() + 7) // 8
    reply = next(codec.decode(e.payload) for e in transport.envelopes if e.tag == pw.TAG_DECRYPTED)
    victim = next(codec.decode(e.payload) for e in transport.envelopes if e.tag == pw.TAG_INPUT and e.src == VICTIM)
    n = keypair[0].n
    packed = [(d - r) % n for d, r in zip(_ints(reply["plain"], n_bytes), _ints(victim["masks"], n_bytes),
                                          strict=True)]
    layout = pw.packing_layout(keypair[0].bits, len(PASSIVES), FRAC_BITS, 2.0**20)
    return np.asarray(layout.unpack(packed, terms=1, length=length), dtype=np.float64).ravel()


def test_the_attack_works_without_the_key_holder_checks(scheme, keypair, monkeypatch):
    """Negative control: switch H's checks off and the "single" attack recovers the victim's vector."""
    width = (keypair[0].nsquare.bit_length() + 7) // 8
    monkeypatch.setattr(pa, "check_contributors", lambda *a, **k: None)
    monkeypatch.setattr(pa, "verify_forward",
                        lambda forward, *a, **k: [_ints(forward.ct[p], width) for p in forward.parties])
    transport = RecordingTransport(["A", *PASSIVES])
    inputs = random_inputs(1, (4, 64), seed=3)
    try:
        run_rounds(_deviating(scheme, "single", keypair[0]), inputs, transport=transport)
    except PartyFailure:
        pass  # the deviating active's own unmasking fails; it already has what it wanted
    recovered = _recovered_victim(transport, keypair, 256)
    np.testing.assert_array_equal(recovered, np.rint(inputs[0][VICTIM].ravel() * 2.0**FRAC_BITS))


# ---------------------------------------------------------------- relayed key checks (finding 7)


class _KeySwap(RecordingTransport):
    """A relay (or key holder) that replaces public-key messages on chosen links."""

    def __init__(self, parties, links, key_bytes):
        super().__init__(parties)
        self.links, self.key_bytes = links, key_bytes

    def send(self, envelope):
        if envelope.tag == "agg.pa.public_key" and (envelope.src, envelope.dst) in self.links:
            envelope = Envelope(envelope.src, envelope.dst, envelope.tag, envelope.depth, codec.encode(self.key_bytes))
        super().send(envelope)


def _forged_public_bytes(n: int, hs: int) -> bytes:
    def field(value: int) -> bytes:
        raw = value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")
        return len(raw).to_bytes(4, "big") + raw

    return b"SVPaillierPub\x01" + field(n) + field(hs)


@pytest.fixture(scope="module")
def small_keypair():
    return generate_keypair(768, insecure_allow_small_key=True)


@pytest.fixture(scope="module")
def other_keypair():
    return generate_keypair(TEST_KEY_BITS, insecure_allow_small_key=True)


@pytest.mark.parametrize("case", ["smaller key relayed", "other key relayed", "degenerate h_s from the holder"])
def test_a_wrong_public_key_is_refused_naming_its_sender(scheme, keypair, small_keypair, other_keypair, case):
    relayed = {("A", VICTIM), ("A", OTHER)}
    if case == "smaller key relayed":
        links, key, who, blamed = relayed, small_keypair[0].to_bytes(), {VICTIM, OTHER}, "by A.*768-bit.*1024"
    elif case == "other key relayed":  # right size: only the holder's direct digest exposes it
        links, key, who, blamed = relayed, other_keypair[0].to_bytes(), {VICTIM, OTHER}, "relayed by A is not"
    else:
        links, key, who, blamed = {(HOLDER, "A")}, _forged_public_bytes(keypair[0].n, 1), {"A"}, f"by {HOLDER}"
    transport = _KeySwap(["A", *PASSIVES], links, key)
    with pytest.raises(PartyFailure) as info:
        run_rounds(scheme, random_inputs(1, (2, 8)), transport=transport)
    assert info.value.party in who
    assert isinstance(info.value.cause, ProtocolError)
    assert re.search(blamed, str(info.value.cause))
    assert not any(e.tag == "agg.pa.input" for e in transport.envelopes)  # nobody encrypted under it


# ---------------------------------------------------------------- fuzzing every wire parser

WIRE = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=6)
    | st.binary(max_size=80),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=12,
)


@pytest.fixture(scope="session")
def valid_messages(keypair):
    """One valid wire message per parser, plus the parser bound to its context."""
    pk, sk = keypair
    layout = pw.packing_layout(pk.bits, 3, FRAC_BITS, 2.0**20)
    n_bytes, ct_bytes = pw.widths(pk)
    session = pw.Session(HOLDER, PASSIVES, b"s" * pw.SESSION_ID_BYTES)
    backend = FastBackend(pk, sk, workers=1)
    ct = pw.ct_to_bytes(backend.encrypt_raw([5, 7]), ct_bytes)
    masks = pw.ct_to_bytes([1, 2], n_bytes)
    digest = b"d" * pw.DIGEST_BYTES
    shape = [2, layout.slots]
    return {
        "session": ({"holder": HOLDER, "parties": list(PASSIVES), "session_id": session.session_id},
                    lambda m: pw.parse_session(m, "A")),
        "public_key": (pk.to_bytes(), lambda m: pw.parse_public_key(m, HOLDER, TEST_KEY_BITS)),
        "key_digest": ({"digest": digest}, lambda m: pw.parse_key_digest(m, HOLDER)),
        "input": ({"party": VICTIM, "round": 0, "shape": shape, "ct": ct, "masks": masks},
                  lambda m: pw.parse_input(m, VICTIM, 0, pk, layout)),
        "commit": ({"party": VICTIM, "round": 0, "digest": digest}, lambda m: pw.parse_commit(m, VICTIM)),
        "forward": ({"round": 0, "parties": [HOLDER, VICTIM, OTHER], "ct": {VICTIM: ct, OTHER: ct}},
                    lambda m: pw.parse_forward(m, "A", 0, session)),
        "decrypted": ({"round": 0, "plain": pw.ct_to_bytes([3, 4], n_bytes)},
                      lambda m: pw.parse_decrypted(m, HOLDER, 0, 2, pk)),
    }


def test_the_valid_messages_parse(valid_messages):
    for message, parse in valid_messages.values():
        assert parse(message) is not None


def _mutate(message, data):
    """Replace, drop or add one field of a valid message, or corrupt its encoded bytes."""
    how = data.draw(st.sampled_from(["replace", "drop", "add", "bytes", "whole"]))
    if how == "whole" or not isinstance(message, dict):
        if isinstance(message, bytes) and how == "bytes":
            return _flip(message, data)
        return data.draw(WIRE)
    message = dict(message)
    key = data.draw(st.sampled_from(sorted(message)))
    if how == "replace":
        message[key] = data.draw(WIRE)
    elif how == "drop":
        del message[key]
    elif how == "add":
        message[data.draw(st.text(max_size=8))] = data.draw(WIRE)
    else:
        return codec.decode(_flip(codec.encode(message), data))  # may raise ProtocolError itself
    return message


def _flip(raw: bytes, data) -> bytes:
    raw = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        raw = raw[: data.draw(st.integers(0, len(raw)))]
    return bytes(raw)


def _check_parser(valid_messages, data):
    name = data.draw(st.sampled_from(sorted(valid_messages)))
    message, parse = valid_messages[name]
    try:
        parse(_mutate(message, data))
    except ProtocolError:
        pass  # the one documented failure of every pw.parse_* (InsufficientSurvivorsError included)


def _check_key_bytes(keypair, data):
    raw = keypair[0].to_bytes()
    candidate = _flip(raw, data) if data.draw(st.booleans()) else data.draw(st.binary(max_size=300))
    try:
        key = PaillierPublicKey.from_bytes(candidate)
    except CryptoError:
        return  # the documented failure of key deserialisation
    assert isinstance(key, PaillierPublicKey) and key.bits >= 512


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzzed_messages_raise_only_protocol_error(valid_messages, data):
    _check_parser(valid_messages, data)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_fuzzed_public_key_bytes_raise_only_crypto_error(keypair, data):
    _check_key_bytes(keypair, data)


@pytest.mark.slow
@settings(max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzzed_messages_long(valid_messages, keypair, data):
    _check_parser(valid_messages, data)
    _check_key_bytes(keypair, data)


def test_config_errors_stay_config_errors():
    with pytest.raises(ConfigError):
        pa.PaillierOptions(key_bits=100)

"""End-to-end sealing of relayed messages (securevfl/federation/e2e.py): keys bound to certificates, AES-GCM."""

from __future__ import annotations

import pytest

from securevfl.federation import e2e

FP = "job-fingerprint"


@pytest.fixture(scope="module")
def pki(dev_pki):
    return dev_pki(["shop", "clinic"]), dev_pki(["shop"])  # a federation's CA, and another


def bundle(directory, party, session, fingerprint=FP, claimed=None):
    return e2e.make_bundle((directory / f"{party}.pem").read_bytes(), (directory / f"{party}.key").read_bytes(),
                           fingerprint, claimed or party, session)


def pair(pki):
    good, _ = pki
    s1, s2 = e2e.new_session_key(), e2e.new_session_key()
    ca = (good / "ca.pem").read_bytes()
    p2 = e2e.verify_bundle(bundle(good, "clinic", s2), ca, FP, "clinic")
    p1 = e2e.verify_bundle(bundle(good, "shop", s1), ca, FP, "shop")
    return e2e.PairChannel.establish(s1, p2, FP, "shop", "clinic"), e2e.PairChannel.establish(s2, p1, FP, "clinic",
                                                                                                "shop")


def test_messages_round_trip_and_the_ciphertext_hides_the_plaintext(pki):
    shop, clinic = pair(pki)
    for i in range(3):
        sealed = shop.seal("emb", b"secret rows %d" % i)
        assert b"secret" not in sealed and len(sealed) == len(b"secret rows 0") + e2e.OVERHEAD
        assert clinic.open("emb", sealed) == b"secret rows %d" % i
    assert shop.open("x", clinic.seal("x", b"reply")) == b"reply"  # the other direction, its own key and counter
    assert shop.send_key != shop.recv_key


def test_a_changed_byte_tag_or_direction_fails_authentication(pki):
    shop, clinic = pair(pki)
    sealed = shop.seal("emb", b"payload")
    flipped = sealed[:10] + bytes([sealed[10] ^ 1]) + sealed[11:]
    with pytest.raises(e2e.E2EError, match="from shop to clinic.*failed authentication"):
        clinic.open("emb", flipped)
    shop, clinic = pair(pki)
    with pytest.raises(e2e.E2EError, match="failed authentication"):
        clinic.open("other-tag", shop.seal("emb", b"payload"))
    with pytest.raises(e2e.E2EError, match="failed authentication"):  # a message reflected back to its sender
        shop2, _ = pair(pki)
        sealed = shop2.seal("emb", b"payload")
        shop2.open("emb", sealed)


def test_a_replayed_or_reordered_message_is_refused(pki):
    shop, clinic = pair(pki)
    first, second = shop.seal("m", b"1"), shop.seal("m", b"2")
    assert clinic.open("m", first) == b"1"
    with pytest.raises(e2e.E2EError, match="replayed: counter 0, expected 1"):
        clinic.open("m", first)
    shop, clinic = pair(pki)
    first, second = shop.seal("m", b"1"), shop.seal("m", b"2")
    with pytest.raises(e2e.E2EError, match="out of order.*counter 1, expected 0"):
        clinic.open("m", second)


def test_a_wrong_key_cannot_open(pki):
    shop, _ = pair(pki)
    _, clinic = pair(pki)  # another session: other keys
    with pytest.raises(e2e.E2EError, match="failed authentication"):
        clinic.open("m", shop.seal("m", b"x"))


def test_a_bundle_from_another_ca_for_another_name_or_job_is_refused(pki):
    good, other = pki
    ca = (good / "ca.pem").read_bytes()
    session = e2e.new_session_key()
    with pytest.raises(e2e.E2EError, match="session key of shop is refused.*not signed by the federation CA"):
        e2e.verify_bundle(bundle(other, "shop", session), ca, FP, "shop")
    with pytest.raises(e2e.E2EError, match="session key of shop is refused.*names 'clinic'"):  # clinic posing as shop
        e2e.verify_bundle(bundle(good, "clinic", session, claimed="shop"), ca, FP, "shop")
    with pytest.raises(e2e.E2EError, match="signature does not verify"):
        e2e.verify_bundle(bundle(good, "shop", session, fingerprint="another job"), ca, FP, "shop")
    with pytest.raises(e2e.E2EError, match="malformed bundle"):
        e2e.verify_bundle(b"\x93garbage", ca, FP, "shop")
    forged = bytearray(bundle(good, "shop", session))
    forged[-40] ^= 1  # inside the signature
    with pytest.raises(e2e.E2EError, match="signature does not verify|malformed"):
        e2e.verify_bundle(bytes(forged), ca, FP, "shop")


def test_keys_bind_the_fingerprint_and_both_names():
    a, b = e2e.new_session_key(), e2e.new_session_key()
    k1 = e2e.derive_keys(a, b.public_key(), FP, "shop", "clinic")
    assert k1 == e2e.derive_keys(b, a.public_key(), FP, "clinic", "shop")[::-1]
    assert k1 != e2e.derive_keys(a, b.public_key(), "other job", "shop", "clinic")
    assert k1 != e2e.derive_keys(a, b.public_key(), FP, "shop", "bank")
    assert all(len(k) == 32 for k in k1)

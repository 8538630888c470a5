"""End-to-end protection of messages that the star topology's hub relays between two other parties.

Pure functions and one small state object; no I/O. In a star federation only the active party (the
hub) listens: a message from passive party P to passive party Q travels P -> hub -> Q. The hub must
learn only its size and timing, and must not be able to change, replay, reorder or drop it unseen.

Keys. At link set-up every non-hub party makes a fresh X25519 key pair for the session
(:func:`new_session_key`) and signs, with its certificate's private key (ECDSA with SHA-256, or
RSA-PSS), a statement binding the job fingerprint, its party name and its X25519 public key
(:func:`make_bundle`). The bundle (certificate PEM, public key, signature) reaches the other parties
through the hub; :func:`verify_bundle` checks the certificate against the federation CA, that it
names the claimed party, and the signature. :func:`derive_keys` then gives one AES-256 key per
direction: HKDF-SHA256 over the X25519 shared secret, its ``info`` binding the fingerprint and both
names in the direction's order.

Messages. :class:`PairChannel` seals each message with AES-256-GCM under the direction's key; the
nonce is a per-direction counter (never reused: one key per session and direction), sent in clear
with the ciphertext, and the additional data binds (source, destination, tag, counter). The receiver
accepts only the exact next counter: a replayed, reordered or dropped message is refused, as is any
changed byte (:class:`E2EError`, naming the sender).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import msgpack
from cryptography import x509
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from securevfl.errors import ProtocolError
from securevfl.federation.certificates import CertificateError, verify_party_certificate

_LABEL = b"securevfl/e2e/v1"
#: Bytes a sealed message adds to its plaintext: the 8-byte counter and the 16-byte GCM tag.
OVERHEAD = 8 + 16
_MAX_BUNDLE = 64 * 1024  # a certificate chain and a signature: anything larger is garbage


class E2EError(ProtocolError):
    """A relayed message or key bundle that fails authentication; names the party it claims to come from."""


def _fields(*parts: bytes) -> bytes:
    """Length-prefixed concatenation: no two different field lists give the same bytes."""
    return b"".join(struct.pack(">I", len(p)) + p for p in parts)


def new_session_key() -> X25519PrivateKey:
    """A fresh X25519 key pair for one session (from the operating system's generator)."""
    return X25519PrivateKey.generate()


def _public_bytes(key: X25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def statement(fingerprint: str, party: str, public: bytes) -> bytes:
    """What a party signs: the job, its name and its session public key."""
    return _fields(_LABEL + b"/bundle", fingerprint.encode("utf-8"), party.encode("utf-8"), public)


def _sign(private_key_pem: bytes, data: bytes) -> bytes:
    key = serialization.load_pem_private_key(private_key_pem, password=None)
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return key.sign(data, ec.ECDSA(hashes.SHA256()))
    if isinstance(key, rsa.RSAPrivateKey):
        return key.sign(data, padding.PSS(padding.MGF1(hashes.SHA256()), padding.PSS.MAX_LENGTH), hashes.SHA256())
    raise ProtocolError(f"cannot sign with a {type(key).__name__} certificate key (ECDSA or RSA only)")


def _verify(cert: x509.Certificate, signature: bytes, data: bytes) -> None:
    public = cert.public_key()
    if isinstance(public, ec.EllipticCurvePublicKey):
        public.verify(signature, data, ec.ECDSA(hashes.SHA256()))
    elif isinstance(public, rsa.RSAPublicKey):
        public.verify(signature, data, padding.PSS(padding.MGF1(hashes.SHA256()), padding.PSS.AUTO), hashes.SHA256())
    else:
        raise InvalidSignature("unsupported certificate key type")


def make_bundle(cert_chain_pem: bytes, private_key_pem: bytes, fingerprint: str, party: str,
                session: X25519PrivateKey) -> bytes:
    """The signed bundle announcing ``party``'s session key: certificate chain, public key, signature."""
    public = _public_bytes(session)
    signature = _sign(private_key_pem, statement(fingerprint, party, public))
    packed: bytes = msgpack.packb([1, cert_chain_pem, public, signature], use_bin_type=True)
    return packed


def verify_bundle(bundle: bytes, root_ca_pem: bytes, fingerprint: str, party: str) -> X25519PublicKey:
    """Check a bundle claimed to come from ``party``; its session public key, or :class:`E2EError`.

    The certificate must chain to the federation CA and name ``party`` (as TLS checks it); the
    signature must cover this job's fingerprint, ``party`` and the public key.
    """
    who = f"the session key of {party}"
    if len(bundle) > _MAX_BUNDLE:
        raise E2EError(f"{who}: bundle of {len(bundle):,} bytes, above {_MAX_BUNDLE:,}")
    try:
        body = msgpack.unpackb(bundle, raw=False, max_bin_len=_MAX_BUNDLE, max_array_len=8, max_map_len=0,
                               max_str_len=0)
    except Exception as exc:
        raise E2EError(f"{who}: malformed bundle ({type(exc).__name__})") from exc
    if (not isinstance(body, list) or len(body) != 4 or body[0] != 1
            or not all(isinstance(b, bytes) for b in body[1:]) or len(body[2]) != 32):
        raise E2EError(f"{who}: malformed bundle")
    _, cert_pem, public, signature = body
    try:
        verify_party_certificate(cert_pem, root_ca_pem, party)
    except CertificateError as exc:
        raise E2EError(f"{who} is refused: {exc}") from None
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        _verify(cert, signature, statement(fingerprint, party, public))
    except (InvalidSignature, ValueError):
        raise E2EError(f"{who} is refused: its signature does not verify with {party}'s certificate "
                       "(or it was made for another job)") from None
    return X25519PublicKey.from_public_bytes(public)


def derive_keys(session: X25519PrivateKey, peer_public: X25519PublicKey, fingerprint: str, me: str,
                peer: str) -> tuple[bytes, bytes]:
    """``(key me -> peer, key peer -> me)``: 32 bytes each, HKDF-SHA256 over the X25519 shared secret."""
    shared = session.exchange(peer_public)

    def key(src: str, dst: str) -> bytes:
        info = _fields(_LABEL + b"/key", fingerprint.encode("utf-8"), src.encode("utf-8"), dst.encode("utf-8"))
        return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(shared)

    return key(me, peer), key(peer, me)


def _aad(src: str, dst: str, tag: str, counter: int) -> bytes:
    return _fields(_LABEL + b"/msg", src.encode("utf-8"), dst.encode("utf-8"), tag.encode("utf-8"),
                   counter.to_bytes(8, "big"))


def _nonce(counter: int) -> bytes:
    return counter.to_bytes(12, "big")


def seal(key: bytes, counter: int, src: str, dst: str, tag: str, plaintext: bytes) -> bytes:
    """``counter`` (8 bytes) followed by the AES-256-GCM ciphertext and tag of ``plaintext``."""
    return counter.to_bytes(8, "big") + AESGCM(key).encrypt(_nonce(counter), plaintext, _aad(src, dst, tag, counter))


def open_sealed(key: bytes, expected: int, src: str, dst: str, tag: str, sealed: bytes) -> bytes:
    """The plaintext of a message sealed with counter ``expected``; :class:`E2EError` otherwise."""
    if len(sealed) < OVERHEAD:
        raise E2EError(f"a message relayed from {src} to {dst} is too short to be sealed ({len(sealed)} bytes)")
    counter = int.from_bytes(sealed[:8], "big")
    if counter != expected:
        what = "replayed" if counter < expected else "out of order (one before it was dropped)"
        raise E2EError(f"a message relayed from {src} to {dst} is {what}: counter {counter}, expected {expected}")
    try:
        return AESGCM(key).decrypt(_nonce(counter), sealed[8:], _aad(src, dst, tag, counter))
    except InvalidTag:
        raise E2EError(f"a message relayed from {src} to {dst} ({tag!r}) failed authentication: it was changed "
                       "on the way or not sealed by " + src) from None


@dataclass
class PairChannel:
    """Both directions between two parties: keys and counters."""

    me: str
    peer: str
    send_key: bytes
    recv_key: bytes
    sent: int = 0
    received: int = 0

    @classmethod
    def establish(cls, session: X25519PrivateKey, peer_public: X25519PublicKey, fingerprint: str, me: str,
                  peer: str) -> PairChannel:
        send_key, recv_key = derive_keys(session, peer_public, fingerprint, me, peer)
        return cls(me, peer, send_key, recv_key)

    def seal(self, tag: str, plaintext: bytes) -> bytes:
        sealed = seal(self.send_key, self.sent, self.me, self.peer, tag, plaintext)
        self.sent += 1
        return sealed

    def open(self, tag: str, sealed: bytes) -> bytes:
        plaintext = open_sealed(self.recv_key, self.received, self.peer, self.me, tag, sealed)
        self.received += 1
        return plaintext


__all__ = ["OVERHEAD", "E2EError", "PairChannel", "derive_keys", "make_bundle", "new_session_key", "open_sealed",
           "seal", "statement", "verify_bundle"]

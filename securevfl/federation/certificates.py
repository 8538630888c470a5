"""Checking a party's X.509 certificate against the federation CA: the check every TLS link relies on.

Pure functions over PEM bytes (the ``cryptography`` package); no files, no I/O. A party's
certificate must chain to the federation CA, be within its validity period, name the party as TLS
host-name checking does (SAN DNS names, else the subject CN) and with the same case, carry a key the
transport's TLS stack (gRPC) accepts, and allow TLS server and client authentication.
:func:`verify_party_certificate` is used before a party starts (:mod:`securevfl.deploy.links`),
when the CA signs a request (:mod:`securevfl.deploy.certs`) and when a relayed session key is checked
(:mod:`securevfl.federation.e2e`). Making CAs, keys and certificates is :mod:`securevfl.deploy.certs`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificatePublicKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from securevfl.errors import ConfigError

_MAX_CHAIN = 8
#: The curves gRPC's TLS stack negotiates (a P-521 certificate fails the handshake, measured).
_EC_CURVES = ("secp256r1", "secp384r1")
_MIN_RSA_BITS = 2048


class CertificateError(ConfigError):
    """A party's certificate cannot be used: wrong CA, wrong party, outside its validity period."""


def load_certificates(pem: bytes, where: str, error: type[ConfigError] = ConfigError) -> list[x509.Certificate]:
    """The certificates in PEM bytes, in order; ``error`` (naming ``where``) if none or malformed."""
    if not isinstance(pem, bytes) or b"-----BEGIN CERTIFICATE-----" not in pem:
        raise error(f"{where} does not hold a PEM certificate (no '-----BEGIN CERTIFICATE-----' line)")
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError as exc:
        raise error(f"{where} holds a malformed PEM certificate: {exc}") from None


def dns_names(cert: x509.Certificate) -> list[str]:
    """The DNS names of the certificate's SubjectAlternativeName (none without that extension)."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return san.get_values_for_type(x509.DNSName)


def common_names(cert: x509.Certificate) -> list[str]:
    """The subject's common names (CN)."""
    return [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]


_USABLE_KEYS = f"P-256 or P-384 (EC), or RSA of at least {_MIN_RSA_BITS} bits"


def check_key_strength(public: CertificatePublicKeyTypes, where: str, error: type[ConfigError] = ConfigError) -> None:
    """Only the keys the transport's TLS stack (gRPC) accepts: EC P-256 / P-384 or RSA >= 2048 bits; else ``error``."""
    if isinstance(public, ec.EllipticCurvePublicKey):
        if public.curve.name not in _EC_CURVES:
            raise error(f"{where}: its key is on curve {public.curve.name}, which the TLS stack of the transport "
                        f"does not accept; use {_USABLE_KEYS}")
    elif isinstance(public, rsa.RSAPublicKey):
        if public.key_size < _MIN_RSA_BITS:
            raise error(f"{where}: its RSA key has {public.key_size} bits; use {_USABLE_KEYS}")
    else:
        raise error(f"{where}: its key type ({type(public).__name__}) is not accepted; use {_USABLE_KEYS}")


def _names_party(cert: x509.Certificate, party: str) -> tuple[bool, list[str]]:
    """Whether TLS host-name checking would accept ``cert`` for ``party``, and the names it holds.

    As in RFC 6125 and the TLS stacks (OpenSSL, gRPC): the DNS SANs if there are any, else the CN;
    compared case-insensitively.
    """
    names = dns_names(cert) or common_names(cert)
    return party.casefold() in {n.casefold() for n in names}, names


def check_period(cert: x509.Certificate, who: str, now: dt.datetime) -> None:
    """Raise :class:`CertificateError` (naming ``who``) unless ``now`` is within the certificate's validity period."""
    if now < cert.not_valid_before_utc:
        raise CertificateError(f"{who} is not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M:%S} UTC "
                               "(check this machine's clock)")
    if now > cert.not_valid_after_utc:
        raise CertificateError(f"{who} expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M:%S} UTC")


def _issued_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)  # issuer name and signature: RSA (PKCS#1 v1.5, PSS), ECDSA, EdDSA
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def is_ca(cert: x509.Certificate) -> bool:
    """Whether the certificate may sign others: BasicConstraints CA, or a v1 root (which has no extensions)."""
    try:
        return cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        return cert.version is x509.Version.v1  # a v1 root has no extensions and is trusted as a CA


def _path_to_root(leaf: x509.Certificate, intermediates: Sequence[x509.Certificate],
                  roots: Sequence[x509.Certificate]) -> list[x509.Certificate] | None:
    """The chain from ``leaf`` through ``intermediates`` to a certificate of ``roots``, or ``None``."""
    path = [leaf]
    for _ in range(_MAX_CHAIN):
        root = next((r for r in roots if _issued_by(path[-1], r)), None)
        if root is not None:
            return [*path, root]
        step = next((c for c in intermediates if c not in path and is_ca(c) and _issued_by(path[-1], c)), None)
        if step is None:
            return None
        path.append(step)
    return None


def verify_party_certificate(cert_pem: bytes, ca_pem: bytes, expected_party: str, *,
                             now: dt.datetime | None = None) -> None:
    """Check that ``cert_pem`` is a valid certificate for ``expected_party`` under the federation CA.

    Checks the chain up to a certificate in ``ca_pem`` (signatures and issuer names; intermediates
    may follow the leaf in ``cert_pem``), the validity period of each certificate, that the leaf
    names ``expected_party`` as TLS would check it and, as the transport compares party names, with
    the same case, that its key is one the transport's TLS stack accepts (EC P-256 / P-384, RSA of
    at least 2048 bits: a P-521 key fails the handshake), and that its key usages allow TLS server
    and client authentication (each party is both). Raises :class:`CertificateError` saying who and why.
    Revocation is not checked.
    """
    who = f"certificate for {expected_party!r}"
    now = now or dt.datetime.now(dt.timezone.utc)
    chain = load_certificates(cert_pem, who, CertificateError)
    roots = load_certificates(ca_pem, "the federation CA file", CertificateError)
    leaf = chain[0]

    path = _path_to_root(leaf, chain[1:], roots)
    if path is None:
        raise CertificateError(f"{who} is not signed by the federation CA")
    if not is_ca(path[-1]):
        raise CertificateError(f"{who}: its issuer in the federation CA file is not a CA certificate")

    ok, names = _names_party(leaf, expected_party)
    if not ok:
        shown = ", ".join(repr(n) for n in names) or "no party"
        raise CertificateError(f"certificate names {shown}, expected {expected_party!r}")
    if expected_party not in names:  # TLS matched it ignoring case; the transport's identity checks do not
        shown = ", ".join(repr(n) for n in names)
        raise CertificateError(f"{who} names {shown}, which differs in case: party names are compared exactly, "
                               f"so the certificate must name exactly {expected_party!r}")
    check_key_strength(leaf.public_key(), who, CertificateError)
    try:
        eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        eku = None
    if eku is not None:
        missing = [label for oid, label in ((ExtendedKeyUsageOID.SERVER_AUTH, "serverAuth"),
                                            (ExtendedKeyUsageOID.CLIENT_AUTH, "clientAuth")) if oid not in eku]
        if missing:
            raise CertificateError(f"{who} lacks extended key usage {' and '.join(missing)} "
                                   "(every party is both TLS server and TLS client)")
    try:
        usage = leaf.extensions.get_extension_for_class(x509.KeyUsage).value
    except x509.ExtensionNotFound:
        usage = None
    if usage is not None and not usage.digital_signature:
        raise CertificateError(f"{who} lacks key usage digitalSignature, which TLS needs")

    check_period(leaf, who, now)
    for cert in path[1:-1]:
        check_period(cert, f"intermediate CA certificate ({cert.subject.rfc4514_string()}) of {who}", now)
    check_period(path[-1], f"the federation CA certificate ({path[-1].subject.rfc4514_string()})", now)


__all__ = [
    "CertificateError",
    "check_key_strength",
    "check_period",
    "common_names",
    "dns_names",
    "is_ca",
    "load_certificates",
    "verify_party_certificate",
]

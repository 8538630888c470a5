"""TLS material for a federation: a development PKI, loading PEM files, and checking a party's certificate.

Every link between parties is mutually authenticated TLS: a party's certificate names the party (a
SubjectAlternativeName DNS name equal to the party name) and is signed by the federation CA; a peer
dials with the party name as the expected host name (gRPC's ``ssl_target_name_override``), so a
certificate for another party or from another CA fails the handshake.

:func:`make_dev_pki` writes a throw-away CA and one certificate per party, for trials and tests.
Production uses the organisations' own PKI: any CA whose certificates name each party in a SAN DNS
name (or, without DNS SANs, the subject CN), usable for both TLS server and client authentication.
:func:`verify_party_certificate` checks such a certificate before a party starts, so a wrong file
fails with a sentence rather than a handshake error on the other side of the network.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from psi import atomic
from securevfl.checks import read_local_file
from securevfl.deploy.federation import check_party_name
from securevfl.errors import ConfigError
from securevfl.federation.network import TlsCredentials

CA_NAME = "securevfl development CA"
_BACKDATE = dt.timedelta(minutes=5)  # tolerate clocks a little behind this one
#: The sub-folder (mode 0700) of the output folder that holds ``ca.key``, apart from the party files.
CA_KEY_FOLDER = "ca"
_MAX_CHAIN = 8


class CertificateError(ConfigError):
    """A party's certificate cannot be used: wrong CA, wrong party, outside its validity period."""


@dataclass(frozen=True)
class DevPKI:
    """The files :func:`make_dev_pki` wrote: the CA certificate and key, and each party's pair."""

    directory: Path
    ca_cert: Path
    ca_key: Path
    certs: dict[str, Path]
    keys: dict[str, Path]


# ------------------------------------------------------------------ the development PKI


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` atomically with permissions ``mode``, set at creation so a key is never readable by others."""
    atomic.write_bytes(path, data, mode)
    os.chmod(path, mode)  # whatever the umask: a key 0600, a certificate 0644


def _ca_certificate(key: ec.EllipticCurvePrivateKey, start: dt.datetime, end: dt.datetime) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME)])
    public = key.public_key()
    return (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )


def _party_certificate(party: str, key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate,
                       ca_key: ec.EllipticCurvePrivateKey, start: dt.datetime, end: dt.datetime) -> x509.Certificate:
    public = key.public_key()
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, party)]))
        .issuer_name(ca_cert.subject).public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        # The party name is the only identity: no localhost or IP names, or any party could pose as another.
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(party)]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                     crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )


def make_dev_pki(parties: Sequence[str], out_dir: Path, *, days: int = 365, overwrite: bool = False,
                 now: dt.datetime | None = None) -> DevPKI:
    """Write a development CA (``ca.pem``, ``ca/ca.key``) and ``<party>.pem`` / ``<party>.key`` per party.

    The CA key lives in its own folder ``ca/`` (mode 0700), apart from the party files that are
    copied to each organisation. Keys are ECDSA P-256, written with mode 0600 (every file
    atomically); certificates are valid from ``now`` minus five minutes for ``days`` days and
    name the party in the subject CN and a SAN DNS name. Keep ``ca.key`` private: whoever holds
    it can issue certificates for any party. Refuses to replace existing files unless
    ``overwrite``. ``now`` (default: the current UTC time) is for tests.
    """
    if isinstance(parties, str):
        raise ConfigError("parties must be a list of names, not one string")
    names = [check_party_name(p) for p in parties]
    if not names:
        raise ConfigError("make_dev_pki needs at least one party")
    folded: dict[str, str] = {}
    for name in names:
        if name.casefold() == "ca":
            raise ConfigError("a party cannot be named 'ca' (its files would replace the CA's)")
        if name.casefold() in folded:
            raise ConfigError(f"party {name!r} is given twice (names are compared case-insensitively)")
        folded[name.casefold()] = name
    if isinstance(days, bool) or not isinstance(days, int) or days < 1:
        raise ConfigError(f"days must be a positive integer, got {days!r}")

    out_dir = Path(out_dir)
    ca_dir = out_dir / CA_KEY_FOLDER
    targets = [out_dir / "ca.pem", ca_dir / "ca.key"]
    for name in names:
        targets += [out_dir / f"{name}.pem", out_dir / f"{name}.key"]
    if not overwrite:
        for path in targets:
            if path.exists():
                raise ConfigError(f"{path} already exists; refusing to overwrite it (pass overwrite=True)")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        ca_dir.mkdir(mode=0o700, exist_ok=True)
        os.chmod(ca_dir, 0o700)  # only the owner may list or enter the CA key's folder
    except OSError as exc:
        raise ConfigError(f"cannot create directory {ca_dir}: {exc.strerror or exc}") from None

    now = now or dt.datetime.now(dt.timezone.utc)
    start, end = now - _BACKDATE, now + dt.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _ca_certificate(ca_key, start, end)
    files: dict[Path, tuple[bytes, int]] = {
        out_dir / "ca.pem": (ca_cert.public_bytes(serialization.Encoding.PEM), 0o644),
        ca_dir / "ca.key": (_pem_key(ca_key), 0o600),
    }
    for name in names:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _party_certificate(name, key, ca_cert, ca_key, start, end)
        files[out_dir / f"{name}.pem"] = (cert.public_bytes(serialization.Encoding.PEM), 0o644)
        files[out_dir / f"{name}.key"] = (_pem_key(key), 0o600)
    for path, (data, mode) in files.items():
        try:
            _write(path, data, mode)
        except OSError as exc:
            raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
    return DevPKI(directory=out_dir, ca_cert=out_dir / "ca.pem", ca_key=ca_dir / "ca.key",
                  certs={n: out_dir / f"{n}.pem" for n in names}, keys={n: out_dir / f"{n}.key" for n in names})


# ------------------------------------------------------------------ loading and checking


def _certificates(pem: bytes, where: str, error: type[ConfigError] = ConfigError) -> list[x509.Certificate]:
    if not isinstance(pem, bytes) or b"-----BEGIN CERTIFICATE-----" not in pem:
        raise error(f"{where} does not hold a PEM certificate (no '-----BEGIN CERTIFICATE-----' line)")
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError as exc:
        raise error(f"{where} holds a malformed PEM certificate: {exc}") from None


def load_tls_material(cert_path: Path, key_path: Path, ca_path: Path) -> TlsCredentials:
    """Read a party's certificate chain, private key and the federation CA, checking each file's kind.

    Also checks that the key belongs to the certificate. Raises :class:`ConfigError` naming the file.
    """
    cert_pem = read_local_file(cert_path, "certificate")
    key_pem = read_local_file(key_path, "private key")
    ca_pem = read_local_file(ca_path, "CA")
    leaf = _certificates(cert_pem, f"certificate file {str(cert_path)!r}")[0]
    _certificates(ca_pem, f"CA file {str(ca_path)!r}")
    if b"PRIVATE KEY-----" not in key_pem:
        raise ConfigError(f"private key file {str(key_path)!r} does not hold a PEM private key")
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except TypeError:
        raise ConfigError(f"private key file {str(key_path)!r} is encrypted; "
                          "the TLS stack needs an unencrypted key (protect it with file permissions)") from None
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise ConfigError(f"private key file {str(key_path)!r} holds no usable private key: {exc}") from None
    raw = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*raw) != leaf.public_key().public_bytes(*raw):
        raise ConfigError(f"private key file {str(key_path)!r} does not belong to the certificate "
                          f"in {str(cert_path)!r}")
    return TlsCredentials(cert_chain=cert_pem, private_key=key_pem, root_ca=ca_pem)


def _dns_names(cert: x509.Certificate) -> list[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return san.get_values_for_type(x509.DNSName)


def _common_names(cert: x509.Certificate) -> list[str]:
    return [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]


def party_identity(cert_pem: bytes) -> str:
    """The party a certificate names: its SAN DNS name if it has exactly one, else its subject CN."""
    cert = _certificates(cert_pem, "the certificate")[0]
    dns = _dns_names(cert)
    if len(dns) == 1:
        return dns[0]
    cns = _common_names(cert)
    if len(cns) == 1:
        return cns[0]
    raise ConfigError(f"the certificate (subject {cert.subject.rfc4514_string()!r}) names no single party: "
                      f"it has {len(dns)} SAN DNS names and {len(cns)} common names")


def _names_party(cert: x509.Certificate, party: str) -> tuple[bool, list[str]]:
    """Whether TLS host-name checking would accept ``cert`` for ``party``, and the names it holds.

    As in RFC 6125 and the TLS stacks (OpenSSL, gRPC): the DNS SANs if there are any, else the CN;
    compared case-insensitively.
    """
    names = _dns_names(cert) or _common_names(cert)
    return party.casefold() in {n.casefold() for n in names}, names


def _check_period(cert: x509.Certificate, who: str, now: dt.datetime) -> None:
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


def _is_ca(cert: x509.Certificate) -> bool:
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
        step = next((c for c in intermediates if c not in path and _is_ca(c) and _issued_by(path[-1], c)), None)
        if step is None:
            return None
        path.append(step)
    return None


def verify_party_certificate(cert_pem: bytes, ca_pem: bytes, expected_party: str, *,
                             now: dt.datetime | None = None) -> None:
    """Check that ``cert_pem`` is a valid certificate for ``expected_party`` under the federation CA.

    Checks the chain up to a certificate in ``ca_pem`` (signatures and issuer names; intermediates
    may follow the leaf in ``cert_pem``), the validity period of each certificate, that the leaf
    names ``expected_party`` as TLS would check it, and that its key usages allow TLS server and
    client authentication (each party is both). Raises :class:`CertificateError` saying who and why.
    Revocation is not checked.
    """
    who = f"certificate for {expected_party!r}"
    now = now or dt.datetime.now(dt.timezone.utc)
    chain = _certificates(cert_pem, who, CertificateError)
    roots = _certificates(ca_pem, "the federation CA file", CertificateError)
    leaf = chain[0]

    path = _path_to_root(leaf, chain[1:], roots)
    if path is None:
        raise CertificateError(f"{who} is not signed by the federation CA")
    if not _is_ca(path[-1]):
        raise CertificateError(f"{who}: its issuer in the federation CA file is not a CA certificate")

    ok, names = _names_party(leaf, expected_party)
    if not ok:
        shown = ", ".join(repr(n) for n in names) or "no party"
        raise CertificateError(f"certificate names {shown}, expected {expected_party!r}")
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

    _check_period(leaf, who, now)
    for cert in path[1:-1]:
        _check_period(cert, f"intermediate CA certificate ({cert.subject.rfc4514_string()}) of {who}", now)
    _check_period(path[-1], f"the federation CA certificate ({path[-1].subject.rfc4514_string()})", now)


__all__ = [
    "CertificateError",
    "DevPKI",
    "TlsCredentials",
    "load_tls_material",
    "make_dev_pki",
    "party_identity",
    "verify_party_certificate",
]

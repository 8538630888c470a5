"""TLS material for a federation: a CA, keys and certificate requests, loading PEM files, checking certificates.

Every link between parties is mutually authenticated TLS: a party's certificate names the party (a
SubjectAlternativeName DNS name equal to the party name) and is signed by the federation CA; a peer
dials with the party name as the expected host name (gRPC's ``ssl_target_name_override``), so a
certificate for another party or from another CA fails the handshake.

Two ways to make the certificates (docs/deploy.md):

* the CSR flow, where each key never leaves its owner: :func:`make_ca` once at the CA,
  :func:`make_key_request` on each party's machine (its key and a CSR), :func:`sign_request` at the
  CA for each CSR received (checked: signature, party name, SAN, key strength, extensions);
* :func:`make_dev_pki`, one call writing a throw-away CA and every party's key and certificate in
  one folder, for trials and tests.

Production may also use the organisations' own PKI: any CA whose certificates name each party in a
SAN DNS name (or, without DNS SANs, the subject CN), usable for both TLS server and client authentication.
:func:`verify_party_certificate` checks such a certificate before a party starts, so a wrong file
fails with a sentence rather than a handshake error on the other side of the network; that check
lives in :mod:`securevfl.federation.certificates` (the transport's layer relies on it too) and is
re-exported here with :class:`CertificateError`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificatePublicKeyTypes, PrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from psi import atomic
from securevfl.checks import read_local_file
from securevfl.deploy.federation_file import check_party_name
from securevfl.errors import ConfigError
from securevfl.federation.certificates import (
    CertificateError,
    check_key_strength,
    check_period,
    common_names,
    dns_names,
    is_ca,
    load_certificates,
    verify_party_certificate,
)
from securevfl.federation.network import TlsCredentials

CA_NAME = "securevfl development CA"
_BACKDATE = dt.timedelta(minutes=5)  # tolerate clocks a little behind this one
#: The sub-folder (mode 0700) of the output folder that holds ``ca.key``, apart from the party files.
CA_KEY_FOLDER = "ca"
#: Validity of a CA made by :func:`make_ca` (the certificates it signs never outlive it).
CA_DAYS = 3650
#: A certificate request's file suffix (``<party>.csr``).
CSR_SUFFIX = ".csr"

PublicKey = CertificatePublicKeyTypes
PrivateKey = PrivateKeyTypes
IssuerKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


@dataclass(frozen=True)
class DevPKI:
    """The files :func:`make_dev_pki` wrote: the CA certificate and key, and each party's pair."""

    directory: Path
    ca_cert: Path
    ca_key: Path
    certs: dict[str, Path]
    keys: dict[str, Path]


@dataclass(frozen=True)
class CaFiles:
    """The files :func:`make_ca` wrote: the CA certificate (for every party) and its key (for nobody)."""

    directory: Path
    cert: Path
    key: Path


@dataclass(frozen=True)
class KeyRequest:
    """What :func:`make_key_request` wrote on a party's machine, and its public key's SHA-256 fingerprint."""

    party: str
    key: Path
    csr: Path
    fingerprint: str


@dataclass(frozen=True)
class SignedCertificate:
    """What :func:`sign_request` issued: the party, its certificate file, its end of validity, its key's fingerprint."""

    party: str
    cert: Path
    not_after: dt.datetime
    fingerprint: str


# ------------------------------------------------------------------ shared pieces


def _pem_key(key: PrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` atomically with permissions ``mode``, set at creation so a key is never readable by others."""
    atomic.write_bytes(path, data, mode)
    os.chmod(path, mode)  # whatever the umask: a key 0600, a certificate 0644


def _write_all(files: dict[Path, tuple[bytes, int]]) -> None:
    for path, (data, mode) in files.items():
        try:
            _write(path, data, mode)
        except OSError as exc:
            raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None


def _refuse_existing(paths: Sequence[Path], overwrite: bool) -> None:
    if overwrite:
        return
    for path in paths:
        if path.exists():
            raise ConfigError(f"{path} already exists; refusing to overwrite it (pass --overwrite / overwrite=True)")


def _make_folder(path: Path, *, private: bool = False, enforce: bool = False) -> None:
    """Create ``path`` (and its parents); a ``private`` one (holding a key) gets mode 0700.

    An existing folder keeps its mode (``--out .`` must not lock the working directory) unless
    ``enforce`` (the CA key's own ``ca/`` folder).
    """
    try:
        created = not path.exists()
        path.mkdir(parents=True, exist_ok=True)
        if private and (created or enforce):
            os.chmod(path, 0o700)  # only the owner may list or enter a key's folder
    except OSError as exc:
        raise ConfigError(f"cannot create directory {path}: {exc.strerror or exc}") from None


def _check_days(days: object) -> int:
    if isinstance(days, bool) or not isinstance(days, int) or days < 1:
        raise ConfigError(f"days must be a positive integer, got {days!r}")
    return days


def _check_party(name: object) -> str:
    """A valid party name that is not ``ca`` (whose files would replace the CA's)."""
    party = check_party_name(name)
    if party.casefold() == "ca":
        raise ConfigError("a party cannot be named 'ca' (its files would replace the CA's)")
    return party


def public_key_fingerprint(public: PublicKey) -> str:
    """SHA-256 of the DER SubjectPublicKeyInfo, as colon-separated hex: read it out to compare a CSR by phone."""
    der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return ":".join(f"{b:02X}" for b in hashlib.sha256(der).digest())


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


def _party_certificate(party: str, public: PublicKey, ca_cert: x509.Certificate, ca_key: IssuerKey,
                       start: dt.datetime, end: dt.datetime) -> x509.Certificate:
    """The one certificate shape every party gets, from :func:`make_dev_pki` or :func:`sign_request`."""
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


def _ca_paths(directory: Path) -> tuple[Path, Path]:
    """``ca.pem`` and ``ca/ca.key`` of a CA folder."""
    return directory / "ca.pem", directory / CA_KEY_FOLDER / "ca.key"


def _new_ca(directory: Path, days: int, now: dt.datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey,
                                                                   dict[Path, tuple[bytes, int]]]:
    """A fresh CA valid from ``now`` (less five minutes) for ``days`` days, and the files that hold it.

    Creates ``directory`` and its private ``ca/`` folder (mode 0700); writes nothing else.
    """
    cert_path, key_path = _ca_paths(directory)
    _make_folder(directory)
    _make_folder(key_path.parent, private=True, enforce=True)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _ca_certificate(key, now - _BACKDATE, now + dt.timedelta(days=days))
    return cert, key, {cert_path: (_pem_cert(cert), 0o644), key_path: (_pem_key(key), 0o600)}


# ------------------------------------------------------------------ the one-shot development PKI (trials)


def make_dev_pki(parties: Sequence[str], out_dir: Path, *, days: int = 365, overwrite: bool = False,
                 now: dt.datetime | None = None) -> DevPKI:
    """Write a development CA (``ca.pem``, ``ca/ca.key``) and ``<party>.pem`` / ``<party>.key`` per party.

    For trials: every party's key is made here, in one place. A real deployment makes each key on
    its owner's machine (:func:`make_key_request`) and only signs requests (:func:`sign_request`).
    The CA key lives in its own folder ``ca/`` (mode 0700), apart from the party files that are
    copied to each organisation. Keys are ECDSA P-256, written with mode 0600 (every file
    atomically); certificates are valid from ``now`` minus five minutes for ``days`` days and
    name the party in the subject CN and a SAN DNS name. Keep ``ca.key`` private: whoever holds
    it can issue certificates for any party. Refuses to replace existing files unless
    ``overwrite``. ``now`` (default: the current UTC time) is for tests.
    """
    if isinstance(parties, str):
        raise ConfigError("parties must be a list of names, not one string")
    names = [_check_party(p) for p in parties]
    if not names:
        raise ConfigError("make_dev_pki needs at least one party")
    folded: dict[str, str] = {}
    for name in names:
        if name.casefold() in folded:
            raise ConfigError(f"party {name!r} is given twice (names are compared case-insensitively)")
        folded[name.casefold()] = name
    _check_days(days)

    out_dir = Path(out_dir)
    ca_cert_path, ca_key_path = _ca_paths(out_dir)
    targets = [ca_cert_path, ca_key_path]
    for name in names:
        targets += [out_dir / f"{name}.pem", out_dir / f"{name}.key"]
    _refuse_existing(targets, overwrite)

    now = now or dt.datetime.now(dt.timezone.utc)
    start, end = now - _BACKDATE, now + dt.timedelta(days=days)
    ca_cert, ca_key, files = _new_ca(out_dir, days, now)
    for name in names:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _party_certificate(name, key.public_key(), ca_cert, ca_key, start, end)
        files[out_dir / f"{name}.pem"] = (_pem_cert(cert), 0o644)
        files[out_dir / f"{name}.key"] = (_pem_key(key), 0o600)
    _write_all(files)
    return DevPKI(directory=out_dir, ca_cert=ca_cert_path, ca_key=ca_key_path,
                  certs={n: out_dir / f"{n}.pem" for n in names}, keys={n: out_dir / f"{n}.key" for n in names})


# ------------------------------------------------------------------ the CSR flow: keys never leave their owner


def make_ca(out_dir: Path, *, days: int = CA_DAYS, overwrite: bool = False,
            now: dt.datetime | None = None) -> CaFiles:
    """Write only a CA: ``<out_dir>/ca.pem`` (give it to every party) and ``<out_dir>/ca/ca.key``.

    The key is ECDSA P-256, mode 0600, in the folder ``ca/`` of mode 0700; the certificate is valid
    from ``now`` minus five minutes for ``days`` days (certificates it signs never outlive it).
    Refuses to replace existing files unless ``overwrite``.
    """
    _check_days(days)
    out_dir = Path(out_dir)
    cert_path, key_path = _ca_paths(out_dir)
    _refuse_existing([cert_path, key_path], overwrite)
    _, _, files = _new_ca(out_dir, days, now or dt.datetime.now(dt.timezone.utc))
    _write_all(files)
    return CaFiles(directory=out_dir, cert=cert_path, key=key_path)


def make_key_request(party: str, out_dir: Path, *, overwrite: bool = False) -> KeyRequest:
    """On ``party``'s own machine: write its private key ``<party>.key`` and the request ``<party>.csr``.

    The key is ECDSA P-256 (PKCS#8, mode 0600; a new ``out_dir`` gets mode 0700); the CSR, signed
    with it, names the party in the subject CN and one SAN DNS name, as the certificates
    :func:`sign_request` issues. Only the CSR is sent to the CA; the key never leaves ``out_dir``.
    Refuses to replace an existing key or CSR unless ``overwrite``.
    """
    name = _check_party(party)
    out_dir = Path(out_dir)
    key_path, csr_path = out_dir / f"{name}.key", out_dir / f"{name}{CSR_SUFFIX}"
    _refuse_existing([key_path, csr_path], overwrite)
    _make_folder(out_dir, private=True)
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_all({key_path: (_pem_key(key), 0o600),
                csr_path: (csr.public_bytes(serialization.Encoding.PEM), 0o644)})
    return KeyRequest(party=name, key=key_path, csr=csr_path, fingerprint=public_key_fingerprint(key.public_key()))


def _load_csr(path: Path) -> x509.CertificateSigningRequest:
    where = f"CSR file {str(path)!r}"
    pem = read_local_file(path, "CSR")
    if b"-----BEGIN CERTIFICATE REQUEST-----" not in pem:
        raise ConfigError(f"{where} does not hold a PEM certificate request "
                          "(no '-----BEGIN CERTIFICATE REQUEST-----' line)")
    try:
        csr = x509.load_pem_x509_csr(pem)
    except ValueError as exc:
        raise ConfigError(f"{where} holds a malformed certificate request: {exc}") from None
    try:
        valid = csr.is_signature_valid
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise ConfigError(f"{where}: its signature cannot be checked ({exc})") from None
    if not valid:
        raise ConfigError(f"{where}: the signature does not verify (the request was altered or damaged); "
                          "ask the party for a new one")
    return csr


def _requested_party(csr: x509.CertificateSigningRequest, where: str) -> str:
    cns = [a.value for a in csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if len(cns) != 1:
        raise ConfigError(f"{where} must name the party in exactly one subject common name, it has {len(cns)}")
    try:
        return _check_party(cns[0])
    except ConfigError as exc:
        raise ConfigError(f"{where}: its common name is not a party name: {exc}") from None


def _check_extensions(csr: x509.CertificateSigningRequest, party: str, where: str) -> None:
    """A SAN may name the party (one DNS name, nothing else); a CA is never requested; no other critical one."""
    try:
        extensions = list(csr.extensions)
    except ValueError as exc:  # duplicate or malformed extensions
        raise ConfigError(f"{where} holds malformed extensions: {exc}") from None
    for ext in extensions:
        value = ext.value
        if isinstance(value, x509.SubjectAlternativeName):
            if list(value) != [x509.DNSName(party)]:
                shown = ", ".join(str(getattr(n, "value", n)) for n in value) or "nothing"
                raise ConfigError(f"{where}: its subject alternative name must be exactly the DNS name {party!r} "
                                  f"(the party name), it names {shown}")
        elif isinstance(value, x509.BasicConstraints) and value.ca:
            raise ConfigError(f"{where} asks for a CA certificate; a party certificate cannot sign others")
        elif ext.critical:
            name = getattr(ext.oid, "_name", "unknown")
            raise ConfigError(f"{where} holds the critical extension {ext.oid.dotted_string} ({name}), "
                              "which this CA does not issue; make the request without it")


def check_request(csr_path: Path) -> tuple[str, x509.CertificateSigningRequest]:
    """Read and check a party's CSR; return the party it names and the request.

    Refuses (:class:`ConfigError`, one sentence) a file that is not a PEM CSR, a signature that does
    not verify, a common name that is not a valid party name, a SAN other than that one DNS name, a
    request for a CA certificate, any other critical extension, and a key other than EC P-256 / P-384
    or RSA of at least 2048 bits (what the transport's TLS stack accepts).
    """
    csr_path = Path(csr_path)
    where = f"CSR file {str(csr_path)!r}"
    csr = _load_csr(csr_path)
    party = _requested_party(csr, where)
    _check_extensions(csr, party, where)
    check_key_strength(csr.public_key(), where)
    return party, csr


def load_ca(ca_dir: Path) -> tuple[x509.Certificate, IssuerKey]:
    """The CA certificate and key of a CA folder (``ca.pem``, ``ca/ca.key``), checked to belong together."""
    ca_dir = Path(ca_dir)
    cert_path, key_path = _ca_paths(ca_dir)
    if not ca_dir.is_dir():
        raise ConfigError(f"CA folder {str(ca_dir)!r} does not exist")
    missing = [str(p.relative_to(ca_dir)) for p in (cert_path, key_path) if not p.exists()]
    if missing:
        raise ConfigError(f"{str(ca_dir)!r} holds no CA: {' and '.join(missing)} missing (make one with "
                          f"`securevfl certs ca --out {ca_dir}`, or give the folder holding ca.pem and ca/ca.key)")
    cert = load_certificates(read_local_file(cert_path, "CA"), f"CA file {str(cert_path)!r}")[0]
    key_pem = read_local_file(key_path, "CA private key", private=True)
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except TypeError:
        raise ConfigError(f"CA key {str(key_path)!r} is encrypted; this command signs with an unencrypted key "
                          "(use your own CA's tools for an encrypted one)") from None
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise ConfigError(f"CA key file {str(key_path)!r} holds no usable private key: {exc}") from None
    if not isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)):
        raise ConfigError(f"CA key {str(key_path)!r} is a {type(key).__name__}; this command signs with EC or RSA")
    raw = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*raw) != cert.public_key().public_bytes(*raw):
        raise ConfigError(f"CA key {str(key_path)!r} does not belong to the CA certificate {str(cert_path)!r}")
    if not is_ca(cert):
        raise ConfigError(f"{str(cert_path)!r} is not a CA certificate")
    return cert, key


def sign_request(csr_path: Path, ca_dir: Path, *, out_dir: Path | None = None, days: int = 365,
                 expected_party: str | None = None, overwrite: bool = False,
                 now: dt.datetime | None = None) -> SignedCertificate:
    """At the CA: check a party's CSR (:func:`check_request`) and issue ``<party>.pem`` into ``out_dir``.

    ``out_dir`` defaults to the CSR's folder; the file is named after the party the CSR names
    (``expected_party``, if given, must be exactly that party). The certificate has exactly the shape
    :func:`make_dev_pki` gives (subject CN and SAN DNS name = the party, serverAuth + clientAuth,
    digitalSignature, not a CA), is valid from ``now`` minus five minutes for ``days`` days but
    never beyond the CA certificate, and passes :func:`verify_party_certificate`. Only the request's
    public key and party name are used: other subject fields and requested extensions are not copied.
    """
    _check_days(days)
    party, csr = check_request(csr_path)
    if expected_party is not None and party != _check_party(expected_party):
        same = party.casefold() == expected_party.casefold()
        case = " (the transport compares names with their case)" if same else ""
        raise ConfigError(f"CSR file {str(csr_path)!r} is for party {party!r}, not {expected_party!r}{case}")
    ca_cert, ca_key = load_ca(ca_dir)
    now = now or dt.datetime.now(dt.timezone.utc)
    check_period(ca_cert, f"the CA certificate in {str(ca_dir)!r}", now)
    out_dir = Path(out_dir) if out_dir is not None else Path(csr_path).parent
    cert_path = out_dir / f"{party}.pem"
    _refuse_existing([cert_path], overwrite)
    end = min(now + dt.timedelta(days=days), ca_cert.not_valid_after_utc)
    cert = _party_certificate(party, csr.public_key(), ca_cert, ca_key, now - _BACKDATE, end)
    verify_party_certificate(_pem_cert(cert), _pem_cert(ca_cert), party, now=now)  # the check a party runs
    _make_folder(out_dir)
    _write_all({cert_path: (_pem_cert(cert), 0o644)})
    return SignedCertificate(party=party, cert=cert_path, not_after=end,
                             fingerprint=public_key_fingerprint(csr.public_key()))


# ------------------------------------------------------------------ loading


def load_tls_material(cert_path: Path, key_path: Path, ca_path: Path) -> TlsCredentials:
    """Read a party's certificate chain, private key and the federation CA, checking each file's kind.

    Also checks that the key belongs to the certificate. Raises :class:`ConfigError` naming the file.
    """
    cert_pem = read_local_file(cert_path, "certificate")
    key_pem = read_local_file(key_path, "private key", private=True)
    ca_pem = read_local_file(ca_path, "CA")
    leaf = load_certificates(cert_pem, f"certificate file {str(cert_path)!r}")[0]
    load_certificates(ca_pem, f"CA file {str(ca_path)!r}")
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


def party_identity(cert_pem: bytes) -> str:
    """The party a certificate names: its SAN DNS name if it has exactly one, else its subject CN."""
    cert = load_certificates(cert_pem, "the certificate")[0]
    dns = dns_names(cert)
    if len(dns) == 1:
        return dns[0]
    cns = common_names(cert)
    if len(cns) == 1:
        return cns[0]
    raise ConfigError(f"the certificate (subject {cert.subject.rfc4514_string()!r}) names no single party: "
                      f"it has {len(dns)} SAN DNS names and {len(cns)} common names")


__all__ = [
    "CA_DAYS",
    "CSR_SUFFIX",
    "CaFiles",
    "CertificateError",
    "DevPKI",
    "KeyRequest",
    "SignedCertificate",
    "TlsCredentials",
    "check_request",
    "load_ca",
    "load_tls_material",
    "make_ca",
    "make_dev_pki",
    "make_key_request",
    "public_key_fingerprint",
    "sign_request",
    "party_identity",
    "verify_party_certificate",
]

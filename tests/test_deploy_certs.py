"""The development PKI, TLS material loading and the pre-flight certificate check, with real TLS handshakes."""

from __future__ import annotations

import datetime as dt
import os
import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from securevfl.deploy import (
    CertificateError,
    DevPKI,
    load_tls_material,
    make_dev_pki,
    party_identity,
    verify_party_certificate,
)
from securevfl.errors import ConfigError

PARTIES = ("bank", "shop", "clinic")
UTC = dt.timezone.utc


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> DevPKI:
    return make_dev_pki(PARTIES, tmp_path_factory.mktemp("pki") / "certs")


@pytest.fixture(scope="module")
def other_pki(tmp_path_factory: pytest.TempPathFactory) -> DevPKI:
    """A second, unrelated CA issuing certificates for the same party names."""
    return make_dev_pki(PARTIES, tmp_path_factory.mktemp("other") / "certs")


def _read(path: Path) -> bytes:
    return path.read_bytes()


# ------------------------------------------------------------------ helpers building certificates by hand


def _name(cn: str | None) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)] if cn else [])


def _issue(subject_cn: str | None, issuer_cert: x509.Certificate | None, issuer_key, *, key=None, ca: bool = False,
           dns: tuple[str, ...] = (), eku=(ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH)):
    key = key or ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(UTC)
    builder = (x509.CertificateBuilder()
               .subject_name(_name(subject_cn))
               .issuer_name(issuer_cert.subject if issuer_cert else _name(subject_cn))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=1)).not_valid_after(now + dt.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if dns:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(d) for d in dns]), critical=False)
    if eku is not None and not ca:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(eku)), critical=False)
    cert = builder.sign(issuer_key or key, hashes.SHA256())
    return cert, key


def _pem(*certs: x509.Certificate) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


# ------------------------------------------------------------------ the development PKI


def test_dev_pki_round_trip(pki: DevPKI) -> None:
    assert set(pki.certs) == set(PARTIES) == set(pki.keys)
    assert pki.ca_cert.name == "ca.pem" and pki.ca_key.name == "ca.key"
    ca = x509.load_pem_x509_certificate(_read(pki.ca_cert))
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    usage = ca.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign and usage.crl_sign
    assert isinstance(ca.public_key(), ec.EllipticCurvePublicKey) and ca.public_key().curve.name == "secp256r1"
    for party in PARTIES:
        material = load_tls_material(pki.certs[party], pki.keys[party], pki.ca_cert)
        assert material.root_ca == _read(pki.ca_cert)
        assert party_identity(material.cert_chain) == party
        verify_party_certificate(material.cert_chain, material.root_ca, party)
        cert = x509.load_pem_x509_certificate(material.cert_chain)
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == party
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert san.get_values_for_type(x509.DNSName) == [party]  # the party name only: no localhost, no IP
        assert san.get_values_for_type(x509.IPAddress) == []
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert set(eku) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
        assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
        lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
        assert lifetime == dt.timedelta(days=365, minutes=5)
        assert cert.not_valid_before_utc < dt.datetime.now(UTC)
        cert.verify_directly_issued_by(ca)


def test_repr_hides_the_private_key(pki: DevPKI) -> None:
    material = load_tls_material(pki.certs["bank"], pki.keys["bank"], pki.ca_cert)
    assert "PRIVATE" not in repr(material) and "hidden" in repr(material)


def test_file_modes(pki: DevPKI) -> None:
    def mode(p: Path) -> int:
        return stat.S_IMODE(os.stat(p).st_mode)

    assert mode(pki.ca_key) == 0o600
    assert all(mode(p) == 0o600 for p in pki.keys.values())
    assert mode(pki.ca_cert) == 0o644
    assert all(mode(p) == 0o644 for p in pki.certs.values())


def test_refuses_to_overwrite_unless_asked(tmp_path: Path) -> None:
    first = make_dev_pki(["bank", "shop"], tmp_path, days=2)
    before = {p: _read(p) for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(ConfigError, match=r"ca\.pem already exists"):
        make_dev_pki(["bank", "shop"], tmp_path)
    (tmp_path / "ca.pem").unlink()
    (tmp_path / "ca" / "ca.key").unlink()
    with pytest.raises(ConfigError, match=r"bank\.pem already exists"):
        make_dev_pki(["bank", "shop"], tmp_path)
    assert not (tmp_path / "ca.pem").exists()  # nothing written when refusing
    assert {p: _read(p) for p in tmp_path.rglob("*") if p.is_file()} == {
        p: b for p, b in before.items() if p.exists()}

    os.chmod(first.keys["bank"], 0o644)
    second = make_dev_pki(["bank", "shop"], tmp_path, overwrite=True)
    assert _read(second.certs["bank"]) != before[first.certs["bank"]]
    assert stat.S_IMODE(os.stat(second.keys["bank"]).st_mode) == 0o600  # an overwritten key is private again
    verify_party_certificate(_read(second.certs["shop"]), _read(second.ca_cert), "shop")


@pytest.mark.parametrize("bad", ["", "ba nk", "bank.example", "bänk", "x" * 65, "a/b", "bank\n"])
def test_bad_party_names_are_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ConfigError, match="ASCII letters, digits, '-' and '_'") as info:
        make_dev_pki(["shop", bad], tmp_path)
    assert repr(bad) in str(info.value)
    assert not list(tmp_path.iterdir())


def test_other_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'ca'"):
        make_dev_pki(["bank", "CA"], tmp_path)
    with pytest.raises(ConfigError, match="given twice"):
        make_dev_pki(["bank", "Bank"], tmp_path)
    with pytest.raises(ConfigError, match="given twice"):
        make_dev_pki(["bank", "bank"], tmp_path)
    with pytest.raises(ConfigError, match="days"):
        make_dev_pki(["bank"], tmp_path, days=0)
    with pytest.raises(ConfigError, match="at least one party"):
        make_dev_pki([], tmp_path)
    with pytest.raises(ConfigError, match="list of names"):
        make_dev_pki("bank", tmp_path)  # type: ignore[arg-type]
    assert make_dev_pki(["Bank-1", "shop_2"], tmp_path / "ok").certs.keys() == {"Bank-1", "shop_2"}


# ------------------------------------------------------------------ loading


def test_load_tls_material_names_the_bad_file(pki: DevPKI, other_pki: DevPKI, tmp_path: Path) -> None:
    bank_cert, bank_key, ca = pki.certs["bank"], pki.keys["bank"], pki.ca_cert
    missing = tmp_path / "nope.pem"
    with pytest.raises(ConfigError, match=r"certificate file .*nope\.pem.* does not exist"):
        load_tls_material(missing, bank_key, ca)
    with pytest.raises(ConfigError, match=r"private key file .*nope\.pem.* does not exist"):
        load_tls_material(bank_cert, missing, ca)
    with pytest.raises(ConfigError, match=r"CA file .*nope\.pem.* does not exist"):
        load_tls_material(bank_cert, bank_key, missing)
    with pytest.raises(ConfigError, match="is a directory"):
        load_tls_material(tmp_path, bank_key, ca)
    with pytest.raises(ConfigError, match=r"bank\.key.* does not hold a PEM certificate"):
        load_tls_material(bank_key, bank_key, ca)  # key where the certificate belongs
    with pytest.raises(ConfigError, match=r"bank\.pem.* does not hold a PEM private key"):
        load_tls_material(bank_cert, bank_cert, ca)
    garbage = tmp_path / "garbage.pem"
    garbage.write_bytes(b"-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")
    with pytest.raises(ConfigError, match=r"garbage\.pem.* malformed"):
        load_tls_material(bank_cert, bank_key, garbage)
    with pytest.raises(ConfigError, match=r"shop\.key.* does not belong to the certificate"):
        load_tls_material(bank_cert, pki.keys["shop"], ca)
    encrypted = tmp_path / "encrypted.key"
    key = serialization.load_pem_private_key(_read(bank_key), password=None)
    encrypted.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.BestAvailableEncryption(b"secret")))
    encrypted.chmod(0o600)  # a key others can read is refused before anything else
    with pytest.raises(ConfigError, match="encrypted"):
        load_tls_material(bank_cert, encrypted, ca)
    # Loading does not check the CA: that is verify_party_certificate's job.
    assert load_tls_material(bank_cert, bank_key, other_pki.ca_cert).root_ca == _read(other_pki.ca_cert)


# ------------------------------------------------------------------ identity and verification


def test_party_identity_prefers_a_single_san_then_cn() -> None:
    ca, ca_key = _issue("ca", None, None, ca=True)
    assert party_identity(_pem(_issue("cn-name", ca, ca_key, dns=("shop",))[0])) == "shop"
    assert party_identity(_pem(_issue("shop", ca, ca_key)[0])) == "shop"
    assert party_identity(_pem(_issue("shop", ca, ca_key, dns=("a", "b"))[0])) == "shop"
    with pytest.raises(ConfigError, match="names no single party"):
        party_identity(_pem(_issue(None, ca, ca_key, dns=("a", "b"))[0]))
    with pytest.raises(ConfigError, match="PEM certificate"):
        party_identity(b"hello")


def test_certificate_from_another_ca_is_refused(pki: DevPKI, other_pki: DevPKI) -> None:
    with pytest.raises(CertificateError, match=r"^certificate for 'shop' is not signed by the federation CA$"):
        verify_party_certificate(_read(other_pki.certs["shop"]), _read(pki.ca_cert), "shop")


def test_certificate_for_the_wrong_party_is_refused(pki: DevPKI) -> None:
    with pytest.raises(CertificateError, match=r"^certificate names 'clinic', expected 'shop'$"):
        verify_party_certificate(_read(pki.certs["clinic"]), _read(pki.ca_cert), "shop")
    assert issubclass(CertificateError, ConfigError) and issubclass(CertificateError, ValueError)


def test_expired_and_not_yet_valid_certificates_are_refused(tmp_path: Path) -> None:
    long_ago = dt.datetime(2020, 1, 1, tzinfo=UTC)
    old = make_dev_pki(["bank", "shop"], tmp_path / "old", days=30, now=long_ago)
    with pytest.raises(CertificateError, match=r"^certificate for 'bank' expired on 2020-01-31 00:00:00 UTC$"):
        verify_party_certificate(_read(old.certs["bank"]), _read(old.ca_cert), "bank")
    # Still fine at a time inside its validity period (the clock is a parameter).
    verify_party_certificate(_read(old.certs["bank"]), _read(old.ca_cert), "bank", now=long_ago)
    with pytest.raises(CertificateError, match="not valid before 2019-12-31 23:55:00 UTC"):
        verify_party_certificate(_read(old.certs["bank"]), _read(old.ca_cert), "bank",
                                 now=long_ago - dt.timedelta(hours=1))


def test_rsa_ca_and_intermediates_are_accepted() -> None:
    root_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    root, _ = _issue("org root", None, root_key, key=root_key, ca=True)
    leaf, _ = _issue("shop", root, root_key, dns=("shop",))
    verify_party_certificate(_pem(leaf), _pem(root), "shop")
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    other, _ = _issue("org root", None, other_key, key=other_key, ca=True)  # same name, other key
    with pytest.raises(CertificateError, match="not signed by the federation CA"):
        verify_party_certificate(_pem(leaf), _pem(other), "shop")
    verify_party_certificate(_pem(leaf), _pem(other, root), "shop")  # a CA bundle

    middle, middle_key = _issue("org issuing CA", root, root_key, ca=True)
    leaf2, _ = _issue("shop", middle, middle_key, dns=("shop", "shop.example.org"))
    verify_party_certificate(_pem(leaf2, middle), _pem(root), "shop")
    with pytest.raises(CertificateError, match="not signed"):
        verify_party_certificate(_pem(leaf2), _pem(root), "shop")  # intermediate missing
    # With DNS SANs the CN is not consulted, as in TLS host-name checks.
    leaf3, _ = _issue("shop", root, root_key, dns=("shop.example.org",))
    with pytest.raises(CertificateError, match="names 'shop.example.org', expected 'shop'"):
        verify_party_certificate(_pem(leaf3), _pem(root), "shop")


def test_key_usage_for_both_tls_roles_is_required() -> None:
    ca, ca_key = _issue("ca", None, None, ca=True)
    server_only, _ = _issue("shop", ca, ca_key, dns=("shop",), eku=(ExtendedKeyUsageOID.SERVER_AUTH,))
    with pytest.raises(CertificateError, match="lacks extended key usage clientAuth"):
        verify_party_certificate(_pem(server_only), _pem(ca), "shop")
    not_ca, not_ca_key = _issue("not a ca", None, None, ca=False, eku=None)
    leaf, _ = _issue("shop", not_ca, not_ca_key, dns=("shop",))
    with pytest.raises(CertificateError, match="not a CA certificate"):
        verify_party_certificate(_pem(leaf), _pem(not_ca), "shop")


# ------------------------------------------------------------------ real mutual-TLS handshakes

TIMEOUT = 5.0


def _handshake(server: tuple[Path, Path], client: tuple[Path, Path], server_ca: Path, client_ca: Path,
               server_hostname: str) -> dict[str, object]:
    """One TLS connection on 127.0.0.1; returns what each side saw (peer names, data, errors)."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(*server)
    server_ctx.load_verify_locations(server_ca)
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # check_hostname and CERT_REQUIRED by default
    client_ctx.load_cert_chain(*client)
    client_ctx.load_verify_locations(client_ca)
    seen: dict[str, object] = {}

    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(TIMEOUT)

        def serve() -> None:
            try:
                conn, _ = listener.accept()
                with conn:
                    conn.settimeout(TIMEOUT)
                    with server_ctx.wrap_socket(conn, server_side=True) as tls:
                        seen["client_names"] = [v for k, v in tls.getpeercert().get("subjectAltName", ()) if k == "DNS"]
                        tls.sendall(b"ok")
            except (OSError, ssl.SSLError) as exc:
                seen["server_error"] = exc

        thread = threading.Thread(target=serve, name="tls-test-server", daemon=True)
        thread.start()
        try:
            with socket.create_connection(listener.getsockname(), timeout=TIMEOUT) as raw:
                with client_ctx.wrap_socket(raw, server_hostname=server_hostname) as tls:
                    seen["server_names"] = [v for k, v in tls.getpeercert().get("subjectAltName", ()) if k == "DNS"]
                    seen["data"] = tls.recv(2)
        except (OSError, ssl.SSLError) as exc:
            seen["client_error"] = exc
        finally:
            thread.join(2 * TIMEOUT)
        assert not thread.is_alive()
    return seen


def _pair(pki: DevPKI, party: str) -> tuple[Path, Path]:
    return pki.certs[party], pki.keys[party]


def test_mutual_tls_with_the_party_name_as_host_name(pki: DevPKI) -> None:
    seen = _handshake(_pair(pki, "shop"), _pair(pki, "bank"), pki.ca_cert, pki.ca_cert, server_hostname="shop")
    assert seen.get("data") == b"ok", seen
    assert seen["server_names"] == ["shop"] and seen["client_names"] == ["bank"]


def test_client_expecting_another_party_fails_the_host_name_check(pki: DevPKI) -> None:
    seen = _handshake(_pair(pki, "shop"), _pair(pki, "bank"), pki.ca_cert, pki.ca_cert, server_hostname="clinic")
    error = seen.get("client_error")
    assert isinstance(error, ssl.SSLCertVerificationError), seen
    assert "hostname mismatch" in str(error) or "Hostname mismatch" in str(error)
    assert "data" not in seen


def test_client_certificate_from_another_ca_is_refused_by_the_server(pki: DevPKI, other_pki: DevPKI) -> None:
    seen = _handshake(_pair(pki, "shop"), _pair(other_pki, "bank"), pki.ca_cert, pki.ca_cert, server_hostname="shop")
    assert isinstance(seen.get("server_error"), ssl.SSLError), seen
    assert seen.get("data") in (None, b"")


def test_server_certificate_from_another_ca_is_refused_by_the_client(pki: DevPKI, other_pki: DevPKI) -> None:
    seen = _handshake(_pair(other_pki, "shop"), _pair(pki, "bank"), other_pki.ca_cert, pki.ca_cert,
                      server_hostname="shop")
    assert isinstance(seen.get("client_error"), ssl.SSLCertVerificationError), seen
    assert "data" not in seen

"""The CSR flow: each party makes its key and a CSR on its own machine, the CA only signs.

Three organisations and a CA, each in its own folder; only CSRs, certificates and ca.pem are copied
between them. Then a federation of the three runs over mutual TLS with those files, and no private
key exists outside its owner's folder. Every refusal of the command line is one line (exit 2).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
import shlex
import shutil
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID, ObjectIdentifier
from deployed_threads import SPLITNN_JOB, run_parties_in_threads
from net_helpers import free_port
from org_tables import organisation_frames, write_tables

from securevfl.cli import main
from securevfl.deploy import (
    check_request,
    load_federation,
    make_ca,
    make_dev_pki,
    make_key_request,
    parse_federation,
    sign_request,
    verify_party_certificate,
)
from securevfl.errors import ConfigError

PARTIES = ("bank", "shop", "clinic")
UTC = dt.timezone.utc


def cli(*args: object) -> int:
    return main([str(a) for a in args])


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``ca-org/`` (the CA) and one folder per party, filled as the docs say, through the command line."""
    root = tmp_path_factory.mktemp("orgs")
    ca_org = root / "ca-org"
    assert cli("certs", "ca", "--out", ca_org) == 0
    inbox = ca_org / "inbox"
    inbox.mkdir()
    for party in PARTIES:
        assert cli("certs", "request", "--party", party, "--out", root / party) == 0  # at the party
        shutil.copy(root / party / f"{party}.csr", inbox)  # only the CSR travels to the CA
        assert cli("certs", "sign", "--ca", ca_org, inbox / f"{party}.csr", "--party", party) == 0
        shutil.copy(inbox / f"{party}.pem", root / party)  # the certificate and ca.pem travel back
        shutil.copy(ca_org / "ca.pem", root / party)
    return root


def private_key_files(root: Path) -> list[Path]:
    """Every file under ``root`` holding a PEM private key, whatever its name."""
    return sorted(p for p in root.rglob("*") if p.is_file() and b"PRIVATE KEY-----" in p.read_bytes())


# ------------------------------------------------------------------ the flow, end to end


def test_no_private_key_is_written_outside_its_owners_folder(world: Path) -> None:
    expected = sorted([world / p / f"{p}.key" for p in PARTIES] + [world / "ca-org" / "ca" / "ca.key"])
    assert private_key_files(world) == expected
    for key in expected:
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
    for folder in (*(world / p for p in PARTIES), world / "ca-org" / "ca"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for party in PARTIES:
        assert sorted(f.name for f in (world / party).iterdir()) == sorted(
            ["ca.pem", f"{party}.csr", f"{party}.key", f"{party}.pem"])


def test_request_and_sign_give_a_working_federation(world: Path, tmp_path: Path) -> None:
    tables = write_tables(organisation_frames(5), tmp_path / "tables")
    parties = "\n".join(f'[parties.{p}]\naddress = "127.0.0.1:{free_port()}"\n'
                        f'cert = "{world / p / p}.pem"\nkey = "{world / p / p}.key"' for p in PARTIES)
    fed = tmp_path / "fed.toml"
    fed.write_text(f'[federation]\nactive = "bank"\n\n{parties}\n\n[tls]\nca = "{world / "bank" / "ca.pem"}"\n\n'
                   f"[network]\npeer_timeout_s = 20\nheartbeat_s = 0.5\n\n[job]\n{SPLITNN_JOB}\n")
    federation = load_federation(fed)
    assert not federation.insecure
    results = run_parties_in_threads(federation, {p: str(tables[p]) for p in PARTIES})
    metrics = results["bank"].report.metrics
    assert metrics["accuracy"] > 0.8, metrics
    assert results["shop"].alignment.size == results["bank"].alignment.size > 300
    assert private_key_files(world) == sorted([world / p / f"{p}.key" for p in PARTIES]
                                              + [world / "ca-org" / "ca" / "ca.key"])


def _shape(cert: x509.Certificate) -> list[tuple[str, bool, object]]:
    """The extensions (but the key identifiers, which differ per key) and the subject of a certificate."""
    skip = (x509.SubjectKeyIdentifier, x509.AuthorityKeyIdentifier)
    exts = sorted((e.oid.dotted_string, e.critical, repr(e.value)) for e in cert.extensions
                  if not isinstance(e.value, skip))
    return [("subject", False, cert.subject.rfc4514_string()), *exts]


def test_a_signed_certificate_has_the_shape_of_a_development_one(world: Path, tmp_path: Path) -> None:
    dev = make_dev_pki(["shop"], tmp_path / "dev")
    signed = x509.load_pem_x509_certificate((world / "shop" / "shop.pem").read_bytes())
    assert _shape(signed) == _shape(x509.load_pem_x509_certificate(dev.certs["shop"].read_bytes()))
    verify_party_certificate((world / "shop" / "shop.pem").read_bytes(), (world / "shop" / "ca.pem").read_bytes(),
                             "shop")


def test_the_one_shot_command_still_makes_a_whole_pki(tmp_path: Path) -> None:
    out = tmp_path / "certs"
    assert cli("certs", "--parties", "bank,shop", "--out", out, "--days", 30) == 0
    assert sorted(p.name for p in out.iterdir()) == ["bank.key", "bank.pem", "ca", "ca.pem", "shop.key", "shop.pem"]
    # and its CA folder signs a later party's request, as a `certs ca` folder does
    make_key_request("clinic", tmp_path / "clinic")
    signed = sign_request(tmp_path / "clinic" / "clinic.csr", out)
    verify_party_certificate(signed.cert.read_bytes(), (out / "ca.pem").read_bytes(), "clinic")


# ------------------------------------------------------------------ refusals on the command line


def _csr(cn: str | None, *, key=None, san: list[x509.GeneralName] | None = None, extra=(),
         attrs=()) -> x509.CertificateSigningRequest:
    key = key or ec.generate_private_key(ec.SECP256R1())
    names = [*attrs, *([x509.NameAttribute(NameOID.COMMON_NAME, cn)] if cn is not None else [])]
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(names))
    if san is not None:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    for ext, critical in extra:
        builder = builder.add_extension(ext, critical=critical)
    return builder.sign(key, None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256())


def _write_csr(path: Path, csr: x509.CertificateSigningRequest) -> Path:
    path.write_bytes(csr.public_bytes(serialization.Encoding.PEM))
    return path


@pytest.fixture(scope="module")
def ca_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_ca(tmp_path_factory.mktemp("ca") / "ca-org", days=30).directory


def test_a_csr_with_an_invalid_party_name_is_refused(tmp_path, ca_dir, capsys) -> None:
    csr = _write_csr(tmp_path / "x.csr", _csr("shop/../bank"))
    assert cli("certs", "sign", "--ca", ca_dir, csr) == 2
    assert "not a party name" in one_error_line(capsys)
    assert not list(tmp_path.glob("*.pem"))


def test_a_tampered_csr_is_refused(tmp_path, ca_dir, capsys) -> None:
    make_key_request("shop", tmp_path / "shop")
    pem = (tmp_path / "shop" / "shop.csr").read_bytes()
    der = x509.load_pem_x509_csr(pem).public_bytes(serialization.Encoding.DER)
    assert der.count(b"shop") == 2  # the CN and the SAN: rename the party after signing
    forged = x509.load_der_x509_csr(der.replace(b"shop", b"bank"))
    csr = _write_csr(tmp_path / "bank.csr", forged)
    assert cli("certs", "sign", "--ca", ca_dir, csr) == 2
    assert "signature does not verify" in one_error_line(capsys)
    assert not (tmp_path / "bank.pem").exists()


def test_signing_with_a_folder_that_holds_no_ca_is_refused(tmp_path, capsys) -> None:
    make_key_request("shop", tmp_path / "shop")
    assert cli("certs", "sign", "--ca", tmp_path / "shop", tmp_path / "shop" / "shop.csr") == 2
    assert "holds no CA" in one_error_line(capsys)
    assert cli("certs", "sign", "--ca", tmp_path / "nowhere", tmp_path / "shop" / "shop.csr") == 2
    assert "does not exist" in one_error_line(capsys)


def test_an_existing_key_is_not_overwritten_without_the_flag(tmp_path, capsys) -> None:
    assert cli("certs", "request", "--party", "shop", "--out", tmp_path) == 0
    capsys.readouterr()
    key = (tmp_path / "shop.key").read_bytes()
    assert cli("certs", "request", "--party", "shop", "--out", tmp_path) == 2
    assert "already exists" in one_error_line(capsys)
    assert (tmp_path / "shop.key").read_bytes() == key
    assert cli("certs", "request", "--party", "shop", "--out", tmp_path, "--overwrite") == 0
    assert (tmp_path / "shop.key").read_bytes() != key


def test_an_existing_ca_or_certificate_is_not_overwritten(tmp_path, ca_dir, capsys) -> None:
    assert cli("certs", "ca", "--out", ca_dir) == 2
    assert "already exists" in one_error_line(capsys)
    make_key_request("shop", tmp_path)
    assert cli("certs", "sign", "--ca", ca_dir, tmp_path / "shop.csr") == 0
    capsys.readouterr()
    assert cli("certs", "sign", "--ca", ca_dir, tmp_path / "shop.csr") == 2
    assert "shop.pem already exists" in one_error_line(capsys)


def test_misplaced_or_missing_options_are_one_line(tmp_path, capsys) -> None:
    assert cli("certs") == 2
    assert "--parties" in one_error_line(capsys)
    assert cli("certs", "--days", 4, "request", "--party", "shop", "--out", tmp_path / "shop") == 2
    assert "--days before `request`" in one_error_line(capsys)
    assert not (tmp_path / "shop").exists()
    assert cli("certs", "request", "--party", "ca", "--out", tmp_path / "x") == 2
    assert "cannot be named 'ca'" in one_error_line(capsys)


# ------------------------------------------------------------------ what sign checks (the API)


@pytest.mark.parametrize("make, words", [
    (lambda: _csr("shop", san=[x509.DNSName("bank")]), "must be exactly the DNS name 'shop'"),
    (lambda: _csr("shop", san=[x509.DNSName("shop"), x509.DNSName("localhost")]), "it names shop, localhost"),
    (lambda: _csr("shop", san=[x509.DNSName("shop"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
     "127.0.0.1"),
    (lambda: _csr(None), "exactly one subject common name"),
    (lambda: _csr("ca"), "cannot be named 'ca'"),
    (lambda: _csr("shop", key=rsa.generate_private_key(65537, 1024)), "1024 bits"),
    (lambda: _csr("shop", key=ec.generate_private_key(ec.SECP521R1())), "use P-256 or P-384"),
    (lambda: _csr("shop", key=ed25519.Ed25519PrivateKey.generate()), "key type (Ed25519PublicKey) is not accepted"),
    (lambda: _csr("shop", extra=[(x509.BasicConstraints(ca=True, path_length=None), False)]),
     "asks for a CA certificate"),
    (lambda: _csr("shop", extra=[(x509.UnrecognizedExtension(ObjectIdentifier("1.3.6.1.4.1.99999.1"), b"\x05\x00"),
                                  True)]), "critical extension 1.3.6.1.4.1.99999.1"),
    (lambda: _csr("shop", extra=[(x509.TLSFeature([x509.TLSFeatureType.status_request]), True)]),
     "critical extension"),
])
def test_sign_refuses_a_request_it_cannot_vouch_for(tmp_path, ca_dir, make, words) -> None:
    csr = _write_csr(tmp_path / "req.csr", make())
    with pytest.raises(ConfigError) as info:
        sign_request(csr, ca_dir)
    assert words in str(info.value), str(info.value)
    assert not list(tmp_path.glob("*.pem"))


def test_sign_refuses_a_file_that_is_no_csr_and_a_csr_for_another_party(tmp_path, ca_dir) -> None:
    (tmp_path / "cert.csr").write_bytes((ca_dir / "ca.pem").read_bytes())
    with pytest.raises(ConfigError, match="does not hold a PEM certificate request"):
        check_request(tmp_path / "cert.csr")
    make_key_request("shop", tmp_path)
    with pytest.raises(ConfigError, match="is for party 'shop', not 'bank'"):
        sign_request(tmp_path / "shop.csr", ca_dir, expected_party="bank")
    with pytest.raises(ConfigError, match="compares names with their case"):
        sign_request(tmp_path / "shop.csr", ca_dir, expected_party="Shop")


def test_a_csr_from_other_tools_is_signed_with_the_party_name_only(tmp_path, ca_dir) -> None:
    """As `openssl req -new -subj /O=Shop Ltd/CN=shop`: RSA 2048, more subject fields, no SAN, other extensions."""
    key = rsa.generate_private_key(65537, 2048)
    extra = [(x509.KeyUsage(digital_signature=True, content_commitment=True, key_encipherment=True,
                            data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
                            encipher_only=False, decipher_only=False), False)]
    csr = _write_csr(tmp_path / "shop.csr", _csr("shop", key=key, attrs=[
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Shop Ltd")], extra=extra))
    signed = sign_request(csr, ca_dir, out_dir=tmp_path / "out")
    cert = x509.load_pem_x509_certificate(signed.cert.read_bytes())
    assert signed.cert == tmp_path / "out" / "shop.pem"
    assert cert.subject.rfc4514_string() == "CN=shop"
    assert cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value == \
        x509.SubjectAlternativeName([x509.DNSName("shop")])
    assert not cert.extensions.get_extension_for_class(x509.KeyUsage).value.key_encipherment  # the CA's usage
    verify_party_certificate(signed.cert.read_bytes(), (ca_dir / "ca.pem").read_bytes(), "shop")


def test_a_certificate_never_outlives_its_ca(tmp_path, ca_dir) -> None:
    make_key_request("shop", tmp_path)
    signed = sign_request(tmp_path / "shop.csr", ca_dir, days=3650)
    ca = x509.load_pem_x509_certificate((ca_dir / "ca.pem").read_bytes())
    assert signed.not_after == ca.not_valid_after_utc
    later = dt.datetime.now(UTC) + dt.timedelta(days=40)
    with pytest.raises(ConfigError, match="expired"):
        sign_request(tmp_path / "shop.csr", ca_dir, now=later, overwrite=True)


def test_request_keeps_the_mode_of_an_existing_folder(tmp_path) -> None:
    tmp_path.chmod(0o755)
    made = make_key_request("shop", tmp_path)
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o755
    assert stat.S_IMODE(made.key.stat().st_mode) == 0o600
    assert stat.S_IMODE(made.csr.stat().st_mode) == 0o644
    csr = x509.load_pem_x509_csr(made.csr.read_bytes())
    assert csr.is_signature_valid and check_request(made.csr)[0] == "shop"


# ------------------------------------------------------------------ the docs' commands run as written


def _csr_section() -> str:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "deploy.md").read_text()
    start = doc.index("### Certificates: the CSR flow")
    return doc[start:doc.index("\n### ", start + 1)]


def test_the_documented_csr_flow_runs_as_written(tmp_path, monkeypatch) -> None:
    section = _csr_section()
    bash = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    commands = [shlex.split(line) for line in bash.splitlines() if line.startswith("securevfl ")]
    assert [c[1:3] for c in commands] == [["certs", "ca"], ["certs", "request"], ["certs", "sign"]]
    monkeypatch.chdir(tmp_path)
    for command in commands:
        if command[2] == "sign":  # shop sent its CSR to the CA's inbox
            (tmp_path / "inbox").mkdir()
            shutil.copy(tmp_path / "shop" / "shop.csr", tmp_path / "inbox")
        assert main(command[1:]) == 0, command
    verify_party_certificate((tmp_path / "inbox" / "shop.pem").read_bytes(), (tmp_path / "ca" / "ca.pem").read_bytes(),
                             "shop")
    toml = re.search(r"```toml\n(.*?)```", section, flags=re.S).group(1)
    text = (f'[federation]\nactive = "shop"\n\n{toml}\n[parties.bank]\naddress = "bank.example.org:7101"\n\n'
            '[job]\nmethod = "splitnn"\nid_column = "id"\nlabel_column = "y"\n')
    fed = parse_federation(text, tmp_path)
    assert fed.parties["shop"].cert == Path("/etc/securevfl/shop/shop.pem")
    assert fed.parties["shop"].key == Path("/etc/securevfl/shop/shop.key")
    assert fed.tls is not None and fed.tls.ca == Path("/etc/securevfl/shop/ca.pem")

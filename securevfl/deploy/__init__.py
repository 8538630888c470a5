"""Deployment across machines: the federation file and the TLS material each party runs with.

One process per organisation (``securevfl party``, assembled by :mod:`securevfl.pipeline`: its own
table, PSI with its peers, its role of the method); :func:`load_federation` reads the shared federation file,
:func:`job_fingerprint` is what the parties compare before any data flows, and
:mod:`~securevfl.deploy.certs` makes a CA, keys with certificate requests, signs them (or a
one-shot development PKI for trials) and checks a party's certificate before it
starts. Pure functions and frozen values; the gRPC transport lives in
:mod:`securevfl.federation.grpc_transport`. See docs/deploy.md.
"""

from securevfl.deploy.certs import (
    CaFiles,
    DevPKI,
    KeyRequest,
    SignedCertificate,
    TlsCredentials,
    check_request,
    load_tls_material,
    make_ca,
    make_dev_pki,
    make_key_request,
    party_identity,
    sign_request,
)
from securevfl.deploy.federation_file import (
    Federation,
    JobSpec,
    NetworkSettings,
    PartySpec,
    TlsSpec,
    check_party_name,
    job_differences,
    job_fingerprint,
    load_federation,
    parse_federation,
)
from securevfl.federation.certificates import CertificateError, verify_party_certificate

__all__ = [
    "CaFiles",
    "CertificateError",
    "DevPKI",
    "Federation",
    "JobSpec",
    "KeyRequest",
    "NetworkSettings",
    "PartySpec",
    "SignedCertificate",
    "TlsCredentials",
    "TlsSpec",
    "check_party_name",
    "check_request",
    "job_differences",
    "job_fingerprint",
    "load_federation",
    "load_tls_material",
    "make_ca",
    "make_dev_pki",
    "make_key_request",
    "parse_federation",
    "party_identity",
    "sign_request",
    "verify_party_certificate",
]

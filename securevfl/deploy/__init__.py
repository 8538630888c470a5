"""Deployment across machines: the federation file and the TLS material each party runs with.

One process per organisation: :func:`load_federation` reads the shared federation file,
:func:`job_fingerprint` is what the parties compare before any data flows, and
:mod:`~securevfl.deploy.certs` makes a development PKI and checks a party's certificate before it
starts. Pure functions and frozen values; the gRPC transport lives in
:mod:`securevfl.federation.grpc_transport`. See docs/deploy.md.
"""

from securevfl.deploy.certs import (
    CertificateError,
    DevPKI,
    TlsCredentials,
    load_tls_material,
    make_dev_pki,
    party_identity,
    verify_party_certificate,
)
from securevfl.deploy.federation import (
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

__all__ = [
    "CertificateError",
    "DevPKI",
    "Federation",
    "JobSpec",
    "NetworkSettings",
    "PartySpec",
    "TlsCredentials",
    "TlsSpec",
    "check_party_name",
    "job_differences",
    "job_fingerprint",
    "load_federation",
    "load_tls_material",
    "make_dev_pki",
    "parse_federation",
    "party_identity",
    "verify_party_certificate",
]

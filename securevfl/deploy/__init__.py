"""Deployment across machines: the federation file and the TLS material each party runs with.

One process per organisation (``securevfl party``, assembled by :mod:`securevfl.pipeline`: its own
table, PSI with its peers, its role of the method); :func:`load_federation` reads the shared federation file,
:func:`job_fingerprint` is what the parties compare before any data flows, and
:mod:`~securevfl.deploy.certs` makes a CA, keys with certificate requests, signs them (or a
one-shot development PKI for trials) and checks a party's certificate before it
starts. Pure functions and frozen values; the gRPC transport lives in
:mod:`securevfl.federation.grpc_transport`. See docs/deploy.md.
"""

from securevfl.lazy import lazy_attributes

#: Each name loads its module on first use: importing a module of this package (the CLI's serving
#: settings, say) does not load the TLS and certificate code.
_LAZY = {
    "CaFiles": "securevfl.deploy.certs",
    "CertificateError": "securevfl.federation.certificates",
    "DevPKI": "securevfl.deploy.certs",
    "Federation": "securevfl.deploy.federation_file",
    "JobSpec": "securevfl.deploy.federation_file",
    "KeyRequest": "securevfl.deploy.certs",
    "NetworkSettings": "securevfl.deploy.federation_file",
    "PartySpec": "securevfl.deploy.federation_file",
    "SignedCertificate": "securevfl.deploy.certs",
    "TlsCredentials": "securevfl.deploy.certs",
    "TlsSpec": "securevfl.deploy.federation_file",
    "check_party_name": "securevfl.deploy.federation_file",
    "check_request": "securevfl.deploy.certs",
    "job_differences": "securevfl.deploy.federation_file",
    "job_fingerprint": "securevfl.deploy.federation_file",
    "load_federation": "securevfl.deploy.federation_file",
    "load_tls_material": "securevfl.deploy.certs",
    "make_ca": "securevfl.deploy.certs",
    "make_dev_pki": "securevfl.deploy.certs",
    "make_key_request": "securevfl.deploy.certs",
    "parse_federation": "securevfl.deploy.federation_file",
    "party_identity": "securevfl.deploy.certs",
    "sign_request": "securevfl.deploy.certs",
    "verify_party_certificate": "securevfl.federation.certificates",
}

__getattr__ = lazy_attributes(__name__, _LAZY)

__all__ = list(_LAZY)

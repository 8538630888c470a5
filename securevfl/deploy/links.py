"""A deployed party's links: the parties in run order, and the transport it opens to its peers.

:func:`open_transport` checks the TLS material, starts the gRPC transport and waits until every
peer has shaken hands on the job fingerprint; :func:`party_links` scopes one run's links (closing
them, and telling every peer at once when the run fails).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from securevfl.deploy.federation_file import Federation, check_tls_paths, job_fingerprint, job_mismatch
from securevfl.deploy.progress import PartyWatch, log_event
from securevfl.federation.grpc_transport.errors import PeerLostError
from securevfl.federation.network import TlsCredentials

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Absence:
    """How a batch scoring's links treat a passive party that is not up (``party --predict --party-timeout``).

    The active party waits ``timeout_s`` for each passive data party's link. ``refusal``: why the model
    cannot score without a party (one line then names it); ``None``: the party is left out
    (:meth:`GrpcTransport.leave_out`) and every row is scored without its part; a passive party then
    waits for the active party's link only (the active party tells it who takes part).
    """

    timeout_s: float
    refusal: str | None = None


def open_transport(federation: Federation, name: str, phase: str = "train", watch: PartyWatch | None = None,
                   absence: Absence | None = None) -> Any:
    """Start this party's gRPC transport (TLS material checked first) and wait for every handshake.

    ``phase``: ``train``, ``predict`` or ``serve`` (part of the job fingerprint every peer must match); ``watch``:
    reports a peer that keeps this party waiting, and each link that comes up; ``absence``: a passive party
    not up in time (see :class:`Absence`).
    """
    from securevfl.deploy.certs import load_tls_material
    from securevfl.federation.certificates import verify_party_certificate
    from securevfl.federation.grpc_transport import GrpcTransport

    spec = federation.party(name)
    check_tls_paths(federation)
    tls: TlsCredentials | None = None
    if not federation.insecure:
        assert federation.tls is not None and spec.cert is not None and spec.key is not None
        tls = load_tls_material(spec.cert, spec.key, federation.tls.ca)
        verify_party_certificate(tls.cert_chain, tls.root_ca, name)
    digest, job = job_fingerprint(federation, phase)
    transport = GrpcTransport(name, ordered_addresses(federation), tls=tls, fingerprint=digest, job=job,
                              settings=federation.limits, insecure=federation.insecure,
                              differences=functools.partial(job_mismatch, here=name),
                              hub=federation.active if federation.topology == "star" else None,
                              replaceable=serving_replaceable(federation, name) if phase == "serve" else ())
    transport.start()
    # star: a party without an address dials the active party (the messages between two such are relayed)
    addresses = {p: a or f"no address: it dials {federation.active}" for p, a in ordered_addresses(federation).items()}
    try:
        with watch.connecting(transport, addresses) if watch is not None else contextlib.nullcontext():
            waited = _wait(transport, federation, name, absence)
    except BaseException as exc:
        transport.abort(f"{name} could not set up its links: {exc}")
        transport.close()
        raise
    security = "plaintext, loopback" if federation.insecure else "mutual TLS"
    for peer in getattr(transport, "peers", ()):
        if peer not in waited:
            continue  # left out, or (a passive party) another passive party the active party will name
        log_event(_log, name, "connect", "link_up", f"link to {peer} up ({security})", peer=peer,
                  address=addresses.get(peer))
    return transport


def _wait(transport: Any, federation: Federation, name: str, absence: Absence | None) -> tuple[str, ...]:
    """Wait for the handshakes: every peer's, or (``absence``) as :class:`Absence` says; returns whose."""
    peers = tuple(getattr(transport, "peers", ()))
    if absence is None:
        transport.wait_ready()
        return peers
    passives = data_party_order(federation)[1:]
    if name != federation.active:  # the active party says who takes part; the others may never come
        if absence.refusal:
            transport.wait_ready()
            return peers
        waited = (federation.active, *helper_parties(federation))
        transport.wait_ready(peers=waited)
        return waited
    missing = transport.unready(passives, absence.timeout_s)
    if missing:
        why = f"not reachable within {absence.timeout_s:g} s (--party-timeout)"
        names = ", ".join(missing)
        if absence.refusal is not None:
            raise PeerLostError(missing[0], name, f"{names} {'is' if len(missing) == 1 else 'are'} {why}, and "
                                                  f"{absence.refusal}")
        for peer in missing:
            transport.leave_out(peer, why)
            log_event(_log, name, "connect", "left_out", f"scoring without {peer}: {why}; every row is scored "
                      f"without its part (the parties column lacks {peer})", level=logging.WARNING, peer=peer,
                      reason=why)
    transport.wait_ready()  # the helpers, and the passive parties that are up
    return tuple(p for p in peers if p not in missing)


@contextmanager
def party_links(federation: Federation, name: str, transport: Any = None, phase: str = "train",
                watch: PartyWatch | None = None, absence: Absence | None = None) -> Iterator[Any]:
    """The links of party ``name`` for one run, opened here unless given, and closed here if opened here.

    On any failure every peer is told at once (ABORT with the reason), so they stop now, not at a timeout.
    """
    own = transport is None
    transport = transport or open_transport(federation, name, phase, watch, absence)
    try:
        yield transport
    except BaseException as exc:
        transport.abort(f"{name} stopped: {type(exc).__name__}: {exc}")
        raise
    finally:
        if own:
            transport.close()


def serving_replaceable(federation: Federation, name: str) -> tuple[str, ...]:
    """The peers of ``name`` in a serving session whose failure or restart is theirs alone: the passive data parties.

    The active party scores without a passive party that is down and takes a restarted one back
    (:mod:`securevfl.deploy.serving`); a passive party goes on serving when another one stops. Full
    mesh only: in a star the hub relays between the others, and a restarted one is not taken back.
    """
    if federation.topology == "star":
        return ()
    return tuple(p for p in data_party_order(federation)[1:] if p != name)


def ordered_addresses(federation: Federation) -> dict[str, str | None]:
    """Parties in run order: the active party first, then the others as the file lists them."""
    addresses = federation.addresses
    return {federation.active: addresses[federation.active],
            **{n: a for n, a in addresses.items() if n != federation.active}}


def helper_parties(federation: Federation) -> tuple[str, ...]:
    """Parties without data, in file order."""
    return tuple(n for n in federation.parties if not federation.parties[n].data)


def data_party_order(federation: Federation) -> tuple[str, ...]:
    """Parties with data in run order: the active party first, then the others as the file lists them."""
    return tuple(n for n in ordered_addresses(federation) if federation.parties[n].data)

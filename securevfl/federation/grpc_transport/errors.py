"""What goes wrong on a network link, and what crossed one: the transport's errors and :class:`LinkStats`.

Every error names the peer; :class:`PeerLostError` and :class:`RelayError` also the party that
noticed. ``_Refusal`` is a frame the receiver refuses for a reason both ends read as is.
"""

from __future__ import annotations

from dataclasses import dataclass

from securevfl.errors import ProtocolError, SecureVFLError


class PeerLostError(ProtocolError):
    """Nothing arrived from a peer for the peer timeout, or its link could not be re-established."""

    def __init__(self, peer: str, party: str, detail: str):
        self.peer = peer
        self.party = party
        super().__init__(detail)


class PeerRestartedError(PeerLostError):
    """A new process of a peer answered on a link (it expects frames the one before acknowledged).

    Fatal for the link: its frames were meant for the process before. Where the party's transport takes
    a restarted peer back (``GrpcTransport(replaceable=...)``), the new process's own HELLO replaces the
    link; elsewhere the run fails, naming the peer.
    """


class LinkRefusedError(SecureVFLError, ConnectionError):
    """A peer refused the link (wrong party, job mismatch) or its TLS handshake failed."""

    def __init__(self, peer: str, reason: str, message: str = ""):
        self.peer = peer
        self.reason = reason
        super().__init__(message or f"link to {peer} refused: {reason}")


class RelayError(ProtocolError):
    """Star topology: the hub changed, relabelled, replayed, reordered or dropped a message it relays.

    ``peer`` is the hub (the party to blame), ``party`` the one that noticed; the senders are honest:
    their messages reach the hub over their authenticated links and are sealed end to end.
    """

    def __init__(self, peer: str, party: str, detail: str):
        self.peer = peer
        self.party = party
        super().__init__(detail)


class _Refusal(ProtocolError):
    """A frame the receiver refuses for a reason both ends should read as is (not "malformed")."""


@dataclass
class LinkStats:
    """Bytes and frames that crossed one directed link, as gRPC messages (before HTTP/2 and TLS framing).

    Star topology: a link to or from the hub counts every frame on it, its own messages in
    ``payload_bytes`` and the (sealed) messages it relays for two other parties in ``relayed_bytes``;
    the logical link between those two parties counts only their ``payload_bytes``, as in a mesh.
    """

    frames: int = 0
    frame_bytes: int = 0
    payload_bytes: int = 0
    resent_frames: int = 0
    reconnects: int = 0
    relayed_bytes: int = 0  # payload bytes of relayed messages (star topology), not in payload_bytes

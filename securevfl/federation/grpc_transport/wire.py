"""Names and limits on the wire, shared by both ends of a link.

The gRPC service and its two methods, the tags of relayed messages (star topology), the largest
frame a party takes, and how often a receiver acknowledges. Values and pure functions only:
:mod:`securevfl.federation.frames` encodes the frames themselves.
"""

from __future__ import annotations

from securevfl.errors import ProtocolError
from securevfl.federation.network import NetworkSettings

_METHOD = "/securevfl.Link/Exchange"
#: Star topology: a party without a server opens this stream to the hub to *receive* on it (hub -> party).
_PULL_METHOD = "/securevfl.Link/Pull"
#: A relayed message's tag: RELAY + the other end's name + SEP + the original tag (see :func:`relay_tag`).
RELAY = "\x1e"
_SEP = "\x1f"
_RELAY_FIN = RELAY + "fin"  # the sender's role returned: nothing more on this relayed link (sealed)
_RELAY_BUNDLE = RELAY + "bundle"  # the sender's signed session key (see securevfl.federation.e2e)
_RELAY_LOST = RELAY + "lost"  # from the hub: the party named as source is lost (the hub alone can see it)
#: The receiver acknowledges cumulatively: after this many frames or bytes, on FIN and on a heartbeat.
ACK_EVERY_FRAMES = 32
ACK_EVERY_BYTES = 8 * 1024 * 1024
_SERVICE = "securevfl.Link"
_MIB = 1024 * 1024


def relay_tag(party: str, tag: str) -> str:
    """The tag of a relayed message: to the hub it names the destination, from the hub the source."""
    return f"{RELAY}{party}{_SEP}{tag}"


def parse_relay_tag(tag: str) -> tuple[str, str]:
    """``(party, original tag)`` of a relay tag; :class:`ProtocolError` if malformed."""
    party, sep, inner = tag[len(RELAY):].partition(_SEP)
    if not tag.startswith(RELAY) or not sep or not party:
        raise ProtocolError(f"malformed relay tag {tag!r}")
    return party, inner


def frame_limit(settings: NetworkSettings) -> int:
    """The largest frame a party takes from a peer: one ``chunk_kb`` chunk and the frame's header."""
    return settings.chunk_bytes + 4096


def _grpc_limit(settings: NetworkSettings) -> int:
    """The receive limit given to gRPC, above :func:`frame_limit`.

    A frame between the two is refused by the receiving party itself, naming its size at both ends;
    one above it never reaches the party's code (the sender learns it from gRPC).
    """
    return 2 * (settings.chunk_bytes + 65536)

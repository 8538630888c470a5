"""The network transport: one process per party, gRPC streams between them, mutual TLS.

:class:`GrpcTransport` implements :class:`~securevfl.federation.transport.Transport` for *one*
local party, so the runtime and the method code are the same as in the threaded simulation.

Links. Every party runs a gRPC server on its address. For each peer P it opens one bidirectional
stream to P's server and sends its envelopes to P on it as :mod:`~securevfl.federation.frames`
(raw bytes, no protobuf); P answers with acknowledgements. So the directed link A -> B is A's
stream to B, and each party receives on its server. In a star federation only the hub listens
(:mod:`.star`). Every :class:`NetworkSettings` number lies in a sane range (a :class:`ConfigError`
names the key and the range).

The parts, bottom to top; each module's docstring tells its part of the design:

* :mod:`.errors` — :class:`PeerLostError`, :class:`LinkRefusedError`, :class:`RelayError`, and
  :class:`LinkStats` (what crossed one link);
* :mod:`.wire` — the service and its methods, relay tags, frame limits, acknowledgement cadence;
* :mod:`.outlink` — the sending side of one link (``_OutLink``: sequencing, resend buffer, window,
  heartbeats, reconnects), the channel to a peer (TLS: the peer's name checked), and which gRPC
  failures no retry can mend;
* :mod:`.inbox` — the receiving side: what arrived from one peer (``_Inbox``), the HELLO checks,
  taking one frame (order, sizes, acknowledgements);
* :mod:`.star` — the star topology: the pull link, the relay link, sealing and opening relayed
  messages, blaming the hub;
* :mod:`.server` — the gRPC servicer: one call per incoming stream, stream limits, refusals;
* :mod:`.transport` — :class:`GrpcTransport`, which ties them together.

Logging. gRPC's C core prints its own lines (``Handshake failed ...``) to stderr; importing this
package sets ``GRPC_VERBOSITY=NONE`` unless the variable is set already or grpc was imported before,
so a party's terminal shows only securevfl's one-line errors (``securevfl --debug`` sets ``INFO``).
"""

from __future__ import annotations

import os
import sys

if "grpc" not in sys.modules:  # the C core reads it once, at start: keep its log lines off the terminal
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")

from securevfl.federation.grpc_transport.errors import LinkRefusedError, LinkStats, PeerLostError, RelayError  # noqa: E402
from securevfl.federation.grpc_transport.outlink import POLITE_CLOSE_S  # noqa: E402
from securevfl.federation.grpc_transport.server import HELLO_TIMEOUT_S, STREAMS_PER_PEER  # noqa: E402
from securevfl.federation.grpc_transport.transport import GrpcTransport  # noqa: E402
from securevfl.federation.grpc_transport.wire import (  # noqa: E402
    ACK_EVERY_BYTES,
    ACK_EVERY_FRAMES,
    RELAY,
    frame_limit,
    parse_relay_tag,
    relay_tag,
)
from securevfl.federation.network import NetworkSettings, TlsCredentials  # noqa: E402

__all__ = ["ACK_EVERY_BYTES", "ACK_EVERY_FRAMES", "HELLO_TIMEOUT_S", "POLITE_CLOSE_S", "RELAY", "STREAMS_PER_PEER",
           "GrpcTransport", "LinkRefusedError", "LinkStats", "NetworkSettings", "PeerLostError", "RelayError",
           "TlsCredentials", "frame_limit", "parse_relay_tag", "relay_tag"]

"""Loopback helpers for the network tests (the library's own, re-exported), and closing transports together."""

import threading

from securevfl.federation.loopback import LoopbackProxy as CuttingProxy
from securevfl.federation.loopback import free_port

__all__ = ["CuttingProxy", "close_together", "free_port"]


def close_together(transports, reason: str = "test over") -> None:
    """Abort every transport, then close them all at once, as separate parties would.

    Closed one after another, each close waits out its peers' open streams (the server's grace, the
    polite linger) that the later closes would have ended: about a second per transport.
    """
    transports = list(transports)
    for t in transports:
        t.abort(reason)
    closers = [threading.Thread(target=t.close, daemon=True) for t in transports]
    for c in closers:
        c.start()
    for c in closers:
        c.join(30)

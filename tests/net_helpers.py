"""Loopback helpers for the network tests (the library's own, re-exported)."""

from securevfl.federation.loopback import LoopbackProxy as CuttingProxy
from securevfl.federation.loopback import free_port

__all__ = ["CuttingProxy", "free_port"]

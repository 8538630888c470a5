"""The exception hierarchy: one root, :class:`SecureVFLError`, for every error a user should catch.

Subclasses also inherit the matching builtin (as scikit-learn's ``NotFittedError`` does), so
``except ValueError`` keeps working for callers who do not know this package. This module
imports nothing heavy: the ``psi`` package and the CLI use it without pulling in torch.
"""

from __future__ import annotations


class SecureVFLError(Exception):
    """Root of every error securevfl raises on purpose."""


class ConfigError(SecureVFLError, ValueError):
    """A configuration value is invalid (unknown name, out-of-range number, conflicting options)."""


class DataError(SecureVFLError, ValueError):
    """Input data is unusable: missing file or column, duplicate or missing IDs, bad labels."""


class ProtocolError(SecureVFLError):
    """A protocol message is malformed, truncated, replayed, out of order or of the wrong session."""


class PeerFinishedError(ProtocolError):
    """A party waits for a message from a peer whose role has already returned without sending it."""

    def __init__(self, peer: str, party: str, detail: str = ""):
        self.peer = peer
        self.party = party
        super().__init__(detail or f"{party} waits for a message from {peer}, whose role finished without sending it")


class PeerTimeoutError(ProtocolError, TimeoutError):
    """No message arrived from a peer within the receive timeout (a hung or unreachable peer)."""

    def __init__(self, peer: str, party: str, timeout: float, detail: str = ""):
        self.peer = peer
        self.party = party
        self.timeout = timeout
        super().__init__(detail or f"{party} waited {timeout:g} s for a message from {peer}")


class CryptoError(SecureVFLError):
    """A cryptographic operation failed. Deliberately opaque, like Fernet's ``InvalidToken``."""


class EncodingOverflowError(SecureVFLError, OverflowError):
    """A value does not fit the fixed-point ring or packing slot it was encoded into."""


class RunAborted(SecureVFLError):
    """Raised inside a party when another party failed and the run is being torn down."""


class PartyFailure(SecureVFLError):
    """A party's role raised; carries the party, the stage it was in and its traceback text."""

    def __init__(self, party: str, stage: str, cause: BaseException, traceback_text: str = ""):
        self.party = party
        self.stage = stage
        self.cause = cause
        self.traceback_text = traceback_text
        super().__init__(f"party {party!r} failed during {stage}: {type(cause).__name__}: {cause}")


__all__ = [
    "SecureVFLError",
    "ConfigError",
    "DataError",
    "ProtocolError",
    "PeerFinishedError",
    "PeerTimeoutError",
    "CryptoError",
    "EncodingOverflowError",
    "RunAborted",
    "PartyFailure",
]

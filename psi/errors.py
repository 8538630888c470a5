"""PSI protocol errors: specific :class:`securevfl.errors.ProtocolError` subclasses.

A malformed, truncated, replayed or out-of-order message always raises one of these; the
protocol never continues with a message it could not fully validate (so it never returns a wrong
intersection because of a bad message).
"""

from __future__ import annotations

from securevfl.errors import ProtocolError


class MalformedMessageError(ProtocolError):
    """A message does not parse: bad magic, unknown type, bad field, trailing bytes."""


class TruncatedMessageError(MalformedMessageError):
    """A message is shorter than its header or its declared fields say."""


class UnsupportedVersionError(MalformedMessageError):
    """A message uses a codec version this implementation does not speak."""


class SessionMismatchError(ProtocolError):
    """A message carries another session's ID (a replay, or a message from a different run)."""


class OutOfOrderError(ProtocolError):
    """A message arrives at the wrong step, has the wrong type for this step, or after the end."""


class ParameterMismatchError(ProtocolError):
    """The parties disagree on protocol parameters (mode, normalisation, digest length)."""


class InvalidPointError(ProtocolError):
    """A received point is not a canonical Curve25519 point of large order."""


__all__ = [
    "MalformedMessageError",
    "TruncatedMessageError",
    "UnsupportedVersionError",
    "SessionMismatchError",
    "OutOfOrderError",
    "ParameterMismatchError",
    "InvalidPointError",
]

"""The errors of the ``psi`` package: one root, :class:`PSIError`, and a class per kind of mistake.

``psi`` stands alone (it imports neither ``securevfl`` nor torch), so it owns its errors. The
kinds mirror securevfl's: a bad option is a :class:`PSIConfigError` and bad input data a
:class:`PSIDataError` (both also ``ValueError``, as securevfl's are), a bad message a
:class:`PSIProtocolError` subclass, a failed curve operation a :class:`PSICryptoError`.
securevfl converts them into its own errors where it calls this package
(:func:`securevfl.errors.psi_errors`), so securevfl's users catch everything with its one root.

A malformed, truncated, replayed or out-of-order message always raises a
:class:`PSIProtocolError` subclass; the protocol never continues with a message it could not fully
validate (so it never returns a wrong intersection because of a bad message).
"""

from __future__ import annotations


class PSIError(Exception):
    """Root of every error the ``psi`` package raises on purpose."""


class PSIConfigError(PSIError, ValueError):
    """A PSI option is invalid (unknown mode or normalisation, bad party name, unusable output folder)."""


class PSIDataError(PSIError, ValueError):
    """The IDs are unusable: missing file or column, null, empty, duplicate or unsupported IDs."""


class PSIProtocolError(PSIError):
    """A PSI message is malformed, truncated, replayed, out of order or of the wrong session."""


class PSICryptoError(PSIError):
    """A curve operation failed (an invalid key, a hash onto a small-order point). Deliberately opaque."""


class MalformedMessageError(PSIProtocolError):
    """A message does not parse: bad magic, unknown type, bad field, trailing bytes."""


class TruncatedMessageError(MalformedMessageError):
    """A message is shorter than its header or its declared fields say."""


class UnsupportedVersionError(MalformedMessageError):
    """A message uses a codec version this implementation does not speak."""


class SessionMismatchError(PSIProtocolError):
    """A message carries another session's ID (a replay, or a message from a different run)."""


class OutOfOrderError(PSIProtocolError):
    """A message arrives at the wrong step, has the wrong type for this step, or after the end."""


class ParameterMismatchError(PSIProtocolError):
    """The parties disagree on protocol parameters (mode, normalisation, digest length)."""


class TranscriptMismatchError(ParameterMismatchError):
    """The parties saw different opening messages (a HELLO field or salt share was altered in transit)."""


class InvalidPointError(PSIProtocolError):
    """A received point is not a canonical Curve25519 point of large order."""


__all__ = [
    "PSIError",
    "PSIConfigError",
    "PSIDataError",
    "PSIProtocolError",
    "PSICryptoError",
    "MalformedMessageError",
    "TruncatedMessageError",
    "UnsupportedVersionError",
    "SessionMismatchError",
    "OutOfOrderError",
    "ParameterMismatchError",
    "TranscriptMismatchError",
    "InvalidPointError",
]

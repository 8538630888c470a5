"""The exception hierarchy: one root, :class:`SecureVFLError`, for every error a user should catch.

Subclasses also inherit the matching builtin (as scikit-learn's ``NotFittedError`` does), so
``except ValueError`` keeps working for callers who do not know this package. This module
imports nothing heavy (only :mod:`psi.errors`): the CLI uses it without pulling in torch.

The ``psi`` package is the bottom layer and stands alone, so it has its own root,
:class:`psi.errors.PSIError`. securevfl calls it only inside :func:`psi_errors`, which raises each
PSI error as the securevfl error of the same kind (the original stays as ``__cause__``): a user
of securevfl catches everything with :class:`SecureVFLError`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from psi import errors as _psi


class SecureVFLError(Exception):
    """Root of every error securevfl raises on purpose."""

    #: The command line's exit status for this error (the CLI prints it as one line).
    exit_code: int = 2


class ConfigError(SecureVFLError, ValueError):
    """A configuration value is invalid (unknown name, out-of-range number, conflicting options)."""


class DataError(SecureVFLError, ValueError):
    """Input data is unusable: missing file or column, duplicate or missing IDs, bad labels."""


class MissingPackageError(ConfigError, DataError):
    """A dataset's files ship inside an optional package that is not installed (the message names it)."""


class ProtocolError(SecureVFLError):
    """A protocol message is malformed, truncated, replayed, out of order or of the wrong session."""


class PeerFinishedError(ProtocolError):
    """A party waits for a message from a peer whose role has already returned without sending it."""

    def __init__(self, peer: str, party: str, detail: str = ""):
        self.peer = peer
        self.party = party
        super().__init__(detail or f"{party} waits for a message from {peer}, whose role finished without sending it")


class UnexpectedTagError(ProtocolError):
    """A message arrived with another tag than the one its receiver waits for (the message is consumed).

    ``received``: its tag. A serving party catches it for the one tag that may cut a protocol short.
    """

    def __init__(self, message: str, received: str):
        self.received = received
        super().__init__(message)


class PeerTimeoutError(ProtocolError, TimeoutError):
    """No message arrived from a peer within the receive timeout (a hung or unreachable peer)."""

    def __init__(self, peer: str, party: str, timeout: float, detail: str = ""):
        self.peer = peer
        self.party = party
        self.timeout = timeout
        super().__init__(detail or f"{party} waited {timeout:g} s for a message from {peer}")


class DeadlockError(ProtocolError):
    """Every party of an in-process run waits for a message and none can send one (a protocol bug)."""

    def __init__(self, party: str, peer: str, detail: str = ""):
        self.party = party
        self.peer = peer
        super().__init__(detail or f"{party} waits for {peer}, and no party can send")


class CryptoError(SecureVFLError):
    """A cryptographic operation failed. Deliberately opaque, like Fernet's ``InvalidToken``."""


class EncodingOverflowError(SecureVFLError, OverflowError):
    """A value does not fit the fixed-point ring or packing slot it was encoded into."""


class RunAborted(SecureVFLError):
    """Raised inside a party when another party failed and the run is being torn down."""


class Interrupted(BaseException):
    """The process got SIGTERM or SIGINT: the party stops, tells its peers why, and exits 128 + the signal.

    Like :class:`KeyboardInterrupt` it is not an :class:`Exception`: it is raised asynchronously (by a
    signal handler, wherever the main thread is), and an ``except Exception`` on the way (a message
    decoder that reports "malformed message") must not turn it into another error.
    """

    def __init__(self, signum: int, party: str = ""):
        import signal

        self.signum = int(signum)
        self.party = party
        self.exit_code = 128 + self.signum  # 143 for SIGTERM, 130 for SIGINT, as a shell reports them
        try:
            name = signal.Signals(self.signum).name
        except ValueError:
            name = f"signal {self.signum}"
        verb = "interrupted" if self.signum == signal.SIGINT else "terminated"
        super().__init__(f"{verb} by {name}")


class PartyFailure(SecureVFLError):
    """A party's role raised; carries the party, the stage it was in and its traceback text."""

    def __init__(self, party: str, stage: str, cause: BaseException, traceback_text: str = ""):
        self.party = party
        self.stage = stage
        self.cause = cause
        self.traceback_text = traceback_text
        self.exit_code = cause.exit_code if isinstance(cause, SecureVFLError | Interrupted) else 2
        super().__init__(f"party {party!r} failed during {stage}: {type(cause).__name__}: {cause}")


def from_psi(error: _psi.PSIError) -> SecureVFLError:
    """The securevfl error of the same kind as a ``psi`` error, with its message."""
    kind: type[SecureVFLError]
    if isinstance(error, _psi.PSIConfigError):
        kind = ConfigError
    elif isinstance(error, _psi.PSIDataError):
        kind = DataError
    elif isinstance(error, _psi.PSIProtocolError):
        kind = ProtocolError
    elif isinstance(error, _psi.PSICryptoError):
        kind = CryptoError
    else:
        kind = SecureVFLError
    return kind(str(error))


@contextmanager
def psi_errors() -> Iterator[None]:
    """Around a call into the ``psi`` package: raise its errors as securevfl's (see the module doc)."""
    try:
        yield
    except _psi.PSIError as error:
        raise from_psi(error) from error


__all__ = [
    "SecureVFLError",
    "ConfigError",
    "DataError",
    "ProtocolError",
    "UnexpectedTagError",
    "PeerFinishedError",
    "PeerTimeoutError",
    "DeadlockError",
    "CryptoError",
    "EncodingOverflowError",
    "RunAborted",
    "Interrupted",
    "PartyFailure",
    "from_psi",
    "psi_errors",
    "ModelError",
]


class ModelError(SecureVFLError, ValueError):
    """A saved model (or a part of one) is unusable: tampered, truncated, incompatible or of another job."""

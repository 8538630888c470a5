"""Checks shared by the data layer, the API and the CLI: party names, output paths, local files.

Party names: one rule for every place a name becomes a file name or a party identity. The rule
lives in the bottom layer, :mod:`psi.checks` (the ``psi`` package stands alone and needs it too);
this module raises securevfl's :class:`~securevfl.errors.ConfigError` with the same words. A name
is 1 to :data:`MAX_PARTY_NAME_LENGTH` ASCII letters, digits, ``-`` and ``_``.

Output paths are checked before any work starts, so a long run is never lost at the end to a
report or output folder that cannot be written.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from psi.checks import (
    MAX_PARTY_NAME_LENGTH,
    NOT_FOUND,
    PARTY_NAME_CHARACTERS,
    folder_problem,
    input_file_problem,
    is_party_name,
    party_name_refusal,
)
from psi.checks import check_output_dir as psi_check_output_dir
from securevfl.errors import ConfigError, psi_errors


def validate_party_name(name: object) -> str:
    """Return ``name`` if it is a valid party name, else raise :class:`ConfigError` naming it."""
    if is_party_name(name):
        return name
    raise ConfigError(party_name_refusal(name))


def validate_party_names(names: Iterable[object]) -> tuple[str, ...]:
    """Validate every name of an iterable of party names; return them as a tuple."""
    return tuple(validate_party_name(n) for n in names)


def check_output_dir(path: str | os.PathLike[str], what: str = "output folder") -> Path:
    """Refuse, before any work, an output folder that cannot be created or written to.

    The folder may exist (as a folder) or not; then its nearest existing ancestor must be a
    writable folder. Nothing is created here.
    """
    with psi_errors():
        return psi_check_output_dir(path, what)


def input_file_refusal(path: str | os.PathLike[str], what: str) -> str | None:
    """The sentence refusing ``path`` as an input file (``what``: "data file", ...), or ``None``.

    A missing file is "<what> not found: PATH"; a folder is "<what> PATH is a directory, not a file".
    """
    problem = input_file_problem(path)
    if problem is None:
        return None
    return f"{what} not found: {path}" if problem == NOT_FOUND else f"{what} {path} {problem}"


def check_output_file(path: str | os.PathLike[str], what: str = "output file") -> Path:
    """Refuse, before any work, a file path that cannot be written (a directory, or a bad folder)."""
    path = Path(path)
    if path.is_dir():
        problem: str | None = "it is a directory"
    elif path.exists() and not os.access(path, os.W_OK):
        problem = "it is not writable"
    else:
        problem = folder_problem(path.parent)
    if problem:
        raise ConfigError(f"cannot write {what} {path}: {problem}")
    return path


__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_PARTY_NAME_LENGTH",
    "PARTY_NAME_CHARACTERS",
    "check_output_dir",
    "check_output_file",
    "input_file_refusal",
    "read_local_file",
    "validate_party_name",
    "validate_party_names",
]


#: The largest configuration file (federation file, certificate, key) this party reads: 1 MiB.
MAX_CONFIG_BYTES = 1 << 20


def read_local_file(path: str | os.PathLike[str], what: str, max_bytes: int = MAX_CONFIG_BYTES, *,
                    private: bool = False) -> bytes:
    """The bytes of a file this party reads (TLS material, the federation file): one clear error otherwise.

    Only a regular file of at most ``max_bytes`` is read (``/dev/zero``, a FIFO or a huge file would
    exhaust memory or block): anything else is a :class:`ConfigError` naming the file and the limit.
    ``private`` (a private key): a PEM private key that group or others may read or write is refused,
    as ssh refuses an unprotected key, with the ``chmod 600`` that fixes it (POSIX only).
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not block the open
    except FileNotFoundError:
        raise ConfigError(f"{what} file {str(path)!r} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"{what} file {str(path)!r} is a directory") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {what} file {str(path)!r}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ConfigError(f"{what} file {str(path)!r} is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{what} file {str(path)!r} is not a regular file (a device, pipe or socket)")
        if info.st_size > max_bytes:
            raise ConfigError(f"{what} file {str(path)!r} is larger than {_size(max_bytes)} "
                              f"({info.st_size:,} bytes); a configuration file is never that big")
        chunks, left = [], max_bytes + 1
        while left > 0:  # the size may change while reading: never read more than the limit
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        if left <= 0:
            raise ConfigError(f"{what} file {str(path)!r} is larger than {_size(max_bytes)}")
        data = b"".join(chunks)
        # only a file that holds a key: one that does not is refused for what it is by the caller
        if private and os.name == "posix" and info.st_mode & 0o077 and b"PRIVATE KEY-----" in data:
            raise ConfigError(f"{what} file {str(path)!r} is accessible by others (mode "
                              f"{stat.S_IMODE(info.st_mode):04o}); run `chmod 600 {path}` and start again")
        return data
    except OSError as exc:
        raise ConfigError(f"cannot read {what} file {str(path)!r}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n % (1 << 20) == 0 else f"{n:,} bytes"

"""Checks shared by the ``psi`` package, the data layer, the API and the CLI: party names, output paths.

Party names: one rule for every place a name becomes a file name or a party identity.

A party name ends up in output file names (``<party>_aligned.csv``), in message links and in the
key-derivation context, so it is restricted to ASCII letters, digits, ``-`` and ``_`` (1 to
:data:`MAX_PARTY_NAME_LENGTH` characters): no path separators, no ``..``, no whitespace or
control characters, nothing that Unicode normalisation could make equal to another name.
It imports nothing heavy (like :mod:`securevfl.errors`), so the torch-free ``psi`` package, the
data layer and the CLI share this one rule.

Output paths are checked before any work starts, so a long run is never lost at the end to a
report or output folder that cannot be written.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from securevfl.errors import ConfigError

MAX_PARTY_NAME_LENGTH = 64
PARTY_NAME_CHARACTERS = "letters, digits, '-' and '_'"
_PARTY_NAME = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_PARTY_NAME_LENGTH}}}", re.ASCII)


def validate_party_name(name: object) -> str:
    """Return ``name`` if it is a valid party name, else raise :class:`ConfigError` naming it."""
    if not isinstance(name, str) or _PARTY_NAME.fullmatch(name) is None:
        raise ConfigError(
            f"invalid party name {name!r}: use 1 to {MAX_PARTY_NAME_LENGTH} ASCII {PARTY_NAME_CHARACTERS}"
        )
    return name


def validate_party_names(names: Iterable[object]) -> tuple[str, ...]:
    """Validate every name of an iterable of party names; return them as a tuple."""
    return tuple(validate_party_name(n) for n in names)


def _folder_problem(path: Path) -> str | None:
    """Why files cannot be written into folder ``path`` (created if missing), or ``None``."""
    if path.exists():
        if not path.is_dir():
            return f"{path} exists and is not a directory"
        if not os.access(path, os.W_OK | os.X_OK):
            return f"{path} is not writable"
        return None
    ancestor = path.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"{ancestor} is not a directory"
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return f"{ancestor} is not writable"
    return None


def check_output_dir(path: str | os.PathLike, what: str = "output folder") -> Path:
    """Refuse, before any work, an output folder that cannot be created or written to.

    The folder may exist (as a folder) or not; then its nearest existing ancestor must be a
    writable folder. Nothing is created here.
    """
    path = Path(path)
    problem = _folder_problem(path)
    if problem:
        raise ConfigError(f"cannot use {what} {path}: {problem}")
    return path


def check_output_file(path: str | os.PathLike, what: str = "output file") -> Path:
    """Refuse, before any work, a file path that cannot be written (a directory, or a bad folder)."""
    path = Path(path)
    if path.is_dir():
        problem: str | None = "it is a directory"
    elif path.exists() and not os.access(path, os.W_OK):
        problem = "it is not writable"
    else:
        problem = _folder_problem(path.parent)
    if problem:
        raise ConfigError(f"cannot write {what} {path}: {problem}")
    return path


__all__ = [
    "MAX_PARTY_NAME_LENGTH",
    "PARTY_NAME_CHARACTERS",
    "check_output_dir",
    "check_output_file",
    "validate_party_name",
    "validate_party_names",
]


def read_local_file(path: str | os.PathLike, what: str) -> bytes:
    """The bytes of a file this party reads (TLS material, the federation file): one clear error otherwise."""
    path = Path(path)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{what} file {str(path)!r} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"{what} file {str(path)!r} is a directory") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {what} file {str(path)!r}: {exc.strerror or exc}") from None

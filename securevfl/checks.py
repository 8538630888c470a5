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
from collections.abc import Iterable
from pathlib import Path

from psi.checks import (
    MAX_PARTY_NAME_LENGTH,
    PARTY_NAME_CHARACTERS,
    folder_problem,
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
    "MAX_PARTY_NAME_LENGTH",
    "PARTY_NAME_CHARACTERS",
    "check_output_dir",
    "check_output_file",
    "validate_party_name",
    "validate_party_names",
]


def read_local_file(path: str | os.PathLike[str], what: str) -> bytes:
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

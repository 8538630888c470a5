"""The project's one rule for party names, and the output-folder check (``securevfl.checks`` reuses both).

A party name ends up in output file names (``<party>_aligned.csv``), in message links, in the
key-derivation context and (deployed) in a TLS certificate's DNS name, so it is restricted to
ASCII letters, digits, ``-`` and ``_`` (1 to :data:`MAX_PARTY_NAME_LENGTH` characters): no path
separators, no ``..``, no whitespace or control characters, nothing that Unicode normalisation
could make equal to another name.

Each rule is a test plus the sentence that refuses a value, so each layer raises its own
error with the same words: :func:`validate_party_name` and :func:`check_output_dir` here raise
:class:`~psi.errors.PSIConfigError`, their ``securevfl.checks`` namesakes ``securevfl``'s
``ConfigError``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TypeGuard

from .errors import PSIConfigError

MAX_PARTY_NAME_LENGTH = 64
PARTY_NAME_CHARACTERS = "letters, digits, '-' and '_'"
_PARTY_NAME = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_PARTY_NAME_LENGTH}}}", re.ASCII)


def is_party_name(name: object) -> TypeGuard[str]:
    """Whether ``name`` is a valid party name (a string following the rule above)."""
    return isinstance(name, str) and _PARTY_NAME.fullmatch(name) is not None


def party_name_refusal(name: object) -> str:
    """The sentence refusing ``name`` as a party name: what it is and what the rule allows."""
    return f"invalid party name {name!r}: use 1 to {MAX_PARTY_NAME_LENGTH} ASCII {PARTY_NAME_CHARACTERS}"


def validate_party_name(name: object) -> str:
    """Return ``name`` if it is a valid party name, else raise :class:`PSIConfigError` naming it."""
    if is_party_name(name):
        return name
    raise PSIConfigError(party_name_refusal(name))


#: What :func:`input_file_problem` says of a path that does not exist.
NOT_FOUND = "file not found"


def input_file_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be read as an input file (a table, a CSR), or ``None`` if it is a regular file.

    One of :data:`NOT_FOUND`, ``"is a directory, not a file"`` or ``"is not a regular file"``: a
    folder given where a file belongs is named as such, not reported missing.
    """
    path = Path(path)
    if path.is_file():
        return None
    if path.is_dir():
        return "is a directory, not a file"
    if path.exists():
        return "is not a regular file (a device, pipe or socket)"
    return NOT_FOUND


def folder_problem(path: Path) -> str | None:
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


def output_dir_problem(path: Path, what: str = "output folder") -> str | None:
    """The sentence refusing ``path`` as an output folder, or ``None`` if it can be used."""
    problem = folder_problem(path)
    return None if problem is None else f"cannot use {what} {path}: {problem}"


def check_output_dir(path: str | os.PathLike[str], what: str = "output folder") -> Path:
    """Refuse, before any work, an output folder that cannot be created or written to.

    The folder may exist (as a folder) or not; then its nearest existing ancestor must be a
    writable folder. Nothing is created here.
    """
    path = Path(path)
    problem = output_dir_problem(path, what)
    if problem is not None:
        raise PSIConfigError(problem)
    return path


__all__ = [
    "MAX_PARTY_NAME_LENGTH",
    "PARTY_NAME_CHARACTERS",
    "check_output_dir",
    "folder_problem",
    "output_dir_problem",
    "is_party_name",
    "party_name_refusal",
    "validate_party_name",
]

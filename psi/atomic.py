"""Atomic output files: write to a temporary file in the same folder, then rename it over the target.

A reader (or a crash, a full disk, SIGKILL) never sees half a file: the target is either the old file
or the complete new one. Every final output of ``psi`` and ``securevfl`` (reports, PSI row files,
certificates and keys, benchmark results, plots) goes through :func:`atomic_path`. This module has no
dependencies, so ``psi`` stays standalone and ``securevfl`` imports it from here.

Owner-only by default: outputs hold IDs, predictions, model parts and costs, so a file is created
with :data:`PRIVATE_FILE` (``0o600``) and every folder made for it with :data:`PRIVATE_DIR`
(``0o700``), whatever the umask (a security audit found them world-readable under umask 022).
Folders that already exist keep their mode: ``--out .`` must not lock the working directory.
A caller that means a file to be public (a certificate) passes its ``mode``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

__all__ = ["PRIVATE_DIR", "PRIVATE_FILE", "atomic_path", "make_dirs", "open_private_append", "write_bytes",
           "write_text"]

#: Mode of every output file unless told otherwise: the owner reads and writes, nobody else.
PRIVATE_FILE = 0o600
#: Mode of every folder made for outputs: only the owner may list or enter it.
PRIVATE_DIR = 0o700


def make_dirs(path: str | os.PathLike[str]) -> Path:
    """Create folder ``path`` and its missing ancestors, each with mode :data:`PRIVATE_DIR`; returns ``path``.

    Folders that exist are left as they are (never chmodded); a folder created here is chmodded
    to ``0o700`` so the umask cannot widen or narrow it.
    """
    target = Path(path)
    missing: list[Path] = []
    current = target
    while not current.is_dir():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=PRIVATE_DIR)
        except FileExistsError:
            if not folder.is_dir():
                raise
            continue  # made meanwhile by someone else: theirs, left alone
        os.chmod(folder, PRIVATE_DIR)
    return target


def open_private_append(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` (and its folders, privately) with mode :data:`PRIVATE_FILE` if it does not exist.

    For files appended to by others (a log file): an existing file keeps its mode and content.
    """
    target = Path(path)
    make_dirs(target.parent)
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE)
    os.close(fd)
    return target


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], mode: int = PRIVATE_FILE) -> Iterator[Path]:
    """Yield a fresh temporary path next to ``path``; on success it replaces ``path``, on error it is removed.

    The temporary name ends with ``path``'s own name, so writers that pick a format by suffix
    (``savefig``, ``to_parquet``) work unchanged. It is created empty with ``mode`` (owner-only
    unless told otherwise; the umask can only narrow it), so its permissions are right before any
    byte is written. Missing folders above ``path`` are made owner-only (:func:`make_dirs`).
    """
    target = Path(path)
    make_dirs(target.parent)
    tmp = target.with_name(f".{secrets.token_hex(6)}.tmp.{target.name}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb+") as handle:  # on disk before the rename: a crash never leaves an empty target
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_bytes(path: str | os.PathLike[str], data: bytes, mode: int = PRIVATE_FILE) -> Path:
    """Write ``data`` to ``path`` atomically; returns ``path``."""
    with atomic_path(path, mode) as tmp, open(tmp, "wb") as handle:
        handle.write(data)
    return Path(path)


def write_text(path: str | os.PathLike[str], text: str, mode: int = PRIVATE_FILE, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically; returns ``path``."""
    return write_bytes(path, text.encode(encoding), mode)

"""Atomic output files: write to a temporary file in the same folder, then rename it over the target.

A reader (or a crash, a full disk, SIGKILL) never sees half a file: the target is either the old file
or the complete new one. Every final output of ``psi`` and ``securevfl`` (reports, PSI row files,
certificates and keys, benchmark results, plots) goes through :func:`atomic_path`. This module has no
dependencies, so ``psi`` stays standalone and ``securevfl`` imports it from here.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "write_bytes", "write_text"]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], mode: int = 0o666) -> Iterator[Path]:
    """Yield a fresh temporary path next to ``path``; on success it replaces ``path``, on error it is removed.

    The temporary name ends with ``path``'s own name, so writers that pick a format by suffix
    (``savefig``, ``to_parquet``) work unchanged. It is created empty with ``mode`` (less the
    umask; ``0o600`` for a private key), so its permissions are right before any byte is written.
    """
    target = Path(path)
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


def write_bytes(path: str | os.PathLike[str], data: bytes, mode: int = 0o666) -> Path:
    """Write ``data`` to ``path`` atomically; returns ``path``."""
    with atomic_path(path, mode) as tmp, open(tmp, "wb") as handle:
        handle.write(data)
    return Path(path)


def write_text(path: str | os.PathLike[str], text: str, mode: int = 0o666, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically; returns ``path``."""
    return write_bytes(path, text.encode(encoding), mode)

"""Choose a Paillier backend by name."""

from __future__ import annotations

from typing import Any

from securevfl.errors import ConfigError

from .backend import PaillierBackend
from .fast_backend import FastBackend
from .keys import PaillierPrivateKey, PaillierPublicKey
from .phe_backend import PheBackend

BACKENDS: dict[str, type[PaillierBackend]] = {"phe": PheBackend, "fast": FastBackend}
"""Backend classes by name (read-only by convention)."""


def available_backends() -> tuple[str, ...]:
    """Names accepted by :func:`create_backend`."""
    return tuple(sorted(BACKENDS))


def create_backend(
    name: str,
    public_key: PaillierPublicKey,
    private_key: PaillierPrivateKey | None = None,
    **options: Any,
) -> PaillierBackend:
    """Instantiate backend ``name`` ("phe" or "fast") for a key; ``options`` go to its class."""
    try:
        cls = BACKENDS[name]
    except (KeyError, TypeError):
        raise ConfigError(
            f"unknown Paillier backend {name!r}; valid: {', '.join(available_backends())}"
        ) from None
    return cls(public_key, private_key, **options)

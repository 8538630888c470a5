"""Choose a Paillier backend by name."""

from __future__ import annotations

from typing import Any

from securevfl.errors import ConfigError

from .fast_backend import FastBackend
from .keys import MIN_TEST_KEY_BITS, SECURE_KEY_BITS, PaillierPrivateKey, PaillierPublicKey
from .phe_backend import PheBackend
from .tensor import PaillierBackend

BACKENDS: dict[str, type[PaillierBackend]] = {"phe": PheBackend, "fast": FastBackend}
"""Backend classes by name (read-only by convention)."""


def available_backends() -> tuple[str, ...]:
    """Names accepted by :func:`create_backend`."""
    return tuple(sorted(BACKENDS))


def check_backend_and_key(backend: str, key_bits: int, insecure_allow_small_key: bool) -> None:
    """A method's Paillier options: a known backend, and a secure key size (smaller only when allowed, tests)."""
    if backend not in available_backends():
        raise ConfigError(f"backend must be one of {', '.join(available_backends())}, got {backend!r}")
    if key_bits not in SECURE_KEY_BITS:
        if not insecure_allow_small_key:
            raise ConfigError(f"key_bits must be one of {SECURE_KEY_BITS}")
        if key_bits < MIN_TEST_KEY_BITS or key_bits % 2:
            raise ConfigError(f"key_bits must be even and >= {MIN_TEST_KEY_BITS}, got {key_bits}")


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

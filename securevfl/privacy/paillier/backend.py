"""The integer layer shared by the ``phe`` and ``fast`` Paillier implementations.

A backend does integer Paillier on flat lists (the ``*_raw`` methods, g = n + 1 for both, so the
two interoperate on the same key). :mod:`.tensor` builds encoding, packing, shapes and
serialisation on top of it (:class:`~.tensor.EncryptedTensor`), and :class:`~.tensor.PaillierBackend`
adds ``encrypt`` / ``decrypt`` of real arrays; the backends subclass that one. Backends are picked
by name with :func:`securevfl.privacy.paillier.create_backend`.
"""

from __future__ import annotations

import secrets
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, TypeVar

from securevfl.errors import ConfigError, CryptoError

from .keys import PaillierPrivateKey, PaillierPublicKey, RandBits

_Backend = TypeVar("_Backend", bound="RawPaillierBackend")


class RawPaillierBackend(ABC):
    """Integer Paillier over one key pair; ``private_key`` is needed only to decrypt."""

    name: ClassVar[str] = "abstract"

    def __init__(
        self,
        public_key: PaillierPublicKey,
        private_key: PaillierPrivateKey | None = None,
        *,
        randbits: RandBits | None = None,
    ) -> None:
        if not isinstance(public_key, PaillierPublicKey):
            raise ConfigError("public_key must be a PaillierPublicKey")
        if private_key is not None and private_key.public_key != public_key:
            raise CryptoError("private key does not belong to the public key")
        self.public_key = public_key
        self.private_key = private_key
        self.randbits: RandBits = randbits or secrets.randbits

    # -- integer layer -------------------------------------------------------------------------
    @abstractmethod
    def encrypt_raw(self, plaintexts: Sequence[int]) -> list[Any]:
        """Encrypt residues in [0, n) with fresh randomness (obfuscated ciphertexts)."""

    @abstractmethod
    def decrypt_raw(self, ciphertexts: Sequence[Any]) -> list[int]:
        """Decrypt ciphertexts to residues in [0, n); needs the private key."""

    @abstractmethod
    def add_raw(self, a: Sequence[Any], b: Sequence[Any]) -> list[Any]:
        """Elementwise E(x) * E(y) mod n^2 = E(x + y)."""

    @abstractmethod
    def mul_raw(self, ciphertexts: Sequence[Any], scalars: Sequence[int]) -> list[Any]:
        """Elementwise E(x)^k mod n^2 = E(k x) for signed integers k."""

    @abstractmethod
    def rerandomize_raw(self, ciphertexts: Sequence[Any]) -> list[Any]:
        """Multiply by a fresh encryption of zero so the result is unlinkable to its inputs."""

    def linear_combine_raw(
        self, ciphertexts: Sequence[Any], coeffs: Sequence[Sequence[int]]
    ) -> list[Any]:
        """Compute out_j = prod_i c_i^coeffs[j][i] = E(sum_i coeffs[j][i] x_i).

        A plaintext matrix times a ciphertext vector. Reference version: one ``mul_raw`` per
        term, then adds; backends may override with something faster.
        """
        out = []
        for row in coeffs:
            acc = self.one()
            for term in self.mul_raw(ciphertexts, row):
                acc = self.add_raw([acc], [term])[0]
            out.append(acc)
        return out

    def add_plain_raw(self, ciphertexts: Sequence[Any], plaintexts: Sequence[int]) -> list[Any]:
        """Elementwise E(x) * (1 + m n) mod n^2 = E(x + m) (no randomness needed)."""
        n, nsq = self.public_key.n, self.public_key.nsquare
        return [self.from_int((int(c) * ((int(m) % n) * n + 1)) % nsq)
                for c, m in zip(ciphertexts, plaintexts, strict=True)]

    def from_int(self, value: int) -> Any:
        """Convert a Python int ciphertext to this backend's number type."""
        return int(value)

    def one(self) -> Any:
        """Return the trivial encryption of zero (ciphertext 1), used for empty sums."""
        return self.from_int(1)

    def require_private_key(self) -> PaillierPrivateKey:
        """Return the private key; raise CryptoError when this backend holds only the public."""
        if self.private_key is None:
            raise CryptoError("this backend holds no private key")
        return self.private_key

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release worker processes, if any."""

    def __enter__(self: _Backend) -> _Backend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        role = "private" if self.private_key is not None else "public"
        return f"{type(self).__name__}({self.public_key!r}, {role})"

"""``phe``: the python-paillier reference implementation behind the common backend interface.

Encryption and decryption call python-paillier's own ``raw_encrypt`` (full-length r^n
obfuscation, as its ``be_secure`` path) and ``raw_decrypt`` (its CRT decryption); arithmetic
uses its ``mulmod``/``powmod``/``invert`` helpers exactly as ``EncryptedNumber`` does. Encoding
is securevfl's own fixed-point scheme (shared with ``fast``), so the two backends read each
other's ciphertexts under the same key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from phe import paillier as phe_paillier
from phe import util as phe_util

from securevfl.errors import CryptoError

from .keys import PaillierPrivateKey, PaillierPublicKey, RandBits
from .tensor import PaillierBackend


def to_phe_keys(
    public_key: PaillierPublicKey, private_key: PaillierPrivateKey | None = None
) -> tuple[phe_paillier.PaillierPublicKey, phe_paillier.PaillierPrivateKey | None]:
    """Return the same key material as python-paillier objects (g = n + 1 in both)."""
    phe_public = phe_paillier.PaillierPublicKey(public_key.n)
    phe_private = None
    if private_key is not None:
        phe_private = phe_paillier.PaillierPrivateKey(phe_public, private_key.p, private_key.q)
    return phe_public, phe_private


def from_phe_keys(
    phe_public: phe_paillier.PaillierPublicKey,
    phe_private: phe_paillier.PaillierPrivateKey | None = None,
    randbits: RandBits | None = None,
) -> tuple[PaillierPublicKey, PaillierPrivateKey | None]:
    """Import python-paillier keys (a fresh DJN base h_s is drawn for the public key)."""
    public_key = PaillierPublicKey.from_n(phe_public.n, randbits)
    private_key = None
    if phe_private is not None:
        private_key = PaillierPrivateKey(public_key=public_key, p=phe_private.p, q=phe_private.q)
    return public_key, private_key


class PheBackend(PaillierBackend):
    """Reference backend on python-paillier; slow but independent of the ``fast`` code."""

    name = "phe"

    def __init__(
        self,
        public_key: PaillierPublicKey,
        private_key: PaillierPrivateKey | None = None,
        *,
        randbits: RandBits | None = None,
    ) -> None:
        super().__init__(public_key, private_key, randbits=randbits)
        self.phe_public, self.phe_private = to_phe_keys(public_key, private_key)

    def _random_r(self) -> int:
        n = self.public_key.n
        while True:
            r = self.randbits(n.bit_length() + 64) % n
            if r > 0:
                return r

    def encrypt_raw(self, plaintexts: Sequence[int]) -> list[Any]:
        """python-paillier raw_encrypt with a fresh full-length r (r^n obfuscator)."""
        encrypt = self.phe_public.raw_encrypt
        return [encrypt(int(m), r_value=self._random_r()) for m in plaintexts]

    def decrypt_raw(self, ciphertexts: Sequence[Any]) -> list[int]:
        """python-paillier raw_decrypt (CRT)."""
        self.require_private_key()
        if self.phe_private is None:  # set whenever a private key is
            raise CryptoError("this backend holds no private key")
        decrypt = self.phe_private.raw_decrypt
        return [decrypt(int(c)) for c in ciphertexts]

    def add_raw(self, a: Sequence[Any], b: Sequence[Any]) -> list[Any]:
        """mulmod(a, b, n^2), as EncryptedNumber._raw_add."""
        nsq = self.public_key.nsquare
        return [phe_util.mulmod(int(x), int(y), nsq) for x, y in zip(a, b, strict=True)]

    def mul_raw(self, ciphertexts: Sequence[Any], scalars: Sequence[int]) -> list[Any]:
        """powmod(c, k, n^2); negative k via invert(c), as EncryptedNumber._raw_mul."""
        nsq = self.public_key.nsquare
        out = []
        for c, k in zip(ciphertexts, scalars, strict=True):
            c, k = int(c), int(k)
            if k < 0:
                out.append(phe_util.powmod(phe_util.invert(c, nsq), -k, nsq))
            else:
                out.append(phe_util.powmod(c, k, nsq))
        return out

    def rerandomize_raw(self, ciphertexts: Sequence[Any]) -> list[Any]:
        """Multiply by r^n for fresh r, as EncryptedNumber.obfuscate."""
        n, nsq = self.public_key.n, self.public_key.nsquare
        return [phe_util.mulmod(int(c), phe_util.powmod(self._random_r(), n, nsq), nsq)
                for c in ciphertexts]

"""Diffie–Hellman key agreement: X25519 (default) and finite-field DH in RFC 3526/7919 groups.

EASTER (paper 004, Sec. II-B) derives blinding factors from DDH-based pairwise secrets in a
prime-order cyclic group. We offer:

* ``x25519`` — RFC 7748 X25519 via ``cryptography`` (fast, 32-byte keys, the default);
* ``ffdh2048`` / ``ffdh3072`` — RFC 7919 ``ffdhe2048`` / ``ffdhe3072`` safe-prime groups;
* ``modp2048`` — RFC 3526 group 14 (the classic IKE 2048-bit MODP group).

FFDH uses generator 2, which generates the prime-order-q subgroup (p = 2q + 1, p = 7 mod 8 so
2 is a quadratic residue). Received public values are validated as SP 800-56A rev. 3
sec. 5.6.2.3.1 requires for safe-prime groups: 1 < y < p - 1 and y^q = 1 (mod p). Private
exponents are short (RFC 7919 sec. 5.2: at least 2x the group's security strength): 256 bits
for the 2048-bit groups, 320 bits for ffdhe3072, drawn from ``secrets``/``os.urandom`` (or an
injected ``urandom`` callable for deterministic tests). Private keys are plain bytes so that
they can be Shamir-shared (:mod:`securevfl.privacy.primitives.shamir`) for dropout recovery.
gmpy2 is imported only when an FFDH group is built, so X25519 users never load it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from securevfl.errors import ConfigError, CryptoError

Urandom = Callable[[int], bytes]

# RFC 7919 appendix A.1 / A.2 and RFC 3526 sec. 3. The tests re-derive each prime from the
# closed forms the RFCs publish (digits of e and pi) and check p and (p-1)/2 are prime.
_FFDHE2048_P = int(
    "FFFFFFFFFFFFFFFFADF85458A2BB4A9AAFDC5620273D3CF1D8B9C583CE2D3695A9E13641146433FBCC939DCE249B"
    "3EF97D2FE363630C75D8F681B202AEC4617AD3DF1ED5D5FD65612433F51F5F066ED0856365553DED1AF3B557135E"
    "7F57C935984F0C70E0E68B77E2A689DAF3EFE8721DF158A136ADE73530ACCA4F483A797ABC0AB182B324FB61D108"
    "A94BB2C8E3FBB96ADAB760D7F4681D4F42A3DE394DF4AE56EDE76372BB190B07A7C8EE0A6D709E02FCE1CDF7E2EC"
    "C03404CD28342F619172FE9CE98583FF8E4F1232EEF28183C3FE3B1B4C6FAD733BB5FCBC2EC22005C58EF1837D16"
    "83B2C6F34A26C1B2EFFA886B423861285C97FFFFFFFFFFFFFFFF",
    16,
)
_FFDHE3072_P = int(
    "FFFFFFFFFFFFFFFFADF85458A2BB4A9AAFDC5620273D3CF1D8B9C583CE2D3695A9E13641146433FBCC939DCE249B"
    "3EF97D2FE363630C75D8F681B202AEC4617AD3DF1ED5D5FD65612433F51F5F066ED0856365553DED1AF3B557135E"
    "7F57C935984F0C70E0E68B77E2A689DAF3EFE8721DF158A136ADE73530ACCA4F483A797ABC0AB182B324FB61D108"
    "A94BB2C8E3FBB96ADAB760D7F4681D4F42A3DE394DF4AE56EDE76372BB190B07A7C8EE0A6D709E02FCE1CDF7E2EC"
    "C03404CD28342F619172FE9CE98583FF8E4F1232EEF28183C3FE3B1B4C6FAD733BB5FCBC2EC22005C58EF1837D16"
    "83B2C6F34A26C1B2EFFA886B4238611FCFDCDE355B3B6519035BBC34F4DEF99C023861B46FC9D6E6C9077AD91D26"
    "91F7F7EE598CB0FAC186D91CAEFE130985139270B4130C93BC437944F4FD4452E2D74DD364F2E21E71F54BFF5CAE"
    "82AB9C9DF69EE86D2BC522363A0DABC521979B0DEADA1DBF9A42D5C4484E0ABCD06BFA53DDEF3C1B20EE3FD59D7C"
    "25E41D2B66C62E37FFFFFFFFFFFFFFFF",
    16,
)
_MODP2048_P = int(
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A08798E34"
    "04DDEF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6"
    "F406B7EDEE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF0598DA48361C55D39A6916"
    "3FA8FD24CF5F83655D23DCA3AD961C62F356208552BB9ED529077096966D670C354E4ABC9804F1746C08CA18217C"
    "32905E462E36CE3BE39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9DE2BCBF6955817183995497CEA95"
    "6AE515D2261898FA051015728E5A8AACAA68FFFFFFFFFFFFFFFF",
    16,
)


def _fingerprint(public_bytes: bytes) -> str:
    return hashlib.sha256(public_bytes).hexdigest()[:12]


@dataclass(frozen=True)
class PublicKey:
    """A serialisable public key of one scheme: ``data`` is the raw encoding."""

    scheme: str
    data: bytes

    def __repr__(self) -> str:
        return f"PublicKey({self.scheme}, fp={_fingerprint(self.data)})"

    def to_bytes(self) -> bytes:
        """Scheme-tagged wire form: ``len(scheme) || scheme || data``."""
        name = self.scheme.encode("ascii")
        return bytes([len(name)]) + name + self.data

    @classmethod
    def from_bytes(cls, blob: bytes, validate: bool = True) -> PublicKey:
        """Inverse of :meth:`to_bytes`; the value is validated by :func:`load_public_key`.

        ``validate=False`` skips only the (costly, FFDH) subgroup check, for keys that this
        process already validated once; scheme and length are still checked.
        """
        if not blob:
            raise CryptoError("empty public key")
        n = blob[0]
        try:
            scheme = blob[1 : 1 + n].decode("ascii")
        except UnicodeDecodeError as exc:
            raise CryptoError("malformed public key") from exc
        if validate:
            return load_public_key(scheme, blob[1 + n :])
        if scheme not in KEY_AGREEMENT_NAMES:
            raise CryptoError("public key of an unknown scheme")
        data = bytes(blob[1 + n :])
        if len(data) != create_key_agreement(scheme).public_bytes:
            raise CryptoError("public key has the wrong length")
        return cls(scheme, data)


@dataclass(frozen=True)
class KeyPair:
    """A key pair; the private key is raw bytes (never printed) so it can be Shamir-shared.

    ``handle`` optionally keeps the backend's parsed private key (X25519: the
    ``X25519PrivateKey``), so exchanges need not parse the bytes again: loading an X25519
    private key costs a scalar multiplication, as much as an exchange. It is the same secret in
    another form, never printed and ignored by ``==``.
    """

    scheme: str
    private: bytes = field(repr=False)
    public: PublicKey
    handle: Any = field(default=None, repr=False, compare=False)

    def __repr__(self) -> str:
        return f"KeyPair({self.scheme}, fp={_fingerprint(self.public.data)})"


def _x25519_handle(private: bytes | KeyPair) -> X25519PrivateKey:
    """The parsed X25519 private key: a key pair's cached handle, else parsed from the bytes."""
    if isinstance(private, KeyPair):
        if private.scheme != "x25519":
            raise CryptoError("private key of another scheme")
        if isinstance(private.handle, X25519PrivateKey):
            return private.handle
        private = private.private
    return X25519PrivateKey.from_private_bytes(private)


class X25519Agreement:
    """RFC 7748 X25519 via ``cryptography``."""

    name = "x25519"
    private_bytes = 32
    public_bytes = 32

    def generate(self, urandom: Urandom | None = None) -> KeyPair:
        """Fresh key pair; ``urandom`` (default ``os.urandom``) supplies the 32 secret bytes."""
        return self.keypair_from_private((urandom or os.urandom)(32))

    def keypair_from_private(self, private: bytes) -> KeyPair:
        """Rebuild a key pair from its 32 private bytes (e.g. after Shamir reconstruction)."""
        if len(private) != 32:
            raise CryptoError("an X25519 private key is 32 bytes")
        key = X25519PrivateKey.from_private_bytes(private)
        raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        return KeyPair(self.name, bytes(private), PublicKey(self.name, raw), key)

    def load_public(self, data: bytes) -> PublicKey:
        """Validate a received 32-byte u-coordinate."""
        if len(data) != 32:
            raise CryptoError("an X25519 public key is 32 bytes")
        return PublicKey(self.name, bytes(data))

    def exchange(self, private: bytes, peer: PublicKey, validate: bool = True) -> bytes:
        """Shared secret X25519(private, peer); all-zero results (small-order peers) rejected.

        ``validate`` is accepted for interface symmetry; X25519 needs no subgroup check.
        """
        if peer.scheme != self.name:
            raise CryptoError("public key of another scheme")
        try:
            secret = X25519PrivateKey.from_private_bytes(private).exchange(
                X25519PublicKey.from_public_bytes(peer.data)
            )
        except ValueError as exc:  # cryptography rejects the all-zero output (RFC 7748 sec. 6.1)
            raise CryptoError("X25519 exchange failed") from exc
        if secret == bytes(32):
            raise CryptoError("X25519 exchange failed")
        return secret

    def exchange_many(
        self, private: bytes | KeyPair, peers: Sequence[PublicKey], validate: bool = True
    ) -> list[bytes]:
        """Shared secrets with several peers, parsing the private key at most once.

        ``private`` may be a :class:`KeyPair` from this scheme, whose parsed key is then reused.
        """
        if any(peer.scheme != self.name for peer in peers):
            raise CryptoError("public key of another scheme")
        key = _x25519_handle(private)
        out = []
        for peer in peers:
            try:
                secret = key.exchange(X25519PublicKey.from_public_bytes(peer.data))
            except ValueError as exc:
                raise CryptoError("X25519 exchange failed") from exc
            if secret == bytes(32):
                raise CryptoError("X25519 exchange failed")
            out.append(secret)
        return out


class FFDHAgreement:
    """Finite-field DH in a safe-prime group with generator 2, computed with gmpy2 ``powmod``."""

    def __init__(self, name: str, prime: int, exponent_bits: int):
        import gmpy2  # imported here: X25519 users never load it

        self._powmod: Callable[[Any, Any, Any], Any] = gmpy2.powmod
        self._mpz: Callable[[int], Any] = gmpy2.mpz
        self.name = name
        self.p = self._mpz(prime)
        self.q = (self.p - 1) // 2
        self.g = self._mpz(2)
        self.exponent_bits = exponent_bits
        self.private_bytes = exponent_bits // 8
        self.element_bytes = (prime.bit_length() + 7) // 8
        self.public_bytes = self.element_bytes

    def generate(self, urandom: Urandom | None = None) -> KeyPair:
        """Fresh key pair with a uniformly random ``exponent_bits`` exponent (>= 2)."""
        draw = urandom or os.urandom
        while True:
            private = draw(self.private_bytes)
            if int.from_bytes(private, "big") >= 2:
                return self.keypair_from_private(private)

    def keypair_from_private(self, private: bytes) -> KeyPair:
        """Rebuild a key pair from its big-endian exponent bytes."""
        if len(private) != self.private_bytes:
            raise CryptoError(f"a {self.name} private exponent is {self.private_bytes} bytes")
        x = self._mpz(int.from_bytes(private, "big"))
        if x < 2:
            raise CryptoError("degenerate private exponent")
        y = self._powmod(self.g, x, self.p)
        return KeyPair(self.name, bytes(private), PublicKey(self.name, self._to_bytes(y)))

    def _to_bytes(self, value: Any) -> bytes:
        return int(value).to_bytes(self.element_bytes, "big")

    def load_public(self, data: bytes) -> PublicKey:
        """Validate a received public value: 1 < y < p - 1 and y^q = 1 (prime-order subgroup)."""
        if len(data) != self.element_bytes:
            raise CryptoError("public value has the wrong length")
        y = self._mpz(int.from_bytes(data, "big"))
        if not 1 < y < self.p - 1 or self._powmod(y, self.q, self.p) != 1:
            raise CryptoError("public value is not in the prime-order subgroup")
        return PublicKey(self.name, bytes(data))

    def exchange(self, private: bytes, peer: PublicKey, validate: bool = True) -> bytes:
        """Shared secret y^x mod p as fixed-length big-endian bytes.

        The subgroup check (a full-size exponentiation, as costly as the exchange itself) runs
        unless ``validate=False``, which callers may pass for keys that already went through
        :meth:`load_public`; the range check 1 < y < p - 1 always runs.
        """
        if peer.scheme != self.name:
            raise CryptoError("public key of another scheme")
        if validate:
            self.load_public(peer.data)
        y = int.from_bytes(peer.data, "big")
        if len(peer.data) != self.element_bytes or not 1 < y < self.p - 1:
            raise CryptoError("public value out of range")
        z = self._powmod(self._mpz(y), self._mpz(int.from_bytes(private, "big")), self.p)
        if z <= 1:
            raise CryptoError("degenerate shared secret")
        return self._to_bytes(z)

    def exchange_many(
        self, private: bytes | KeyPair, peers: Sequence[PublicKey], validate: bool = True
    ) -> list[bytes]:
        """Shared secrets with several peers (same checks as :meth:`exchange`)."""
        raw = private.private if isinstance(private, KeyPair) else private
        return [self.exchange(raw, peer, validate) for peer in peers]


KeyAgreement = X25519Agreement | FFDHAgreement

_FACTORIES: MappingProxyType[str, Callable[[], KeyAgreement]] = MappingProxyType(
    {
        "x25519": X25519Agreement,
        "ffdh2048": lambda: FFDHAgreement("ffdh2048", _FFDHE2048_P, 256),
        "ffdh3072": lambda: FFDHAgreement("ffdh3072", _FFDHE3072_P, 320),
        "modp2048": lambda: FFDHAgreement("modp2048", _MODP2048_P, 256),
    }
)
KEY_AGREEMENT_NAMES: tuple[str, ...] = tuple(_FACTORIES)


def create_key_agreement(name: str) -> KeyAgreement:
    """Key agreement scheme by name; unknown names raise :class:`ConfigError` listing valid ones."""
    try:
        factory = _FACTORIES[name]
    except (KeyError, TypeError):
        raise ConfigError(
            f"unknown key agreement {name!r}; valid names: {', '.join(KEY_AGREEMENT_NAMES)}"
        ) from None
    return factory()


def load_public_key(scheme: str, data: bytes) -> PublicKey:
    """Validate and wrap a received public key of ``scheme``."""
    try:
        agreement = create_key_agreement(scheme)
    except ConfigError as exc:
        raise CryptoError("public key of an unknown scheme") from exc
    return agreement.load_public(data)


__all__ = [
    "KEY_AGREEMENT_NAMES",
    "FFDHAgreement",
    "KeyAgreement",
    "KeyPair",
    "PublicKey",
    "X25519Agreement",
    "create_key_agreement",
    "load_public_key",
]

"""Additively homomorphic encryption (Paillier) for securevfl.

Two interchangeable backends behind :class:`PaillierBackend`, picked by name:

* ``"phe"``: python-paillier, the reference;
* ``"fast"``: gmpy2, g = n + 1, CRT decryption, Damgård–Jurik–Nielsen short-exponent
  randomness from a fixed-base table, packing, process-parallel encryption/decryption.

Typical use::

    pk, sk = generate_keypair(2048)
    backend = create_backend("fast", pk, sk)
    enc = backend.encrypt(np.array([0.5, -1.25]))
    total = (enc * 3 + enc).sum()
    wire = total.to_bytes()                      # re-randomised before it leaves
    value = backend.decrypt(EncryptedTensor.from_bytes(wire, backend))

:mod:`.ring_masks` adds uniform Z_n masks to a ciphertext tensor, so a key holder can decrypt
a value without learning it (hetero-lr's arbiter). See docs/paillier.md for security
parameters, packing and measured throughput.
"""

from .encoding import DEFAULT_FRAC_BITS
from .fast_backend import FastBackend, default_r_bits
from .keys import (
    PaillierPrivateKey,
    PaillierPublicKey,
    generate_keypair,
    key_fingerprint,
)
from .packing import PackingLayout, PackingSpec
from .phe_backend import PheBackend, from_phe_keys, to_phe_keys
from .registry import available_backends, create_backend
from .ring_masks import add_ring_masks, draw_ring_masks, remove_ring_masks
from .tensor import EncryptedTensor, PaillierBackend

__all__ = [
    "DEFAULT_FRAC_BITS",
    "EncryptedTensor",
    "FastBackend",
    "PackingLayout",
    "PackingSpec",
    "PaillierBackend",
    "PaillierPrivateKey",
    "PaillierPublicKey",
    "PheBackend",
    "add_ring_masks",
    "available_backends",
    "create_backend",
    "default_r_bits",
    "draw_ring_masks",
    "from_phe_keys",
    "generate_keypair",
    "key_fingerprint",
    "remove_ring_masks",
    "to_phe_keys",
]

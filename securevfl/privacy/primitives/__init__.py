"""Cryptographic primitives of the privacy layer: pure functions, no I/O, no protocol state.

* :mod:`.key_agreement` — X25519 (default) and finite-field DH; ``create_key_agreement(name)``.
* :mod:`.kdf` — HKDF-SHA256 with length-prefixed, domain-separated ``info`` fields.
* :mod:`.prg` — AES-CTR PRG expanding a seed into uint64 masks for (round, step).
* :mod:`.fixed_point` — exact, overflow-checked encoding of reals into Z_2^64.
* :mod:`.shamir` — Shamir secret sharing over GF(2^521 - 1).
* :mod:`.masking` — pairwise masks that cancel in the sum: the one sign rule.
* :mod:`.wire` — typed readers of received message fields (malformed: ``ProtocolError``).

Nothing here imports gmpy2 at module level: FFDH loads it when an FFDH group is built.
"""

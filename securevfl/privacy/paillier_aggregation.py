"""``paillier``: secure aggregation of passive vectors under one passive party's Paillier key.

A drop-in alternative to EASTER's DH blinding (:mod:`securevfl.privacy.aggregation`, scheme
``dh``). Protocol (tags ``agg.pa.*``; docs/paillier_aggregation.md):

Setup (once). The active party names the *key holder* (by default the first passive party in
sorted order). The key holder generates a Paillier key pair (2048-bit n by default, ~112-bit
security per NIST SP 800-57) and sends the public key to the active party, which relays it to the
other passive parties (keys travel through the active party, as the paper's DH keys do).

Each round.

1. Every surviving passive party fixed-point encodes its vector (``round(x * 2^frac_bits)``, the
   same rounding as ``dh``), *packs* many values per plaintext with headroom for summing all
   passive parties (:class:`~securevfl.privacy.paillier.PackingLayout`) and sends the Paillier
   ciphertexts to the active party.
2. The active party multiplies the survivors' ciphertexts (homomorphic sum of the packed
   plaintexts, m < 2^(|n|-1) < n), adds a fresh uniform mask r in Z_n per ciphertext under
   encryption (``c * (1 + r n)``), re-randomises, and sends the result to the key holder.
3. The key holder decrypts and returns ``(m + r) mod n``. Since r is uniform and used once, this
   is uniform in Z_n whatever m is (one-time pad over Z_n; perfect hiding, as in
   :mod:`securevfl.methods._hetero_lr_masking`).
4. The active party subtracts r mod n (recovering m exactly, since m < n), unpacks the slots,
   removes the packing offsets and decodes the sum.

Trust: the active party sees only semantically secure ciphertexts, the key holder only uniformly
masked sums; nobody learns a single passive party's vector unless the active party and the key
holder collude (then both the ciphertexts and the key are in one hand), or unless only one passive
party contributes to a round (then the sum *is* its vector: we require at least two survivors).

Dropouts. A dropped passive party other than the key holder is simply absent from the product: no
recovery round and no extra messages. The key holder is the scheme's single point of failure: in a
deployment its loss ends the session (nobody else can decrypt). The simulation of EASTER draws
drop sets over all passive parties, so a key holder drawn as "dropped" withholds its own vector
for that round but keeps serving decryptions (modelled as a key service running apart from its
training process); docs/paillier_aggregation.md states this.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

import numpy as np

from securevfl.errors import ConfigError, ProtocolError
from securevfl.federation.runtime import PartyContext
from securevfl.privacy.aggregation import (
    ActiveAggregator,
    AggregateResult,
    AggregationConfig,
    AggregationScheme,
    PassiveAggregator,
    register_aggregation,
)
from securevfl.privacy.paillier import (
    FastBackend,
    PackingLayout,
    PackingSpec,
    PaillierPrivateKey,
    PaillierPublicKey,
    generate_keypair,
)
from securevfl.privacy.secagg import InsufficientSurvivorsError

RandBelow = Callable[[int], int]
RandBits = Callable[[int], int]

#: Fewest contributors a round may have: with one, the sum would be that party's vector.
MIN_SURVIVORS = 2


@dataclass(frozen=True)
class PaillierAggregationConfig:
    """Parameters of the ``paillier`` scheme (beyond :class:`AggregationConfig`).

    ``key_bits``: Paillier modulus size (2048 or 3072; smaller only with
    ``insecure_allow_small_key``, for tests). ``key_holder``: the passive party that generates
    the key and decrypts masked sums (None: the first passive party in sorted order).
    ``max_abs_value``: largest |x| a party may contribute (sets the slot width; larger values
    raise EncodingOverflowError). ``workers``: processes for encryption/decryption (1: in-process).
    ``randbits`` / ``randbelow`` may be injected for deterministic tests (default ``secrets``).
    """

    key_bits: int = 2048
    insecure_allow_small_key: bool = False
    key_holder: str | None = None
    max_abs_value: float = float(2**20)
    workers: int = 1
    randbits: RandBits | None = field(default=None, repr=False, compare=False)
    randbelow: RandBelow | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.key_bits, int) or self.key_bits < 512:
            raise ConfigError(f"key_bits must be an int >= 512, got {self.key_bits!r}")
        if not self.max_abs_value > 0:
            raise ConfigError(f"max_abs_value must be > 0, got {self.max_abs_value!r}")
        if self.workers < 1:
            raise ConfigError(f"workers must be >= 1, got {self.workers!r}")


def packing_layout(n_bits: int, n_passives: int, frac_bits: int, max_abs_value: float) -> PackingLayout:
    """The agreed packing: slots wide enough for ``n_passives`` summands of |x| <= max_abs_value."""
    spec = PackingSpec.fitting(max_abs_value, max(1, n_passives), frac_bits)
    return PackingLayout.for_key(spec, n_bits)


def _ct_to_bytes(ciphertexts: Sequence[int], width: int) -> bytes:
    return b"".join(int(c).to_bytes(width, "big") for c in ciphertexts)


def _ct_from_bytes(data: bytes, width: int, modulus: int) -> list[int]:
    if len(data) % width:
        raise ProtocolError("ciphertext bytes are not a whole number of ciphertexts")
    out = [int.from_bytes(data[i : i + width], "big") for i in range(0, len(data), width)]
    if any(not 0 < c < modulus for c in out):
        raise ProtocolError("ciphertext outside Z_{n^2}")
    return out


def _widths(public_key: PaillierPublicKey) -> tuple[int, int]:
    """Bytes of one plaintext residue (mod n) and one ciphertext (mod n^2)."""
    return (public_key.n.bit_length() + 7) // 8, (public_key.nsquare.bit_length() + 7) // 8


class _PaillierPassive(PassiveAggregator):
    def __init__(self, config: AggregationConfig, pconfig: PaillierAggregationConfig) -> None:
        self.config, self.pconfig = config, pconfig
        self.backend: FastBackend | None = None
        self.holder: str | None = None
        self.round = 0

    def setup(self, ctx: PartyContext) -> None:
        session = ctx.recv(ctx.active, "agg.pa.session")
        self.holder = str(session["holder"])
        n_passives = int(session["n_passives"])
        private: PaillierPrivateKey | None = None
        if ctx.name == self.holder:
            with ctx.meter.crypto("secagg.paillier_keygen"):
                public, private = generate_keypair(
                    self.pconfig.key_bits,
                    insecure_allow_small_key=self.pconfig.insecure_allow_small_key,
                    randbits=self.pconfig.randbits,
                )
            ctx.send(ctx.active, "agg.pa.public_key", public.to_bytes())
        else:
            public = PaillierPublicKey.from_bytes(bytes(ctx.recv(ctx.active, "agg.pa.public_key")))
        with ctx.meter.crypto("secagg.paillier_setup"):  # builds the fixed-base table once
            self.backend = FastBackend(public, private, randbits=self.pconfig.randbits, workers=self.pconfig.workers)
            _ = self.backend.engine.table
        self.layout = packing_layout(public.bits, n_passives, self.config.frac_bits, self.pconfig.max_abs_value)
        self.n_bytes, self.ct_bytes = _widths(public)

    def contribute(self, ctx: PartyContext, values: np.ndarray) -> None:
        if self.backend is None:
            raise ProtocolError("contribute before setup")
        values = np.asarray(values, dtype=np.float64)
        with ctx.meter.crypto("secagg.paillier_encode"):
            plaintexts, _ = self.layout.pack_rows(values.reshape(1, -1))
        with ctx.meter.crypto("secagg.paillier_encrypt"):
            ciphertexts = _ct_to_bytes(self.backend.encrypt_raw(plaintexts), self.ct_bytes)
        ctx.send(
            ctx.active,
            "agg.pa.input",
            {"party": ctx.name, "round": self.round, "shape": list(values.shape), "ct": ciphertexts},
        )
        self._serve(ctx)
        self.round += 1

    def drop(self, ctx: PartyContext) -> None:
        if self.backend is None:
            raise ProtocolError("drop before setup")
        self._serve(ctx)  # the key holder's key service stays up (see the module docstring)
        self.round += 1

    def _serve(self, ctx: PartyContext) -> None:
        """Key holder only: decrypt this round's masked sum and return the residues."""
        if ctx.name != self.holder:
            return
        message = ctx.recv(ctx.active, "agg.pa.masked")
        if int(message["round"]) != self.round:
            raise ProtocolError(f"masked sum for round {message['round']}, expected {self.round}")
        ciphertexts = _ct_from_bytes(bytes(message["ct"]), self.ct_bytes, self.backend.public_key.nsquare)
        with ctx.meter.crypto("secagg.paillier_decrypt"):
            residues = self.backend.decrypt_raw(ciphertexts)
        ctx.send(ctx.active, "agg.pa.decrypted", {"round": self.round, "plain": _ct_to_bytes(residues, self.n_bytes)})


class _PaillierActive(ActiveAggregator):
    def __init__(self, config: AggregationConfig, pconfig: PaillierAggregationConfig) -> None:
        super().__init__()
        self.config, self.pconfig = config, pconfig
        self.backend: FastBackend | None = None
        self.round = 0

    def setup(self, ctx: PartyContext, parties: Sequence[str]) -> None:
        self.parties = tuple(sorted(parties))
        self.holder = self.pconfig.key_holder or self.parties[0]
        if self.holder not in self.parties:
            raise ConfigError(f"key holder {self.holder!r} is not a passive party {self.parties}")
        ctx.broadcast(self.parties, "agg.pa.session", {"holder": self.holder, "n_passives": len(self.parties)})
        key_bytes = bytes(ctx.recv(self.holder, "agg.pa.public_key"))
        ctx.broadcast([p for p in self.parties if p != self.holder], "agg.pa.public_key", key_bytes)
        public = PaillierPublicKey.from_bytes(key_bytes)
        with ctx.meter.crypto("secagg.paillier_setup"):
            self.backend = FastBackend(public, randbits=self.pconfig.randbits, workers=self.pconfig.workers)
            _ = self.backend.engine.table
        self.layout = packing_layout(public.bits, len(self.parties), self.config.frac_bits, self.pconfig.max_abs_value)
        self.n_bytes, self.ct_bytes = _widths(public)

    def aggregate(self, ctx: PartyContext, dropped: Collection[str] = ()) -> AggregateResult:
        if self.backend is None:
            raise ProtocolError("aggregate before setup")
        gone = set(dropped)
        alive = tuple(p for p in self.parties if p not in gone)
        if len(alive) < MIN_SURVIVORS:
            raise InsufficientSurvivorsError(
                f"{len(alive)} passive parties left in round {self.round}; the paillier scheme needs "
                f"{MIN_SURVIVORS} (a single contribution would reveal that party's vector)"
            )
        public = self.backend.public_key
        shape, total_ct = None, None
        for p in alive:
            message = ctx.recv(p, "agg.pa.input")
            if not isinstance(message, dict) or message.get("party") != p:
                raise ProtocolError(f"input from {p} is malformed or misattributed")
            if int(message["round"]) != self.round:
                raise ProtocolError(f"input of {p} is for round {message['round']}, not {self.round}")
            if shape is None:
                shape = tuple(int(s) for s in message["shape"])
            elif tuple(int(s) for s in message["shape"]) != shape:
                raise ProtocolError(f"input of {p} has shape {message['shape']}, expected {shape}")
            ciphertexts = _ct_from_bytes(bytes(message["ct"]), self.ct_bytes, public.nsquare)
            with ctx.meter.crypto("secagg.paillier_add"):
                total_ct = ciphertexts if total_ct is None else self.backend.add_raw(total_ct, ciphertexts)
        length = int(np.prod(shape))
        if len(total_ct) != self.layout.n_ciphertexts(length):
            raise ProtocolError(f"{len(total_ct)} ciphertexts for {length} values")
        with ctx.meter.crypto("secagg.paillier_mask"):
            randbelow = self.pconfig.randbelow or secrets.randbelow
            masks = [int(randbelow(public.n)) for _ in total_ct]
            masked = self.backend.rerandomize_raw(self.backend.add_plain_raw(total_ct, masks))
        ctx.send(self.holder, "agg.pa.masked", {"round": self.round, "ct": _ct_to_bytes(masked, self.ct_bytes)})
        reply = ctx.recv(self.holder, "agg.pa.decrypted")
        if int(reply["round"]) != self.round:
            raise ProtocolError(f"decryption for round {reply['round']}, expected {self.round}")
        plain = bytes(reply["plain"])
        if len(plain) != len(masks) * self.n_bytes:
            raise ProtocolError("decrypted reply has the wrong length")
        with ctx.meter.crypto("secagg.paillier_unmask"):
            residues = [int.from_bytes(plain[i : i + self.n_bytes], "big") for i in range(0, len(plain), self.n_bytes)]
            packed = [(d - r) % public.n for d, r in zip(residues, masks, strict=True)]
            ints = self.layout.unpack(packed, terms=len(alive), length=length)
            total = np.asarray(ints, dtype=np.float64).reshape(shape) / float(1 << self.config.frac_bits)
        self.round += 1
        self.stats.rounds += 1
        self.stats.dropouts += len(self.parties) - len(alive)
        return AggregateResult(total, alive, tuple(p for p in self.parties if p in gone))


@register_aggregation
class PaillierAggregation(AggregationScheme):
    """Packed Paillier sum at the active party, masked in Z_n, decrypted by one passive key holder."""

    name = "paillier"
    summary = "Paillier (packed) sum under a passive key holder's key; active masks in Z_n before decryption"

    def __init__(self, config: AggregationConfig, paillier: PaillierAggregationConfig | None = None) -> None:
        super().__init__(config)
        self.paillier = paillier or PaillierAggregationConfig()

    def passive(self) -> PassiveAggregator:
        return _PaillierPassive(self.config, self.paillier)

    def active(self) -> ActiveAggregator:
        return _PaillierActive(self.config, self.paillier)

    def max_dropouts(self, n_passives: int) -> int:
        return max(n_passives - MIN_SURVIVORS, 0)

    def validate(self, n_passives: int) -> None:
        if n_passives < MIN_SURVIVORS:
            raise ConfigError(
                "secure aggregation needs at least 2 passive parties "
                f"(got {n_passives}); with one the sum is its vector — use secagg=none"
            )


__all__ = [
    "MIN_SURVIVORS",
    "PaillierAggregation",
    "PaillierAggregationConfig",
    "packing_layout",
]

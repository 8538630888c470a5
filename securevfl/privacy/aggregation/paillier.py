"""``paillier``: secure aggregation of passive vectors under one passive party's Paillier key.

A drop-in alternative to EASTER's DH blinding (scheme ``dh``). Protocol (tags ``agg.pa.*``; the
messages and their validating parsers are :mod:`.paillier_wire`; docs/paillier_aggregation.md has
the design argument):

Setup (once). The active party names the *key holder* H (by default the first passive party in
sorted order), the passive parties and a fresh session id. H generates a Paillier key pair
(2048-bit n by default, ~112-bit security per NIST SP 800-57) and sends the public key to the
active party, which relays it to the other passive parties; H also sends each of them, over the
direct passive-passive link, the SHA-256 digest of the key. A passive party refuses (ProtocolError
naming the relay) a relayed key of another size than configured, an invalid key
(:class:`~securevfl.privacy.paillier.PaillierPublicKey` validates n and h_s) or one whose digest
is not H's: a substituted key would let the relay decrypt.

Each round.

1. Every contributing passive party i != H fixed-point encodes its vector (``round(x * 2^f)``,
   the same rounding as ``dh``), *packs* many values per plaintext with headroom for summing all
   passive parties (:class:`~securevfl.privacy.paillier.PackingLayout`), draws a fresh uniform
   mask r_i in Z_n per plaintext (``secrets.randbelow``), and sends the active party
   ``Enc((m_i + r_i) mod n)`` *and* r_i. It sends H directly a SHA-256 commitment binding the
   session, the key, the round and its name to the ciphertext bytes.
2. The active party forwards the individual ciphertexts (not a sum) of the contributors it names
   to H.
3. H checks every forwarded ciphertext against the commitment it received from that party, and
   refuses (ProtocolError naming the party) a mismatch, a duplicate or unknown name, or fewer
   than ``MIN_SURVIVORS`` distinct contributions (H itself counts when it contributes). It forms
   the homomorphic sum itself, decrypts, adds its own packed vector m_H in the clear (H never
   encrypts its own contribution) and returns ``D = (sum_i (m_i + r_i) + m_H) mod n``.
4. The active party subtracts ``sum_i r_i`` mod n (recovering ``sum m`` exactly, since the packed
   sum is < n), unpacks the slots, removes the packing offsets and decodes the sum.

Trust: the active party holds ciphertexts and masks, never a decryption of anything but a sum of
at least two committed contributions of this round; H decrypts only uniformly masked values
(``m_i + r_i`` with r_i uniform, used once: a one-time pad over Z_n). This holds against an active
party that *deviates* (forwards one party's ciphertext as two parties', forges a "mask"
ciphertext ``Enc(r) * prod ct_j^-1``, replays a ciphertext of an earlier round, relays another
key), not only against an honest-but-curious one; the active party can still choose *which*
>= 2 contributors a round's sum covers. Nobody learns a single vector unless the active party and
H collude.

Dropouts. A dropped passive party sends nothing; the active party names the round's contributors
to H, and H waits for commitments from exactly those parties (each contributor sent its commitment
before the active party could name it, so no honest run blocks). A stale commitment (of an earlier
round, from a contributor the active party left out) is skipped. H is the scheme's single point
of failure: in a deployment its loss ends the session. The simulation of EASTER draws drop sets
over all passive parties, so a key holder drawn as "dropped" withholds its own vector for that
round but keeps serving decryptions (a key service running apart from its training process).

Options (:class:`PaillierOptions`, passed through the registry, e.g.
``create_aggregation("paillier", config, {"key_bits": 3072, "key_holder": "passive1"})``):
``key_bits``, ``insecure_allow_small_key``, ``key_holder``, ``max_abs_value``, ``workers``.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from securevfl.errors import ConfigError, EncodingOverflowError, ProtocolError
from securevfl.privacy.aggregation.base import (
    ActiveAggregator,
    AggregateResult,
    AggregationConfig,
    AggregationScheme,
    PassiveAggregator,
    require_passives,
)
from securevfl.privacy.aggregation.paillier_wire import (
    K_CT,
    K_DIGEST,
    K_HOLDER,
    K_MASKS,
    K_PARTIES,
    K_PARTY,
    K_PLAIN,
    K_ROUND,
    K_SESSION_ID,
    K_SHAPE,
    MIN_SURVIVORS,
    SESSION_ID_BYTES,
    TAG_COMMIT,
    TAG_DECRYPTED,
    TAG_FORWARD,
    TAG_INPUT,
    TAG_KEY_DIGEST,
    TAG_PUBLIC_KEY,
    TAG_SESSION,
    Commitment,
    Contribution,
    check_contributors,
    commitment_digest,
    ct_to_bytes,
    key_digest,
    packing_layout,
    parse_commit,
    parse_decrypted,
    parse_forward,
    parse_input,
    parse_key_digest,
    parse_public_key,
    parse_session,
    verify_forward,
    widths,
)
from securevfl.privacy.aggregation.registry import register_aggregation
from securevfl.privacy.paillier import FastBackend, PaillierPrivateKey, PaillierPublicKey, generate_keypair
from securevfl.privacy.secagg.config import InsufficientSurvivorsError
from securevfl.settings import setting

if TYPE_CHECKING:
    from securevfl.federation.runtime import PartyContext

RandBelow = Callable[[int], int]
RandBits = Callable[[int], int]


@dataclass(frozen=True)
class PaillierOptions:
    """Options of the ``paillier`` scheme (beyond the shared :class:`AggregationConfig`).

    ``key_bits``: Paillier modulus size (2048 or 3072; smaller only with
    ``insecure_allow_small_key``, for tests); a relayed key of another size is refused.
    ``key_holder``: the passive party that generates the key and decrypts (None: the first
    passive party in sorted order). ``max_abs_value``: largest |x| a party may contribute (sets the
    slot width; larger values raise EncodingOverflowError). ``workers``: processes for
    encryption/decryption (1: in-process). ``randbits`` / ``randbelow`` may be injected for
    deterministic tests (default ``secrets``; ``randbelow`` draws the masks r_i).
    """

    key_bits: int = setting(
        2048, help="Paillier modulus size: 2048 | 3072 (smaller, >= 512, only with insecure_allow_small_key).")
    insecure_allow_small_key: bool = setting(False, help="Allow a test-sized key; tests only.")
    key_holder: str | None = setting(
        None, help="Passive party that makes the key and decrypts the sums (unset: the first in sorted order).")
    max_abs_value: float = setting(
        float(2**20), help="Largest |x| a party may contribute (sets the slot width; larger values are refused).")
    workers: int = setting(1, help="Processes for encryption and decryption (1: in-process).")
    randbits: RandBits | None = field(default=None, repr=False, compare=False, metadata={"hook": True})
    randbelow: RandBelow | None = field(default=None, repr=False, compare=False, metadata={"hook": True})

    def __post_init__(self) -> None:
        if isinstance(self.key_bits, bool) or not isinstance(self.key_bits, int) or self.key_bits < 512:
            raise ConfigError(f"key_bits must be an int >= 512, got {self.key_bits!r}")
        if not isinstance(self.insecure_allow_small_key, bool):
            raise ConfigError(f"insecure_allow_small_key must be a bool, got {self.insecure_allow_small_key!r}")
        if self.key_holder is not None and (not isinstance(self.key_holder, str) or not self.key_holder):
            raise ConfigError(f"key_holder must be None or a party name, got {self.key_holder!r}")
        if (isinstance(self.max_abs_value, bool) or not isinstance(self.max_abs_value, int | float)
                or not self.max_abs_value > 0):
            raise ConfigError(f"max_abs_value must be a number > 0, got {self.max_abs_value!r}")
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise ConfigError(f"workers must be an int >= 1, got {self.workers!r}")


class PaillierPassive(PassiveAggregator):
    """A passive party: masks, encrypts and commits its vector; the key holder also decrypts sums."""

    def __init__(self, config: AggregationConfig, options: PaillierOptions) -> None:
        self.config, self.options = config, options
        self.backend: FastBackend | None = None
        self.round = 0
        self.own: list[int] | None = None  # key holder: its packed vector of the current round

    def setup(self, ctx: PartyContext) -> None:
        self.session = parse_session(ctx.recv(ctx.active, TAG_SESSION), ctx.active)
        if ctx.name not in self.session.parties:
            raise ProtocolError(f"session from {ctx.active} does not name {ctx.name}")
        self.holder = self.session.holder
        bits = self.options.key_bits
        private: PaillierPrivateKey | None = None
        if ctx.name == self.holder:
            with ctx.meter.crypto("secagg.paillier_keygen"):
                public, private = generate_keypair(
                    bits, insecure_allow_small_key=self.options.insecure_allow_small_key, randbits=self.options.randbits
                )
            self.key = key_digest(public)
            ctx.send(ctx.active, TAG_PUBLIC_KEY, public.to_bytes())
            for p in self.session.parties:  # direct link: a relay cannot substitute the key unseen
                if p != ctx.name:
                    ctx.send(p, TAG_KEY_DIGEST, {K_DIGEST: self.key})
        else:
            public = parse_public_key(ctx.recv(ctx.active, TAG_PUBLIC_KEY), ctx.active, bits)
            self.key = key_digest(public)
            if parse_key_digest(ctx.recv(self.holder, TAG_KEY_DIGEST), self.holder) != self.key:
                raise ProtocolError(
                    f"the public key relayed by {ctx.active} is not the key holder {self.holder}'s key"
                )
        with ctx.meter.crypto("secagg.paillier_setup"):  # builds the fixed-base table once
            self.backend = FastBackend(public, private, randbits=self.options.randbits, workers=self.options.workers)
            _ = self.backend.engine.table
        self.layout = packing_layout(public.bits, len(self.session.parties), self.config.frac_bits,
                                     self.options.max_abs_value)
        self.n_bytes, self.ct_bytes = widths(public)

    def contribute(self, ctx: PartyContext, values: np.ndarray) -> None:
        if self.backend is None:
            raise ProtocolError("contribute before setup")
        values = np.asarray(values, dtype=np.float64)
        with ctx.meter.crypto("secagg.paillier_encode"):
            plaintexts, _ = self.layout.pack_rows(values.reshape(1, -1))
        if ctx.name == self.holder:  # H adds its own vector in the clear after decrypting
            self.own = plaintexts
            self._serve(ctx)
            return
        n = self.backend.public_key.n
        with ctx.meter.crypto("secagg.paillier_mask"):
            randbelow = self.options.randbelow or secrets.randbelow
            masks = [int(randbelow(n)) % n for _ in plaintexts]
            masked = [(m + r) % n for m, r in zip(plaintexts, masks, strict=True)]
        with ctx.meter.crypto("secagg.paillier_encrypt"):
            ct = ct_to_bytes(self.backend.encrypt_raw(masked), self.ct_bytes)
        with ctx.meter.crypto("secagg.paillier_commit"):
            digest = commitment_digest(self.session.session_id, self.key, self.round, ctx.name, ct)
        ctx.send(self.holder, TAG_COMMIT, {K_PARTY: ctx.name, K_ROUND: self.round, K_DIGEST: digest})
        ctx.send(ctx.active, TAG_INPUT, {K_PARTY: ctx.name, K_ROUND: self.round, K_SHAPE: list(values.shape),
                                         K_CT: ct, K_MASKS: ct_to_bytes(masks, self.n_bytes)})
        self.round += 1

    def drop(self, ctx: PartyContext) -> None:
        if self.backend is None:
            raise ProtocolError("drop before setup")
        if ctx.name == self.holder:
            self.own = None
            self._serve(ctx)  # the key holder's key service stays up (see the module docstring)
        else:
            self.round += 1

    def _commitment(self, ctx: PartyContext, party: str) -> Commitment:
        """Next commitment of ``party`` for this round, skipping stale ones (left out earlier)."""
        while True:
            commitment = parse_commit(ctx.recv(party, TAG_COMMIT), party)
            if commitment.round == self.round:
                return commitment
            if commitment.round > self.round:  # named although it did not contribute this round
                raise ProtocolError(
                    f"round {self.round}: {party} is named but committed only to round {commitment.round}"
                )

    def _serve(self, ctx: PartyContext) -> None:
        """Key holder only: verify the forwarded ciphertexts, sum, decrypt, add its own, reply."""
        backend, own = self.backend, self.own
        if backend is None:
            raise ProtocolError("decryption requested before setup")
        forward = parse_forward(ctx.recv(ctx.active, TAG_FORWARD), ctx.active, self.round, self.session)
        check_contributors(forward, self.holder, own is not None)  # before waiting for commitments
        holder_named = self.holder in forward.parties and own is not None  # named without own: refused above
        commitments = {p: self._commitment(ctx, p) for p in forward.parties if p != self.holder}
        with ctx.meter.crypto("secagg.paillier_verify"):
            per_party = verify_forward(
                forward, commitments, session_id=self.session.session_id, key=self.key, holder=self.holder,
                holder_contributed=own is not None, public_key=backend.public_key,
                n_ciphertexts=len(own) if holder_named and own is not None else None,
            )
        with ctx.meter.crypto("secagg.paillier_add"):
            total = per_party[0]
            for cts in per_party[1:]:
                total = backend.add_raw(total, cts)
        with ctx.meter.crypto("secagg.paillier_decrypt"):
            residues = backend.decrypt_raw(total)
        if holder_named and own is not None:
            n = backend.public_key.n
            residues = [(d + m) % n for d, m in zip(residues, own, strict=True)]
        ctx.send(ctx.active, TAG_DECRYPTED, {K_ROUND: self.round, K_PLAIN: ct_to_bytes(residues, self.n_bytes)})
        self.own = None
        self.round += 1


class PaillierActive(ActiveAggregator):
    """The active party: relays the key, forwards ciphertexts to the key holder, unmasks the sum."""

    def __init__(self, config: AggregationConfig, options: PaillierOptions) -> None:
        super().__init__()
        self.config, self.options = config, options
        self.public: PaillierPublicKey | None = None
        self.round = 0

    def setup(self, ctx: PartyContext, parties: Sequence[str]) -> None:
        self.parties = tuple(sorted(parties))
        self.holder = self.options.key_holder or self.parties[0]
        if self.holder not in self.parties:
            raise ConfigError(f"key holder {self.holder!r} is not a passive party {self.parties}")
        session_id = (self.config.urandom or secrets.token_bytes)(SESSION_ID_BYTES)
        ctx.broadcast(self.parties, TAG_SESSION,
                      {K_HOLDER: self.holder, K_PARTIES: list(self.parties), K_SESSION_ID: session_id})
        key_bytes = ctx.recv(self.holder, TAG_PUBLIC_KEY)
        self.public = parse_public_key(key_bytes, self.holder, self.options.key_bits)
        ctx.broadcast([p for p in self.parties if p != self.holder], TAG_PUBLIC_KEY, key_bytes)
        self.layout = packing_layout(self.public.bits, len(self.parties), self.config.frac_bits,
                                     self.options.max_abs_value)

    def forward(self, ctx: PartyContext, contributors: Sequence[str], inputs: Mapping[str, Contribution]) -> None:
        """Send the key holder the individual ciphertexts of ``contributors`` (never a sum)."""
        ctx.send(self.holder, TAG_FORWARD, {K_ROUND: self.round, K_PARTIES: list(contributors),
                                            K_CT: {p: c.ct for p, c in inputs.items()}})

    def aggregate(self, ctx: PartyContext, dropped: Collection[str] = ()) -> AggregateResult:
        if self.public is None:
            raise ProtocolError("aggregate before setup")
        gone = set(dropped)
        alive = tuple(p for p in self.parties if p not in gone)
        if len(alive) < MIN_SURVIVORS:
            raise InsufficientSurvivorsError(
                f"{len(alive)} passive parties left in round {self.round}; the paillier scheme needs "
                f"{MIN_SURVIVORS} (a single contribution would reveal that party's vector)"
            )
        inputs = {p: parse_input(ctx.recv(p, TAG_INPUT), p, self.round, self.public, self.layout)
                  for p in alive if p != self.holder}
        shapes = {c.shape for c in inputs.values()}
        if len(shapes) != 1:
            raise ProtocolError(f"round {self.round}: inputs of different shapes {sorted(shapes)}")
        (shape,) = shapes
        length = math.prod(shape)
        count = self.layout.n_ciphertexts(length)
        self.forward(ctx, alive, inputs)
        residues = parse_decrypted(ctx.recv(self.holder, TAG_DECRYPTED), self.holder, self.round, count, self.public)
        n = self.public.n
        with ctx.meter.crypto("secagg.paillier_unmask"):
            mask_sum = [sum(col) % n for col in zip(*(c.masks for c in inputs.values()), strict=True)]
            packed = [(d - r) % n for d, r in zip(residues, mask_sum, strict=True)]
            try:
                ints = self.layout.unpack(packed, terms=len(alive), length=length)
            except EncodingOverflowError:  # unmasked with the masks sent: a ciphertext or a mask was tampered with
                raise ProtocolError(f"round {self.round}: the unmasked sum overflows its slots (a contribution "
                                    "or its mask does not belong to this round)") from None
            total = np.asarray(ints, dtype=np.float64).reshape(shape) / float(1 << self.config.frac_bits)
        self.round += 1
        self.stats.rounds += 1
        self.stats.dropouts += len(self.parties) - len(alive)
        return AggregateResult(total, alive, tuple(p for p in self.parties if p in gone))


@register_aggregation
class PaillierAggregation(AggregationScheme[PaillierOptions]):
    """Packed Paillier under a passive key holder's key; contributions masked in Z_n and committed."""

    name = "paillier"
    summary = "Paillier (packed) under a passive key holder's key; per-party Z_n masks, committed ciphertexts"
    Options = PaillierOptions

    def passive(self) -> PassiveAggregator:
        return PaillierPassive(self.config, self.options)

    def active(self) -> ActiveAggregator:
        return PaillierActive(self.config, self.options)

    def max_dropouts(self, n_passives: int) -> int:
        return max(n_passives - MIN_SURVIVORS, 0)

    def validate(self, n_passives: int) -> None:
        require_passives(n_passives, MIN_SURVIVORS)


__all__ = ["PaillierActive", "PaillierAggregation", "PaillierOptions", "PaillierPassive"]

"""``paillier``: secure aggregation of passive vectors under one passive party's Paillier key.

A drop-in alternative to EASTER's DH blinding (:mod:`securevfl.privacy.aggregation`, scheme
``dh``). Protocol (tags ``agg.pa.*``; docs/paillier_aggregation.md has the design argument):

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
"""

from __future__ import annotations

import hashlib
import math
import secrets
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from securevfl.errors import ConfigError, CryptoError, ProtocolError
from securevfl.federation.runtime import PartyContext
from securevfl.privacy.aggregation import (
    ActiveAggregator,
    AggregateResult,
    AggregationConfig,
    AggregationScheme,
    PassiveAggregator,
    register_aggregation,
)
from securevfl.privacy.kdf import encode_fields
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
SESSION_ID_BYTES = 16
DIGEST_BYTES = 32
MAX_SHAPE_DIMS = 8
_COMMIT_LABEL = "securevfl/agg/paillier/commit/v1"
_KEY_LABEL = "securevfl/agg/paillier/key/v1"

# Tags and named wire keys (one place, as Flower's secaggplus_constants).
TAG_SESSION = "agg.pa.session"
TAG_PUBLIC_KEY = "agg.pa.public_key"
TAG_KEY_DIGEST = "agg.pa.key_digest"
TAG_INPUT = "agg.pa.input"
TAG_COMMIT = "agg.pa.commit"
TAG_FORWARD = "agg.pa.forward"
TAG_DECRYPTED = "agg.pa.decrypted"
K_HOLDER, K_PARTIES, K_SESSION_ID = "holder", "parties", "session_id"
K_PARTY, K_ROUND, K_SHAPE, K_CT, K_MASKS = "party", "round", "shape", "ct", "masks"
K_DIGEST, K_PLAIN = "digest", "plain"


@dataclass(frozen=True)
class PaillierAggregationConfig:
    """Parameters of the ``paillier`` scheme (beyond :class:`AggregationConfig`).

    ``key_bits``: Paillier modulus size (2048 or 3072; smaller only with
    ``insecure_allow_small_key``, for tests); a relayed key of another size is refused.
    ``key_holder``: the passive party that generates the key and decrypts (None: the first
    passive party in sorted order). ``max_abs_value``: largest |x| a party may contribute (sets the
    slot width; larger values raise EncodingOverflowError). ``workers``: processes for
    encryption/decryption (1: in-process). ``randbits`` / ``randbelow`` may be injected for
    deterministic tests (default ``secrets``; ``randbelow`` draws the masks r_i).
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


# ============================================================================ pure core


@dataclass(frozen=True)
class Session:
    """What the active party announces once: the key holder, the passive parties, a session id."""

    holder: str
    parties: tuple[str, ...]
    session_id: bytes


@dataclass(frozen=True)
class Contribution:
    """Passive party -> active party, one round: ciphertexts of ``(m_i + r_i) mod n`` and the r_i."""

    party: str
    round: int
    shape: tuple[int, ...]
    ct: bytes = field(repr=False)
    masks: tuple[int, ...] = field(repr=False)


@dataclass(frozen=True)
class Commitment:
    """Passive party -> key holder, one round: SHA-256 over (session, key, round, party, ct)."""

    party: str
    round: int
    digest: bytes


@dataclass(frozen=True)
class Forward:
    """Active party -> key holder, one round: the named contributors and their ciphertext bytes."""

    round: int
    parties: tuple[str, ...]
    ct: Mapping[str, bytes] = field(repr=False)


def key_digest(public_key: PaillierPublicKey) -> bytes:
    """SHA-256 over the whole serialised public key (n and h_s)."""
    return hashlib.sha256(encode_fields([_KEY_LABEL, public_key.to_bytes()])).digest()


def commitment_digest(session_id: bytes, key: bytes, round_index: int, party: str, ct: bytes) -> bytes:
    """SHA-256 commitment binding session, key digest, round and party to the ciphertext bytes."""
    return hashlib.sha256(encode_fields([_COMMIT_LABEL, session_id, key, round_index, party, ct])).digest()


def ct_to_bytes(values: Sequence[int], width: int) -> bytes:
    """Fixed-width big-endian concatenation (ciphertexts mod n^2 or residues mod n)."""
    return b"".join(int(c).to_bytes(width, "big") for c in values)


def ints_from_bytes(data: bytes, width: int, modulus: int, what: str, src: str) -> list[int]:
    """Split fixed-width integers, each in [0, modulus); ProtocolError naming ``src`` otherwise."""
    if not isinstance(data, bytes) or len(data) % width:
        raise ProtocolError(f"{what} from {src} are not a whole number of {width}-byte values")
    out = [int.from_bytes(data[i : i + width], "big") for i in range(0, len(data), width)]
    if any(v >= modulus for v in out):
        raise ProtocolError(f"{what} from {src} lie outside [0, {modulus.bit_length()}-bit modulus)")
    return out


def widths(public_key: PaillierPublicKey) -> tuple[int, int]:
    """Bytes of one plaintext residue (mod n) and one ciphertext (mod n^2)."""
    return (public_key.n.bit_length() + 7) // 8, (public_key.nsquare.bit_length() + 7) // 8


def _mapping(message: Any, src: str, kind: str) -> Mapping:
    if not isinstance(message, Mapping):
        raise ProtocolError(f"{kind} from {src} is not a mapping")
    return message


def _field(message: Mapping, key: str, kind: type | tuple[type, ...], src: str, what: str) -> Any:
    value = message.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ProtocolError(f"{what} from {src}: field {key!r} is missing or of the wrong type")
    return value


def _round(message: Mapping, src: str, what: str, expected: int | None = None) -> int:
    value = _field(message, K_ROUND, int, src, what)
    if value < 0 or (expected is not None and value != expected):
        raise ProtocolError(f"{what} from {src} is for round {value}, expected {expected}")
    return value


def _party(message: Mapping, src: str, what: str) -> str:
    if message.get(K_PARTY) != src:
        raise ProtocolError(f"{what} from {src} is misattributed (party {message.get(K_PARTY)!r})")
    return src


def parse_session(message: Any, src: str) -> Session:
    """Validate the active party's session announcement."""
    m = _mapping(message, src, "session")
    holder = _field(m, K_HOLDER, str, src, "session")
    parties = _field(m, K_PARTIES, (list, tuple), src, "session")
    session_id = _field(m, K_SESSION_ID, bytes, src, "session")
    if not all(isinstance(p, str) and p for p in parties) or len(set(parties)) != len(parties):
        raise ProtocolError(f"session from {src}: party names must be distinct non-empty strings")
    if len(parties) < MIN_SURVIVORS or holder not in parties:
        raise ProtocolError(f"session from {src}: key holder {holder!r} among fewer than 2 or other parties")
    if len(session_id) != SESSION_ID_BYTES:
        raise ProtocolError(f"session from {src}: session id must be {SESSION_ID_BYTES} bytes")
    return Session(holder, tuple(sorted(parties)), session_id)


def parse_public_key(data: Any, src: str, expected_bits: int) -> PaillierPublicKey:
    """A public key as received from ``src``: right size and valid, else ProtocolError naming ``src``."""
    if not isinstance(data, bytes):
        raise ProtocolError(f"public key from {src} is not bytes")
    try:
        return PaillierPublicKey.from_bytes(data, expected_bits=expected_bits)
    except CryptoError as exc:
        raise ProtocolError(f"public key sent by {src} refused: {exc}") from exc


def parse_key_digest(message: Any, src: str) -> bytes:
    """The key holder's direct key digest."""
    m = _mapping(message, src, "key digest")
    digest = _field(m, K_DIGEST, bytes, src, "key digest")
    if len(digest) != DIGEST_BYTES:
        raise ProtocolError(f"key digest from {src} must be {DIGEST_BYTES} bytes")
    return digest


def parse_shape(value: Any, src: str, what: str) -> tuple[int, ...]:
    """A non-empty tuple of at most MAX_SHAPE_DIMS positive ints."""
    if not isinstance(value, (list, tuple)) or not 1 <= len(value) <= MAX_SHAPE_DIMS:
        raise ProtocolError(f"{what} from {src}: shape must be a list of 1 to {MAX_SHAPE_DIMS} ints")
    if not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in value):
        raise ProtocolError(f"{what} from {src}: shape entries must be positive ints")
    return tuple(value)


def parse_input(message: Any, src: str, round_index: int, public_key: PaillierPublicKey,
                layout: PackingLayout) -> Contribution:
    """Validate a contribution: attribution, round, shape, ciphertext and mask counts and ranges."""
    m = _mapping(message, src, "input")
    _party(m, src, "input")
    _round(m, src, "input", round_index)
    shape = parse_shape(m.get(K_SHAPE), src, "input")
    n_bytes, ct_bytes = widths(public_key)
    ct = _field(m, K_CT, bytes, src, "input")
    masks = ints_from_bytes(_field(m, K_MASKS, bytes, src, "input"), n_bytes, public_key.n, "masks", src)
    expected = layout.n_ciphertexts(math.prod(shape))
    if len(ct) != expected * ct_bytes or len(masks) != expected:
        raise ProtocolError(f"input from {src}: {expected} ciphertexts and masks expected for shape {shape}")
    cts = ints_from_bytes(ct, ct_bytes, public_key.nsquare, "ciphertexts", src)
    if any(c == 0 for c in cts):
        raise ProtocolError(f"input from {src}: ciphertext 0 is not in Z*_(n^2)")
    return Contribution(src, round_index, shape, ct, tuple(masks))


def parse_commit(message: Any, src: str) -> Commitment:
    """Validate a commitment (its round is checked by the key holder, which skips stale ones)."""
    m = _mapping(message, src, "commitment")
    _party(m, src, "commitment")
    round_index = _round(m, src, "commitment")
    digest = _field(m, K_DIGEST, bytes, src, "commitment")
    if len(digest) != DIGEST_BYTES:
        raise ProtocolError(f"commitment from {src} must be {DIGEST_BYTES} bytes")
    return Commitment(src, round_index, digest)


def parse_forward(message: Any, src: str, round_index: int, session: Session) -> Forward:
    """Validate the active party's forward: names are distinct passive parties, one ct per non-holder."""
    m = _mapping(message, src, "forward")
    _round(m, src, "forward", round_index)
    parties = _field(m, K_PARTIES, (list, tuple), src, "forward")
    ct = _mapping(m.get(K_CT), src, "forward ciphertexts")
    if not all(isinstance(p, str) for p in parties):
        raise ProtocolError(f"forward from {src}: party names must be strings")
    unknown = [p for p in parties if p not in session.parties]
    if unknown:
        raise ProtocolError(f"forward from {src} names {unknown[0]!r}, not a passive party of this session")
    if len(set(parties)) != len(parties):
        duplicate = next(p for p in parties if parties.count(p) > 1)
        raise ProtocolError(f"forward from {src} names {duplicate!r} twice (a duplicate contribution)")
    if set(ct) != set(parties) - {session.holder}:
        raise ProtocolError(f"forward from {src}: ciphertexts for {sorted(ct)}, contributors {sorted(parties)}")
    if not all(isinstance(v, bytes) for v in ct.values()):
        raise ProtocolError(f"forward from {src}: ciphertexts must be bytes")
    return Forward(round_index, tuple(parties), {str(k): v for k, v in ct.items()})


def parse_decrypted(message: Any, src: str, round_index: int, count: int, public_key: PaillierPublicKey) -> list[int]:
    """The key holder's reply: ``count`` residues mod n."""
    m = _mapping(message, src, "decryption")
    _round(m, src, "decryption", round_index)
    n_bytes, _ = widths(public_key)
    residues = ints_from_bytes(_field(m, K_PLAIN, bytes, src, "decryption"), n_bytes, public_key.n, "residues", src)
    if len(residues) != count:
        raise ProtocolError(f"decryption from {src} has {len(residues)} residues, expected {count}")
    return residues


def check_contributors(forward: Forward, holder: str, holder_contributed: bool) -> None:
    """Refuse a forward naming fewer than ``MIN_SURVIVORS`` contributors, or a holder that did not contribute."""
    if len(forward.parties) < MIN_SURVIVORS:
        raise InsufficientSurvivorsError(
            f"round {forward.round}: {len(forward.parties)} contribution(s) named; the key holder decrypts "
            f"only sums of at least {MIN_SURVIVORS} (one would be that party's vector)"
        )
    if holder in forward.parties and not holder_contributed:
        raise ProtocolError(f"round {forward.round}: the key holder {holder} is named but did not contribute")


def verify_forward(forward: Forward, commitments: Mapping[str, Commitment], *, session_id: bytes, key: bytes,
                   holder: str, holder_contributed: bool, public_key: PaillierPublicKey,
                   n_ciphertexts: int | None) -> list[list[int]]:
    """Key holder's check of a forward; returns each named non-holder's ciphertexts, in order.

    Refuses (ProtocolError naming the party) a ciphertext that does not match its party's
    commitment, a commitment of another round, a holder named although it did not contribute,
    ciphertext lists of unequal length, and fewer than ``MIN_SURVIVORS`` contributions.
    """
    check_contributors(forward, holder, holder_contributed)
    _, ct_bytes = widths(public_key)
    out = []
    for p in forward.parties:
        if p == holder:
            continue
        commitment = commitments.get(p)
        if commitment is None or commitment.round != forward.round:
            raise ProtocolError(f"round {forward.round}: no commitment from {p}")
        data = forward.ct[p]
        if commitment_digest(session_id, key, forward.round, p, data) != commitment.digest:
            raise ProtocolError(
                f"round {forward.round}: the ciphertexts forwarded for {p} do not match {p}'s commitment"
            )
        cts = ints_from_bytes(data, ct_bytes, public_key.nsquare, "ciphertexts", p)
        if n_ciphertexts is None:
            n_ciphertexts = len(cts)
        if len(cts) != n_ciphertexts or not cts or 0 in cts:
            raise ProtocolError(f"round {forward.round}: {p} sent {len(cts)} ciphertexts, expected {n_ciphertexts}")
        out.append(cts)
    return out


# ============================================================================ parties


class _PaillierPassive(PassiveAggregator):
    def __init__(self, config: AggregationConfig, pconfig: PaillierAggregationConfig) -> None:
        self.config, self.pconfig = config, pconfig
        self.backend: FastBackend | None = None
        self.round = 0
        self.own: list[int] | None = None  # key holder: its packed vector of the current round

    def setup(self, ctx: PartyContext) -> None:
        self.session = parse_session(ctx.recv(ctx.active, TAG_SESSION), ctx.active)
        if ctx.name not in self.session.parties:
            raise ProtocolError(f"session from {ctx.active} does not name {ctx.name}")
        self.holder = self.session.holder
        bits = self.pconfig.key_bits
        private: PaillierPrivateKey | None = None
        if ctx.name == self.holder:
            with ctx.meter.crypto("secagg.paillier_keygen"):
                public, private = generate_keypair(
                    bits, insecure_allow_small_key=self.pconfig.insecure_allow_small_key, randbits=self.pconfig.randbits
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
            self.backend = FastBackend(public, private, randbits=self.pconfig.randbits, workers=self.pconfig.workers)
            _ = self.backend.engine.table
        self.layout = packing_layout(public.bits, len(self.session.parties), self.config.frac_bits,
                                     self.pconfig.max_abs_value)
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
            randbelow = self.pconfig.randbelow or secrets.randbelow
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
        forward = parse_forward(ctx.recv(ctx.active, TAG_FORWARD), ctx.active, self.round, self.session)
        check_contributors(forward, self.holder, self.own is not None)  # before waiting for commitments
        commitments = {p: self._commitment(ctx, p) for p in forward.parties if p != self.holder}
        with ctx.meter.crypto("secagg.paillier_verify"):
            per_party = verify_forward(
                forward, commitments, session_id=self.session.session_id, key=self.key, holder=self.holder,
                holder_contributed=self.own is not None, public_key=self.backend.public_key,
                n_ciphertexts=len(self.own) if self.holder in forward.parties and self.own is not None else None,
            )
        with ctx.meter.crypto("secagg.paillier_add"):
            total = per_party[0]
            for cts in per_party[1:]:
                total = self.backend.add_raw(total, cts)
        with ctx.meter.crypto("secagg.paillier_decrypt"):
            residues = self.backend.decrypt_raw(total)
        if self.holder in forward.parties:
            n = self.backend.public_key.n
            residues = [(d + m) % n for d, m in zip(residues, self.own, strict=True)]
        ctx.send(ctx.active, TAG_DECRYPTED, {K_ROUND: self.round, K_PLAIN: ct_to_bytes(residues, self.n_bytes)})
        self.own = None
        self.round += 1


class _PaillierActive(ActiveAggregator):
    def __init__(self, config: AggregationConfig, pconfig: PaillierAggregationConfig) -> None:
        super().__init__()
        self.config, self.pconfig = config, pconfig
        self.public: PaillierPublicKey | None = None
        self.round = 0

    def setup(self, ctx: PartyContext, parties: Sequence[str]) -> None:
        self.parties = tuple(sorted(parties))
        self.holder = self.pconfig.key_holder or self.parties[0]
        if self.holder not in self.parties:
            raise ConfigError(f"key holder {self.holder!r} is not a passive party {self.parties}")
        session_id = (self.config.urandom or secrets.token_bytes)(SESSION_ID_BYTES)
        ctx.broadcast(self.parties, TAG_SESSION,
                      {K_HOLDER: self.holder, K_PARTIES: list(self.parties), K_SESSION_ID: session_id})
        key_bytes = ctx.recv(self.holder, TAG_PUBLIC_KEY)
        self.public = parse_public_key(key_bytes, self.holder, self.pconfig.key_bits)
        ctx.broadcast([p for p in self.parties if p != self.holder], TAG_PUBLIC_KEY, key_bytes)
        self.layout = packing_layout(self.public.bits, len(self.parties), self.config.frac_bits,
                                     self.pconfig.max_abs_value)

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
            ints = self.layout.unpack(packed, terms=len(alive), length=length)
            total = np.asarray(ints, dtype=np.float64).reshape(shape) / float(1 << self.config.frac_bits)
        self.round += 1
        self.stats.rounds += 1
        self.stats.dropouts += len(self.parties) - len(alive)
        return AggregateResult(total, alive, tuple(p for p in self.parties if p in gone))


@register_aggregation
class PaillierAggregation(AggregationScheme):
    """Packed Paillier under a passive key holder's key; contributions masked in Z_n and committed."""

    name = "paillier"
    summary = "Paillier (packed) under a passive key holder's key; per-party Z_n masks, committed ciphertexts"

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

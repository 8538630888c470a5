"""Pure core of the ``paillier`` scheme: tags, named keys, messages, digests and validating parsers.

Every ``parse_*`` takes a received value and the sender's name and returns a typed message or
raises :class:`~securevfl.errors.ProtocolError` naming the sender (an
:class:`~securevfl.privacy.secagg.InsufficientSurvivorsError` for too few contributors): no
received message is indexed raw. :func:`verify_forward` is the key holder's check of what the
active party forwards. The protocol itself is described in :mod:`.paillier`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from securevfl.errors import CryptoError, ProtocolError
from securevfl.privacy.paillier import PackingLayout, PackingSpec, PaillierPublicKey
from securevfl.privacy.primitives.kdf import encode_fields
from securevfl.privacy.secagg.config import InsufficientSurvivorsError

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


def packing_layout(n_bits: int, n_passives: int, frac_bits: int, max_abs_value: float) -> PackingLayout:
    """The agreed packing: slots wide enough for ``n_passives`` summands of |x| <= max_abs_value."""
    spec = PackingSpec.fitting(max_abs_value, max(1, n_passives), frac_bits)
    return PackingLayout.for_key(spec, n_bits)


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


def _mapping(message: Any, src: str, kind: str) -> Mapping[str, Any]:
    if not isinstance(message, Mapping):
        raise ProtocolError(f"{kind} from {src} is not a mapping")
    return message


def _field(message: Mapping[str, Any], key: str, kind: type | tuple[type, ...], src: str, what: str) -> Any:
    value = message.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ProtocolError(f"{what} from {src}: field {key!r} is missing or of the wrong type")
    return value


def _round(message: Mapping[str, Any], src: str, what: str, expected: int | None = None) -> int:
    value = _field(message, K_ROUND, int, src, what)
    if value < 0 or (expected is not None and value != expected):
        raise ProtocolError(f"{what} from {src} is for round {value}, expected {expected}")
    return int(value)


def _party(message: Mapping[str, Any], src: str, what: str) -> str:
    party = _field(message, K_PARTY, str, src, what)  # a str: an array would compare element-wise
    if party != src:
        raise ProtocolError(f"{what} from {src} is misattributed (party {party!r})")
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
    return bytes(digest)


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


__all__ = [
    "DIGEST_BYTES",
    "MAX_SHAPE_DIMS",
    "MIN_SURVIVORS",
    "SESSION_ID_BYTES",
    "Commitment",
    "Contribution",
    "Forward",
    "Session",
    "check_contributors",
    "commitment_digest",
    "ct_to_bytes",
    "ints_from_bytes",
    "key_digest",
    "packing_layout",
    "parse_commit",
    "parse_decrypted",
    "parse_forward",
    "parse_input",
    "parse_key_digest",
    "parse_public_key",
    "parse_session",
    "parse_shape",
    "verify_forward",
    "widths",
]

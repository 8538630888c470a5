"""ECDH PSI between two parties as a pure state machine over serialised messages (no I/O).

Roles: the *initiator* (the active party) and the *responder* (a passive party). Flow, with
``H`` the salted hash onto Curve25519 (:mod:`psi.curve`) and ``a``, ``b`` fresh per-session keys::

    0 HELLO    I -> R  session ID, mode, digest length, normalisation, salt share r_I, |X|
    1 REPLY    R -> I  salt share r_R, {H(y)^b} (shuffled); salt = SHA-256(sid|r_I|r_R)
    2 BLINDED  I -> R  transcript digest T, {H(x)^a} (shuffled), and in mode "both" {H(y)^ba} (R's order)
    3 DOUBLE   R -> I  {H(x)^ab} (I's order; shuffled again in mode "cardinality")
    4 ALIGN    I -> R  only with N > 2 parties in mode "both": the global order

``T = SHA-256(DST | HELLO as sent | r_R)`` binds the opening messages: the responder recomputes it
from the HELLO it received and its own share, so a HELLO flag altered in transit (say
``align_follows``, which would leave the responder waiting for an ALIGN that never comes) or an
altered salt share ends the session with :class:`~psi.errors.TranscriptMismatchError` instead of
a hang or a silently empty intersection (codec version 2).

Doubly-blinded values are truncated to ``digest_len`` bytes (default 16: with n = m = 10^6 the
chance of any false match is below n*m / 2^128 = 2^-88). Both sides order the intersection by the
doubly-blinded value, which both can compute, so "row i" means the same person on both sides
without revealing anyone's row order. Each side sends its singly-blinded set in a secret random
order, so the other side never learns which of its rows matched, only which of its own.

Usage::

    init, resp = PSIInitiator(x, cfg, engine), PSIResponder(y, cfg, engine)
    msg = init.start()
    while msg is not None:
        msg = resp.handle(msg)
        msg = init.handle(msg) if msg is not None else None

Any bad message (malformed, truncated, other session, wrong step, invalid point, wrong count)
raises a :class:`psi.errors.PSIProtocolError` subclass and aborts the session.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np

from .codec import STEP_OF, Message, MessageType, decode, encode
from .curve import POINT_BYTES, BlindingKey, BlindJob, CurveEngine, CurveStats, HashBlindJob
from .errors import (
    MalformedMessageError,
    OutOfOrderError,
    ParameterMismatchError,
    PSIConfigError,
    SessionMismatchError,
    TranscriptMismatchError,
)
from .ids import normalize_bits, parse_normalize
from .source import IDSource, as_source, check_unique_points

SALT_DST = b"securevfl/psi/v1/session-salt"
TRANSCRIPT_DST = b"securevfl/psi/v2/transcript"
MIN_DIGEST_LEN = 12

Urandom = Callable[[int], bytes]


class Mode(str, Enum):
    """Who learns what (see docs/psi.md)."""

    BOTH = "both"  # both parties learn the intersection (their own rows in the agreed order)
    ACTIVE_ONLY = "active_only"  # only the initiator (active party) learns it
    CARDINALITY = "cardinality"  # the initiator learns only |X ∩ Y|; the responder nothing


_MODE_CODE = {Mode.BOTH: 1, Mode.ACTIVE_ONLY: 2, Mode.CARDINALITY: 3}


@dataclass(frozen=True, init=False)
class PSIConfig:
    """Protocol parameters both parties must agree on (checked in the HELLO message).

    Built from a mode name or :class:`Mode` and a normalisation spec as :func:`~psi.ids.parse_normalize`
    takes it; the fields hold the checked, canonical values.
    """

    mode: Mode
    digest_len: int
    normalize: tuple[str, ...]

    def __init__(self, mode: Mode | str = Mode.BOTH, digest_len: int = 16,
                 normalize: str | Iterable[str] | None = ()) -> None:
        try:
            checked = Mode(mode)
        except ValueError:
            raise PSIConfigError(f"mode must be one of {[m.value for m in Mode]}, not {mode!r}") from None
        if not MIN_DIGEST_LEN <= int(digest_len) <= POINT_BYTES:
            raise PSIConfigError(f"digest_len must be in [{MIN_DIGEST_LEN}, {POINT_BYTES}]")
        object.__setattr__(self, "mode", checked)
        object.__setattr__(self, "digest_len", digest_len)
        object.__setattr__(self, "normalize", parse_normalize(normalize))


@dataclass(frozen=True)
class PairOutcome:
    """What one side of a pair learned.

    ``positions``: indices into this side's item list, in the pair's agreed order (``None`` where
    this side does not learn the intersection). ``global_positions``: the same for the N-party
    global intersection, in the global order (set on the responder after ALIGN).
    """

    size: int | None
    positions: np.ndarray | None
    global_positions: np.ndarray | None = None


@dataclass
class PartyTimers:
    """Seconds spent by one side, by kind of work."""

    hash_cpu: float = 0.0
    blind_cpu: float = 0.0
    curve_wall: float = 0.0
    codec: float = 0.0
    match: float = 0.0
    items_hashed: int = 0
    points_blinded: int = 0

    def add_curve(self, stats: CurveStats) -> None:
        """Add one batch of curve work."""
        self.hash_cpu += stats.hash_cpu
        self.blind_cpu += stats.blind_cpu
        self.curve_wall += stats.wall
        self.items_hashed += stats.hashed
        self.points_blinded += stats.blinded


def derive_salt(session_id: bytes, initiator_share: bytes, responder_share: bytes) -> bytes:
    """Session salt from both parties' fresh random shares (neither side alone fixes it)."""
    h = hashlib.sha256(len(SALT_DST).to_bytes(1, "little") + SALT_DST)
    h.update(session_id + initiator_share + responder_share)
    return h.digest()


def transcript_digest(hello: bytes, responder_share: bytes) -> bytes:
    """Digest of the opening messages (HELLO as serialised, the responder's salt share), echoed in BLINDED."""
    h = hashlib.sha256(len(TRANSCRIPT_DST).to_bytes(1, "little") + TRANSCRIPT_DST)
    h.update(len(hello).to_bytes(8, "little") + hello + responder_share)
    return h.digest()


def secret_permutation(n: int, urandom: Urandom) -> np.ndarray:
    """Return a uniformly random permutation of ``range(n)`` (64-bit keys from urandom)."""
    keys = np.frombuffer(bytes(urandom(8 * n)), dtype="<u8") if n else np.empty(0, "<u8")
    return np.argsort(keys, kind="stable")


def match_sorted(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return indices ``(ia, ib)`` with ``a[ia] == b[ib]``, sorted by matched value.

    Rows are fixed-width byte strings. Raises :class:`MalformedMessageError` if a value repeats
    within one side (an honest run never produces that: IDs are unique per party).
    """
    width = a.shape[1]
    if b.shape[1] != width:
        raise MalformedMessageError(f"digest widths differ ({width} vs {b.shape[1]})")
    va = np.ascontiguousarray(a).view(f"S{width}").ravel()
    vb = np.ascontiguousarray(b).view(f"S{width}").ravel()
    values = np.concatenate([va, vb])
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    equal = ordered[1:] == ordered[:-1]
    if len(equal) > 1 and np.any(equal[1:] & equal[:-1]):
        raise MalformedMessageError("a doubly-blinded value repeats within one party's set")
    hit = np.flatnonzero(equal)
    left, right = order[hit], order[hit + 1]
    n = len(va)
    if np.any(left >= n) or np.any(right < n):
        raise MalformedMessageError("a doubly-blinded value repeats within one party's set")
    return left, right - n


def global_alignment(
    pair_positions: Sequence[np.ndarray],
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Derive the N-party intersection from the active party's pairwise intersections.

    ``pair_positions[i]`` holds the active party's item indices matched with passive ``i``, in
    that pair's agreed order. Returns the active party's items in the global intersection (in the
    global order: the first pair's agreed order) and, per pair, the indices into that pair's
    order that list the global intersection in the global order (the ALIGN payload).
    """
    first = pair_positions[0]
    keep = np.ones(len(first), dtype=bool)
    for other in pair_positions[1:]:
        keep &= np.isin(first, other)
    global_items = first[keep]
    orders = []
    for pos in pair_positions:
        sorter = np.argsort(pos, kind="stable")
        orders.append(sorter[np.searchsorted(pos, global_items, sorter=sorter)].astype(np.int64))
    return global_items, orders


class _Side:
    """Shared plumbing: codec timing, session/step checks, abort on error."""

    def __init__(self, items: Sequence[str] | IDSource, config: PSIConfig, engine: CurveEngine,
                 urandom: Urandom) -> None:
        self._items = as_source(items)
        self.config = config
        self._engine = engine
        self._urandom = urandom
        self._key = BlindingKey.generate(urandom)
        self.timers = PartyTimers()
        self.session_id: bytes | None = None
        self.outcome: PairOutcome | None = None
        self.peer_size: int | None = None
        self._expect: MessageType | None = None
        self._state = "new"

    @property
    def done(self) -> bool:
        """Whether this side has finished (it learned all it will learn)."""
        return self._state == "done"

    def _encode(self, message: Message) -> bytes:
        t0 = time.perf_counter()
        data = encode(message)
        self.timers.codec += time.perf_counter() - t0
        return data

    def _receive(self, data: bytes) -> Message:
        if self._state == "failed":
            raise OutOfOrderError("session was aborted after an earlier error")
        if self._state == "done":
            raise OutOfOrderError("session already finished; no further message expected")
        if self._expect is None:
            raise OutOfOrderError("no message expected yet (call start() first)")
        t0 = time.perf_counter()
        message = decode(data)
        self.timers.codec += time.perf_counter() - t0
        if self.session_id is not None and message.session_id != self.session_id:
            raise SessionMismatchError(
                f"message belongs to session {message.session_id.hex()}, this is "
                f"{self.session_id.hex()} (replayed or from another run)"
            )
        want_step = STEP_OF[self._expect]
        if message.step != want_step:
            raise OutOfOrderError(
                f"expected step {want_step} ({self._expect.name}), got step {message.step} ({message.type.name})"
            )
        if message.type != self._expect:
            raise OutOfOrderError(f"expected {self._expect.name} at step {want_step}, got {message.type.name}")
        return message

    def handle(self, data: bytes) -> bytes | None:
        """Consume one serialised message; return the reply to send, or ``None``."""
        try:
            return self._dispatch(self._receive(data), data)
        except BaseException:  # any failure (bad message, invalid point, interrupt) ends the session
            self._state = "failed"
            raise

    def _dispatch(self, message: Message, raw: bytes) -> bytes | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _check_points(self, arr: np.ndarray, count: int | None, width: int, what: str) -> None:
        if arr.shape[1] != width:
            raise MalformedMessageError(f"{what}: expected {width}-byte values, got {arr.shape[1]}")
        if count is not None and arr.shape[0] != count:
            raise MalformedMessageError(f"{what}: expected {count} values, got {arr.shape[0]}")

    def _hash_blind_own(self, salt: bytes) -> np.ndarray:
        points, stats = self._engine.hash_and_blind(self._items, salt, self._key)
        self.timers.add_curve(stats)
        self._check_unique(points)
        return points

    def _check_unique(self, points: np.ndarray) -> None:
        """A streamed source was not de-duplicated: equal hashed points are equal IDs."""
        if not self._items.checked_unique:
            t0 = time.perf_counter()
            check_unique_points(points, "this party's IDs")
            self.timers.match += time.perf_counter() - t0

    def _blind_peer(self, points: np.ndarray, out_len: int) -> np.ndarray:
        out, stats = self._engine.blind(points, self._key, out_len)
        self.timers.add_curve(stats)
        return out


class PSIInitiator(_Side):
    """The active party's side of one pairwise session."""

    def __init__(
        self,
        items: Sequence[str] | IDSource,
        config: PSIConfig,
        engine: CurveEngine,
        *,
        urandom: Urandom = os.urandom,
        align_follows: bool = False,
    ) -> None:
        super().__init__(items, config, engine, urandom)
        if align_follows and config.mode is not Mode.BOTH:
            raise PSIConfigError("ALIGN (N-party global order) is only sent in mode 'both'")
        self.align_follows = align_follows
        self.session_id: bytes = bytes(urandom(16))
        self._share = bytes(urandom(32))
        self._perm: np.ndarray | None = None
        self._yba: np.ndarray | None = None
        self._hello = b""

    def start(self) -> bytes:
        """Return the HELLO message that opens the session."""
        if self._state != "new":
            raise OutOfOrderError("start() may be called once, before any message")
        hello = Message(
            MessageType.HELLO,
            STEP_OF[MessageType.HELLO],
            self.session_id,
            {
                "mode": _MODE_CODE[self.config.mode],
                "digest_len": self.config.digest_len,
                "normalize": normalize_bits(self.config.normalize),
                "align_follows": int(self.align_follows),
                "salt_share": self._share,
                "n_items": len(self._items),
            },
        )
        self._state, self._expect = "await_reply", MessageType.REPLY
        self._hello = self._encode(hello)
        return self._hello

    def _dispatch(self, message: Message, raw: bytes) -> bytes | None:
        if message.type is MessageType.REPLY:
            return self._on_reply(message)
        self._on_double(message)
        return None

    def _on_reply(self, message: Message) -> bytes:
        yb = message.fields["blinded"]
        self._check_points(yb, None, POINT_BYTES, "REPLY blinded set")
        self.peer_size = len(yb)
        salt = derive_salt(self.session_id, self._share, message.fields["salt_share"])
        # one stream of tasks for both jobs: no idle worker at a barrier between them
        (yba, st_yba), (xa, st_xa) = self._engine.run(
            [BlindJob(yb, self._key, self.config.digest_len), HashBlindJob(self._items, salt, self._key)]
        )
        self.timers.add_curve(st_yba)
        self.timers.add_curve(st_xa)
        self._check_unique(xa)
        t0 = time.perf_counter()
        self._perm = secret_permutation(len(xa), self._urandom)
        xa_sent = xa[self._perm]
        del xa  # large inputs: keep one copy of the set alive, not two
        self.timers.match += time.perf_counter() - t0
        self._yba = yba
        send_double = self.config.mode is Mode.BOTH
        out = Message(
            MessageType.BLINDED,
            STEP_OF[MessageType.BLINDED],
            self.session_id,
            {
                "transcript": transcript_digest(self._hello, message.fields["salt_share"]),
                "blinded": xa_sent,
                "double": yba if send_double else np.empty((0, self.config.digest_len), np.uint8),
            },
        )
        self._state, self._expect = "await_double", MessageType.DOUBLE
        return self._encode(out)

    def _on_double(self, message: Message) -> None:
        xab = message.fields["double"]
        self._check_points(xab, len(self._items), self.config.digest_len, "DOUBLE set")
        assert self._yba is not None and self._perm is not None
        t0 = time.perf_counter()
        ia, _ = match_sorted(xab, self._yba)
        if self.config.mode is Mode.CARDINALITY:
            self.outcome = PairOutcome(len(ia), None)
        else:
            self.outcome = PairOutcome(len(ia), self._perm[ia])
        self.timers.match += time.perf_counter() - t0
        self._yba = None
        self._expect = None
        self._state = "await_align" if self.align_follows else "done"

    def align(self, order: np.ndarray) -> bytes:
        """Return the ALIGN message: the global order as indices into this pair's agreed order."""
        if self._state != "await_align":
            raise OutOfOrderError("align() is only valid after the pair finished with ALIGN on")
        assert self.outcome is not None and self.outcome.positions is not None
        order = np.asarray(order, dtype=np.int64)
        self.outcome = PairOutcome(self.outcome.size, self.outcome.positions, self.outcome.positions[order])
        self._state = "done"
        msg = Message(MessageType.ALIGN, STEP_OF[MessageType.ALIGN], self.session_id, {"order": order})
        return self._encode(msg)


class PSIResponder(_Side):
    """A passive party's side of one pairwise session."""

    def __init__(
        self,
        items: Sequence[str] | IDSource,
        config: PSIConfig,
        engine: CurveEngine,
        *,
        urandom: Urandom = os.urandom,
    ) -> None:
        super().__init__(items, config, engine, urandom)
        self._state, self._expect = "await_hello", MessageType.HELLO
        self._perm: np.ndarray | None = None
        self._yb_peer_view: np.ndarray | None = None
        self.align_follows = False
        self._transcript = b""

    def _dispatch(self, message: Message, raw: bytes) -> bytes | None:
        if message.type is MessageType.HELLO:
            return self._on_hello(message, raw)
        if message.type is MessageType.BLINDED:
            return self._on_blinded(message)
        self._on_align(message)
        return None

    def _on_hello(self, message: Message, raw: bytes) -> bytes:
        f = message.fields
        cfg = self.config
        if f["mode"] != _MODE_CODE[cfg.mode]:
            modes = {v: k.value for k, v in _MODE_CODE.items()}
            raise ParameterMismatchError(
                f"peer runs mode {modes.get(f['mode'], f['mode'])!r}, this party {cfg.mode.value!r}"
            )
        if f["digest_len"] != cfg.digest_len:
            raise ParameterMismatchError(f"peer uses digest_len {f['digest_len']}, this party {cfg.digest_len}")
        if f["normalize"] != normalize_bits(cfg.normalize):
            raise ParameterMismatchError(
                "the parties normalise IDs differently (both must use the same options; this "
                f"party uses {list(cfg.normalize)})"
            )
        if f["align_follows"] not in (0, 1) or (f["align_follows"] and cfg.mode is not Mode.BOTH):
            raise MalformedMessageError("HELLO: invalid align_follows flag for this mode")
        self.align_follows = bool(f["align_follows"])
        self.session_id = session_id = message.session_id
        self.peer_size = int(f["n_items"])
        share = bytes(self._urandom(32))
        self._transcript = transcript_digest(raw, share)
        salt = derive_salt(session_id, f["salt_share"], share)
        yb = self._hash_blind_own(salt)
        t0 = time.perf_counter()
        self._perm = secret_permutation(len(yb), self._urandom)
        yb_sent = yb[self._perm]
        del yb  # large inputs: keep one copy of the set alive, not two
        self.timers.match += time.perf_counter() - t0
        out = Message(
            MessageType.REPLY,
            STEP_OF[MessageType.REPLY],
            session_id,
            {"salt_share": share, "blinded": yb_sent},
        )
        self._state, self._expect = "await_blinded", MessageType.BLINDED
        return self._encode(out)

    def _on_blinded(self, message: Message) -> bytes:
        cfg = self.config
        if not hmac.compare_digest(message.fields["transcript"], self._transcript):
            raise TranscriptMismatchError(
                "the initiator saw a different HELLO or salt share than this party (altered in transit)"
            )
        xa = message.fields["blinded"]
        yba = message.fields["double"]
        self._check_points(xa, self.peer_size, POINT_BYTES, "BLINDED set")
        expected_double = len(self._items) if cfg.mode is Mode.BOTH else 0
        self._check_points(yba, expected_double, cfg.digest_len, "BLINDED doubly-blinded set")
        xab = self._blind_peer(xa, cfg.digest_len)
        assert self._perm is not None
        t0 = time.perf_counter()
        if cfg.mode is Mode.BOTH:
            _, ib = match_sorted(xab, yba)
            self.outcome = PairOutcome(len(ib), self._perm[ib])
        else:
            self.outcome = PairOutcome(None, None)
            if cfg.mode is Mode.CARDINALITY:
                xab = xab[secret_permutation(len(xab), self._urandom)]
        self.timers.match += time.perf_counter() - t0
        # _receive checked that the message is of this session: reply under its ID
        out = Message(MessageType.DOUBLE, STEP_OF[MessageType.DOUBLE], message.session_id, {"double": xab})
        if self.align_follows:
            self._state, self._expect = "await_align", MessageType.ALIGN
        else:
            self._state, self._expect = "done", None
        return self._encode(out)

    def _on_align(self, message: Message) -> None:
        order = message.fields["order"]
        assert self.outcome is not None and self.outcome.positions is not None
        size = len(self.outcome.positions)
        if len(order) and (order.min() < 0 or order.max() >= size):
            raise MalformedMessageError(f"ALIGN: index out of range for a {size}-row intersection")
        if len(np.unique(order)) != len(order):
            raise MalformedMessageError("ALIGN: repeated index")
        self.outcome = PairOutcome(self.outcome.size, self.outcome.positions, self.outcome.positions[order])
        self._state, self._expect = "done", None

"""Link frames of the network transport: what one party's process sends another's, byte for byte.

A directed link (src -> dst) is one gRPC bidirectional stream opened by src. src sends frames of
the kinds below; dst answers with ``HELLO_ACK`` once and ``ACK`` for every sequenced frame. Pure
functions, no I/O: :mod:`securevfl.federation.grpc_transport` moves the bytes.

========== ============ =====================================================================
kind       sequenced    fields
========== ============ =====================================================================
HELLO      no           src, dst, fingerprint, job (dict), chunk_kb, max_message, session — first frame of a stream
HELLO_ACK  no           next_seq (the first sequence number dst has not received)
REFUSE     no           reason — dst refuses the link (wrong party, job mismatch); no data flows
DATA       yes          seq, tag, depth, chunk index, chunk count, total length, payload part
FIN        yes          seq — src's role has returned, it sends nothing more on this link
ABORT      no           reason — src failed; every peer stops
HEARTBEAT  no           —
ACK        no           seq — dst holds every frame up to and including seq
========== ============ =====================================================================

Sequence numbers are per link and start at 0; with acknowledgements and the sender's resend
buffer they make a reconnect lossless (no loss, duplication or reordering). Frames are msgpack
arrays of scalars and one bytes payload; :func:`decode_frame` validates every field and raises
:class:`~securevfl.errors.ProtocolError` on anything else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import msgpack

from securevfl.errors import ProtocolError

VERSION = 1
_MAX_NAME = 200  # party names are <= 64 characters, tags short; anything longer is garbage


class Kind(IntEnum):
    """Frame kinds."""

    HELLO = 1
    HELLO_ACK = 2
    REFUSE = 3
    DATA = 4
    FIN = 5
    ABORT = 6
    HEARTBEAT = 7
    ACK = 8


@dataclass(frozen=True)
class Frame:
    """One frame; fields a kind does not use keep their defaults."""

    kind: Kind
    seq: int = -1
    tag: str = ""
    depth: int = 0
    chunk: int = 0
    chunks: int = 1
    total: int = 0
    payload: bytes | memoryview = b""  # a view of the sender's message is packed without a copy
    src: str = ""
    dst: str = ""
    text: str = ""  # REFUSE / ABORT reason, HELLO fingerprint
    job: dict[str, Any] = field(default_factory=dict)
    chunk_kb: int = 0  # HELLO: the sender's chunk size and message limit (bytes); 0: not said (an older HELLO)
    max_message: int = 0
    session: str = ""  # HELLO: the sending process's random session id ("": not said); a reconnect repeats it


def encode_frame(frame: Frame) -> bytes:
    """Serialise ``frame`` (one msgpack array)."""
    body: list[Any] = [VERSION, int(frame.kind)]
    kind = frame.kind
    if kind == Kind.HELLO:
        body += [frame.src, frame.dst, frame.text, frame.job, frame.chunk_kb, frame.max_message, frame.session]
    elif kind == Kind.HELLO_ACK or kind == Kind.ACK or kind == Kind.FIN:
        body += [frame.seq]
    elif kind == Kind.REFUSE or kind == Kind.ABORT:
        body += [frame.text]
    elif kind == Kind.DATA:
        return encode_data(frame.seq, frame.tag, frame.depth, frame.chunk, frame.chunks, frame.total, frame.payload)
    packed: bytes = msgpack.packb(body, use_bin_type=True)
    return packed


_DATA = int(Kind.DATA)


_JOIN_FROM = 4096  # from this payload size on, the header is packed alone and the payload joined to it


def encode_data(seq: int, tag: str, depth: int, chunk: int, chunks: int, total: int,
                payload: bytes | memoryview) -> bytes:
    """A DATA frame's bytes, the same as :func:`encode_frame` gives, without building a :class:`Frame` first.

    A large payload is copied once, into the frame (``msgpack.packb`` copies it into its own buffer first).
    """
    if len(payload) < _JOIN_FROM:
        packed: bytes = msgpack.packb([VERSION, _DATA, seq, tag, depth, chunk, chunks, total, payload],
                                      use_bin_type=True)
        return packed
    head = msgpack.packb([VERSION, _DATA, seq, tag, depth, chunk, chunks, total, b""], use_bin_type=True)
    return b"".join((head[:-2], _bin_header(len(payload)), payload))  # head ends with an empty bin (2 bytes)


def _bin_header(size: int) -> bytes:
    """Msgpack's header of a ``size``-byte bin (``size`` >= 256: bin 16 or bin 32)."""
    return b"\xc5" + size.to_bytes(2, "big") if size < 1 << 16 else b"\xc6" + size.to_bytes(4, "big")


def _data_frame(seq: int, tag: str, depth: int, chunk: int, chunks: int, total: int, payload: bytes) -> Frame:
    """A DATA :class:`Frame` without the frozen dataclass's one ``object.__setattr__`` per field (the hot path)."""
    frame = object.__new__(Frame)
    object.__setattr__(frame, "__dict__", {
        "kind": Kind.DATA, "seq": seq, "tag": tag, "depth": depth, "chunk": chunk, "chunks": chunks, "total": total,
        "payload": payload, "src": "", "dst": "", "text": "", "job": {}, "chunk_kb": 0, "max_message": 0,
        "session": ""})
    return frame


_INT64 = 2**63 - 1


def _int(value: Any, what: str, low: int = 0, high: int = 2**63 - 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ProtocolError(f"malformed frame: {what} must be an integer in [{low}, {high}]")
    return value


def _str(value: Any, what: str, limit: int = _MAX_NAME) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise ProtocolError(f"malformed frame: {what} must be a string of at most {limit} characters")
    return value


def decode_frame(data: bytes, *, max_chunk: int) -> Frame:
    """Parse one frame; ``max_chunk`` bounds a DATA frame's payload. Raises ProtocolError."""
    if len(data) > max_chunk + 4096:
        raise ProtocolError(f"malformed frame: {len(data)} bytes, above the {max_chunk}-byte chunk limit")
    try:
        body = msgpack.unpackb(data, raw=False, strict_map_key=True, max_bin_len=max_chunk,
                               max_str_len=1 << 20, max_array_len=16, max_map_len=1024)
    except Exception as exc:  # msgpack raises several types on garbage
        raise ProtocolError(f"malformed frame: {type(exc).__name__}") from exc
    # A DATA frame (the per-message hot path): checked inline, built without the dataclass's per-field setattr.
    if type(body) is list and len(body) == 9 and body[0] == VERSION and type(body[1]) is int and body[1] == 4:
        _, _, seq, tag, depth, chunk, chunks, total, payload = body
        if (type(seq) is int and type(depth) is int and type(chunk) is int and type(chunks) is int
                and type(total) is int and type(tag) is str and type(payload) is bytes and len(tag) <= _MAX_NAME
                and 0 <= seq <= _INT64 and 0 <= depth <= _INT64 and 1 <= chunks <= _INT64 and 0 <= chunk < chunks
                and 0 <= total <= _INT64):
            return _data_frame(seq, tag, depth, chunk, chunks, total, payload)
        # anything else: the checks below name what is wrong
    if not isinstance(body, list) or len(body) < 2:
        raise ProtocolError("malformed frame: not a frame array")
    if body[0] != VERSION:
        raise ProtocolError(f"unsupported frame version {body[0]!r} (this build speaks {VERSION})")
    try:
        kind = Kind(_int(body[1], "kind", 1, len(Kind)))
    except ValueError:
        raise ProtocolError(f"malformed frame: unknown kind {body[1]!r}") from None
    rest = body[2:]
    expected = {Kind.HELLO: 4, Kind.HELLO_ACK: 1, Kind.ACK: 1, Kind.FIN: 1, Kind.REFUSE: 1, Kind.ABORT: 1,
                Kind.DATA: 7, Kind.HEARTBEAT: 0}[kind]
    if kind == Kind.HELLO and len(rest) in (6, 7):  # with the sender's sizes (and session); 4: a HELLO without
        expected = len(rest)
    if len(rest) != expected:
        raise ProtocolError(f"malformed frame: {kind.name} has {len(rest)} fields, expected {expected}")
    if kind == Kind.HELLO:
        if not isinstance(rest[3], dict):
            raise ProtocolError("malformed frame: HELLO job must be a dictionary")
        sizes = rest[4:6] or [0, 0]
        return Frame(kind, src=_str(rest[0], "src"), dst=_str(rest[1], "dst"), text=_str(rest[2], "fingerprint"),
                     job=rest[3], chunk_kb=_int(sizes[0], "chunk_kb", 0, 1 << 30),
                     max_message=_int(sizes[1], "max_message", 0, 1 << 50),
                     session=_str(rest[6], "session", 64) if len(rest) == 7 else "")
    if kind in (Kind.HELLO_ACK, Kind.ACK, Kind.FIN):
        return Frame(kind, seq=_int(rest[0], "seq"))
    if kind in (Kind.REFUSE, Kind.ABORT):
        return Frame(kind, text=_str(rest[0], "reason", 1 << 16))
    if kind == Kind.DATA:
        seq, tag, depth, chunk, chunks, total, payload = rest
        if not isinstance(payload, bytes):
            raise ProtocolError("malformed frame: DATA payload must be bytes")
        chunks = _int(chunks, "chunk count", 1)
        return Frame(kind, seq=_int(seq, "seq"), tag=_str(tag, "tag"), depth=_int(depth, "depth"),
                     chunk=_int(chunk, "chunk index", 0, chunks - 1), chunks=chunks, total=_int(total, "total length"),
                     payload=payload)
    return Frame(kind)


def split_payload(payload: bytes, chunk_size: int) -> list[memoryview]:
    """Cut ``payload`` into views of at most ``chunk_size`` bytes (at least one, possibly empty)."""
    view = memoryview(payload)
    if len(payload) <= chunk_size:  # one chunk (or an empty payload): most messages
        return [view]
    return [view[i : i + chunk_size] for i in range(0, len(payload), chunk_size)]


class Reassembly:
    """Collects the DATA chunks of one message on one link; refuses what does not add up."""

    def __init__(self, max_message: int) -> None:
        self.max_message = max_message
        self._parts: list[bytes] = []
        self._head: Frame | None = None
        self._size = 0

    @property
    def pending_bytes(self) -> int:
        """Bytes of the message in progress received so far."""
        return self._size

    def add(self, frame: Frame) -> tuple[str, int, bytes] | None:
        """Add one DATA chunk; returns ``(tag, depth, payload)`` once the message is complete."""
        if frame.total > self.max_message:
            raise ProtocolError(f"message of {frame.total:,} bytes exceeds the {self.max_message:,}-byte limit "
                                "(max_message_mb in the federation file)")
        head = self._head
        if head is None and frame.chunks == 1 and frame.chunk == 0:  # a message in one chunk: most messages
            whole = bytes(frame.payload)
            if len(whole) > frame.total:
                raise ProtocolError("malformed message: chunks are longer than the declared length")
            if len(whole) != frame.total:
                raise ProtocolError("malformed message: chunks are shorter than the declared length")
            return frame.tag, frame.depth, whole
        if head is None:
            if frame.chunk != 0:
                raise ProtocolError(f"malformed message: chunk {frame.chunk} arrived before chunk 0")
            self._head = head = frame
        elif (frame.chunk != len(self._parts) or frame.chunks != head.chunks or frame.total != head.total
              or frame.tag != head.tag or frame.depth != head.depth):
            raise ProtocolError("malformed message: chunks do not continue the message in progress")
        part = bytes(frame.payload)  # a received frame's payload is already bytes: no copy
        self._parts.append(part)
        self._size += len(part)
        if self._size > head.total:
            raise ProtocolError("malformed message: chunks are longer than the declared length")
        if len(self._parts) < head.chunks:
            return None
        if self._size != head.total:
            raise ProtocolError("malformed message: chunks are shorter than the declared length")
        payload = self._parts[0] if len(self._parts) == 1 else b"".join(self._parts)
        self._parts, self._head, self._size = [], None, 0
        return head.tag, head.depth, payload

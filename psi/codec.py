"""Versioned binary codec for PSI messages (no pickle).

Layout, little-endian::

    header  = magic "SVPI" (4) | version u8 | type u8 | step u16 | session_id (16) | payload_len u64
    payload = the fields of the message type, in schema order:
              u8 / u64            fixed-width integers
              b32                 32 raw bytes (salt contributions, transcript digest)
              points              width u8 | count u64 | count * width bytes
              index               count u64 | count * u64

Decoding checks the magic, version, type, declared length, every field and that no byte is left
over; problems raise :mod:`psi.errors` exceptions. Arrays are returned as read-only zero-copy numpy
views of the message bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

from .errors import MalformedMessageError, TruncatedMessageError, UnsupportedVersionError

MAGIC = b"SVPI"
VERSION = 2  # 2: BLINDED carries the transcript digest of HELLO and the responder's salt share
SESSION_ID_BYTES = 16
HEADER = struct.Struct("<4sBBH16sQ")
_U64 = struct.Struct("<Q")
_POINTS_HEAD = struct.Struct("<BQ")
MAX_POINT_WIDTH = 32


class MessageType(IntEnum):
    """The PSI message types, each sent at a fixed protocol step."""

    HELLO = 1  # initiator -> responder: parameters, salt share, set size
    REPLY = 2  # responder -> initiator: salt share, responder's blinded set
    BLINDED = 3  # initiator -> responder: transcript digest, initiator's blinded set, doubly-blinded responder set
    DOUBLE = 4  # responder -> initiator: doubly-blinded initiator set
    ALIGN = 5  # initiator -> responder (N parties): global order as indices into the pair order


#: Protocol step at which each message type is sent.
STEP_OF = {
    MessageType.HELLO: 0,
    MessageType.REPLY: 1,
    MessageType.BLINDED: 2,
    MessageType.DOUBLE: 3,
    MessageType.ALIGN: 4,
}

SCHEMAS: dict[MessageType, tuple[tuple[str, str], ...]] = {
    MessageType.HELLO: (
        ("mode", "u8"),
        ("digest_len", "u8"),
        ("normalize", "u8"),
        ("align_follows", "u8"),
        ("salt_share", "b32"),
        ("n_items", "u64"),
    ),
    MessageType.REPLY: (("salt_share", "b32"), ("blinded", "points")),
    MessageType.BLINDED: (("transcript", "b32"), ("blinded", "points"), ("double", "points")),
    MessageType.DOUBLE: (("double", "points"),),
    MessageType.ALIGN: (("order", "index"),),
}


@dataclass(frozen=True)
class Message:
    """A decoded (or to-be-encoded) protocol message."""

    type: MessageType
    step: int
    session_id: bytes
    fields: dict[str, Any] = field(default_factory=dict)


def _encode_field(kind: str, name: str, value: Any) -> list[bytes | memoryview]:
    if kind == "u8":
        if not 0 <= int(value) <= 0xFF:
            raise MalformedMessageError(f"field {name!r} does not fit u8")
        return [bytes((int(value),))]
    if kind == "u64":
        return [_U64.pack(int(value))]
    if kind == "b32":
        if not isinstance(value, bytes | bytearray) or len(value) != 32:
            raise MalformedMessageError(f"field {name!r} must be 32 bytes")
        return [bytes(value)]
    if kind == "points":
        arr = np.ascontiguousarray(value, dtype=np.uint8)
        if arr.ndim != 2 or not 1 <= arr.shape[1] <= MAX_POINT_WIDTH:
            raise MalformedMessageError(f"field {name!r} must be an (n, width<=32) uint8 array")
        return [_POINTS_HEAD.pack(arr.shape[1], arr.shape[0]), arr.reshape(-1).data]
    if kind == "index":
        arr = np.ascontiguousarray(value, dtype="<u8").reshape(-1)
        return [_U64.pack(arr.shape[0]), arr.view(np.uint8).data]
    raise AssertionError(kind)


def encode(message: Message) -> bytes:
    """Serialise a message; raises :class:`MalformedMessageError` if a field does not fit."""
    schema = SCHEMAS[MessageType(message.type)]
    if len(message.session_id) != SESSION_ID_BYTES:
        raise MalformedMessageError("session ID must be 16 bytes")
    missing = {name for name, _ in schema} ^ set(message.fields)
    if missing:
        raise MalformedMessageError(f"fields do not match the schema: {sorted(missing)}")
    parts: list[bytes | memoryview] = []  # arrays go in as views: one copy, into the message itself
    for name, kind in schema:
        parts.extend(_encode_field(kind, name, message.fields[name]))
    payload_len = sum(p.nbytes if isinstance(p, memoryview) else len(p) for p in parts)
    head = HEADER.pack(MAGIC, VERSION, int(message.type), message.step, message.session_id, payload_len)
    return b"".join([head, *parts])


class _Reader:
    def __init__(self, view: memoryview, offset: int) -> None:
        self.view = view
        self.offset = offset

    def take(self, n: int, what: str) -> memoryview:
        end = self.offset + n
        if end > len(self.view):
            raise TruncatedMessageError(
                f"message truncated in {what}: needs {n} bytes at offset {self.offset}, "
                f"{len(self.view) - self.offset} left"
            )
        chunk = self.view[self.offset : end]
        self.offset = end
        return chunk


def _decode_field(reader: _Reader, kind: str, name: str) -> Any:
    if kind == "u8":
        return reader.take(1, name)[0]
    if kind == "u64":
        return _U64.unpack(reader.take(8, name))[0]
    if kind == "b32":
        return bytes(reader.take(32, name))
    if kind == "points":
        width, count = _POINTS_HEAD.unpack(reader.take(_POINTS_HEAD.size, name))
        if not 1 <= width <= MAX_POINT_WIDTH:
            raise MalformedMessageError(f"field {name!r} has invalid point width {width}")
        if count > (len(reader.view) - reader.offset) // width:
            raise TruncatedMessageError(f"message truncated in {name}: declares {count} points of {width} bytes")
        data = reader.take(count * width, name)
        return np.frombuffer(data, dtype=np.uint8).reshape(count, width)
    if kind == "index":
        (count,) = _U64.unpack(reader.take(8, name))
        if count > (len(reader.view) - reader.offset) // 8:
            raise TruncatedMessageError(f"message truncated in {name}: declares {count} indices")
        return np.frombuffer(reader.take(count * 8, name), dtype="<u8").astype(np.int64)
    raise AssertionError(kind)


def decode(data: bytes | bytearray | memoryview) -> Message:
    """Parse and fully validate one message (structure only; the state machine checks order)."""
    view = memoryview(data).cast("B")
    if len(view) < HEADER.size:
        raise TruncatedMessageError(f"message truncated: {len(view)} bytes, the header alone is {HEADER.size}")
    magic, version, mtype, step, session_id, payload_len = HEADER.unpack(view[: HEADER.size])
    if magic != MAGIC:
        raise MalformedMessageError(f"not a securevfl PSI message (magic {magic!r})")
    if version != VERSION:
        raise UnsupportedVersionError(f"codec version {version} is not supported (want {VERSION})")
    try:
        message_type = MessageType(mtype)
    except ValueError:
        raise MalformedMessageError(f"unknown message type {mtype}") from None
    if HEADER.size + payload_len > len(view):
        raise TruncatedMessageError(
            f"message truncated: header declares {payload_len} payload bytes, {len(view) - HEADER.size} present"
        )
    if HEADER.size + payload_len < len(view):
        raise MalformedMessageError(
            f"{len(view) - HEADER.size - payload_len} trailing bytes after the declared payload"
        )
    reader = _Reader(view, HEADER.size)
    fields = {name: _decode_field(reader, kind, name) for name, kind in SCHEMAS[message_type]}
    if reader.offset != len(view):
        raise MalformedMessageError(f"{message_type.name} payload has {len(view) - reader.offset} unparsed bytes")
    return Message(message_type, step, bytes(session_id), fields)

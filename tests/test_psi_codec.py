"""Binary codec: round trips, and every kind of damage raises a specific PSIProtocolError."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psi.codec import HEADER, MAGIC, Message, MessageType, decode, encode
from psi.errors import (
    MalformedMessageError,
    PSIProtocolError,
    TruncatedMessageError,
    UnsupportedVersionError,
)

SID = bytes(range(16))


def reply(n: int = 5) -> Message:
    pts = np.arange(n * 32, dtype=np.uint64).astype(np.uint8).reshape(n, 32)
    return Message(MessageType.REPLY, 1, SID, {"salt_share": b"s" * 32, "blinded": pts})


def test_round_trip_all_types():
    msgs = [
        Message(
            MessageType.HELLO,
            0,
            SID,
            {
                "mode": 1,
                "digest_len": 16,
                "normalize": 5,
                "align_follows": 0,
                "salt_share": b"r" * 32,
                "n_items": 12345,
            },
        ),
        reply(),
        Message(
            MessageType.BLINDED,
            2,
            SID,
            {"transcript": b"t" * 32, "blinded": np.zeros((3, 32), np.uint8), "double": np.ones((0, 16), np.uint8)},
        ),
        Message(MessageType.DOUBLE, 3, SID, {"double": np.full((4, 16), 7, np.uint8)}),
        Message(MessageType.ALIGN, 4, SID, {"order": np.array([3, 0, 2], np.int64)}),
    ]
    for m in msgs:
        back = decode(encode(m))
        assert back.type == m.type and back.step == m.step and back.session_id == SID
        for k, v in m.fields.items():
            if isinstance(v, np.ndarray):
                assert np.array_equal(back.fields[k], v) and back.fields[k].shape == v.shape
            else:
                assert back.fields[k] == v


def test_no_pickle_and_magic_header():
    data = encode(reply())
    assert data[:4] == MAGIC and b"\x80\x04" not in data[:2]


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=0, max_value=50))
def test_every_truncation_is_detected(n):
    data = encode(reply(n))
    for cut in sorted({0, 1, 10, HEADER.size - 1, HEADER.size, len(data) // 2, len(data) - 1}):
        if cut >= len(data):
            continue
        with pytest.raises(TruncatedMessageError):
            decode(data[:cut])


def test_trailing_bytes():
    with pytest.raises(MalformedMessageError, match="trailing"):
        decode(encode(reply()) + b"\x00")


def test_bad_magic_version_type():
    data = bytearray(encode(reply()))
    bad = bytes(b"XXXX" + data[4:])
    with pytest.raises(MalformedMessageError, match="magic"):
        decode(bad)
    v = bytearray(data)
    v[4] = 99
    with pytest.raises(UnsupportedVersionError):
        decode(bytes(v))
    t = bytearray(data)
    t[5] = 42
    with pytest.raises(MalformedMessageError, match="unknown message type"):
        decode(bytes(t))


def test_inner_count_larger_than_payload():
    data = bytearray(encode(reply(2)))
    # points field header sits after the 32-byte salt share: width u8, count u64
    off = HEADER.size + 32 + 1
    data[off : off + 8] = struct.pack("<Q", 10**12)
    with pytest.raises(TruncatedMessageError):
        decode(bytes(data))


def test_payload_shorter_than_schema_is_malformed_not_crash():
    data = bytearray(encode(reply(2)))
    # shrink declared payload length and drop the bytes: the points field no longer fits
    payload_len = len(data) - HEADER.size - 64
    head = HEADER.pack(MAGIC, 1, int(MessageType.REPLY), 1, SID, payload_len)
    with pytest.raises(PSIProtocolError):
        decode(head + bytes(data[HEADER.size : HEADER.size + payload_len]))


def test_invalid_point_width():
    data = bytearray(encode(reply(1)))
    data[HEADER.size + 32] = 0  # width 0
    with pytest.raises(MalformedMessageError, match="width"):
        decode(bytes(data))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_random_garbage_never_decodes_silently_wrong(blob):
    data = MAGIC + b"\x01" + blob
    try:
        message = decode(data)
    except PSIProtocolError as exc:  # refused as a damaged message (truncated, malformed, another version)
        assert isinstance(exc, MalformedMessageError), repr(exc)
    else:  # what decodes is exactly what it says: it encodes back to the same bytes, none ignored or misread
        assert encode(message) == data

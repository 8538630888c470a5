"""Typed wire codec: every payload a party sends is encoded here, exactly as it would cross a wire.

msgpack carries the structure (``None``, bools, ints, floats, strings, bytes, lists, string-keyed
dicts); extension types carry numpy arrays, torch tensors, tuples and arbitrary-size integers
(Paillier ciphertexts). Decoding never unpickles: an unknown extension code or a non-string dict key
is a :class:`~securevfl.errors.ProtocolError` (CrypTen needed a restricted unpickler for exactly
this). torch is imported lazily, so the codec also serves torch-free callers.

Hostile input. A tuple travels as an extension whose body is itself a msgpack document. Decoding it
by calling the decoder again from inside msgpack's C unpacker (as an early version did) let a ~2 KB
frame of nested tuples overflow the C stack and kill the process before Python's recursion limit
applied. The extension hook therefore only wraps the body (:class:`_PendingTuple`); :func:`decode`
then expands pending tuples with an explicit work list, one C ``unpackb`` call per tuple and no
recursion, and refuses any document nested deeper than :data:`MAX_DEPTH` containers. Every
malformed frame is a :class:`~securevfl.errors.ProtocolError`; the runtime adds the sender's name.
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack
import numpy as np

from securevfl.errors import ProtocolError

_EXT_NDARRAY = 1
_EXT_TENSOR = 2
_EXT_BIGINT = 3
_EXT_TUPLE = 4

#: Deepest nesting of lists, dicts and tuples a decoded message may have (real messages use < 8).
MAX_DEPTH = 32

#: dtypes allowed on the wire; anything else (object arrays above all) is refused.
_ALLOWED_DTYPES = frozenset(
    {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
     "float16", "float32", "float64"}
)


def _pack_array(array: np.ndarray) -> bytes:
    array = np.require(array, requirements="C")  # keeps 0-d arrays 0-d, unlike ascontiguousarray
    dtype = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
    name = dtype.name
    if name not in _ALLOWED_DTYPES:
        raise ProtocolError(f"dtype {array.dtype} cannot be sent on the wire")
    header = msgpack.packb([name, list(array.shape)])
    body = array.astype(dtype.newbyteorder("<"), copy=False)  # no copy on little-endian hosts
    return b"".join((struct.pack("<I", len(header)), header, body.tobytes()))


def _unpack_array(data: bytes, *, copy: bool = True) -> np.ndarray:
    """Decode an array; ``copy=False`` may return a read-only view of ``data`` (caller copies)."""
    if len(data) < 4:
        raise ProtocolError("truncated array header")
    (header_len,) = struct.unpack_from("<I", data)
    try:
        name, shape = msgpack.unpackb(data[4 : 4 + header_len])
    except Exception as exc:  # msgpack raises several types on garbage
        raise ProtocolError("malformed array header") from exc
    if name not in _ALLOWED_DTYPES:
        raise ProtocolError(f"dtype {name!r} is not allowed on the wire")
    dtype = np.dtype(name).newbyteorder("<")
    body = memoryview(data)[4 + header_len :]
    count = int(np.prod(shape)) if shape else 1
    if count * dtype.itemsize != len(body):
        raise ProtocolError("array body length does not match its header")
    view = np.frombuffer(body, dtype=dtype).reshape(tuple(shape))
    return view.astype(dtype.newbyteorder("="), copy=copy)


def _default(obj: Any) -> msgpack.ExtType:
    if isinstance(obj, np.ndarray):
        return msgpack.ExtType(_EXT_NDARRAY, _pack_array(obj))
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, tuple):
        return msgpack.ExtType(_EXT_TUPLE, encode(list(obj)))
    if isinstance(obj, int):  # only reached for ints outside msgpack's 64-bit range
        sign = b"-" if obj < 0 else b"+"
        magnitude = abs(obj)
        return msgpack.ExtType(_EXT_BIGINT, sign + magnitude.to_bytes((magnitude.bit_length() + 7) // 8 or 1, "big"))
    type_name = type(obj).__module__ + "." + type(obj).__qualname__
    if type_name == "torch.Tensor" or type(obj).__name__ in {"Tensor", "Parameter"}:
        array = obj.detach().cpu().numpy()
        return msgpack.ExtType(_EXT_TENSOR, _pack_array(array))
    if hasattr(obj, "__index__") and not isinstance(obj, bool):  # gmpy2.mpz and friends
        return _default(int(obj))
    raise ProtocolError(f"cannot encode a value of type {type_name} for the wire")


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _EXT_NDARRAY:
        return _unpack_array(data)
    if code == _EXT_TENSOR:
        import torch

        return torch.from_numpy(np.array(_unpack_array(data, copy=False)))  # one writable copy
    if code == _EXT_BIGINT:
        if not data or data[:1] not in (b"+", b"-"):
            raise ProtocolError("malformed big integer")
        value = int.from_bytes(data[1:], "big")
        return -value if data[:1] == b"-" else value
    if code == _EXT_TUPLE:
        return _PendingTuple(data)  # expanded by decode()'s work list, never from inside the C unpacker
    raise ProtocolError(f"unknown extension type {code} on the wire")


def encode(value: Any) -> bytes:
    """Serialise ``value`` to bytes. Tensors travel as CPU arrays and come back as CPU tensors."""
    try:
        packed: bytes = msgpack.packb(value, default=_default, use_bin_type=True, strict_types=True)
        return packed
    except ProtocolError:
        raise
    except (TypeError, ValueError, OverflowError) as exc:
        raise ProtocolError(f"cannot encode message: {exc}") from exc


class _PendingTuple:
    """A tuple extension's undecoded body, and its items once unpacked."""

    __slots__ = ("body", "items")

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.items: list[Any] = []


def _unpack(data: bytes) -> Any:
    try:
        return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=True)
    except ProtocolError:
        raise
    except Exception as exc:  # msgpack raises several types (and RecursionError, MemoryError) on garbage
        raise ProtocolError(f"malformed message: {type(exc).__name__}: {exc}") from exc


def decode(data: bytes) -> Any:
    """Inverse of :func:`encode`. Raises ProtocolError on anything malformed or nested too deeply.

    Iterative: a hostile frame cannot exhaust the C or the Python stack (see the module docstring).
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ProtocolError(f"a message must be bytes, not {type(data).__name__}")
    root: list[Any] = [_unpack(data)]
    # (tuple, its container, its key) in discovery order: a tuple precedes the tuples inside it
    pending: list[tuple[_PendingTuple, Any, Any]] = []
    stack: list[tuple[Any, int]] = [(root, 0)]  # (mutable container, nesting depth)
    while stack:
        container, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ProtocolError(f"malformed message: nested deeper than {MAX_DEPTH} levels")
        if isinstance(container, dict):
            if any(not isinstance(key, str) for key in container):
                raise ProtocolError("malformed message: a dictionary key is not a string")
            slots = list(container.items())
        else:
            slots = list(enumerate(container))
        for key, child in slots:
            if isinstance(child, _PendingTuple):
                child.items = _unpack(child.body)
                if not isinstance(child.items, list):
                    raise ProtocolError("malformed message: a tuple's body is not a list")
                pending.append((child, container, key))
                stack.append((child.items, depth + 1))
            elif isinstance(child, (list, dict)):
                stack.append((child, depth + 1))
    for item, container, key in reversed(pending):  # inner tuples first: each outer one sees finished ones
        container[key] = tuple(item.items)
    return root[0]

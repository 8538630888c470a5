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

import functools
import struct
import sys
from dataclasses import dataclass
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
    if not isinstance(name, str) or name not in _ALLOWED_DTYPES:
        raise ProtocolError(f"dtype {name!r} is not allowed on the wire")
    if not isinstance(shape, list) or any(type(n) is not int or n < 0 for n in shape):
        raise ProtocolError("malformed array header: the shape is not a list of non-negative integers")
    dtype = np.dtype(name).newbyteorder("<")
    body = memoryview(data)[4 + header_len :]
    count = 1
    for n in shape:  # Python integers: a product too large for int64 cannot wrap round to the body's length
        count *= n
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


@dataclass(frozen=True)
class Parcel:
    """What an in-process link carries instead of bytes: the decoded value and the encoded size.

    ``value`` is what :func:`decode` would return for ``encode(original)`` — a copy the sender can
    no longer change — and ``nbytes`` is exactly ``len(encode(original))``, so the Meter counts the
    bytes the wire would carry.
    """

    value: Any
    nbytes: int


def payload_size(payload: bytes | Parcel) -> int:
    """Bytes of an envelope's payload, encoded or carried as a :class:`Parcel`."""
    return payload.nbytes if isinstance(payload, Parcel) else len(payload)


def transfer(value: Any) -> Parcel | bytes:
    """``value`` for an in-process link: a :class:`Parcel`, or the encoded bytes off the fast path.

    The fast path copies what the codec would rebuild (tensors and arrays into fresh contiguous CPU
    copies, containers into new ones) and counts the bytes :func:`encode` would write without
    writing them: one copy of each array instead of the four that encoding and decoding make.
    Anything else (big integers, subclasses, deep nesting, refused values) is encoded for real, so
    refusals and their messages are exactly the codec's.
    """
    try:
        copy, size = _copy_sized(value, 0)
    except _OffFastPath:
        return encode(value)
    return Parcel(copy, size)


class _OffFastPath(Exception):
    """The value needs the real codec (which also raises the codec's errors for refused values)."""


#: Nesting the fast path follows; deeper documents take the codec (which enforces MAX_DEPTH).
_FAST_DEPTH = 16
_INT_SIZES = ((128, 1), (1 << 8, 2), (1 << 16, 3), (1 << 32, 5), (1 << 64, 9))  # msgpack uint forms
_NEG_SIZES = ((-32, 1), (-(1 << 7), 2), (-(1 << 15), 3), (-(1 << 31), 5), (-(1 << 63), 9))


def _int_size(value: int) -> int:
    if value >= 0:
        for bound, size in _INT_SIZES:
            if value < bound:
                return size
    else:
        for bound, size in _NEG_SIZES:
            if value >= bound:
                return size
    raise _OffFastPath  # a big integer: an extension, left to the codec


def _length_size(n: int, fix: int, *wide: int) -> int:
    """Header bytes of a str / bin / array / map of length ``n`` (fix form below ``fix``, then 8/16/32-bit)."""
    if n < fix:
        return 1
    for width, bound in zip(wide, (1 << 8, 1 << 16, 1 << 32), strict=False):
        if width and n < bound:
            return width
    raise _OffFastPath


def _ext_size(n: int) -> int:
    """Bytes of an extension whose body is ``n`` bytes (fixext 1/2/4/8/16, then ext 8/16/32)."""
    if n in (1, 2, 4, 8, 16):
        return 2 + n
    return n + (3 if n < 1 << 8 else 4 if n < 1 << 16 else 6)


@functools.lru_cache(maxsize=1024)
def _array_header_size(dtype_name: str, shape: tuple[int, ...]) -> int:
    """Bytes of an array extension's own header (its length prefix and ``[dtype, shape]``)."""
    return 4 + len(msgpack.packb([dtype_name, list(shape)]))


def _array_ext_size(dtype_name: str, shape: tuple[int, ...], nbytes: int) -> int:
    return _ext_size(_array_header_size(dtype_name, shape) + nbytes)


def _copy_sized(value: Any, depth: int) -> tuple[Any, int]:
    kind = type(value)
    if kind.__name__ == "Tensor" and kind.__module__ == "torch":  # the common case first
        return _copy_tensor(value)
    if value is None or kind is bool:
        return value, 1
    if kind is int:
        return value, _int_size(value)
    if kind is float:
        return value, 9
    if kind is str:
        try:
            n = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            raise _OffFastPath from None
        return value, n + _length_size(n, 32, 2, 3, 5)
    if kind is bytes:
        return value, len(value) + _length_size(len(value), 0, 2, 3, 5)
    if depth >= _FAST_DEPTH:
        raise _OffFastPath
    if kind is list or kind is tuple:
        items, size = [], _length_size(len(value), 16, 0, 3, 5)
        for item in value:
            copy, n = _copy_sized(item, depth + 1)
            items.append(copy)
            size += n
        return (items, size) if kind is list else (tuple(items), _ext_size(size))
    if kind is dict:
        out, size = {}, _length_size(len(value), 16, 0, 3, 5)
        for key, item in value.items():
            if type(key) is not str:
                raise _OffFastPath
            _, key_size = _copy_sized(key, depth + 1)
            out[key], n = _copy_sized(item, depth + 1)
            size += key_size + n
        return out, size
    if kind is np.ndarray:
        name = value.dtype.name
        if name not in _ALLOWED_DTYPES:
            raise _OffFastPath
        copy = np.array(value, dtype=value.dtype.newbyteorder("="), order="C", copy=True)
        return copy, _array_ext_size(name, value.shape, copy.nbytes)
    if isinstance(value, np.generic):
        item = value.item()
        if type(item) not in (bool, int, float):
            raise _OffFastPath
        return _copy_sized(item, depth)
    raise _OffFastPath


def _copy_tensor(tensor: Any) -> tuple[Any, int]:
    torch = sys.modules["torch"]  # loaded: a tensor exists
    name = str(tensor.dtype).removeprefix("torch.")  # the numpy name of the dtype the codec writes
    if name not in _ALLOWED_DTYPES or tensor.is_conj() or tensor.is_neg() or tensor.layout != torch.strided:
        raise _OffFastPath
    if tensor.device.type == "cpu" and tensor.is_contiguous():
        copy = tensor.detach().clone()
    else:
        copy = tensor.detach().to("cpu", copy=True, memory_format=torch.contiguous_format)
    return copy, _array_ext_size(name, tuple(copy.shape), copy.numel() * copy.element_size())


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
            elif isinstance(child, msgpack.Timestamp):  # extension -1, which msgpack decodes itself
                raise ProtocolError("unknown extension type -1 (timestamp) on the wire")
    for item, container, key in reversed(pending):  # inner tuples first: each outer one sees finished ones
        container[key] = tuple(item.items)
    return root[0]

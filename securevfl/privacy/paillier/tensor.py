"""``EncryptedTensor``: a shaped array of Paillier ciphertexts with homomorphic numpy-like ops.

Unpacked tensors hold one ciphertext per value (signed fixed point at ``scale_bits``) and support
``+``/``-`` with ciphertexts or plaintext arrays (numpy broadcasting), ``*`` by plaintext scalars
or arrays (the scale grows by the multiplier's fraction bits; integer multipliers keep it),
``enc @ W`` / ``W @ enc`` with plaintext matrices, ``sum(axis)``, indexing and reshape.
Packed tensors (see :mod:`.packing`) hold ``slots`` values per ciphertext along the last axis and
support only what cannot carry between slots: ``+`` with packed tensors or plaintext arrays of
the same shape, ``sum`` over leading axes, and ``*`` by small non-negative integers, each checked
against the declared ``max_summands`` headroom.

Every tensor carries its key's fingerprint; combining or decrypting tensors of different keys
raises :class:`~securevfl.errors.CryptoError`. Results of homomorphic operations are marked
un-obfuscated and :meth:`EncryptedTensor.to_bytes` re-randomises them before they leave the
process (python-paillier's ``be_secure=True`` model) unless told otherwise.

:class:`PaillierBackend` is the integer layer (:class:`~.backend.RawPaillierBackend`) plus
``encrypt`` / ``decrypt`` of real arrays as tensors: the ``phe`` and ``fast`` backends subclass it.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from securevfl.errors import ConfigError, CryptoError, ProtocolError

from .backend import RawPaillierBackend
from .encoding import (
    DEFAULT_FRAC_BITS,
    decode_signed,
    encode_signed,
    from_fixed_ints,
    to_fixed_ints,
)
from .packing import PackingLayout, PackingSpec

_MAGIC = b"SVPT"
_VERSION = 1
_FLAG_PACKED = 1
_FLAG_OBFUSCATED = 2
_HEADER = struct.Struct(">4sBB16sIiB")
_PACK_HEADER = struct.Struct(">HIHHI")


def _object_array(items: Sequence[Any], shape: tuple[int, ...]) -> np.ndarray:
    array = np.empty(len(items), dtype=object)
    array[:] = list(items)
    return array.reshape(shape)


def _tree_sum(backend: RawPaillierBackend, data: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """Homomorphic sum of ``data`` over ``axes`` by pairwise halving (vectorised adds)."""
    moved = np.moveaxis(data, axes, tuple(range(len(axes))))
    rest: tuple[int, ...] = tuple(moved.shape[len(axes):])
    flat: np.ndarray = moved.reshape((-1, *rest))
    if flat.shape[0] == 0:
        return _object_array([backend.one()] * math.prod(rest), rest)
    while flat.shape[0] > 1:
        half = flat.shape[0] // 2
        left, right = flat[:half].ravel().tolist(), flat[half : 2 * half].ravel().tolist()
        summed = backend.add_raw(left, right)
        stacked: np.ndarray = _object_array(summed, (half, *rest))
        if flat.shape[0] % 2:
            stacked = np.concatenate([stacked, flat[2 * half :]], axis=0)
        flat = stacked
    return flat[0, ...]


def _normalise_axes(axis: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    out = []
    for a in axes:
        a = int(a)
        if not -ndim <= a < ndim:
            raise ConfigError(f"axis {a} out of range for {ndim}-d tensor")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ConfigError("repeated axis")
    return tuple(sorted(out))


class EncryptedTensor:
    """Ciphertexts of a real array under one Paillier key, bound to a backend for arithmetic."""

    __slots__ = ("backend", "ciphertexts", "shape", "scale_bits", "layout", "terms",
                 "obfuscated", "fingerprint")

    # Make numpy defer to our reflected operators (W @ enc, x + enc, x * enc).
    __array_ufunc__ = None

    def __init__(
        self,
        backend: RawPaillierBackend,
        ciphertexts: np.ndarray,
        *,
        shape: tuple[int, ...],
        scale_bits: int,
        layout: PackingLayout | None = None,
        terms: int = 1,
        obfuscated: bool = False,
        fingerprint: bytes | None = None,
    ) -> None:
        self.backend = backend
        self.ciphertexts = ciphertexts
        self.shape = tuple(int(d) for d in shape)
        self.scale_bits = int(scale_bits)
        self.layout = layout
        self.terms = int(terms)
        self.obfuscated = bool(obfuscated)
        self.fingerprint = fingerprint or backend.public_key.fingerprint
        if self.fingerprint != backend.public_key.fingerprint:
            raise CryptoError("tensor was encrypted under a different key than its backend's")

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def encrypt(
        cls,
        backend: RawPaillierBackend,
        values: np.ndarray | float | Sequence[float],
        *,
        frac_bits: int = DEFAULT_FRAC_BITS,
        packing: PackingSpec | None = None,
    ) -> EncryptedTensor:
        """Encode and encrypt ``values`` (fresh randomness for every ciphertext)."""
        array = np.asarray(values)
        if array.dtype.kind not in "biuf":
            array = np.asarray(array, dtype=np.float64)
        if packing is None:
            if frac_bits < 0:
                raise ConfigError("frac_bits must be >= 0")
            residues = encode_signed(to_fixed_ints(array, frac_bits), backend.public_key.n)
            ciphertexts = backend.encrypt_raw(residues)
            return cls(backend, _object_array(ciphertexts, array.shape), shape=array.shape,
                       scale_bits=frac_bits, obfuscated=True)
        if array.ndim == 0:
            raise ConfigError("packed tensors need at least one axis (the packed one)")
        layout = PackingLayout.for_key(packing, backend.public_key.bits)
        plaintexts, per_row = layout.pack_rows(array.reshape(-1, array.shape[-1]))
        ciphertexts = backend.encrypt_raw(plaintexts)
        data = _object_array(ciphertexts, array.shape[:-1] + (per_row,))
        return cls(backend, data, shape=array.shape, scale_bits=packing.frac_bits,
                   layout=layout, terms=1, obfuscated=True)

    def _derive(self, ciphertexts: np.ndarray, **changes: Any) -> EncryptedTensor:
        fields: dict[str, Any] = dict(shape=ciphertexts.shape if self.layout is None else self.shape,
                      scale_bits=self.scale_bits, layout=self.layout, terms=self.terms,
                      obfuscated=False, fingerprint=self.fingerprint)
        fields.update(changes)
        return EncryptedTensor(self.backend, ciphertexts, **fields)

    def with_backend(self, backend: RawPaillierBackend) -> EncryptedTensor:
        """Rebind the ciphertexts to another backend of the same key (e.g. phe <-> fast)."""
        if backend.public_key.fingerprint != self.fingerprint:
            raise CryptoError("backend holds a different key")
        data = _object_array([backend.from_int(int(c)) for c in self.ciphertexts.ravel()],
                             self.ciphertexts.shape)
        return EncryptedTensor(backend, data, shape=self.shape, scale_bits=self.scale_bits,
                               layout=self.layout, terms=self.terms,
                               obfuscated=self.obfuscated, fingerprint=self.fingerprint)

    # -- properties ----------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        """Number of logical axes."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of logical values."""
        return math.prod(self.shape)

    @property
    def is_packed(self) -> bool:
        """Whether several values share a ciphertext."""
        return self.layout is not None

    @property
    def n_ciphertexts(self) -> int:
        """Number of ciphertexts stored (and sent)."""
        return int(self.ciphertexts.size)

    @property
    def ciphertext_bytes(self) -> int:
        """Fixed width of one serialised ciphertext: bytes of n^2."""
        return (self.backend.public_key.nsquare.bit_length() + 7) // 8

    @property
    def nbytes(self) -> int:
        """Exact length of :meth:`to_bytes` output, without serialising."""
        return len(self._header()) + self.n_ciphertexts * self.ciphertext_bytes

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        layout = self.layout
        packed = f", packed {layout.slots}x{layout.spec.slot_bits}b" if layout else ""
        return (f"EncryptedTensor(shape={self.shape}, scale_bits={self.scale_bits}{packed}, "
                f"key={self.fingerprint.hex()[:12]})")

    # -- checks --------------------------------------------------------------------------------
    def _check_same_key(self, other: EncryptedTensor) -> None:
        if other.fingerprint != self.fingerprint:
            raise CryptoError("tensors were encrypted under different keys")

    def _require_unpacked(self, operation: str) -> None:
        if self.layout is not None:
            raise ConfigError(
                f"{operation} is not supported on packed tensors (allowed: + with packed or "
                "plaintext of the same shape, sum over leading axes, * small int >= 0)"
            )

    # -- arithmetic ----------------------------------------------------------------------------
    def _rescaled(self, scale_bits: int) -> EncryptedTensor:
        if scale_bits == self.scale_bits:
            return self
        factor = 1 << (scale_bits - self.scale_bits)
        flat = self.ciphertexts.ravel().tolist()
        data = _object_array(self.backend.mul_raw(flat, [factor] * len(flat)),
                             self.ciphertexts.shape)
        return self._derive(data, scale_bits=scale_bits)

    def __add__(self, other: Any) -> EncryptedTensor:
        if isinstance(other, EncryptedTensor):
            return self._add_encrypted(other)
        return self._add_plain(other)

    def __radd__(self, other: Any) -> EncryptedTensor:
        return self.__add__(other)

    def _add_encrypted(self, other: EncryptedTensor) -> EncryptedTensor:
        self._check_same_key(other)
        if (self.layout is None) != (other.layout is None):
            raise ConfigError("cannot add a packed and an unpacked tensor")
        if self.layout is not None:
            if self.layout != other.layout or self.shape[-1] != other.shape[-1]:
                raise ConfigError("packed tensors must share layout and packed-axis length")
            terms = self.terms + other.terms
            self.layout.check_terms(terms)
            a, b = np.broadcast_arrays(self.ciphertexts, other.ciphertexts)
            data = _object_array(self.backend.add_raw(a.ravel().tolist(), b.ravel().tolist()),
                                 a.shape)
            shape = a.shape[:-1] + (self.shape[-1],)
            return self._derive(data, shape=shape, terms=terms)
        scale = max(self.scale_bits, other.scale_bits)
        left, right = self._rescaled(scale), other._rescaled(scale)
        a, b = np.broadcast_arrays(left.ciphertexts, right.ciphertexts)
        data = _object_array(self.backend.add_raw(a.ravel().tolist(), b.ravel().tolist()), a.shape)
        return self._derive(data, scale_bits=scale)

    def _add_plain(self, other: Any) -> EncryptedTensor:
        plain = np.asarray(other)
        if plain.dtype.kind not in "biuf":
            raise ConfigError(f"cannot add {type(other).__name__} to an EncryptedTensor")
        n = self.backend.public_key.n
        if self.layout is not None:
            plain = np.broadcast_to(plain, self.shape)
            terms = self.terms + 1
            self.layout.check_terms(terms)
            packed, _ = self.layout.pack_rows(plain.reshape(-1, self.shape[-1]))
            flat = self.ciphertexts.ravel().tolist()
            data = _object_array(self.backend.add_plain_raw(flat, packed), self.ciphertexts.shape)
            return self._derive(data, terms=terms)
        shape = np.broadcast_shapes(self.shape, plain.shape)
        ciphertexts = np.broadcast_to(self.ciphertexts, shape)
        residues = encode_signed(to_fixed_ints(np.broadcast_to(plain, shape), self.scale_bits), n)
        summed = self.backend.add_plain_raw(ciphertexts.ravel().tolist(), residues)
        return self._derive(_object_array(summed, shape))

    def __neg__(self) -> EncryptedTensor:
        self._require_unpacked("negation")
        return self * -1

    def __sub__(self, other: Any) -> EncryptedTensor:
        if isinstance(other, EncryptedTensor):
            return self + (-other)
        self._require_unpacked("subtraction")
        return self + (-np.asarray(other))

    def __rsub__(self, other: Any) -> EncryptedTensor:
        return (-self).__add__(other)

    def mul(self, other: Any, *, frac_bits: int = DEFAULT_FRAC_BITS) -> EncryptedTensor:
        """Multiply by a plaintext scalar/array; float multipliers are encoded at ``frac_bits``."""
        if isinstance(other, EncryptedTensor):
            raise ConfigError("Paillier cannot multiply two ciphertexts")
        plain = np.asarray(other)
        if plain.dtype.kind not in "biuf":
            raise ConfigError(f"cannot multiply an EncryptedTensor by {type(other).__name__}")
        integer = plain.dtype.kind in "biu"
        if self.layout is not None:
            if not (integer and plain.ndim == 0 and int(plain) >= 0):
                raise ConfigError("packed tensors can only be multiplied by an integer >= 0")
            k = int(plain)
            terms = self.terms * k
            self.layout.check_terms(terms)
            flat = self.ciphertexts.ravel().tolist()
            data = _object_array(self.backend.mul_raw(flat, [k] * len(flat)),
                                 self.ciphertexts.shape)
            return self._derive(data, terms=terms)
        bits = 0 if integer else frac_bits
        shape = np.broadcast_shapes(self.shape, plain.shape)
        ciphertexts = np.broadcast_to(self.ciphertexts, shape)
        scalars = to_fixed_ints(np.broadcast_to(plain, shape), bits)
        products = self.backend.mul_raw(ciphertexts.ravel().tolist(), scalars)
        return self._derive(_object_array(products, shape), scale_bits=self.scale_bits + bits)

    def __mul__(self, other: Any) -> EncryptedTensor:
        return self.mul(other)

    def __rmul__(self, other: Any) -> EncryptedTensor:
        return self.mul(other)

    def __truediv__(self, other: Any) -> EncryptedTensor:
        return self.mul(1.0 / np.asarray(other, dtype=np.float64))

    def sum(self, axis: int | Sequence[int] | None = None) -> EncryptedTensor:
        """Homomorphic sum over ``axis`` (all axes if None; packed: leading axes only)."""
        axes = _normalise_axes(axis, self.ndim)
        if self.layout is not None:
            if self.ndim - 1 in axes:
                raise ConfigError("cannot sum over the packed (last) axis of a packed tensor")
            terms = self.terms * math.prod(self.shape[a] for a in axes)
            self.layout.check_terms(terms)
            data = _tree_sum(self.backend, self.ciphertexts, axes)
            shape = tuple(d for i, d in enumerate(self.shape) if i not in axes)
            return self._derive(data, shape=shape, terms=terms)
        return self._derive(_tree_sum(self.backend, self.ciphertexts, axes))

    def _weight_ints(self, other: Any, frac_bits: int) -> tuple[np.ndarray, int]:
        weights = np.asarray(other)
        if weights.dtype.kind not in "biuf":
            raise ConfigError("matrix products need a numeric plaintext array")
        bits = 0 if weights.dtype.kind in "biu" else frac_bits
        ints = _object_array(to_fixed_ints(weights, bits), weights.shape)
        return ints, bits

    def _combine(self, vectors: np.ndarray, coeffs: list[list[int]]) -> np.ndarray:
        """For each row of ``vectors`` (k, n): [prod_i c_i^coeffs[j][i] for j] -> (k, m)."""
        rows = [self.backend.linear_combine_raw(row.tolist(), coeffs) for row in vectors]
        return _object_array([c for row in rows for c in row], (len(rows), len(coeffs)))

    def matmul(self, other: Any, *, frac_bits: int = DEFAULT_FRAC_BITS) -> EncryptedTensor:
        """``enc @ W``: enc (..., n) with plaintext W (n,) or (n, m); float W at ``frac_bits``."""
        self._require_unpacked("matrix product")
        weights, bits = self._weight_ints(other, frac_bits)
        if self.ndim == 0 or weights.ndim not in (1, 2):
            raise ConfigError("matmul needs enc (..., n) and a plaintext (n,) or (n, m)")
        if weights.shape[0] != self.shape[-1]:
            raise ConfigError(f"shape mismatch {self.shape} @ {weights.shape}")
        coeffs = [weights.tolist()] if weights.ndim == 1 else weights.T.tolist()
        out = self._combine(self.ciphertexts.reshape(-1, self.shape[-1]), coeffs)
        shape = self.shape[:-1] + ((len(coeffs),) if weights.ndim == 2 else ())
        return self._derive(out.reshape(shape), scale_bits=self.scale_bits + bits)

    def rmatmul(self, other: Any, *, frac_bits: int = DEFAULT_FRAC_BITS) -> EncryptedTensor:
        """``W @ enc``: plaintext W (m, n) or (n,) with enc (n,) or (n, k)."""
        self._require_unpacked("matrix product")
        weights, bits = self._weight_ints(other, frac_bits)
        if self.ndim not in (1, 2) or weights.ndim not in (1, 2):
            raise ConfigError("matmul needs a plaintext (m, n) or (n,) and enc (n,) or (n, k)")
        if weights.shape[-1] != self.shape[0]:
            raise ConfigError(f"shape mismatch {weights.shape} @ {self.shape}")
        coeffs = weights.tolist() if weights.ndim == 2 else [weights.tolist()]
        columns = self.ciphertexts.reshape(self.shape[0], -1).T  # (k, n)
        out = self._combine(columns, coeffs).T  # (m, k)
        shape = weights.shape[:-1] + self.shape[1:]
        return self._derive(np.ascontiguousarray(out).reshape(shape),
                            scale_bits=self.scale_bits + bits)

    def __matmul__(self, other: Any) -> EncryptedTensor:
        return self.matmul(other)

    def __rmatmul__(self, other: Any) -> EncryptedTensor:
        return self.rmatmul(other)

    def __getitem__(self, index: Any) -> EncryptedTensor:
        self._require_unpacked("indexing")
        data = self.ciphertexts[index]
        if not isinstance(data, np.ndarray):
            data = _object_array([data], ())
        return self._derive(data, obfuscated=self.obfuscated)

    def reshape(self, *shape: int) -> EncryptedTensor:
        """Reshape an unpacked tensor (no crypto work)."""
        self._require_unpacked("reshape")
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        data = self.ciphertexts.reshape(shape)
        return self._derive(data, obfuscated=self.obfuscated)

    def transpose(self, *axes: int) -> EncryptedTensor:
        """Permute the axes of an unpacked tensor (no crypto work)."""
        self._require_unpacked("transpose")
        data = self.ciphertexts.transpose(*axes) if axes else self.ciphertexts.T
        return self._derive(data, obfuscated=self.obfuscated)

    @property
    def T(self) -> EncryptedTensor:  # noqa: N802 - numpy's name
        """Reversed axes, as ``ndarray.T``."""
        return self.transpose()

    @staticmethod
    def concatenate(tensors: Sequence[EncryptedTensor], axis: int = 0) -> EncryptedTensor:
        """Join unpacked tensors of one key along ``axis`` (scales aligned to the largest)."""
        if not tensors:
            raise ConfigError("nothing to concatenate")
        first = tensors[0]
        for tensor in tensors:
            first._check_same_key(tensor)
            tensor._require_unpacked("concatenate")
        scale = max(t.scale_bits for t in tensors)
        parts = [t._rescaled(scale).ciphertexts for t in tensors]
        data = np.concatenate(parts, axis=axis)
        obfuscated = all(t.obfuscated for t in tensors) and all(
            t.scale_bits == scale for t in tensors)
        return first._derive(data, scale_bits=scale, obfuscated=obfuscated)

    def rerandomize(self) -> EncryptedTensor:
        """Fresh randomness for every ciphertext (do this before sharing derived results)."""
        flat = self.ciphertexts.ravel().tolist()
        data = _object_array(self.backend.rerandomize_raw(flat), self.ciphertexts.shape)
        return self._derive(data, shape=self.shape, obfuscated=True)

    # -- decryption ----------------------------------------------------------------------------
    def decrypt(self, backend: RawPaillierBackend | None = None) -> np.ndarray:
        """Decrypt with ``backend`` (default: own backend); wrong key raises CryptoError."""
        backend = backend or self.backend
        if backend.public_key.fingerprint != self.fingerprint:
            raise CryptoError("ciphertext was produced under a different key")
        residues = backend.decrypt_raw(self.ciphertexts.ravel().tolist())
        if self.layout is None:
            signed = decode_signed(residues, backend.public_key.n)
            return from_fixed_ints(signed, self.scale_bits).reshape(self.shape)
        ints = self.layout.unpack(residues, self.terms, self.shape[-1])
        return from_fixed_ints(ints, self.scale_bits).reshape(self.shape)

    # -- serialisation -------------------------------------------------------------------------
    def _header(self, obfuscated: bool | None = None) -> bytes:
        obfuscated = self.obfuscated if obfuscated is None else obfuscated
        flags = (_FLAG_PACKED if self.layout else 0) | (_FLAG_OBFUSCATED if obfuscated else 0)
        parts = [_HEADER.pack(_MAGIC, _VERSION, flags, self.fingerprint, self.ciphertext_bytes,
                              self.scale_bits, self.ndim)]
        parts.append(struct.pack(f">{self.ndim}Q", *self.shape))
        if self.layout is not None:
            spec = self.layout.spec
            parts.append(_PACK_HEADER.pack(spec.slot_bits, spec.max_summands, spec.frac_bits,
                                           self.layout.slots, self.terms))
        return b"".join(parts)

    def to_bytes(self, *, be_secure: bool = True) -> bytes:
        """Header + fixed-width big-endian ciphertexts; re-randomises first if ``be_secure``."""
        tensor = self if (self.obfuscated or not be_secure) else self.rerandomize()
        width = self.ciphertext_bytes
        body = b"".join(int(c).to_bytes(width, "big") for c in tensor.ciphertexts.ravel().tolist())
        return tensor._header() + body

    @classmethod
    def from_bytes(cls, data: bytes, backend: RawPaillierBackend) -> EncryptedTensor:
        """Parse :meth:`to_bytes` output; a different key raises CryptoError, junk ProtocolError."""
        view = memoryview(data)
        if len(view) < _HEADER.size:
            raise ProtocolError("truncated EncryptedTensor header")
        magic, version, flags, fingerprint, width, scale_bits, ndim = _HEADER.unpack_from(view, 0)
        if magic != _MAGIC or version != _VERSION:
            raise ProtocolError("not an EncryptedTensor (bad magic or version)")
        if fingerprint != backend.public_key.fingerprint:
            raise CryptoError("ciphertext was produced under a different key")
        pos = _HEADER.size
        if len(view) < pos + 8 * ndim:
            raise ProtocolError("truncated EncryptedTensor shape")
        shape = struct.unpack_from(f">{ndim}Q", view, pos)
        pos += 8 * ndim
        layout, terms = None, 1
        if flags & _FLAG_PACKED:
            if len(view) < pos + _PACK_HEADER.size or ndim == 0:
                raise ProtocolError("truncated packing header")
            slot_bits, max_summands, frac_bits, slots, terms = _PACK_HEADER.unpack_from(view, pos)
            pos += _PACK_HEADER.size
            try:
                spec = PackingSpec(slot_bits=slot_bits, max_summands=max_summands,
                                   frac_bits=frac_bits)
            except ConfigError as exc:
                raise ProtocolError("invalid packing header") from exc
            layout = PackingLayout.for_key(spec, backend.public_key.bits)
            if layout.slots != slots or terms > max_summands:
                raise ProtocolError("packing header inconsistent with this key")
            cshape = tuple(shape[:-1]) + (layout.n_ciphertexts(shape[-1]),)
        else:
            cshape = tuple(shape)
        nsq = backend.public_key.nsquare
        if width != (nsq.bit_length() + 7) // 8:
            raise ProtocolError("ciphertext width does not match the key")
        count = math.prod(cshape)
        if len(view) != pos + count * width:
            raise ProtocolError("EncryptedTensor body has the wrong length")
        body = bytes(view[pos:])
        values = []
        for i in range(count):
            c = int.from_bytes(body[i * width : (i + 1) * width], "big")
            if not 0 < c < nsq:
                raise ProtocolError("ciphertext out of range")
            values.append(backend.from_int(c))
        return cls(backend, _object_array(values, cshape), shape=shape, scale_bits=scale_bits,
                   layout=layout, terms=terms, obfuscated=bool(flags & _FLAG_OBFUSCATED),
                   fingerprint=fingerprint)


class PaillierBackend(RawPaillierBackend):
    """A Paillier backend: the integer layer plus encryption of real arrays as :class:`EncryptedTensor`."""

    def encrypt(
        self,
        values: np.ndarray | float | Sequence[float],
        *,
        frac_bits: int = DEFAULT_FRAC_BITS,
        packing: PackingSpec | None = None,
    ) -> EncryptedTensor:
        """Encrypt an array of reals in fixed point at 2^-frac_bits, or packed.

        With ``packing`` the spec's own ``frac_bits`` applies.
        """
        return EncryptedTensor.encrypt(self, values, frac_bits=frac_bits, packing=packing)

    def decrypt(self, tensor: EncryptedTensor) -> np.ndarray:
        """Decrypt a tensor to float64; raises CryptoError for another key's tensor."""
        if not isinstance(tensor, EncryptedTensor):
            raise ConfigError("decrypt expects an EncryptedTensor")
        return tensor.decrypt(self)

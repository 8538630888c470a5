"""One party's fitted preprocessing (:class:`~securevfl.data.preprocess.PartyEncoder`) as bytes, and back.

A saved model is read later, maybe from a copy someone else handed over, so reading it must not be able
to run code: no pickle (and no joblib, which is pickle). The bytes are

* ``MAGIC``, then a 4-byte big-endian length and a JSON header: the columns, their kinds, the encoded
  column names, the preprocessing summary and ``where`` (plain JSON, read with :func:`json.loads`);
* then the fitted scikit-learn ``ColumnTransformer`` in skops' format (a zip of a JSON schema and
  ``.npy`` arrays read with ``allow_pickle=False``); nothing when the party has no columns.

skops builds only the types it is told to trust (its docs: pass an explicit list, never ``trusted=True``).
:data:`TRUSTED_TYPES` is exactly what :func:`~securevfl.data.preprocess.fit_party_encoder` produces, and
:func:`load_encoder` checks every type named in the schema against it *before* skops imports anything:
skops trusts some types of its own by default, this module trusts only these. Any other type, and any
malformed, truncated or oversized input, is a one-line :class:`~securevfl.errors.ModelError`.
"""

from __future__ import annotations

import io
import json
import math
import struct
import threading
import zipfile
from typing import Any

import sklearn
from sklearn.compose import ColumnTransformer
from skops import io as skops_io

from securevfl.data.columns import CATEGORICAL, DATE, NUMERIC
from securevfl.data.preprocess import PartyEncoder
from securevfl.errors import ModelError

MAGIC = b"SVFLPRE1"
FORMAT = "securevfl.preprocessing"
VERSION = 1
#: Refused before parsing: no party's preprocessing is this big (it holds category lists, not rows).
MAX_BYTES = 256 * 1024 * 1024
#: The JSON header (names and summary); a wide table's thousands of column names fit many times over.
MAX_HEADER_BYTES = 16 * 1024 * 1024
#: Files inside the skops zip (one ``.npy`` per fitted array).
MAX_MEMBERS = 100_000
#: One skops load at a time in a process. numpy reads each ``.npy`` header with ``ast.literal_eval``,
#: and CPython 3.11's AST constructor keeps its recursion depth in state that every thread shares: two
#: parties loading their parts at once on threads (``securevfl.predict``, a threaded federation) could fail
#: with "SystemError: AST constructor recursion depth mismatch" when a garbage collection between the two
#: switched threads (seen once in the test suite; ``tests/test_model_preprocessing.py`` checks the turns).
_LOAD_LOCK = threading.Lock()

#: Every type and function a fitted party encoder is made of (found with ``skops.io.get_untrusted_types``
#: and the schema of encoders over every column kind: numeric with blanks, one-hot with infrequent levels,
#: hashed, dates, embedded codes). A type outside this list is refused, whatever skops itself would trust.
TRUSTED_TYPES: tuple[str, ...] = (
    "builtins.dict",
    "builtins.list",
    "builtins.slice",
    "builtins.str",
    "builtins.tuple",
    "numpy.dtype",
    "numpy.float32",
    "numpy.ndarray",
    "securevfl.data.preprocess.Float32StandardScaler",
    "securevfl.data.preprocess._unseen_is_zero",
    "sklearn.compose._column_transformer.ColumnTransformer",
    "sklearn.feature_extraction._hash.FeatureHasher",
    "sklearn.impute._base.MissingIndicator",
    "sklearn.impute._base.SimpleImputer",
    "sklearn.pipeline.Pipeline",
    "sklearn.preprocessing._encoders.OneHotEncoder",
    "sklearn.preprocessing._encoders.OrdinalEncoder",
    "sklearn.preprocessing._function_transformer.FunctionTransformer",
)
_KINDS = (NUMERIC, CATEGORICAL, DATE)
_LENGTH = struct.Struct(">I")


def _json_clean(value: Any, path: str) -> Any:
    """``value`` as plain JSON types (tuples as lists, numpy scalars as Python numbers); anything else refused."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ModelError(f"cannot save the preprocessing: {path} is {value}, which JSON cannot hold")
        return value
    if hasattr(value, "item") and hasattr(value, "dtype") and getattr(value, "ndim", None) == 0:
        return _json_clean(value.item(), path)  # a numpy scalar
    if isinstance(value, (list, tuple)):
        return [_json_clean(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise ModelError(f"cannot save the preprocessing: {path} has a key that is not text")
        return {k: _json_clean(v, f"{path}[{k!r}]") for k, v in value.items()}
    raise ModelError(f"cannot save the preprocessing: {path} is a {type(value).__name__}, not plain JSON")


def dump_encoder(encoder: PartyEncoder) -> bytes:
    """``encoder`` (fitted) as bytes that :func:`load_encoder` reads back without running code."""
    header = {"format": FORMAT, "version": VERSION, "sklearn": sklearn.__version__,
              "columns": list(encoder.columns), "kinds": dict(encoder.kinds),
              "feature_names": list(encoder.feature_names), "where": encoder.where,
              "summary": _json_clean(encoder.summary, "summary"), "transformer": encoder.transformer is not None}
    text = json.dumps(_json_clean(header, "header"), allow_nan=False, separators=(",", ":")).encode()
    if len(text) > MAX_HEADER_BYTES:
        raise ModelError(f"cannot save the preprocessing: its header is {len(text)} bytes, over {MAX_HEADER_BYTES}")
    body = b"" if encoder.transformer is None else skops_io.dumps(encoder.transformer)
    return MAGIC + _LENGTH.pack(len(text)) + text + body


def _names(value: Any, what: str, label: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ModelError(f"{label}: the saved {what} is not a list of names")
    return tuple(value)


def _header(data: bytes, label: str) -> tuple[dict[str, Any], bytes]:
    """The checked JSON header and the skops bytes after it."""
    if not data.startswith(MAGIC):
        raise ModelError(f"{label}: not a saved securevfl preprocessing (wrong leading bytes)")
    start = len(MAGIC) + _LENGTH.size
    if len(data) < start:
        raise ModelError(f"{label}: the saved preprocessing is truncated")
    (size,) = _LENGTH.unpack_from(data, len(MAGIC))
    if size > MAX_HEADER_BYTES:
        raise ModelError(f"{label}: the saved preprocessing's header claims {size} bytes, over {MAX_HEADER_BYTES}")
    if len(data) < start + size:
        raise ModelError(f"{label}: the saved preprocessing is truncated")
    try:
        header = json.loads(data[start : start + size].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ModelError(f"{label}: the saved preprocessing's header is not valid JSON") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ModelError(f"{label}: not a saved securevfl preprocessing (no {FORMAT!r} header)")
    if header.get("version") != VERSION:
        raise ModelError(f"{label}: the saved preprocessing has format version {header.get('version')!r}; "
                         f"this securevfl reads version {VERSION}")
    return header, data[start + size :]


def _check_types(body: bytes, label: str) -> None:
    """Every type the skops schema names must be in :data:`TRUSTED_TYPES` (checked before skops reads it)."""
    try:
        with zipfile.ZipFile(io.BytesIO(body)) as archive:
            members = archive.infolist()
            if len(members) > MAX_MEMBERS or sum(m.file_size for m in members) > MAX_BYTES:
                raise ModelError(f"{label}: the saved preprocessing unpacks to more than {MAX_BYTES} bytes")
            schema = json.loads(archive.read("schema.json").decode("utf-8"))
    except ModelError:
        raise
    except (zipfile.BadZipFile, KeyError, EOFError, OSError, UnicodeDecodeError, ValueError, RecursionError,
            NotImplementedError) as error:
        raise ModelError(f"{label}: the saved preprocessing's transformer is unreadable "
                         f"({type(error).__name__})") from None
    stack: list[Any] = [schema]
    while stack:  # iterative: a deeply nested schema cannot exhaust the Python stack
        node = stack.pop()
        if isinstance(node, dict):
            if {"__module__", "__class__", "__loader__"} & node.keys():
                module, name = node.get("__module__"), node.get("__class__")
                full = f"{module}.{name}" if isinstance(module, str) and isinstance(name, str) else repr((module, name))
                if full not in TRUSTED_TYPES:
                    shown = full if full.isprintable() and len(full) <= 200 else repr(full[:200])  # one line
                    raise ModelError(f"{label}: the saved preprocessing holds the type {shown}, which a party's "
                                     "preprocessing never uses; refusing to load it")
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def load_encoder(data: bytes, *, where: str = "") -> PartyEncoder:
    """The :class:`PartyEncoder` saved by :func:`dump_encoder`; ``where`` (a file or party) names errors.

    The encoder keeps the ``where`` it was saved with (its own table's name, for its transform errors).
    """
    label = where or "preprocessing"
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ModelError(f"{label}: a saved preprocessing is bytes, not {type(data).__name__}")
    data = bytes(data)
    if len(data) > MAX_BYTES:
        raise ModelError(f"{label}: the saved preprocessing is {len(data)} bytes, over the limit of {MAX_BYTES}")
    header, body = _header(data, label)
    columns = _names(header.get("columns"), "columns", label)
    feature_names = _names(header.get("feature_names"), "encoded column names", label)
    kinds, summary, saved_where = header.get("kinds"), header.get("summary"), header.get("where")
    if not isinstance(kinds, dict) or tuple(kinds) != columns or not all(k in _KINDS for k in kinds.values()):
        raise ModelError(f"{label}: the saved column kinds do not match the saved columns")
    if not isinstance(summary, dict) or not isinstance(saved_where, str):
        raise ModelError(f"{label}: the saved preprocessing's summary or name is malformed")
    if header.get("transformer") is not bool(columns) or bool(body) is not bool(columns):
        raise ModelError(f"{label}: the saved preprocessing's transformer does not match its columns")
    transformer = None
    if columns:
        _check_types(body, label)
        try:
            with _LOAD_LOCK:
                transformer = skops_io.loads(body, trusted=list(TRUSTED_TYPES))
        except Exception as error:  # a checked but corrupt file fails in many ways: each is one ModelError
            detail = str(error).splitlines()[0][:200] if str(error) else ""
            raise ModelError(f"{label}: the saved preprocessing's transformer cannot be loaded "
                             f"({type(error).__name__}{': ' + detail if detail else ''})") from None
        indices = getattr(transformer, "output_indices_", None)
        if not isinstance(transformer, ColumnTransformer) or not isinstance(indices, dict):
            raise ModelError(f"{label}: the saved transformer is not a fitted ColumnTransformer")
        width = max((s.stop for s in indices.values() if isinstance(s, slice)), default=0)
        if width != len(feature_names):
            raise ModelError(f"{label}: the saved transformer gives {width} columns, "
                             f"the saved names {len(feature_names)}")
    return PartyEncoder(columns, dict(kinds), feature_names, summary, saved_where, transformer)


__all__ = ["MAX_BYTES", "TRUSTED_TYPES", "dump_encoder", "load_encoder"]

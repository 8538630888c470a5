"""Turn a party's raw IDs into the exact strings that get hashed: type checks, normalisation, dups.

Every party must apply the *same* normalisation, or equal people will not match; the options are
therefore part of the protocol parameters and checked in the first message. Options, always
applied in this fixed order whatever order they are given in:

``strip``     remove leading/trailing whitespace: every Unicode white-space character (space, tab,
              newlines, no-break space U+00A0, ideographic space, ...) and the byte order mark
              U+FEFF (:func:`strip_id`)
``casefold``  Unicode case folding (``str.casefold()``: "Straße" -> "strasse")
``nfc``       Unicode NFC normalisation, so "é" as one code point equals "e" + combining accent

Integers become their decimal string; ``None``/NaN and blank IDs (empty, or only the characters
``strip`` removes) are errors, with or without ``strip``, as are duplicate IDs within one party
unless ``duplicates="keep_first"`` (then the first row wins). Without options an ID is matched
exactly as written.

This is the one rule for IDs: ``securevfl psi`` reads them with it, and ``securevfl train`` /
``securevfl party`` read a party's ID column with it too (``securevfl.data.datasets.validate_ids``),
so the same file gives the same IDs on every path.
"""

from __future__ import annotations

import math
import numbers
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np

from .errors import PSIConfigError, PSIDataError

NORMALIZATIONS: tuple[str, ...] = ("strip", "casefold", "nfc")
DUPLICATE_POLICIES: tuple[str, ...] = ("error", "keep_first")


def parse_normalize(spec: str | Iterable[str] | None) -> tuple[str, ...]:
    """Parse ``"strip,casefold"`` or an iterable of names into the canonical ordered tuple."""
    if spec is None:
        return ()
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    chosen = {n.strip().lower() for n in names if n and n.strip()}
    unknown = chosen - set(NORMALIZATIONS)
    if unknown:
        raise PSIConfigError(f"unknown normalisation {sorted(unknown)}; choose from {', '.join(NORMALIZATIONS)}")
    return tuple(n for n in NORMALIZATIONS if n in chosen)


def normalize_bits(options: Sequence[str]) -> int:
    """Bit mask of the options, sent in the HELLO message so both parties can check agreement."""
    return sum(1 << NORMALIZATIONS.index(n) for n in parse_normalize(options))


#: What ``strip`` removes at both ends of an ID: Unicode white space (``str.isspace``: space, tab,
#: newlines, U+00A0 no-break space, U+2000-U+200A, U+3000, ...) and U+FEFF, the byte order mark /
#: zero-width no-break space that spreadsheet exports leave in front of a value.
STRIP_CHARACTERS: str = "".join(chr(c) for c in range(0x3001) if chr(c).isspace()) + "\ufeff"


def strip_id(value: str) -> str:
    """``value`` without leading and trailing :data:`STRIP_CHARACTERS` (the ``strip`` option)."""
    return value.strip(STRIP_CHARACTERS)


def is_blank(value: str) -> bool:
    """An ID that is empty, or only characters ``strip`` removes: refused on every path."""
    return not strip_id(value)


def normalize_id(value: str, options: Sequence[str]) -> str:
    """Apply the normalisation options to one ID (order: strip, casefold, nfc)."""
    if "strip" in options:
        value = strip_id(value)
    if "casefold" in options:
        value = value.casefold()
    if "nfc" in options:
        value = unicodedata.normalize("NFC", value)
    return value


def id_to_str(value: object) -> str | None:
    """Return the ID as a string, ``None`` for a null, or raise ``TypeError`` for other types."""
    if isinstance(value, str):
        return value
    if value is None:
        return None
    if isinstance(value, bool | np.bool_):
        raise TypeError("boolean")
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        if math.isnan(value):
            return None
        if float(value).is_integer():
            return str(math.trunc(value))
        raise TypeError(f"non-integer number {value!r}")
    raise TypeError(type(value).__name__)


def _check_encodable(items: Sequence[str], source: str) -> None:
    try:
        "".join(items).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PSIDataError(f"{source}: an ID is not valid Unicode text ({exc.reason})") from None


@dataclass(frozen=True)
class PreparedIDs:
    """The strings a party hashes, and for each the row of the party's input it came from."""

    items: list[str]
    rows: np.ndarray  # int64, same length as items
    n_input: int


def prepare_ids(
    ids: Sequence[object],
    normalize: Sequence[str] = (),
    duplicates: str = "error",
    source: str = "input",
) -> PreparedIDs:
    """Convert, normalise and de-duplicate IDs; errors name ``source`` and the offending row."""
    if duplicates not in DUPLICATE_POLICIES:
        raise PSIConfigError(f"duplicates must be one of {DUPLICATE_POLICIES}, not {duplicates!r}")
    options = parse_normalize(normalize)
    fast = _fast_path(ids, options, source)
    if fast is not None:
        return fast
    seen: dict[str, int] = {}
    items: list[str] = []
    rows: list[int] = []
    for row, raw in enumerate(ids):
        try:
            value = id_to_str(raw)
        except TypeError as exc:
            raise PSIDataError(f"{source}: unsupported ID type at row {row}: {exc}") from None
        if value is None:
            raise PSIDataError(f"{source}: null ID at row {row}")
        if options:
            value = normalize_id(value, options)
        if is_blank(value):
            raise PSIDataError(f"{source}: empty ID at row {row}" if not value else
                               f"{source}: empty ID at row {row} (only white space)")
        first = seen.setdefault(value, row)
        if first != row:
            if duplicates == "error":
                raise PSIDataError(
                    f"{source}: duplicate ID at rows {first} and {row} (use keep_first to keep the first occurrence)"
                )
            continue
        items.append(value)
        rows.append(row)
    _check_encodable(items, source)
    return PreparedIDs(items, np.asarray(rows, dtype=np.int64), len(ids))


def _fast_path(ids: Sequence[object], options: Sequence[str], source: str) -> PreparedIDs | None:
    """Skip the per-item loop when all IDs are distinct non-empty str and none is normalised.

    Returns ``None`` to take the checked path (which also names the offending rows).
    """
    if options or not all(type(v) is str for v in ids):
        return None
    items = cast("list[str]", list(ids))  # every item is a str: checked above
    distinct = set(items)
    if len(distinct) != len(items) or any(map(is_blank, distinct)):
        return None  # the slow path reports the exact rows
    _check_encodable(items, source)
    return PreparedIDs(items, np.arange(len(items), dtype=np.int64), len(items))

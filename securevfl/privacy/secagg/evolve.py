"""A fast ``dataclasses.replace`` for the protocol's frozen state classes (called every step)."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

S = TypeVar("S")


def evolve(obj: S, **changes: Any) -> S:
    """A copy of the frozen dataclass ``obj`` with the fields in ``changes`` set.

    Like :func:`dataclasses.replace`, but copies the instance dict instead of calling
    ``__init__`` again (the state classes have no ``__post_init__``, no slots and no init-only
    fields, so the result is the same); about 4x faster. Unknown field names raise TypeError.
    """
    fields = obj.__dataclass_fields__  # type: ignore[attr-defined]
    for name in changes:
        if name not in fields:
            raise TypeError(f"{type(obj).__name__} has no field {name!r}")
    if hasattr(type(obj), "__post_init__"):  # would be skipped: keep replace's behaviour
        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    new = object.__new__(type(obj))
    new.__dict__.update(obj.__dict__)
    new.__dict__.update(changes)
    return new


__all__ = ["evolve"]

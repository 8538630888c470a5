"""Scheme options: each aggregation scheme declares one frozen dataclass of its own settings.

A method passes a plain mapping (from its own options or the command line, values possibly
strings); :func:`parse_scheme_options` checks the keys against the dataclass's fields, converts
strings to the field's type (read from its default) and builds the dataclass, whose
``__post_init__`` checks the values. Fields marked ``metadata={"hook": True}`` are injection
points for tests (deterministic randomness): accepted from code, never listed to users.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from securevfl.errors import ConfigError

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """The options of a scheme that has none."""


def option_names(options_type: type[Any]) -> tuple[str, ...]:
    """The user-settable option names of an options dataclass (test hooks left out)."""
    return tuple(f.name for f in dataclasses.fields(options_type) if not f.metadata.get("hook"))


def _coerce(key: str, value: str, default: Any) -> Any:
    """A string from the command line as the type of the field's default (None: kept as str)."""
    try:
        if isinstance(default, bool):
            lowered = value.strip().lower()
            if lowered not in (*_TRUE, *_FALSE):
                raise ValueError(value)
            return lowered in _TRUE
        if isinstance(default, int | float):
            return type(default)(value)
    except ValueError:
        raise ConfigError(f"option {key}={value!r} is not a valid {type(default).__name__}") from None
    return value


def parse_scheme_options(options_type: type[Any], values: Mapping[str, Any], scheme: str) -> Any:
    """Build ``options_type`` from ``values``; unknown keys raise ConfigError listing the valid ones."""
    if not isinstance(values, Mapping):
        raise ConfigError(f"options of aggregation scheme {scheme!r} must be a mapping, got {type(values).__name__}")
    fields = {f.name: f for f in dataclasses.fields(options_type)}
    unknown = sorted(str(k) for k in values if k not in fields)
    if unknown:
        valid = ", ".join(option_names(options_type)) or "none"
        raise ConfigError(
            f"unknown option(s) {', '.join(unknown)} for aggregation scheme {scheme!r}; valid options: {valid}"
        )
    converted: dict[str, Any] = {}
    for key, value in values.items():
        default = fields[key].default
        if isinstance(value, str) and default is not dataclasses.MISSING and not isinstance(default, str):
            value = _coerce(key, value, default)
        converted[key] = value
    try:
        return options_type(**converted)
    except TypeError as exc:  # a required field without a default was not given
        raise ConfigError(f"options of aggregation scheme {scheme!r}: {exc}") from None


__all__ = ["NoOptions", "option_names", "parse_scheme_options"]

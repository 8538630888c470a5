"""The registry of aggregation schemes: names to classes, imported only when a scheme is used.

The built-in schemes (``none``, ``dh``, ``pairwise``, ``paillier``) are listed by module path and
imported on first use, so ``import securevfl.privacy.aggregation`` loads no scheme (and never
gmpy2, which only ``paillier`` and FFDH key agreement need). A scheme module registers its class
with :func:`register_aggregation`; a new scheme elsewhere does the same once imported.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from securevfl.errors import ConfigError
from securevfl.privacy.aggregation.base import AggregationConfig, AggregationScheme
from securevfl.privacy.aggregation.options import option_names, parse_scheme_options

_PACKAGE = "securevfl.privacy.aggregation"
#: Built-in schemes: name -> module that registers it.
BUILTIN_SCHEMES: Mapping[str, str] = {
    "none": f"{_PACKAGE}.none",
    "dh": f"{_PACKAGE}.dh",
    "pairwise": f"{_PACKAGE}.pairwise",
    "paillier": f"{_PACKAGE}.paillier",
}
SchemeT = type[AggregationScheme[Any]]
_SCHEMES: dict[str, SchemeT] = {}


def register_aggregation(cls: SchemeT) -> SchemeT:
    """Class decorator: register an aggregation scheme under ``cls.name``."""
    known = _SCHEMES.get(cls.name)
    if known is not None and (known.__module__, known.__qualname__) != (cls.__module__, cls.__qualname__):
        raise ConfigError(f"aggregation scheme {cls.name!r} is registered twice")
    _SCHEMES[cls.name] = cls
    return cls


def aggregation_names() -> list[str]:
    """Registered and built-in scheme names, sorted (no scheme module is imported)."""
    return sorted({*BUILTIN_SCHEMES, *_SCHEMES})


def scheme_class(name: str) -> SchemeT:
    """The class of scheme ``name``, importing its module on first use; unknown: ConfigError."""
    cls = _SCHEMES.get(name)
    if cls is None and isinstance(name, str) and name in BUILTIN_SCHEMES:
        importlib.import_module(BUILTIN_SCHEMES[name])
        cls = _SCHEMES.get(name)
    if cls is None:
        raise ConfigError(f"unknown aggregation scheme {name!r}; choose one of {', '.join(aggregation_names())}")
    return cls


def scheme_option_names(name: str) -> tuple[str, ...]:
    """The option names scheme ``name`` accepts (empty for a scheme without options)."""
    return option_names(scheme_class(name).Options)


def scheme_options(name: str, values: Mapping[str, Any] | None = None) -> Any:
    """Scheme ``name``'s options dataclass built from ``values`` (strings are converted).

    Unknown keys raise ConfigError listing the valid ones; bad values raise ConfigError from the
    dataclass. Methods call this when their options are built, to fail before any party starts.
    """
    return parse_scheme_options(scheme_class(name).Options, values or {}, name)


def create_aggregation(
    name: str, config: AggregationConfig | None = None, options: Mapping[str, Any] | None = None
) -> AggregationScheme[Any]:
    """The scheme registered as ``name``, with the shared ``config`` and its own ``options``.

    Unknown names or option keys raise ConfigError listing the valid ones.
    """
    cls = scheme_class(name)
    return cls(config or AggregationConfig(), parse_scheme_options(cls.Options, options or {}, name))


__all__ = [
    "BUILTIN_SCHEMES",
    "aggregation_names",
    "create_aggregation",
    "register_aggregation",
    "scheme_class",
    "scheme_option_names",
    "scheme_options",
]

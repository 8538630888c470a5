"""The training methods' names, without importing them (torch): for refusing an unknown ``--method`` at once.

The registry (:func:`securevfl.methods.method_names`) is the truth; ``tests/test_cli_startup.py`` checks
that this list is the same.
"""

from __future__ import annotations

from securevfl.errors import ConfigError

#: Every registered method, sorted (aliases included).
METHOD_NAMES: tuple[str, ...] = (
    "aggvfl", "apcvfl", "apcvfl-ablation", "apcvfl-splitnn", "cvfl", "easter", "entity-aug", "fewshot-vfl",
    "hetero-lr", "laser-vfl", "local", "local-logreg", "pyvertical", "secureboost", "splitnn", "tabnet-ct",
    "tabnet-lt", "tabvfl", "tabvfl-le", "vfedtrans",
)


def check_method_name(name: object) -> None:
    """Refuse a name that is not a method, with the same message as the registry's."""
    if name not in METHOD_NAMES:
        raise ConfigError(f"unknown method {name!r}; choose one of {', '.join(METHOD_NAMES)}")


__all__ = ["METHOD_NAMES", "check_method_name"]

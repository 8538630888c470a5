"""Command-line values shared by several commands: ``NAME=VALUE`` pairs and integer lists."""

from __future__ import annotations

from securevfl.errors import ConfigError


def parse_pairs(values: list[str], what: str) -> dict[str, str]:
    """``NAME=VALUE`` options (``--option``, ``--data``, ...) as a dict (a malformed or repeated name: ConfigError)."""
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{what} must look like NAME=VALUE, got {item!r}")
        if key.strip() in out:
            raise ConfigError(f"{what} names {key.strip()!r} twice")
        out[key.strip()] = value.strip()
    return out


def parse_ints(text: str) -> tuple[int, ...]:
    """Comma-separated integers (``--hidden 64,32``) as a tuple."""
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"expected comma-separated integers, got {text!r}") from None

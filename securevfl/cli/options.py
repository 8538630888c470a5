"""Command-line options generated from the run's settings (:data:`securevfl.run_config.RUN_SETTINGS`).

:func:`settings_command` gives a command function the signature typer reads: one option per setting, with
the setting's flag, default and help. Its values come back as API keywords (:func:`api_values`): a
repeatable ``NAME=VALUE`` option becomes a mapping, comma-separated text a tuple, the column options one
:class:`~securevfl.data.ColumnSpec`. So a new setting is a new field, and the CLI follows.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import typer

from securevfl.data import ColumnSpec
from securevfl.errors import ConfigError
from securevfl.run_config import RUN_SETTINGS
from securevfl.settings import Setting, holds_tuple

_COLUMNS = ("dataset_options", "columns")


def parse_pairs(values: Iterable[str], what: str) -> dict[str, str]:
    """``["a=1", "b=2"]`` -> ``{"a": "1", "b": "2"}``; a malformed or repeated name is a ConfigError."""
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{what} must look like NAME=VALUE, got {item!r}")
        if key.strip() in out:
            raise ConfigError(f"{what} names {key.strip()!r} twice")
        out[key.strip()] = value.strip()
    return out


def cli_settings(names: Sequence[str] | None = None) -> list[Setting]:
    """The settings that are command-line options (all, or those ``names`` in that order)."""
    options = [s for s in RUN_SETTINGS if s.info.cli]
    if names is None:
        return options
    by_name = {s.name: s for s in options}
    return [by_name[n] for n in names]


def _base(annotation: Any) -> Any:
    """``int | None`` -> ``int``."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    optional = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    return args[0] if optional and len(args) == 1 else annotation


def _parameter(s: Setting, default: Any) -> inspect.Parameter:
    """The typer option of one setting."""
    if s.info.repeat:
        annotation: Any = list[str]
        shown: Any = []
    elif holds_tuple(s.type):
        annotation, shown = str, ",".join(map(str, default)) if default is not None else ""
    else:
        annotation, shown = (_base(s.type) | None if default is None else _base(s.type)), default
    if s.info.off_flag:  # a switch on by default: its flag turns it off
        annotation, shown = bool, False
    option = typer.Option(shown, s.flag, help=s.help, show_default=bool(shown) if s.info.repeat else True)
    return inspect.Parameter(s.name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation)


def settings_command(func: Callable[..., Any], settings: Sequence[Setting], *, before: Sequence[inspect.Parameter] = (),
                     after: Sequence[inspect.Parameter] = (), defaults: Mapping[str, Any] | None = None) -> None:
    """Give ``func`` (taking ``**values``) a signature with one option per setting, between ``before`` and ``after``.

    ``defaults``: a command's own defaults for some settings (``securevfl attack`` runs 4 parties).
    """
    defaults = defaults or {}
    params = [*before, *(_parameter(s, defaults.get(s.name, s.default)) for s in settings), *after]
    func.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    func.__annotations__ = {p.name: p.annotation for p in params}


def _from_text(s: Setting, text: str) -> tuple[Any, ...]:
    """Comma-separated text as the tuple a tuple setting holds (integers where it holds integers)."""
    kinds = [a for t in (s.type, *typing.get_args(s.type)) for a in typing.get_args(t)
             if typing.get_origin(t) is tuple]
    kind = kinds[0] if kinds else str
    parts = [p.strip() for p in text.split(",")]
    if s.name != "missing_markers":  # a blank marker is meaningful; an empty name or size is not
        parts = [p for p in parts if p]
    try:
        return tuple(kind(p) for p in parts)
    except ValueError:
        raise ConfigError(f"{s.flag} expects comma-separated {kind.__name__} values, got {text!r}") from None


def _maps_to_lists(annotation: Any) -> bool:
    """Whether a mapping setting's values are lists (``Mapping[str, Sequence[str]]``): comma-separated text."""
    for t in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(t) is Mapping:
            value_type = typing.get_args(t)[1]
            return typing.get_origin(value_type) in (Sequence, list, tuple)
    return False


def given_names(ctx: typer.Context, names: Iterable[str], *, also: Iterable[str] = ()) -> set[str]:
    """Which of ``names`` the user set (on the command line or in the environment), as ``ctx`` records it.

    ``also``: names that count as given anyway (a command's own defaults, as ``securevfl attack``'s).
    """
    unset = {"DEFAULT", "DEFAULT_MAP"}
    return {n for n in names if getattr(ctx.get_parameter_source(n), "name", "DEFAULT") not in unset} | set(also)


#: The parameter through which typer hands a command its context (for :func:`given_names`).
CONTEXT = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)


def api_values(settings: Sequence[Setting], values: Mapping[str, Any],
               given: Iterable[str] | None = None) -> dict[str, Any]:
    """The API keywords of a command's option values (see the module docstring).

    ``given``: only these settings (the column options always, as one ColumnSpec), so that the ones the
    user left out take the method's own defaults (:func:`given_names`); None: every setting.
    """
    out: dict[str, Any] = {}
    columns: dict[str, Any] = {}
    keep = None if given is None else set(given)
    for s in settings:
        if keep is not None and s.name not in keep and s.path[:-1] != _COLUMNS:
            continue
        value = values[s.name]
        if s.info.off_flag:
            value = not value
        elif s.info.repeat:
            if holds_tuple(s.type):
                value = tuple(value)
            else:
                pairs = parse_pairs(value, s.flag)
                if _maps_to_lists(s.type):  # --features PARTY=col1,col2
                    value = {k: [c for c in v.split(",") if c] for k, v in pairs.items()}
                else:
                    value = pairs
                value = value or None if s.default is None else value
        elif holds_tuple(s.type):
            value = _from_text(s, value) if value or s.default is not None else None
        if s.path[:-1] == _COLUMNS:
            columns[s.name] = value
        else:
            out[s.name] = value
    if columns:
        out["columns"] = ColumnSpec(**columns)
    return out


__all__ = ["CONTEXT", "api_values", "cli_settings", "given_names", "parse_pairs", "settings_command"]

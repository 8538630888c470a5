"""One declaration per setting of a run: the field of a config dataclass, with its help in the field's metadata.

A setting is declared once, as a dataclass field made by :func:`setting`; a group of settings (another
config dataclass) as a field made by :func:`group`. :func:`settings_of` walks a config class and lists
every setting with its one name, its place in the config, its type, default and help. From that list the
CLI builds its options (``securevfl.cli.options``), the API checks and places its keywords
(``securevfl.run_config``), the federation file checks its ``[job]`` keys, and the report writes the
config section (the dataclasses themselves): a new option is one new field.

The name of a setting is its field's name: the API keyword, the ``[job]`` key and the report's key. Its
command-line flag is ``--`` and the name with dashes unless the field says otherwise (``flag``: a
repeatable option reads better singular, ``--attack`` for ``attacks``).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import typing
from collections.abc import Callable, Iterable, Iterator
from dataclasses import MISSING, dataclass, field
from typing import Any

from securevfl.errors import ConfigError

_KEY = "securevfl.setting"


@dataclass(frozen=True)
class Rule:
    """A declarative constraint on a setting's value, as scikit-learn's ``_parameter_constraints``.

    ``kind``: ``int``, ``float`` (a finite number), ``str`` (non-empty) or ``choice`` (one of
    ``choices``); ``low`` / ``high`` bound a number (``open_low`` / ``open_high``: strictly);
    ``many``: a list of such values (held as a tuple); ``optional``: ``None`` is allowed too.
    """

    kind: str
    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    choices: tuple[str, ...] = ()
    many: bool = False
    optional: bool = False

    def describe(self) -> str:
        """What a valid value is, as the error message says it (``a positive integer``)."""
        one = self._describe_one()
        return f"a list of {_plural(one)}" if self.many else one

    def _describe_one(self) -> str:
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices)
        if self.kind == "str":
            return "a non-empty string"
        noun = "integer" if self.kind == "int" else "number"
        low, high = self.low, self.high
        if low == 0 and high is None:
            return f"a positive {noun}" if self.open_low else f"a non-negative {noun}" if noun == "integer" \
                else "a number >= 0"
        if low is not None and high is not None:
            if self.open_low and self.open_high:
                return f"a {noun} strictly between {_num(low)} and {_num(high)}"
            left, right = "(" if self.open_low else "[", ")" if self.open_high else "]"
            return f"a {noun} in {left}{_num(low)}, {_num(high)}{right}"
        if low == 1 and noun == "integer":
            return "a positive integer"
        if low is not None:
            return f"a {noun} {'>' if self.open_low else '>='} {_num(low)}"
        if high is not None:
            return f"a {noun} {'<' if self.open_high else '<='} {_num(high)}"
        return f"an {noun}" if noun == "integer" else "a number"

    def check(self, name: str, value: Any) -> Any:
        """``value`` as the field holds it (an int, a float, a tuple), or a :class:`ConfigError` naming ``name``."""
        if value is None and self.optional:
            return None
        if self.many:
            if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
                raise ConfigError(f"{name} must be {self.describe()}, got {value!r}")
            try:
                return tuple(self._one(name, v) for v in value)
            except ConfigError:
                raise ConfigError(f"{name} must be {self.describe()}, got {value!r}") from None
        return self._one(name, value)

    def _one(self, name: str, value: Any) -> Any:
        bad = ConfigError(f"{name} must be {self._describe_one()}, got {value!r}")
        if self.kind == "choice":
            if value not in self.choices:
                raise bad
            return value
        if self.kind == "str":
            if not isinstance(value, str) or not value.strip():
                raise bad
            return value
        kind = numbers.Integral if self.kind == "int" else numbers.Real
        if isinstance(value, bool) or not isinstance(value, kind):
            raise bad
        number: float = int(value) if isinstance(value, numbers.Integral) and self.kind == "int" else float(value)
        if not math.isfinite(number) or not self._within(number):
            raise bad
        return number

    def _within(self, v: float) -> bool:
        low_ok = self.low is None or (v > self.low if self.open_low else v >= self.low)
        return low_ok and (self.high is None or (v < self.high if self.open_high else v <= self.high))


def integer(low: int | None = None, high: int | None = None, *, many: bool = False, optional: bool = False) -> Rule:
    """An integer in ``low..high`` (``many``: a list of them)."""
    return Rule("int", low, high, many=many, optional=optional)


def number(low: float | None = None, high: float | None = None, *, open_low: bool = False, open_high: bool = False,
           optional: bool = False) -> Rule:
    """A finite number, bounded by ``low`` / ``high`` (strictly where ``open_*``)."""
    return Rule("float", low, high, open_low, open_high, optional=optional)


def one_of(*choices: str, optional: bool = False) -> Rule:
    """One of ``choices``."""
    return Rule("choice", choices=choices, optional=optional)


def text() -> Rule:
    """A non-empty string."""
    return Rule("str")


def check_declared(config: Any) -> None:
    """Check every field of the dataclass ``config`` that declares a rule, and store the value as the rule holds it.

    For a frozen dataclass's ``__post_init__``: the one place its settings' constraints are applied.
    """
    for f in dataclasses.fields(config):
        info = info_of(f)
        if info is not None and info.rule is not None:
            object.__setattr__(config, f.name, info.rule.check(f.name, getattr(config, f.name)))


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


def _plural(phrase: str) -> str:
    """``a positive integer`` -> ``positive integers``."""
    words = phrase.split(" ", 1)[1] if phrase.startswith(("a ", "an ")) else phrase
    return words + "s" if not words.endswith("s") else words


@dataclass(frozen=True)
class SettingInfo:
    """What a field's metadata says about the setting it declares.

    ``help``: one line for ``--help`` and the API's docstring. ``flag``: the command-line flag (default
    ``--name-with-dashes``); ``cli=False``: not on the command line (set by other options or API only).
    ``job``: also a ``[job]`` key of the federation file. ``repeat``: on the command line, one value per
    use of the flag (``--attack a --attack b``); otherwise a tuple is comma-separated text. ``same_as``:
    this field always takes the value of the named setting (the seed every part uses); not a setting.
    ``api``: an API keyword of its own (``False``: set through the enclosing group's keyword, as the
    column settings are through ``columns``). ``rule``: the constraint its value must meet (:class:`Rule`),
    applied by :func:`check_declared`. ``off_flag``: a switch that is on by default has, on the command
    line, this flag that turns it off instead of one that turns it on.
    """

    help: str
    flag: str | None = None
    cli: bool = True
    job: bool = False
    repeat: bool = False
    same_as: str | None = None
    api: bool = True
    group: bool = False
    rule: Rule | None = None
    off_flag: str | None = None


def setting(default: Any = MISSING, *, help: str, default_factory: Any = MISSING, flag: str | None = None,
            cli: bool = True, job: bool = False, repeat: bool = False, api: bool = True,
            rule: Rule | None = None, off_flag: str | None = None) -> Any:
    """A dataclass field that declares a setting (its name is the field's name) and, with ``rule``, its constraint."""
    info = SettingInfo(help=help, flag=flag, cli=cli, job=job, repeat=repeat, api=api, rule=rule, off_flag=off_flag)
    return field(default=default, default_factory=default_factory, metadata={_KEY: info})


def same_as(name: str, default: Any) -> Any:
    """A field that always holds the value of setting ``name`` (filled in by the config's builder)."""
    return field(default=default, metadata={_KEY: SettingInfo(help="", same_as=name, cli=False, api=False)})


def group(default_factory: Callable[[], Any], *, cli_only: bool = False) -> Any:
    """A field holding another config dataclass whose settings belong to this one.

    ``cli_only``: the group's settings are command-line options that make the one value of this field;
    the API takes the whole object under the field's name (``columns=ColumnSpec(...)``).
    """
    info = SettingInfo(help="", group=True, api=not cli_only)
    return field(default_factory=default_factory, metadata={_KEY: info})


@dataclass(frozen=True)
class Setting:
    """One setting: its name, where it lives in the config (field names), its type, default and declaration."""

    name: str
    path: tuple[str, ...]
    type: Any
    default: Any
    info: SettingInfo

    @property
    def flag(self) -> str:
        """The command-line flag (of a switch on by default: the one that turns it off)."""
        return self.info.off_flag or self.info.flag or "--" + self.name.replace("_", "-")

    @property
    def help(self) -> str:
        return self.info.help


def info_of(f: dataclasses.Field[Any]) -> SettingInfo | None:
    """The setting declaration of a dataclass field, if it has one."""
    info = f.metadata.get(_KEY)
    return info if isinstance(info, SettingInfo) else None


def default_of(f: dataclasses.Field[Any]) -> Any:
    """A field's default value (made fresh from its factory)."""
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None if f.default is MISSING else f.default


def settings_of(config_type: type, *, prefix: tuple[str, ...] = ()) -> Iterator[Setting]:
    """Every setting of ``config_type``, groups walked in field order (depth first)."""
    hints = typing.get_type_hints(config_type)
    for f in dataclasses.fields(config_type):
        info = info_of(f)
        if info is None or info.same_as is not None:
            continue
        if info.group:
            inner = _dataclass_in(hints[f.name])
            yield from (replace_api(s, info.api) for s in settings_of(inner, prefix=(*prefix, f.name)))
            if not info.api:  # the API takes the group whole, under the field's name
                yield Setting(f.name, (*prefix, f.name), hints[f.name], default_of(f),
                              SettingInfo(help=f"a {inner.__name__}", cli=False))
            continue
        yield Setting(f.name, (*prefix, f.name), hints[f.name], default_of(f), info)


def replace_api(s: Setting, api: bool) -> Setting:
    """``s``, no API keyword of its own when its group is taken whole."""
    return s if api else dataclasses.replace(s, info=dataclasses.replace(s.info, api=False))


def settings_doc(settings: Iterable[Setting]) -> str:
    """A docstring section listing each API setting with its default and help (appended to ``train``)."""
    lines = ["", "", "    Settings (keyword=default: help)::", ""]
    for s in settings:
        if s.info.api:
            lines.append(f"        {s.name}={s.default!r}: {s.help}")
    return "\n".join(lines) + "\n"


def group_type(config_type: type, name: str) -> type:
    """The dataclass a group field ``name`` of ``config_type`` holds."""
    return _dataclass_in(typing.get_type_hints(config_type)[name])


def holds_tuple(annotation: Any) -> bool:
    """Whether a field of this type holds a tuple (``tuple[int, ...]``, ``tuple[str, ...] | None``)."""
    return any(typing.get_origin(t) is tuple or t is tuple for t in (annotation, *typing.get_args(annotation)))


def _dataclass_in(annotation: Any) -> type:
    """The dataclass of a group's annotation (``ColumnSpec | Mapping[...]`` -> ColumnSpec)."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and dataclasses.is_dataclass(candidate):
            return candidate
    raise TypeError(f"a group field must hold a dataclass, got {annotation!r}")


__all__ = ["Rule", "Setting", "SettingInfo", "check_declared", "default_of", "group", "group_type", "holds_tuple",
           "info_of", "integer", "number", "one_of", "same_as", "setting", "settings_doc", "settings_of", "text"]

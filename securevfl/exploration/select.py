"""Selection rules: which columns training keeps, from what exploring found (``--select "iv>=0.02"``).

A rule is ``iv`` compared with a number (``>=``, ``>``, ``<=``, ``<``); several rules joined by ``,``
must all hold. A column without an IV (a regression label) cannot be judged: selecting by IV then is
a :class:`~securevfl.errors.ConfigError`.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from securevfl.errors import ConfigError

_RULE = re.compile(r"^\s*(iv)\s*(>=|<=|>|<)\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*$")
_OPS: dict[str, Callable[[float, float], bool]] = {">=": operator.ge, ">": operator.gt, "<=": operator.le,
                                                   "<": operator.lt}


@dataclass(frozen=True)
class Rule:
    """One condition: ``statistic op threshold``."""

    statistic: str
    op: str
    threshold: float

    def holds(self, value: float) -> bool:
        return _OPS[self.op](value, self.threshold)

    def __str__(self) -> str:
        return f"{self.statistic}{self.op}{self.threshold:g}"


def parse_select(text: str) -> tuple[Rule, ...]:
    """``"iv>=0.02"`` (rules joined by commas) as rules; anything else is a ConfigError showing the form."""
    rules = []
    for part in str(text).split(","):
        match = _RULE.match(part)
        if match is None:
            raise ConfigError(f"--select {text!r}: each rule must look like iv>=0.02 (iv, then >=, >, <= or <, "
                              "then a number), several joined by commas")
        rules.append(Rule(match.group(1), match.group(2), float(match.group(3))))
    return tuple(rules)


def keep_mask(rules: Sequence[Rule], ivs: Sequence[float | None]) -> list[bool]:
    """Which columns pass every rule (by position)."""
    out = []
    for iv in ivs:
        if iv is None:
            raise ConfigError("--select by iv needs a label of two classes (there is no IV for a regression target)")
        out.append(all(rule.holds(iv) for rule in rules))
    return out


__all__ = ["Rule", "keep_mask", "parse_select"]

"""What a benchmark run produced: named figures, report sections, the environment; ``results.json``.

Every number that :mod:`securevfl.bench.compare` can compare is a :class:`~securevfl.bench.timing.Figure`
in :attr:`Results.figures` (samples, minimum, median). Each report section also keeps its tables (already
formatted, units in the headers), its images and the structured data behind them, so the Markdown and
HTML reports are rendered from the same dictionary that is written to ``results.json``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from psi import atomic
from securevfl.bench.timing import Figure
from securevfl.errors import ConfigError

SCHEMA = "securevfl.bench/1"


@dataclass
class Table:
    """A report table: title, column headers (with units), rows of formatted cells.

    ``fold``: the HTML report puts the table under a ``<details>`` element (closed), after the section's
    charts, with ``summary`` (one line) as what shows; tables longer than the report's threshold fold too.
    """

    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    note: str = ""
    fold: bool = False
    summary: str = ""

    def add(self, *cells: object) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"table {self.title!r}: {len(cells)} cells for {len(self.columns)} columns")
        self.rows.append([str(c) for c in cells])


@dataclass
class Section:
    """One section of the report."""

    key: str
    title: str
    text: str = ""
    tables: list[Table] = field(default_factory=list)
    images: list[dict[str, str]] = field(default_factory=list)  # {"file": "x.png", "caption": "..."}
    notes: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Results:
    """Everything one ``securevfl bench`` run measured."""

    config: dict[str, Any]
    environment: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Figure] = field(default_factory=dict)
    sections: list[Section] = field(default_factory=list)
    headline: dict[str, Any] = field(default_factory=dict)  # see securevfl.bench.report.headline
    wall_s: float = 0.0

    def add(self, figure: Figure) -> Figure:
        if figure.name in self.figures:
            raise ValueError(f"figure {figure.name!r} recorded twice")
        self.figures[figure.name] = figure
        return figure

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "wall_s": self.wall_s, "config": self.config, "environment": self.environment,
                "headline": self.headline, "figures": {k: f.to_dict() for k, f in sorted(self.figures.items())},
                "sections": {s.key: asdict(s) for s in self.sections}}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=_plain)


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


#: The largest results.json :func:`load_results` reads (a real one is a few hundred KiB).
MAX_RESULTS_BYTES = 64 << 20


def load_results(path: str | Path) -> dict[str, Any]:
    """Read a ``results.json`` written by ``securevfl bench``; a ConfigError names what is wrong."""
    from securevfl.checks import read_local_file

    path = Path(path)
    if not path.exists():
        raise ConfigError(f"no such results file: {path}")
    text = read_local_file(path, "results", max_bytes=MAX_RESULTS_BYTES)  # never /dev/zero or a huge file
    try:
        data = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read {path} as JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("figures"), dict):
        raise ConfigError(f"{path} is not a results.json written by `securevfl bench` (schema {SCHEMA})")
    return data


def write_json(path: str | Path, data: Any, *, default: Callable[[Any], Any] | None = None,
               sort_keys: bool = False) -> Path:
    """Write ``data`` as indented JSON, atomically, making its folder first (how a benchmark script saves figures)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(path, json.dumps(data, indent=2, default=default, sort_keys=sort_keys))
    return path

"""``securevfl datasets`` and ``securevfl methods``: what the toolkit offers."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterator
from typing import Any

import typer
from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from securevfl.errors import ConfigError, MissingPackageError
from securevfl.settings import default_of, info_of

console = Console()
#: The narrowest help column of the options table; a narrower terminal gets one block per option.
HELP_WIDTH = 30


def datasets() -> None:
    """List the bundled datasets with their shapes."""
    from rich.markup import escape

    from securevfl.data import DatasetOptions, describe_datasets, load_dataset

    table = Table(title="datasets (also csv:PATH and parquet:PATH)")
    for col in ("name", "rows", "features", "classes", "description"):
        table.add_column(col)
    for name, desc in describe_datasets().items():
        # descriptions are plain text: "[datasets]" in an install hint is not rich markup
        try:
            ds = load_dataset(name, DatasetOptions())
        except MissingPackageError:  # an optional dataset whose package is not installed (its description says which)
            table.add_row(name, "-", "-", "-", escape(f"[not installed] {desc}"))  # first: it must not wrap apart
            continue
        table.add_row(name, str(ds.n_rows), str(len(ds.feature_columns)), str(ds.n_classes), escape(desc))
    console.print(table)


def methods(
    name: str | None = typer.Argument(None, metavar="NAME", help="List this method only (default: every method)."),
) -> None:
    """List the training methods: summary, run settings they default differently, each option with its help."""
    from securevfl.methods import method_class, method_names

    out = Console()  # made now, not at import: it takes the terminal's width (COLUMNS) of this call
    names = method_names()
    if name is not None:
        if name not in names:
            raise ConfigError(_unknown_method(name, names))
        names = [name]
    out.print(Text("Options are set as --option KEY=VALUE (API: options={...}; federation file: [job.options]).",
                   style="dim"))
    for method in names:
        cls = method_class(method)
        out.print()
        out.print(Text.assemble((method, "bold"), "  ", cls.summary))
        own = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in cls.run_defaults.items())
        if own:
            out.print(Text(f"where not given: {own}", style="dim"))
        if cls.partial_rows and not cls.standalone:
            out.print(Text("rows some party does not hold: trained on and scored, each row with the parties that hold "
                           "it (the default; --require-all-parties: the rows every party holds)", style="dim"))
            if cls.leaves_out_parties:
                out.print(Text("a passive party down: left out of scoring (party --predict / --serve, "
                               "--party-timeout) and its rows scored without its part", style="dim"))
        elif not (cls.partial_rows or cls.standalone):
            out.print(Text("rows some party does not hold: refused (it trains and scores the rows every party holds)",
                           style="dim"))
        rows = list(option_rows(cls.Options))
        if not rows:
            out.print(Text("no options of its own", style="dim"))
            continue
        out.print(_options_table(rows, out.width))


def _options_table(rows: list[tuple[str, str, str]], width: int) -> Table | Group:
    """Options as a table (name, default, help), or one block per option where the terminal is too narrow."""
    name_width = max(len(name) for name, _, _ in rows)
    default_width = max(len("default"), *(len(default) for _, default, _ in rows))
    if width >= name_width + default_width + HELP_WIDTH + 4:
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        table.add_column("option", no_wrap=True)
        table.add_column("default", no_wrap=True)
        table.add_column("help", ratio=1, overflow="fold")
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))
        return table
    blocks: list[RenderableType] = []
    for name, default, help_text in rows:
        blocks.append(Text.assemble((name, "bold"), f" = {default}"))
        blocks.append(Padding(Text(help_text, overflow="fold"), (0, 0, 0, 4)))
    return Group(*blocks)


def option_rows(options_type: type) -> Iterator[tuple[str, str, str]]:
    """``(name, default, help)`` of every option of a method's options dataclass, then its scheme options.

    A method with a ``secagg_options`` field (the aggregation methods) also takes each aggregation
    scheme's own options as ``secagg.KEY``; their help names the scheme.
    """
    from securevfl.privacy.aggregation import aggregation_names, scheme_class
    from securevfl.privacy.aggregation.options import option_names

    fields = dataclasses.fields(options_type)
    yield from ((f.name, _shown(default_of(f)), _help(f)) for f in fields)
    if "secagg_options" in {f.name for f in fields}:
        for scheme in aggregation_names():
            scheme_options = scheme_class(scheme).Options
            names = option_names(scheme_options)
            for f in dataclasses.fields(scheme_options):
                if f.name in names:
                    yield f"secagg.{f.name}", _shown(default_of(f)), f"secagg={scheme}: {_help(f)}"


def _help(f: dataclasses.Field[Any]) -> str:
    """A field's one-line help ("" where it declares none)."""
    info = info_of(f)
    return info.help if info is not None else ""


def _shown(value: Any) -> str:
    """An option's default as a user writes it (``true``, ``""`` for an empty string, ``-`` for unset)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if value == "":
        return '""'
    return str(value)


def _unknown_method(name: str, names: list[str]) -> str:
    """The one-line error for an unknown method name, naming the closest one (or all, where none is close)."""
    close = difflib.get_close_matches(name, names, n=1)
    if close:
        return f"unknown method {name!r}; did you mean {close[0]!r}? (`securevfl methods` lists them all)"
    return f"unknown method {name!r}; choose one of {', '.join(names)}"

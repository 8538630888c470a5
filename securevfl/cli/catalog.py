"""``securevfl datasets`` and ``securevfl methods``: what the toolkit offers."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from securevfl.errors import MissingPackageError

console = Console()


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


def methods() -> None:
    """List the training methods, their options, and the run settings they default differently."""
    import dataclasses

    from securevfl.methods import method_class, method_names

    table = Table(title="methods")
    for col in ("name", "summary", "options (--option KEY=VALUE)"):
        table.add_column(col)
    for name in method_names():
        cls = method_class(name)
        opts = ", ".join(f"{f.name}={f.default if f.default_factory is dataclasses.MISSING else f.default_factory()}"
                         for f in dataclasses.fields(cls.Options))
        own = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in cls.run_defaults.items())
        summary = f"{cls.summary}\n[dim]where not given: {own}[/]" if own else cls.summary
        table.add_row(name, summary, opts or "-")
    console.print(table)

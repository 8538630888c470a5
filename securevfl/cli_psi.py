"""The ``securevfl psi`` command: align parties' ID files with ECDH PSI and print the costs.

Registered by the lead in ``securevfl/cli.py`` as ``app.command("psi")(psi_command)``. Errors
(:class:`securevfl.errors.SecureVFLError`) are raised, not printed: the CLI wrapper turns them
into one clear line.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from securevfl.checks import validate_party_name
from securevfl.errors import ConfigError


def _parse_parties(values: list[str]) -> dict[str, Path]:
    parties: dict[str, Path] = {}
    for item in values:
        name, sep, path = item.partition("=")
        name, path = name.strip(), path.strip()
        if not sep or not name or not path:
            raise ConfigError(f"--party must look like NAME=FILE, got {item!r}")
        validate_party_name(name)
        if name in parties:
            raise ConfigError(f"party {name!r} is given twice")
        parties[name] = Path(path)
    return parties


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


def psi_command(
    party: list[str] = typer.Option(..., "--party", help="NAME=FILE (CSV/Parquet); repeat."),  # noqa: B008
    id_column: str = typer.Option(..., "--id-column", help="Name of the ID column in every file."),
    normalize: str = typer.Option("", help="Comma-separated: strip, casefold, nfc."),
    out: Path = typer.Option(Path("out"), help="Output folder for aligned/unaligned rows."),  # noqa: B008
    mode: str = typer.Option("both", help="both | active_only | cardinality."),
    keep_first: bool = typer.Option(False, help="Keep the first of duplicate IDs (else error)."),
    workers: int | None = typer.Option(None, help="Processes for curve work (default: all CPUs)."),
    active: str | None = typer.Option(None, help="Active party (default: the first --party)."),
    progress: bool = typer.Option(False, help="Show a progress bar."),
) -> None:
    """Private set intersection of the parties' ID columns (ECDH on Curve25519)."""
    from psi import run_files  # imported here so `securevfl --help` stays fast

    parties = _parse_parties(party)
    result = run_files(
        parties,
        id_column,
        out,
        active=active,
        mode=mode,
        normalize=normalize,
        duplicates="keep_first" if keep_first else "error",
        workers=workers,
        progress=progress,
    )
    console = Console()
    console.print(
        f"[bold]|intersection| = {result.intersection_size}[/bold]  "
        f"(parties: {', '.join(f'{p}={result.input_sizes[p]}' for p in result.parties)}; "
        f"active: {result.active}; mode: {result.mode}; {result.wall_seconds:.2f} s; "
        f"{result.rounds} rounds)"
    )
    if len(result.parties) > 2:
        console.print("pairwise: " + ", ".join(f"{result.active}∩{p}={n}" for p, n in result.pairwise_sizes.items()))
    times = Table(title="Time per party (s)")
    for col in ("party", "hash (cpu)", "blind (cpu)", "curve wall", "codec", "match", "total"):
        times.add_column(col, justify="right" if col != "party" else "left")
    for p in result.parties:
        t = result.timings[p]
        times.add_row(
            p,
            *(f"{t[k]:.3f}" for k in ("hash", "blind", "curve_wall", "codec", "match", "total")),
        )
    console.print(times)
    links = Table(title="Traffic per link")
    for col in ("link", "bytes", "messages"):
        links.add_column(col, justify="right" if col != "link" else "left")
    for link, n in result.bytes_per_link.items():
        links.add_row(link, _fmt_bytes(n), str(result.messages_per_link[link]))
    console.print(links)
    console.print(f"outputs in {out}/ (psi_report.json, <party>_aligned.csv, <party>_unaligned.csv)")

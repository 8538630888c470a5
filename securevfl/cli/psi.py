"""The ``securevfl psi`` command: align parties' ID files with ECDH PSI and print the costs.

Registered in :mod:`securevfl.cli` as ``app.command("psi")(psi_command)``. Errors
(:class:`securevfl.errors.SecureVFLError`) are raised, not printed: the CLI wrapper turns them
into one clear line.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from psi import atomic
from securevfl.checks import validate_party_name
from securevfl.errors import ConfigError, psi_errors


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


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


def psi_command(
    party: list[str] = typer.Option([], "--party", help="NAME=FILE (CSV/Parquet); repeat."),  # noqa: B008
    id_column: str = typer.Option("", "--id-column", help="Name of the ID column in every file."),
    normalize: str = typer.Option("", help="Comma-separated: strip, casefold, nfc."),
    out: Path = typer.Option(Path("out"), help="Output folder for aligned/unaligned rows."),  # noqa: B008
    mode: str = typer.Option("both", help="both | active_only | cardinality."),
    keep_first: bool = typer.Option(False, help="Keep the first of duplicate IDs (else error)."),
    workers: int | None = typer.Option(None, help="Processes for curve work (default: all CPUs)."),
    active: str | None = typer.Option(None, help="Active party (default: the first --party)."),
    progress: bool = typer.Option(False, help="Show a progress bar."),
    executor: str = typer.Option("process", help="Where curve work runs: process | inline | ray (securevfl[ray])."),
    ray_address: str | None = typer.Option(None, help="With --executor ray: the cluster address (default: local Ray)."),
    federation: Path | None = typer.Option(  # noqa: B008
        None, help="Run as one party of this federation file (with --as and --data) over the network."),
    as_: str = typer.Option("", "--as", help="With --federation: which party this process is."),
    data: Path | None = typer.Option(None, help="With --federation: this party's own table."),  # noqa: B008
) -> None:
    """Private set intersection of the parties' ID columns (ECDH on Curve25519).

    Either all parties' files in this process (--party NAME=FILE, repeat; a simulation), or one
    party of a deployment (--federation fed.toml --as NAME --data FILE), which writes only its own
    aligned and unaligned files.
    """
    if federation is not None:
        if party or not as_ or data is None:
            raise ConfigError("--federation runs one party: give --as NAME and --data FILE, and no --party")
        _psi_as_party(federation, as_, data, out)
        return
    if not party or not id_column:
        raise ConfigError("give --party NAME=FILE (at least two) and --id-column, or --federation with --as and --data")
    from psi import ExecutorConfig, run_files  # imported here so `securevfl --help` stays fast

    parties = _parse_parties(party)
    with psi_errors():
        where = ExecutorConfig(executor, workers, ray_address)
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
            executor=where,
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


def _psi_as_party(federation: Path, name: str, data: Path, out: Path) -> None:
    """One party's side of the PSI of a deployment; writes ``<name>_aligned.csv`` and ``<name>_unaligned.csv``."""
    import json

    import pandas as pd

    from securevfl.checks import check_output_dir
    from securevfl.data.files import party_table_from_file
    from securevfl.deploy.alignment import align_over_network
    from securevfl.deploy.federation_file import load_federation
    from securevfl.deploy.links import open_transport

    fed = load_federation(federation)
    fed.party(name)
    out = check_output_dir(out)
    job = fed.job
    table, _ = party_table_from_file(name, data, id_column=job.id_column, label_column=job.label_column,
                                     is_active=name == fed.active, columns=fed.party(name).columns)
    from securevfl.cli.party import stop_on_signals

    with stop_on_signals(name):  # SIGTERM / SIGINT: ABORT to the peers with the reason, exit 143 / 130
        transport = open_transport(fed, name)
        try:
            result = align_over_network(transport, fed, name, table)
        finally:
            transport.close()
    atomic.make_dirs(out)
    for kind, rows in (("aligned", result.aligned), ("unaligned", result.unaligned)):
        frame = pd.DataFrame({"position": rows, job.id_column: table.ids[rows]})
        with atomic.atomic_path(out / f"{name}_{kind}.csv") as tmp:
            frame.to_csv(tmp, index=False)
    snap = result.snapshot
    report = {"party": name, "intersection_size": result.size, "input_size": table.n_rows,
              "bytes_sent": dict(snap.bytes), "messages_sent": dict(snap.messages), "crypto_s": snap.crypto_s}
    atomic.write_text(out / f"{name}_psi_report.json", json.dumps(report, indent=2))
    Console().print(f"[bold]|intersection| = {result.size}[/bold] ({name}: {table.n_rows} rows); "
                    f"wrote {out}/{name}_aligned.csv, {name}_unaligned.csv, {name}_psi_report.json")

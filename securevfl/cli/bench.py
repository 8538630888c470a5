"""The ``securevfl bench`` command (and ``securevfl bench compare``): a thin shell over :mod:`securevfl.bench`.

Registered in :mod:`securevfl.cli` as ``app.add_typer(bench_app, name="bench")``. Errors
(:class:`securevfl.errors.SecureVFLError`) are raised, not printed: the CLI wrapper turns them into
one clear line.
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from securevfl.cli.startup import heavy_imports
from securevfl.errors import ConfigError

bench_app = typer.Typer(add_completion=False, help="The crypto benchmark report: primitives vs peers, methods x "
                                                   "privacy, scaling, network, environment.")
console = Console()
err_console = Console(stderr=True)


def _names(text: str, what: str) -> tuple[str, ...]:
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    if not names:
        raise ConfigError(f"{what} names nothing")
    return names


def _ints(text: str, what: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in _names(text, what))
    except ValueError:
        raise ConfigError(f"{what} must be comma-separated integers, got {text!r}") from None


class PlainProgress:
    """The bench's progress as plain timestamped lines (stderr not a terminal: a log file, CI, a pipe).

    A line at every section's end and at most one every ``every`` seconds otherwise, so that a
    ten-minute run shows that it is alive without flooding a log.
    """

    def __init__(self, console: Console, every: float = 10.0) -> None:
        self.console, self.every = console, every
        self.started = time.monotonic()
        self.last = float("-inf")

    def __call__(self, done: int, total: int, text: str) -> None:
        now = time.monotonic()
        if text.endswith(" done") or now - self.last >= self.every:
            self.console.print(f"[{now - self.started:7.1f} s] bench {done}/{total} sections: {text}",
                               highlight=False, markup=False, soft_wrap=True)  # one line each, whatever the width
            self.last = now


@bench_app.callback(invoke_without_command=True)
def bench_command(
    ctx: typer.Context,
    quick: bool = typer.Option(False, "--quick", help="About 3 minutes on 2 cores (the default size)."),
    full: bool = typer.Option(False, "--full", help="The complete matrix: larger sets, more repetitions."),
    tiny: bool = typer.Option(False, "--tiny", help="Seconds: a smoke run of every section (tests)."),
    methods: str = typer.Option("splitnn,easter,aggvfl", help="Comma-separated training methods."),
    privacy: str = typer.Option("none,dh,pairwise,paillier", help="Privacy options (secure aggregation)."),
    parties: str = typer.Option("", help="Party counts for secure-aggregation scaling (default 2,4,8; full 2..10)."),
    method_parties: int = typer.Option(4, help="Parties of the method runs (1 active + passives)."),
    network: str = typer.Option("", help="Network presets to re-price the runs on: lan, wan, intercontinental "
                                         "(default: all three, or none when a custom link is given)."),
    bandwidth_mbps: float | None = typer.Option(None, help="A custom link: bandwidth, Mbit/s (with --latency-ms)."),
    latency_ms: float | None = typer.Option(None, help="A custom link: latency, ms (with --bandwidth-mbps)."),
    dataset: str = typer.Option("breast-cancer", help="Dataset of the method runs."),
    device: str = typer.Option("auto", help="Model compute: auto (CUDA when present), cpu, cuda[:N]."),
    sections: str = typer.Option("primitives,methods,scaling,network,predict,secureboost,coverage,environment",
                                 help="Sections to run."),
    out: Path = typer.Option(Path("out/bench"), help="Folder for report.md, report.html, results.json, *.png."),
    quiet: bool = typer.Option(False, help="No progress bar."),
) -> None:
    """Measure and write the benchmark report (`securevfl bench compare OLD NEW` compares two runs)."""
    if ctx.invoked_subcommand is not None:
        return
    with heavy_imports():
        from securevfl.bench import NETWORK_PRESETS, BenchConfig, run_bench
        from securevfl.federation.meter import NetworkModel

    if sum((quick, full, tiny)) > 1:
        raise ConfigError("choose one of --quick, --full, --tiny")
    if (bandwidth_mbps is None) != (latency_ms is None):
        raise ConfigError("--bandwidth-mbps and --latency-ms go together")
    custom = NetworkModel(bandwidth_mbps, latency_ms) if bandwidth_mbps is not None and latency_ms is not None \
        else None
    config = BenchConfig(
        size="full" if full else "tiny" if tiny else "quick", methods=_names(methods, "--methods"),
        privacy=_names(privacy, "--privacy"), parties=_ints(parties, "--parties") if parties else (),
        method_parties=method_parties,
        networks=_names(network, "--network") if network else () if custom else tuple(NETWORK_PRESETS),
        custom_network=custom, dataset=dataset, device=device, sections=_names(sections, "--sections"))
    command = "securevfl " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:2] == ["bench"] \
        else f"securevfl bench --{config.size} --out {shlex.quote(str(out))}"
    if quiet:
        results = run_bench(config, out, command=command)
    elif not err_console.is_terminal:  # a log file, CI: rich draws no bar there, so plain lines instead
        results = run_bench(config, out, command=command, progress=PlainProgress(err_console))
    else:
        with Progress(TextColumn("[bold]bench[/]"), BarColumn(), TextColumn("{task.completed}/{task.total} sections"),
                      TextColumn("{task.description}"), TimeElapsedColumn(), console=err_console,
                      transient=True) as bar:
            task = bar.add_task("starting", total=None)
            results = run_bench(config, out, command=command,
                                progress=lambda done, total, text: bar.update(task, completed=done, total=total,
                                                                              description=text))
    from securevfl.bench.report import headline_lines

    if results.environment.get("warning"):
        err_console.print(f"[bold yellow]warning: {results.environment['warning']}[/]", highlight=False)
    for line in headline_lines(results.headline):
        console.print(line, highlight=False)
    console.print(f"bench: {results.wall_s:.1f} s; report: {out / 'report.md'}, {out / 'report.html'}, "
                  f"{out / 'results.json'}", highlight=False)


@bench_app.command("compare")
def compare_command(
    old: Path = typer.Argument(..., help="results.json of the earlier run."),
    new: Path = typer.Argument(..., help="results.json of the later run."),
    min_change: float = typer.Option(0.05, help="Smallest relative change called a regression (on top of the "
                                                "measured spread)."),
    show: str = typer.Option("changed", help="Rows to show: changed (regressed or improved) | all."),
    fail_on_regression: bool = typer.Option(False, help="Exit with status 1 when a figure regressed."),
) -> None:
    """Compare two results.json: ratio of medians per figure; regressions beyond the measured spread."""
    from securevfl.bench.compare import REGRESSED, SAME, compare_files

    if show not in ("changed", "all"):
        raise ConfigError(f"--show must be changed or all, got {show!r}")
    outcome = compare_files(old, new, min_change)
    changes = outcome["changes"]
    if outcome["config_differs"]:
        err_console.print(f"[bold yellow]warning: the two runs were configured differently "
                          f"({', '.join(outcome['config_differs'])}); figures of the same name measured different "
                          "work[/]", highlight=False)
    for side in ("old", "new"):
        if outcome[f"{side}_environment"].get("loaded"):
            err_console.print(f"[yellow]note: the machine was loaded during the {side} run[/]", highlight=False)
    table = Table(title=f"{new} vs {old}: new / old medians")
    for col in ("figure", "unit", "better", "old median", "new median", "new / old", "allowed move", "verdict"):
        table.add_column(col, justify="left" if col in ("figure", "verdict", "unit", "better") else "right")
    for c in changes:
        if show == "changed" and c.verdict == SAME:
            continue
        style = "red" if c.verdict == REGRESSED else "green" if c.verdict != SAME else ""
        table.add_row(c.name, c.unit, c.better, f"{c.old_median:.4g}", f"{c.new_median:.4g}", f"{c.ratio:.3f}",
                      f"{c.margin:.3g}", f"[{style}]{c.verdict}[/]" if style else c.verdict)
    # piped into a file or a CI log: wide enough for the figure names, never cut with an ellipsis
    (console if console.is_terminal else Console(width=200)).print(table)
    regressed = [c for c in changes if c.verdict == REGRESSED]
    console.print(f"{len(changes)} figures compared: {len(regressed)} regressed, "
                  f"{sum(c.verdict == 'improved' for c in changes)} improved, "
                  f"{sum(c.verdict == SAME for c in changes)} within the spread"
                  + (f"; only in old: {len(outcome['only_old'])}, only in new: {len(outcome['only_new'])}"
                     if outcome["only_old"] or outcome["only_new"] else ""), highlight=False)
    if regressed and fail_on_regression:
        raise typer.Exit(1)

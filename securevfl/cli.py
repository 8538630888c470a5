"""The ``securevfl`` command: a thin typer shell over the Python API (no logic lives only here)."""

from __future__ import annotations

import inspect
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from typer.exceptions import TyperException

from psi import atomic
from securevfl.cli_bench import bench_app
from securevfl.cli_deploy import certs_app, launch_command, party_command
from securevfl.cli_options import api_values, cli_settings, settings_command
from securevfl.cli_predict import predict_command
from securevfl.cli_psi import psi_command
from securevfl.cli_resume import hint_resume
from securevfl.errors import ConfigError, Interrupted, MissingPackageError, PartyFailure, SecureVFLError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="securevfl: private set intersection and secure vertical federated learning. "
                       "Add --debug anywhere for full tracebacks on errors.")
console = Console(stderr=False)
err_console = Console(stderr=True)

app.command("psi")(psi_command)
app.command("predict")(predict_command)
app.add_typer(certs_app, name="certs")
app.command("party")(party_command)
app.command("launch")(launch_command)
app.add_typer(bench_app, name="bench")


_TRAIN_ONLY = [
    inspect.Parameter("report", inspect.Parameter.KEYWORD_ONLY, annotation=Path,
                      default=typer.Option(Path("out/run.json"), help="Where to write the JSON report (+ .md).")),
    inspect.Parameter("quiet", inspect.Parameter.KEYWORD_ONLY, annotation=bool,
                      default=typer.Option(False, help="No progress bar.")),
]


def train(*, report: Path, quiet: bool, **values: Any) -> None:
    """Train a VFL model and write a report (JSON + Markdown); with --model-dir, keep the model.

    Every option but --report and --quiet is a setting of the run (securevfl.run_config): the same
    name as the Python API's keyword and the report's config key, with dashes.
    """
    from securevfl.api import check_report_path
    from securevfl.api import train as api_train

    check_report_path(report)  # before any work (the API checks it too when given report=)
    settings = api_values(cli_settings(), values)
    with _progress(quiet) as on_progress, hint_resume(settings.get("checkpoint_dir")):
        result = api_train(progress=on_progress, **settings)
    json_path, md_path = result.save(report)
    print_summary(result)
    console.print(f"report: {json_path} and {md_path}")
    model_dir = settings.get("model_dir")
    if model_dir is not None:
        from securevfl.methods.base import method_class

        if method_class(result.method).standalone:
            active = next(p for p, e in result.parties.items() if e.get("labels"))
            console.print(f"model: {model_dir}/{active}/ (standalone: the active party's alone; score with "
                          f"securevfl predict and {active}'s file only)")
        else:
            console.print(f"model: {model_dir}/<party>/ (one part per party; score with securevfl predict)")


settings_command(train, cli_settings(), after=_TRAIN_ONLY)
app.command()(train)


def _print_parties(parties: dict[str, Any]) -> None:
    """Class names and each party's local preprocessing, where this process knows it."""
    from securevfl.report.run_report import preprocessing_line

    for name, p in parties.items():
        if p.get("classes"):
            console.print(f"classes (label at {name}): {', '.join(map(str, p['classes']))}", highlight=False)
    known = {n: p for n, p in parties.items() if p.get("preprocessing")}
    if not known or all(not (p["preprocessing"]["one_hot"] or p["preprocessing"]["hashed"]
                             or p["preprocessing"]["imputed"] or p["preprocessing"]["dates"]
                             or p["preprocessing"]["dropped"]) for p in known.values()):
        return  # numbers only, standardised: nothing worth a table
    table = Table(title="each party's own preprocessing (fitted on its training rows)")
    for col in ("party", "encoded columns", "how"):
        table.add_column(col)
    for name, p in known.items():
        table.add_row(name, str(p["features"]), preprocessing_line(p["preprocessing"]))
    console.print(table)


def _print_resume(epoch: int, epochs: int, **info: Any) -> None:
    """The line a resumed run prints once, before its first epoch (``--quiet`` too)."""
    if info.get("resumed"):
        err_console.print(f"resuming from epoch {epoch} (of {epochs}): its checkpoints are loaded", highlight=False)


class _progress:
    """Context manager yielding a progress callback for the active party (rich bar)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self._bar: Progress | None = None
        self._task: Any = None

    def __enter__(self):
        if self.quiet:
            return _print_resume
        self._bar = Progress(TextColumn("[bold]training[/]"), BarColumn(),
                             TextColumn("{task.completed}/{task.total} epochs"), TextColumn("{task.fields[info]}"),
                             TimeElapsedColumn(), TimeRemainingColumn(), console=err_console, transient=True)
        self._bar.__enter__()
        self._task = self._bar.add_task("train", total=None, info="")
        return self.update

    def update(self, epoch: int, epochs: int, **info: float) -> None:
        _print_resume(epoch, epochs, **info)
        text = " ".join(f"{k}={v:.4f}" for k, v in info.items() if isinstance(v, float))
        self._bar.update(self._task, completed=epoch, total=epochs, info=text)  # type: ignore[union-attr]

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)


def metric_label(key: str, positive: Any) -> str:
    """``f1`` and ``auc`` of a binary label name the class they score as positive: ``f1 (positive class 'yes')``."""
    if positive is not None and key in ("f1", "auc"):
        return f"{key} (positive class {str(positive)!r})"
    return key


def summed_label(category: str, parties: int) -> str:
    """A time summed over parties says so: it may exceed the wall clock, as the parties run side by side."""
    return f"{category} (summed over {parties} parties)" if parties > 1 else category


def print_summary(result: Any) -> None:
    """Metrics, time split and traffic as rich tables."""
    metrics = Table(title=f"{result.method} on {result.dataset}", show_header=True)
    metrics.add_column("metric")
    metrics.add_column("value", justify="right")
    positive = next((p["positive_class"] for p in result.parties.values() if "positive_class" in p), None)
    for k, v in result.metrics.items():
        if isinstance(v, float):
            metrics.add_row(metric_label(k, positive), f"{v:.4f}")
    console.print(metrics)
    _print_parties(result.parties)
    for note in result.notes:
        if note.startswith("warning: "):
            err_console.print(f"[bold yellow]{note}[/]", highlight=False)
    per_party = result.metrics.get("per_party")
    if per_party:
        t = Table(title="per-party test metrics")
        cols = list(next(iter(per_party.values())))
        t.add_column("party")
        for c in cols:
            t.add_column(c, justify="right")
        for party, m in per_party.items():
            t.add_row(party, *(f"{m[c]:.4f}" for c in cols))
        console.print(t)
    boost = result.extra.get("secureboost") if isinstance(result.extra, dict) else None
    if boost:
        owners = ", ".join(f"{p} {n}" for p, n in boost["split_owners"].items())
        console.print(f"secureboost: {boost['trees_kept']} trees kept of {boost['trees_built']} built, "
                      f"{boost['seconds_per_tree']:.2f} s per tree; splits owned: {owners}")
    c = result.cost
    n_parties = len(c.get("per_party", {}))
    cost = Table(title="where the time went", caption=(
        f"model compute, crypto and serialisation are summed over the {n_parties} parties, which run side by "
        "side: the sum may exceed the wall clock") if n_parties > 1 else None)
    cost.add_column("category")
    cost.add_column("seconds", justify="right")
    cost.add_row(summed_label("model compute", n_parties), f"{c['compute_s']:.3f}")
    for prim, s in c["crypto_s"].items():
        cost.add_row(f"crypto: {prim}", f"{s:.3f}")
    cost.add_row(summed_label("serialisation", n_parties), f"{c['serialize_s']:.3f}")
    cost.add_row("simulated network", f"{c['simulated_network_s']:.3f}")
    cost.add_row("wall clock", f"{result.wall_s:.3f}")
    console.print(cost)
    alignment = c.get("alignment", {})
    if alignment.get("method") == "none":
        console.print(f"alignment: none ({alignment.get('note', 'not needed')})")
    elif "intersection_size" in alignment:
        console.print(f"alignment: {alignment['method']}; {alignment.get('total_bytes', 0):,} bytes, "
                      f"{alignment.get('rounds', 0)} rounds (not included in the training traffic below)")
    if c["comm"]["bytes"]:
        links = Table(title=f"training traffic ({c['rounds']} rounds)")
        links.add_column("link")
        links.add_column("bytes", justify="right")
        links.add_column("messages", justify="right")
        for link, b in c["comm"]["bytes"].items():
            links.add_row(link, f"{b:,}", f"{c['comm']['messages'][link]:,}")
        console.print(links)
    if result.privacy:
        leaks = Table(title="measured privacy (attacks on what a party received)")
        for col in ("attack", "attacker -> target", "metric", "value", "random guess", "own data only"):
            leaks.add_column(col)
        for r in result.privacy:
            value = "n/a" if r["value"] is None else f"{r['value']:.3f}"
            own = "" if r.get("own_data") is None else f"{r['own_data']:.3f}"
            leaks.add_row(r["attack"], f"{r['attacker']} -> {r['target']}", r["metric"], value, f"{r['baseline']:.3f}",
                          own)
        console.print(leaks)


_ATTACK_SETTINGS = ("method", "dataset", "parties", "epochs", "active_features", "seed", "options")
_ATTACK_ONLY = [
    inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=kind, default=typer.Option(default, help=text))
    for name, kind, default, text in (
        ("defense", str, "grad-noise", "The defence to sweep: grad-noise | grad-sparsify | label-dp."),
        ("strengths", str, "0,1,4,16", "Comma-separated strengths of the sweep (0: no defence)."),
        ("out", Path, Path("out/attack"), "Folder for attack.json and privacy_utility.png."))]


def attack(*, defense: str, strengths: str, out: Path, **values: Any) -> None:
    """Run every applicable attack on a method, then sweep a defence: the privacy-utility table and plot."""
    from securevfl.api import train as api_train
    from securevfl.attacks.suite import applicable_attacks, plot_privacy_utility, privacy_utility
    from securevfl.checks import check_output_dir

    check_output_dir(out)
    try:
        levels = [float(x) for x in strengths.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--strengths must be comma-separated numbers, got {strengths!r}") from None
    kwargs = api_values(cli_settings(_ATTACK_SETTINGS), values)
    method, dataset, parties = kwargs["method"], kwargs["dataset"], kwargs["parties"]
    attacks = applicable_attacks(method, parties)
    kwargs["alignment"] = "plaintext"
    with console.status(f"{len(levels)} runs of {method} on {dataset} with {len(attacks)} attacks"):
        points = privacy_utility(api_train, defense, levels, attacks, **kwargs)
    table = Table(title=f"{method} on {dataset}: attacks vs accuracy, {defense} sweep")
    table.add_column(defense, justify="right")
    table.add_column("accuracy", justify="right")
    for name in attacks:
        table.add_column(name, justify="right")
    for p in points:
        table.add_row(f"{p['strength']:g}", f"{p['accuracy']:.3f}",
                      *("n/a" if p["attacks"].get(n) is None else f"{p['attacks'][n]:.3f}" for n in attacks))
    console.print(table)
    out.mkdir(parents=True, exist_ok=True)
    atomic.write_text(out / "attack.json",
                      json.dumps({"method": method, "dataset": dataset, "points": points}, indent=2))
    png = plot_privacy_utility(points, out / "privacy_utility.png", f"{method} on {dataset}: {defense}")
    console.print(f"results: {out / 'attack.json'} and {png}")


settings_command(attack, cli_settings(_ATTACK_SETTINGS), after=_ATTACK_ONLY, defaults={"parties": 4, "epochs": 10})
app.command()(attack)


@app.command()
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
            table.add_row(name, "-", "-", "-", escape(f"{desc} [not installed]"))
            continue
        table.add_row(name, str(ds.n_rows), str(len(ds.feature_columns)), str(ds.n_classes), escape(desc))
    console.print(table)


@app.command()
def methods() -> None:
    """List the training methods and their options."""
    import dataclasses

    from securevfl.methods import method_class, method_names

    table = Table(title="methods")
    for col in ("name", "summary", "options (--option KEY=VALUE)"):
        table.add_column(col)
    for name in method_names():
        cls = method_class(name)
        opts = ", ".join(f"{f.name}={f.default if f.default_factory is dataclasses.MISSING else f.default_factory()}"
                         for f in dataclasses.fields(cls.Options))
        table.add_row(name, cls.summary, opts or "-")
    console.print(table)


def report_error(exc: SecureVFLError | Interrupted, debug: bool) -> None:
    """Print a SecureVFLError as one clear line (and its traceback with --debug)."""
    hint = getattr(exc, "hint", "")
    if debug:
        if isinstance(exc, PartyFailure) and exc.traceback_text:
            err_console.print(exc.traceback_text, markup=False, highlight=False)
        else:
            err_console.print("".join(traceback.format_exception(exc)), markup=False, highlight=False)
    if isinstance(exc, PartyFailure) and isinstance(exc.cause, SecureVFLError | Interrupted):
        message = f"{exc.cause} (party {exc.party}, during {exc.stage})"
    else:
        message = str(exc)
    message = " ".join(line.strip() for line in message.splitlines() if line.strip())
    print(f"error: {message}", file=sys.stderr)  # one line, never wrapped
    if hint:  # what to do next (securevfl.cli_resume): its own line
        print(hint, file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run the app; a SecureVFLError becomes one clear line on stderr and its exit code.

    The code is 2, or 143 / 130 for a party stopped by SIGTERM / SIGINT.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv  # a global flag, accepted anywhere on the line
    argv = [a for a in argv if a != "--debug"]
    if debug:  # gRPC's own log lines (TLS handshakes, ports); without --debug the transport silences them
        os.environ.setdefault("GRPC_VERBOSITY", "INFO")
    try:
        code = app(args=argv, prog_name="securevfl", standalone_mode=False)
        return code if isinstance(code, int) else 0  # click hands back a typer.Exit's code here
    except typer.Exit as exc:
        return exc.exit_code
    except (SecureVFLError, Interrupted) as exc:  # Interrupted: SIGTERM / SIGINT (securevfl party)
        report_error(exc, debug)
        return exc.exit_code
    except typer.Abort:
        err_console.print("aborted")
        return 130
    except TyperException as exc:  # usage errors: typer formats them itself
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            err_console.print(f"error: {exc}")
        return int(getattr(exc, "exit_code", 2))


def entry() -> None:
    """Setuptools console-script target."""
    raise SystemExit(main())


if __name__ == "__main__":
    entry()

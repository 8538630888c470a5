"""The ``securevfl`` command: a thin typer shell over the Python API (no logic lives only here)."""

from __future__ import annotations

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
from securevfl.cli_predict import predict_command
from securevfl.cli_psi import psi_command
from securevfl.cli_resume import hint_resume
from securevfl.errors import ConfigError, Interrupted, MissingPackageError, PartyFailure, SecureVFLError
from securevfl.report.console import print_summary

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


def _parse_pairs(values: list[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{what} must look like NAME=VALUE, got {item!r}")
        if key.strip() in out:
            raise ConfigError(f"{what} names {key.strip()!r} twice")
        out[key.strip()] = value.strip()
    return out


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"expected comma-separated integers, got {text!r}") from None


@app.command()
def train(
    method: str = typer.Option("splitnn", help="Training method (see `securevfl methods`)."),
    dataset: str = typer.Option("breast-cancer", help="Dataset name, or csv:PATH / parquet:PATH."),
    parties: int = typer.Option(2, help="Number of parties (1 active + passives)."),
    party_names: str = typer.Option("", help="Comma-separated party names; the first is active."),
    epochs: int = typer.Option(50, help="Training epochs."),
    batch_size: int = typer.Option(32, help="Batch size."),
    lr: float = typer.Option(1e-3, help="Learning rate (Adam)."),
    seed: int = typer.Option(0, help="Seed for partition, initialisation and batch order (not for secrets)."),
    device: str = typer.Option("auto", help="auto (CUDA when present), cpu, cuda[:N]."),
    embedding_dim: int = typer.Option(16, help="Embedding width of bottom models."),
    hidden: str = typer.Option("64", help="Hidden layer sizes, comma-separated."),
    features: list[str] = typer.Option([], "--features", help="PARTY=col1,col2 (repeat per party)."),
    partition: str = typer.Option("", "--partition", help="Named partition preset."),
    split: str = typer.Option("", help="Feature split: random | contiguous | strips."),
    active_features: int = typer.Option(-1, help="Number of features for the active party."),
    aligned: int = typer.Option(0, help="Number of aligned training rows (default: all)."),
    aligned_ratio: float = typer.Option(0.0, help="Fraction of training rows that are aligned."),
    unaligned: str = typer.Option("drop", help="Rows outside the intersection: drop | active | spread | disjoint."),
    test_size: float = typer.Option(0.2, help="Fraction of rows held out for testing."),
    id_column: str = typer.Option("", help="ID column of a csv:/parquet: dataset."),
    label_column: str = typer.Option("", help="Label column of a csv:/parquet: dataset."),
    task: str = typer.Option(
        "auto", help="auto | classification | regression (auto: a fractional numeric label is a regression target)."),
    n_samples: int = typer.Option(10_000, help="Rows of the synthetic dataset."),
    n_features: int = typer.Option(40, help="Columns of the synthetic dataset."),
    categorical: str = typer.Option(
        "", help="Comma-separated integer columns to encode as categories (text columns are categorical anyway)."),
    drop: str = typer.Option("", help="Comma-separated columns to leave out."),
    dates: str = typer.Option("", help="Comma-separated date columns (used as year, month, day of week)."),
    missing_markers: str | None = typer.Option(
        None, help="Comma-separated cell values that mean missing (default: NA, ?, null, ... ; blank always)."),
    max_onehot: int = typer.Option(20, help="One-hot a categorical column up to this many levels; hash wider ones."),
    embed_categories: bool = typer.Option(
        False, help="Categorical columns as codes the bottom models learn embeddings of (neural methods)."),
    option: list[str] = typer.Option([], "--option", help="Method option KEY=VALUE (repeatable)."),
    data: list[str] = typer.Option(
        [], "--data", help="PARTY=FILE per party (CSV/Parquet); the first holds the labels. Runs PSI, then trains."),
    alignment: str = typer.Option(
        "psi", help="How parties find shared rows: psi (ECDH PSI) | plaintext (simulation only)."),
    secagg: str = typer.Option("", help="Secure aggregation of embeddings: dh | pairwise | paillier | none."),
    key_agreement: str = typer.Option("", help="Key agreement for --secagg dh: x25519 | ffdh."),
    frac_bits: int = typer.Option(-1, help="Fractional bits of the fixed-point ring encoding."),
    drop_prob: float = typer.Option(-1.0, help="Probability that a passive party drops in a round."),
    distill_loss: str = typer.Option("", help="APC-VFL distillation loss: mse | mae."),
    fail_prob: float = typer.Option(-1.0, help="TabVFL: probability a guest is offline for an epoch."),
    on_fail: str = typer.Option("", help="TabVFL: what the host uses for an offline guest: cache | zeros."),
    bandwidth_mbps: float = typer.Option(100.0, help="Simulated link bandwidth, Mbit/s."),
    latency_ms: float = typer.Option(10.0, help="Simulated link latency, ms."),
    recv_timeout: float = typer.Option(600.0, help="Seconds a party waits for one message before the run fails."),
    scheduler: str = typer.Option(
        "cooperative", help="How the parties of one process run: cooperative (greenlets of one thread) | threads."),
    early_stopping: int = typer.Option(
        0, help="Patience in epochs: stop when the validation loss has not improved for this many (0: off)."),
    val_fraction: float = typer.Option(0.2, help="With --early-stopping: aligned training rows held out to validate."),
    checkpoint_dir: Path | None = typer.Option(
        None, help="Every party saves its own state here at each epoch end (DIR/<party>/)."),
    resume: bool = typer.Option(False, help="Continue from the last epoch every party checkpointed."),
    overwrite_checkpoints: bool = typer.Option(
        False, help="Start a new run in a used --checkpoint-dir: move the old files aside (DIR/<party>/previous-*/)."),
    attack: list[str] = typer.Option(
        [], "--attack", help="Measure leakage with an attack on what one party receives (repeatable): "
                             "label-norm, label-cosine, model-completion, feature-inversion, peer-inversion."),
    defense: list[str] = typer.Option(
        [], "--defense", help="NAME=STRENGTH (repeatable): grad-noise=S, grad-sparsify=R, label-dp=EPS."),
    class_weight: str = typer.Option(
        "none", help="none | balanced: weight the loss by inverse class frequency (imbalanced labels)."),
    positive_class: str | None = typer.Option(
        None, help="The class binary F1 and AUC score as positive (default: the second class in the 'classes' line)."),
    report: Path = typer.Option(Path("out/run.json"), help="Where to write the JSON report (+ .md)."),
    model_dir: Path | None = typer.Option(
        None, help="Every party saves its own part of the trained model here (DIR/<party>/), for predict."),
    overwrite: bool = typer.Option(False, help="Replace a model already saved in --model-dir."),
    quiet: bool = typer.Option(False, help="No progress bar."),
) -> None:
    """Train a VFL model and write a report (JSON + Markdown); with --model-dir, keep the model."""
    from securevfl.api import check_report_path
    from securevfl.api import train as api_train
    from securevfl.data.columns import spec_from_text

    check_report_path(report)  # before any work (the API checks it too when given report=)
    columns = spec_from_text(categorical=categorical, drop=drop, dates=dates, missing_markers=missing_markers,
                             max_onehot=max_onehot, embed=embed_categories or None)
    opts: dict[str, Any] = _parse_pairs(option, "--option")
    flagged = {"secagg": secagg, "key_agreement": key_agreement, "frac_bits": frac_bits, "drop_prob": drop_prob,
               "distill_loss": distill_loss, "fail_prob": fail_prob, "on_fail": on_fail}
    opts.update({k: v for k, v in flagged.items() if v not in ("", -1, -1.0)})
    feature_map = {k: [c for c in v.split(",") if c] for k, v in _parse_pairs(features, "--features").items()}
    with _progress(quiet) as on_progress, hint_resume(checkpoint_dir):
        result = api_train(
            method, dataset, parties=parties,
            party_names=[n.strip() for n in party_names.split(",")] if party_names else None,
            epochs=epochs, batch_size=batch_size, lr=lr, seed=seed, device=device,
            embedding_dim=embedding_dim, hidden=_ints(hidden), features=feature_map or None,
            preset=partition or None, split=split or None,
            active_features=active_features if active_features >= 0 else None,
            aligned=aligned or None, aligned_ratio=aligned_ratio or None, unaligned=unaligned,
            test_size=test_size, id_column=id_column or None, label_column=label_column or None,
            n_samples=n_samples, n_features=n_features, columns=columns, task=task, options=opts,
            data_files=_parse_pairs(data, "--data") or None, alignment=alignment,
            bandwidth_mbps=bandwidth_mbps, latency_ms=latency_ms, recv_timeout_s=recv_timeout,
            scheduler=scheduler, patience=early_stopping, val_fraction=val_fraction,
            checkpoint_dir=str(checkpoint_dir) if checkpoint_dir else None, resume=resume,
            checkpoint_overwrite=overwrite_checkpoints,
            attacks=attack, defenses=_parse_pairs(defense, "--defense"), class_weight=class_weight,
            progress=on_progress, model_dir=model_dir, overwrite_model=overwrite, positive_class=positive_class)
    json_path, md_path = result.save(report)
    print_summary(result, console, err_console)
    console.print(f"report: {json_path} and {md_path}")
    if model_dir is not None:
        from securevfl.methods.base import method_class

        if method_class(result.method).standalone:
            active = next(p for p, e in result.parties.items() if e.get("labels"))
            console.print(f"model: {model_dir}/{active}/ (standalone: the active party's alone; score with "
                          f"securevfl predict and {active}'s file only)")
        else:
            console.print(f"model: {model_dir}/<party>/ (one part per party; score with securevfl predict)")


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


@app.command()
def attack(
    method: str = typer.Option("splitnn", help="Training method."),
    dataset: str = typer.Option("breast-cancer", help="Dataset name."),
    parties: int = typer.Option(4, help="Number of parties (1 active + passives)."),
    epochs: int = typer.Option(10, help="Training epochs of every run."),
    active_features: int = typer.Option(-1, help="Features of the active party (0: labels only)."),
    seed: int = typer.Option(0, help="Seed of the runs."),
    option: list[str] = typer.Option([], "--option", help="Method option KEY=VALUE (repeatable)."),
    secagg: str = typer.Option("", help="Secure aggregation for easter / aggvfl: dh | pairwise | paillier | none."),
    defense: str = typer.Option("grad-noise", help="The defence to sweep: grad-noise | grad-sparsify | label-dp."),
    strengths: str = typer.Option("0,1,4,16", help="Comma-separated strengths of the sweep (0: no defence)."),
    out: Path = typer.Option(Path("out/attack"), help="Folder for attack.json and privacy_utility.png."),
) -> None:
    """Run every applicable attack on a method, then sweep a defence: the privacy-utility table and plot."""
    from securevfl.api import train as api_train
    from securevfl.attacks.suite import applicable_attacks, plot_privacy_utility, privacy_utility
    from securevfl.checks import check_output_dir

    check_output_dir(out)
    try:
        levels = [float(x) for x in strengths.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--strengths must be comma-separated numbers, got {strengths!r}") from None
    opts: dict[str, Any] = _parse_pairs(option, "--option")
    if secagg:
        opts["secagg"] = secagg
    attacks = applicable_attacks(method, parties)
    kwargs = dict(method=method, dataset=dataset, parties=parties, epochs=epochs, seed=seed, options=opts,
                  active_features=active_features if active_features >= 0 else None, alignment="plaintext")
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

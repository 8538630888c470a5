"""``securevfl train``: train a VFL model in this process and write its report."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from securevfl.cli.options import parse_ints, parse_pairs
from securevfl.cli.resume import hint_resume
from securevfl.report.console import print_summary

console = Console(stderr=False)
err_console = Console(stderr=True)


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
    opts: dict[str, Any] = parse_pairs(option, "--option")
    flagged = {"secagg": secagg, "key_agreement": key_agreement, "frac_bits": frac_bits, "drop_prob": drop_prob,
               "distill_loss": distill_loss, "fail_prob": fail_prob, "on_fail": on_fail}
    opts.update({k: v for k, v in flagged.items() if v not in ("", -1, -1.0)})
    feature_map = {k: [c for c in v.split(",") if c] for k, v in parse_pairs(features, "--features").items()}
    with _progress(quiet) as on_progress, hint_resume(checkpoint_dir):
        result = api_train(
            method, dataset, parties=parties,
            party_names=[n.strip() for n in party_names.split(",")] if party_names else None,
            epochs=epochs, batch_size=batch_size, lr=lr, seed=seed, device=device,
            embedding_dim=embedding_dim, hidden=parse_ints(hidden), features=feature_map or None,
            preset=partition or None, split=split or None,
            active_features=active_features if active_features >= 0 else None,
            aligned=aligned or None, aligned_ratio=aligned_ratio or None, unaligned=unaligned,
            test_size=test_size, id_column=id_column or None, label_column=label_column or None,
            n_samples=n_samples, n_features=n_features, columns=columns, task=task, options=opts,
            data_files=parse_pairs(data, "--data") or None, alignment=alignment,
            bandwidth_mbps=bandwidth_mbps, latency_ms=latency_ms, recv_timeout_s=recv_timeout,
            scheduler=scheduler, patience=early_stopping, val_fraction=val_fraction,
            checkpoint_dir=str(checkpoint_dir) if checkpoint_dir else None, resume=resume,
            checkpoint_overwrite=overwrite_checkpoints,
            attacks=attack, defenses=cast("dict[str, Any]", parse_pairs(defense, "--defense")),
            class_weight=class_weight,
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

    def __enter__(self) -> Any:
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

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

"""``securevfl certs | party | launch``: run each organisation as its own process, over mutual TLS.

A thin shell over :mod:`securevfl.deploy` (docs/deploy.md). Errors are raised as
:class:`~securevfl.errors.SecureVFLError`; the CLI wrapper prints them as one line (exit code 2).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from psi import atomic
from securevfl.deploy.launch import STOP_SIGNALS, launch
from securevfl.errors import ConfigError, Interrupted, PartyFailure, SecureVFLError

console = Console()
err_console = Console(stderr=True)
_log = logging.getLogger(__name__)


certs_app = typer.Typer(
    add_completion=False, invoke_without_command=True,
    help="TLS certificates. Real deployments: `certs ca` once at the CA, `certs request` on each party's machine "
         "(the key never leaves it), `certs sign` at the CA for each CSR. Trials: `certs --parties a,b,c` makes a "
         "CA and every party's key in one folder.")


def _say(text: str) -> None:
    console.print(text, highlight=False, soft_wrap=True)


@certs_app.callback()
def certs_command(
    ctx: typer.Context,
    parties: str | None = typer.Option(
        None, help="Trials only: comma-separated party names, e.g. bank,shop,clinic; makes every key here."),
    out: Path = typer.Option(  # noqa: B008
        Path("certs"), help="Folder for ca.pem, <party>.pem, <party>.key, and ca/ca.key (the CA key, mode 0600)."),
    days: int = typer.Option(365, help="Validity of the certificates in days."),
    overwrite: bool = typer.Option(False, help="Replace existing files."),
) -> None:
    """One-shot development PKI for trials (--parties), or a subcommand of the CSR flow: ca, request, sign."""
    if ctx.invoked_subcommand is not None:
        given = [f"--{n}" for n in ("parties", "out", "days", "overwrite")
                 if getattr(ctx.get_parameter_source(n), "name", "") == "COMMANDLINE"]
        if given:
            raise ConfigError(f"{', '.join(given)} before `{ctx.invoked_subcommand}` belongs to the one-shot "
                              f"development PKI; put the options of `certs {ctx.invoked_subcommand}` after its name")
        return
    if parties is None:
        raise ConfigError("give --parties NAME,NAME,... for a one-shot development PKI (trials), or a subcommand: "
                          "`certs ca`, `certs request`, `certs sign` (see `securevfl certs --help`)")
    from securevfl.deploy.certs import make_dev_pki

    names = [p.strip() for p in parties.split(",") if p.strip()]
    pki = make_dev_pki(names, out, days=days, overwrite=overwrite)
    _say(f"CA: {pki.ca_cert}")
    _say(f"CA key: {pki.ca_key} (mode 0600, in its own folder, mode 0700)")
    for name in names:
        _say(f"{name}: {pki.certs[name]} (key {pki.keys[name]}, mode 0600)")
    _say(f"keep {pki.ca_key.parent}/ offline and off the parties' machines; give each party only its own "
         ".pem and .key, and everyone ca.pem (for trials: a real deployment makes each key on its owner's machine, "
         "see `securevfl certs request`)")


@certs_app.command("ca")
def certs_ca_command(
    out: Path = typer.Option(..., help="CA folder: ca.pem (for every party) and ca/ca.key (mode 0600, stays here)."),  # noqa: B008
    days: int = typer.Option(3650, help="Validity of the CA certificate in days (it bounds what it signs)."),
    overwrite: bool = typer.Option(False, help="Replace an existing CA."),
) -> None:
    """Make only a CA, to sign the parties' certificate requests (`certs sign`)."""
    from securevfl.deploy.certs import make_ca

    ca = make_ca(out, days=days, overwrite=overwrite)
    _say(f"CA: {ca.cert} (give it to every party)")
    _say(f"CA key: {ca.key} (mode 0600, in its own folder, mode 0700; keep it offline, never copy it)")


@certs_app.command("request")
def certs_request_command(
    party: str = typer.Option(..., help="This party's name, as in the federation file."),
    out: Path = typer.Option(..., help="This party's folder: <party>.key (mode 0600) and <party>.csr."),  # noqa: B008
    overwrite: bool = typer.Option(False, help="Replace an existing key and CSR."),
) -> None:
    """On a party's own machine: make its private key and a certificate signing request (CSR)."""
    from securevfl.deploy.certs import make_key_request

    req = make_key_request(party, out, overwrite=overwrite)
    _say(f"key: {req.key} (mode 0600; it never leaves this machine)")
    _say(f"CSR: {req.csr} (send it to the CA, then put the certificate it returns next to the key)")
    _say(f"public key SHA-256: {req.fingerprint}")


@certs_app.command("sign")
def certs_sign_command(
    csr: Path = typer.Argument(..., help="The party's CSR (<party>.csr), as received."),  # noqa: B008
    ca: Path = typer.Option(..., "--ca", help="CA folder holding ca.pem and ca/ca.key (`certs ca`)."),  # noqa: B008
    out: Path | None = typer.Option(None, help="Folder for <party>.pem (default: the CSR's folder)."),  # noqa: B008
    days: int = typer.Option(365, help="Validity of the certificate in days (never beyond the CA's)."),
    party: str | None = typer.Option(None, help="Refuse unless the CSR is for this party."),
    overwrite: bool = typer.Option(False, help="Replace an existing certificate."),
) -> None:
    """At the CA: check a party's CSR (party name, signature, key) and issue its certificate."""
    from securevfl.deploy.certs import sign_request

    signed = sign_request(csr, ca, out_dir=out, days=days, expected_party=party, overwrite=overwrite)
    _say(f"{signed.party}: {signed.cert} (valid until {signed.not_after:%Y-%m-%d %H:%M} UTC)")
    _say(f"public key SHA-256: {signed.fingerprint} (compare with what `certs request` printed at {signed.party})")
    _say(f"send {signed.cert.name} and {Path(ca) / 'ca.pem'} to {signed.party}")


def _event(party: str, phase: str, event: str, message: str, level: int = logging.INFO, **fields: Any) -> None:
    """One event of this party's process (the console shows it as ``[party] message``)."""
    from securevfl.deploy.progress import log_event

    log_event(_log, party, phase, event, message, level=level, **fields)


@contextmanager
def logged_failure(party: str) -> Iterator[None]:
    """A party's failure as its last event (level error): in the log file and a JSON console.

    A text console shows the one ``error:`` line the CLI prints instead.
    """
    from securevfl.deploy.progress import log_event

    started = time.monotonic()
    try:
        yield
    except (SecureVFLError, Interrupted) as exc:
        cause = exc.cause if isinstance(exc, PartyFailure) and exc.cause is not None else exc
        stage = exc.stage if isinstance(exc, PartyFailure) else None
        text = " ".join(line.strip() for line in str(cause).splitlines() if line.strip())
        log_event(_log, party, "end", "failed", f"failed{f' during {stage}' if stage else ''}: {text}",
                  level=logging.ERROR, console=False, error=text, error_type=type(cause).__name__, stage=stage,
                  wall_s=round(time.monotonic() - started, 3))
        raise


#: After SIGTERM / SIGINT a party has this long to tell its peers and close its links before it exits anyway.
STOP_GRACE_S = 10.0


@contextmanager
def stop_on_signals(party: str, grace: float = STOP_GRACE_S) -> Iterator[None]:
    """SIGTERM (systemctl stop, docker stop) and SIGINT (Ctrl-C) raise :class:`Interrupted` in the main thread.

    The exception unwinds the party's role like any failure, so the party sends ABORT with the reason
    to every peer (who stop at once instead of waiting for a lost link) and closes its links; the CLI
    then exits with 143 / 130. Checkpoints are written atomically, so an interrupted epoch leaves the
    last complete one. A watchdog ends the process with the same code if the cleanup takes longer
    than ``grace`` seconds (a main thread stuck in a long native call), and a second signal ends it at
    once. Outside the main thread (an embedding program) nothing is installed.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        code = 128 + signum
        if fired:  # the second signal: the user insists
            os._exit(code)
        fired.append(signum)
        watchdog = threading.Timer(grace, os._exit, args=(code,))
        watchdog.daemon = True
        watchdog.start()
        raise Interrupted(signum, party)

    previous = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


def with_party_logging(command: Any) -> Any:
    """Run ``command`` with its events on the console and in ``--log-file``, its failure included.

    ``--log-level`` and ``--log-format`` say how; typer reads the options from ``command``'s signature.
    """

    @functools.wraps(command)
    def run(**options: Any) -> Any:
        from securevfl.deploy.logs import party_logging

        party, level, fmt = options["as_"], options["log_level"].lower(), options["log_format"].lower()
        with party_logging(party, level, fmt, options["log_file"]), logged_failure(party):
            return command(**options)

    return run


@with_party_logging
def party_command(
    federation: Path = typer.Option(..., help="The federation file (TOML, docs/deploy.md)."),  # noqa: B008
    as_: str = typer.Option(..., "--as", help="Which party of the federation this process is."),
    data: Path | None = typer.Option(  # noqa: B008
        None, help="This party's own table (CSV/Parquet) with the ID column (none for a data = false party)."),
    report: Path | None = typer.Option(None, help="Where to write this party's report (JSON + .md)."),  # noqa: B008
    device: str = typer.Option("auto", help="auto (CUDA when present), cpu, cuda[:N]."),
    threads: int | None = typer.Option(
        None, help="torch threads of this process (0: torch's default, one per core). Default: [parties.NAME] "
                   "threads, else OMP_NUM_THREADS, else this machine's cores / the parties listed on this host."),
    insecure: bool = typer.Option(False, help="Confirm plaintext links (loopback only; the file must say so too)."),
    checkpoint_dir: Path | None = typer.Option(  # noqa: B008
        None, help="Save this party's own state here at each epoch end (split-learning methods)."),
    resume: bool = typer.Option(False, help="Continue from the last epoch every party checkpointed."),
    overwrite_checkpoints: bool = typer.Option(
        False, help="Start a new run in a used --checkpoint-dir: move the old files aside (previous-*/)."),
    categorical: str = typer.Option("", help="This party's integer columns to encode as categories (comma-separated)."),
    drop: str = typer.Option("", help="This party's columns to leave out (comma-separated)."),
    dates: str = typer.Option("", help="This party's date columns (comma-separated)."),
    missing_markers: str | None = typer.Option(
        None, help="Cell values that mean missing in this party's file (comma-separated; blank always)."),
    max_onehot: int | None = typer.Option(None, help="One-hot up to this many levels; hash wider columns."),
    embed_categories: bool | None = typer.Option(
        None, "--embed-categories/--no-embed-categories",
        help="This party's categorical columns as codes its bottom model learns embeddings of."),
    model_dir: Path | None = typer.Option(  # noqa: B008
        None, help="Save this party's own part of the trained model here (DIR/<party>/); with --predict, "
                   "score with it."),
    overwrite_model: bool = typer.Option(False, help="Replace a part already saved in --model-dir."),
    predict: bool = typer.Option(False, help="Score new rows (--data) with this party's part (--model-dir)."),
    out: Path | None = typer.Option(  # noqa: B008
        None, help="With --predict at the active party: where to write the predictions (CSV)."),
    batch_size: int = typer.Option(4096, help="With --predict: rows scored per exchange."),
    serve: bool = typer.Option(False, help="Stay up and score requests with this party's part (--model-dir) "
                                           "for the customers of --data; the active party answers POST /score."),
    listen: str = typer.Option("127.0.0.1:8470", help="With --serve at the active party: the HTTP endpoint's "
                                                      "HOST:PORT (port 0: any free port)."),
    log_file: Path | None = typer.Option(  # noqa: B008
        None, help="Also append this party's events to this file (the console still shows text)."),
    log_level: str = typer.Option("info", help="debug, info, warning or error: the least severe event shown."),
    log_format: str = typer.Option("text", help="text, or json: one object per line (of --log-file; without "
                                                "it, of the console)."),
    positive_class: str | None = typer.Option(
        None, help="At the active party: the class binary F1 and AUC score as positive (default: the second "
                   "class in sorted order)."),
) -> None:
    """Run one party: load only its own table, PSI with its peers, then its role of the method.

    The column options describe this party's own file (they override its [parties.NAME.columns]
    section); no other party sees them. With --predict the party scores its new rows with its own
    part of a saved model instead (the columns are read as in training). The party prints its
    progress as ``[party] ...`` lines on stderr (``--log-*``: see :func:`with_party_logging`).
    """
    from securevfl.api import check_report_path
    from securevfl.data.columns import spec_from_text
    from securevfl.deploy.federation import check_tls_paths, load_federation

    if report is not None:
        check_report_path(report)
    fed = load_federation(federation)
    check_tls_paths(fed)
    columns = spec_from_text(categorical=categorical, drop=drop, dates=dates, missing_markers=missing_markers,
                             max_onehot=max_onehot, embed=embed_categories, base=fed.party(as_).columns)
    if not fed.party(as_).data and columns != fed.party(as_).columns:
        raise ConfigError(f"{as_} has data = false in the federation file: it takes no column options")
    check_insecure(fed.insecure, insecure)
    if positive_class is not None and (serve or predict):
        raise ConfigError("--positive-class is for training (the metrics of its test rows)")
    if serve:
        _check_serve_options(fed, as_, data, model_dir, out, checkpoint_dir, predict)
        choice = _start_threads(fed, as_, threads)
        with stop_on_signals(as_):
            _serve_party(fed, as_, data, model_dir, listen, device, choice)
        return
    if predict:
        _check_predict_options(fed, as_, data, model_dir, out, checkpoint_dir)
        choice = _start_threads(fed, as_, threads)
        with stop_on_signals(as_):
            _score_party(fed, as_, data, model_dir, out, report, device, batch_size, choice)
        return
    if out is not None:
        raise ConfigError("--out is for --predict (the training writes --report and, with --model-dir, the model)")
    choice = _start_threads(fed, as_, threads)
    from securevfl.cli_resume import hint_resume

    with stop_on_signals(as_), hint_resume(checkpoint_dir, [as_], deployed=True):
        _run_party(fed, as_, data, report, device, checkpoint_dir, resume, overwrite_checkpoints, columns,
                   model_dir, overwrite_model, choice, positive_class)


def _start_threads(fed: Any, as_: str, threads: int | None) -> Any:
    """Choose and set this process's torch threads before any torch work (the start event says which, and why)."""
    from securevfl.deploy.threads import apply_threads, choose_threads

    return apply_threads(choose_threads(fed, as_, threads))


def _check_predict_options(fed: Any, as_: str, data: Path | None, model_dir: Path | None, out: Path | None,
                           checkpoint_dir: Path | None) -> None:
    """--predict needs this party's new rows and its part; only the active party writes predictions.

    A helper (``data = false``: hetero-lr's arbiter) holds no part and no rows: it takes no --data
    (a --model-dir is not needed and not read).
    """
    from securevfl.checks import check_output_file
    from securevfl.deploy.scoring import standalone_refusal

    refusal = standalone_refusal(fed, as_)
    if refusal:
        raise ConfigError(refusal)
    if not fed.party(as_).data:
        if data is not None:
            raise ConfigError(f"{as_} has data = false in the federation file: it takes no --data")
    elif model_dir is None or data is None:
        raise ConfigError("--predict needs --model-dir (this party's saved part) and --data (its new rows)")
    if checkpoint_dir is not None:
        raise ConfigError("--checkpoint-dir is for training, not --predict")
    if as_ == fed.active:
        check_output_file(out or DEFAULT_PREDICTIONS, "predictions file")
    elif out is not None:
        raise ConfigError(f"only the active party ({fed.active}) writes predictions: {as_} takes no --out")


def _check_serve_options(fed: Any, as_: str, data: Path | None, model_dir: Path | None, out: Path | None,
                         checkpoint_dir: Path | None, predict: bool) -> None:
    """--serve needs this party's part and its table; it writes no file."""
    from securevfl.deploy.scoring import standalone_refusal

    refusal = standalone_refusal(fed, as_)
    if refusal:
        raise ConfigError(refusal.replace("--predict", "--serve").replace("scores", "serves"))
    if predict:
        raise ConfigError("--serve and --predict are two ways to score: choose one")
    if not fed.party(as_).data:  # a helper (an arbiter) holds no part and no table
        if data is not None:
            raise ConfigError(f"{as_} has data = false in the federation file: it takes no --data")
    elif model_dir is None or data is None:
        raise ConfigError("--serve needs --model-dir (this party's saved part) and --data (the customers it "
                          "can be asked about)")
    if checkpoint_dir is not None or out is not None:
        raise ConfigError("--serve answers requests over HTTP: it takes no --checkpoint-dir and no --out")


def _serve_party(fed: Any, as_: str, data: Path | None, model_dir: Path | None, listen: str, device: str,
                 threads: Any = None) -> None:
    from securevfl.deploy.serving import run_serving_party

    def ready(url: str) -> None:
        console.print(f"[{as_}] serving {fed.job.method} at {url}/score: POST a JSON body of rows, each with "
                      f"{fed.job.id_column!r}; Ctrl-C stops every party", highlight=False)

    part = f"{model_dir}/{as_}" if fed.party(as_).data else "no part (a helper)"
    _event(as_, "start", "model", f"serving with {part}")
    run_serving_party(fed, as_, data, model_dir, listen=listen, device=device, on_ready=ready, threads=threads)


#: Where the active party writes its predictions unless told (--out).
DEFAULT_PREDICTIONS = Path("out/predictions.csv")


def _score_party(fed: Any, as_: str, data: Path | None, model_dir: Path | None, out: Path | None,
                 report: Path | None, device: str, batch_size: int, threads: Any = None) -> None:
    from securevfl.deploy.scoring import run_deployed_scoring
    from securevfl.methods.base import method_class

    helper = not fed.party(as_).data
    if method_class(fed.job.method).standalone:
        _event(as_, "start", "model", f"scoring with {model_dir}/{as_}, alone (a standalone model: no other party, "
                                      "no link)")
    elif helper:
        _event(as_, "start", "model", "scoring as a helper (data = false: it holds no part of the model)")
    else:
        _event(as_, "start", "model", f"scoring with {model_dir}/{as_}")
    result = run_deployed_scoring(fed, as_, data, None if helper else model_dir, batch_size=batch_size,
                                  device=device, threads=threads)
    for peer, reason in sorted(result.missing_costs.items()):
        _event(as_, "cost", "missing_costs", f"the costs of {peer} are missing: {reason}", logging.WARNING,
               peer=peer)
    if result.predictions is not None:
        target = out or DEFAULT_PREDICTIONS
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_text(target, result.predictions.to_csv(index=False))
        for key, value in result.metrics.items():
            if isinstance(value, float):
                console.print(f"{key}: {value:.4f}", highlight=False)
        console.print(f"predictions: {target}")
    if report is not None:
        from securevfl.report.run_report import report_paths

        json_path, _ = report_paths(report)
        json_path.parent.mkdir(parents=True, exist_ok=True)
        snap = result.snapshots.get(as_)
        role = "active" if as_ == fed.active else "passive" if fed.party(as_).data else "helper"
        body = {"party": as_, "kind": "predict", "role": role,
                "scored_rows": result.rows, "wall_s": result.wall_s, "metrics": result.metrics,
                "compute_s": snap.compute_s if snap else None, "crypto_s": snap.crypto_s if snap else None,
                "bytes_sent": dict(snap.bytes) if snap else {}, "missing_costs": result.missing_costs}
        atomic.write_text(json_path, json.dumps(body, indent=2, default=float))
        console.print(f"report: {json_path}")


def _run_party(fed: Any, as_: str, data: Path | None, report: Path | None, device: str,
               checkpoint_dir: Path | None, resume: bool, overwrite_checkpoints: bool, columns: Any,
               model_dir: Path | None = None, overwrite_model: bool = False, threads: Any = None,
               positive_class: str | None = None) -> None:
    from securevfl.deploy.party import run_deployed_party

    result = run_deployed_party(fed, as_, data, device=device,
                                checkpoint_dir=checkpoint_dir, resume=resume,
                                checkpoint_overwrite=overwrite_checkpoints,
                                columns=columns if fed.party(as_).data else None,
                                model_dir=model_dir, overwrite_model=overwrite_model, threads=threads,
                                positive_class=positive_class)
    if result.report is not None:
        from securevfl.report.console import print_summary

        print_summary(result.report, console, err_console)
        if report is not None:
            json_path, md_path = result.report.save(report)
            console.print(f"report: {json_path} and {md_path}")
    elif report is not None:
        from securevfl.report.run_report import report_paths

        json_path, _ = report_paths(report)
        json_path.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_text(json_path, json.dumps(_passive_report(result), indent=2))
        console.print(f"report: {json_path}")
    if model_dir is not None:
        from securevfl.methods.base import method_class

        if method_class(fed.job.method).standalone and as_ != fed.active:
            console.print(f"model part: none (the {fed.job.method} model is {fed.active}'s alone)")
        elif not fed.party(as_).data:
            console.print(f"model part: none ({as_} has data = false: a helper holds no part of the model)")
        else:
            console.print(f"model part: {model_dir}/{as_}/")


def _passive_report(result: Any) -> dict[str, Any]:
    snap = result.snapshots[result.party]
    return {"party": result.party, "role": "passive", "shared_rows": result.alignment.size,
            "wall_s": result.wall_s, "threads": result.threads, "compute_s": snap.compute_s, "crypto_s": snap.crypto_s,
            "serialize_s": snap.serialize_s, "bytes_sent": dict(snap.bytes), "messages_sent": dict(snap.messages),
            "psi": {"bytes_sent": dict(result.alignment.snapshot.bytes),
                    "crypto_s": result.alignment.snapshot.crypto_s},
            "preprocessing": result.preprocessing, "wire": result.link_stats}


def launch_command(
    federation: Path = typer.Argument(..., help="The federation file (TOML)."),  # noqa: B008
    data: list[str] = typer.Option(..., "--data", help="PARTY=FILE for every party (repeat)."),  # noqa: B008
    report: Path | None = typer.Option(None, help="Where the active party writes the run report."),  # noqa: B008
    device: str = typer.Option("auto", help="Device for every party."),
    timeout: float = typer.Option(0, help="Stop everything after this many seconds (0: no limit)."),
    insecure: bool = typer.Option(False, help="Confirm plaintext links (loopback only; the file must say so too)."),
    checkpoint_dir: Path | None = typer.Option(  # noqa: B008
        None, help="Every party saves its own state under DIR/<party>/ at each epoch end."),
    resume: bool = typer.Option(False, help="Continue from the last epoch every party checkpointed."),
    overwrite_checkpoints: bool = typer.Option(
        False, help="Start a new run in a used --checkpoint-dir: move the old files aside (previous-*/)."),
    model_dir: Path | None = typer.Option(  # noqa: B008
        None, help="Every party saves its own part of the model under DIR/<party>/; with --predict, scores with it."),
    overwrite_model: bool = typer.Option(False, help="Replace parts already saved in --model-dir."),
    predict: bool = typer.Option(False, help="Score new rows (--data) with the saved model (--model-dir)."),
    out: Path | None = typer.Option(None, help="With --predict: where the active party writes predictions."),  # noqa: B008
    batch_size: int = typer.Option(4096, help="With --predict: rows scored per exchange."),
    log_file: Path | None = typer.Option(  # noqa: B008
        None, help="A folder: every party also appends its events to DIR/<party>.log."),
    log_level: str = typer.Option("info", help="Every party's --log-level: debug, info, warning or error."),
    log_format: str = typer.Option("text", help="Every party's --log-format: text or json (of its --log-file)."),
    threads: int | None = typer.Option(
        None, help="torch threads of each party (default: this machine's cores / the parties)."),
    positive_class: str | None = typer.Option(
        None, help="The class binary F1 and AUC score as positive (default: the second class in sorted order)."),
) -> None:
    """Start every party as its own local process (loopback), stream their output, stop on the first failure."""
    from securevfl.api import check_report_path
    from securevfl.deploy.federation import load_federation

    fed = load_federation(federation)
    check_insecure(fed.insecure, insecure)
    from securevfl.cli import _parse_pairs  # one NAME=VALUE parser for every command

    files = {name: Path(path) for name, path in _parse_pairs(data, "--data").items()}
    missing = sorted(set(fed.data_parties) - set(files))
    unknown = sorted(set(files) - set(fed.data_parties))
    if missing or unknown:
        raise ConfigError(f"--data must name every party with data exactly: missing {missing or 'none'}, "
                          f"unknown or data = false {unknown or 'none'}")
    for name, path in files.items():
        if not path.is_file():
            raise ConfigError(f"--data {name}={path}: file not found")
    if report is not None:
        check_report_path(report)
    extra: dict[str, list[str]] = {n: [] for n in fed.parties}
    if predict:
        _check_predict_options(fed, fed.active, files.get(fed.active), model_dir, out, checkpoint_dir)
        from securevfl.methods.base import method_class

        if method_class(fed.job.method).standalone:
            raise ConfigError(f"the {fed.job.method} model is the active party's alone: score it without launch, "
                              f"with securevfl party --predict --as {fed.active} (or securevfl predict)")
        for name in fed.parties:  # a helper (data = false) scores with no part: no --model-dir
            extra[name] += ["--predict", "--batch-size", str(batch_size)] + (
                ["--model-dir", str(model_dir)] if name in files else [])
        extra[fed.active] += ["--out", str(out or DEFAULT_PREDICTIONS)]
    elif model_dir is not None:
        for name in files:  # a helper saves nothing
            extra[name] += ["--model-dir", str(model_dir)] + (["--overwrite-model"] if overwrite_model else [])
    for name, options in log_options(tuple(fed.parties), log_file, log_level, log_format).items():
        extra[name] += options
    if threads is not None:
        for name in fed.parties:
            extra[name] += ["--threads", str(threads)]
    if positive_class is not None:
        extra[fed.active] += ["--positive-class", positive_class]
    code = launch(federation, {**files, **dict.fromkeys(n for n in fed.parties if n not in files)},
                  active=fed.active, report=report, device=device, timeout=timeout or None, insecure=insecure,
                  checkpoint_dir=checkpoint_dir, resume=resume, overwrite_checkpoints=overwrite_checkpoints,
                  extra=extra)
    if code and checkpoint_dir is not None and not predict:
        from securevfl.cli_resume import last_common_epoch

        last = last_common_epoch(checkpoint_dir)
        if last:
            err_console.print(f"launch: every party's checkpoints hold epoch {last}: to continue from it, run the "
                              "same command with --resume", highlight=False)
    if code:
        raise typer.Exit(code)


def log_options(parties: Sequence[str], log_file: Path | None, level: str, fmt: str) -> dict[str, list[str]]:
    """Each party's ``--log-*`` options under launch: ``log_file`` is a folder, one ``<party>.log`` each."""
    from securevfl.deploy.logs import FORMATS, LEVELS

    if level.lower() not in LEVELS or fmt.lower() not in FORMATS:
        raise ConfigError(f"--log-level must be one of {', '.join(LEVELS)} and --log-format one of "
                          f"{', '.join(FORMATS)}; got {level!r} and {fmt!r}")
    if log_file is not None and log_file.exists() and not log_file.is_dir():
        raise ConfigError(f"launch --log-file {log_file}: give a folder (every party writes <party>.log in it)")
    return {name: ["--log-level", level.lower(), "--log-format", fmt.lower()]
            + (["--log-file", str(log_file / f"{name}.log")] if log_file is not None else []) for name in parties}


def check_insecure(in_file: bool, on_command_line: bool) -> None:
    """Plaintext needs both the federation file's ``insecure = true`` and ``--insecure``: never by accident."""
    if in_file and not on_command_line:
        raise ConfigError("the federation file asks for plaintext links (insecure = true): pass --insecure to "
                          "confirm (loopback only), or use TLS (securevfl certs)")
    if on_command_line and not in_file:
        raise ConfigError("--insecure is given but the federation file uses TLS; remove --insecure")

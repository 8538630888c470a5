"""``securevfl certs | launch``: the PKI of a deployment, and every party as a local process (loopback).

``securevfl party`` (one organisation's own process) is in :mod:`securevfl.cli.party`.

A thin shell over :mod:`securevfl.deploy` (docs/deploy.md). Errors are raised as
:class:`~securevfl.errors.SecureVFLError`; the CLI wrapper prints them as one line (exit code 2).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from psi.checks import input_file_problem
from securevfl.cli.options import api_values, cli_settings, given_names, parse_pairs, settings_command
from securevfl.cli.party import DEFAULT_PREDICTIONS, check_insecure, check_predict_options
from securevfl.errors import ConfigError
from securevfl.run_config import ScoringSettings
from securevfl.settings import settings_of

console = Console()
err_console = Console(stderr=True)


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


def _launch(
    ctx: typer.Context,
    *,
    federation: Path = typer.Argument(..., help="The federation file (TOML)."),  # noqa: B008
    data: list[str] = typer.Option(..., "--data", help="PARTY=FILE for every party (repeat)."),  # noqa: B008
    report: Path | None = typer.Option(None, help="Where the active party writes the run report."),  # noqa: B008
    timeout: float = typer.Option(0, help="Stop everything after this many seconds (0: no limit)."),
    insecure: bool = typer.Option(False, help="Confirm plaintext links (loopback only; the file must say so too)."),
    predict: bool = typer.Option(False, help="Score new rows (--data) with the saved model (--model-dir)."),
    out: Path | None = typer.Option(None, help="With --predict: where the active party writes predictions."),  # noqa: B008
    log_file: Path | None = typer.Option(  # noqa: B008
        None, help="A folder: every party also appends its events to DIR/<party>.log."),
    log_level: str = typer.Option("info", help="Every party's --log-level: debug, info, warning or error."),
    log_format: str = typer.Option("text", help="Every party's --log-format: text or json (of its --log-file)."),
    threads: int | None = typer.Option(
        None, help="torch threads of each party (default: this machine's cores / the parties)."),
    **values: Any,
) -> None:
    """Start every party as its own local process (loopback), stream their output, stop on the first failure."""
    from securevfl.api import check_report_path
    from securevfl.deploy.federation_file import load_federation

    run = api_values(_LAUNCH_SETTINGS, values, given_names(ctx, values))
    device, checkpoint_dir, model_dir = run.get("device", "auto"), run.get("checkpoint_dir"), run.get("model_dir")
    positive_class, exchange_rows = run.get("positive_class"), values["exchange_rows"]
    fed = load_federation(federation)
    check_insecure(fed.insecure, insecure)
    files = {name: Path(path) for name, path in parse_pairs(data, "--data").items()}
    missing = sorted(set(fed.data_parties) - set(files))
    unknown = sorted(set(files) - set(fed.data_parties))
    if missing or unknown:
        raise ConfigError(f"--data must name every party with data exactly: missing {missing or 'none'}, "
                          f"unknown or data = false {unknown or 'none'}")
    for name, path in files.items():
        problem = input_file_problem(path)
        if problem:
            raise ConfigError(f"--data {name}={path}: {problem}")
    if report is not None:
        check_report_path(report)
    extra: dict[str, list[str]] = {n: [] for n in fed.parties}
    if predict:
        if model_dir is None:
            raise ConfigError("--predict needs --model-dir (every party's saved part)")
        check_predict_options(fed, fed.active, out, checkpoint_dir)
        from securevfl.methods.base import method_class

        if method_class(fed.job.method).standalone:
            raise ConfigError(f"the {fed.job.method} model is the active party's alone: score it without launch, "
                              f"with securevfl party --predict --as {fed.active} (or securevfl predict)")
        for name in fed.parties:  # a helper (data = false) scores with no part: no --model-dir
            extra[name] += ["--predict", "--exchange-rows", str(exchange_rows)] + (
                ["--party-timeout", str(values["party_timeout_s"])] if values["party_timeout_s"] is not None
                else []) + (
                ["--model-dir", str(model_dir)] if name in files else [])
        extra[fed.active] += ["--out", str(out or DEFAULT_PREDICTIONS)]
    elif model_dir is not None:
        for name in files:  # a helper saves nothing
            extra[name] += ["--model-dir", str(model_dir)] + (["--overwrite-model"] if run.get("overwrite_model")
                                                              else [])
    for name, options in log_options(tuple(fed.parties), log_file, log_level, log_format).items():
        extra[name] += options
    if threads is not None:
        for name in fed.parties:
            extra[name] += ["--threads", str(threads)]
    if positive_class is not None:
        extra[fed.active] += ["--positive-class", positive_class]
    from securevfl.deploy.launch import launch

    code = launch(federation, {**files, **dict.fromkeys(n for n in fed.parties if n not in files)},
                  active=fed.active, report=report, device=device, timeout=timeout or None, insecure=insecure,
                  checkpoint_dir=checkpoint_dir, resume=run.get("resume", False),
                  overwrite_checkpoints=run.get("checkpoint_overwrite", False), extra=extra)
    if code and checkpoint_dir is not None and not predict:
        from securevfl.cli.resume import last_common_epoch

        last = last_common_epoch(checkpoint_dir)
        if last:
            err_console.print(f"launch: every party's checkpoints hold epoch {last}: to continue from it, run the "
                              "same command with --resume", highlight=False)
    if code:
        raise typer.Exit(code)


#: The run settings launch passes to every party, from their one declaration (securevfl.run_config).
_LAUNCH_SETTINGS = cli_settings(["device", "checkpoint_dir", "resume", "checkpoint_overwrite", "model_dir",
                                 "overwrite_model", "positive_class"])
launch_command = _launch
settings_command(launch_command, [*_LAUNCH_SETTINGS, *settings_of(ScoringSettings)],
                 before=[p for p in inspect.signature(_launch).parameters.values() if p.kind != p.VAR_KEYWORD])


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

"""``securevfl party``: run one organisation of a federation file as its own process, over mutual TLS.

A thin shell over :mod:`securevfl.deploy` (docs/deploy.md): train, score (``--predict``) or serve
(``--serve``) as one party. Errors are raised as :class:`~securevfl.errors.SecureVFLError`; the CLI
wrapper prints them as one line (exit code 2).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from psi import atomic
from securevfl.cli.options import api_values, cli_settings, given_names, settings_command
from securevfl.cli.startup import heavy_imports
from securevfl.deploy.serving_limits import ServeSettings
from securevfl.errors import ConfigError, Interrupted, PartyFailure, SecureVFLError
from securevfl.exploration.options import ExploreOptions
from securevfl.run_config import ScoringSettings
from securevfl.settings import settings_of

console = Console()
err_console = Console(stderr=True)
_log = logging.getLogger(__name__)


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

    from securevfl.deploy.launch import STOP_SIGNALS

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
        with heavy_imports():  # torch, scikit-learn and every method: a party's run needs them
            from securevfl.deploy.logs import party_logging

        party, level, fmt = options["as_"], options["log_level"].lower(), options["log_format"].lower()
        with party_logging(party, level, fmt, options["log_file"]), logged_failure(party):
            return command(**options)

    return run


def _party(
    ctx: typer.Context,
    *,
    federation: Path = typer.Option(..., help="The federation file (TOML, docs/deploy.md)."),  # noqa: B008
    as_: str = typer.Option(..., "--as", help="Which party of the federation this process is."),
    data: Path | None = typer.Option(  # noqa: B008
        None, help="This party's own table (CSV/Parquet) with the ID column (none for a data = false party)."),
    report: Path | None = typer.Option(None, help="Where to write this party's report (JSON + .md)."),  # noqa: B008
    threads: int | None = typer.Option(
        None, help="torch threads of this process (0: torch's default, one per core). Default: [parties.NAME] "
                   "threads, else OMP_NUM_THREADS, else this machine's cores / the parties listed on this host."),
    insecure: bool = typer.Option(False, help="Confirm plaintext links (loopback only; the file must say so too)."),
    predict: bool = typer.Option(False, help="Score new rows (--data) with this party's part (--model-dir)."),
    explore: bool = typer.Option(False, help="Before training: column statistics, WOE / IV against the label, "
                                             "Pearson (securevfl explore); the active party writes the report."),
    out: Path | None = typer.Option(  # noqa: B008
        None, help="With --predict at the active party: where to write the predictions (CSV)."),
    serve: bool = typer.Option(False, help="Stay up and score requests with this party's part (--model-dir) "
                                           "for the customers of --data; the active party answers POST /score."),
    listen: str = typer.Option("127.0.0.1:8470", help="With --serve at the active party: the HTTP endpoint's "
                                                      "HOST:PORT (port 0: any free port)."),
    serve_tls: bool = typer.Option(False, help="With --serve: HTTPS with this party's federation certificate "
                                               "and key (or --serve-cert / --serve-key)."),
    serve_client_ca: str | None = typer.Option(
        None, help="With --serve: require client certificates signed by this CA (a PEM file, or 'federation' "
                   "for the federation's CA)."),
    log_file: Path | None = typer.Option(  # noqa: B008
        None, help="Also append this party's events to this file (the console still shows text)."),
    log_level: str = typer.Option("info", help="debug, info, warning or error: the least severe event shown."),
    log_format: str = typer.Option("text", help="text, or json: one object per line (of --log-file; without "
                                                "it, of the console)."),
    **values: Any,
) -> None:
    """Run one party: load only its own table, PSI with its peers, then its role of the method.

    The column options describe this party's own file (they override its [parties.NAME.columns]
    section); no other party sees them. With --predict the party scores its new rows with its own
    part of a saved model instead (the columns are read as in training). The party prints its
    progress as ``[party] ...`` lines on stderr (``--log-*``: see :func:`with_party_logging`).
    """
    from securevfl.checks import check_output_file
    from securevfl.deploy.federation_file import check_tls_paths, load_federation  # light: no torch yet
    from securevfl.report.run_report import report_paths

    if report is not None:
        for path in report_paths(report):
            check_output_file(path, "report file")
    fed = load_federation(federation)
    check_tls_paths(fed)
    given = given_names(ctx, values)
    run = api_values(_RUN_SETTINGS, values, given)
    columns = _own_columns(run.pop("columns", None), given, fed.party(as_).columns)
    if not fed.party(as_).data and columns != fed.party(as_).columns:
        raise ConfigError(f"{as_} has data = false in the federation file: it takes no column options")
    check_insecure(fed.insecure, insecure)
    if run.get("positive_class") is not None and (serve or predict):
        raise ConfigError("--positive-class is for training (the metrics of its test rows)")
    serving = [s.flag for s in _SERVE_SETTINGS if s.name in given] + (["--serve-tls"] if serve_tls else []) + (
        ["--serve-client-ca"] if serve_client_ca else [])
    if not serve and serving:
        raise ConfigError(f"{serving[0]} is for --serve")
    device, checkpoint_dir, model_dir = run.get("device", "auto"), run.get("checkpoint_dir"), run.get("model_dir")
    exploring = [s.flag for s in _EXPLORE_SETTINGS if s.name in given]
    if not explore and exploring:
        raise ConfigError(f"{exploring[0]} is for --explore")
    if explore:
        if serve or predict:
            raise ConfigError("--explore comes before training: not with --serve or --predict")
        if checkpoint_dir is not None or model_dir is not None or out is not None:
            raise ConfigError("--explore writes its report only (--report): no --checkpoint-dir, --model-dir or --out")
        choice = _start_threads(fed, as_, threads)
        options = {s.name: values[s.name] for s in _EXPLORE_SETTINGS if s.name in given}
        if "correlation" in options:
            options["correlation"] = not options["correlation"]  # --no-correlation
        with stop_on_signals(as_):
            _explore_party(fed, as_, data, report, device, columns, choice, run.get("positive_class"), options)
        return
    if serve:
        _check_serve_options(out, checkpoint_dir, predict)
        choice = _start_threads(fed, as_, threads)
        declared = {s.name: values[s.name] for s in _SERVE_SETTINGS}
        if values["party_timeout_s"] is not None:
            declared["party_timeout_s"] = values["party_timeout_s"]
        settings = _serve_settings(fed, as_, serve_tls, serve_client_ca, declared)
        with stop_on_signals(as_):
            _serve_party(fed, as_, data, model_dir, listen, device, choice, settings)
        return
    if predict:
        check_predict_options(fed, as_, out, checkpoint_dir)
        choice = _start_threads(fed, as_, threads)
        with stop_on_signals(as_):
            _score_party(fed, as_, data, model_dir, out, report, device, values["exchange_rows"], choice,
                         values["party_timeout_s"])
        return
    if "party_timeout_s" in given:
        raise ConfigError("--party-timeout is for --predict and --serve")
    if out is not None:
        raise ConfigError("--out is for --predict (the training writes --report and, with --model-dir, the model)")
    choice = _start_threads(fed, as_, threads)
    from securevfl.cli.resume import hint_resume

    with stop_on_signals(as_), hint_resume(checkpoint_dir, [as_], deployed=True):
        _run_party(fed, as_, data, report, device, checkpoint_dir, run.get("resume", False),
                   run.get("checkpoint_overwrite", False), columns, model_dir, run.get("overwrite_model", False),
                   choice, run.get("positive_class"))


def _own_columns(columns: Any, given: set[str], base: Any) -> Any:
    """The party's column spec: its file section's, with the column options it was given on its command line."""
    if columns is None:
        return base
    changed = {s.name: getattr(columns, s.name) for s in _COLUMN_SETTINGS if s.name in given}
    return dataclasses.replace(base, **changed) if changed else base


#: The run settings a party takes on its own command line, from their one declaration (securevfl.run_config):
#: where it runs, its checkpoints and model part, its columns. The rest of its run is the federation's [job].
_COLUMN_SETTINGS = [s for s in cli_settings() if s.path[:-1] == ("dataset_options", "columns")]
_RUN_SETTINGS = [*cli_settings(["device", "checkpoint_dir", "resume", "checkpoint_overwrite", "model_dir",
                                "overwrite_model", "positive_class"]), *_COLUMN_SETTINGS]
#: Exploring's options (securevfl explore's): the active party's say what is asked, a passive party's what it shares.
_EXPLORE_SETTINGS = [s for s in settings_of(ExploreOptions) if s.info.cli]
#: Serving's --party-timeout is ScoringSettings's (one flag, for --predict and --serve alike).
_SERVE_SETTINGS = [s for s in settings_of(ServeSettings) if s.info.cli and s.name != "party_timeout_s"]

party_command = with_party_logging(_party)
settings_command(party_command, [*_RUN_SETTINGS, *settings_of(ScoringSettings), *_SERVE_SETTINGS, *_EXPLORE_SETTINGS],
                 before=[p for p in inspect.signature(_party).parameters.values() if p.kind != p.VAR_KEYWORD])


def _start_threads(fed: Any, as_: str, threads: int | None) -> Any:
    """Choose and set this process's torch threads before any torch work (the start event says which, and why)."""
    from securevfl.deploy.threads import apply_threads, choose_threads

    return apply_threads(choose_threads(fed, as_, threads))


def check_predict_options(fed: Any, as_: str, out: Path | None, checkpoint_dir: Path | None) -> None:
    """--predict's own flags: no checkpoints; only the active party writes predictions (checked before any work).

    What the party needs (its part and new rows; a helper neither) is the scoring mode's to check
    (:mod:`securevfl.pipeline.score`), before it connects.
    """
    from securevfl.checks import check_output_file

    if checkpoint_dir is not None:
        raise ConfigError("--checkpoint-dir is for training, not --predict")
    if as_ == fed.active:
        check_output_file(out or DEFAULT_PREDICTIONS, "predictions file")
    elif out is not None:
        raise ConfigError(f"only the active party ({fed.active}) writes predictions: {as_} takes no --out")


def _check_serve_options(out: Path | None, checkpoint_dir: Path | None, predict: bool) -> None:
    """--serve's own flags: it writes no file (what the party needs is the serving mode's to check)."""
    if predict:
        raise ConfigError("--serve and --predict are two ways to score: choose one")
    if checkpoint_dir is not None or out is not None:
        raise ConfigError("--serve answers requests over HTTP: it takes no --checkpoint-dir and no --out")


def _serve_settings(fed: Any, as_: str, tls: bool, client_ca: str | None, declared: dict[str, Any]) -> Any:
    """The party's own serving settings (the endpoint's at the active party, the budget at a passive one).

    ``declared``: the values of :class:`~securevfl.deploy.serving_limits.ServeSettings`'s flags;
    ``tls`` (--serve-tls) takes the party's federation certificate, ``client_ca`` may say ``federation``.
    """
    from securevfl.deploy.serving_limits import ServeSettings

    cert, key = declared.pop("cert"), declared.pop("key")
    if tls and cert is None and key is None:
        spec = fed.party(as_)
        if spec.cert is None:
            raise ConfigError("--serve-tls uses this party's federation certificate, and the federation is "
                              "insecure: give --serve-cert and --serve-key")
        cert, key = spec.cert, spec.key
    ca: Path | None = None
    if client_ca == "federation":
        if fed.tls is None:
            raise ConfigError("--serve-client-ca federation: the federation is insecure and has no CA")
        ca = fed.tls.ca
    elif client_ca is not None:
        ca = Path(client_ca)
    if (ca is not None or declared["token_file"] is not None) and as_ != fed.active:
        raise ConfigError(f"only the active party ({fed.active}) has an endpoint: {as_} takes no --serve-client-ca "
                          "or --serve-token-file")
    if ca is not None and cert is None:
        raise ConfigError("--serve-client-ca needs the endpoint's TLS (--serve-tls or --serve-cert/--serve-key)")
    return ServeSettings(cert=cert, key=key, client_ca=ca, **declared)


def _serve_party(fed: Any, as_: str, data: Path | None, model_dir: Path | None, listen: str, device: str,
                 threads: Any = None, settings: Any = None) -> None:
    with heavy_imports():
        from securevfl.pipeline.serve import run_serving_party

    def ready(url: str) -> None:
        console.print(f"[{as_}] serving {fed.job.method} at {url}/score: POST a JSON body of rows, each with "
                      f"{fed.job.id_column!r}; Ctrl-C stops every party", highlight=False)

    run_serving_party(fed, as_, data, model_dir, listen=listen, device=device, on_ready=ready, threads=threads,
                      settings=settings)


#: Where the active party writes its predictions unless told (--out).
DEFAULT_PREDICTIONS = Path("out/predictions.csv")


def _score_party(fed: Any, as_: str, data: Path | None, model_dir: Path | None, out: Path | None,
                 report: Path | None, device: str, exchange_rows: int, threads: Any = None,
                 party_timeout_s: float | None = None) -> None:
    with heavy_imports():
        from securevfl.pipeline.placement import OneParty
        from securevfl.pipeline.score import run_deployed_scoring

    place = OneParty(fed, as_)
    helper = place.kind == "helper"
    result = run_deployed_scoring(fed, as_, data, None if helper else model_dir, exchange_rows=exchange_rows,
                                  device=device, threads=threads, party_timeout_s=party_timeout_s)
    for peer, reason in sorted(result.left_out.items()):
        console.print(f"left out: {peer} ({reason})", highlight=False)
    for peer, reason in sorted(result.missing_costs.items()):
        _event(as_, "cost", "missing_costs", f"the costs of {peer} are missing: {reason}", logging.WARNING,
               peer=peer)
    if result.predictions is not None:
        target = out or DEFAULT_PREDICTIONS
        atomic.write_text(target, result.predictions.to_csv(index=False))
        for key, value in result.metrics.items():
            if isinstance(value, float):
                console.print(f"{key}: {value:.4f}", highlight=False)
        console.print(f"predictions: {target}")
    if report is not None:
        from securevfl.report.run_report import report_paths

        json_path, _ = report_paths(report)
        snap = result.snapshots.get(as_)
        body = {"party": as_, "kind": "predict", "role": place.kind,
                "scored_rows": result.rows, "wall_s": result.wall_s, "metrics": result.metrics,
                "compute_s": snap.compute_s if snap else None, "crypto_s": snap.crypto_s if snap else None,
                "bytes_sent": dict(snap.bytes) if snap else {}, "missing_costs": result.missing_costs,
                "left_out": result.left_out}
        atomic.write_text(json_path, json.dumps(body, indent=2, default=float))
        console.print(f"report: {json_path}")


def _run_party(fed: Any, as_: str, data: Path | None, report: Path | None, device: str,
               checkpoint_dir: Path | None, resume: bool, overwrite_checkpoints: bool, columns: Any,
               model_dir: Path | None = None, overwrite_model: bool = False, threads: Any = None,
               positive_class: str | None = None) -> None:
    with heavy_imports():
        from securevfl.pipeline.placement import OneParty
        from securevfl.pipeline.train import run_deployed_party

    place = OneParty(fed, as_)
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
        atomic.write_text(json_path, json.dumps(_passive_report(result), indent=2))
        console.print(f"report: {json_path}")
    if model_dir is not None:
        if place.holds_part:
            console.print(f"model part: {model_dir}/{as_}/")
        elif place.kind == "helper":
            console.print(f"model part: none ({as_} has data = false: a helper holds no part of the model)")
        else:
            console.print(f"model part: none (the {fed.job.method} model is {fed.active}'s alone)")


def _explore_party(fed: Any, as_: str, data: Path | None, report: Path | None, device: str, columns: Any,
                   threads: Any, positive_class: str | None, options: dict[str, Any]) -> None:
    """Explore as one party: the active party prints the IV ranking and writes the report (JSON, .md, .html)."""
    with heavy_imports():
        from securevfl.exploration.options import ExploreOptions
        from securevfl.exploration.report import ExploreReport, check_explore_paths, explore_paths
        from securevfl.pipeline.explore import run_deployed_explore

    if report is not None:
        check_explore_paths(report)
    result = run_deployed_explore(fed, as_, data, ExploreOptions(**options), device=device, threads=threads,
                                  columns=columns if fed.party(as_).data else None, positive_class=positive_class)
    if isinstance(result, ExploreReport):
        from securevfl.cli.explore import print_explore

        print_explore(result, 15)
        if report is not None:
            paths = result.save(report)
            console.print(f"report: {paths[0]}, {paths[1]} and {paths[2]}")
    elif report is not None and result is not None:  # a passive party: its own columns, as it knows them
        json_path = explore_paths(report)[0]
        body = {"party": as_, "kind": "explore", "role": "passive", "shared": result.shared,
                "kept": list(result.kept) if result.kept is not None else None, "stats": result.stats,
                "bins": result.bins}
        atomic.write_text(json_path, json.dumps(body, indent=2, default=float))
        console.print(f"report: {json_path}")


def _passive_report(result: Any) -> dict[str, Any]:
    snap = result.snapshots[result.party]
    return {"party": result.party, "role": "passive", "shared_rows": result.alignment.size,
            "wall_s": result.wall_s, "threads": result.threads, "compute_s": snap.compute_s, "crypto_s": snap.crypto_s,
            "serialize_s": snap.serialize_s, "bytes_sent": dict(snap.bytes), "messages_sent": dict(snap.messages),
            "psi": {"bytes_sent": dict(result.alignment.snapshot.bytes),
                    "crypto_s": result.alignment.snapshot.crypto_s},
            "preprocessing": result.preprocessing, "wire": result.link_stats}


def check_insecure(in_file: bool, on_command_line: bool) -> None:
    """Plaintext needs both the federation file's ``insecure = true`` and ``--insecure``: never by accident."""
    if in_file and not on_command_line:
        raise ConfigError("the federation file asks for plaintext links (insecure = true): pass --insecure to "
                          "confirm (loopback only), or use TLS (securevfl certs)")
    if on_command_line and not in_file:
        raise ConfigError("--insecure is given but the federation file uses TLS; remove --insecure")

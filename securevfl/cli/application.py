"""The ``securevfl`` typer app, its entry point and the one-line error report (:mod:`securevfl.cli` loads it)."""

from __future__ import annotations

import atexit
import logging
import os
import sys
import traceback

import typer
from rich.console import Console
from typer.exceptions import TyperException

from securevfl.cli import attack, bench, catalog, deploy, explore, party, predict, psi, train
from securevfl.errors import Interrupted, PartyFailure, SecureVFLError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="securevfl: private set intersection and secure vertical federated learning. "
                       "Add --debug anywhere for full tracebacks on errors.")
err_console = Console(stderr=True)

app.command("psi")(psi.psi_command)
app.command("predict")(predict.predict_command)
app.add_typer(deploy.certs_app, name="certs")
app.command("party")(party.party_command)
app.command("launch")(deploy.launch_command)
app.add_typer(bench.bench_app, name="bench")
app.command("train")(train.train)
app.command("explore")(explore.explore)
app.command("attack")(attack.attack)
app.command("datasets")(catalog.datasets)
app.command("methods")(catalog.methods)


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
    if hint:  # what to do next (securevfl.cli.resume): its own line
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
    """Setuptools console-script target (also ``python -m securevfl.cli``, how launch starts each party).

    Once the command has returned, the exit handlers run (Ray's shutdown, temporary folders, worker
    pools), the logs and the console are flushed, and the process ends without the interpreter's own
    teardown of torch and gRPC, which took about 3 s: a party stopped by SIGTERM exited 3.2 s after
    the signal with it, 0.1 s without it (``tests/test_hardening_ops.py``).
    """
    code = main()
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (``securevfl ... | head``): nothing more can be shown
            pass
    os._exit(code or 0)


"""The ``securevfl`` command: a thin typer shell over the Python API (no logic lives only here).

One module per command (:mod:`.train`, :mod:`.attack`, :mod:`.catalog`, :mod:`.psi`, :mod:`.predict`,
:mod:`.bench`, :mod:`.deploy`, :mod:`.party`); :mod:`.application` holds the app, its entry point and
the one-line error report.

This package's own namespace loads nothing heavy: the console script imports it, and so does every
worker process that multiprocessing starts for the PSI curve work or Paillier (a worker re-imports
the main script). Loading the app there (typer, pandas and every command) made a pool of two workers
ready after 1.0 s instead of 0.25 s; the app now loads when a command runs.
"""

from __future__ import annotations

from securevfl.lazy import lazy_attributes


def main(argv: list[str] | None = None) -> int:
    """Run the app; a SecureVFLError becomes one clear line on stderr and its exit code (see :mod:`.application`)."""
    from securevfl.cli.application import main as run

    return run(argv)


def entry() -> None:
    """Setuptools console-script target (also ``python -m securevfl.cli``): see :func:`.application.entry`."""
    from securevfl.cli.startup import heavy_imports, own_process

    with own_process():
        with heavy_imports():  # typer, rich and pandas
            from securevfl.cli.application import entry as run
        run()


__getattr__ = lazy_attributes(__name__, dict.fromkeys(("app", "err_console", "report_error"),
                                                     "securevfl.cli.application"))

"""Start every party of a federation file as its own local process (``securevfl launch``, the wire benchmarks).

Each party runs ``python -m securevfl.cli party``; their output is streamed with a ``[party]``
prefix, and the first failure stops the others.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

#: The signals a party (and launch) treats as "stop": SIGTERM (systemctl stop, docker stop) and SIGINT (Ctrl-C).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def launch(federation: Path, files: dict[str, Path | None], *, active: str, report: Path | None = None,
           device: str = "auto", timeout: float | None = None, python: str = sys.executable,
           insecure: bool = False, checkpoint_dir: Path | None = None, resume: bool = False,
           overwrite_checkpoints: bool = False, extra: Mapping[str, Sequence[str]] | None = None) -> int:
    """Run every party as a child process; return 0, or the exit code of the first party that failed.

    ``files``: party -> its table, or ``None`` for a party without data (``data = false``); ``extra``:
    more ``securevfl party`` arguments per party.

    The children's output is streamed with a ``[party]`` prefix. When one fails, the others get
    SIGTERM after a short grace period (they normally stop by themselves within the peer timeout)
    and SIGKILL if they ignore it; no child outlives this call. SIGTERM or SIGINT sent to this
    process is passed on to every party (each aborts its peers and exits); the call then returns
    128 + the signal (143, 130).
    """
    err_console = Console(stderr=True)
    children: dict[str, subprocess.Popen[str]] = {}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # Every party's torch would use every core: on one machine they would oversubscribe it (measured: 5.8x
    # the model compute time of the threaded run with 3 parties on 2 cores; 1.0x with one thread each).
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // len(files))))
    for name, path in files.items():
        cmd = [python, "-m", "securevfl.cli", "party", "--federation", str(federation), "--as", name,
               "--device", device] + (["--data", str(path)] if path is not None else []) + (
                   ["--insecure"] if insecure else [])
        if report is not None and name == active:
            cmd += ["--report", str(report)]
        if checkpoint_dir is not None:
            cmd += ["--checkpoint-dir", str(checkpoint_dir)] + (["--resume"] if resume else []) + (
                ["--overwrite-checkpoints"] if overwrite_checkpoints else [])
        cmd += list((extra or {}).get(name, ()))
        children[name] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                          env=env, start_new_session=True)
    pumps = [threading.Thread(target=_pump, args=(name, child), daemon=True) for name, child in children.items()]
    for pump in pumps:
        pump.start()
    started = time.monotonic()
    first_failure: tuple[str, int] | None = None
    signalled: list[int] = []
    previous: dict[int, Any] = {}

    def forward(signum: int, frame: Any) -> None:
        """SIGTERM / SIGINT to launch go to every party, which aborts its peers and exits 143 / 130."""
        if signalled:  # a second signal: stop everything now
            _stop(children, grace=0.0)
            return
        signalled.append(signum)
        err_console.print(f"launch: got {signal.Signals(signum).name}; passing it on to every party")
        for child in children.values():
            if child.poll() is None:
                try:
                    os.killpg(child.pid, signum)
                except ProcessLookupError:
                    pass

    if threading.current_thread() is threading.main_thread():
        previous = {s: signal.signal(s, forward) for s in STOP_SIGNALS}
    try:
        while any(c.poll() is None for c in children.values()):
            for name, child in children.items():
                code = child.poll()
                if code and first_failure is None:
                    first_failure = (name, code)
                    _stop(children, grace=5.0)
            if timeout is not None and time.monotonic() - started > timeout:
                err_console.print(f"launch: timeout after {timeout:g} s; stopping every party")
                first_failure = first_failure or ("launch", 124)
                _stop(children, grace=0.0)
            time.sleep(0.05)
    except KeyboardInterrupt:
        _stop(children, grace=0.0)
        raise
    finally:
        _stop(children, grace=0.0)
        for s, handler in previous.items():
            signal.signal(s, handler)
        for pump in pumps:
            pump.join(timeout=2)
    if signalled:
        err_console.print(f"launch: stopped by {signal.Signals(signalled[0]).name}")
        return 128 + signalled[0]
    if first_failure is None:
        failed = [(n, c.returncode) for n, c in children.items() if c.returncode]
        first_failure = failed[0] if failed else None
    if first_failure is not None:
        err_console.print(f"launch: party {first_failure[0]} exited with code {first_failure[1]}")
        return first_failure[1] if first_failure[1] > 0 else 1
    return 0


def _pump(name: str, child: subprocess.Popen[str]) -> None:
    assert child.stdout is not None
    for line in child.stdout:
        text = line.rstrip("\n")
        # a party's own lines and its JSON events (which name it) pass as they are
        print(text if text.startswith((f"[{name}]", "{")) else f"[{name}] {text}", flush=True)


def _stop(children: dict[str, subprocess.Popen[str]], grace: float) -> None:
    deadline = time.monotonic() + grace
    while grace and time.monotonic() < deadline and any(c.poll() is None for c in children.values()):
        time.sleep(0.05)
    for child in children.values():
        if child.poll() is None:
            try:
                os.killpg(child.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 5
    for child in children.values():
        try:
            child.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            child.wait(2)

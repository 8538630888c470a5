"""After a failed run with ``--checkpoint-dir``: tell the user how to continue from the last complete epoch.

The CLI prints an error as one line (:func:`securevfl.cli.application.report_error`); :func:`hint_resume` adds a
second one, ``exc.hint``, when the run failed while training (a lost peer, a timeout, a signal: not
a configuration or data error, which ``--resume`` would not fix) and the checkpoint directory holds
a complete epoch for every party this process ran.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from securevfl.errors import ConfigError, DataError, Interrupted, ModelError, PartyFailure, SecureVFLError


def _resumable(exc: BaseException) -> bool:
    """Whether ``--resume`` can help: a failure during the run, not a refusal.

    Refusals: a configuration, bad data, or a model folder (one already holding a model: the run that wrote
    it had finished).
    """
    if isinstance(exc, PartyFailure):
        return _resumable(exc.cause)
    return isinstance(exc, (Interrupted, KeyboardInterrupt)) or (
        isinstance(exc, SecureVFLError) and not isinstance(exc, (ConfigError, DataError, ModelError)))


def last_common_epoch(checkpoint_dir: Path, parties: Sequence[str] | None = None) -> int:
    """The last epoch every one of ``parties`` (default: every party folder in the directory) checkpointed; 0: none."""
    from securevfl.methods.engine.checkpoint import CheckpointStore

    root = Path(checkpoint_dir)
    if parties is None:
        parties = [p.name for p in root.iterdir() if p.is_dir()] if root.is_dir() else []
    lasts = []
    for party in parties:
        try:
            epochs = CheckpointStore(root, party).completed_epochs()
        except (ConfigError, OSError):  # not a party folder
            continue
        lasts.append(epochs[-1] if epochs else 0)
    return min(lasts, default=0)


def resume_hint(checkpoint_dir: Path | None, exc: BaseException, parties: Sequence[str] | None = None, *,
                deployed: bool = False) -> str:
    """The line to print after ``exc``, or ``""`` when ``--resume`` would not help."""
    if checkpoint_dir is None or not _resumable(exc):
        return ""
    try:
        last = last_common_epoch(checkpoint_dir, parties)
    except OSError:
        return ""
    if not last:
        return ""
    if deployed:
        return (f"to continue from the last epoch every party completed (this party's last checkpoint: epoch {last}), "
                f"start every party again with the same command plus --resume (same --checkpoint-dir {checkpoint_dir})")
    return f"to continue from the last complete epoch ({last}): run the same command with --resume"


@contextmanager
def hint_resume(checkpoint_dir: Path | None, parties: Sequence[str] | None = None, *,
                deployed: bool = False) -> Iterator[None]:
    """Attach :func:`resume_hint` to a failure as ``exc.hint`` (the CLI prints it after the error line).

    Ctrl-C (a ``KeyboardInterrupt``, which the CLI reports as "aborted") gets its hint printed here.
    """
    try:
        yield
    except (SecureVFLError, Interrupted) as exc:
        hint = resume_hint(checkpoint_dir, exc, parties, deployed=deployed)
        if hint:
            exc.hint = hint  # type: ignore[union-attr]
        raise
    except KeyboardInterrupt as exc:
        hint = resume_hint(checkpoint_dir, exc, parties, deployed=deployed)
        if hint:
            print(hint, file=sys.stderr, flush=True)
        raise

"""Per-party checkpoints: each party writes only its own state, one file per completed epoch.

A checkpoint is a dictionary of tensors, numbers, strings and lists (model and optimiser state
dicts, generator states, the engine's history and early-stopping state), written with
``torch.save`` to ``DIR/<party>/epoch-NNNN.pt`` through a temporary file and an atomic rename, and
read back with ``torch.load(weights_only=True)``: no pickle of arbitrary objects is ever executed.
The store keeps the newest :data:`KEEP` epochs, enough for the parties to agree on the last epoch
that every one of them completed (they are at most one epoch apart: every batch is a round trip).

**Identity.** Every checkpoint carries the identity of the run that wrote it (:func:`identity`):

* ``run``: a random run id (:func:`new_run_id`, from :mod:`secrets`) that the active party draws
  when a run starts afresh and sends to every party; a resume continues one run only, and every
  party must hold checkpoints of that same run;
* ``job``: the job fingerprint (method, options and training settings, the epoch count included;
  see :func:`securevfl.methods.engine.loop.job_digest`), the same at every party;
* ``data``: :func:`data_digest` of the party's own training data, computed by the party from
  what it trains on; it stays with the party (the others only learn whether it still matches);
* ``party``: the party's name.

A party checks its own checkpoints against its own job and data (:meth:`CheckpointStore.survey`)
and tells the active party only the epochs it has, their run id, its job digest and a verdict;
the active party decides for everyone (see :mod:`.loop`). A checkpoint without an identity
cannot be read as one of any run and is refused, never resumed.

A fresh run refuses a directory that already holds checkpoints of the party; with
``checkpoint_overwrite`` (``--overwrite-checkpoints``) the old files are moved aside into
``DIR/<party>/previous-<timestamp>/`` (:meth:`CheckpointStore.move_aside`), never deleted.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from psi import atomic
from securevfl.checks import validate_party_name
from securevfl.errors import ConfigError, DataError

if TYPE_CHECKING:
    from securevfl.data.scenario import PartyData

#: Completed epochs each party keeps on disk.
KEEP = 2
#: Hex digits of a run id (128 random bits).
RUN_ID_CHARS = 32

_FILE = re.compile(r"^epoch-(\d{4,})\.pt$")
_HEX = re.compile(r"^[0-9a-f]+$")

#: What :meth:`CheckpointStore.survey` can find wrong with a party's checkpoints (wire codes).
PROBLEMS = {
    "unreadable": "cannot be read",
    "mixed": "belong to several runs",
    "party": "belong to another party",
    "job": "belong to another job (method, options or training settings differ)",
    "data": "were trained on other data",
}


def new_run_id() -> str:
    """A fresh random run id (hex)."""
    return secrets.token_hex(RUN_ID_CHARS // 2)


def is_run_id(value: object) -> bool:
    """Whether ``value`` is a run id (a peer's message is checked with it)."""
    return isinstance(value, str) and len(value) == RUN_ID_CHARS and bool(_HEX.match(value))


def is_digest(value: object) -> bool:
    """Whether ``value`` is a SHA-256 hex digest."""
    return isinstance(value, str) and len(value) == 64 and bool(_HEX.match(value))


def data_digest(data: PartyData) -> str:
    """SHA-256 over what a party trains on, computed by the party itself.

    Its encoded training features, its unaligned rows, its labels where it holds them, with their
    shapes and types (hence the row counts). It never leaves the party.
    """
    h = hashlib.sha256(b"securevfl-data-v1")
    for name in ("X_train", "y_train", "X_unaligned", "y_unaligned"):
        value = getattr(data, name)
        if value is None:
            h.update(f"{name}:none;".encode())
            continue
        array = np.ascontiguousarray(value)
        if array.dtype == object:
            array = array.astype(str)
        h.update(f"{name}:{array.dtype.str}:{array.shape};".encode())
        h.update(array.tobytes())
    return h.hexdigest()


def identity(run: str, job: str, data: str, party: str) -> dict[str, Any]:
    """What every checkpoint of a run carries (see the module doc)."""
    return {"run": run, "job": job, "data": data, "party": party}


@dataclass(frozen=True)
class Survey:
    """What a party found in its own checkpoint directory: epochs, their run and a problem code."""

    epochs: list[int]
    run: str = ""
    problem: str = ""  # a key of PROBLEMS, or "" when the checkpoints match this party's job and data


class CheckpointStore:
    """The checkpoints of one party under ``root/<party>/``."""

    def __init__(self, root: str | os.PathLike[str], party: str) -> None:
        validate_party_name(party)
        self.party = party
        self.directory = Path(root) / party
        if self.directory.exists() and not self.directory.is_dir():
            raise ConfigError(f"checkpoint path {self.directory} exists and is not a directory")

    def completed_epochs(self) -> list[int]:
        """Epochs with a checkpoint on disk, ascending."""
        if not self.directory.is_dir():
            return []
        found = (_FILE.match(p.name) for p in self.directory.iterdir())
        return sorted(int(m.group(1)) for m in found if m)

    def path(self, epoch: int) -> Path:
        return self.directory / f"epoch-{epoch:04d}.pt"

    def save(self, epoch: int, state: dict[str, Any]) -> Path:
        """Write ``state`` as the checkpoint of ``epoch`` (atomically) and prune older epochs.

        Only epochs before ``epoch`` are pruned: a run never deletes the checkpoint it just wrote.
        """
        atomic.make_dirs(self.directory)  # owner-only when made here: a checkpoint holds the party's model
        target = self.path(epoch)
        partial = target.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, atomic.PRIVATE_FILE))
        torch.save({"epoch": epoch, **state}, partial)
        os.replace(partial, target)
        for old in [e for e in self.completed_epochs() if e < epoch][: -(KEEP - 1) or None]:
            self.path(old).unlink(missing_ok=True)
        return target

    def load(self, epoch: int) -> dict[str, Any]:
        """The checkpoint of ``epoch``; a missing or unreadable file is a DataError naming it."""
        path = self.path(epoch)
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except FileNotFoundError:
            raise DataError(f"no checkpoint for epoch {epoch} at {path}") from None
        except Exception as exc:  # torch raises pickle/zip/runtime errors for a damaged file
            # not torch's text: it advises turning the safe loader off, which would run whatever the file holds
            raise DataError(f"checkpoint {path} cannot be read: it is damaged or holds more than tensors "
                            f"({type(exc).__name__}; only tensors are ever loaded)") from None
        if not isinstance(state, dict) or state.get("epoch") != epoch:
            raise DataError(f"checkpoint {path} does not hold epoch {epoch}")
        return state

    def survey(self, job: str, data: str) -> Survey:
        """The epochs on disk, the run they belong to, and whether they match this party's ``job`` and ``data``."""
        epochs = self.completed_epochs()
        runs: set[str] = set()
        problem = ""
        for epoch in epochs:
            try:
                found = self.load(epoch).get("identity")
            except DataError:
                found = None
            if not isinstance(found, dict) or not is_run_id(found.get("run")):
                problem = problem or "unreadable"
                continue
            runs.add(found["run"])
            if found.get("party") != self.party:
                problem = problem or "party"
            elif found.get("job") != job:
                problem = problem or "job"
            elif found.get("data") != data:
                problem = problem or "data"
        if len(runs) > 1:
            problem = "mixed"
        return Survey(epochs, min(runs) if len(runs) == 1 else "", problem)

    def move_aside(self) -> Path | None:
        """Move this party's checkpoint files into ``previous-<timestamp>/`` (None: there were none)."""
        epochs = self.completed_epochs()
        if not epochs:
            return None
        stamp = time.strftime("%Y%m%d-%H%M%S")
        target, n = self.directory / f"previous-{stamp}", 1
        while target.exists():
            n += 1
            target = self.directory / f"previous-{stamp}-{n}"
        target.mkdir(mode=atomic.PRIVATE_DIR)
        for epoch in epochs:
            os.replace(self.path(epoch), target / self.path(epoch).name)
        return target

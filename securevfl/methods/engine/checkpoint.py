"""Per-party checkpoints: each party writes only its own state, one file per completed epoch.

A checkpoint is a dictionary of tensors, numbers, strings and lists (model and optimiser state
dicts, generator states, the engine's history and early-stopping state), written with
``torch.save`` to ``DIR/<party>/epoch-NNNN.pt`` through a temporary file and an atomic rename, and
read back with ``torch.load(weights_only=True)``: no pickle of arbitrary objects is ever executed.
The store keeps the newest :data:`KEEP` epochs, enough for the parties to agree on the last epoch
that every one of them completed (they are at most one epoch apart: every batch is a round trip).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch

from securevfl.checks import validate_party_name
from securevfl.errors import ConfigError, DataError

#: Completed epochs each party keeps on disk.
KEEP = 2

_FILE = re.compile(r"^epoch-(\d{4,})\.pt$")


class CheckpointStore:
    """The checkpoints of one party under ``root/<party>/``."""

    def __init__(self, root: str | os.PathLike[str], party: str) -> None:
        validate_party_name(party)
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
        """Write ``state`` as the checkpoint of ``epoch`` (atomically) and prune older epochs."""
        self.directory.mkdir(parents=True, exist_ok=True)
        target = self.path(epoch)
        partial = target.with_suffix(".partial")
        torch.save({"epoch": epoch, **state}, partial)
        os.replace(partial, target)
        for old in self.completed_epochs()[:-KEEP]:
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
            # not torch's text: it advises weights_only=False, which would run whatever the file holds
            raise DataError(f"checkpoint {path} cannot be read: it is damaged or holds more than tensors "
                            f"({type(exc).__name__}; only tensors are ever loaded)") from None
        if not isinstance(state, dict) or state.get("epoch") != epoch:
            raise DataError(f"checkpoint {path} does not hold epoch {epoch}")
        return state

"""The training loop's vocabulary: evaluation phase names, a training :class:`Phase`, an :class:`EngineRecord`.

:mod:`.loop`, :mod:`.stopping` and :mod:`.resume` share them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from securevfl.errors import ConfigError

TRAIN, VALIDATE, TEST, EVALUATE = "train", "validate", "test", "evaluate"


@dataclass(frozen=True)
class Phase:
    """A stretch of epochs with one training protocol (TabVFL: ``pretrain`` then ``finetune``).

    Epochs are numbered across phases; the Meter attributes time and bytes to the phase; its
    history entries use ``loss_key``. ``stopping`` says how early stopping validates the phase:
    ``joint`` (the active party decides for everyone: the validation log loss of a ``supervised``
    phase, or :meth:`PartySide.validation_loss` of an unsupervised one), ``local`` (each party
    decides on its own :meth:`PartySide.validation_loss`; nothing is exchanged) or ``none``; by
    default ``joint`` for a supervised phase and ``none`` otherwise.
    """

    name: str
    epochs: int
    supervised: bool = True
    loss_key: str = "train_loss"
    stopping: str = ""

    def __post_init__(self) -> None:
        if self.stopping not in ("", "joint", "local", "none"):
            raise ConfigError(f"phase stopping must be 'joint', 'local' or 'none', got {self.stopping!r}")

    @property
    def early_stopping(self) -> str:
        """The effective :attr:`stopping` mode."""
        return self.stopping or ("joint" if self.supervised else "none")


@dataclass
class EngineRecord:
    """What the engine did, for the method's outcome: history, and resume / early stopping facts."""

    history: list[dict[str, float]]
    resumed_from_epoch: int = 0
    best_epoch: int | None = None
    stopped_after_epoch: int | None = None
    validation_rows: int = 0
    #: per validated phase (when a method has several): its best and stopping epochs
    phases: dict[str, dict[str, int | None]] = field(default_factory=dict)

    def extra(self) -> dict[str, Any]:
        """Report entries for what was used (nothing when neither resume nor early stopping ran)."""
        out: dict[str, Any] = {}
        if self.resumed_from_epoch:
            out["resumed_from_epoch"] = self.resumed_from_epoch
        if self.validation_rows:
            out["early_stopping"] = {"best_epoch": self.best_epoch, "stopped_after_epoch": self.stopped_after_epoch,
                                     "validation_rows": self.validation_rows}
            if len(self.phases) > 1:
                out["early_stopping"]["phases"] = self.phases
        return out

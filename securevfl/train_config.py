"""The settings every method understands (:class:`TrainConfig`), and their vocabulary; torch-free.

Kept apart from :mod:`securevfl.methods` (which imports torch) so that the run's settings
(:mod:`securevfl.run_config`), and with them the command line, load in a fraction of a second.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from securevfl.errors import ConfigError
from securevfl.settings import check_declared, integer, number, one_of, setting

#: The run-level defences (``TrainConfig.defenses``), applied by :mod:`securevfl.methods.engine.defenses`.
DEFENSES = ("grad-noise", "grad-sparsify", "label-dp")
#: The loss's class weightings (``TrainConfig.class_weight``), see :mod:`securevfl.methods.engine.objective`.
CLASS_WEIGHTS = ("none", "balanced")


def check_defenses(values: Mapping[str, float]) -> dict[str, float]:
    """Known names with valid strengths, as floats; anything else is a ConfigError listing the valid ones."""
    out = {}
    for name, value in values.items():
        if name not in DEFENSES:
            raise ConfigError(f"unknown defense {name!r}; choose from {', '.join(DEFENSES)}")
        try:
            strength = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"defense {name}={value!r} is not a number") from None
        if name == "grad-sparsify" and not 0 <= strength < 1:
            raise ConfigError(f"grad-sparsify must be in [0, 1), got {strength}")
        if name != "grad-sparsify" and not (math.isfinite(strength) and strength > 0):
            raise ConfigError(f"{name} must be a positive number, got {value!r}")
        out[name] = strength
    return out


@dataclass(frozen=True)
class TrainConfig:
    """Settings every method understands; method-specific ones go in ``options``.

    Each field declares one setting of a run (:mod:`securevfl.settings`): its name is the API keyword,
    the ``[job]`` key and the report's key, its help the CLI's. ``early_stopping`` (patience in epochs)
    > 0 turns on early stopping on a ``val_fraction`` validation split of the aligned training rows;
    ``checkpoint_dir`` makes every party save its own state at each epoch end, and ``resume``
    continues from the last epoch every party completed, of the same run, job and data (anything else
    is refused, naming the party; so is a resume with no checkpoint at any party: "nothing to
    resume"). A fresh run refuses a directory that holds checkpoints; ``checkpoint_overwrite`` moves
    them aside instead (into ``DIR/<party>/previous-<time>/``; nothing is deleted).
    """

    epochs: int = setting(50, help="Training epochs.", job=True, rule=integer(1))
    batch_size: int = setting(32, help="Training batch size (rows per step).", job=True, rule=integer(1))
    lr: float = setting(1e-3, help="Learning rate (Adam).", job=True, rule=number(0, open_low=True))
    seed: int = setting(0, help="Seed for partition, initialisation and batch order (not for secrets).", job=True,
                        rule=integer(0))
    embedding_dim: int = setting(16, help="Embedding width of bottom models.", job=True, rule=integer(1))
    hidden: tuple[int, ...] = setting((64,), help="Hidden layer sizes, comma-separated.", job=True,
                                      rule=integer(1, many=True))
    options: Mapping[str, Any] = setting(
        default_factory=dict, flag="--option", repeat=True, job=True,
        help="Method option KEY=VALUE (repeatable; `securevfl methods [NAME]` lists them with their help).")
    early_stopping: int = setting(
        0, job=True, rule=integer(0),
        help="Patience in epochs: stop when the validation loss has not improved for this many (0: off).")
    val_fraction: float = setting(0.2, job=True, rule=number(0, 1, open_low=True, open_high=True),
                                  help="With --early-stopping: aligned training rows held out to validate.")
    min_improvement: float = setting(
        0.0, job=True, rule=number(0),
        help="With --early-stopping: how much the validation loss must fall to count as better.")
    checkpoint_dir: str | None = setting(
        None, help="Every party saves its own state here at each epoch end (DIR/<party>/).")
    resume: bool = setting(False, help="Continue from the last epoch every party checkpointed.")
    checkpoint_overwrite: bool = setting(
        False, flag="--overwrite-checkpoints",
        help="Start a new run in a used --checkpoint-dir: move the old files aside (DIR/<party>/previous-*/).")
    defenses: Mapping[str, float] = setting(
        default_factory=dict, flag="--defense", repeat=True,
        help="NAME=STRENGTH (repeatable): grad-noise=S, grad-sparsify=R, label-dp=EPS.")
    require_all_parties: bool = setting(
        False, job=True,
        help="Use only the rows every party holds (the intersection), as before issue 44. By default a method "
             "that can (securevfl methods) uses every row of the active party, each passive party's part where it "
             "holds the row, and its model scores rows some party does not hold; the others use the intersection.")
    party_dropout: float = setting(
        0.1, job=True, rule=number(0, 1, open_high=True),
        help="Split-learning methods trained on every row: the chance that a passive party's embedding of a training "
             "row is replaced by its learned 'absent' embedding, so that the model scores rows some party does "
             "not hold well.")
    subset_views: int = setting(
        1, job=True, rule=integer(0, 8),
        help="Split-learning methods trained on rows some passive party does not hold: extra passes of the top model "
             "per batch on the same embeddings, each leaving every held passive party out with probability 1/2, so "
             "that every subset of parties is learned (as LASER-VFL's task sampling); 0: none. No effect when "
             "every party holds every training row.")
    class_weight: str = setting(
        "none", job=True, rule=one_of(*CLASS_WEIGHTS),
        help="none | balanced: weight the loss by inverse class frequency (imbalanced labels).")

    def __post_init__(self) -> None:
        check_declared(self)
        if self.resume and not self.checkpoint_dir:
            raise ConfigError("resume needs a checkpoint directory (--checkpoint-dir)")
        if self.checkpoint_overwrite and not self.checkpoint_dir:
            raise ConfigError("--overwrite-checkpoints needs a checkpoint directory (--checkpoint-dir)")
        if self.checkpoint_overwrite and self.resume:
            raise ConfigError("--overwrite-checkpoints starts a new run; it cannot be combined with --resume")
        object.__setattr__(self, "defenses", check_defenses(self.defenses))


__all__ = ["CLASS_WEIGHTS", "DEFENSES", "TrainConfig", "check_defenses"]

"""An attack: a party's inference from what it sees, scored afterwards by a separate evaluator.

An :class:`Attack` gets an :class:`AttackerView` — the attacking party's own data, the run's agreed
configuration, the messages its channel received (:mod:`.tap`) and, where the threat model grants
it, an explicit auxiliary set — and returns an :class:`Inference`. Only the evaluator
(:func:`securevfl.attacks.evaluate`) holds the ground truth (labels the attacker does not have,
the target party's features) and turns the inference into an :class:`AttackResult` next to a
random-guess baseline. An attack never sees the ground truth or another party's data.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import numpy as np

from securevfl.attacks.tap import ChannelTap
from securevfl.data.scenario import PartyData, Scenario
from securevfl.errors import ConfigError
from securevfl.methods.base import TrainConfig


@dataclass(frozen=True)
class AttackerView:
    """Everything the attacking party has: its own data, the agreed run settings, what it received."""

    party: str
    method: str
    data: PartyData
    config: TrainConfig
    tap: ChannelTap
    target: str
    auxiliary: dict[str, np.ndarray] = field(default_factory=dict)  # granted by the threat model only


@dataclass(frozen=True)
class Inference:
    """What the attack inferred: per-row scores or predictions, for the evaluator to score."""

    rows: np.ndarray  # which rows (of the aligned training rows, or of the test rows: ``split``)
    values: np.ndarray  # label scores (binary), predicted labels, or reconstructed features
    note: str = ""
    split: str = "test"  # "train" or "test": which aligned rows ``rows`` index (feature reconstruction)


@dataclass(frozen=True)
class AttackResult:
    """One line of the report's ``privacy`` section."""

    attack: str
    attacker: str
    target: str
    metric: str
    value: float | None
    baseline: float
    observed: str
    note: str = ""
    own_data: float | None = None  # the same inference from the attacker's own data alone (no federation)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Attack(ABC):
    """A named attack by one party on another (or on the labels)."""

    name: ClassVar[str]
    summary: ClassVar[str]
    paper: ClassVar[str]
    metric: ClassVar[str]

    @abstractmethod
    def parties(self, scenario: Scenario) -> tuple[str, str]:
        """(attacker, target) in ``scenario``; the target is a party or ``"labels"``."""

    def auxiliary(self, scenario: Scenario, attacker: str, target: str) -> dict[str, np.ndarray]:
        """What the threat model grants the attacker besides its own data (default: nothing)."""
        return {}

    @abstractmethod
    def infer(self, view: AttackerView) -> Inference | str | None:
        """The attack itself, from ``view`` only; ``None`` (or the reason) when it does not apply."""

    @abstractmethod
    def score(self, inference: Inference, scenario: Scenario, view: AttackerView) -> tuple[float, float]:
        """(metric value, random-guess baseline) against the ground truth (the evaluator's side)."""

    def metric_for(self, view: AttackerView) -> str:
        """The metric this attack reports for ``view``'s task (default: :attr:`metric`)."""
        return self.metric

    def own_data(self, inference: Inference, scenario: Scenario, view: AttackerView) -> float | None:
        """The metric of the same inference made from the attacker's own data only (None: not defined)."""
        return None


def as_array(value: Any) -> np.ndarray:
    """A received tensor or array as float64 numpy (a party may have marked its tensor for autograd)."""
    detach = getattr(value, "detach", None)
    if detach is not None:
        value = detach().cpu().numpy()
    return np.asarray(value, dtype=np.float64)


_ATTACKS: dict[str, type[Attack]] = {}


def register_attack(cls: type[Attack]) -> type[Attack]:
    """Class decorator: register an attack under ``cls.name``."""
    if cls.name in _ATTACKS:
        raise ConfigError(f"attack {cls.name!r} is registered twice")
    _ATTACKS[cls.name] = cls
    return cls


def attack_names() -> list[str]:
    """Names of the registered attacks, sorted."""
    return sorted(_ATTACKS)


def create_attack(name: str) -> Attack:
    """The attack registered as ``name``; unknown names raise ConfigError listing the valid ones."""
    try:
        return _ATTACKS[name]()
    except KeyError:
        raise ConfigError(f"unknown attack {name!r}; choose one of {', '.join(attack_names())}") from None

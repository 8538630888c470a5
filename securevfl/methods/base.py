"""What a method is: a strategy object that hands the runtime one role per party.

A method subclasses :class:`Method`, declares its options as a frozen dataclass, and implements
:meth:`Method.roles`. Roles talk only through ``ctx.send`` / ``ctx.recv``; the active role returns
an :class:`ActiveOutcome` with test-set scores, from which the runtime computes metrics. Shared
per-batch machinery (agreed batch order, optimiser steps, embedding exchange helpers) lives here
so that methods stay small and an encrypted variant never copies a training loop.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, get_args, get_origin

import numpy as np
import torch

from securevfl.data.labels import REGRESSION
from securevfl.data.scenario import Scenario
from securevfl.errors import ConfigError
from securevfl.federation.runtime import PartyContext
from securevfl.seeding import simulation_rng
from securevfl.train_config import TrainConfig

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Role = Callable[[PartyContext], Any]

@dataclass(frozen=True)
class NoOptions:
    """A method without options of its own."""


@dataclass
class ActiveOutcome:
    """What the active role returns: test labels and scores, plus anything worth reporting."""

    y_true: np.ndarray
    scores: np.ndarray
    per_party: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def parse_options(options_type: type, values: Mapping[str, Any]) -> Any:
    """Build a method's options dataclass, rejecting unknown keys with the list of valid ones.

    A dotted key ``group.name`` goes into the mapping field ``group_options`` (``secagg.key_bits=3072``
    sets ``secagg_options["key_bits"]``); the method validates such a group itself.
    """
    valid = {f.name: f for f in dataclasses.fields(options_type)}
    values = dict(values)
    for key in [k for k in values if "." in k]:
        group, _, name = key.partition(".")
        if f"{group}_options" not in valid:
            raise ConfigError(f"unknown option group {group!r} in {key!r} for this method")
        grouped = dict(values.get(f"{group}_options") or {})
        grouped[name] = values.pop(key)
        values[f"{group}_options"] = grouped
    unknown = sorted(set(values) - set(valid))
    if unknown:
        listed = ", ".join(valid) or "none"
        raise ConfigError(f"unknown option(s) {', '.join(unknown)} for this method; valid options: {listed}")
    converted = {}
    for key, value in values.items():
        default = valid[key].default
        if isinstance(value, str) and default is not dataclasses.MISSING and not isinstance(default, str):
            try:
                value = type(default)(value) if not isinstance(default, bool) else value.lower() in ("1", "true", "yes")
            except (TypeError, ValueError):
                raise ConfigError(f"option {key}={value!r} is not a valid {type(default).__name__}") from None
        converted[key] = value
    return options_type(**converted)


#: A method's options dataclass: ``class SplitNN(SplitMethod[SplitNNOptions])`` types ``self.options``.
OptionsT = TypeVar("OptionsT", bound="DataclassInstance")


def _declared_options(cls: type) -> type | None:
    """The options class ``cls`` names as its base's type argument (``Method[X]`` -> X), if any."""
    for base in cls.__dict__.get("__orig_bases__", ()):
        origin, args = get_origin(base), get_args(base)
        if isinstance(origin, type) and issubclass(origin, Method) and len(args) == 1 and isinstance(args[0], type):
            return args[0]
    return None


class Method(ABC, Generic[OptionsT]):
    """A VFL method: roles for the active and passive parties, built from one scenario.

    A method names its options dataclass as its type argument, ``class M(Method[MOptions])``: this
    types ``self.options`` and sets :attr:`Options`, the class :func:`parse_options` builds (a
    subclass may set ``Options`` to a subclass of it, adding options).
    """

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    Options: ClassVar[type] = NoOptions
    #: Whether the method runs on the split-learning engine (early stopping, checkpoints, resume).
    uses_engine: ClassVar[bool] = False
    #: Whether the run-level defences (``--defense``: gradient noise / sparsification, label DP) apply.
    supports_defenses: ClassVar[bool] = False
    #: Whether the method trains through :mod:`securevfl.methods.engine.objective`: regression tasks and
    #: ``class_weight``; the others refuse both.
    supports_objectives: ClassVar[bool] = False
    #: Whether it stops early (``--early-stopping``) although it trains outside the engine (secureboost).
    supports_early_stopping: ClassVar[bool] = False
    #: Whether its bottom models learn embeddings of category codes (``ColumnSpec(embed=True)``).
    supports_category_embeddings: ClassVar[bool] = False
    #: Why its parties cannot save a model (``--model-dir``) yet; "" where they can (the engine's
    #: methods save and score through :mod:`securevfl.model`).
    cannot_save: ClassVar[str] = ""
    #: Whether it saves and scores although it trains outside the engine: its training roles are
    #: :class:`~securevfl.methods.engine.kept.KeptRole` and :meth:`scoring_roles` returns scoring sides.
    saves_outside_engine: ClassVar[bool] = False
    #: Whether its final model is the active party's alone (``local``): only the active party saves a
    #: part, marked standalone, and scoring needs no passive party (no PSI, no network).
    standalone: ClassVar[bool] = False
    #: Whether it trains on and scores rows some passive party does not hold (partial coverage: the
    #: absent party's part left out, the model trained for it); the others use the rows every party holds.
    partial_rows: ClassVar[bool] = False
    #: Whether a model trained on every row scores without a passive party that is down (its active side
    #: can :attr:`~securevfl.methods.engine.loop.PartySide.leave_out` one): batch scoring's ``--party-timeout``.
    leaves_out_parties: ClassVar[bool] = False
    #: Settings of the run (:class:`TrainConfig` field names) this method defaults differently where the
    #: user gives none: a method whose baseline needs another learning rate or early stopping to be fair.
    #: Applied by :func:`with_method_defaults` (the API, the CLI and ``[job]``); a given value always wins.
    run_defaults: ClassVar[Mapping[str, Any]] = {}
    options: OptionsT

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        unknown = set(cls.run_defaults) - {f.name for f in dataclasses.fields(TrainConfig)}
        if unknown:
            raise TypeError(f"{cls.__name__}.run_defaults names no setting of TrainConfig: {sorted(unknown)}")
        declared = _declared_options(cls)
        if declared is None:
            return
        if "Options" not in cls.__dict__:
            cls.Options = declared
        elif not issubclass(cls.Options, declared):
            raise TypeError(f"{cls.__name__}.Options ({cls.Options.__name__}) is not a subclass of its declared "
                            f"options type {declared.__name__}")

    def __init__(self, config: TrainConfig) -> None:
        self.config = config
        self.options = parse_options(self.Options, config.options)
        stops_early = config.early_stopping and not self.supports_early_stopping
        if not self.uses_engine and (config.checkpoint_dir or stops_early):
            engine = ", ".join(n for n in method_names() if method_class(n).uses_engine)
            raise ConfigError(f"{self.name} does not support early stopping or checkpoints; the methods on the "
                              f"split-learning engine do: {engine}")
        if config.defenses and not self.supports_defenses:
            able = ", ".join(n for n in method_names() if method_class(n).supports_defenses)
            raise ConfigError(f"{self.name} does not support --defense; these methods do: {able}")
        if config.class_weight != "none" and not self.supports_objectives:
            raise ConfigError(f"{self.name} does not support class weighting; these methods do: {_objective_methods()}")

    def party_roles(self, scenario: Scenario) -> dict[str, Role]:
        """:meth:`roles`, after checking that the method trains the scenario's task."""
        if not self.supports_category_embeddings:
            embedded = [p for p in scenario.tables if scenario.encoded(p).summary.get("embedded")]
            if embedded:
                able = ", ".join(n for n in method_names() if method_class(n).supports_category_embeddings)
                raise ConfigError(f"{self.name} cannot learn category embeddings (party {embedded[0]!r} asked for "
                                  f"them with embed / --embed-categories); these methods can: {able}")
        if scenario.alignment.partial:
            self.check_partial_rows()
        if scenario.task == REGRESSION:
            if not self.supports_objectives:
                raise ConfigError(f"{self.name} does not support regression; these methods do: {_objective_methods()}")
            if self.config.class_weight != "none":
                raise ConfigError("class weighting applies to classification; this is a regression task")
            if "label-dp" in self.config.defenses:
                raise ConfigError("label-dp (randomised response) applies to class labels, not to a regression target")
        return self.roles(scenario)

    def check_partial_rows(self) -> None:
        """Refuse, in one line, rows some party does not hold where this method cannot use them."""
        if not (self.partial_rows or self.standalone):
            able = ", ".join(n for n in method_names() if method_class(n).partial_rows)
            raise ConfigError(f"{self.name} cannot use rows some party does not hold: keep to the rows every party "
                              f"holds (--require-all-parties), or use a method that can: {able}")

    def plan(self, scenario: Scenario) -> Any:
        """What the method derives from ``scenario`` before it builds roles (None by default: nothing).

        A frozen value (architectures, step counts, limits), checked against the scenario; :meth:`roles`
        calls it once and hands it to the roles it builds (an engine side holds it as ``side.plan``), so
        a method keeps nothing of a scenario on itself.
        """
        return None

    @abstractmethod
    def roles(self, scenario: Scenario) -> dict[str, Role]:
        """One role per party of ``scenario``; each role sees only its own PartyData."""

    def scoring_roles(self, scenario: Scenario) -> dict[str, Role]:
        """One role per party that scores ``scenario``'s test rows with a saved model.

        Each is a :func:`~securevfl.methods.engine.split.side_role` whose side
        :func:`~securevfl.methods.engine.loop.score_side` runs (helpers such as an arbiter included).
        By default the training roles (the engine's methods score with their training sides).
        """
        return self.party_roles(scenario)

    def standalone_learns(self, active: str) -> str:
        """A standalone model's note on who took part in what (its manifest's ``learns``, its card)."""
        return (f"{active} trained this model alone on its own columns; the passive parties took no part in "
                "training, saved nothing and take no part in scoring.")

    def require_passives(self, scenario: Scenario) -> tuple[str, ...]:
        """The scenario's passive parties; raises ConfigError if there are none (for methods that need them)."""
        if not scenario.passives:
            raise ConfigError(f"{self.name} needs at least one passive party")
        return tuple(scenario.passives)

    def describe(self) -> dict[str, Any]:
        """Options as plain values, for the report."""
        return dataclasses.asdict(self.options)


_METHODS: dict[str, type[Method[Any]]] = {}


def _objective_methods() -> str:
    return ", ".join(n for n in method_names() if method_class(n).supports_objectives)

MethodT = TypeVar("MethodT", bound="type[Method[Any]]")


def register_method(cls: MethodT) -> MethodT:
    """Class decorator: register a method under ``cls.name``."""
    if cls.name in _METHODS:
        raise ConfigError(f"method {cls.name!r} is registered twice")
    _METHODS[cls.name] = cls
    return cls


def method_names() -> list[str]:
    """Names of the registered methods, sorted."""
    return sorted(_METHODS)


def method_class(name: str) -> type[Method[Any]]:
    """The registered class for ``name``; unknown names raise ConfigError listing the valid ones."""
    try:
        return _METHODS[name]
    except KeyError:
        raise ConfigError(f"unknown method {name!r}; choose one of {', '.join(method_names())}") from None


def with_method_defaults(method: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` settings with the method's :attr:`Method.run_defaults` for those it leaves out."""
    return {**method_class(method).run_defaults, **given}


def create_method(name: str, config: TrainConfig) -> Method[Any]:
    """Instantiate the method registered as ``name`` with ``config`` (options validated)."""
    return method_class(name)(config)


# -- shared per-batch machinery ---------------------------------------------------------------

def batch_plan(n_rows: int, batch_size: int, seed: int, epoch: int, *, min_rows: int = 1,
               short: str = "drop") -> Iterator[np.ndarray]:
    """Agreed batch order for one epoch: every party derives the same permutation from the run seed.

    The seed is part of the run configuration all parties agree on; batch order is not secret. A
    trailing batch of fewer than ``min_rows`` rows is dropped (``short="drop"``: TabNet's batch norm
    needs two rows) or merged into the batch before it (``short="merge"``: hetero-lr, where a batch
    smaller than a party's weight count could be solved for). The one batch order of the project.
    """
    if short not in ("drop", "merge"):
        raise ConfigError(f"short must be 'drop' or 'merge', got {short!r}")
    order = simulation_rng(seed, epoch).permutation(n_rows)
    batches = [order[start : start + batch_size] for start in range(0, n_rows, batch_size)]
    if batches and len(batches[-1]) < min_rows:
        if short == "drop":
            batches.pop()
        elif len(batches) > 1:
            batches[-2:] = [np.concatenate(batches[-2:])]
    yield from batches


def n_batches(n_rows: int, batch_size: int, *, min_rows: int = 1, short: str = "drop") -> int:
    """Number of batches :func:`batch_plan` yields per epoch (the same every epoch)."""
    full, rest = divmod(n_rows, batch_size)
    if rest == 0 or rest >= min_rows:
        return full + (rest > 0)
    return full if short == "drop" or full >= 1 else 1


def as_tensor(array: np.ndarray, device: Any) -> torch.Tensor:
    """A float32 tensor on ``device`` (no copy when already there, one of a read-only array)."""
    if isinstance(array, np.ndarray) and not array.flags.writeable and array.dtype == np.float32:
        array = array.copy()  # torch would share the read-only memory (undefined if written; it warns)
    return torch.as_tensor(array, dtype=torch.float32, device=device)


def predict_scores(logits: torch.Tensor) -> np.ndarray:
    """Class probabilities as a numpy array."""
    return torch.softmax(logits.detach(), dim=1).cpu().numpy()

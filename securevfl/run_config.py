"""The one declaration of a training run: :class:`RunConfig` and its parts, and building it from flat settings.

Every setting is a field of :class:`RunConfig` or of one of its parts (:class:`~securevfl.data.DatasetOptions`,
:class:`~securevfl.data.ColumnSpec`, :class:`~securevfl.data.PartitionSpec`,
:class:`~securevfl.methods.TrainConfig`, :class:`~securevfl.federation.meter.NetworkModel`), declared with
its help by :func:`securevfl.settings.setting`. :data:`RUN_SETTINGS` lists them; :func:`run_config`
builds a RunConfig from flat ``name=value`` settings (the API's keywords, the CLI's options), refusing
an unknown name with the closest valid one. The report's ``config`` section is the dataclass itself.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from securevfl.data import ColumnSpec, DatasetOptions, PartitionSpec
from securevfl.errors import ConfigError
from securevfl.federation.meter import NetworkModel
from securevfl.federation.runtime import DEFAULT_RECV_TIMEOUT_S
from securevfl.settings import (
    Setting,
    check_declared,
    group,
    group_type,
    holds_tuple,
    info_of,
    integer,
    number,
    setting,
    settings_of,
    text,
)
from securevfl.train_config import TrainConfig


@dataclass(frozen=True)
class RunConfig:
    """One training run: the method, where the data comes from, how it is cut, how it trains."""

    method: str = setting("splitnn", job=True, rule=text(), help="Training method (see `securevfl methods`).")
    dataset: str = setting("breast-cancer", help="Dataset name, or csv:PATH / parquet:PATH.")
    dataset_options: DatasetOptions = group(DatasetOptions)
    partition: PartitionSpec = group(PartitionSpec)
    train: TrainConfig = group(TrainConfig)
    device: str = setting("auto", help="auto (CUDA when present), cpu, cuda[:N].")
    network: NetworkModel = group(NetworkModel)
    alignment: str = setting("psi", help="How parties find shared rows: psi (ECDH PSI) | plaintext (simulation only).")
    data_files: Mapping[str, str] | None = setting(
        None, flag="--data", repeat=True,
        help="PARTY=FILE per party (CSV/Parquet); the first holds the labels. Runs PSI, then trains.")
    recv_timeout_s: float | None = setting(DEFAULT_RECV_TIMEOUT_S, flag="--recv-timeout",
                                           help="Seconds a party waits for one message before the run fails.")
    attacks: tuple[str, ...] = setting(
        (), flag="--attack", repeat=True,
        help="Measure leakage with an attack on what one party receives (repeatable): label-norm, label-cosine, "
             "model-completion, feature-inversion, peer-inversion.")
    #: How the parties of this process run (securevfl.federation.runtime.SCHEDULERS).
    scheduler: str = setting("cooperative", help="How the parties of one process run: cooperative (greenlets of "
                                                 "one thread) | threads.")
    #: Where every party saves its own part of the trained model (``DIR/<party>/``; issue 27).
    model_dir: str | None = setting(
        None, help="Every party saves its own part of the trained model here (DIR/<party>/), for predict.")
    overwrite_model: bool = setting(False, help="Replace a model already saved in --model-dir.")
    positive_class: str | None = setting(
        None, help="The class binary F1 and AUC score as positive (default: the second of the label's classes).")
    #: Columns kept for training by what exploring finds (issue 45; securevfl.exploration.selection).
    select: str | None = setting(
        None, job=True, help="Keep only the columns that pass, e.g. 'iv>=0.02': their IV against the label, computed "
                             "securely first (securevfl explore); each party drops its own.")

    def __post_init__(self) -> None:
        check_declared(self)
        if self.select is not None:
            from securevfl.exploration.select import parse_select

            parse_select(self.select)


@dataclass(frozen=True)
class ScoringSettings:
    """How a saved model scores new rows, at every party alike (``securevfl predict``, ``party --predict``)."""

    exchange_rows: int = setting(4096, rule=integer(1, 10_000_000),
                                 help="Rows scored per exchange between the parties (every party cuts the same "
                                      "batches; training's batch is --batch-size).")
    #: ``None``: :data:`BATCH_PARTY_TIMEOUT_S` for ``party --predict``, serving's own 0.5 s for ``party --serve``
    #: (one flag for both: :class:`~securevfl.deploy.serving_limits.ServeSettings` declares serving's).
    party_timeout_s: float | None = setting(
        None, flag="--party-timeout", rule=number(0.01, 86400, optional=True),
        help="Seconds a passive party has to be reachable (--predict, default 30: a model trained on every row "
             "scores without a party later than that; another model fails naming it) or to answer its part of a "
             "batch (--serve, default 0.5).")

    def __post_init__(self) -> None:
        check_declared(self)


#: How long the active party of a deployed batch scoring waits for a passive party's link (``--party-timeout``):
#: the parties of one job are started together, by hand or by a scheduler, within seconds; 30 s is the links'
#: own peer timeout, and half their 60 s connect timeout, past which the scoring would fail anyway.
BATCH_PARTY_TIMEOUT_S = 30.0


#: Every setting of a run, in declaration order.
RUN_SETTINGS: tuple[Setting, ...] = tuple(settings_of(RunConfig))
_BY_NAME = {s.name: s for s in RUN_SETTINGS if s.info.api}


def run_config(*, method_defaults: bool = True, **values: Any) -> RunConfig:
    """A :class:`RunConfig` from flat settings (``epochs=30, aligned_ratio=0.5, ...``); unset ones keep defaults.

    Settings not given take the method's own defaults where it has some (:attr:`Method.run_defaults`, e.g.
    the TabNet designs' learning rate and early stopping), else the field's default. An unknown name is a
    :class:`ConfigError` naming the closest valid one. Sequences become tuples
    where the field holds a tuple; ``seed`` seeds the partition and generated data too (their
    ``same_as("seed")`` fields). ``method_defaults=False``: the fields' defaults only (no torch import:
    a federation file's ``[job]``, whose method defaults apply when a party runs it).
    """
    unknown = [k for k in values if k not in _BY_NAME]
    if unknown:
        close = difflib.get_close_matches(unknown[0], list(_BY_NAME), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; settings: {', '.join(_BY_NAME)}"
        raise ConfigError(f"unknown setting {unknown[0]!r}{hint}")
    if method_defaults:
        from securevfl.methods import with_method_defaults  # imports torch: only once a run is being built

        values = with_method_defaults(values.get("method", _BY_NAME["method"].default), values)
    parts: dict[tuple[str, ...], dict[str, Any]] = {}
    for name, value in values.items():
        s = _BY_NAME[name]
        parts.setdefault(s.path[:-1], {})[s.path[-1]] = _plain(s, value)
    config: RunConfig = _build(RunConfig, (), parts, values)
    return config


def _build(config_type: type, prefix: tuple[str, ...], parts: Mapping[tuple[str, ...], dict[str, Any]],
           values: Mapping[str, Any]) -> Any:
    """``config_type`` with the given settings at ``prefix``, its groups built the same way.

    A field declared ``same_as(name)`` takes the value given for setting ``name``, else that setting's default.
    """
    kwargs = dict(parts.get(prefix, {}))
    for f in dataclasses.fields(config_type):
        info = info_of(f)
        if info is None:
            continue
        if info.same_as is not None:
            kwargs[f.name] = values.get(info.same_as, _BY_NAME[info.same_as].default)
        elif info.group and info.api and f.name not in kwargs:
            kwargs[f.name] = _build(group_type(config_type, f.name), (*prefix, f.name), parts, values)
    return config_type(**kwargs)


def _plain(s: Setting, value: Any) -> Any:
    """An API value as the field holds it: tuples for tuple fields, dicts for mappings, str for paths."""
    if value is None:
        return None
    if holds_tuple(s.type) and isinstance(value, Sequence) and not isinstance(value, str):
        return tuple(value)
    if isinstance(value, Mapping) and not isinstance(s.default, ColumnSpec):
        return dict(value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


__all__ = ["BATCH_PARTY_TIMEOUT_S", "RUN_SETTINGS", "RunConfig", "ScoringSettings", "run_config"]

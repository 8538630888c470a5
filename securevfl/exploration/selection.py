"""Selection feeds training: ``securevfl train --select "iv>=0.02"`` keeps only the columns that pass.

Before the method's roles run, the parties explore their training rows (the WOE / IV protocol of
:mod:`securevfl.exploration.protocol`, no Pearson, ``share_stats = none``: the active party never sees a
passive party's column names), the active party judges every column by its IV and tells each passive
party, by position, which of its own columns pass. Each party then drops the others from its own
table (its column spec's ``drop``), so its preprocessing, its model part and its saved schema hold
the kept columns only. The report's ``extra.selection`` says, per party, how many columns were kept
and dropped, with the names of the active party's own.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from securevfl.data import Scenario
from securevfl.data.columns import ColumnSpec
from securevfl.errors import ConfigError
from securevfl.exploration.options import ExploreOptions
from securevfl.exploration.run import explore_roles


def shared_training(scenario: Scenario) -> Scenario:
    """``scenario`` with its training rows limited to those every party holds (a covering alignment's)."""
    if not scenario.alignment.partial:
        return scenario
    every = np.logical_and.reduce([scenario.alignment.held(p, scenario.train) for p in scenario.passives])
    return dataclasses.replace(scenario, train=scenario.train[every])


def _dropping(table: Any, dropped: list[str]) -> Any:
    """``table`` whose column spec also drops ``dropped`` (a plain matrix: those columns cut out)."""
    if not dropped:
        return table
    spec = table.columns if table.columns is not None else ColumnSpec()
    if not hasattr(table.features, "columns"):  # a float matrix: cut the columns out
        keep = [j for j, name in enumerate(table.feature_names) if name not in dropped]
        return dataclasses.replace(table, features=np.asarray(table.features)[:, keep],
                                   feature_names=tuple(table.feature_names[j] for j in keep), strip_shape=None)
    return dataclasses.replace(table, columns=dataclasses.replace(spec, drop=(*spec.drop, *dropped)))


def select_columns(scenario: Scenario, rule: str, *, positive: int = 1, seed: int = 0,
                   recv_timeout: float | None = None) -> tuple[Scenario, dict[str, Any], dict[str, Any]]:
    """Explore the training rows, judge every column by ``rule``, and drop the columns that fail.

    Returns the scenario with the kept columns, the report's ``selection`` entry, and the meters'
    snapshots of the selection's exchange (its costs).
    """
    from securevfl.federation import runtime

    if scenario.task != "classification":
        raise ConfigError("--select by iv needs a label of two classes (there is no IV for a regression target)")
    options = ExploreOptions(correlation=False, share_stats="none", select=rule)
    explored = shared_training(scenario)
    roles = explore_roles(explored, options, positive)
    result = runtime.run_parties(roles, active=scenario.active, passives=scenario.passives, seed=seed,
                                 recv_timeout=recv_timeout)
    findings = result.results[scenario.active]
    tables = dict(scenario.tables)
    selection: dict[str, Any] = {"rule": rule, "parties": {}}
    for party in scenario.parties:
        if party == scenario.active:
            names = findings.parties[party].columns
            kept = [c for c, keep in zip(names, findings.kept[party], strict=True) if keep]
        else:
            kept = list(result.results[party].kept or ())
            names = tuple(result.results[party].stats)
        dropped = [c for c in names if c not in kept]
        if not kept:
            raise ConfigError(f"--select {rule!r} keeps none of {party}'s {len(names)} columns: loosen the rule "
                              "(securevfl explore shows every column's IV)")
        tables[party] = _dropping(tables[party], dropped)
        entry: dict[str, Any] = {"kept": len(kept), "dropped": len(dropped)}
        if party == scenario.active:
            entry["dropped_columns"] = dropped
        selection["parties"][party] = entry
    out = dataclasses.replace(scenario, tables=tables,
                              notes=(*scenario.notes, f"--select {rule}: " + ", ".join(
                                  f"{p} kept {e['kept']} of {e['kept'] + e['dropped']} columns"
                                  for p, e in selection["parties"].items())))
    snapshots = {n: m.snapshot() for n, m in result.meters.items()}
    return out, selection, snapshots


__all__ = ["select_columns", "shared_training"]

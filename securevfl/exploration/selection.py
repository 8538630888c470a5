"""Selection feeds training: ``securevfl train --select "iv>=0.02"`` keeps only the columns that pass.

Before the method's roles run, the parties explore their training rows — the active party all of
them, a passive party those it holds (the WOE / IV protocol of :mod:`securevfl.exploration.protocol`,
no Pearson, ``share_stats = none``: the active party never sees a passive party's column names) —
the active party judges every column by its IV and tells each passive party, by position, which of
its own columns pass. Deployed (``[job] select``), the same exchange runs inside the set-up, once the
plan's split is known and before any party fits its preprocessing (:func:`selection_role`). Each
party then drops the others from its own table (its column spec's ``drop``), so its preprocessing,
its model part and its saved schema hold the kept columns only. The report's ``extra.selection``
says, per party, how many columns were kept and dropped, with the names of the active party's own.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from securevfl.data import Scenario
from securevfl.data.columns import ColumnSpec
from securevfl.errors import ConfigError
from securevfl.exploration.options import ExploreOptions


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
    choose = selection_role(rule, positive)  # the same choice as a deployed party's, each party in a greenlet
    alignment = scenario.alignment
    roles = {p: functools.partial(_choose_in_process, choose, scenario.tables[p], alignment.aligned[p],
                                  scenario.train, alignment.present) for p in scenario.parties}
    result = runtime.run_parties(roles, active=scenario.active, passives=scenario.passives, seed=seed,
                                 recv_timeout=recv_timeout)
    tables = {p: result.results[p][0] for p in scenario.parties}
    selection: dict[str, Any] = result.results[scenario.active][1]
    out = dataclasses.replace(scenario, tables=tables,
                              notes=(*scenario.notes, f"--select {rule}: " + ", ".join(
                                  f"{p} kept {e['kept']} of {e['kept'] + e['dropped']} columns"
                                  for p, e in selection["parties"].items())))
    snapshots = {n: m.snapshot() for n, m in result.meters.items()}
    return out, selection, snapshots


def _choose_in_process(choose: Any, table: Any, rows: np.ndarray, train: np.ndarray, present: Any,
                       ctx: Any) -> tuple[Any, Any]:
    return choose(ctx, table, rows, train, present)  # type: ignore[no-any-return]


def selection_role(rule: str, positive: int = 1) -> Any:
    """``train --select`` of a deployed party: the columns chosen between the plan's split and its shape.

    Called inside the set-up role (:func:`securevfl.deploy.plan.plan_role`) once the training positions
    are known: every data party runs its side of the WOE / IV protocol on its own training rows (a
    passive party on those it holds), the active party judges, each party drops what failed. Returns
    ``(table, summary)``: the table with the kept columns, and at the active party the summary.
    """
    from securevfl.exploration.bins import raw_frame
    from securevfl.exploration.protocol import ExploreInput, active_role, passive_role

    options = ExploreOptions(correlation=False, share_stats="none", select=rule)

    def choose(ctx: Any, table: Any, rows: np.ndarray, train: np.ndarray, present: Any) -> tuple[Any, Any]:
        ctx.stage = "select"
        frame, kinds = raw_frame(table.features, table.feature_names, table.columns,
                                 table.source or f"party {ctx.name!r}")
        if ctx.is_active:
            if table.task != "classification":
                raise ConfigError("--select by iv needs a label of two classes (there is no IV for a regression "
                                  "target)")
            own = rows[train]
            events = (np.asarray(table.labels)[own] == positive).astype(np.int64)
            held = {p: np.asarray(mask)[train] for p, mask in present.items()}
            inp = ExploreInput(ctx.name, frame.iloc[own].reset_index(drop=True), kinds, events)
            findings = active_role(inp, options, held or None)(ctx)
            kept = [c for c, keep in zip(findings.parties[ctx.name].columns, findings.kept[ctx.name], strict=True)
                    if keep]
            summary: dict[str, Any] | None = {"rule": rule, "parties": {}}
            for party, mask in findings.kept.items():
                entry: dict[str, Any] = {"kept": int(sum(mask)), "dropped": int(len(mask) - sum(mask))}
                if party == ctx.name:
                    entry["dropped_columns"] = [c for c in frame.columns if c not in kept]
                summary["parties"][party] = entry  # type: ignore[index]
        else:
            mask = present.get(ctx.name)
            own = rows[train] if mask is None else rows[(np.cumsum(mask) - 1)[train[np.asarray(mask)[train]]]]
            inp = ExploreInput(ctx.name, frame.iloc[own].reset_index(drop=True), kinds)
            kept = list(passive_role(inp, options)(ctx).kept or ())
            summary = None
        dropped = [str(c) for c in frame.columns if c not in kept]
        if not kept:
            raise ConfigError(f"--select {rule!r} keeps none of {ctx.name}'s {len(frame.columns)} columns: loosen "
                              "the rule (securevfl explore shows every column's IV)")
        return _dropping(table, dropped), summary

    return choose


__all__ = ["select_columns", "selection_role"]

"""Each party's explored rows as the roles take them, and every party's role of exploring, from a scenario.

The explored rows are the aligned training rows a party holds, in the agreed order (the rows every
party holds where the alignment covers no other). Used by the pipeline's mode
(:mod:`securevfl.pipeline.explore`) and by ``train --select`` (:mod:`securevfl.exploration.selection`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from securevfl.data import Scenario
from securevfl.exploration.bins import raw_frame
from securevfl.exploration.options import ExploreOptions
from securevfl.exploration.protocol import ExploreInput, active_role, passive_role


def explore_input(scenario: Scenario, party: str, positive: int = 1) -> ExploreInput:
    """``party``'s explored rows (the aligned training rows, in the agreed order) as raw columns."""
    table = scenario.tables[party]
    rows = scenario.alignment.rows(party, scenario.train)  # those it holds (all of them with cover=False)
    frame, kinds = raw_frame(table.features, table.feature_names, table.columns,
                             table.source or f"party {party!r}")
    frame = frame.iloc[np.asarray(rows, dtype=np.int64)].reset_index(drop=True)
    events = None
    if party == scenario.active and scenario.task == "classification" and table.labels is not None:
        events = (np.asarray(table.labels)[rows] == positive).astype(np.int64)
    return ExploreInput(party, frame, kinds, events, rows_total=table.n_rows)


def idle(ctx: Any) -> None:
    """A helper (an arbiter of the job's method) has no part in exploring."""
    return None


def explore_roles(scenario: Scenario, options: ExploreOptions, positive: int = 1,
                  only: str | None = None) -> dict[str, Any]:
    """Every data party's role (``only``: just that party's, its peers' left to their own processes)."""
    roles: dict[str, Any] = {}
    for party in scenario.parties:
        if only is not None and party != only:
            roles[party] = idle
            continue
        inp = explore_input(scenario, party, positive)
        roles[party] = active_role(inp, options) if party == scenario.active else passive_role(inp, options)
    return roles


__all__ = ["explore_input", "explore_roles", "idle"]

"""One pipeline for a run: ``run(mode, placement)``.

A run is a *mode* — train (:class:`TrainRun`), score (:class:`ScoreRun`), serve
(:class:`ServeRun`) or explore (:class:`~securevfl.pipeline.explore.ExploreRun`) — at a
*placement*: every party in this process (:class:`EveryParty`) or this one party in this process,
its peers elsewhere (:class:`OneParty`). :func:`run` assembles every
one of them the same way:

1. **prepare** (the mode): everything local, checked before any connection — the method and its
   options, the party's table (or every party's), a saved part's digests and schema;
2. **connect** (the placement): nothing in one process; for one party, its torch threads, its
   start event and its authenticated links;
3. **set up** (the mode, on the placement): who shares which rows and the plan — the aligner over
   every table in one process, PSI and the plan over the links for one party; a serving party
   exchanges its index per request instead;
4. **roles** (the mode): the method's roles for the scenario (training's, or its scoring sides
   loaded with the saved parts, or the serving roles), run by the placement
   (:func:`~securevfl.federation.runtime.run_parties` / :func:`~securevfl.federation.runtime.run_party`;
   a deployed party's costs gathered at the active party);
5. **finish** (the mode): the report, the saved parts, the predictions — and the party's last event.

``securevfl train`` / ``predict`` / ``party`` (``--predict``, ``--serve``) / ``launch`` and
:func:`securevfl.train` / :func:`securevfl.predict` are thin pairs of a mode and a placement.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from securevfl.pipeline.placement import Deployed, EveryParty, InProcess, OneParty, Outcome, Placement

L = TypeVar("L")
R = TypeVar("R")


class Mode(Protocol[L, R]):
    """What a mode supplies to :func:`run`: its steps, the placement doing the rest."""

    phase: str  # train | predict | serve: the links' phase (a scoring party never talks to a training one)

    def prepare(self, session: InProcess | Deployed) -> L: ...

    def connect(self, session: InProcess | Deployed, local: L) -> Any: ...

    def setup(self, session: InProcess | Deployed, local: L) -> Any: ...

    def execute(self, session: InProcess | Deployed, local: L, scenario: Any) -> Outcome: ...

    def finish(self, session: InProcess | Deployed, local: L, scenario: Any, outcome: Outcome) -> R: ...

    def done(self, session: InProcess | Deployed, result: R) -> R: ...


def run(mode: Mode[L, R], placement: Placement) -> R:
    """Assemble and run ``mode`` at ``placement``: prepare, connect, set up, the roles, finish."""
    session = placement.open(mode.phase)
    local = mode.prepare(session)  # every local check before any connection
    with mode.connect(session, local):
        scenario = mode.setup(session, local)
        outcome = mode.execute(session, local, scenario)
        result = mode.finish(session, local, scenario, outcome)
    return mode.done(session, result)


__all__ = ["Deployed", "EveryParty", "InProcess", "Mode", "OneParty", "Outcome", "Placement", "run"]

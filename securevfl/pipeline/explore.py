"""Exploring as a mode of the pipeline (:mod:`securevfl.pipeline`): the same inputs and PSI as training.

In one process (``securevfl explore``, :func:`securevfl.explore`) the scenario holds every party's
table, cut from one dataset or read from each party's file and aligned by PSI; the explored rows are
the training rows of the rows every party holds. Deployed (``securevfl party --explore``) a party
reads its own file only and its set-up runs over its links (PSI, then the plan), like training.
Either way the roles are :mod:`securevfl.exploration.protocol`'s, and the active party assembles the
report (:mod:`securevfl.exploration.report`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from securevfl.data import Scenario
from securevfl.data.columns import ColumnSpec
from securevfl.eval import positive_index
from securevfl.exploration.inputs import explore_roles, idle
from securevfl.exploration.protocol import ExploreOptions, Findings
from securevfl.exploration.report import ExploreReport, assemble_explore_report
from securevfl.pipeline.placement import Deployed, InProcess, OneParty, Outcome
from securevfl.run_config import RunConfig


@dataclass
class _Exploring:
    """What this process brings to exploring, checked before connecting."""

    config: RunConfig
    scenario: Scenario | None = None
    table: Any = None
    classes: tuple[str, ...] = ()
    positive: int = 1
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ExploreRun:
    """Explore ``config``'s parties. Deployed, ``config`` is the federation's job with this party's own settings."""

    config: RunConfig
    options: ExploreOptions = field(default_factory=ExploreOptions)
    scenario: Scenario | None = None
    data: str | Path | None = None
    columns: ColumnSpec | None = None
    #: called with a line of text at each long step (the value estimate's trainings)
    progress: Any = None
    phase = "explore"

    def prepare(self, session: InProcess | Deployed) -> _Exploring:
        """The tables of this process (deployed: its own file), the positive class checked before connecting."""
        if not isinstance(session, Deployed):
            return _Exploring(self.config, self.scenario)
        from securevfl.pipeline.train import TrainRun

        training = TrainRun(self.config, data=self.data, columns=self.columns).prepare(session)
        local = _Exploring(self.config, table=training.table, classes=training.classes)
        if session.kind == "active":
            local.positive = positive_index(local.classes, self.config.positive_class, local.table.task)
        return local

    def connect(self, session: InProcess | Deployed, local: _Exploring) -> Any:
        return session.connect("explore", local.table.n_rows if local.table is not None else None)

    def setup(self, session: InProcess | Deployed, local: _Exploring) -> Scenario:
        """The rows every party holds: aligned in this process, or PSI and the plan over the links."""
        if isinstance(session, Deployed):
            from securevfl.deploy.alignment import psi_role
            from securevfl.deploy.plan import helper_plan_role, plan_role

            federation = session.federation
            if local.table is None:
                return session.setup(helper_plan_role(federation, False), table=None, classes=())
            role = plan_role(local.table, local.classes, federation, psi_role(local.table, federation, False), False)
            return session.setup(role, table=local.table, classes=local.classes)
        from securevfl.pipeline.train import build_scenario

        scenario = local.scenario or build_scenario(local.config, cover=False)
        local.positive = positive_index(scenario.classes, local.config.positive_class, scenario.task)
        return scenario

    def execute(self, session: InProcess | Deployed, local: _Exploring, scenario: Scenario) -> Outcome:
        roles = explore_roles(scenario, self.options, local.positive,
                              only=session.name if isinstance(session, Deployed) else None)
        if isinstance(session, Deployed):
            for helper in (p for p in session.parties if p not in roles):
                roles[helper] = idle
            outcome = session.execute(roles, seed=local.config.train.seed, check=False,
                                      finish=session.kind == "helper")  # the value estimate's phases follow
            if session.kind != "helper":
                local.extra["value"] = self._deployed_value(session, local, scenario)
                session.link.finish(session.name)  # its last phase is over: peers need not wait for it
            return outcome
        return session.execute(roles, active=scenario.active, passives=scenario.passives,
                               seed=local.config.train.seed, recv_timeout=local.config.recv_timeout_s)

    def _value_options(self, seed: int) -> Any:
        """The value estimate's budget from this run's options (the trainings' seed: the run's)."""
        from securevfl.pipeline.partner_value import ValueOptions

        o = self.options
        return ValueOptions(trees=o.value_trees, depth=o.value_depth, rows=o.value_rows, key_bits=o.key_bits,
                            insecure_allow_small_key=o.insecure_allow_small_key, workers=o.workers, seed=seed)

    def _deployed_value(self, session: Deployed, local: _Exploring, scenario: Scenario) -> Any:
        """The value estimate over the links: the active party's choice (none, or rows and budget), then the runs."""
        from securevfl.pipeline.partner_value import deployed_estimate, deployed_value_role

        options = self.options
        chosen = self._value_options(local.config.train.seed) if options.value and session.kind == "active" else None
        role = deployed_value_role(scenario, chosen, options.insecure_allow_small_key)
        data = session.data_parties
        sample = session.execute({session.name: role}, seed=local.config.train.seed, check=False, costs=False,
                                 parties=data, passives=data[1:], finish=False).value
        if sample is None:
            return None
        if session.kind != "active":  # a passive party runs with its own workers
            sample = (sample[0], sample[1], dataclasses.replace(sample[2], workers=options.workers))
        return deployed_estimate(session, scenario, sample, local.config.train.seed, self.progress)

    def finish(self, session: InProcess | Deployed, local: _Exploring, scenario: Scenario,
               outcome: Outcome) -> Any:
        if isinstance(session, Deployed) and session.kind != "active":
            return outcome.value  # a passive party's own summary (a helper: nothing)
        findings: Findings = outcome.value
        report = assemble_explore_report(findings, local.config, self.options, scenario, outcome.snapshots,
                                         wall_s=session.elapsed(), links=outcome.links)
        if self.options.value:
            if isinstance(session, Deployed):
                report.value = local.extra.get("value") or {}
            else:
                from securevfl.pipeline.partner_value import estimate_value

                report.value = estimate_value(scenario, self._value_options(local.config.train.seed),
                                              progress=self.progress)
            report.learned["value"] = ("the value estimate trains SecureBoost: the active party learns what its "
                                       "training shows it (per-bin sums of gradients, which rows go left), a "
                                       "passive party the node of every sampled row (docs/secureboost.md)")
            report.wall_s = session.elapsed()
        return report

    def done(self, session: InProcess | Deployed, result: Any) -> Any:
        if isinstance(session, Deployed):
            size = session.alignment.size if session.alignment is not None else 0
            session.done(f"{size} agreed rows explored; done in {{wall_s:.1f}} s", size)
        return result


def run_explore(config: RunConfig, options: ExploreOptions | None = None, *, scenario: Scenario | None = None,
                progress: Any = None) -> ExploreReport:
    """Explore every party of ``config`` in this process (:func:`securevfl.explore`)."""
    from securevfl.pipeline import run
    from securevfl.pipeline.placement import EveryParty

    return run(ExploreRun(config, options or ExploreOptions(), scenario, progress=progress),  # type: ignore[no-any-return]
               EveryParty(config.device, None, config.scheduler))


def run_deployed_explore(federation: Any, name: str, data: str | Path | None, options: ExploreOptions, *,
                         device: str = "auto", progress: Any = None, transport: Any = None,
                         columns: ColumnSpec | None = None, threads: Any = None,
                         positive_class: str | None = None) -> Any:
    """Party ``name`` of ``federation`` explores on its own ``data`` file; the active party returns the report."""
    from securevfl.deploy.party import method_and_config
    from securevfl.pipeline import run

    placement = OneParty(federation, name, device, progress, transport, threads)
    config = method_and_config(federation, device, None, False, False, positive_class)[1]
    return run(ExploreRun(config, options, data=data, columns=columns), placement)


__all__ = ["ExploreRun", "run_deployed_explore", "run_explore"]

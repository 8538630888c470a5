"""Training as a mode of the pipeline: every party in this process, or one organisation's process.

In one process (``securevfl train``, :func:`securevfl.train`) the scenario holds every party's
table, cut from one dataset or read from each party's file, aligned by PSI (or, if told, in
plaintext). Deployed (``securevfl party``, docs/deploy.md) the party reads only its own file and
its set-up runs over its links: ECDH PSI with its peers, then the plan (:mod:`securevfl.deploy.plan`:
the split, the shapes; what it reveals is written there). Either way the method's roles are the
same code, and every party saves its own part of the model (:mod:`securevfl.model`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from securevfl.data import Scenario, load_dataset, partition, scenario_from_partition, scenario_from_tables
from securevfl.data.alignment import create_aligner
from securevfl.data.columns import ColumnSpec
from securevfl.data.files import party_tables_from_files
from securevfl.deploy.alignment import LocalAlignment, psi_role
from securevfl.deploy.costs import alignment_cost, record_link_costs
from securevfl.deploy.federation_file import Federation
from securevfl.deploy.party import method_and_config
from securevfl.deploy.plan import helper_plan_role, plan_role
from securevfl.deploy.threads import ThreadChoice
from securevfl.errors import ConfigError
from securevfl.eval import positive_index
from securevfl.federation.meter import MeterSnapshot
from securevfl.methods import create_method
from securevfl.pipeline.placement import Deployed, InProcess, OneParty, Outcome
from securevfl.pipeline.report import assemble_report
from securevfl.report import RunReport
from securevfl.run_config import RunConfig


def build_scenario(config: RunConfig, *, cover: bool = False) -> Scenario:
    """Per-party tables (from files, or cut from one dataset), aligned by PSI or, if told, in plaintext.

    ``cover``: every row of the active party, each passive party holding those it shares with it
    (partial coverage, for a method that can use such rows); otherwise the rows every party holds.
    """
    aligner = create_aligner(config.alignment, cover=cover)
    if config.data_files:
        opts = config.dataset_options
        if opts.id_column is None or opts.label_column is None:
            raise ConfigError("training from --data files needs --id-column and --label-column")
        names = list(config.data_files)
        tables, classes = party_tables_from_files(config.data_files, id_column=opts.id_column, task=opts.task,
                                                  label_column=opts.label_column, active=names[0],
                                                  columns=opts.columns)
        return scenario_from_tables(tables, names[0], classes, test_size=config.partition.test_size,
                                    seed=config.partition.seed, aligner=aligner,
                                    dataset="files: " + ", ".join(f"{n}={p}" for n, p in config.data_files.items()))
    dataset = load_dataset(config.dataset, config.dataset_options)
    data = partition(dataset, config.partition)
    return scenario_from_partition(data, aligner)


@dataclass
class DeployedResult:
    """What one party's process produced. ``report`` only at the active party."""

    party: str
    alignment: LocalAlignment
    report: Any = None
    preprocessing: dict[str, Any] = field(default_factory=dict)
    snapshots: dict[str, MeterSnapshot] = field(default_factory=dict)
    link_stats: dict[str, dict[str, int]] = field(default_factory=dict)
    wall_s: float = 0.0
    #: The torch threads this party's process used (:mod:`securevfl.deploy.threads`).
    threads: int = 0


@dataclass
class _Training:
    """What this process brings to a training, checked before connecting."""

    method: Any
    config: RunConfig
    scenario: Scenario | None = None  # in one process: every party's tables (built by ``setup`` unless given)
    table: Any = None  # deployed: this party's own table (None for a helper)
    classes: tuple[str, ...] = ()
    sides: dict[str, Any] = field(default_factory=dict)  # the method's roles, before any attack wraps them
    planned: list[Any] = field(default_factory=list)  # attacks to evaluate after the run
    selection: dict[str, Any] | None = None  # --select: what each party kept (securevfl.exploration.selection)


@dataclass
class TrainRun:
    """Train ``config``'s method. Deployed, ``config`` is the federation's job with this party's own settings.

    ``scenario``: in one process, tables already aligned (tests and benchmarks build one to reuse);
    ``data`` / ``columns``: deployed, this party's own file and how it reads it.
    """

    config: RunConfig
    scenario: Scenario | None = None
    data: str | Path | None = None
    columns: ColumnSpec | None = None
    phase = "train"

    # ------------------------------------------------------------------ prepare

    def prepare(self, session: InProcess | Deployed) -> _Training:
        """The method and its options (validated first), then this process's tables and model folder."""
        config = self.config
        method = create_method(config.method, config.train)
        if not isinstance(session, Deployed):
            return _Training(method, config, self.scenario)
        name, federation = session.name, session.federation
        if config.positive_class is not None and session.kind != "active":
            raise ConfigError(f"--positive-class is for the active party ({federation.active}), which holds the labels")
        if config.model_dir is not None:
            from securevfl.model.saving import check_savable
            from securevfl.model.store import check_model_dir

            check_savable(method)
            check_model_dir(config.model_dir, config.overwrite_model, party=name)
        local = _Training(method, config)
        if session.kind == "helper":
            if self.data is not None:
                raise ConfigError(f"{name} has data = false in the federation file: it takes no --data")
            return local
        if self.data is None:
            raise ConfigError(f"{name} is a party with data: give its table (--data FILE)")
        from securevfl.data.files import party_table_from_file

        job = federation.job
        spec = self.columns if self.columns is not None else federation.party(name).columns
        local.table, local.classes = party_table_from_file(name, self.data, id_column=job.id_column,
                                                           label_column=job.label_column,
                                                           is_active=session.kind == "active", columns=spec,
                                                           task=job.run.dataset_options.task)
        if session.kind == "active":
            positive_index(local.classes, config.positive_class, local.table.task)  # refused before connecting
        return local

    def connect(self, session: InProcess | Deployed, local: _Training) -> Any:
        return session.connect("train", local.table.n_rows if local.table is not None else None)

    # ------------------------------------------------------------------ set up

    def setup(self, session: InProcess | Deployed, local: _Training) -> Scenario:
        """Every table aligned and split (one process), or PSI and the plan over the links (one party)."""
        method = local.method
        cover = method.partial_rows and not local.config.train.require_all_parties
        if isinstance(session, Deployed):
            federation = session.federation
            if local.table is None:
                return session.setup(helper_plan_role(federation, cover), table=None, classes=())
            choose = None
            if local.config.select is not None:
                from securevfl.exploration.selection import selection_role

                positive = positive_index(local.classes, local.config.positive_class, local.table.task) \
                    if session.kind == "active" else 1
                choose = selection_role(local.config.select, positive)
            role = plan_role(local.table, local.classes, federation, psi_role(local.table, federation, cover), cover,
                             choose)
            return session.setup(role, table=local.table, classes=local.classes)
        scenario = local.scenario or build_scenario(local.config, cover=cover)
        positive = positive_index(scenario.classes, local.config.positive_class, scenario.task)  # refused now
        if local.config.select is not None:
            from securevfl.exploration.selection import select_columns

            scenario, local.selection, snapshots = select_columns(scenario, local.config.select, positive=positive,
                                                                  seed=local.config.train.seed,
                                                                  recv_timeout=local.config.recv_timeout_s)
            local.selection["cost"] = {"crypto_s": sum(sum(s.crypto_s.values()) for s in snapshots.values()),
                                       "bytes": sum(sum(s.bytes.values()) for s in snapshots.values())}
        return scenario

    # ------------------------------------------------------------------ the roles

    def execute(self, session: InProcess | Deployed, local: _Training, scenario: Scenario) -> Outcome:
        config, method = local.config, local.method
        roles = method.party_roles(scenario)
        if isinstance(session, Deployed):
            local.sides = dict(roles)
            train = config.train
            trees = method.describe().get("trees")  # SecureBoost's rounds are trees, not epochs
            rounds, unit = (int(trees), "trees") if isinstance(trees, int) else (train.epochs, "epochs")
            return session.execute(roles, seed=train.seed, on_start=lambda: session.watch.event(  # type: ignore[union-attr]
                "train", "train_start", f"training {config.method}: {rounds} {unit}", method=config.method,
                epochs=rounds, unit=unit))
        if config.model_dir:  # refused before any training, not after it
            from securevfl.model.saving import check_savable, model_parties
            from securevfl.model.store import check_model_dir

            check_savable(method, {p: roles[p] for p in model_parties(method, data_roles(scenario))})
            check_model_dir(config.model_dir, config.overwrite_model)
        local.sides = dict(roles)
        if config.attacks:
            from securevfl.attacks import attach

            roles, local.planned = attach(roles, scenario, config.attacks)
        return session.execute(roles, active=scenario.active, passives=scenario.passives, seed=config.train.seed,
                               recv_timeout=config.recv_timeout_s)

    # ------------------------------------------------------------------ finish

    def finish(self, session: InProcess | Deployed, local: _Training, scenario: Scenario,
               outcome: Outcome) -> RunReport | DeployedResult:
        if isinstance(session, Deployed):
            return self._finish_party(session, local, scenario, outcome)
        config = local.config
        report = assemble_report(config, scenario, outcome.value, outcome.snapshots, local.method.describe(),
                                 wall_s=session.elapsed())
        if local.selection is not None:
            report.extra["selection"] = local.selection
        if local.planned:
            from securevfl.attacks import evaluate

            report.privacy = [r.as_dict() for r in evaluate(local.planned, scenario, config.method, config.train)]
        active_rows = scenario.alignment.aligned[scenario.active][scenario.test]
        report.test_predictions = {"ids": scenario.tables[scenario.active].ids[active_rows],
                                   "scores": outcome.value.scores, "y_true": outcome.value.y_true}
        if config.model_dir:
            save_parts(config, local.method, scenario, local.sides, report, classes=scenario.classes)
        return report

    def _finish_party(self, session: Deployed, local: _Training, scenario: Scenario,
                      outcome: Outcome) -> DeployedResult:
        name, federation = session.name, session.federation
        alignment = session.alignment
        assert alignment is not None
        result = DeployedResult(name, alignment, link_stats=session.link.link_stats(), threads=session.threads.threads,
                                preprocessing=scenario.encoded(name).summary if local.table is not None else {},
                                snapshots=outcome.snapshots)
        if session.kind == "active":
            psi_cost = alignment_cost(scenario.alignment.shared, outcome.setups)  # every row: still the intersection
            scenario = scenario.with_alignment_cost(psi_cost)
            result.report = assemble_report(local.config, scenario, outcome.value, outcome.snapshots,
                                            local.method.describe(), wall_s=session.elapsed())
            result.report.cost["alignment"]["crypto_s"] = psi_cost["crypto_s"]
            result.report.config["threads"] = session.threads.threads  # this party's torch threads
            if session.selection is not None:
                result.report.extra["selection"] = session.selection
            for peer, shape in session.plan["shapes"].items():  # placeholders hold the aligned rows only
                if peer != name and peer in result.report.parties:  # the counts PSI showed this party
                    result.report.parties[peer].update(rows=shape.rows, unaligned=shape.rows - shape.aligned)
            record_link_costs(result.report, outcome.links, outcome.missing)
        if local.config.model_dir is not None and session.placement.holds_part:
            from securevfl.model.saving import check_savable

            check_savable(local.method, {name: local.sides[name]})
            job = federation.job
            save_parts(local.config, local.method, scenario, {name: local.sides[name]}, result.report,
                       classes=local.classes, model_id=session.plan["model"], normalize=job.psi.normalize,
                       id_column=job.id_column, label_column=job.label_column)
        return result

    def done(self, session: InProcess | Deployed, result: Any) -> Any:
        if isinstance(session, Deployed):
            size = result.alignment.size
            result.wall_s = session.done(f"{size} agreed rows; done in {{wall_s:.1f}} s", size)
        return result


def save_parts(config: RunConfig, method: Any, scenario: Scenario, sides: Mapping[str, Any], report: Any, *,
               classes: tuple[str, ...], model_id: str | None = None, normalize: Sequence[str] = (),
               id_column: str | None = None, label_column: str | None = None) -> None:
    """Every party of ``sides`` (those of this process) saves its own part of the model under ``config.model_dir``.

    A standalone method's model is the active party's alone: only that party saves a part.
    ``model_id``: the plan's name of the model (deployed); ``normalize``: how IDs were prepared for PSI.
    """
    from securevfl.methods.engine.kept import saved_of
    from securevfl.model.saving import (
        aligned_ids,
        model_fingerprint,
        model_parties,
        party_schema,
        save_part,
        train_settings,
    )

    opts = config.dataset_options
    id_column = id_column or opts.id_column
    label_column = label_column or opts.label_column
    settings = train_settings(config.train)
    parties = model_parties(method, data_roles(scenario))
    fingerprint = model_fingerprint(method.name, settings, parties, model_id)
    card = report.to_dict() if report is not None else None
    for party, side in sides.items():
        if party not in parties:
            continue
        encoder = scenario.encoded(party).encoder
        schema = party_schema(encoder, scenario.tables[party].columns, id_column=id_column,
                              label_column=label_column if party == scenario.active else None)
        ids = aligned_ids(scenario, party, normalize) if parties[party] == "passive" else None
        save_part(config.model_dir or "", party=party, role=parties[party], side_saved=saved_of(side),
                  encoder=encoder, schema=schema, method=method, settings=settings, parties=parties,
                  fingerprint=fingerprint, task=scenario.task, classes=classes,
                  report=card if party == scenario.active else None, overwrite=config.overwrite_model,
                  training_ids=ids)


def data_roles(scenario: Scenario) -> dict[str, str]:
    """Each data party's role (``active`` / ``passive``), in the scenario's order."""
    return {p: ("active" if p == scenario.active else "passive") for p in scenario.tables}


def run_training(config: RunConfig, *, scenario: Scenario | None = None, progress: Any = None) -> RunReport:
    """Train every party of ``config`` in this process (:func:`securevfl.api.run`)."""
    from securevfl.pipeline import run
    from securevfl.pipeline.placement import EveryParty

    return run(TrainRun(config, scenario), EveryParty(config.device, progress, config.scheduler))  # type: ignore[no-any-return]


def run_deployed_party(federation: Federation, name: str, data: str | Path | None, *, device: str = "auto",
                       progress: Any = None, transport: Any = None,
                       checkpoint_dir: str | Path | None = None, resume: bool = False,
                       columns: ColumnSpec | None = None, checkpoint_overwrite: bool = False,
                       model_dir: str | Path | None = None, overwrite_model: bool = False,
                       threads: int | ThreadChoice | None = None,
                       positive_class: str | None = None) -> DeployedResult:
    """Run party ``name`` of ``federation`` on its own ``data`` file, in this process, to the end.

    A party with ``data = false`` in the federation file (an arbiter, a key generator, a server) takes
    no ``data`` and no part in PSI; it receives the plan and runs its role. ``checkpoint_dir``: this
    party saves its own state there at each epoch end (``DIR/<name>/``); ``resume`` continues from the
    last epoch every party completed (every party must be started with ``resume``);
    ``checkpoint_overwrite`` moves this party's old checkpoints aside for a new run. ``columns``: how
    this party reads and encodes its own file (default: its ``[parties.<name>.columns]`` section);
    the other parties never see it. ``model_dir``: this party saves its own part of the trained
    model under ``DIR/<name>/`` (:mod:`securevfl.model`; ``overwrite_model`` replaces one there;
    a standalone method's passive parties save nothing: the model is the active party's alone; nor
    does a helper: it holds no part of a model, hetero-lr's arbiter makes fresh keys when it scores);
    ``securevfl party --predict`` scores with it. ``threads``: torch's threads in this process (0:
    torch's default; or a :class:`~securevfl.deploy.threads.ThreadChoice` already made), by default
    the party's ``threads`` in the file, else this process's setting as it is. The start event names
    the count and why. ``positive_class`` (the active party only): the class binary F1 and AUC score
    as positive (default: the second of the label's classes: a file's class names in sorted order).
    """
    from securevfl.methods.base import method_class
    from securevfl.pipeline import run

    placement = OneParty(federation, name, device, progress, transport, threads)
    if model_dir is not None and (placement.kind == "helper" or method_class(
            federation.job.method).standalone and placement.kind != "active"):
        model_dir = None  # a helper holds no part of a model; a standalone model is the active party's alone
    config = method_and_config(federation, device, checkpoint_dir, resume, checkpoint_overwrite, positive_class,
                               model_dir=model_dir, overwrite_model=overwrite_model)[1]
    return run(TrainRun(config, data=data, columns=columns), placement)  # type: ignore[no-any-return]


__all__ = ["DeployedResult", "TrainRun", "build_scenario", "data_roles", "run_deployed_party", "run_training",
           "save_parts"]

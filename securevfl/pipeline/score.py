"""Scoring new rows with a saved model as a mode of the pipeline: in one process, or one party's process.

Every party of the model reads its own new file with the column spec of its training, checks it
against its saved schema (a missing trained column, or a column of another type, is refused before
any work), applies its saved preprocessing (an unseen category or a blank is encoded as in
training, never an error), and the parties align their IDs with the same ECDH PSI as training.
In one process the aligner runs over every table (``securevfl predict``, :func:`securevfl.predict`);
deployed (``securevfl party --predict``) the set-up runs over the links
(:mod:`securevfl.deploy.scoring`: PSI, then each passive party's shape and model fingerprint, then
the plan: every aligned row scored). A model trained on every row (issue 44) scores every row of the
active party's file, each with the parties that hold it. The sides are rebuilt from the saved parts
and score the aligned rows through the test evaluation's protocol
(:func:`~securevfl.methods.engine.loop.score_side`), so the same privacy layer protects scoring as
training (EASTER's embeddings summed under its ``secagg``; hetero-lr's partial scores encrypted
under the arbiter's fresh key). Only the active party writes predictions, in its file's row order.

A **standalone** model (``local``'s) is the active party's alone: only its file is read, every row
of it is scored in file order, with no PSI, no other party and (deployed) no link. A passive
party's file is refused (one line), so no one believes it changed the predictions.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from securevfl.data.alignment import create_aligner
from securevfl.data.labels import REGRESSION
from securevfl.data.partition import PartyTable
from securevfl.data.preprocess import EncodedColumns
from securevfl.data.scenario import Scenario, align_none, pattern_names
from securevfl.deploy.alignment import LocalAlignment
from securevfl.deploy.federation_file import Federation
from securevfl.deploy.links import Absence
from securevfl.deploy.party import method_and_config
from securevfl.deploy.plan import helper_plan_role
from securevfl.deploy.progress import log_event
from securevfl.deploy.scoring import check_part, scoring_plan_role, standalone_refusal
from securevfl.deploy.threads import ThreadChoice
from securevfl.errors import ConfigError, DataError, ModelError
from securevfl.federation.meter import MeterSnapshot
from securevfl.methods import create_method
from securevfl.methods.engine.loop import SavedSide, score_side
from securevfl.methods.engine.split import SideRole
from securevfl.model.saving import check_savable, train_config_from
from securevfl.model.scoring import (
    SavedModel,
    active_predictions,
    load_model,
    read_new_rows,
)
from securevfl.model.store import read_part
from securevfl.pipeline.placement import Deployed, EveryParty, InProcess, OneParty, Outcome
from securevfl.run_config import BATCH_PARTY_TIMEOUT_S, ScoringSettings

_log = logging.getLogger(__name__)
#: Rows scored per exchange unless told otherwise (``--exchange-rows``).
EXCHANGE_ROWS = ScoringSettings().exchange_rows


@dataclass
class Scored:
    """What scoring produced: the predictions in the active file's row order, and metrics when it had labels."""

    predictions: pd.DataFrame
    metrics: dict[str, Any] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)  # per party: rows in its file; "scored": the rows scored
    wall_s: float = 0.0
    #: Rows scored per coverage pattern (the ``parties`` column's values: ``bank+shop``, ``bank``).
    coverage: dict[str, int] = field(default_factory=dict)


@dataclass
class DeployedScoring:
    """What one party's scoring process produced; ``predictions`` and ``metrics`` only at the active party."""

    party: str
    alignment: LocalAlignment
    predictions: pd.DataFrame | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    rows: int = 0
    snapshots: dict[str, MeterSnapshot] = field(default_factory=dict)
    missing_costs: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0
    #: Passive parties left out (not up within ``--party-timeout``), with why; every row scored without them.
    left_out: dict[str, str] = field(default_factory=dict)


@dataclass
class _Scoring:
    """What this process brings to a scoring run, checked before connecting.

    ``saved``: per data party of this process, its side of the model (a helper, hetero-lr's arbiter,
    holds none). ``tables`` / ``encodings``: each data party's new rows.
    """

    method: Any
    seed: int
    active: str
    classes: tuple[str, ...] = ()
    task: str = ""
    standalone: bool = False
    saved: dict[str, SavedSide] = field(default_factory=dict)
    tables: dict[str, PartyTable] = field(default_factory=dict)
    encodings: dict[str, EncodedColumns] = field(default_factory=dict)
    labels: np.ndarray | None = None
    fingerprint: str = ""
    encoded_width: int = 0
    #: Every row of the active party scored (:meth:`ScoreRun._cover`), set at set-up.
    cover: bool = False


@dataclass
class ScoreRun:
    """Score ``data`` (party -> its new file; deployed: this party's file alone) with a saved model.

    ``model``: the saved model, or its folder (one process: every part; deployed: this party's part
    under ``DIR/<party>/``). ``exchange_rows``: rows scored per exchange. ``id_column``: the new
    files' ID column (default: training's). ``alignment``: psi, or plaintext (simulation only).
    ``require_all_parties``: ``None`` (default) follows the model — every row of the active party's
    file, each passive party's part where it holds the row, for a model trained on every row; the rows
    every party holds otherwise; ``True``: the rows every party holds; ``False``: every row, and a
    model that cannot score rows some party does not hold is refused in one line
    (``securevfl methods``).
    """

    model: SavedModel | str | Path | None
    data: Mapping[str, str | Path]
    exchange_rows: int = EXCHANGE_ROWS
    id_column: str | None = None
    alignment: str = "psi"
    require_all_parties: bool | None = None
    #: Deployed: seconds the active party waits for each passive party's link (None: BATCH_PARTY_TIMEOUT_S).
    party_timeout_s: float | None = None
    phase = "predict"

    # ------------------------------------------------------------------ prepare

    def prepare(self, session: InProcess | Deployed) -> _Scoring:
        ScoringSettings(self.exchange_rows)  # checked by its declaration
        if isinstance(session, Deployed):
            return self._prepare_party(session)
        model = self.model if isinstance(self.model, SavedModel) else load_model(self.model or "")
        self.model = model
        _check_files(model, self.data)
        active = model.active
        config = train_config_from(model.manifests[active].extra.get("train", {}), str(model.parts[active].path))
        local = _Scoring(create_method(model.method, config), config.seed, active, model.classes, model.task,
                         standalone=model.manifests[active].standalone, saved=dict(model.sides))
        label_column = model.manifests[active].schema.get("label_column")
        for party in model.data_parties:
            _read_rows(local, party, model.parts[party], model.encoders[party], self.data[party],
                       id_column=self.id_column, label_column=label_column)
        return local

    def _prepare_party(self, session: Deployed) -> _Scoring:
        """The party's part (digests, version, method, role) and its new file, read and checked as in training."""
        from securevfl.model.saving import saved_encoder, saved_side

        federation, name = session.federation, session.name
        standalone = session.placement.standalone
        refusal = standalone_refusal(federation, name)
        if refusal:
            raise ConfigError(refusal)
        data = self.data.get(name)
        if session.kind == "helper":  # no part, no rows: the method from the job every party agreed on
            if data is not None:
                raise ConfigError(f"{name} has data = false in the federation file: it takes no --data")
            method, settings = method_and_config(federation, "cpu")
            check_savable(method)  # a method whose models cannot be saved has nothing to score
            log_event(_log, name, "start", "model", "scoring as a helper (data = false: it holds no part of the model)")
            return _Scoring(method, settings.train.seed, federation.active)
        if self.model is None or data is None:
            raise ConfigError(f"{name} scores with its own part and new rows: give --model-dir and --data")
        where = self.model.directory if isinstance(self.model, SavedModel) else self.model
        log_event(_log, name, "start", "model", f"scoring with {where}/{name}" + (
            ", alone (a standalone model: no other party, no link)" if standalone else ""))
        part = read_part(self.model if not isinstance(self.model, SavedModel) else self.model.directory, name)
        manifest = part.manifest
        check_part(federation, name, manifest, standalone=standalone)
        encoder = saved_encoder(part)
        config = train_config_from(manifest.extra.get("train", {}), str(part.path))
        local = _Scoring(create_method(manifest.method, config), config.seed, federation.active,
                         tuple(manifest.classes), manifest.task, standalone=standalone,
                         saved={name: saved_side(part)}, fingerprint=manifest.job_fingerprint,
                         encoded_width=encoder.width if encoder is not None else 0)
        job = federation.job
        _read_rows(local, name, part, encoder, data, id_column=job.id_column, label_column=job.label_column)
        return local

    def connect(self, session: InProcess | Deployed, local: _Scoring) -> Any:
        if isinstance(session, InProcess):
            return session.connect("predict", None)
        if local.standalone:  # the active party alone: no link, its rows progress in its own log
            from securevfl.deploy.progress import rows_logger

            logged, given = rows_logger(session.name), session.progress

            def both(*args: Any, **info: Any) -> None:
                logged(*args, **info)
                if given is not None:
                    given(*args, **info)

            session.progress = both
            return session.connect("predict, alone", None, links=False)
        table = local.tables.get(session.name)
        return session.connect("predict", table.n_rows if table is not None else None, absence=self._absence(local))

    def _absence(self, local: _Scoring) -> Absence:
        """A passive party not up within the party timeout: left out (a model trained on every row), else a failure."""
        timeout = BATCH_PARTY_TIMEOUT_S if self.party_timeout_s is None else self.party_timeout_s
        method = local.method
        if self._cover(local) and method.leaves_out_parties:
            return Absence(timeout)
        why = ("it was trained on the rows every party holds only" if self._cover(local) is False
               and method.partial_rows else "it needs every party's part")
        return Absence(timeout, f"the {method.name} model cannot score without its part ({why})")

    # ------------------------------------------------------------------ set up

    def setup(self, session: InProcess | Deployed, local: _Scoring) -> Scenario:
        """Who shares which new rows: the aligner (one process), PSI and the plan (one party), or every row alone."""
        local.cover = cover = self._cover(local)
        if isinstance(session, Deployed) and not local.standalone:
            if session.kind == "helper":
                return session.setup(helper_plan_role(session.federation, cover), table=None, classes=())
            n_classes = 1 if local.task == REGRESSION else len(local.classes)
            role = scoring_plan_role(local.tables[session.name], _nothing_shared, local.fingerprint,
                                     local.encoded_width, session.federation, n_classes, local.task, cover)
            scenario = session.setup(role, table=local.tables[session.name], classes=local.classes)
            if scenario.alignment.partial:
                _check_partial(local)
        else:
            aligned = (align_none(local.tables, local.active) if local.standalone  # every row, in file order
                       else create_aligner(self.alignment, cover=cover)(local.tables, local.active))
            size = len(aligned.aligned[local.active])
            _nothing_shared(size)
            if aligned.partial:
                _check_partial(local)
            scenario = Scenario(tables=local.tables, active=local.active, classes=local.classes, alignment=aligned,
                                train=np.zeros(0, np.int64), test=np.arange(size, dtype=np.int64), task=local.task,
                                dataset="scoring: " + ", ".join(f"{p}={f}" for p, f in self.data.items()))
            if isinstance(session, Deployed):
                session.alignment = LocalAlignment(aligned.aligned[local.active], np.zeros(0, np.int64), size,
                                                   MeterSnapshot())
        for party, encoded in local.encodings.items():
            scenario.remember_encoding(party, encoded)
        return scenario

    # ------------------------------------------------------------------ the roles

    def execute(self, session: InProcess | Deployed, local: _Scoring, scenario: Scenario) -> Outcome:
        """The method's scoring sides, those of this process loaded with their saved parts."""
        roles: dict[str, Any] = dict(local.method.scoring_roles(scenario))
        for party in (tuple(roles) if isinstance(session, InProcess) else (session.name,)):
            role = roles[party]
            if not isinstance(role, SideRole):
                raise ModelError(f"{local.method.name} cannot score a saved model")
            # a helper (hetero-lr's arbiter) holds nothing of the model: it scores with fresh keys, no part
            saved = local.saved.get(party, SavedSide({}))
            silent = frozenset(getattr(session, "left_out", {})) if party == local.active else frozenset()
            roles[party] = functools.partial(score_side, side=role.side, saved=saved, batch_rows=self.exchange_rows,
                                             silent=silent)
        if isinstance(session, InProcess):
            return session.execute(roles, active=local.active, passives=scenario.passives, seed=local.seed)
        if local.standalone:
            return session.execute({local.active: roles[local.active]}, seed=local.seed, stage="score", costs=False,
                                   check=False, parties=(local.active,), passives=())
        return session.execute(roles, seed=local.seed, stage="score")

    # ------------------------------------------------------------------ finish

    def finish(self, session: InProcess | Deployed, local: _Scoring, scenario: Scenario,
               outcome: Outcome) -> Scored | DeployedScoring:
        predictions: pd.DataFrame | None = None
        metrics: dict[str, Any] = {}
        size = len(scenario.test)
        patterns = scenario.alignment.patterns(scenario.parties, scenario.test)
        coverage = {str(p): int(n) for p, n in zip(*np.unique(patterns, return_counts=True), strict=True)}
        if local.active in local.tables:
            rows = scenario.alignment.aligned[local.active]
            id_name = self._id_name(session)
            contributed = outcome.value.contributed  # EASTER: a row's parties are those whose parts were summed
            parties = patterns if contributed is None else pattern_names(scenario.parties, [
                contributed[p] if p in contributed else scenario.alignment.held(p, scenario.test)
                for p in scenario.parties], size)
            predictions, metrics = active_predictions(local.tables[local.active].ids, rows, outcome.value.scores,
                                                      local.labels, local.task, local.classes, id_name,
                                                      parties if local.cover else None)
        if isinstance(session, InProcess):
            assert predictions is not None
            counts = {p: t.n_rows for p, t in local.tables.items()}
            return Scored(predictions, metrics, {**counts, "scored": size}, session.elapsed(), coverage)
        assert session.alignment is not None
        return DeployedScoring(session.name, session.alignment, predictions=predictions, metrics=metrics, rows=size,
                               snapshots=outcome.snapshots, missing_costs=outcome.missing,
                               left_out=dict(session.left_out))

    def _cover(self, local: _Scoring) -> bool:
        """Whether every row of the active party is scored (see the class docstring); refusals in one line."""
        if self.require_all_parties or local.standalone:
            return False
        if self.require_all_parties is None:  # follow the model (a helper: the job's method, as every party does)
            return bool(local.method.partial_rows and not local.method.config.require_all_parties)
        return True  # asked for: a model that cannot is refused where some row lacks a party (_check_partial)

    def _id_name(self, session: InProcess | Deployed) -> str:
        if isinstance(session, Deployed):
            return session.federation.job.id_column
        assert isinstance(self.model, SavedModel)
        return self.id_column or self.model.manifests[self.model.active].schema.get("id_column") or "id"

    def done(self, session: InProcess | Deployed, result: Any) -> Any:
        if isinstance(session, Deployed):
            what = "rows scored" if session.placement.standalone else "shared rows scored"
            result.wall_s = session.done(f"{result.rows} {what} in {{wall_s:.1f}} s", result.rows)
        return result


def _check_partial(local: _Scoring) -> None:
    """Rows some party does not hold are scored only by a model trained for them (one line otherwise)."""
    method = local.method
    method.check_partial_rows()
    if method.config.require_all_parties:
        raise ModelError(f"the {method.name} model was trained on the rows every party holds only: it cannot score "
                         "rows some party does not hold (train it without --require-all-parties, or score the rows "
                         "every party holds: --require-all-parties)")


def _nothing_shared(size: int) -> None:
    if size == 0:
        raise DataError("no row is shared by every party's new file: nothing to score")


def _check_files(model: SavedModel, data: Mapping[str, str | Path]) -> None:
    """One file per data party of the model (a standalone model: the active party's alone)."""
    wanted, given = set(model.data_parties), set(data)
    if model.manifests[model.active].standalone and wanted != given:
        extra = sorted(given - wanted)
        raise ConfigError(f"the {model.method} model is {model.active}'s alone (standalone): give only "
                          f"{model.active}'s file" + (f"; {', '.join(extra)} take(s) no part in scoring"
                                                      if extra else ""))
    if wanted != given:
        extra, lacking = sorted(given - wanted), sorted(wanted - given)
        raise ConfigError("the model's parties are " + ", ".join(model.data_parties)
                          + (f"; no data for {', '.join(lacking)}" if lacking else "")
                          + (f"; {', '.join(extra)} is not a party of the model" if extra else ""))


def _read_rows(local: _Scoring, party: str, part: Any, encoder: Any, path: str | Path, *, id_column: str | None,
               label_column: str | None) -> None:
    """One party's new file, read and checked against its saved schema, into ``local``."""
    table, encoded, labels = read_new_rows(part, encoder, path, id_column=id_column, label_column=label_column,
                                           classes=local.classes, task=local.task, is_active=party == local.active)
    local.tables[party] = table
    if encoded is not None:
        local.encodings[party] = encoded
    if party == local.active:
        local.labels = labels


# ---------------------------------------------------------------------------------- entry points


def score(model: SavedModel | str | Path, data: Mapping[str, str | Path], *, id_column: str | None = None,
          exchange_rows: int = EXCHANGE_ROWS, device: str = "auto", alignment: str = "psi",
          require_all_parties: bool | None = None, progress: Callable[..., None] | None = None) -> Scored:
    """Score the rows of the parties' new files (``data``: party -> file) with a saved model, in one process.

    A model trained on every row (the default where the method can) scores every row of the active
    party's file, each with the parts of the parties that hold it (the ``parties`` column); another
    scores the rows every party holds. ``require_all_parties``: ``True`` keeps to the rows every party
    holds; ``False`` insists on every row (a model that cannot is refused). A standalone model takes
    the active party's file alone (``{active: file}``) and scores all its rows.
    """
    from securevfl.pipeline import run

    mode = ScoreRun(model, data, exchange_rows=exchange_rows, id_column=id_column, alignment=alignment,
                    require_all_parties=require_all_parties)
    return run(mode, EveryParty(device, progress))  # type: ignore[no-any-return]


def predict(model: SavedModel | str | Path, data: Mapping[str, str | Path], *, id_column: str | None = None,
            exchange_rows: int = EXCHANGE_ROWS, device: str = "auto",
            require_all_parties: bool | None = None) -> pd.DataFrame:
    """The predictions of a saved model for the rows of the parties' new files (see :func:`score`).

    ``frame.attrs["metrics"]`` holds the metrics when the active party's file has the label column.
    """
    scored = score(model, data, id_column=id_column, exchange_rows=exchange_rows, device=device,
                   require_all_parties=require_all_parties)
    scored.predictions.attrs["metrics"] = scored.metrics
    return scored.predictions


def run_deployed_scoring(federation: Federation, name: str, data: str | Path | None, model_dir: str | Path | None, *,
                         exchange_rows: int = EXCHANGE_ROWS, device: str = "auto",
                         progress: Callable[..., None] | None = None, transport: Any = None,
                         threads: int | ThreadChoice | None = None,
                         party_timeout_s: float | None = None) -> DeployedScoring:
    """Score party ``name``'s new ``data`` with its own part under ``model_dir``, with its peers, to the end.

    A helper (``data = false``: hetero-lr's arbiter) takes neither: it holds no part of the model,
    receives the plan (the number of rows to score) and runs its scoring role (the arbiter: fresh keys).
    ``threads``: torch's threads in this process, as for training
    (:func:`~securevfl.pipeline.train.run_deployed_party`). ``party_timeout_s``: how long the active party
    waits for each passive party (default :data:`~securevfl.run_config.BATCH_PARTY_TIMEOUT_S`); a model
    trained on every row scores every row without one that is not up by then (``left_out`` says which, and
    why), another model fails naming it.
    """
    from securevfl.pipeline import run

    mode = ScoreRun(model_dir, {name: data} if data is not None else {}, exchange_rows=exchange_rows,
                    require_all_parties=federation.job.run.train.require_all_parties or None,
                    party_timeout_s=party_timeout_s)
    return run(mode, OneParty(federation, name, device, progress, transport, threads))  # type: ignore[no-any-return]


__all__ = ["DeployedScoring", "ScoreRun", "Scored", "predict", "run_deployed_scoring", "score"]

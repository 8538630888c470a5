"""Scoring new rows with a saved model in one process: ``securevfl predict`` and :func:`securevfl.predict`.

Every party of the model reads its own new file with the column spec of its training, checks it
against its saved schema (a missing trained column, or a column of another type, is refused before
any work), applies its saved preprocessing (an unseen category or a blank is encoded as in
training, never an error), and the parties align their IDs with the same ECDH PSI as training:
only the intersection is scored. The sides are then rebuilt from the saved parts and score the
aligned rows through the test evaluation's protocol (:func:`~securevfl.methods.engine.loop.score_side`),
so the same privacy layer protects scoring as training (EASTER's embeddings summed under its
``secagg``, for instance). The active party's predictions come back in its file's row order.

A **standalone** model (``local``'s) is the active party's alone: only its file is read, every row
of it is scored in file order, with no PSI and no other party. A passive party's file is refused
(one line), so no one believes it changed the predictions.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from securevfl.data.alignment import create_aligner
from securevfl.data.columns import ColumnSpec, column_kinds
from securevfl.data.files import party_table_from_file
from securevfl.data.labels import REGRESSION
from securevfl.data.partition import PartyTable
from securevfl.data.preprocess import EncodedColumns, PartyEncoder, as_frame
from securevfl.data.scenario import Scenario, align_none
from securevfl.errors import ConfigError, DataError, ModelError
from securevfl.methods import create_method
from securevfl.methods.engine.loop import SavedSide, score_side
from securevfl.methods.engine.split import SideRole
from securevfl.model.saving import (
    check_saved_state,
    saved_encoder,
    saved_side,
    saved_spec,
    train_config_from,
)
from securevfl.model.store import LoadedPart, PartManifest, check_same_model, list_parts, read_part

#: Rows scored per exchange unless told otherwise (``--batch-size``).
DEFAULT_BATCH_ROWS = 4096


@dataclass(frozen=True)
class SavedModel:
    """A saved model whose every part is verified (digests, versions, one job): ready to score."""

    directory: Path
    parts: dict[str, LoadedPart]
    #: per party: its fitted preprocessing and its saved side, decoded when the model was loaded
    encoders: dict[str, PartyEncoder | None] = field(default_factory=dict)
    sides: dict[str, SavedSide] = field(default_factory=dict)

    @property
    def manifests(self) -> dict[str, PartManifest]:
        return {p: part.manifest for p, part in self.parts.items()}

    @property
    def active(self) -> str:
        return next(p for p, m in self.manifests.items() if m.role == "active")

    @property
    def method(self) -> str:
        return self.manifests[self.active].method

    @property
    def task(self) -> str:
        return self.manifests[self.active].task

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(self.manifests[self.active].classes)

    @property
    def data_parties(self) -> tuple[str, ...]:
        """The parties that score with a file of their own, in training's order (the active party first).

        The order matters: the active party combines the passive parties' outputs in it.
        """
        order = self.manifests[self.active].extra.get("party_order")
        if not isinstance(order, list) or sorted(order) != sorted(self.parts):
            raise ModelError(f"{self.directory}: the active party's manifest does not list the parties' order")
        return tuple(p for p in order if self.manifests[p].role in ("active", "passive"))


def load_model(directory: str | Path) -> SavedModel:
    """Read and verify every party's part under ``directory`` (one job, every part present)."""
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise ModelError(f"model directory {path} is a file, not a directory (give the folder of train --model-dir)")
    if not path.is_dir():
        raise ModelError(f"no model directory at {path}")
    manifests = list_parts(path)
    if not manifests:
        raise ModelError(f"{path} holds no saved model part")
    manifests = _standalone_parts(path, manifests)
    check_same_model(manifests)
    first = next(iter(manifests.values()))
    missing = sorted(set(first.parties) - set(manifests))
    if missing:
        raise ModelError(f"{path} lacks the part of {', '.join(missing)} "
                         f"(parts present: {', '.join(sorted(manifests))})")
    for party, manifest in manifests.items():  # size-like settings bounded before any file is read or module built
        train_config_from(manifest.extra.get("train", {}), str(path / party))
        check_saved_state(manifest.extra.get("side", {}), str(path / party))
    parts = {p: read_part(path, p, job_fingerprint=first.job_fingerprint, method=first.method) for p in first.parties}
    if [p for p, part in parts.items() if part.manifest.role == "active"] == []:
        raise ModelError(f"{path}: no part is the active party's")
    # every file decoded now (weights, preprocessing): a bad part is refused before any data is read
    return SavedModel(path, parts, encoders={p: saved_encoder(part) for p, part in parts.items()},
                      sides={p: saved_side(part) for p, part in parts.items()})


def _standalone_parts(path: Path, manifests: dict[str, PartManifest]) -> dict[str, PartManifest]:
    """The parts of the model under ``path``: a standalone model's active part alone, else all of them.

    A standalone model (``local``) is the active party's alone; other parties' folders beside it are
    not of it (left by an earlier model that ``--overwrite`` replaced) and are not read. A standalone
    part beside another model's active part is refused: which model is meant is then unclear.
    """
    alone = {p: m for p, m in manifests.items() if m.standalone}
    if not alone:
        return manifests
    actives = sorted(p for p, m in manifests.items() if m.role == "active")
    if len(alone) > 1 or len(actives) > 1:
        raise ModelError(f"{path} holds parts of more than one model (active parts: {', '.join(actives)}; "
                         f"standalone: {', '.join(sorted(alone))}); keep one model per folder")
    return alone


@dataclass
class Scored:
    """What scoring produced: the predictions in the active file's row order, and metrics when it had labels."""

    predictions: pd.DataFrame
    metrics: dict[str, Any] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)  # per party: rows in its file; "scored": the intersection
    wall_s: float = 0.0


def _check_schema(table: PartyTable, encoder: PartyEncoder, part: LoadedPart) -> None:
    """Refuse a new file that lacks a trained column or holds one of another type, before any work."""
    where = table.source or f"party {table.name!r}"
    names = set(table.feature_names)
    missing = [c for c in encoder.columns if c not in names]
    if missing:
        raise DataError(f"{where}: column {missing[0]!r} of the trained model is missing")
    frame = as_frame(table.features, table.feature_names)[list(encoder.columns)]
    kinds = column_kinds(frame, table.columns or ColumnSpec(), where) if len(encoder.columns) else {}
    for column, kind in encoder.kinds.items():
        if kinds.get(column, kind) != kind:
            raise DataError(f"{where}: column {column!r} was {kind} in training and is {kinds[column]} here "
                            f"(model {part.path})")


def read_new_rows(part: LoadedPart, encoder: PartyEncoder | None, path: str | Path, *, id_column: str | None,
                  label_column: str | None, classes: tuple[str, ...], task: str, is_active: bool) -> tuple[
        PartyTable, EncodedColumns | None, np.ndarray | None]:
    """One party's new file, read as in training and checked against its saved schema.

    Returns the table (at the active party with labels: the file's, mapped to the saved classes, or
    placeholders when it has none), its encoding by the saved preprocessing, and the labels or None.
    """
    party = part.manifest.party
    schema = part.manifest.schema
    id_col = id_column or schema.get("id_column")
    if not id_col:
        raise ConfigError("the model was trained without an ID column name: give --id-column")
    table, found = party_table_from_file(party, path, id_column=id_col, label_column=label_column or "__label__",
                                         is_active=is_active, columns=saved_spec(part), task=task,
                                         label_optional=True)
    labels = None
    if table.labels is not None:
        labels = table.labels
        if task != REGRESSION:
            saved = {c: i for i, c in enumerate(classes)}
            unknown = [c for c in found if c not in saved]
            if unknown:
                raise DataError(f"{table.source}: label {unknown[0]!r} is not a class of the model "
                                f"({', '.join(classes)})")
            labels = np.asarray([saved[c] for c in found], dtype=np.int64)[table.labels]
    encoded = None
    if encoder is not None:
        _check_schema(table, encoder, part)
        frame = as_frame(table.features, table.feature_names)
        encoded = EncodedColumns(encoder.transform(frame), encoder.feature_names, encoder.summary, encoder)
    if is_active:  # the side's objective expects labels; scoring never reads them
        dtype = np.float64 if task == REGRESSION else np.int64
        placeholder = labels if labels is not None else np.zeros(table.n_rows, dtype)
        table = PartyTable(name=table.name, ids=table.ids, features=table.features, feature_names=table.feature_names,
                           labels=placeholder, strip_shape=table.strip_shape, columns=table.columns,
                           source=table.source, task=task)
    return table, encoded, labels


def score(model: SavedModel | str | Path, data: Mapping[str, str | Path], *, id_column: str | None = None,
          batch_size: int = DEFAULT_BATCH_ROWS, device: str = "auto", alignment: str = "psi",
          progress: Callable[..., None] | None = None) -> Scored:
    """Score the rows every party's new file shares (``data``: party -> file) with a saved model, in one process.

    A standalone model takes the active party's file alone (``{active: file}``) and scores all its rows.
    """
    from securevfl.federation.runtime import run_parties
    from securevfl.networks.device import resolve_device

    started = time.perf_counter()
    if not isinstance(model, SavedModel):
        model = load_model(model)
    if batch_size < 1:
        raise ConfigError(f"--batch-size must be at least 1, got {batch_size}")
    wanted, given = set(model.data_parties), set(data)
    standalone = model.manifests[model.active].standalone
    if standalone and wanted != given:
        extra = sorted(given - wanted)
        raise ConfigError(f"the {model.method} model is {model.active}'s alone (standalone): give only "
                          f"{model.active}'s file" + (f"; {', '.join(extra)} take(s) no part in scoring"
                                                      if extra else ""))
    if wanted != given:
        extra, lacking = sorted(given - wanted), sorted(wanted - given)
        raise ConfigError("the model's parties are " + ", ".join(model.data_parties)
                          + (f"; no data for {', '.join(lacking)}" if lacking else "")
                          + (f"; {', '.join(extra)} is not a party of the model" if extra else ""))
    active = model.active
    config = train_config_from(model.manifests[active].extra.get("train", {}), str(model.parts[active].path))
    method = create_method(model.method, config)
    torch_device = resolve_device(device)
    tables: dict[str, PartyTable] = {}
    encodings: dict[str, EncodedColumns] = {}
    labels = None
    label_column = model.manifests[active].schema.get("label_column")
    for party in model.data_parties:
        table, encoded, party_labels = read_new_rows(model.parts[party], model.encoders[party], data[party],
                                                     id_column=id_column, label_column=label_column,
                                                     classes=model.classes, task=model.task,
                                                     is_active=party == active)
        tables[party] = table
        if encoded is not None:
            encodings[party] = encoded
        if party == active:
            labels = party_labels
    if standalone:  # nothing to align: every row of the active party's file, in file order
        aligned = align_none(tables, active)
    else:
        aligned = create_aligner(alignment)(tables, active)
    size = len(aligned.aligned[active])
    if size == 0:
        raise DataError("no row is shared by every party's file: nothing to score")
    scenario = Scenario(tables=tables, active=active, classes=model.classes, alignment=aligned,
                        train=np.zeros(0, np.int64), test=np.arange(size, dtype=np.int64), task=model.task,
                        dataset="scoring: " + ", ".join(f"{p}={f}" for p, f in data.items()))
    for party, encoded in encodings.items():
        scenario.remember_encoding(party, encoded)
    roles = method.scoring_roles(scenario)
    scoring = {}
    for party, role in roles.items():
        # a helper (hetero-lr's arbiter) holds nothing of the model: it scores with fresh keys, no part
        saved = model.sides.get(party) if party in tables else SavedSide({})
        if not isinstance(role, SideRole) or saved is None:
            raise ModelError(f"{model.method} cannot score a saved model")
        scoring[party] = functools.partial(score_side, side=role.side, saved=saved, batch_rows=batch_size)
    result = run_parties(scoring, active=active, passives=scenario.passives, device=torch_device,
                         seed=config.seed, progress=progress)
    evaluation = result.results[active]
    assert evaluation is not None  # the active party's score_side returns its scores
    id_name = id_column or model.manifests[active].schema.get("id_column") or "id"
    frame, metrics = active_predictions(tables[active].ids, aligned.aligned[active], evaluation.scores, labels,
                                        model.task, model.classes, id_name)
    rows = {p: t.n_rows for p, t in tables.items()}
    rows["scored"] = size
    return Scored(frame, metrics, rows, time.perf_counter() - started)


def active_predictions(ids: np.ndarray, rows: np.ndarray, scores: np.ndarray, labels: np.ndarray | None, task: str,
                       classes: tuple[str, ...], id_column: str) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The active party's predictions in its file's row order, and the metrics when its file has labels.

    ``rows``: the active file's row of each scored position; ``ids`` and ``labels``: its whole file's.
    """
    from securevfl.eval import task_metrics

    metrics = task_metrics(task, labels[rows], scores) if labels is not None else {}
    order = np.argsort(rows, kind="stable")
    return predictions_frame(ids[rows][order], scores[order], task, classes, id_column), metrics


def predictions_frame(ids: np.ndarray, scores: np.ndarray, task: str, classes: tuple[str, ...],
                      id_column: str) -> pd.DataFrame:
    """The ID, ``prediction`` (class name or value) and one ``proba_<class>`` column per class."""
    if task == REGRESSION:
        return pd.DataFrame({id_column: ids, "prediction": np.asarray(scores, dtype=np.float64)})
    columns: dict[str, Any] = {id_column: ids,
                               "prediction": np.asarray(classes, dtype=object)[np.argmax(scores, axis=1)]}
    for j, name in enumerate(classes):
        columns[f"proba_{name}"] = scores[:, j]
    return pd.DataFrame(columns)


def prediction_records(ids: Sequence[str], scores: np.ndarray, task: str, classes: tuple[str, ...],
                       id_column: str) -> list[dict[str, Any]]:
    """:func:`predictions_frame`'s rows as JSON-ready dicts (plain Python values), without a DataFrame.

    What an online request answers: a frame per request cost more than the model's evaluation.
    """
    if task == REGRESSION:
        values = np.asarray(scores, dtype=np.float64).ravel().tolist()
        return [{id_column: i, "prediction": v} for i, v in zip(ids, values, strict=True)]
    names = [f"proba_{name}" for name in classes]
    chosen = np.argmax(scores, axis=1).tolist()
    rows = np.asarray(scores, dtype=np.float64).tolist()
    return [{id_column: i, "prediction": classes[k], **dict(zip(names, row, strict=True))}
            for i, k, row in zip(ids, chosen, rows, strict=True)]


def predict(model: SavedModel | str | Path, data: Mapping[str, str | Path], *, id_column: str | None = None,
            batch_size: int = DEFAULT_BATCH_ROWS, device: str = "auto") -> pd.DataFrame:
    """The predictions of a saved model for the rows shared by every party's new file (see :func:`score`).

    ``frame.attrs["metrics"]`` holds the metrics when the active party's file has the label column.
    """
    scored = score(model, data, id_column=id_column, batch_size=batch_size, device=device)
    scored.predictions.attrs["metrics"] = scored.metrics
    return scored.predictions

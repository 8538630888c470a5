"""A saved model, ready to score: its parts loaded and verified, new rows read against each party's schema.

The run that scores them is assembled by the pipeline (:mod:`securevfl.pipeline.score`).

Every party of the model reads its own new file with the column spec of its training, checked
against its saved schema (a missing trained column, or a column of another type, is refused before
any work), and applies its saved preprocessing (an unseen category or a blank is encoded as in
training, never an error). :func:`active_predictions` puts the scores back in the active file's
row order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from securevfl.data.columns import ColumnSpec, column_kinds
from securevfl.data.files import party_table_from_file
from securevfl.data.labels import REGRESSION
from securevfl.data.partition import PartyTable
from securevfl.data.preprocess import EncodedColumns, PartyEncoder, as_frame
from securevfl.errors import ConfigError, DataError, ModelError
from securevfl.methods.engine.loop import SavedSide
from securevfl.model.saving import (
    check_saved_state,
    saved_encoder,
    saved_side,
    saved_spec,
    train_config_from,
)
from securevfl.model.store import LoadedPart, PartManifest, check_same_model, list_parts, read_part


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
    not of it (left by an earlier model that ``--overwrite-model`` replaced) and are not read. A standalone
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


def active_predictions(ids: np.ndarray, rows: np.ndarray, scores: np.ndarray, labels: np.ndarray | None, task: str,
                       classes: tuple[str, ...], id_column: str,
                       parties: np.ndarray | None = None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The active party's predictions in its file's row order, and the metrics when its file has labels.

    ``rows``: the active file's row of each scored position; ``ids`` and ``labels``: its whole file's;
    ``parties``: per scored position, the parties whose part scored it (the ``parties`` column).
    """
    from securevfl.eval import task_metrics

    metrics = task_metrics(task, labels[rows], scores) if labels is not None else {}
    order = np.argsort(rows, kind="stable")
    frame = predictions_frame(ids[rows][order], scores[order], task, classes, id_column)
    if parties is not None:
        frame["parties"] = parties[order]
    return frame, metrics


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

"""What each party saves of a trained model, and how a saved part becomes a scoring side again.

A party's part (:mod:`securevfl.model.store` writes and verifies it) holds only what that party
owns: its modules' weights (:data:`WEIGHTS`, safetensors), its fitted preprocessing
(:data:`PREPROCESSING`, skops with a trusted-type list), its column schema, and at the active party
the class names or the regression target's scale. The training settings that rebuild the method's
sides travel in the manifest, so scoring builds exactly the sides training built, and so does a
side's small model state beyond its weights (``extra["side"]``, JSON: Entity Augmentation's host
keeps the activation widths its top model was built for).

Methods whose parties run on the split-learning engine save and score (their roles are
:class:`~securevfl.methods.engine.split.SideRole`), and so do methods that train outside it with
:class:`~securevfl.methods.engine.kept.KeptRole` roles and scoring sides
(:attr:`~securevfl.methods.base.Method.saves_outside_engine`); the others are refused with one
line, before any training. A **standalone** method (:attr:`~securevfl.methods.base.Method.standalone`:
``local``, ``apcvfl``, ``vfedtrans``) ends with a model that is the active party's alone: only the
active party saves a part, its manifest lists that party alone (``standalone = true``) and says
what the passive parties did in training (:meth:`~securevfl.methods.base.Method.standalone_learns`),
and the passive parties save nothing (they hold nothing of it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from securevfl.data.columns import ColumnSpec
from securevfl.data.preprocess import PartyEncoder
from securevfl.errors import ConfigError, ModelError
from securevfl.methods.base import Method, TrainConfig, method_class, method_names
from securevfl.methods.engine.kept import keeps_model
from securevfl.methods.engine.loop import SavedSide
from securevfl.methods.engine.objective import REGRESSION, Objective
from securevfl.model.preprocessing import dump_encoder, load_encoder
from securevfl.model.store import (
    LoadedPart,
    PartManifest,
    flatten_state,
    tensors_from_bytes,
    tensors_to_bytes,
    unflatten_state,
    write_part,
)

WEIGHTS = "weights.safetensors"
PREPROCESSING = "preprocessing.skops"
#: A party's own training IDs (16-byte BLAKE2b digests of the prepared IDs, sorted), for ``--serve-ids training``.
TRAINING_IDS = "training_ids.safetensors"

#: TrainConfig fields that belong to one run, not to the model (where it checkpointed).
_RUN_ONLY = ("checkpoint_dir", "resume", "checkpoint_overwrite")

# Bounds on the size-like settings a manifest declares, checked before any module is built: a
# manifest whose digests are consistent can still declare ``hidden = [2**31]`` (16 GiB at the
# first layer). Generous for any model this toolkit trains; a saved model beyond them is refused.
#: Most hidden layers (``hidden``) or widths in one encoder option (``"256,256"``).
MAX_LAYERS = 32
#: Widest layer, embedding or encoder width (``hidden``, ``embedding_dim``, ``*_size``, ``*_dim``, ...).
MAX_WIDTH = 16_384
#: Deepest tree or stack (``max_depth``, ``depth``).
MAX_DEPTH = 64
#: Largest other count that sizes a model (``trees``, ``max_bins``, ``n_steps``, ``n_shared``, ...).
MAX_COUNT = 100_000

_DEPTH_WORDS = re.compile(r"depth")
_WIDTH_WORDS = re.compile(r"size|dim|hidden|width|encoder|units|heads|latent|^n_[ad]$")
_COUNT_WORDS = re.compile(r"trees|bins|steps|layers|shared|independent|estimators|classes")


def savable_methods() -> list[str]:
    """The registered methods whose parties save their parts and score with them."""
    return [n for n in method_names() if (method_class(n).uses_engine or method_class(n).saves_outside_engine)
            and not method_class(n).cannot_save]


def check_savable(method: Method[Any], roles: Mapping[str, Any] | None = None) -> None:
    """Refuse, before any training, a method whose parties cannot save their parts yet.

    ``roles``: the roles of the parties that save a part (:func:`model_parties`); each must keep its model.
    """
    if method.cannot_save:
        raise ConfigError(f"{method.name} cannot save a model yet (--model-dir): {method.cannot_save}; "
                          f"these methods can: {', '.join(savable_methods())}")
    if roles is None and (method.uses_engine or method.saves_outside_engine) or roles is not None and all(
            keeps_model(r) for r in roles.values()):
        return
    raise ConfigError(f"{method.name} cannot save a model yet (--model-dir): its parties keep no part of "
                      f"the trained model; these methods can: {', '.join(savable_methods())}")


def model_parties(method: Method[Any], parties: Mapping[str, str]) -> dict[str, str]:
    """The parties a saved model lists (party -> role): the run's, or the active party alone if standalone.

    A standalone method's model is the active party's alone: only that party saves a part.
    """
    if method.standalone:
        return {p: r for p, r in parties.items() if r == "active"}
    return dict(parties)


def scoring_limits(method: Method[Any]) -> list[str]:
    """What the saved model can and cannot score, in words (the model card's "Limits")."""
    if method.standalone:
        return ["scores from the active party's own columns alone: the other parties are not needed"]
    rows = ("a row some passive party does not hold is scored with the parties that hold it"
            if method.partial_rows else "scores only the rows every party holds (the others get no score)")
    down = ("a passive party that is down is left out of scoring (party --predict / --serve, --party-timeout)"
            if getattr(method, "leaves_out_parties", False) or method.partial_rows
            else "scoring needs every party up")
    return [rows, down, "inputs are read as in training: a new category is encoded as unseen, a blank as missing"]


def train_settings(config: TrainConfig) -> dict[str, Any]:
    """The training settings a saved model is rebuilt with (JSON values; run-only fields left out)."""
    settings = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name not in _RUN_ONLY}
    settings["hidden"] = list(config.hidden)
    settings["options"] = dict(config.options)
    settings["defenses"] = dict(config.defenses)
    try:
        json.dumps(settings)
    except TypeError as exc:
        raise ConfigError(f"the method options cannot be saved with the model: {exc}") from None
    return settings


def train_config_from(settings: Mapping[str, Any], where: str) -> TrainConfig:
    """The :class:`TrainConfig` a manifest's ``extra["train"]`` describes; anything else is a ModelError."""
    known = {f.name for f in dataclasses.fields(TrainConfig)} - set(_RUN_ONLY)
    if not isinstance(settings, Mapping):
        raise ModelError(f"{where}: the saved training settings are malformed")
    values = dict(settings)
    if "patience" in values and "early_stopping" not in values:  # saved before the setting took its one name
        values["early_stopping"] = values.pop("patience")
    values.setdefault("require_all_parties", True)  # saved before issue 44: trained on the rows every party held
    if not set(values) <= known:
        raise ModelError(f"{where}: the saved training settings are malformed")
    check_saved_sizes(values, where)
    if "hidden" in values:
        values["hidden"] = tuple(values["hidden"])
    try:
        return TrainConfig(**values)
    except (ConfigError, TypeError) as exc:
        raise ModelError(f"{where}: the saved training settings are invalid here: {exc}") from None


def _bound(name: str) -> int | None:
    """The bound of a size-like setting ``name`` (a key of the settings or of the method options), or None."""
    key = name.lower()
    if "batch" in key:  # a batch size sizes no module
        return None
    if _DEPTH_WORDS.search(key):
        return MAX_DEPTH
    if _WIDTH_WORDS.search(key):
        return MAX_WIDTH
    if _COUNT_WORDS.search(key):
        return MAX_COUNT
    return None


def _too_big(name: str, value: object, bound: int, where: str) -> ModelError:
    shown = value if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    return ModelError(f"{where}: the saved setting {name} = {shown} is refused: at most {bound:,} allowed "
                      "(a manifest beyond this toolkit's bounds is not built)")


def _check_size(name: str, value: object, where: str) -> None:
    """Refuse one size-like value above its bound: an int, a list of ints, or a string like ``"256,256"``."""
    bound = _bound(name.rpartition(".")[2])
    if bound is None:
        return
    widths: list[object]
    if isinstance(value, str):
        tokens = [t.strip() for t in value.split(",")]
        if not all(t.isdigit() for t in tokens):
            return  # not a list of sizes ("max", "auto"): the method's own options check reads it
        widths = [int(t) for t in tokens]
    elif isinstance(value, list | tuple):
        widths = list(value)
    else:
        widths = [value]
    if len(widths) > MAX_LAYERS:
        raise _too_big(f"{name} (number of layers)", len(widths), MAX_LAYERS, where)
    for width in widths:
        if isinstance(width, int) and not isinstance(width, bool) and width > bound:
            raise _too_big(name, value, bound, where)


def check_saved_sizes(settings: Mapping[str, Any], where: str) -> None:
    """Refuse saved training settings whose size-like values exceed :data:`MAX_WIDTH` and the other bounds.

    Checked before a :class:`TrainConfig` or any module is built from a manifest, so an absurd but
    consistently-digested manifest is refused at once, naming the setting and its bound. Method
    options (nested groups too) are checked by name: widths, depths and counts.
    """
    for name, value in settings.items():
        if name == "options" and isinstance(value, Mapping):
            _check_options(value, "options", where)
        elif name in ("hidden", "embedding_dim"):
            _check_size(name, value, where)


def _check_options(options: Mapping[str, Any], prefix: str, where: str, depth: int = 0) -> None:
    for key, value in options.items():
        name = f"{prefix}.{key}"
        if isinstance(value, Mapping):
            if depth < 4:
                _check_options(value, name, where, depth + 1)
            continue
        _check_size(name, value, where)


def check_saved_state(state: object, where: str, path: str = "side", depth: int = 0) -> None:
    """Refuse a side's saved model state (``extra["side"]``) whose widths exceed :data:`MAX_WIDTH`.

    The state gives the shapes some sides build before loading their weights (Entity Augmentation's
    activation widths, APC-VFL's autoencoders): every int under a ``width``/``latent`` key is a width,
    every int under ``inputs`` a count of encoded columns (:data:`MAX_COUNT`).
    """
    if depth > 8:
        raise ModelError(f"{where}: the saved model state is nested too deeply")
    if isinstance(state, Mapping):
        for key, value in state.items():
            check_saved_state(value, where, f"{path}.{key}", depth + 1)
    elif isinstance(state, list):
        if len(state) > MAX_COUNT:
            raise _too_big(f"{path} (length)", len(state), MAX_COUNT, where)
        for value in state:
            check_saved_state(value, where, path, depth + 1)
    elif isinstance(state, int) and not isinstance(state, bool):
        lowered = path.lower()
        bound = MAX_WIDTH if "width" in lowered or "latent" in lowered else MAX_COUNT if "inputs" in lowered else None
        if bound is not None and state > bound:
            raise _too_big(path, state, bound, where)


def model_fingerprint(method: str, settings: Mapping[str, Any], parties: Mapping[str, str],
                      model_id: str | None = None) -> str:
    """A digest naming one trained model: the job (method, settings, parties) and a fresh id per run."""
    model_id = model_id or secrets.token_hex(16)
    text = json.dumps({"method": method, "train": settings, "parties": dict(parties), "model": model_id},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def party_schema(encoder: PartyEncoder | None, spec: ColumnSpec | None, *, id_column: str | None,
                 label_column: str | None) -> dict[str, Any]:
    """A party's input schema: how its file is read (ID column, column spec) and what its model takes."""
    columns = dataclasses.asdict(spec) if spec is not None else None
    return {"id_column": id_column, "label_column": label_column, "columns": columns,
            "inputs": list(encoder.columns) if encoder is not None else [],
            "kinds": dict(encoder.kinds) if encoder is not None else {},
            "encoded_width": encoder.width if encoder is not None else 0}


def id_digest(item: str) -> bytes:
    """The 16-byte BLAKE2b digest of one prepared ID (what a part keeps of its training IDs)."""
    return hashlib.blake2b(item.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def id_digests(ids: Sequence[str]) -> np.ndarray:
    """The sorted, distinct :func:`id_digest` of prepared IDs, as an ``(n, 16)`` uint8 array."""
    joined = b"".join(sorted({id_digest(i) for i in ids}))
    return np.frombuffer(joined, np.uint8).reshape(-1, 16)


def aligned_ids(scenario: Any, party: str, normalize: Sequence[str] = ()) -> list[str]:
    """Party ``party``'s prepared IDs of the rows it shares with every peer in ``scenario`` (as PSI prepares them)."""
    from psi import prepare_ids

    table = scenario.tables[party]
    rows = scenario.alignment.aligned[party]
    return list(prepare_ids([table.ids[i] for i in rows], normalize, duplicates="keep_first",
                            source=f"party {party!r}").items)


def save_part(directory: str | Path, *, party: str, role: str, side_saved: SavedSide, encoder: PartyEncoder | None,
              schema: Mapping[str, Any], method: Method[Any], settings: Mapping[str, Any],
              parties: Mapping[str, str], fingerprint: str, task: str, classes: tuple[str, ...] = (),
              report: Mapping[str, Any] | None = None, overwrite: bool = False,
              training_ids: Sequence[str] | None = None) -> Path:
    """Write party ``party``'s own part under ``directory/<party>/`` (atomically) and return that folder.

    ``parties``: the model's parties (:func:`model_parties`: the active party alone for a standalone method).
    ``training_ids``: a passive party's own prepared IDs of the rows it trained on with its peers (kept as
    digests, so that serving can be restricted to them: ``party --serve --serve-ids training``).
    """
    import torch

    files = {WEIGHTS: tensors_to_bytes(flatten_state(side_saved.weights))}
    if training_ids is not None:
        files[TRAINING_IDS] = tensors_to_bytes({"digests": torch.from_numpy(id_digests(training_ids).copy())})
    if encoder is not None:
        files[PREPROCESSING] = dump_encoder(encoder)
    objective = side_saved.objective
    try:
        json.dumps(side_saved.state, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ModelError(f"{party}'s model state cannot be saved ({exc})") from None
    target_scale = None
    if objective is not None and objective.task == REGRESSION:
        target_scale = {"mean": objective.target_mean, "std": objective.target_std}
    options = method.describe()
    privacy = {"secagg": options.get("secagg", "none"), "defenses": dict(settings.get("defenses", {}))}
    extra: dict[str, Any] = {"train": dict(settings), "labels": objective is not None, "party_order": list(parties),
                             "side": dict(side_saved.state)}
    if method.standalone:
        extra["learns"] = method.standalone_learns(party)
    extra["limits"] = scoring_limits(method)
    manifest = PartManifest(party=party, role=role, method=method.name, job_fingerprint=fingerprint,
                            parties=dict(parties), task=task, schema=dict(schema), options=options, privacy=privacy,
                            standalone=method.standalone,
                            classes=list(classes) if role == "active" and task != REGRESSION else [],
                            target_scale=target_scale, extra=extra)
    return write_part(directory, manifest, files, report=report, overwrite=overwrite)


def saved_side(part: LoadedPart) -> SavedSide:
    """The :class:`SavedSide` a verified part holds (weights, the active party's objective, the side's model state)."""
    where = str(part.path)
    check_saved_state(part.manifest.extra.get("side", {}), where)  # before any tensor is decoded
    if WEIGHTS not in part.files:
        raise ModelError(f"{where}: no {WEIGHTS}")
    weights = unflatten_state(tensors_from_bytes(part.files[WEIGHTS], f"{where}/{WEIGHTS}"), f"{where}/{WEIGHTS}")
    manifest = part.manifest
    objective = None
    if manifest.extra.get("labels"):
        scale = manifest.target_scale or {}
        objective = (Objective(REGRESSION, target_mean=float(scale["mean"]), target_std=float(scale["std"]))
                     if manifest.task == REGRESSION else Objective())
    state = manifest.extra.get("side", {})
    if not isinstance(state, dict):
        raise ModelError(f"{where}: the saved model state is malformed")
    return SavedSide(weights, objective, dict(state))


def saved_training_ids(part: LoadedPart) -> np.ndarray | None:
    """The digests of the party's training IDs a verified part holds (:func:`id_digests`), or None."""
    data = part.files.get(TRAINING_IDS)
    if data is None:
        return None
    where = f"{part.path}/{TRAINING_IDS}"
    tensors = tensors_from_bytes(data, where)
    digests = tensors.get("digests")
    if set(tensors) != {"digests"} or digests is None or digests.dtype.is_floating_point or digests.ndim != 2 \
            or digests.shape[1] != 16:
        raise ModelError(f"{where}: malformed training ID digests")
    return digests.numpy().astype(np.uint8, copy=False)


def saved_encoder(part: LoadedPart) -> PartyEncoder | None:
    """The fitted preprocessing a verified part holds (None for a party without columns of its own)."""
    data = part.files.get(PREPROCESSING)
    return None if data is None else load_encoder(data, where=f"{part.path}/{PREPROCESSING}")


def saved_spec(part: LoadedPart) -> ColumnSpec:
    """How this party's files are read (the column spec of its training)."""
    columns = part.manifest.schema.get("columns")
    if columns is None:
        return ColumnSpec()
    try:
        return ColumnSpec(**columns)
    except (ConfigError, TypeError) as exc:
        raise ModelError(f"{part.path}: the saved column spec is invalid: {exc}") from None

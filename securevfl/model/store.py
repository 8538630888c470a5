"""One party's saved part of a trained model: written atomically, verified on read, never executable.

At the end of a run each party saves only what is its own under ``DIR/<party>/``: its weights
(safetensors), its fitted preprocessing and whatever else the method hands over (opaque bytes
here), a :data:`MANIFEST` that records the job, the method, the party's role and input schema and
the SHA-256 of every file, and a human-readable :data:`CARD` (written first, so its SHA-256 is in the
manifest too and a tampered card is refused like any other file). Nothing of another party is ever in
that folder, so a party can hand its folder to its own deployment without leaking anything.

Why these formats: a ``torch.save`` or pickle file runs code when it is loaded, and a saved
model travels between machines and people. Weights are safetensors (a JSON header plus raw
tensor bytes), the manifest is JSON; neither format can carry code.

Why these checks: a part is read by a party that trusts only its own folder. Every file is
size-checked before it is read and digest-checked after; a file the manifest does not list is
refused (it would otherwise be silently ignored, or silently used by a later version); a part
copied from another party's folder, or saved by another job, is refused with both names.

Atomicity: everything is written into a sibling ``DIR/.<party>.partial-<random>`` folder,
flushed to disk, and renamed into place. Replacing a part renames the old one away first
(``DIR/.<party>.old-<random>``), renames the new one in, then deletes the old one: a failure
at any step leaves either the old part or the new one at ``DIR/<party>``, never a mixture.
(A crash of the machine between the two renames leaves both hidden folders and no
``DIR/<party>``; nothing is deleted automatically, and :func:`read_part` says so.)

Permissions: a part holds a party's model, so its folder is ``0o700`` and its files ``0o600``
whatever the umask; a model folder made here is ``0o700`` too (one the user had keeps its mode).

This module is pure I/O: it imports torch and safetensors only inside the tensor functions, so
listing and verifying parts stays light.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from psi import atomic
from securevfl.checks import validate_party_name
from securevfl.errors import ConfigError, ModelError

if TYPE_CHECKING:
    import torch

#: Version of the on-disk layout. A reader refuses any other number (no silent misreading).
FORMAT_VERSION = 1
#: The manifest's file name inside ``DIR/<party>/``.
MANIFEST = "manifest.json"
#: The model card's file name inside ``DIR/<party>/``.
CARD = "MODEL.md"

#: Largest manifest read (it holds options, schema and class names, never data).
MAX_MANIFEST_BYTES = 1 << 20
#: Largest single file of a part read or written.
MAX_FILE_BYTES = 4 << 30
#: Most files one part may list.
MAX_FILES = 256
#: Most class names (the same bound the deployed setup puts on class counts).
MAX_CLASSES = 100_000
#: Longest short string field (method, versions, a class name, a file name).
MAX_NAME_LENGTH = 256

ROLES = ("active", "passive", "helper")
TASKS = ("classification", "regression")

_FILE_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$")
_HEX = re.compile(r"^[0-9a-f]+$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_RESERVED = {MANIFEST.lower(), CARD.lower()}


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


def _securevfl_version() -> str:
    from securevfl import __version__

    return __version__


@dataclass(frozen=True)
class PartManifest:
    """What one party's saved part is: the job, the method, this party's role, schema and files.

    Build one with everything but ``files`` and ``created`` and give it to :func:`write_part`,
    which fills those two in. ``options``, ``privacy``, ``schema``, ``target_scale`` and ``extra``
    are stored as JSON: they are normalised on construction (tuples become lists, keys strings),
    so a manifest equals the one read back.

    ``standalone`` means the final model is the active party's alone (``local``; a distilled
    student): only the active party saves a part, its ``parties`` lists that party alone, and
    prediction runs without the passive parties. ``classes`` is the active party's class
    names in output order (classification only; ``[]`` at every other party), ``target_scale``
    the regression target's mean/std at the active party (else ``None``).
    """

    party: str
    role: str
    method: str
    job_fingerprint: str
    parties: dict[str, str]
    task: str
    schema: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    privacy: dict[str, Any] = field(default_factory=dict)
    standalone: bool = False
    classes: list[str] = field(default_factory=list)
    target_scale: dict[str, Any] | None = None
    securevfl_version: str = field(default_factory=_securevfl_version)
    torch_version: str = field(default_factory=_torch_version)
    created: str = ""
    files: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        for name in ("schema", "options", "privacy", "extra", "target_scale", "parties", "classes", "files"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _json_copy(value, name))
        problem = _manifest_problem(self)
        if problem:
            raise ModelError(f"part manifest: {problem}")

    def to_json(self) -> bytes:
        """The manifest file's bytes (UTF-8 JSON, keys sorted, readable)."""
        return (json.dumps(asdict(self), indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> PartManifest:
        """Parse and validate a manifest's bytes; every refusal is a ModelError naming ``where``."""
        if len(data) > MAX_MANIFEST_BYTES:
            raise ModelError(f"{where}: manifest is {len(data):,} bytes, more than the {MAX_MANIFEST_BYTES:,} allowed")
        try:
            raw = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise ModelError(f"{where}: not a valid manifest (not JSON: {exc})") from None
        if not isinstance(raw, dict):
            raise ModelError(f"{where}: not a valid manifest (not a JSON object)")
        version = raw.get("format_version")
        if version != FORMAT_VERSION or isinstance(version, bool):
            raise ModelError(f"{where}: saved by an incompatible securevfl (format {version!r}, "
                             f"this reads {FORMAT_VERSION})")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ModelError(f"{where}: unknown manifest field(s) {', '.join(map(repr, unknown[:10]))}")
        missing = sorted(known - set(raw))
        if missing:
            raise ModelError(f"{where}: manifest lacks field(s) {', '.join(missing)}")
        try:
            manifest = cls(**raw)
        except ModelError as exc:
            raise ModelError(f"{where}: {str(exc).removeprefix('part manifest: ')}") from None
        if not manifest.created:
            raise ModelError(f"{where}: manifest field 'created' is empty")
        return manifest


def _json_copy(value: Any, name: str) -> Any:
    """A deep copy of ``value`` through JSON, as the manifest file will hold it."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError, RecursionError) as exc:
        raise ModelError(f"part manifest: field {name!r} is not JSON data ({exc})") from None


def _short(value: object, name: str) -> str | None:
    if not isinstance(value, str) or not value or len(value) > MAX_NAME_LENGTH:
        return f"field {name!r} must be a non-empty string of at most {MAX_NAME_LENGTH} characters"
    return None


def _manifest_problem(m: PartManifest) -> str | None:
    """The first thing wrong with a manifest's fields, or None."""
    if not isinstance(m.format_version, int) or isinstance(m.format_version, bool) \
            or m.format_version != FORMAT_VERSION:
        return f"saved by an incompatible securevfl (format {m.format_version!r}, this reads {FORMAT_VERSION})"
    for name in ("method", "securevfl_version", "torch_version"):
        problem = _short(getattr(m, name), name)
        if problem:
            return problem
    try:
        validate_party_name(m.party)
    except ValueError as exc:
        return f"field 'party': {exc}"
    if m.role not in ROLES:
        return f"field 'role' is {m.role!r}, not one of {', '.join(ROLES)}"
    if m.task not in TASKS:
        return f"field 'task' is {m.task!r}, not one of {', '.join(TASKS)}"
    if not isinstance(m.job_fingerprint, str) or not 8 <= len(m.job_fingerprint) <= 128 \
            or not _HEX.match(m.job_fingerprint):
        return "field 'job_fingerprint' must be 8 to 128 lowercase hex digits"
    if not isinstance(m.parties, dict) or not m.parties or len(m.parties) > 1000:
        return "field 'parties' must map 1 to 1000 party names to roles"
    for name, role in m.parties.items():
        try:
            validate_party_name(name)
        except ValueError as exc:
            return f"field 'parties': {exc}"
        if role not in ROLES:
            return f"field 'parties': role of {name} is {role!r}, not one of {', '.join(ROLES)}"
    if m.parties.get(m.party) != m.role:
        return f"field 'parties' must list {m.party} as {m.role} (it lists {m.parties.get(m.party)!r})"
    actives = [p for p, r in m.parties.items() if r == "active"]
    if len(actives) != 1:
        return f"field 'parties' must name exactly one active party (it names {len(actives)})"
    if not isinstance(m.standalone, bool):
        return "field 'standalone' must be true or false"
    if m.standalone and (m.role != "active" or len(m.parties) != 1):
        return "a standalone model is the active party's alone: its one part lists only that party"
    for name in ("schema", "options", "privacy", "extra"):
        if not isinstance(getattr(m, name), dict):
            return f"field {name!r} must be a JSON object"
    if not isinstance(m.classes, list) or len(m.classes) > MAX_CLASSES:
        return f"field 'classes' must be a list of at most {MAX_CLASSES:,} names"
    if any(not isinstance(c, str) or len(c) > MAX_NAME_LENGTH for c in m.classes):
        return f"field 'classes' must hold strings of at most {MAX_NAME_LENGTH} characters"
    if len(set(m.classes)) != len(m.classes):
        return "field 'classes' repeats a class name"
    has_labels = m.role == "active" and m.task == "classification"
    if has_labels and not m.classes:
        return "field 'classes' is empty at the active party of a classification model"
    if m.classes and not has_labels:
        return f"field 'classes' must be empty at a {m.role} party of a {m.task} model"
    if m.target_scale is not None:
        if not (m.role == "active" and m.task == "regression"):
            return "field 'target_scale' is only for the active party of a regression model"
        if not isinstance(m.target_scale, dict):
            return "field 'target_scale' must be a JSON object or null"
    if not isinstance(m.created, str) or len(m.created) > 64:
        return "field 'created' must be an ISO-8601 time"
    if m.created:
        try:
            datetime.fromisoformat(m.created)
        except ValueError:
            return f"field 'created' is {m.created!r}, not an ISO-8601 time"
    if not isinstance(m.files, dict) or len(m.files) > MAX_FILES:
        return f"field 'files' must map at most {MAX_FILES} file names to SHA-256 digests"
    for name, digest in m.files.items():
        problem = None if name == CARD else _file_name_problem(name)  # the card is listed by the store itself
        if problem:
            return f"field 'files': {problem}"
        if not isinstance(digest, str) or not _SHA256.match(digest):
            return f"field 'files': digest of {name} is not a SHA-256 hex digest"
    return None


def _file_name_problem(name: object) -> str | None:
    if not isinstance(name, str) or not _FILE_NAME.match(name):
        return (f"file name {name!r} is not simple (1 to 128 letters, digits, '.', '-', '_'; "
                "not starting with '.')")
    if name.lower() in _RESERVED:
        return f"file name {name!r} is reserved for the part's {name}"
    return None


# ---------------------------------------------------------------------------------------------
# Tensors


def tensors_to_bytes(tensors: Mapping[str, torch.Tensor]) -> bytes:
    """The safetensors bytes of named tensors (copied to CPU, contiguous, no shared storage)."""
    import torch
    from safetensors.torch import save

    plain: dict[str, torch.Tensor] = {}
    for name, tensor in tensors.items():
        if not isinstance(name, str) or not name:
            raise ModelError(f"tensor name {name!r} is not a non-empty string")
        if not isinstance(tensor, torch.Tensor):
            raise ModelError(f"tensor {name!r} is a {type(tensor).__name__}, not a torch.Tensor")
        # clone: safetensors refuses tensors that share storage (tied weights, views).
        plain[name] = tensor.detach().to("cpu").contiguous().clone()
    return save(plain)


def tensors_from_bytes(data: bytes, where: str) -> dict[str, torch.Tensor]:
    """Named tensors from safetensors bytes; anything malformed is a ModelError naming ``where``.

    safetensors parses a bounded JSON header and copies raw numbers: no code runs, whatever the bytes.
    """
    from safetensors.torch import load

    try:
        return dict(load(bytes(data)))
    except Exception as exc:  # safetensors raises SafetensorError and others for malformed bytes
        raise ModelError(f"{where} is not a valid safetensors file: {exc}") from None


def flatten_state(modules: Mapping[str, Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """One flat ``{"module.param": tensor}`` map of several modules' state dicts, for one weights file.

    Module names must not contain '.', parameter names may (``layers.0.weight``):
    :func:`unflatten_state` splits on the first dot only.
    """
    flat: dict[str, torch.Tensor] = {}
    for module, state in modules.items():
        if not isinstance(module, str) or not module or "." in module:
            raise ModelError(f"module name {module!r} must be a non-empty string without '.'")
        for param, tensor in state.items():
            flat[f"{module}.{param}"] = tensor
    return flat


def unflatten_state(tensors: Mapping[str, torch.Tensor], where: str = "weights") -> dict[str, dict[str, torch.Tensor]]:
    """The inverse of :func:`flatten_state`: split each key on its FIRST dot into module and parameter."""
    modules: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        module, dot, param = key.partition(".")
        if not dot or not module or not param:
            raise ModelError(f"{where}: tensor {key!r} is not named 'module.parameter'")
        modules.setdefault(module, {})[param] = tensor
    return modules


# ---------------------------------------------------------------------------------------------
# Parts on disk


@dataclass(frozen=True)
class LoadedPart:
    """A verified part: its manifest, its files' bytes (digests checked) and its folder."""

    manifest: PartManifest
    files: dict[str, bytes]
    path: Path


def _fsync_dir(path: Path) -> None:
    """Persist a folder's entries (renames, new files); a no-op where folders cannot be opened (Windows)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_new(path: Path, data: bytes) -> None:
    """Write a new owner-only file and flush it to disk (the folder is fsynced by the caller)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), atomic.PRIVATE_FILE)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


def _describe(manifest: PartManifest) -> str:
    return f"{manifest.method}, job {manifest.job_fingerprint[:8]}…, created {manifest.created}"


def write_part(directory: str | os.PathLike[str], manifest: PartManifest, files: Mapping[str, bytes], *,
               report: Mapping[str, Any] | None = None, overwrite: bool = False) -> Path:
    """Save one party's part under ``directory/<manifest.party>/``, atomically; returns that folder.

    ``manifest`` is everything but ``files`` and ``created``, filled in here (the digests over
    exactly the bytes written, the time now in UTC). The card is :func:`model_card` of the final
    manifest and ``report`` (a run report's dict), so it always lists the digests on disk; it is made
    first and its own digest goes into the manifest, checked on load like every other file. A
    folder that already holds a part is refused unless ``overwrite``; a folder that exists but
    holds no part (anything else) is always refused, never deleted.
    """
    party = validate_party_name(manifest.party)
    if not isinstance(files, Mapping) or len(files) > MAX_FILES:
        raise ModelError(f"a part holds at most {MAX_FILES} files")
    for name, data in files.items():
        problem = _file_name_problem(name)
        if problem:
            raise ModelError(f"cannot save the part of {party}: {problem}")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise ModelError(f"cannot save the part of {party}: {name} is a {type(data).__name__}, not bytes")
        if memoryview(data).nbytes > MAX_FILE_BYTES:
            raise ModelError(f"cannot save the part of {party}: {name} is {memoryview(data).nbytes:,} bytes, "
                             f"more than the {MAX_FILE_BYTES:,} allowed")
    final = replace(manifest,
                    files={name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())},
                    created=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    card = model_card(final, report).encode()
    final = replace(final, files={**final.files, CARD: hashlib.sha256(card).hexdigest()})

    root = Path(directory)
    atomic.make_dirs(root)  # owner-only when made here (an existing folder keeps its mode)
    target = root / party
    existing = _existing_part(target, overwrite)

    token = secrets.token_hex(6)
    partial = root / f".{party}.partial-{token}"
    old = root / f".{party}.old-{token}"
    partial.mkdir(mode=atomic.PRIVATE_DIR)
    os.chmod(partial, atomic.PRIVATE_DIR)  # becomes DIR/<party>: only the owner lists or enters it
    try:
        for name, data in files.items():
            _write_new(partial / name, data)
        _write_new(partial / MANIFEST, final.to_json())
        _write_new(partial / CARD, card)
        _fsync_dir(partial)
        if existing:
            os.rename(target, old)
            try:
                os.rename(partial, target)
            except BaseException:
                os.rename(old, target)
                raise
        else:
            if target.is_dir():  # an empty folder (checked above): take its place
                target.rmdir()
            os.rename(partial, target)
        _fsync_dir(root)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if existing:
        shutil.rmtree(old, ignore_errors=True)
    return target


def _existing_part(target: Path, overwrite: bool) -> bool:
    """Whether ``target`` holds a part to replace; refuses what must not be replaced."""
    if not target.exists() and not target.is_symlink():
        return False
    if target.is_symlink() or not target.is_dir():
        raise ModelError(f"{target} exists and is not a folder; choose another model folder")
    if not (target / MANIFEST).exists():
        if any(target.iterdir()):
            raise ModelError(f"{target} exists and holds no saved model (no {MANIFEST}); "
                             "choose another model folder (nothing there is replaced)")
        return False
    if overwrite:
        return True
    try:
        held = f" ({_describe(_read_manifest(target))})"
    except ModelError:
        held = " (its manifest is unreadable)"
    raise ModelError(f"{target} already holds a model{held}; pass --overwrite-model to replace it")


def _read_bounded(path: Path, limit: int, what: str) -> bytes:
    """The bytes of a regular file no larger than ``limit``, checked before reading it whole.

    A symlink, FIFO or device is refused (it could point outside the part or never end); the
    size is checked on the opened file itself, so a file swapped in after the check is caught too.
    """
    try:
        info = path.lstat()
    except FileNotFoundError:
        raise ModelError(f"{path} is missing ({what})") from None
    if not stat.S_ISREG(info.st_mode):
        raise ModelError(f"{path} is not a regular file ({what})")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        raise ModelError(f"{path} cannot be read ({what}): {exc.strerror}") from None
    with os.fdopen(fd, "rb") as source:
        opened = os.fstat(source.fileno())
        if not stat.S_ISREG(opened.st_mode):
            raise ModelError(f"{path} is not a regular file ({what})")
        if opened.st_size > limit:
            raise ModelError(f"{path} is {opened.st_size:,} bytes, more than the {limit:,} allowed ({what})")
        data = source.read(limit + 1)
    if len(data) > limit:  # grew since the check
        raise ModelError(f"{path} is more than the {limit:,} bytes allowed ({what})")
    return data


def _read_manifest(folder: Path) -> PartManifest:
    path = folder / MANIFEST
    return PartManifest.from_json(_read_bounded(path, MAX_MANIFEST_BYTES, "the part's manifest"), str(path))


def _saved_parties(root: Path) -> list[str]:
    """Party folders under ``root`` that hold a manifest (unverified: for messages)."""
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir()
                  if not p.name.startswith(".") and p.is_dir() and (p / MANIFEST).is_file())


def read_part(directory: str | os.PathLike[str], party: str, *, job_fingerprint: str | None = None,
              method: str | None = None) -> LoadedPart:
    """Read and verify ``directory/<party>/``: manifest, job, every file's size and digest.

    Refused, each with a ModelError naming the file or field: no such part, a manifest of another
    format, party, job or method, a listed file missing, too large, tampered or truncated, and a
    file the manifest does not list.
    """
    party = validate_party_name(party)
    root = Path(directory)
    folder = root / party
    if not folder.is_dir() or folder.is_symlink():
        saved = _saved_parties(root)
        listed = f"parties saved: {', '.join(saved)}" if saved else "no party saved there"
        interrupted = sorted(p.name for p in root.glob(f".{party}.old-*")) if root.is_dir() else []
        hint = f"; an interrupted overwrite left {', '.join(interrupted)} there" if interrupted else ""
        raise ModelError(f"no part for {party} in {root} ({listed}){hint}")
    manifest = _read_manifest(folder)
    where = folder / MANIFEST
    if manifest.party != party:
        raise ModelError(f"{where} is the part of {manifest.party}, not of {party} "
                         "(copied from another party's folder?)")
    if job_fingerprint is not None and manifest.job_fingerprint != job_fingerprint:
        raise ModelError(f"{where} was saved by job {manifest.job_fingerprint[:12]}…, "
                         f"not this job {job_fingerprint[:12]}…")
    if method is not None and manifest.method != method:
        raise ModelError(f"{where} is a {manifest.method} model, not {method}")
    unexpected = sorted(set(os.listdir(folder)) - set(manifest.files) - {MANIFEST})
    if unexpected:
        raise ModelError(f"{folder} holds file(s) its manifest does not list: {', '.join(unexpected[:10])}")
    if CARD not in manifest.files:
        raise ModelError(f"{where} lists no SHA-256 for {CARD} (saved by an older securevfl?); save the model again")
    data: dict[str, bytes] = {}
    for name, digest in manifest.files.items():
        path = folder / name
        content = _read_bounded(path, MAX_FILE_BYTES, f"listed in {MANIFEST}")
        if hashlib.sha256(content).hexdigest() != digest:
            raise ModelError(f"{path} does not match its SHA-256 in {MANIFEST} (tampered, truncated or "
                             "from another save)")
        if name != CARD:  # checked, not returned: the card is for people
            data[name] = content
    return LoadedPart(manifest=manifest, files=data, path=folder)


def list_parts(directory: str | os.PathLike[str]) -> dict[str, PartManifest]:
    """The manifests of the parts saved under ``directory`` (by party; files not verified here).

    Hidden folders (partial or replaced parts) and folders without a manifest are skipped; a
    manifest that is unreadable or names another party is a ModelError.
    """
    root = Path(directory)
    found: dict[str, PartManifest] = {}
    for name in _saved_parties(root):
        manifest = _read_manifest(root / name)
        if manifest.party != name:
            raise ModelError(f"{root / name / MANIFEST} is the part of {manifest.party}, not of {name} "
                             "(copied from another party's folder?)")
        found[name] = manifest
    return found


def check_model_dir(directory: str | Path, overwrite: bool, party: str | None = None) -> None:
    """Refuse, before any training, a model directory that holds a model unless ``overwrite``.

    ``party``: only that party's part counts (a deployed party writes only its own).
    """
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--model-dir {path} exists and is not a directory")
    if overwrite or not path.is_dir():
        return
    present = {p: m for p, m in list_parts(path).items() if party is None or p == party}
    if present:
        first = next(iter(present.values()))
        raise ModelError(f"{path} already holds a model ({first.method}, parts {', '.join(sorted(present))}, "
                         f"created {first.created}); pass --overwrite-model to replace it")



def check_same_model(manifests: Mapping[str, PartManifest]) -> None:
    """Refuse parts that are not of one model: job, method, parties, task and standalone must agree."""
    if not manifests:
        raise ModelError("no saved parts to check")
    (first, reference), *others = sorted(manifests.items())
    for party, manifest in others:
        for key in ("job_fingerprint", "method", "parties", "task", "standalone"):
            mine, theirs = getattr(reference, key), getattr(manifest, key)
            if mine != theirs:
                raise ModelError(f"the parts of {first} and {party} are not of one model: "
                                 f"{key} is {_shown(mine)} at {first}, {_shown(theirs)} at {party}")
    for party, manifest in manifests.items():
        if manifest.party != party or party not in reference.parties:
            raise ModelError(f"the part given as {party} is of {manifest.party}, a party the model "
                             f"{'has' if manifest.party in reference.parties else 'does not have'}")


def _shown(value: Any) -> str:
    if isinstance(value, str) and len(value) > 16:
        return value[:12] + "…"
    if isinstance(value, dict):
        return ", ".join(f"{k} ({v})" for k, v in value.items())
    return str(value)


# ---------------------------------------------------------------------------------------------
# The model card


def model_card(manifest: PartManifest, report: Mapping[str, Any] | None) -> str:
    """The part's MODEL.md: what the model is, this party's role and inputs, the run's results, versions, files.

    ``report`` is a run report's dict (:meth:`RunReport.to_dict`); only ``metrics``, ``parties`` and
    ``notes`` are read, each optional. ``manifest.extra["learns"]`` (text), when present, says what
    each party learned.
    """
    m = manifest
    report = report or {}
    lines = [f"# securevfl model part: {m.party} ({m.role})", ""]
    kind = "the active party's model alone (predicts without the passive parties)" if m.standalone \
        else "a vertical model split across the parties (predicting needs every party's part)"
    held = "its weights, its fitted preprocessing, its input schema" + (
        ", the top model and the class names" if m.role == "active" else "")
    lines += [f"A **{m.method}** {m.task} model, {kind}. This folder holds only {m.party}'s part: {held}.", ""]
    lines += ["| | |", "|---|---|", f"| method | {m.method} |", f"| task | {m.task} |",
              f"| job fingerprint | `{m.job_fingerprint}` |",
              "| parties | " + ", ".join(f"{p} ({r})" for p, r in sorted(m.parties.items())) + " |"]
    if m.classes:
        shown = ", ".join(m.classes[:40]) + (f" ... ({len(m.classes)} in all)" if len(m.classes) > 40 else "")
        lines.append(f"| classes (output order) | {_cell(shown)} |")
    if m.target_scale is not None:
        lines.append(f"| target scale | {_cell(_inline(m.target_scale))} |")
    lines += ["", "## Options and privacy", ""]
    lines += [f"- {k}: {_setting_value(v)}" for k, v in m.options.items()] or ["- method defaults"]
    lines += [f"- privacy {k}: {_inline(v) if v not in (None, '', [], {}) else 'none'}" for k, v in m.privacy.items()] \
        or ["- privacy: none recorded"]
    train = m.extra.get("train")
    if isinstance(train, Mapping) and train:
        lines += ["", "## Training settings", ""]
        lines += [f"- {k}: {_setting_value(v)}" for k, v in train.items() if k not in ("options", "defenses")]
    lines += ["", f"## Inputs of {m.party}", ""]
    lines += [f"- {k}: {_listed(v)}" for k, v in m.schema.items()] or ["- none (this party holds no data)"]
    parties = report.get("parties") or {}
    if isinstance(parties, Mapping) and parties:
        lines += ["", "## Data per party (training run)", "",
                  "| party | rows | features | aligned |", "|---|---|---|---|"]
        for name, p in parties.items():
            if isinstance(p, Mapping):
                lines.append("| " + " | ".join(_cell(str(v)) for v in (name, p.get("rows", ""), p.get("features", ""),
                                                                       p.get("aligned", ""))) + " |")
    metrics = report.get("metrics") or {}
    if isinstance(metrics, Mapping):
        scalar = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if scalar:
            lines += ["", "## Test metrics", "", "| metric | value |", "|---|---|"]
            lines += [f"| {_cell(str(k))} | {v:.4f} |" if isinstance(v, float) else f"| {_cell(str(k))} | {v} |"
                      for k, v in scalar.items()]
        coverage = metrics.get("coverage")
        if isinstance(coverage, Mapping) and coverage:
            lines += ["", "## Test metrics per coverage pattern (which parties hold the row)", "",
                      "| parties holding the row | rows | metrics |", "|---|---|---|"]
            for pattern, entry in coverage.items():
                if isinstance(entry, Mapping):
                    shown = ", ".join(f"{k} {v:.4f}" for k, v in entry.items()
                                      if isinstance(v, float) and k != "rows")
                    lines.append(f"| {_cell(str(pattern))} | {entry.get('rows', '')} | {_cell(shown)} |")
    extra_report = report.get("extra") or {}
    selection = extra_report.get("selection") if isinstance(extra_report, Mapping) else None
    if isinstance(selection, Mapping) and isinstance(selection.get("parties"), Mapping):
        lines += ["", f"## Columns selected before training (--select {_cell(str(selection.get('rule', '')))})", ""]
        for name, entry in selection["parties"].items():
            if isinstance(entry, Mapping):
                dropped = entry.get("dropped_columns")
                names = f": {', '.join(map(str, dropped))}" if isinstance(dropped, list) and dropped else ""
                lines.append(f"- {name}: kept {entry.get('kept')}, dropped {entry.get('dropped')}{names}")
    limits = m.extra.get("limits")
    if isinstance(limits, list) and limits:
        lines += ["", "## Limits", ""] + [f"- {_inline(text)}" for text in limits]
        lines.append("- probabilities are the model's own (no calibration step is run): check them against "
                     "observed rates before reading them as such")
    learns = m.extra.get("learns")
    notes = [str(n) for n in report.get("notes") or [] if isinstance(n, str)]
    if isinstance(learns, str) and learns or notes:
        lines += ["", "## What each party learned", ""]
        if isinstance(learns, str) and learns:
            lines += [learns, ""]
        lines += [f"- {n}" for n in notes]
    lines += ["", "## Provenance", "", f"- securevfl {m.securevfl_version}, torch {m.torch_version}, "
              f"format {m.format_version}", f"- created {m.created or '(not yet saved)'}", "",
              "## Files (SHA-256, checked on every load)", ""]
    lines += [f"- `{name}`: `{digest}`" for name, digest in m.files.items() if name != CARD] or ["- none"]
    lines.append(f"- `{CARD}` (this card): its SHA-256 is in `{MANIFEST}`")
    return "\n".join(lines).rstrip("\n") + "\n"


def _setting_value(value: Any) -> str:
    """A setting's value on one line; an empty one says it is the method's default."""
    if value is None or value == "" or value == [] or value == {}:
        return "(the method's default)"
    return _inline(value)


def _listed(value: Any) -> str:
    """A schema entry in full on one line (every column named): a list of names, or a mapping as JSON."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return f"{len(value)}: " + ", ".join(value) if value else "none"
    if isinstance(value, (dict, list)):
        return " ".join(json.dumps(value, sort_keys=True).split())
    return _inline(value)


def _inline(value: Any) -> str:
    """A value on one line, at most 200 characters."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    text = " ".join(text.split())
    return text if len(text) <= 200 else text[:197] + "..."


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


__all__ = [
    "CARD",
    "FORMAT_VERSION",
    "MANIFEST",
    "LoadedPart",
    "PartManifest",
    "check_same_model",
    "flatten_state",
    "list_parts",
    "model_card",
    "read_part",
    "tensors_from_bytes",
    "tensors_to_bytes",
    "unflatten_state",
    "write_part",
]

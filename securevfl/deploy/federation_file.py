"""The federation file: who the parties are, where they listen, which TLS material they use, and the job.

A federation file is TOML (see docs/deploy.md for the complete format). Every organisation runs its
own process with the same file; :func:`job_fingerprint` reduces everything the parties must agree on
to one SHA-256 so they can compare it before any data message flows, and :func:`job_differences`
names the keys that differ when they do not agree.

Pure parsing and validation: :func:`parse_federation` takes text, :func:`load_federation` reads the
file. Every mistake is a :class:`~securevfl.errors.ConfigError` naming the file, the section and
the key; unknown keys are refused with the valid keys of their section, so a typo never silently
falls back to a default.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from psi.errors import PSIConfigError
from psi.ids import parse_normalize
from psi.protocol import Mode
from securevfl.checks import read_local_file, validate_party_name
from securevfl.data.columns import ColumnSpec, column_spec_from_dict
from securevfl.deploy.threads import check_threads
from securevfl.errors import ConfigError
from securevfl.federation.network import NetworkSettings, is_loopback, split_address
from securevfl.run_config import RUN_SETTINGS, RunConfig, run_config
from securevfl.settings import Setting, check_declared, one_of, setting, settings_of

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

FINGERPRINT_FORMAT = 1

#: A party name is also its TLS identity (the certificate's DNS name): the shared DNS-safe rule.
check_party_name = validate_party_name


# ------------------------------------------------------------------ value checks


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


def _positive_int(where: str, value: Any) -> int:
    if not _is_int(value) or value < 1:
        raise ConfigError(f"{where} must be a positive integer, got {value!r}")
    return int(value)


def _positive_float(where: str, value: Any) -> float:
    if not _is_number(value) or value <= 0:
        raise ConfigError(f"{where} must be a positive number, got {value!r}")
    return float(value)


def _check_json_value(where: str, value: Any) -> None:
    """Refuse values without one canonical JSON form (dates, NaN), so the fingerprint is well defined."""
    if isinstance(value, dict):
        for key, item in value.items():
            _check_json_value(f"{where}.{key}", item)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_json_value(f"{where}[{i}]", item)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"{where} must be a finite number, got {value!r}")
    elif not isinstance(value, (str, int, bool)):
        raise ConfigError(f"{where}: values of type {type(value).__name__} are not supported; use a string")


# ------------------------------------------------------------------ the sections


@dataclass(frozen=True)
class PartySpec:
    """One party: its name (also its TLS identity), the address it listens on, its certificate and key.

    ``address`` is ``None`` for a party that does not listen: every party but the active one in the
    star topology (it only dials out to the active party).

    ``cert`` and ``key`` are ``None`` only in an insecure (plaintext, loopback-only) federation.
    ``columns`` (``[parties.<name>.columns]``) says how this party reads and encodes its own table; it is
    local to that party — not part of the job fingerprint — so an organisation may keep it in its own
    copy of the file or pass it on its own command line instead (``securevfl party --categorical ...``).
    ``threads`` (local too): the torch threads of this party's process (:mod:`securevfl.deploy.threads`;
    by default this machine's cores shared among the parties the file lists on its host).
    """

    name: str
    address: str | None
    cert: Path | None = None
    key: Path | None = None
    data: bool = True
    columns: ColumnSpec = field(default_factory=ColumnSpec)
    threads: int | None = None

    def __post_init__(self) -> None:
        check_party_name(self.name)
        if self.threads is not None:
            check_threads(self.threads, f"[parties.{self.name}] threads")
        if not isinstance(self.data, bool):
            raise ConfigError(f"[parties.{self.name}] data must be true or false, got {self.data!r}")
        if not isinstance(self.columns, ColumnSpec):
            raise ConfigError(f"[parties.{self.name}.columns] must be a table of column settings")
        if not self.data and self.columns != ColumnSpec():
            raise ConfigError(f"[parties.{self.name}] has data = false: it has no columns to describe")
        try:
            if self.address is not None:
                split_address(self.address)
        except ConfigError as exc:
            raise ConfigError(f"[parties.{self.name}] {exc}") from None


@dataclass(frozen=True)
class TlsSpec:
    """Where the TLS material lives: the default directory of party files and the federation CA.

    ``dir_text`` and ``ca_text``: the values as the file wrote them (``None``: not set), for messages.
    """

    dir: Path
    ca: Path
    dir_text: str | None = field(default=None, compare=False)
    ca_text: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class PsiSettings:
    """How PSI prepares and matches the parties' IDs: the ``[job]`` keys beyond the run's settings (docs/psi.md)."""

    normalize: tuple[str, ...] = setting(
        (), job=True, help="How every party prepares its IDs before PSI: a list of strip, casefold, nfc.")
    psi_mode: str = setting("both", job=True, rule=one_of(*(m.value for m in Mode)),
                            help="Who learns the intersection: both (training needs it) | active_only | cardinality.")

    def __post_init__(self) -> None:
        check_declared(self)
        if isinstance(self.normalize, str) or not isinstance(self.normalize, (list, tuple)):
            raise ConfigError(f"normalize must be a list such as ['strip', 'casefold'], got {self.normalize!r}")
        try:
            object.__setattr__(self, "normalize", parse_normalize(self.normalize))
        except (PSIConfigError, AttributeError):
            raise ConfigError(f"normalize: invalid {self.normalize!r}; choose from strip, casefold, nfc") from None


#: Every ``[job]`` key, declared once: the run's settings marked ``job`` (:data:`RUN_SETTINGS`) and PSI's.
JOB_SETTINGS: tuple[Setting, ...] = (*(s for s in RUN_SETTINGS if s.info.job), *settings_of(PsiSettings))
_PSI_KEYS = tuple(f.name for f in fields(PsiSettings))


@dataclass(frozen=True)
class JobSpec:
    """The training job every party must agree on (the ``[job]`` section).

    Its keys are the run's settings marked ``job`` in their one declaration (:mod:`securevfl.run_config`:
    the same names as the API's keywords, the CLI's flags and the report's keys) and PSI's
    (:class:`PsiSettings`); ``run`` holds them as the :class:`~securevfl.run_config.RunConfig` every party
    builds its own run from, each value checked by its declaration. ``method`` is a registry name and
    ``options`` its method options, checked by the method, not here. Checkpoint directories, model
    folders and the device are each party's own (``securevfl party``).
    """

    run: RunConfig
    psi: PsiSettings = field(default_factory=PsiSettings)
    #: The keys the file sets (None: every key counts as set). The settings it leaves out take the
    #: method's own defaults where it has some (:meth:`effective`).
    given: frozenset[str] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, table: Mapping[str, Any], *, given: bool = True) -> JobSpec:
        """The job of a ``[job]`` table: known keys only, the three required, each value checked (``[job] KEY ...``)."""
        _check_keys("[job]", table, JOB_KEYS)
        missing = [k for k in _JOB_REQUIRED if k not in table]
        if missing:
            raise ConfigError(f"[job] needs {', '.join(repr(k) for k in missing)}")
        options = table.get("options", {})
        if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
            raise ConfigError(f"[job.options] must be a table, got {options!r}")
        _check_json_value("[job.options]", dict(options))
        values = {k: v for k, v in table.items() if k not in _PSI_KEYS}
        values["options"] = json.loads(json.dumps(dict(options)))  # a private deep copy
        for name in _JOB_REQUIRED:
            if not isinstance(values[name], str) or not values[name].strip():
                raise ConfigError(f"[job] {name} must be a non-empty string, got {values[name]!r}")
        try:
            run = run_config(method_defaults=False, dataset="federation", **values)
            psi = PsiSettings(**{k: v for k, v in table.items() if k in _PSI_KEYS})
        except ConfigError as exc:
            raise ConfigError(f"[job] {exc}") from None
        return cls(run, psi, frozenset(table) if given else None)

    @property
    def method(self) -> str:
        return self.run.method

    @property
    def id_column(self) -> str:
        return self.run.dataset_options.id_column or ""

    @property
    def label_column(self) -> str:
        return self.run.dataset_options.label_column or ""

    def as_dict(self) -> dict[str, Any]:
        """Every key, defaults filled in, as plain JSON types (lists, not tuples)."""
        out: dict[str, Any] = {}
        for s in JOB_SETTINGS:
            node: Any = self.psi if s.name in _PSI_KEYS else self.run
            for part in s.path:
                node = getattr(node, part)
            out[s.name] = json.loads(json.dumps(node)) if isinstance(node, (tuple, Mapping)) else node
        return out

    def effective(self) -> dict[str, Any]:
        """:meth:`as_dict` with the method's own defaults (``Method.run_defaults``) for the keys the file leaves out.

        What the parties train with, so what they compare (:func:`job_fingerprint`). An unknown method has
        none here (it is refused when the method is built).
        """
        out = self.as_dict()
        if self.given is None:
            return out
        from securevfl.methods import method_class  # torch: only once a party is about to train or score

        try:
            defaults = method_class(self.method).run_defaults
        except ConfigError:
            return out
        out.update({k: list(v) if isinstance(v, tuple) else v for k, v in defaults.items() if k not in self.given})
        return out


@dataclass(frozen=True)
class Federation:
    """A parsed federation file. ``tls`` is ``None`` exactly when ``insecure`` is set."""

    active: str
    parties: dict[str, PartySpec]
    tls: TlsSpec | None
    insecure: bool
    job: JobSpec
    limits: NetworkSettings = field(default_factory=NetworkSettings)
    source: Path | None = None
    topology: str = "mesh"

    def __post_init__(self) -> None:
        if len(self.parties) < 2:
            raise ConfigError(f"a federation needs at least 2 parties, got {len(self.parties)}")
        folded: dict[str, str] = {}
        for key, spec in self.parties.items():
            if key != spec.name:
                raise ConfigError(f"party {key!r} holds the spec of {spec.name!r}")
            other = folded.setdefault(key.casefold(), key)
            if other != key:  # TLS host names are case-insensitive: these would be one identity
                raise ConfigError(f"party names {other!r} and {key!r} differ only in case; "
                                  "certificates could not tell them apart")
        if self.active not in self.parties:
            raise ConfigError(f"[federation] active = {self.active!r} is not a party; "
                              f"parties: {', '.join(sorted(self.parties))}")
        if not self.parties[self.active].data:
            raise ConfigError(f"the active party {self.active!r} holds the labels: it cannot be data = false")
        if len(self.data_parties) < 2:
            raise ConfigError("a federation needs at least 2 parties with data (data = true)")
        if self.topology not in TOPOLOGIES:
            raise ConfigError(f"[federation] topology must be one of {', '.join(TOPOLOGIES)}, got {self.topology!r}")
        if self.parties[self.active].address is None:
            raise ConfigError(f"[parties.{self.active}] needs 'address' (host:port): the active party listens "
                              f"in every topology")
        listening = [n for n, spec in self.parties.items() if spec.address is not None and n != self.active]
        if self.topology == "star" and listening:
            raise ConfigError(f"[federation] topology = \"star\": only the active party {self.active!r} listens; "
                              f"remove 'address' from [parties.{listening[0]}]"
                              + (f" (and {', '.join(listening[1:])})" if listening[1:] else "")
                              + " or set topology = \"mesh\"")
        silent = [n for n, spec in self.parties.items() if spec.address is None]
        if self.topology == "mesh" and silent:
            raise ConfigError(f"[parties.{silent[0]}] needs 'address' (host:port) in a mesh federation (every party "
                              "listens); or leave out every address but the active party's (star topology)")
        seen: dict[tuple[str, int], str] = {}
        for spec in self.parties.values():
            if spec.address is None:
                continue
            host, port = split_address(spec.address)
            other = seen.setdefault((host.lower(), port), spec.name)
            if other != spec.name:
                raise ConfigError(f"parties {other!r} and {spec.name!r} have the same address {spec.address!r}")
        if not isinstance(self.insecure, bool):
            raise ConfigError(f"[federation] insecure must be true or false, got {self.insecure!r}")
        if self.insecure:
            if self.tls is not None:
                raise ConfigError("[federation] insecure = true conflicts with the [tls] section; remove one")
            remote = [f"{s.name} ({s.address})" for s in self.parties.values()
                      if s.address is not None and not is_loopback(s.address)]
            if remote:
                raise ConfigError("[federation] insecure = true (plaintext) is only allowed when every party is "
                                  f"on loopback (127.0.0.0/8, localhost); not on loopback: {', '.join(remote)}")
        elif self.tls is None:
            raise ConfigError("a [tls] section is required (set [federation] insecure = true only for a "
                              "plaintext trial with every party on loopback)")
        else:
            missing = [s.name for s in self.parties.values() if s.cert is None or s.key is None]
            if missing:
                raise ConfigError(f"no certificate or key path for parties {', '.join(missing)}")

    def party(self, name: str) -> PartySpec:
        """The spec of party ``name``, or a :class:`ConfigError` listing the parties."""
        if name not in self.parties:
            where = f" in {self.source}" if self.source else ""
            raise ConfigError(f"{name!r} is not a party{where}; parties: {', '.join(sorted(self.parties))}")
        return self.parties[name]

    @property
    def data_parties(self) -> tuple[str, ...]:
        """Parties with a table (they run PSI and train); the others are helpers (an arbiter, a server)."""
        return tuple(name for name, spec in self.parties.items() if spec.data)

    @property
    def addresses(self) -> dict[str, str | None]:
        """Party name -> ``host:port`` (``None``: the party does not listen, star topology)."""
        return {name: spec.address for name, spec in self.parties.items()}


# ------------------------------------------------------------------ parsing

_SECTIONS = ("federation", "parties", "tls", "network", "job")
_FEDERATION_KEYS = ("active", "insecure", "topology")
#: ``mesh``: every party listens and dials every other; ``star``: only the active party listens, the others dial
#: out to it and it relays what they send each other, sealed end to end (docs/deploy.md).
TOPOLOGIES = ("mesh", "star")
_PARTY_KEYS = ("address", "cert", "key", "data", "columns", "threads")
_TLS_KEYS = ("dir", "ca")
_NETWORK_KEYS = tuple(f.name for f in fields(NetworkSettings))
#: The ``[job]`` keys (:data:`JOB_SETTINGS`), and those a file must set.
JOB_KEYS = tuple(s.name for s in JOB_SETTINGS)
_JOB_REQUIRED = ("method", "id_column", "label_column")


def _table(where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a table (a [section]), got {value!r}")
    return value


def _check_keys(where: str, table: Mapping[str, Any], valid: tuple[str, ...]) -> None:
    unknown = [k for k in table if k not in valid]
    if unknown:
        hints = [f"{k!r} (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(k, valid, n=1)) else repr(k)
                 for k in unknown]
        raise ConfigError(f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(hints)} in {where}; "
                          f"valid keys: {', '.join(sorted(valid))}")


def _path(where: str, value: Any, base_dir: Path) -> Path:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where} must be a non-empty path string, got {value!r}")
    path = Path(value)
    return path if path.is_absolute() else base_dir / path


def _parse(doc: dict[str, Any], base_dir: Path, source: Path | None) -> Federation:
    _check_keys("the federation file (top level)", doc, _SECTIONS)
    for required in ("federation", "parties", "job"):
        if required not in doc:
            raise ConfigError(f"missing section [{required}]")

    fed = _table("[federation]", doc["federation"])
    _check_keys("[federation]", fed, _FEDERATION_KEYS)
    if "active" not in fed:
        raise ConfigError("[federation] needs 'active', the name of the party that holds the labels")
    active = fed["active"]
    insecure = fed.get("insecure", False)

    tls: TlsSpec | None = None
    if "tls" in doc:
        tls_table = _table("[tls]", doc["tls"])
        _check_keys("[tls]", tls_table, _TLS_KEYS)
        tls_dir = _path("[tls] dir", tls_table.get("dir", "."), base_dir)
        ca = _path("[tls] ca", tls_table["ca"], base_dir) if "ca" in tls_table else tls_dir / "ca.pem"
        tls = TlsSpec(dir=tls_dir, ca=ca, dir_text=tls_table.get("dir"), ca_text=tls_table.get("ca"))

    parties: dict[str, PartySpec] = {}
    for name, value in _table("[parties]", doc["parties"]).items():
        check_party_name(name)
        where = f"[parties.{name}]"
        entry = _table(where, value)
        _check_keys(where, entry, _PARTY_KEYS)
        if tls is None and ("cert" in entry or "key" in entry):
            raise ConfigError(f"{where} names a cert or key but the file has no [tls] section")
        cert = key = None
        if tls is not None:
            cert = _path(f"{where} cert", entry["cert"], base_dir) if "cert" in entry else tls.dir / f"{name}.pem"
            key = _path(f"{where} key", entry["key"], base_dir) if "key" in entry else tls.dir / f"{name}.key"
        columns = column_spec_from_dict(_table(f"[parties.{name}.columns]", entry["columns"]),
                                        f"[parties.{name}.columns]") if "columns" in entry else ColumnSpec()
        parties[name] = PartySpec(name=name, address=entry.get("address"), cert=cert, key=key,
                                  data=entry.get("data", True), columns=columns, threads=entry.get("threads"))

    network = _table("[network]", doc.get("network", {}))
    _check_keys("[network]", network, _NETWORK_KEYS)
    limits = NetworkSettings(**network)

    job = JobSpec.of(_table("[job]", doc["job"]))

    if not isinstance(active, str):
        raise ConfigError(f"[federation] active must be a party name, got {active!r}")
    if "topology" in fed:
        topology = fed["topology"]
    else:  # only the active party has an address: star; otherwise every party listens
        others = [spec.address for name, spec in parties.items() if name != active]
        topology = "star" if others and all(a is None for a in others) else "mesh"
    return Federation(active=active, parties=parties, tls=tls, insecure=insecure, job=job, limits=limits,
                      source=source, topology=topology)


def parse_federation(text: str, base_dir: Path, *, source: Path | None = None) -> Federation:
    """Parse federation-file text; relative paths resolve against ``base_dir``.

    ``source`` (the file, if any) prefixes error messages and is kept in :attr:`Federation.source`.
    """
    label = str(source) if source is not None else "federation file"
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # the message ends with "(at line L, column C)"
        raise ConfigError(f"{label}: invalid TOML: {exc}") from None
    try:
        return _parse(doc, Path(base_dir), source)
    except ConfigError as exc:
        raise ConfigError(f"{label}: {exc}") from None


def load_federation(path: str | Path) -> Federation:
    """Read and parse a federation file; relative paths in it resolve against its directory."""
    path = Path(path)
    try:
        text = read_local_file(path, "federation").decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"federation file {str(path)!r} is not UTF-8 text") from None
    return parse_federation(text, path.resolve().parent, source=path)


def check_tls_paths(federation: Federation) -> None:
    """The federation CA, which every party needs, is where ``[tls]`` says; a wrong path names its key.

    A party checks this before it reads any TLS file (``securevfl party``, :func:`open_transport
    <securevfl.deploy.links.open_transport>`), so a wrong ``[tls] dir`` or ``ca`` is one line naming
    the key, its value and the path it resolved to. Nothing to check in an insecure federation.
    """
    tls = federation.tls
    if tls is None:
        return
    label = f"{federation.source}: " if federation.source else ""
    relative = "relative paths are relative to the federation file's folder"
    if tls.ca_text is not None:
        if not tls.ca.is_file():
            raise ConfigError(f'{label}[tls] ca = "{tls.ca_text}" is not a file here '
                              f"(resolved to {tls.ca}; {relative})")
        return
    key = f'[tls] dir = "{tls.dir_text}"' if tls.dir_text is not None else "[tls] dir (not set: the file's folder)"
    if not tls.dir.is_dir():
        raise ConfigError(f"{label}{key} does not exist (resolved to {tls.dir}; {relative})")
    if not tls.ca.is_file():
        raise ConfigError(f"{label}{key} holds no ca.pem (looked for {tls.ca}): put the federation CA there, "
                          'or name it with [tls] ca = "PATH"')


# ------------------------------------------------------------------ agreement


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def _leaf(value: Any) -> str:
    """Canonical form of a leaf; a peer's dictionary may hold values JSON cannot encode."""
    try:
        return _canonical_json(value)
    except (TypeError, ValueError):
        return f"{type(value).__name__}:{value!r}"


def job_fingerprint(federation: Federation, phase: str = "train") -> tuple[str, dict[str, Any]]:
    """What all parties must agree on, and its SHA-256 hex digest.

    The dictionary mirrors the file: ``federation.active`` (and ``topology`` when star),
    ``parties.<name>.address`` (where a party has one) and the ``job`` section with every default filled in (the
    method's own where it has some: :meth:`JobSpec.effective`). Network settings and file paths are local and
    not part of it. The digest is over canonical JSON (sorted keys, no whitespace), so it does not depend on key
    order or formatting in the file. ``phase``: ``train``, or ``predict`` for parties scoring a saved model
    (marked in the dictionary, so a scoring party and a training one refuse each other at the first frame).
    """
    canonical: dict[str, Any] = {
        "format": FINGERPRINT_FORMAT,
        "federation": {"active": federation.active,
                       **({"topology": "star"} if federation.topology == "star" else {})},
        "parties": {name: {**({} if spec.address is None else {"address": spec.address}),
                           **({} if spec.data else {"data": False})}
                    for name, spec in federation.parties.items()},
        "job": federation.job.effective(),
    }
    if phase != "train":
        canonical["phase"] = phase
    digest = hashlib.sha256(_canonical_json(canonical).encode("ascii")).hexdigest()
    return digest, canonical


def job_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Dotted keys at which two fingerprint dictionaries differ, sorted (``["job.epochs", ...]``).

    Leaves are compared by their canonical JSON, as the fingerprint is, so ``1`` and ``1.0`` (or
    ``true`` and ``1``) differ here exactly when they change the digest. Lists compare whole.
    """
    out: list[str] = []

    def walk(x: Any, y: Any, prefix: str) -> None:
        if isinstance(x, Mapping) and isinstance(y, Mapping):
            for key in set(x) | set(y):
                name = f"{prefix}.{key}" if prefix else str(key)
                if key not in x or key not in y:
                    out.append(name)
                else:
                    walk(x[key], y[key], name)
        elif _leaf(x) != _leaf(y):
            out.append(prefix or "(root)")

    walk(a, b, "")
    return sorted(out)


#: The longest value a job-mismatch message shows (longer ones end in "...").
_SHOWN_CHARS = 60
#: The most differing keys a job-mismatch message shows with their values.
_SHOWN_KEYS = 8


def _value_at(tree: Mapping[str, Any], dotted: str) -> str:
    """The canonical JSON of the leaf at ``dotted`` in a fingerprint dictionary, shortened, or ``absent``."""
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return "absent"
        node = node[part]
    text = _leaf(node)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def job_mismatch(mine: Mapping[str, Any], theirs: Mapping[str, Any], here: str) -> list[str]:
    """:func:`job_differences` with both values: ``job.epochs (5 at shop, 3 at the other party)``.

    ``mine`` is party ``here``'s fingerprint dictionary, ``theirs`` the peer's (a transport's
    ``differences`` callback, which names both parties in its message). Up to eight keys show
    their values; more are counted.
    """
    keys = job_differences(mine, theirs)
    shown = [f"{k} ({_value_at(mine, k)} at {here}, {_value_at(theirs, k)} at the other party)"
             for k in keys[:_SHOWN_KEYS]]
    return shown + ([f"and {len(keys) - _SHOWN_KEYS} more"] if len(keys) > _SHOWN_KEYS else [])


__all__ = [
    "Federation",
    "JOB_KEYS",
    "JOB_SETTINGS",
    "JobSpec",
    "PsiSettings",
    "NetworkSettings",
    "PartySpec",
    "TOPOLOGIES",
    "TlsSpec",
    "check_party_name",
    "check_tls_paths",
    "is_loopback",
    "job_differences",
    "job_fingerprint",
    "job_mismatch",
    "load_federation",
    "parse_federation",
    "split_address",
]

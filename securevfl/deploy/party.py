"""One organisation's process: its own table, PSI with its peers over the network, then its role.

``securevfl party --federation fed.toml --as shop --data shop.csv`` calls :func:`run_deployed_party`.
The party loads only its own file, connects to its peers with mutual TLS (they agree on the job by
fingerprint before any data frame: :mod:`securevfl.deploy.links`), and then runs three phases over
the same links:

1. **Setup** (tags ``deploy.*``; :mod:`securevfl.deploy.alignment`, then :mod:`securevfl.deploy.plan`).
   ECDH PSI between the active party and each passive party (the ``psi`` package's protocol cores,
   unchanged), then the N-party alignment message. Every party
   sorts its aligned rows by their (normalised) IDs, as the threaded run does, and sends the active
   party a SHA-256 digest of that ordered list so a mismatch stops the run. The active party then
   sends each passive party the split: the test positions in the agreed order (a stratified split by
   its labels, the same function and seed as ``securevfl train``). Every party fits its own
   preprocessing (:mod:`securevfl.data.preprocess`) on its own training rows — never a test row — and
   the passive parties send their table's shape (rows, encoded feature count); the active party sends
   every party the plan: the split, the number of classes, and each party's shape.
2. **Training**: the method's role for this party, built by the method from a scenario holding this
   party's own table and, for each peer, a placeholder table of the right shape (zeros: no peer data
   ever reaches this process). The method code is the one the threaded run uses.
3. **Costs** (:mod:`securevfl.deploy.costs`): each passive party sends the active party its meter
   snapshot (times, bytes, messages, never data); the active party writes the report.

What the setup reveals beyond PSI: row counts (PSI reveals set sizes anyway), encoded feature counts
(the width of each party's model input; not its columns, categories or statistics) and the number of
classes, and the test positions (which agreed rows are held out).

Sizes a peer sends are never trusted to size an allocation. Every party sizes its peers'
placeholders by the aligned row count its own PSI produced (a peer's unaligned rows are never
materialised anywhere but at that peer), and every count is checked before use: the aligned count
against this party's PSI result, a passive party's row count against the set size the active party
saw in PSI, a party's own entry in the plan against what it sent, feature counts against
:data:`~securevfl.deploy.plan.MAX_FEATURES` and class counts against
:data:`~securevfl.deploy.plan.MAX_CLASSES`. A count that fails is a
:class:`ProtocolError` naming the sender and the field, before anything is allocated.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from securevfl.data.columns import ColumnSpec
from securevfl.data.partition import PartyTable
from securevfl.data.scenario import Scenario
from securevfl.deploy.alignment import LocalAlignment, psi_role, unaligned_rows
from securevfl.deploy.costs import alignment_cost, record_link_costs, with_cost_exchange
from securevfl.deploy.federation_file import Federation
from securevfl.deploy.links import data_party_order, party_links
from securevfl.deploy.plan import helper_plan_role, local_scenario, plan_role
from securevfl.deploy.progress import PartyWatch, log_event
from securevfl.deploy.threads import ThreadChoice
from securevfl.errors import ConfigError
from securevfl.eval import positive_index
from securevfl.federation.meter import MeterSnapshot
from securevfl.federation.runtime import run_party

if TYPE_CHECKING:
    from securevfl.methods.base import Method
    from securevfl.run_config import RunConfig

_log = logging.getLogger(__name__)


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



# ------------------------------------------------------------------ the whole party


def method_and_config(federation: Federation, device: str, checkpoint_dir: str | Path | None = None,
                      resume: bool = False, checkpoint_overwrite: bool = False,
                      positive_class: str | None = None) -> tuple[Method[Any], RunConfig]:
    """The job's method and run settings as the federation file gives them (the same at every party).

    Every ``[job]`` key is a setting of the run (securevfl.run_config): it goes where the API's keyword goes.
    """
    from securevfl.methods import create_method
    from securevfl.run_config import RUN_SETTINGS, run_config

    job = federation.job
    settings = job.effective()  # what the fingerprint compared: the method's own defaults where the file is silent
    config = run_config(**{s.name: settings[s.name] for s in RUN_SETTINGS if s.info.job}, dataset="federation",
                        parties=len(federation.parties), device=device, alignment="psi",
                        positive_class=positive_class, checkpoint_dir=checkpoint_dir, resume=resume,
                        checkpoint_overwrite=checkpoint_overwrite)
    return create_method(job.method, config.train), config


def run_deployed_party(federation: Federation, name: str, data: str | Path | None, *, device: str = "auto",
                       progress: Callable[..., None] | None = None, transport: Any = None,
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
    ``securevfl party --predict`` scores with it (:mod:`securevfl.deploy.scoring`). ``threads``: torch's
    threads in this process (0: torch's default; or a :class:`~securevfl.deploy.threads.ThreadChoice`
    already made), by default the party's ``threads`` in the file, else this process's setting as it
    is (``securevfl party`` shares the machine's cores among the parties the file lists on its host;
    :mod:`securevfl.deploy.threads`). The start event names the count and why.
    ``positive_class`` (the active party only): the class binary F1 and AUC score as positive (default:
    the second of the label's classes: a file's class names in sorted order).
    """
    from securevfl.api import assemble_report
    from securevfl.data.files import party_table_from_file
    from securevfl.deploy.threads import use_threads
    from securevfl.networks.device import resolve_device

    started = time.perf_counter()
    threads_used = use_threads(federation, name, threads)  # before any torch work
    job = federation.job
    helper = not federation.party(name).data
    is_active = name == federation.active
    # refuse a bad method or option before connecting
    method, config = method_and_config(federation, device, checkpoint_dir, resume, checkpoint_overwrite,
                                       positive_class)
    if positive_class is not None and not is_active:
        raise ConfigError(f"--positive-class is for the active party ({federation.active}), which holds the labels")
    if model_dir is not None and (helper or method.standalone and not is_active):
        model_dir = None  # a helper holds no part of a model; a standalone model is the active party's alone
    if model_dir is not None:
        from securevfl.model.saving import check_model_dir, check_savable

        check_savable(method)
        check_model_dir(model_dir, overwrite_model, party=name)
    table: PartyTable | None = None
    classes: tuple[str, ...] = ()
    if helper:
        if data is not None:
            raise ConfigError(f"{name} has data = false in the federation file: it takes no --data")
    elif data is None:
        raise ConfigError(f"{name} is a party with data: give its table (--data FILE)")
    else:
        spec = columns if columns is not None else federation.party(name).columns
        table, classes = party_table_from_file(name, data, id_column=job.id_column, label_column=job.label_column,
                                               is_active=is_active, columns=spec, task=job.task)
        if is_active:
            positive_index(classes, positive_class, table.task)  # refused before connecting
    torch_device = resolve_device(device)
    data_parties = data_party_order(federation)
    passives = data_parties[1:]  # the passive data parties; helpers are peers, not passives
    log_start(federation, name, "train", table.n_rows if table is not None else None, threads_used)
    with PartyWatch(name) as watch, party_links(federation, name, transport, watch=watch) as transport:
        if table is None:
            setup_role, setup_parties = helper_plan_role(federation), (*data_parties, name)
        else:
            setup_role, setup_parties = plan_role(table, classes, federation, psi_role(table, federation)), data_parties
        setup, setup_meter = run_party(watch.role(setup_role, "plan"), name=name, active=federation.active,
                                       parties=setup_parties, passives=passives, transport=transport, finish=False,
                                       recv_timeout=federation.limits.recv_timeout_s)
        rows, plan, encoded = setup["rows"], setup["plan"], setup.get("encoded")
        size = len(plan["train"]) + len(plan["test"])
        n_rows = table.n_rows if table is not None else 0
        alignment = LocalAlignment(rows, unaligned_rows(n_rows, rows), size, setup_meter.snapshot())
        scenario = local_scenario(name, federation, table, classes, rows, plan, cost={}, encoded=encoded)
        roles = method.party_roles(scenario)
        check_roles(job.method, roles, tuple(federation.parties))
        role = roles[name]
        watch.event("train", "train_start", f"training {job.method}: {job.epochs} epochs", method=job.method,
                    epochs=job.epochs)
        outcome, meter = run_party(watch.role(with_cost_exchange(role, alignment.snapshot, transport.link_stats)),
                                   name=name, active=federation.active, parties=tuple(roles), passives=passives,
                                   transport=transport,
                                   device=torch_device, seed=job.seed, progress=progress,
                                   recv_timeout=federation.limits.recv_timeout_s)
        result = DeployedResult(name, alignment, link_stats=transport.link_stats(), threads=threads_used.threads,
                                preprocessing=scenario.encoded(name).summary if table is not None else {})
        if is_active:
            value, train_snapshots, setup_snapshots, links, missing = outcome
            psi_cost = alignment_cost(alignment.size, setup_snapshots)
            scenario = scenario.with_alignment_cost(psi_cost)
            result.snapshots = train_snapshots
            result.report = assemble_report(config, scenario, value, train_snapshots, method.describe(),
                                            wall_s=time.perf_counter() - started)
            result.report.cost["alignment"]["crypto_s"] = psi_cost["crypto_s"]
            result.report.config["threads"] = threads_used.threads  # this party's torch threads
            for peer, shape in plan["shapes"].items():  # placeholders hold the aligned rows only
                if peer != name and peer in result.report.parties:  # the counts PSI showed this party
                    result.report.parties[peer].update(rows=shape.rows, unaligned=shape.rows - shape.aligned)
            record_link_costs(result.report, links, missing)
        else:
            result.snapshots = {name: meter.snapshot()}
        if model_dir is not None:
            _save_own_part(model_dir, name, federation, method, config.train, role, scenario, table, classes,
                           plan, result.report, overwrite_model)
    result.wall_s = time.perf_counter() - started
    log_done(name, f"{alignment.size} shared rows; done in {result.wall_s:.1f} s", result.wall_s,
             alignment.size, result.link_stats)
    return result


def log_start(federation: Federation, name: str, mode: str, rows: int | None,
              threads: ThreadChoice | None = None) -> None:
    """The party's first event: who it is, what it runs, where it listens, whom it connects to, its torch threads."""
    import torch

    threads = threads or ThreadChoice(torch.get_num_threads(), "this process's torch setting", set_here=False)
    role = "active" if name == federation.active else "passive" if federation.party(name).data else "helper"
    peers = [p for p in federation.parties if p != name]
    security = "plaintext, loopback" if federation.insecure else "mutual TLS"
    held = f", {rows} rows" if rows is not None else ""
    if federation.topology == "star" and name != federation.active:  # it dials the active party alone
        others = [p for p in peers if p != federation.active]
        links = f"dialling out to {federation.active} (star hub" + (f"; it relays {', '.join(others)})" if others
                                                                     else ")")
    elif federation.topology == "star":
        links = f"listening for {', '.join(peers) or 'no other party'} (star hub)"
    else:
        links = f"connecting to {', '.join(peers) or 'no other party'}"
    log_event(_log, name, "start", "start", f"{federation.job.method} ({mode}), {role} party{held}; {links} "
              f"({security}); {threads.describe()}", role=role,
              method=federation.job.method, mode=mode, address=federation.addresses.get(name), peers=peers,
              tls=not federation.insecure, rows=rows, threads=threads.threads, threads_source=threads.source)


def log_done(name: str, message: str, wall_s: float, rows: int,
             links: Mapping[str, Mapping[str, int]] | None = None, **fields: Any) -> None:
    """The party's last event: wall time, rows and the bytes it put on the wire (its own links)."""
    sent = sum(v.get("frame_bytes", 0) for k, v in (links or {}).items() if k.startswith(f"{name}->"))
    log_event(_log, name, "end", "done", message, wall_s=round(wall_s, 3), rows=rows, bytes=sent, **fields)


def _save_own_part(model_dir: str | Path, name: str, federation: Federation, method: Any, train: Any, role: Any,
                   scenario: Scenario, table: PartyTable | None, classes: tuple[str, ...], plan: Mapping[str, Any],
                   report: Any, overwrite: bool) -> None:
    """Save the own part of the trained model, and nothing of any other party's (issue 27)."""
    from securevfl.methods.engine.kept import saved_of
    from securevfl.model.saving import (
        aligned_ids,
        check_savable,
        model_fingerprint,
        model_parties,
        party_schema,
        save_part,
        train_settings,
    )

    check_savable(method, {name: role})
    if table is None:
        raise ConfigError(f"{name} holds no data: the methods that save models have no such party")
    job = federation.job
    settings = train_settings(train)
    parties = model_parties(method, {p: ("active" if p == federation.active else "passive")
                                     for p in data_party_order(federation)})
    fingerprint = model_fingerprint(method.name, settings, parties, plan["model"])
    encoder = scenario.encoded(name).encoder
    schema = party_schema(encoder, table.columns, id_column=job.id_column,
                          label_column=job.label_column if name == federation.active else None)
    save_part(model_dir, party=name, role=parties[name], side_saved=saved_of(role), encoder=encoder,
              schema=schema, method=method, settings=settings, parties=parties, fingerprint=fingerprint,
              task=scenario.task, classes=classes, report=report.to_dict() if report is not None else None,
              overwrite=overwrite,
              training_ids=aligned_ids(scenario, name, job.normalize) if parties[name] == "passive" else None)


def check_roles(method: str, roles: Mapping[str, Any], parties: tuple[str, ...]) -> None:
    """The method's roles must be exactly the federation's parties (helpers such as an arbiter included)."""
    extra = sorted(set(roles) - set(parties))
    if extra:
        raise ConfigError(f"{method} needs parties that run beside the data parties: add "
                          + ", ".join(f"[parties.{n}] with an address and data = false" for n in extra)
                          + " to the federation file")
    idle = sorted(set(parties) - set(roles))
    if idle:
        raise ConfigError(f"{method} has no role for {', '.join(idle)}: remove it from the federation file")

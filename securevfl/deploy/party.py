"""What every deployed party's process shares: its job's settings, its start and end events, its roles.

A deployed party's run is assembled by the pipeline (:mod:`securevfl.pipeline`: prepare, connect,
set up, roles, finish); a party trains (:mod:`securevfl.pipeline.train`), scores
(:mod:`securevfl.pipeline.score`) or serves (:mod:`securevfl.pipeline.serve`). Its set-up
(PSI: :mod:`securevfl.deploy.alignment`; the plan: :mod:`securevfl.deploy.plan`) says what each
party learns beyond PSI: row counts, encoded feature counts, the number of classes and the test
positions; every count a peer sends is checked before anything is sized by it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from securevfl.deploy.federation_file import Federation
from securevfl.deploy.progress import log_event
from securevfl.deploy.threads import ThreadChoice
from securevfl.errors import ConfigError

if TYPE_CHECKING:
    from securevfl.methods.base import Method
    from securevfl.run_config import RunConfig

_log = logging.getLogger(__name__)


# ------------------------------------------------------------------ the whole party


def method_and_config(federation: Federation, device: str, checkpoint_dir: str | Path | None = None,
                      resume: bool = False, checkpoint_overwrite: bool = False,
                      positive_class: str | None = None, **own: Any) -> tuple[Method[Any], RunConfig]:
    """The job's method and run settings as the federation file gives them (the same at every party).

    Every ``[job]`` key is a setting of the run (securevfl.run_config): it goes where the API's keyword
    goes; the rest (``checkpoint_dir``, ``model_dir``, ...) are this party's own.
    """
    from securevfl.methods import create_method
    from securevfl.run_config import RUN_SETTINGS, run_config

    job = federation.job
    settings = job.effective()  # what the fingerprint compared: the method's own defaults where the file is silent
    config = run_config(**{s.name: settings[s.name] for s in RUN_SETTINGS if s.info.job}, dataset="federation",
                        parties=len(federation.parties), device=device, alignment="psi",
                        positive_class=positive_class, checkpoint_dir=checkpoint_dir, resume=resume,
                        checkpoint_overwrite=checkpoint_overwrite, **own)
    return create_method(job.method, config.train), config


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

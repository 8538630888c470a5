"""Where a run's parties are: every party in this process, or this one party in this process.

A placement opens a *session* for a mode (:mod:`securevfl.pipeline`): the in-process session runs
every role with :func:`~securevfl.federation.runtime.run_parties`; the one-party session sets this
process's torch threads, logs the start, opens the party's authenticated links, runs the set-up
role over them (PSI and the plan) and its one role with
:func:`~securevfl.federation.runtime.run_party`, the costs gathered at the active party. Which kind of
party this is (active, passive or a helper without data) is decided here, once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from securevfl.data.scenario import Scenario
from securevfl.deploy.alignment import LocalAlignment, unaligned_rows
from securevfl.deploy.costs import with_cost_exchange
from securevfl.deploy.federation_file import Federation
from securevfl.deploy.links import Absence, data_party_order, helper_parties, party_links
from securevfl.deploy.party import check_roles, log_done, log_start
from securevfl.deploy.plan import local_scenario
from securevfl.deploy.progress import PartyWatch
from securevfl.deploy.threads import ThreadChoice, use_threads
from securevfl.federation import runtime
from securevfl.federation.meter import MeterSnapshot
from securevfl.federation.runtime import DEFAULT_RECV_TIMEOUT_S

Role = Callable[..., Any]
ProgressCallback = Callable[..., None]


@dataclass
class Outcome:
    """What the roles of this process returned, and the costs this process knows.

    ``value``: the active party's result where it runs here, else this party's own. ``snapshots``:
    every party's meter (a passive party knows its own only); ``setups``, ``links`` and ``missing``:
    a deployed active party's peers' set-up meters, every link's counters and the costs no peer sent.
    """

    value: Any
    snapshots: dict[str, MeterSnapshot]
    results: dict[str, Any] = field(default_factory=dict)
    setups: dict[str, MeterSnapshot] = field(default_factory=dict)
    links: dict[str, dict[str, int]] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class EveryParty:
    """Every party of the run in this process (``securevfl train`` / ``predict``, :func:`securevfl.train`)."""

    device: str = "auto"
    progress: ProgressCallback | None = None
    scheduler: str | None = None
    recv_timeout: float | None = DEFAULT_RECV_TIMEOUT_S

    def open(self, mode: str) -> InProcess:
        """The session of one run (nothing to open: the parties talk in memory)."""
        return InProcess(self)


@dataclass(frozen=True)
class OneParty:
    """One party of a federation in this process; its peers run elsewhere (``securevfl party``).

    ``transport``: links already open (tests, benchmarks), else the party opens its own;
    ``threads``: torch's threads here (:mod:`securevfl.deploy.threads`).
    """

    federation: Federation
    name: str
    device: str = "auto"
    progress: ProgressCallback | None = None
    transport: Any = None
    threads: int | ThreadChoice | None = None

    @property
    def kind(self) -> str:
        """``active``, ``passive`` or ``helper`` (a party with ``data = false``: an arbiter, a server)."""
        if self.name == self.federation.active:
            return "active"
        return "passive" if self.federation.party(self.name).data else "helper"

    @property
    def standalone(self) -> bool:
        """Whether the job's model is the active party's alone (``local``): no other party scores or serves."""
        from securevfl.methods.base import method_class

        return bool(method_class(self.federation.job.method).standalone)

    @property
    def holds_part(self) -> bool:
        """Whether this party keeps a part of the job's model: a data party (of a standalone model, the active one)."""
        return self.kind == "active" or (self.kind == "passive" and not self.standalone)

    def open(self, mode: str) -> Deployed:
        """The session of one run: this process's torch threads are set now, before any torch work."""
        return Deployed(self, mode, use_threads(self.federation, self.name, self.threads))


Placement = EveryParty | OneParty


class InProcess:
    """Every role in this process, as greenlets (or threads) of one run."""

    deployed = False
    name: str | None = None

    def __init__(self, placement: EveryParty) -> None:
        from securevfl.networks.device import resolve_device

        self.placement = placement
        self.started = time.perf_counter()
        self.device = resolve_device(placement.device)
        self.progress = placement.progress

    @contextmanager
    def connect(self, label: str, rows: int | None) -> Iterator[InProcess]:
        yield self

    def synchronize(self) -> Callable[[], None] | None:
        """CUDA's synchronisation, so that compute times count the kernels they launched."""
        if getattr(self.device, "type", "cpu") != "cuda":
            return None
        import torch

        device = self.device
        return lambda: torch.cuda.synchronize(device)

    def execute(self, roles: Mapping[str, Role], *, active: str, passives: tuple[str, ...], seed: int,
                recv_timeout: float | None = None) -> Outcome:
        timeout = self.placement.recv_timeout if recv_timeout is None else recv_timeout
        result = runtime.run_parties(roles, active=active, passives=passives, device=self.device, seed=seed,
                             progress=self.progress, synchronize=self.synchronize(), recv_timeout=timeout,
                             scheduler=self.placement.scheduler)
        return Outcome(result.results[active], {n: m.snapshot() for n, m in result.meters.items()},
                       results=dict(result.results))

    def elapsed(self) -> float:
        """Seconds since the session opened."""
        return time.perf_counter() - self.started


class Deployed:
    """One party over its links: set-up (PSI and the plan), its role, the costs at the active party."""

    deployed = True

    def __init__(self, placement: OneParty, mode: str, threads: ThreadChoice) -> None:
        from securevfl.networks.device import resolve_device

        self.placement = placement
        self.federation = placement.federation
        self.name = placement.name
        self.kind = placement.kind
        self.mode = mode
        self.threads = threads
        self.started = time.perf_counter()
        self.device = resolve_device(placement.device)
        self.progress = placement.progress
        self.alignment: LocalAlignment | None = None
        self.plan: dict[str, Any] = {}
        self.watch: PartyWatch | None = None
        self.link: Any = None
        self.stats: dict[str, dict[str, int]] = {}  # the links' counters, taken as they close
        #: Passive parties left out of this run (batch scoring: not up within --party-timeout), with why.
        self.left_out: dict[str, str] = {}
        #: The active party's summary of ``train --select`` (securevfl.exploration.selection), if chosen.
        self.selection: Any = None

    @property
    def data_parties(self) -> tuple[str, ...]:
        """The data parties that take part (the federation's, less any :attr:`left_out`)."""
        return tuple(p for p in data_party_order(self.federation) if p not in self.left_out)

    @property
    def parties(self) -> tuple[str, ...]:
        """Every role of the run: the data parties, then the helpers."""
        return (*self.data_parties, *helper_parties(self.federation))

    @contextmanager
    def connect(self, label: str, rows: int | None, *, links: bool = True,
                quiet_stages: tuple[str, ...] = (), absence: Absence | None = None) -> Iterator[Deployed]:
        """Log the start, then open the party's links (``links=False``: a party alone, in memory).

        ``absence`` (batch scoring): a passive party not up in time is left out, or fails the run
        (:class:`~securevfl.deploy.links.Absence`); the active party then tells every other party who is left out.
        """
        from securevfl.federation.transport import InProcessTransport

        log_start(self.federation, self.name, label, rows, self.threads)
        watch = PartyWatch(self.name, quiet_stages=quiet_stages)
        opened: Any = (party_links(self.federation, self.name, self.placement.transport, phase=self.mode,
                                   watch=watch, absence=absence) if links
                       else nullcontext(InProcessTransport([self.name])))
        with watch, opened as link:
            self.watch, self.link = watch, link
            try:
                if absence is not None and absence.refusal is None:
                    self._agree_roster()
                yield self
            finally:
                self.stats = link.link_stats() if hasattr(link, "link_stats") else {}

    def _agree_roster(self) -> None:
        """The active party tells every other party which passive parties it left out (none, mostly)."""
        from securevfl.deploy.roster import roster_role

        assert self.watch is not None
        left = dict(getattr(self.link, "left_out", {})) if self.kind == "active" else {}
        peers = (*data_party_order(self.federation), *helper_parties(self.federation))
        present = tuple(p for p in peers if p not in left)
        role = roster_role(self.federation, left)
        self.left_out, _ = runtime.run_party(self.watch.role(role, "plan"), name=self.name,
                                             active=self.federation.active, parties=present,
                                             passives=tuple(p for p in data_party_order(self.federation)[1:]
                                                            if p not in left),
                                             transport=self.link, finish=False,
                                             recv_timeout=self.federation.limits.recv_timeout_s)
        for peer, reason in self.left_out.items():
            if self.kind != "active":
                self.link.leave_out(peer, reason)

    def setup(self, role: Role, *, table: Any, classes: tuple[str, ...]) -> Scenario:
        """Run the set-up role (PSI, then the plan; a helper: the plan) and build the party's scenario."""
        assert self.watch is not None
        parties = (*self.data_parties, self.name) if self.kind == "helper" else self.data_parties
        setup, meter = runtime.run_party(self.watch.role(role, "plan"), name=self.name, active=self.federation.active,
                                 parties=parties, passives=self.data_parties[1:], transport=self.link, finish=False,
                                 recv_timeout=self.federation.limits.recv_timeout_s)
        rows, self.plan = setup["rows"], setup["plan"]
        table = setup.get("table", table)  # the columns it kept (train --select), else its own table
        self.selection = setup.get("selection")
        size = len(self.plan["train"]) + len(self.plan["test"])
        n_rows = table.n_rows if table is not None else 0
        self.alignment = LocalAlignment(rows, unaligned_rows(n_rows, rows), size, meter.snapshot())
        return local_scenario(self.name, self.federation, table, classes, rows, self.plan, cost={},
                              encoded=setup.get("encoded"), present=setup.get("present"))

    def execute(self, roles: Mapping[str, Role], *, seed: int, stage: str | None = None,
                costs: bool = True, parties: tuple[str, ...] | None = None,
                passives: tuple[str, ...] | None = None, on_start: Callable[[], None] | None = None,
                check: bool = True, finish: bool = True) -> Outcome:
        """Run this party's role of ``roles`` (which must be the federation's parties) to its end.

        ``costs``: every other party then sends the active party its meters (set-up and run) and link
        counters. ``on_start``: called once the roles are checked, before the role runs. ``check``: the
        roles must be the federation's parties (a party alone, or a serving role, is not checked).
        ``finish=False``: more phases follow over the same links (the peers must not take this
        party's role as ended).
        """
        assert self.watch is not None
        if check:
            check_roles(self.federation.job.method, roles, tuple(self.federation.parties))
        if parties is None and self.left_out:
            parties = tuple(p for p in roles if p not in self.left_out)
        if on_start is not None:
            on_start()
        role = roles[self.name]
        if costs:
            assert self.alignment is not None
            role = with_cost_exchange(role, self.alignment.snapshot, self.link.link_stats)
        value, meter = runtime.run_party(self.watch.role(role, stage) if stage else self.watch.role(role),
                                 name=self.name, active=self.federation.active,
                                 parties=parties or tuple(roles), passives=self.data_parties[1:] if passives is None
                                 else passives, transport=self.link, device=self.device, seed=seed,
                                 progress=self.progress, recv_timeout=self.federation.limits.recv_timeout_s,
                                 finish=finish)
        if costs and self.kind == "active":
            value, snapshots, setups, links, missing = value
            return Outcome(value, snapshots, setups=setups, links=links, missing=missing)
        return Outcome(value, {self.name: meter.snapshot()})

    def elapsed(self) -> float:
        """Seconds since the session opened."""
        return time.perf_counter() - self.started

    def done(self, message: str, rows: int, **fields: Any) -> float:
        """The party's last event (wall time, rows, bytes it sent); ``message`` may use ``{wall_s}``."""
        wall_s = self.elapsed()
        log_done(self.name, message.format(wall_s=wall_s), wall_s, rows, self.stats, **fields)
        return wall_s

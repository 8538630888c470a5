"""How many CPU threads a party's torch uses, so that parties sharing a machine do not oversubscribe it.

torch starts one intra-op thread per core. Three party processes on one machine then run three
times as many busy threads as there are cores, and each waits for the others (measured: 4.2x the
wall clock of ``securevfl launch``, which gives each party its share). :func:`choose_threads`
decides, in this order:

1. ``--threads N`` / ``run_deployed_party(threads=N)``;
2. ``threads = N`` in the party's ``[parties.NAME]`` section of the federation file;
3. the ``OMP_NUM_THREADS`` environment variable (torch reads it itself);
4. when several parties of the federation file are on this party's host (the same host name, or
   all on loopback — in a star, the parties that dial out to a loopback hub too), this machine's
   cores divided by their number, at least 1;
5. otherwise torch's own default (one thread per core).

``0`` (in 1 or 2) means torch's own default. :func:`apply_threads` sets it in this process before
any torch work (``torch.set_num_threads``, and the inter-op pool when it has not started yet).

``securevfl party`` owns its process and applies all five. The Python API (``run_deployed_party``
and the scoring and serving calls) applies only 1 and 2 unless told (``share_host=True``): a program
that embeds a party, or runs several in threads of one process, keeps its own torch setting.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from securevfl.errors import ConfigError
from securevfl.federation.network import is_loopback, split_address

if TYPE_CHECKING:
    from securevfl.deploy.federation_file import Federation

#: A party may ask for up to this many threads per core of its machine (more only adds contention).
MAX_THREADS_PER_CORE = 4
#: The largest ``threads`` a federation file may hold (checked against the party's own cores when used).
MAX_THREADS_IN_FILE = 4096


@dataclass(frozen=True)
class ThreadChoice:
    """The torch intra-op thread count a party uses, and why (shown in its start line)."""

    threads: int
    source: str
    #: False when torch keeps its own setting (``OMP_NUM_THREADS``, its default): nothing to set.
    set_here: bool = True

    def describe(self) -> str:
        """``"4 torch threads (3 parties share this host: 12 cores / 3; --threads N to change)"``."""
        return f"{self.threads} torch thread{'s' if self.threads != 1 else ''} ({self.source})"


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS tells it, else the machine's)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def check_threads(value: Any, where: str, cores: int | None = None) -> int:
    """A thread count: an integer from 0 (torch's default) to ``MAX_THREADS_PER_CORE`` x ``cores``.

    Without ``cores`` only the file's bound (``MAX_THREADS_IN_FILE``) applies.
    """
    limit = MAX_THREADS_PER_CORE * cores if cores is not None else MAX_THREADS_IN_FILE
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
        machine = f" ({MAX_THREADS_PER_CORE} per core of this machine's {cores})" if cores is not None else ""
        raise ConfigError(f"{where} must be an integer from 1 to {limit}{machine}, or 0 for torch's default "
                          f"(one per core), got {value!r}")
    return value


def _host(address: str | None) -> str | None:
    """The host of a listening address (``loopback`` for every loopback one); ``None`` for a party that dials out."""
    if address is None:
        return None
    return "loopback" if is_loopback(address) else split_address(address)[0].lower()


def _party_host(federation: Federation, name: str) -> str | None:
    """A party's host as the file shows it: its address's, or ``loopback`` for a party that dials out to loopback.

    A party without an address (star topology) dials the parties that listen; a loopback address can
    only be reached from its own machine, so where every listening party is on loopback, so is it.
    Otherwise its host is not in the file (``None``).
    """
    address = federation.party(name).address
    if address is not None:
        return _host(address)
    listening = [spec.address for spec in federation.parties.values() if spec.address is not None]
    return "loopback" if listening and all(is_loopback(a) for a in listening) else None


def same_host_parties(federation: Federation, name: str) -> tuple[str, ...]:
    """The parties (``name`` included) on ``name``'s host: the same host name, or loopback.

    A star's party that dials out to a loopback hub is on the hub's machine (:func:`_party_host`); one
    that dials out to a named host has no host the file names, so it shares with none.
    """
    host = _party_host(federation, name)
    if host is None:
        return (name,)
    return tuple(p for p in federation.parties if _party_host(federation, p) == host)


def choose_threads(federation: Federation, name: str, threads: int | None = None, *,
                   share_host: bool = True) -> ThreadChoice:
    """How many torch threads party ``name`` uses on this machine (the order is in the module docstring).

    ``share_host=False`` stops after the file's setting: torch keeps this process's current one.
    """
    cores = available_cores()
    if threads is not None:
        return _explicit(check_threads(threads, "--threads", cores), "--threads")
    in_file = federation.party(name).threads
    if in_file is not None:
        where = f"[parties.{name}] threads"
        return _explicit(check_threads(in_file, where, cores), where)
    if not share_host:
        return ThreadChoice(torch_threads(), "this process's torch setting", set_here=False)
    if os.environ.get("OMP_NUM_THREADS", "").strip():
        return ThreadChoice(torch_threads(), "OMP_NUM_THREADS", set_here=False)
    sharing = same_host_parties(federation, name)
    if len(sharing) > 1:
        share = max(1, cores // len(sharing))
        return ThreadChoice(share, f"{len(sharing)} parties share this host: {cores} cores / {len(sharing)}; "
                                   "--threads N to change")
    return ThreadChoice(torch_threads(), "torch's default", set_here=False)


def _explicit(threads: int, source: str) -> ThreadChoice:
    if threads == 0:
        return ThreadChoice(torch_threads(), f"torch's default, {source} 0", set_here=False)
    return ThreadChoice(threads, source)


def torch_threads() -> int:
    """The intra-op thread count of torch in this process now."""
    import torch

    return int(torch.get_num_threads())


def apply_threads(choice: ThreadChoice) -> ThreadChoice:
    """Set torch's intra-op threads of this process to ``choice.threads`` (and its inter-op pool, if not started)."""
    if not choice.set_here:
        return choice
    import torch

    if torch.get_num_threads() != choice.threads:
        torch.set_num_threads(choice.threads)
    try:
        torch.set_num_interop_threads(choice.threads)
    except RuntimeError:  # the inter-op pool has started (or was set) in this process: it stays as it is
        pass
    return choice


def use_threads(federation: Federation, name: str, threads: int | ThreadChoice | None) -> ThreadChoice:
    """What the Python API does before any torch work: apply ``threads`` (a count, or a choice already made).

    ``None`` applies the party's ``threads`` in the federation file, if any (``share_host=False``).
    Returns the choice with the count torch reports now.
    """
    choice = threads if isinstance(threads, ThreadChoice) else choose_threads(federation, name, threads,
                                                                                 share_host=False)
    apply_threads(choice)
    return ThreadChoice(torch_threads(), choice.source, choice.set_here)


__all__ = [
    "MAX_THREADS_PER_CORE",
    "ThreadChoice",
    "apply_threads",
    "available_cores",
    "check_threads",
    "choose_threads",
    "same_host_parties",
    "torch_threads",
    "use_threads",
]

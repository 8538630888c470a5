"""Cooperative in-process scheduling: every party is a greenlet of one thread, switched only at a receive.

The threaded runtime paid for every message twice: a thread hand-off (wake the receiver, wait for
the interpreter lock) and a compute gate so that party threads did not fight over that lock on
every small torch call. Here the roles stay plain blocking code, but they run as greenlets in one
thread: a :meth:`CooperativeTransport.recv` on an empty link *parks* the party and switches to the
next ready one; a send to a parked party makes it ready again. Nothing is preempted, so no two
parties ever compute at the same time (no gate needed) and a message costs a deque append.

What the scheduler knows, the threaded runtime could only wait for:

* every party parked and none ready is a **deadlock** — no message can ever arrive (only parties
  of this run send on these links), so the run fails at once with :class:`DeadlockError` naming
  who waits for whom, instead of after the receive timeout;
* a party parked longer than the receive timeout is reported by the watchdog of
  :func:`~securevfl.federation.runtime.run_parties`, which runs in the caller's thread and so
  also catches a party that never yields.

Messages travel as parcels (:class:`~securevfl.federation.codec.Parcel`): an independent copy of the
value, equal to what the codec would decode, and the exact byte count it would encode
(:func:`~securevfl.federation.codec.transfer`).

Thread-local state a party sets across a receive (torch's grad mode: a receive inside
``torch.no_grad()``) is saved when it parks and restored when it resumes, so one party's mode never
leaks into another's.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping

import greenlet

from securevfl.errors import DeadlockError, PeerFinishedError, ProtocolError, RunAborted
from securevfl.federation.transport import Envelope, Transport


def _grad_mode() -> bool | None:
    """The (thread-local) torch grad mode, or None when torch is not loaded (the runtime is torch-free)."""
    torch = sys.modules.get("torch")
    return None if torch is None else bool(torch.is_grad_enabled())


def _set_grad_mode(enabled: bool | None) -> None:
    torch = sys.modules.get("torch")
    if torch is not None and enabled is not None and torch.is_grad_enabled() != enabled:
        torch.set_grad_enabled(enabled)


class CooperativeTransport(Transport):
    """Per-link FIFO deques between the greenlets of one thread; a receive on an empty link parks.

    Only :meth:`run` (in one thread) may call :meth:`send`, :meth:`recv` and :meth:`finish`, from
    the parties' greenlets; :meth:`parked` may be read from another thread (the watchdog).
    """

    #: The channel hands this transport :class:`~securevfl.federation.codec.Parcel` payloads.
    passes_objects = True

    def __init__(self, parties: list[str]) -> None:
        self._parties = tuple(parties)
        self._links: dict[tuple[str, str], deque[Envelope]] = {
            (a, b): deque() for a in parties for b in parties if a != b
        }
        self._finished: set[str] = set()
        self._waiting: dict[str, str] = {}  # parked party -> the peer it waits for
        self._parked_since: dict[str, float] = {}
        self._pending: dict[str, BaseException] = {}  # an error to raise in a parked party when it resumes
        self._ready: deque[str] = deque()
        self._greenlets: dict[str, greenlet.greenlet] = {}
        self._hub: greenlet.greenlet | None = None

    # -- the Transport interface (called from the parties' greenlets) ---------------------------
    def _link(self, src: str, dst: str) -> deque[Envelope]:
        try:
            return self._links[(src, dst)]
        except KeyError:
            raise ProtocolError(f"no link {src}->{dst}; parties are {sorted(self._parties)}") from None

    def send(self, envelope: Envelope) -> None:
        self._link(envelope.src, envelope.dst).append(envelope)
        if self._waiting.get(envelope.dst) == envelope.src:
            self._wake(envelope.dst)

    def recv(self, dst: str, src: str, abort: threading.Event, timeout: float | None = None) -> Envelope:
        link = self._link(src, dst)
        while True:
            if link:  # delivered even after an abort: a party finishes the step it has the inputs for
                return link.popleft()  # (and, say, checkpoints it), then stops at its next send
            if abort.is_set():
                raise RunAborted(f"{dst} stopped waiting for {src}: the run was aborted")
            error = self._pending.pop(dst, None)
            if error is not None:
                raise error
            if src in self._finished:  # its sends happened before it finished: the link stays empty
                raise PeerFinishedError(src, dst)
            self._park(dst, src)

    def finish(self, party: str) -> None:
        self._finished.add(party)
        for waiter, peer in list(self._waiting.items()):
            if peer == party:
                self._wake(waiter)

    # -- scheduling ---------------------------------------------------------------------------------
    def _park(self, party: str, peer: str) -> None:
        hub = self._hub
        if hub is None or greenlet.getcurrent() is not self._greenlets.get(party):
            raise RuntimeError(f"{party} received outside CooperativeTransport.run")
        self._waiting[party] = peer
        self._parked_since[party] = time.monotonic()
        mode = _grad_mode()
        hub.switch()
        _set_grad_mode(mode)

    def _wake(self, party: str) -> None:
        if self._waiting.pop(party, None) is not None:
            self._parked_since.pop(party, None)
            self._ready.append(party)

    def parked(self) -> dict[str, tuple[str, float]]:
        """Parked parties: ``{party: (peer it waits for, monotonic time it parked)}`` (any thread)."""
        since = dict(self._parked_since)
        waiting = dict(self._waiting)
        return {p: (waiting[p], t) for p, t in since.items() if p in waiting}

    def run(self, bodies: Mapping[str, Callable[[], None]], abort: threading.Event) -> None:
        """Run every party's ``body`` (which must call :meth:`finish` when it ends) until all have ended.

        Ready parties run in turn; when none is ready but some are parked, the run is deadlocked:
        :class:`DeadlockError` is raised in one parked party (the first in role order) and the
        others then stop with :class:`RunAborted` once its failure sets ``abort``.
        """
        self._hub = greenlet.getcurrent()
        grad = _grad_mode()
        for name, body in bodies.items():
            self._greenlets[name] = greenlet.greenlet(body, parent=self._hub)
            self._ready.append(name)
        try:
            while True:
                if abort.is_set():  # wake every parked party: each raises RunAborted at its receive
                    for party in list(self._waiting):
                        self._wake(party)
                if self._ready:
                    party = self._ready.popleft()
                    self._greenlets[party].switch()
                    _set_grad_mode(grad)
                    continue
                if not self._waiting:
                    return
                self._break_deadlock()
        finally:
            self._hub = None

    def _break_deadlock(self) -> None:
        order = [p for p in self._parties if p in self._waiting]
        who = "; ".join(f"{p} waits for {self._waiting[p]}" for p in order)
        victim = order[0]
        self._pending[victim] = DeadlockError(
            victim, self._waiting[victim], f"every party is waiting and none can send ({who})")
        self._wake(victim)


__all__ = ["CooperativeTransport"]

"""Where batch work runs: this process, a local process pool, or a Ray cluster, behind one interface.

A :class:`TaskExecutor` maps a picklable module-level function over an iterable of tasks and
yields the results *in task order*, keeping at most ``window`` tasks in flight, so a caller can
stream millions of items through it with bounded memory (``concurrent.futures.Executor.map``
submits every task up front). Three implementations, chosen by name (:func:`create_executor`):

``inline``   run each task in this process (tests, small batches, ``workers=1``)
``process``  a ``ProcessPoolExecutor`` on this machine (forkserver, safe with threads)
``ray``      Ray remote tasks on a cluster (``address=None`` starts a local Ray instance);
             needs the optional extra ``securevfl[ray]``.

The PSI curve engine (:mod:`psi.curve`) and securevfl's Paillier ``fast`` backend both take an
executor, so one ``--executor ray --ray-address ...`` option scales either out. It lives in
``psi`` because ``psi`` stands alone (it imports nothing from securevfl) while securevfl may
import ``psi``. ``local`` says whether tasks stay on this machine: callers only ship secret
material (a Paillier private key) to executors that are local.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from typing import Any, Protocol, TypeVar, runtime_checkable

from .errors import PSIConfigError

_T = TypeVar("_T")
_R = TypeVar("_R")

EXECUTORS: tuple[str, ...] = ("inline", "process", "ray")


@runtime_checkable
class TaskExecutor(Protocol):
    """Maps a function over tasks on some workers, results in task order."""

    name: str
    workers: int
    local: bool

    def map(self, fn: Callable[[_T], _R], tasks: Iterable[_T]) -> Iterator[_R]:
        """Yield ``fn(task)`` for each task, in order, with a bounded number in flight."""
        ...

    def close(self) -> None:
        """Release the workers (idempotent)."""
        ...


@dataclass(frozen=True)
class ExecutorConfig:
    """Which executor to build: ``kind`` (see :data:`EXECUTORS`), workers, and the Ray address."""

    kind: str = "process"
    workers: int | None = None
    ray_address: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in EXECUTORS:
            raise PSIConfigError(f"executor must be one of {list(EXECUTORS)}, not {self.kind!r}")
        w = self.workers
        if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w < 1):
            raise PSIConfigError(f"workers must be a positive integer or None, got {w!r}")
        if self.ray_address is not None and self.kind != "ray":
            raise PSIConfigError("ray_address is only used with executor 'ray'")


class InlineExecutor:
    """Run every task in this process, one after another."""

    name = "inline"
    local = True

    def __init__(self) -> None:
        self.workers = 1

    def map(self, fn: Callable[[_T], _R], tasks: Iterable[_T]) -> Iterator[_R]:
        """Yield ``fn(task)`` for each task."""
        for task in tasks:
            yield fn(task)

    def close(self) -> None:
        """Nothing to release."""


class ProcessExecutor:
    """A local process pool (forkserver where available), created on first use.

    ``preload``: modules the forkserver imports once, so each worker starts with them loaded.
    Workers also re-import the ``__main__`` script (a multiprocessing rule), so a script that
    drives large batches should keep its top-level imports light. :meth:`start` boots the workers
    in a background thread, so that the caller can prepare its data meanwhile.
    """

    name = "process"
    local = True

    def __init__(self, workers: int | None = None, *, preload: Iterable[str] = (),
                 start_method: str | None = None, window_per_worker: int = 4) -> None:
        self.workers = max(1, (os.cpu_count() or 1) if workers is None else int(workers))
        self.preload = list(preload)
        self.start_method = start_method
        self.window = max(2, window_per_worker * self.workers)
        self._pool: ProcessPoolExecutor | None = None
        self._starting: threading.Thread | None = None

    def start(self) -> None:
        """Start the workers in the background (idempotent); ``map`` waits for them if needed."""
        if self._pool is None and self._starting is None:
            self._starting = threading.Thread(target=self._boot, name="psi-pool-start", daemon=True)
            self._starting.start()

    def _boot(self) -> None:
        pool = self._new_pool()
        for future in [pool.submit(int) for _ in range(self.workers)]:  # one no-op per worker spawns it
            future.result()
        self._pool = pool

    def _new_pool(self) -> ProcessPoolExecutor:
        import multiprocessing

        methods = multiprocessing.get_all_start_methods()
        method = self.start_method or ("forkserver" if "forkserver" in methods else "spawn")
        ctx: BaseContext = multiprocessing.get_context(method)
        if method == "forkserver" and self.preload:
            ctx.set_forkserver_preload(self.preload)
        return ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx)

    def _get_pool(self) -> ProcessPoolExecutor:
        if self._starting is not None:
            self._starting.join()
            self._starting = None
        if self._pool is None:
            self._pool = self._new_pool()
        return self._pool

    def map(self, fn: Callable[[_T], _R], tasks: Iterable[_T]) -> Iterator[_R]:
        """Yield ``fn(task)`` for each task, in order, at most ``window`` tasks submitted ahead."""
        pool = self._get_pool()
        pending: deque[Future[_R]] = deque()
        try:
            for task in tasks:
                pending.append(pool.submit(fn, task))
                if len(pending) >= self.window:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()

    def close(self, wait: bool = True) -> None:
        """Shut the pool down (it is recreated on the next ``map``)."""
        if self._starting is not None:
            self._starting.join()
            self._starting = None
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=True)
            self._pool = None


class RayExecutor:
    """Ray remote tasks, one CPU each; joins the cluster at ``address`` or starts a local Ray.

    Only shuts Ray down on :meth:`close` if this object started it. Workers must be able to import
    the mapped function's module (install securevfl on every node, see docs/psi_scale_out.md).
    """

    name = "ray"
    local = False

    def __init__(self, address: str | None = None, workers: int | None = None, *,
                 window_per_worker: int = 3) -> None:
        try:
            import ray
        except ImportError:
            raise PSIConfigError("executor 'ray' needs Ray: pip install 'securevfl[ray]'") from None
        self._ray: Any = ray
        self._owns = not ray.is_initialized()
        if self._owns:
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                      "configure_logging": False}
            if address is None and workers is not None:
                kwargs["num_cpus"] = workers
            ray.init(address=address, **kwargs)
        cluster_cpus = int(self._ray.cluster_resources().get("CPU", 1))
        self.workers = max(1, cluster_cpus if workers is None else min(int(workers), cluster_cpus))
        self.local = address is None or address in ("local", "")
        self.window = max(2, window_per_worker * self.workers)
        self._remotes: dict[Callable[..., Any], Any] = {}

    def map(self, fn: Callable[[_T], _R], tasks: Iterable[_T]) -> Iterator[_R]:
        """Yield ``fn(task)`` for each task, in order, at most ``window`` tasks in flight."""
        remote = self._remotes.get(fn)
        if remote is None:
            remote = self._remotes[fn] = self._ray.remote(num_cpus=1, max_retries=0)(fn)
        pending: deque[Any] = deque()
        try:
            for task in tasks:
                pending.append(remote.remote(task))
                if len(pending) >= self.window:
                    yield self._ray.get(pending.popleft())
            while pending:
                yield self._ray.get(pending.popleft())
        finally:
            for ref in pending:
                self._ray.cancel(ref, force=True)

    def close(self) -> None:
        """Shut Ray down if this executor started it."""
        if self._owns and self._ray.is_initialized():
            self._ray.shutdown()
        self._owns = False


def create_executor(config: ExecutorConfig | str = "process", *, preload: Iterable[str] = (),
                    start_method: str | None = None) -> TaskExecutor:
    """Build the executor a config (or bare kind name) asks for; ``workers=1`` means inline."""
    if isinstance(config, str):
        config = ExecutorConfig(kind=config)
    if config.kind == "ray":
        return RayExecutor(config.ray_address, config.workers)
    if config.kind == "inline" or config.workers == 1:
        return InlineExecutor()
    return ProcessExecutor(config.workers, preload=preload, start_method=start_method)


__all__ = [
    "EXECUTORS",
    "ExecutorConfig",
    "InlineExecutor",
    "ProcessExecutor",
    "RayExecutor",
    "TaskExecutor",
    "create_executor",
]

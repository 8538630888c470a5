"""A command's libraries load with the cyclic garbage collector paused.

Starting a party imports torch, scikit-learn, pandas and gRPC: millions of objects that live until
the process ends. While they load, Python's collector runs about 90 collections over them, 6 of them
full (it counts allocations, and an import is nothing but allocations), and frees next to nothing.

:func:`heavy_imports` pauses the collector around a command's import statements. In a process that
the ``securevfl`` command started (:func:`own_process`, entered by :func:`securevfl.cli.entry`), it
also moves what exists then into the permanent generation (:func:`gc.freeze`), so later collections
(and the imports a run makes later, such as torch's ``_dynamo`` at an optimizer's first step) never
walk those objects again. Frozen objects are still freed when their last reference goes; only a
reference cycle among them would stay until the process ends, which is why a program that calls
:func:`securevfl.cli.main` itself gets the pause but not the freeze.

Measured with three ``securevfl party`` processes of a loopback federation (SplitNN, 1 epoch, the
test suite's tables; ``tests/test_hardening_party.py``'s honest run), alternated, 4 runs each, on
the 2-core development machine: 14.0-15.6 s wall and 26.5-27.7 s of CPU before, 11.0-12.8 s and
20.3-23.6 s with pause and freeze (about 13.2 s and 24 s with the pause alone).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_OWN_PROCESS: ContextVar[bool] = ContextVar("securevfl_cli_own_process", default=False)


@contextmanager
def own_process() -> Iterator[None]:
    """Mark the block as the whole life of a process that the ``securevfl`` command started."""
    token = _OWN_PROCESS.set(True)
    try:
        yield
    finally:
        _OWN_PROCESS.reset(token)


@contextmanager
def heavy_imports() -> Iterator[None]:
    """Run the block (a command's imports) with the garbage collector paused; see the module's text.

    A nested use, or a collector that was already off, leaves it as it is: only the block that turned
    it off turns it back on, also when the block raises.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if _OWN_PROCESS.get():
            gc.freeze()
        gc.enable()

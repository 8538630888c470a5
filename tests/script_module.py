"""A script of the repository (benchmarks/, tools/) loaded as a module by its path, for its tests."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(path: Path, name: str) -> ModuleType:
    """The script at ``path`` executed as module ``name`` (registered in ``sys.modules``: its dataclasses
    look their module up there)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def script_module(path: Path, name: str) -> Iterator[ModuleType]:
    """:func:`load_script`, unregistered again on leaving."""
    try:
        yield load_script(path, name)
    finally:
        sys.modules.pop(name, None)

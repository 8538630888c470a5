"""The import graph of ``securevfl`` and ``psi``: no import circle, and no import of a higher layer.

Pure ``ast``: the modules are read, never imported. The graph counts every ``import`` statement,
top-level and inside functions (lazy imports). ``from X import name`` points at the module
``X.name`` when that is a module, else at ``X``; ``import a.b.c`` at the longest prefix that is a
module; relative imports are resolved against the importing module's package. Imports made from
strings (``import_module``: the root package's ``_LAZY`` table, ``psi``'s and ``securevfl.privacy``'s
lazy exports, registries) are not statements and are not seen.

* Circles: strongly connected components of the graph without the imports under
  ``if TYPE_CHECKING:`` (they never run).
* Layers: ``LAYERS`` below, bottom to top; a module may import its own layer or lower ones only.
  Here the ``TYPE_CHECKING`` imports count too: a type hint must not point up either.

docs/architecture.md ("Layers") shows the same table.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("securevfl", "psi")

# (pattern, layer): "x.*" is the module or package x and everything under it; "x" is x alone.
LAYERS: tuple[tuple[str, int], ...] = (
    ("psi.*", 0),
    ("securevfl", 0),
    ("securevfl.errors", 0),
    ("securevfl.settings", 0),
    ("securevfl.seeding", 0),
    ("securevfl.checks", 0),
    ("securevfl.lazy", 0),
    ("securevfl.method_names", 0),
    ("securevfl.federation.*", 1),
    ("securevfl.privacy.*", 2),
    ("securevfl.data.*", 3),
    ("securevfl.eval.*", 3),
    ("securevfl.networks.*", 3),
    ("securevfl.train_config", 3),
    ("securevfl.methods.*", 4),
    ("securevfl.model.*", 5),
    ("securevfl.attacks.*", 5),
    ("securevfl.report.*", 5),
    ("securevfl.exploration.*", 5),
    ("securevfl.run_config", 6),
    ("securevfl.deploy.*", 7),
    ("securevfl.pipeline.*", 8),
    ("securevfl.api", 8),
    ("securevfl.bench.*", 9),
    ("securevfl.cli.*", 10),
)


@dataclass(frozen=True)
class Edge:
    """One import statement of ``source`` that reaches the module ``target``."""

    source: str
    target: str
    line: int
    type_checking: bool


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the packages (a package is its ``__init__``)."""
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is one of our modules (None for third-party imports)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _edges(module: str, path: Path, modules: dict[str, Path]) -> list[Edge]:
    """Every import statement of one module, top-level or nested, resolved to our modules."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    edges: list[Edge] = []

    def add(target: str | None, node: ast.stmt, type_checking: bool) -> None:
        if target is not None and target != module:
            edges.append(Edge(module, target, node.lineno, type_checking))

    def visit(node: ast.AST, type_checking: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, type_checking)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(_resolve(alias.name, modules), node, type_checking)
            return
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                add(full if full in modules else _resolve(base, modules), node, type_checking)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, type_checking)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), False)
    return edges


@cache
def _graph() -> tuple[dict[str, Path], list[Edge]]:
    """All modules and all their imports, read once per test session."""
    modules = _modules()
    edges = [edge for module, path in modules.items() for edge in _edges(module, path, modules)]
    return modules, edges


def _layer(module: str) -> int | None:
    for pattern, layer in LAYERS:
        if pattern.endswith(".*"):
            stem = pattern[:-2]
            if module == stem or module.startswith(stem + "."):
                return layer
        elif module == pattern:
            return layer
    return None


def _circles(nodes: list[str], edges: list[Edge]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    successors: dict[str, list[str]] = {node: [] for node in nodes}
    for edge in edges:
        successors[edge.source].append(edge.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(successors[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(successors[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def test_every_module_has_a_layer():
    modules, _ = _graph()
    missing = sorted(module for module in modules if _layer(module) is None)
    assert not missing, f"add these modules to LAYERS in tests/test_layers.py (and docs/architecture.md): {missing}"


def test_no_import_circle():
    modules, edges = _graph()
    running = [edge for edge in edges if not edge.type_checking]
    circles = _circles(sorted(modules), running)
    details = [
        f"{sorted(circle)}: "
        + ", ".join(f"{e.source}:{e.line} -> {e.target}" for e in running if e.source in circle and e.target in circle)
        for circle in circles
    ]
    assert not circles, "import circles:\n" + "\n".join(details)


def test_no_import_of_a_higher_layer():
    _, edges = _graph()
    upward = sorted({
        f"{edge.source} (layer {_layer(edge.source)}) line {edge.line} "
        f"imports {edge.target} (layer {_layer(edge.target)})"
        + (" under TYPE_CHECKING" if edge.type_checking else "")
        for edge in edges
        if (_layer(edge.source) or 0) < (_layer(edge.target) or 0)
    })
    assert not upward, "imports of a higher layer:\n" + "\n".join(upward)


def test_the_checker_sees_circles_and_lazy_imports(tmp_path):
    """The graph code itself: a lazy import inside a function counts, a TYPE_CHECKING one does not."""
    (tmp_path / "a.py").write_text("def f():\n    from . import b\n")
    (tmp_path / "b.py").write_text("from typing import TYPE_CHECKING\n"
                                   "if TYPE_CHECKING:\n    import pkg.a\nimport pkg.c\n")
    (tmp_path / "c.py").write_text("from pkg import a\n")
    modules = {"pkg": tmp_path / "__init__.py", **{f"pkg.{n}": tmp_path / f"{n}.py" for n in "abc"}}
    edges = [edge for name, path in modules.items() if path.exists() for edge in _edges(name, path, modules)]
    assert {(e.source, e.target, e.type_checking) for e in edges} == {
        ("pkg.a", "pkg.b", False), ("pkg.b", "pkg.a", True), ("pkg.b", "pkg.c", False), ("pkg.c", "pkg.a", False),
    }
    assert _circles(sorted(modules), [e for e in edges if not e.type_checking]) == [["pkg.a", "pkg.b", "pkg.c"]]

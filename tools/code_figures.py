"""The code-shape figures issue 43 tracks, for a tree: largest files, long functions, complex functions, repeats.

    .venv/bin/python tools/code_figures.py                 # this working tree
    .venv/bin/python tools/code_figures.py --rev fef892e   # a commit (checked out into a temporary worktree)

Figures over ``securevfl/`` and ``psi/``: the largest file (lines), functions over 60 lines (``ast``:
from ``def`` to the last line of the body), functions of McCabe complexity over 10 (ruff's C901),
and the pairs of places sharing 8 or more lines (the ``duplicates`` command, where installed).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGES = ("securevfl", "psi")
ROOT = Path(__file__).resolve().parents[1]


def _sources(tree: Path) -> list[Path]:
    return sorted(p for package in PACKAGES for p in (tree / package).rglob("*.py"))


def long_functions(tree: Path, limit: int = 60) -> list[tuple[str, int]]:
    """(``file:function``, lines) of every function longer than ``limit`` lines."""
    out = []
    for path in _sources(tree):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    out.append((f"{path.relative_to(tree)}:{node.name}", lines))
    return sorted(out, key=lambda item: -item[1])


def complex_functions(tree: Path, limit: int = 10) -> int:
    """How many functions ruff's C901 finds over McCabe complexity ``limit``."""
    ruff = Path(sys.executable).with_name("ruff")
    result = subprocess.run([str(ruff), "check", "--select", "C901", "--config", f"lint.mccabe.max-complexity={limit}",
                             "--output-format", "concise", "--no-cache", *PACKAGES], cwd=tree, capture_output=True,
                            text=True, check=False)
    return sum(1 for line in result.stdout.splitlines() if " C901 " in line)


def repeated_pairs(tree: Path, min_lines: int = 8) -> int | None:
    """The pairs of places sharing ``min_lines`` or more lines (``duplicates --min-lines``), or None without it."""
    if shutil.which("duplicates") is None:
        return None
    result = subprocess.run(["duplicates", "--min-lines", str(min_lines), "--most", "200", "--seconds", "120"],
                            cwd=tree, capture_output=True, text=True, check=False)
    found = re.search(r"^(\d+) pairs? of places", result.stdout, re.MULTILINE)
    return int(found.group(1)) if found else 0


def figures(tree: Path) -> dict[str, object]:
    """Every figure of ``tree``."""
    sizes = sorted(((len(p.read_text().splitlines()), str(p.relative_to(tree))) for p in _sources(tree)), reverse=True)
    long = long_functions(tree)
    return {"largest_files": [{"file": f, "lines": n} for n, f in sizes[:5]],
            "functions_over_60_lines": len(long),
            "longest_functions": [{"function": f, "lines": n} for f, n in long[:8]],
            "c901_over_10": complex_functions(tree), "duplicates_min_lines_8_pairs": repeated_pairs(tree)}


def main(argv: list[str] | None = None) -> None:
    """Print the figures of this tree or of ``--rev`` as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", help="a commit to measure instead of the working tree")
    args = parser.parse_args(argv)
    if args.rev is None:
        print(json.dumps(figures(ROOT), indent=2))
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(work), args.rev], cwd=ROOT, check=True)
        try:
            print(json.dumps({"rev": args.rev, **figures(work)}, indent=2))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(work)], cwd=ROOT, check=False)


if __name__ == "__main__":
    main()

"""Names a reader can trust: one class per name across the packages, and no module imported under a
one-letter alias (`S` meant four different modules in four files; the community's np, sp, dt stay)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.tree import ROOT, files_under

PACKAGES = ("cli", "contract", "runtime", "operator", "api")
PYTHON = ("cli", "contract", "runtime", "operator", "api", "tests", "bench", "charts", "scripts", "cuda")


def sources(folders: tuple[str, ...]) -> list[Path]:
    """The project's Python files in `folders` (tests/tree.py: never a venv or build output beside them)."""
    return files_under(*folders, suffixes=(".py",))


def test_every_class_name_is_defined_once() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in sources(PACKAGES):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                where[node.name].append(str(path.relative_to(ROOT)))
    twice = {name: files for name, files in where.items() if len(files) > 1}
    assert not twice, twice


def test_no_module_is_imported_under_a_one_letter_alias() -> None:
    short = []
    for path in sources(PYTHON):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for alias in node.names:
                    if alias.asname is not None and len(alias.asname) == 1:
                        short.append(f"{path.relative_to(ROOT)}:{node.lineno} {alias.name} as {alias.asname}")
    assert not short, short

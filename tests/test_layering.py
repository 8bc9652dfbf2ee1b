"""The layers are checked, not only drawn: sail, flows → memory → journal → staging.

Imports go rightward only (flows and sail, side by side, never import each other), and no package
reaches into another's private modules (``x._y``): it uses the names ``x`` exports. Nothing outside
``journal/`` — tests and benchmarks included — touches ``journal._*``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import ROOT

RANK = {"staging": 0, "journal": 1, "memory": 2, "flows": 3, "sail": 3}


def _names(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Every dotted name a module imports or reaches through an attribute chain, with its line."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module
            yield from ((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            yield node.lineno, f"{node.value.id}.{node.attr}"


def _violations(path: Path, own: str | None) -> Iterator[str]:
    for line, name in _names(ast.parse(path.read_text(encoding="utf-8"))):
        top, *rest = name.split(".")
        if top not in RANK or top == own:
            continue
        where = f"{path.relative_to(ROOT)}:{line} {name}"
        if own is not None and RANK[top] >= RANK[own]:
            yield f"{where}: {own} may not import {top}"
        if any(part.startswith("_") for part in rest) and (own is not None or top == "journal"):
            yield f"{where}: a private module or name of {top}"


def test_imports_follow_the_layers_and_use_public_names() -> None:
    found = [v for pkg in RANK for path in (ROOT / pkg).rglob("*.py") for v in _violations(path, pkg)]
    assert found == []


def test_nothing_outside_journal_reaches_into_its_private_modules() -> None:
    paths = [path for d in ("tests", "benchmarks") for path in (ROOT / d).rglob("*.py")]
    assert [v for path in paths for v in _violations(path, None)] == []

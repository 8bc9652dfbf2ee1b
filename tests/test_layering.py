"""The layers are checked, not only drawn: sail, flows → memory → journal → staging.

Imports go rightward only (flows and sail, side by side, never import each other), and no package
reaches into another's private modules (``x._y``): it uses the names ``x`` exports. Nothing outside
``journal/`` — tests and benchmarks included — touches ``journal._*``. Within a package, no two
modules import each other (even through others), and no module takes another's private name: what
two modules share has one owner below both, under a public name.
"""

from __future__ import annotations

import ast
import functools
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


def _modules() -> dict[str, Path]:
    """Every module of the five packages by dotted name (a package by its own name)."""
    found = {}
    for pkg in RANK:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _arrows(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Which modules of its own package each module imports: at the top, in a function, or only for
    the type checker alike (each is an arrow a reader has to follow)."""
    arrows: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                # `from p import m` with m a module is an arrow to m (p's face only runs first,
                # as for every import of p's modules); with m a name, to p itself
                targets = [
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                    for a in node.names
                ]
            else:
                continue
            for target in map(functools.partial(_module_of, modules=modules), targets):
                if target and target != name and target.split(".")[0] == name.split(".")[0]:
                    arrows[name].add(target)
    return arrows


def _module_of(dotted: str, modules: dict[str, Path]) -> str:
    """The longest prefix of ``dotted`` that is a module (a name inside it belongs to it)."""
    while dotted and dotted not in modules:
        dotted = dotted.rpartition(".")[0]
    return dotted


def _circles(arrows: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for start in sorted(arrows):
        if start in index:
            continue
        work = [(start, iter(sorted(arrows[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, todo = work[-1]
            child = next(todo, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(arrows[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    circles.append(sorted(group))
    return circles


def test_no_two_modules_of_one_package_import_each_other_even_through_others() -> None:
    assert _circles(_arrows(_modules())) == []


def test_the_circle_check_finds_a_circle_through_a_third_module() -> None:
    arrows = {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p.d": {"p.a"}}
    assert _circles(arrows) == [["p.a", "p.b", "p.c"]]


def _private_names(where: str, text: str, modules: dict[str, Path]) -> Iterator[str]:
    """Each private name (``_x``, not a module) one module takes from another of the five packages:
    ``from m import _x`` or ``m._x`` through a module imported by name. A module's private names
    are its own; what two modules share lives in a module both import, under a public name."""
    tree = ast.parse(text)
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in RANK:
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] not in RANK:
                continue
            for a in node.names:
                dotted = f"{node.module}.{a.name}"
                if dotted in modules:
                    aliases[a.asname or a.name] = dotted
                elif a.name.startswith("_") and not a.name.startswith("__"):
                    yield f"{where}:{node.lineno} imports {dotted}"
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and f"{aliases[node.value.id]}.{node.attr}" not in modules
        ):
            yield f"{where}:{node.lineno} reads {aliases[node.value.id]}.{node.attr}"


def test_no_module_takes_a_private_name_of_another_module() -> None:
    modules = _modules()
    found = [
        v
        for path in modules.values()
        for v in _private_names(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"), modules)
    ]
    assert found == []


def test_the_private_name_check_finds_both_shapes() -> None:
    text = "from flows._timeline import _mapping\nfrom flows import _cli_common\n_cli_common._x\n"
    assert list(_private_names("probe.py", text, _modules())) == [
        "probe.py:1 imports flows._timeline._mapping",
        "probe.py:3 reads flows._cli_common._x",
    ]

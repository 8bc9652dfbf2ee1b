"""Every module the project imports from another distribution is declared where the importing code
needs it: the core's imports in the core dependencies, an integration's in its own extra.

An extra holds what its code imports at run time and nothing for tests or benchmarks (those live in
``test`` and ``bench``), so a user's ``pip install 'flows-memory[web]'`` gets exactly what the
dashboard runs on. An import that another package happens to bring along is still declared: the
project must not break when that package drops it.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("journal", "staging", "memory", "flows", "sail")

# Which requirement group a module's third-party imports belong to: the longest matching path prefix
# wins; "core" is the project's own dependencies.
GROUPS: dict[str, str] = {
    "journal": "core",
    "journal/_postgres.py": "postgres",
    "staging": "core",
    "memory": "core",
    "memory/_vectors.py": "semantic",
    "memory/_embed.py": "semantic",
    "memory/_align.py": "semantic",  # numpy, only for a hybrid why with an embedder
    "memory/cli.py": "completion",  # argcomplete, imported only when tab completion asks
    "flows": "core",
    "flows/_web_cli.py": "web",  # uvicorn, imported only by `flows serve`
    "flows/_uvicorn.py": "web",  # uvicorn, for `flows serve` and `flows mcp --http` (both extras carry it)
    "flows/web": "web",
    "flows/mcp": "mcp",
    "flows/langgraph": "langgraph",
    "sail": "chain",
}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(spec: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", spec)
    assert match is not None, spec
    return _normalise(match.group(0))


def _declared() -> dict[str, set[str]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    groups = {"core": {_requirement_name(s) for s in project["dependencies"]}}
    for extra, specs in project["optional-dependencies"].items():
        groups[extra] = {_requirement_name(s) for s in specs if not s.startswith("flows-memory[")}
    return groups


def _group_of(relative: str) -> str:
    matching = [prefix for prefix in GROUPS if relative == prefix or relative.startswith(prefix + "/")]
    best = max(matching, key=len)
    return GROUPS[best]


def _guarded(tree: ast.Module) -> set[int]:
    """Line numbers of imports inside a ``try`` whose handler catches ``ImportError``: optional ones."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try):
            continue
        names = {ast.unparse(h.type) for h in node.handlers if h.type is not None}
        if not names & {"ImportError", "ModuleNotFoundError"}:
            continue
        for inner in node.body:
            lines.update(n.lineno for n in ast.walk(inner) if isinstance(n, ast.Import | ast.ImportFrom))
    return lines


def _third_party_imports() -> list[tuple[str, int, str, bool]]:
    """(module path, line, top-level import name, guarded) for every import of another distribution."""
    found = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            guarded = _guarded(tree)
            relative = path.relative_to(REPO).as_posix()
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top in PACKAGES or top in sys.stdlib_module_names or top == "__future__":
                        continue
                    found.append((relative, node.lineno, top, node.lineno in guarded))
    return found


def test_every_imported_distribution_is_declared_in_the_group_of_the_code_that_imports_it() -> None:
    declared = _declared()
    anywhere = set().union(*declared.values())
    distributions = importlib.metadata.packages_distributions()
    undeclared = []
    for relative, line, top, guarded in _third_party_imports():
        owners = {_normalise(d) for d in distributions.get(top, [])}
        assert owners, f"{relative}:{line} imports {top}, which no installed distribution provides"
        group = _group_of(relative)
        allowed = anywhere if guarded else declared["core"] | declared.get(group, set())
        if not owners & allowed:
            names = ", ".join(sorted(owners))
            undeclared.append(f"{relative}:{line} imports {top} ({names}) — not in [{group}]")
    assert undeclared == []


def test_the_runtime_extras_carry_no_test_suite_or_benchmark_peer() -> None:
    declared = _declared()
    runtime = {name: reqs for name, reqs in declared.items() if name not in {"test", "bench", "dev"}}
    leaked = {
        name: sorted(r for r in reqs if "conformance" in r or r in {"langgraph-checkpoint-sqlite", "pytest"})
        for name, reqs in runtime.items()
    }
    assert {name: found for name, found in leaked.items() if found} == {}


@pytest.mark.parametrize("group", sorted(set(GROUPS.values()) - {"core"}))
def test_each_group_the_code_names_is_an_extra_that_dev_installs(group: str) -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    dev = next(s for s in project["optional-dependencies"]["dev"] if s.startswith("flows-memory["))
    assert group in project["optional-dependencies"]
    assert group in dev[len("flows-memory[") : -1].split(",")


def test_the_readme_names_every_extra_and_what_each_brings() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Installing only what you use") :]
    section = section[: section.index("\n## ", 4)]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            for name in re.findall(r"`([a-z]+)`", cells[0]):
                rows[name] = cells[1]
    declared = _declared()
    assert set(rows) == set(declared) - {"core"}, "an extra is missing from the README's table, or is extra"
    for extra in ("postgres", "web", "mcp", "langgraph", "chain", "completion"):
        brings = {_normalise(w) for w in re.findall(r"[A-Za-z][A-Za-z0-9._-]*", rows[extra])}
        missing = {d for d in declared[extra] if d not in brings}
        assert not missing, f"README's {extra} row does not name {sorted(missing)}"

"""The public face of each package, and what importing it pulls in."""

from __future__ import annotations

import importlib

import pytest

from tests.conftest import run_python


@pytest.mark.parametrize("package", ["journal", "staging", "memory", "memory.ledger", "flows", "flows.mcp"])
def test_every_name_in_all_is_exported_and_public(package: str) -> None:
    mod = importlib.import_module(package)
    for name in mod.__all__:
        assert hasattr(mod, name), f"{package}.{name} is in __all__ but missing"
        assert not name.startswith("_")
    public = {n for n in vars(mod) if not n.startswith("_") and not isinstance(getattr(mod, n), type(mod))}
    assert public <= set(mod.__all__) | {"annotations"}


def test_importing_the_core_never_imports_web3_or_psycopg() -> None:
    code = (
        "import journal, staging, memory, memory.ledger, flows, sail, sys;"
        "print(sorted(m for m in ('web3', 'psycopg') if m in sys.modules))"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


#: every package that may define coded errors; importing them registers their subclasses
_PACKAGES = (
    "staging",
    "journal",
    "memory",
    "memory.ledger",
    "memory.cli",
    "flows",
    "flows.mcp",
    "flows.web",
    "flows.langgraph",
    "sail",
)


def _coded_classes() -> list[type]:
    """Every subclass of the two bases (errors, and Ctrl-Cs with a code), walked from them."""
    from staging import CodedError, CodedInterrupt

    for name in _PACKAGES:
        importlib.import_module(name)
    found: list[type] = []
    todo: list[type] = [CodedError, CodedInterrupt]
    while todo:
        cls = todo.pop()
        if cls.__module__.split(".")[0] in {p.split(".")[0] for p in _PACKAGES}:
            found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def _public_name(cls: type) -> str:
    """``package.Class``, the name the class is exported under (its module's nearest public package)."""
    parts = cls.__module__.split(".")
    public = ".".join(p for p in parts if not p.startswith("_"))
    return f"{public}.{cls.__qualname__}"


def test_every_coded_error_has_its_own_code_and_its_row_in_the_surface_table() -> None:
    import re

    from tests.conftest import ROOT

    table = (ROOT / "docs" / "SURFACE.md").read_text()
    documented = dict(re.findall(r"^\| `([\w.]+)` \| `(\w+)`", table, re.M))
    classes = _coded_classes()
    assert len(classes) >= 30
    missing_own_code = [c.__qualname__ for c in classes if not isinstance(c.__dict__.get("code"), str)]
    assert missing_own_code == []
    by_code: dict[str, list[str]] = {}
    for cls in classes:
        by_code.setdefault(cls.__dict__["code"], []).append(_public_name(cls))
    assert {code: names for code, names in by_code.items() if len(names) > 1} == {}  # one class per code
    rows = {_public_name(cls): cls.__dict__["code"] for cls in classes}
    assert {name: code for name, code in rows.items() if documented.get(name) != code} == {}
    for code in rows.values():
        if not code.endswith(("_error", "_usage", "_contention", "_storage", "_interrupt")):
            assert f"| `{code}` |" in table, f"{code} has no row saying when it is raised"


def test_every_exception_class_with_a_code_is_in_the_one_tree() -> None:
    """An exception class anywhere in the packages that carries a ``code`` derives from one of the
    two bases, so the CLIs, MCP and the surface table meet it through ``CodedError``."""
    import ast
    import inspect

    from staging import CodedError, CodedInterrupt
    from tests.conftest import ROOT

    outside = []
    for package in {p.split(".")[0] for p in _PACKAGES}:
        for path in (ROOT / package).rglob("*.py"):
            module_name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            tree = ast.parse(path.read_text())
            coded = [
                node.name
                for node in tree.body
                if isinstance(node, ast.ClassDef)
                and any(isinstance(s, ast.Assign) and "code" in ast.unparse(s.targets[0]) for s in node.body)
            ]
            if not coded:
                continue
            module = importlib.import_module(module_name)
            for name in coded:
                cls = getattr(module, name)
                is_exception = inspect.isclass(cls) and issubclass(cls, BaseException)
                if is_exception and not issubclass(cls, CodedError | CodedInterrupt):
                    outside.append(f"{module_name}.{name}")
    assert outside == []


def test_every_coded_error_is_exported_by_its_package() -> None:
    for cls in _coded_classes():
        module = importlib.import_module(_public_name(cls).rsplit(".", 1)[0])
        assert getattr(module, cls.__qualname__) is cls
        assert cls.__qualname__ in module.__all__


def test_as_json_carries_the_code_the_message_and_the_context_fields() -> None:
    import journal

    exc = journal.JournalLeaseLost("stale epoch", expected=3, got=2, run_id="r1", stream="s")
    assert exc.as_json() == {
        "code": "journal_lease_lost",
        "message": "stale epoch",
        "runId": "r1",
        "stream": "s",
        "expected": 3,
        "got": 2,
    }
    corrupt = journal.JournalCorrupt("bad line", path="/x/log", line=7, reason="crc")
    assert corrupt.as_json() == {
        "code": "journal_corrupt",
        "message": "bad line",
        "path": "/x/log",
        "line": 7,
        "reason": "crc",
    }


def test_sail_and_its_errors_import_without_web3() -> None:
    code = (
        "import sys\n"
        "for name in ('web3', 'eth_account', 'eth_utils', 'hexbytes', 'requests', 'eth_tester'):\n"
        "    sys.modules[name] = None  # an import of it now fails, as with the chain extra missing\n"
        "import sail, sail._cli, staging\n"
        "print(issubclass(sail.SailError, staging.CodedError))"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"


@pytest.mark.parametrize("package", ["staging", "journal", "memory", "flows", "sail"])
def test_every_package_reports_the_installed_version(package: str) -> None:
    from importlib import metadata

    assert importlib.import_module(package).__version__ == metadata.version("flows-memory")


def test_the_codes_a_memory_command_refuses_as_bad_input_are_documented_with_exit_2() -> None:
    """Every command exits 2 for a malformed finding or argument (``memory.cli``'s exit status for
    the code); the table says so (1 only when a flow body raises it: its run failed)."""
    from tests.conftest import ROOT

    rows = {
        cells[1].strip(" `"): cells[-2].strip()
        for line in (ROOT / "docs" / "SURFACE.md").read_text().splitlines()
        if line.startswith("| `") and len(cells := line.split("|")) > 4
    }
    for code in ("memory_finding_invalid", "memory_argument_invalid"):
        assert rows[code].startswith("2"), (code, rows[code])

"""The public face of each package, and what importing it pulls in."""

from __future__ import annotations

import importlib

import pytest

from tests.conftest import run_python


@pytest.mark.parametrize("package", ["journal", "staging", "memory", "flows"])
def test_every_name_in_all_is_exported_and_public(package: str) -> None:
    mod = importlib.import_module(package)
    for name in mod.__all__:
        assert hasattr(mod, name), f"{package}.{name} is in __all__ but missing"
        assert not name.startswith("_")
    public = {n for n in vars(mod) if not n.startswith("_") and not isinstance(getattr(mod, n), type(mod))}
    assert public <= set(mod.__all__) | {"annotations"}


def test_importing_the_core_never_imports_web3_or_psycopg() -> None:
    code = (
        "import journal, staging, memory, flows, sys;"
        "print(sorted(m for m in ('web3', 'psycopg') if m in sys.modules))"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def _error_classes() -> list[type]:
    import inspect

    import flows
    import journal
    import memory
    import memory.ledger
    import staging

    found: list[type] = []
    modules = [journal, staging, memory, flows, memory.ledger]
    try:
        import sail

        modules.append(sail)
    except ImportError:  # pragma: no cover - sail needs the chain extra
        pass
    for mod in modules:
        for value in vars(mod).values():
            if (
                inspect.isclass(value)
                and issubclass(value, Exception)
                and isinstance(value.__dict__.get("code"), str)
            ):
                found.append(value)
    return found


def test_every_error_code_has_its_row_in_the_one_surface_table() -> None:
    from tests.conftest import ROOT

    table = (ROOT / "docs" / "SURFACE.md").read_text()
    codes = {cls.__dict__["code"] for cls in _error_classes()}
    # base classes name a family, not something raised
    families = {
        "journal_error",
        "journal_usage",
        "journal_contention",
        "journal_storage",
        "staging_error",
        "memory_error",
        "flows_error",
        "ledger_error",
        "sail_error",
    }
    missing = sorted(c for c in codes - families if f"`{c}`" not in table)
    assert missing == []
    assert len(codes) >= 20

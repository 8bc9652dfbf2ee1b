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

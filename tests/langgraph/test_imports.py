"""The adapters stay behind their extra: the core never imports LangGraph."""

from __future__ import annotations

import inspect

import flows.langgraph
from tests.conftest import ROOT, run_python


def test_importing_the_core_never_imports_langgraph() -> None:
    code = (
        "import journal, staging, memory, flows, sys;"
        "print(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in"
        " ('langgraph', 'langchain_core', 'ormsgpack')}))"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_importing_the_adapters_imports_langgraph() -> None:
    result = run_python("import flows.langgraph, sys; print('langgraph.checkpoint.base' in sys.modules)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"


def test_every_name_in_all_is_exported_and_public() -> None:
    for name in flows.langgraph.__all__:
        assert hasattr(flows.langgraph, name) and not name.startswith("_")
    public = {
        n for n, v in vars(flows.langgraph).items() if not n.startswith("_") and not inspect.ismodule(v)
    }
    assert public <= set(flows.langgraph.__all__) | {"annotations"}


def test_every_error_code_of_the_adapters_has_its_row_in_the_surface_table() -> None:
    table = (ROOT / "docs" / "SURFACE.md").read_text()
    codes = {
        v.__dict__["code"]
        for v in vars(flows.langgraph).values()
        if inspect.isclass(v) and issubclass(v, Exception) and isinstance(v.__dict__.get("code"), str)
    }
    assert len(codes) >= 5
    missing = sorted(c for c in codes - {"langgraph_error"} if f"`{c}`" not in table)
    assert missing == []

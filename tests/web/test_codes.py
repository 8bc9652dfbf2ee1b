"""Every code of the dashboard has its row in docs/SURFACE.md, and the package exports its names."""

from __future__ import annotations

import inspect

import flows.web
from tests.conftest import ROOT


def test_every_serve_code_has_its_row_in_the_surface_table() -> None:
    table = (ROOT / "docs" / "SURFACE.md").read_text()
    codes = {
        cls.code
        for cls in vars(flows.web._errors).values()
        if inspect.isclass(cls) and issubclass(cls, flows.web.ServeError) and cls is not flows.web.ServeError
    }
    assert len(codes) == 9
    assert sorted(c for c in codes if f"`{c}`" not in table) == []


def test_every_name_in_all_is_exported() -> None:
    for name in flows.web.__all__:
        assert getattr(flows.web, name) is not None

"""Every error code of the ledger and of sail has its row in the docs/SURFACE tables."""

from __future__ import annotations

import re

import memory.ledger as ml
import sail
from tests.conftest import ROOT


def _codes() -> set[str]:
    from tests.test_surface import _coded_classes

    return {
        c.__dict__["code"]
        for c in _coded_classes()
        if c.__module__.startswith(("memory.ledger", "sail")) and c.__subclasses__() == []
    }  # a class with subclasses is a family, never raised itself


def test_every_code_has_a_row_with_exit_status_1() -> None:
    table = "".join(p.read_text() for p in (ROOT / "docs").glob("SURFACE*.md"))
    rows = dict(re.findall(r"^\| `([a-z_]+)` \|.*\| (\d) \|$", table, re.M))
    assert {code: rows.get(code) for code in _codes()} == dict.fromkeys(_codes(), "1")


def test_each_error_says_what_to_do_and_carries_its_code() -> None:
    err = ml.LedgerInvalidEntry("gasUsed", "must be a decimal string or null")
    assert (err.code, err.field) == ("ledger_invalid_entry", "gasUsed")
    assert "build entries with Acted/Skipped" in str(err)
    assert sail.SailConfigMissing("x").code == "sail_config_missing"

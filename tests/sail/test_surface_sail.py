"""Every error code of the ledger and of sail has its row in the docs/SURFACE tables."""

from __future__ import annotations

import re

import memory.ledger as ml
import sail
from tests.conftest import ROOT


def _codes() -> set[str]:
    classes = [getattr(ml, n) for n in ml.__all__] + [getattr(sail, n) for n in sail.__all__]
    return {
        c.code for c in classes if isinstance(c, type) and issubclass(c, Exception) and hasattr(c, "code")
    } - {"ledger_error", "sail_error"}  # the bases are never raised


def test_every_code_has_a_row_with_exit_status_1() -> None:
    table = "".join(p.read_text() for p in (ROOT / "docs").glob("SURFACE*.md"))
    rows = dict(re.findall(r"^\| `([a-z_]+)` \|.*\| (\d) \|$", table, re.M))
    assert {code: rows.get(code) for code in _codes()} == dict.fromkeys(_codes(), "1")


def test_each_error_says_what_to_do_and_carries_its_code() -> None:
    err = ml.LedgerInvalidEntry("gasUsed", "must be a decimal string or null")
    assert (err.code, err.field) == ("ledger_invalid_entry", "gasUsed")
    assert "build entries with Acted/Skipped" in str(err)
    assert sail.SailConfigMissing("x").code == "sail_config_missing"

"""Fixtures of the ledger tests: every ledger a test leaves is held to the entry schema."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ledger.schema import assert_entry_schema


@pytest.fixture(autouse=True)
def _ledgers_keep_the_entry_schema(tmp_path: Path) -> Iterator[None]:
    """After each test, check every ledger under its tmp_path (except under a ``damaged`` folder)."""
    yield
    assert_entry_schema(tmp_path)

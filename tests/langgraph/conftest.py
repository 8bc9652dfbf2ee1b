"""Fixtures of the LangGraph adapters' tests: a fresh journal of each backend, and savers on it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from flows.langgraph import JournalSaver


@pytest.fixture
def saver(journal_location: str) -> Iterator[JournalSaver]:
    """A ``JournalSaver`` on a fresh journal of each backend (file, PostgreSQL)."""
    with JournalSaver(journal=journal_location) as s:
        yield s

"""Helpers for the PostgreSQL backend's own tests (fixtures come from ``tests.pg_fixtures``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from journal.postgres import PostgresJournal

OpenPg = Callable[..., PostgresJournal]


@pytest.fixture
def open_pg(postgres_dsn: str) -> Iterator[OpenPg]:
    """Open PostgreSQL journals on the test's schema (or ``dsn=``); all are closed at teardown."""
    opened: list[PostgresJournal] = []

    def open_one(dsn: str | None = None, **options: Any) -> PostgresJournal:
        jr = PostgresJournal(dsn or postgres_dsn, **options)
        opened.append(jr)
        return jr

    yield open_one
    for jr in opened:
        jr.close()


@pytest.fixture
def pg(open_pg: OpenPg) -> PostgresJournal:
    """A PostgreSQL journal in a fresh private schema."""
    return open_pg()

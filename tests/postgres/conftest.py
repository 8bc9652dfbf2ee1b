"""Helpers for the PostgreSQL backend's own tests (fixtures come from ``tests.pg_fixtures``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from journal._postgres import PostgresJournal


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[PostgresJournal]:
    """A PostgreSQL journal in a fresh private schema."""
    backend = PostgresJournal(postgres_dsn)
    yield backend
    backend.close()

"""Helpers for the PostgreSQL backend's own tests (fixtures come from ``tests.pg_fixtures``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from journal.postgres import PostgresJournal
from tests.pg_fixtures import admin_connection, server_dsn, with_schema

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


@pytest.fixture
def other_dsn(postgres_dsn: str) -> Iterator[str]:
    """A second private schema on the same server, for a second journal (dropped afterwards)."""
    schema = re.sub(r".*search_path%3D", "", postgres_dsn) + "_other"
    with admin_connection() as conn:
        conn.execute(f'create schema "{schema}"')
    try:
        yield with_schema(server_dsn(), schema)
    finally:
        with admin_connection() as conn:
            conn.execute(f'drop schema if exists "{schema}" cascade')


def turn_holder(dsn: str, name: str) -> int | None:
    """The backend pid holding the turn ``name`` exclusively (read from the server's lock table), or
    None."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "select pid from pg_locks l where l.locktype = 'advisory' and l.granted and l.objsubid = 2"
            " and l.classid = 1953854062 and l.mode = 'ExclusiveLock'"
            " and l.objid::bigint = hashtext(current_schema() || ':' || %s)::bigint & 4294967295",
            (name,),
        ).fetchone()
    return None if row is None else int(row[0])

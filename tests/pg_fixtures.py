"""PostgreSQL fixtures: a private, fresh schema per test on the server at ``$FLOWS_TEST_PG``.

Each test gets a DSN whose ``search_path`` names a schema created for it alone and dropped at
teardown, so tests never see each other's runs. Without a reachable server the tests that need one
skip, saying how to start it; with ``$CI`` set they fail instead (CI must run them).
"""

from __future__ import annotations

import os
import secrets
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

DEFAULT_TEST_PG = "postgresql://postgres@127.0.0.1:5432/test"
START_HINT = "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"


def server_dsn() -> str:
    """The test server's DSN: ``$FLOWS_TEST_PG``, else the local trust-auth default."""
    return os.environ.get("FLOWS_TEST_PG") or DEFAULT_TEST_PG


def with_schema(dsn: str, schema: str) -> str:
    """Return ``dsn`` (a URL) with libpq ``options`` that set ``search_path`` to ``schema``."""
    parts = urllib.parse.urlsplit(dsn)
    query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query) if k != "options"]
    query.append(("options", f"-csearch_path={schema}"))
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


def _unreachable(why: str) -> None:
    message = (
        f"the PostgreSQL test server at {server_dsn()} is unreachable ({why}); start it with "
        f"`{START_HINT}` or point $FLOWS_TEST_PG at one"
    )
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(f"skipping PostgreSQL test: {message}")


def admin_connection() -> Any:
    """An autocommit connection to the test server, or skip/fail (under ``$CI``) saying how to start it."""
    try:
        import psycopg
    except ImportError:
        _unreachable("psycopg is not installed: pip install 'flows-memory[postgres]'")
        raise  # unreachable: _unreachable always raises
    try:
        return psycopg.connect(server_dsn(), autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        _unreachable(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
        raise


@pytest.fixture
def postgres_dsn() -> Iterator[str]:
    """A DSN to an empty, private schema on the test server, dropped after the test."""
    from psycopg import sql

    schema = f"flows_test_{secrets.token_hex(6)}"
    with admin_connection() as conn:
        conn.execute(sql.SQL("create schema {}").format(sql.Identifier(schema)))
    try:
        yield with_schema(server_dsn(), schema)
    finally:
        _drop(schema)


def _drop(schema: str) -> None:
    import psycopg
    from psycopg import sql

    try:
        with psycopg.connect(server_dsn(), autocommit=True, connect_timeout=10) as conn:
            # Sessions left by killed or stopped test processes could hold locks on the tables.
            conn.execute("set lock_timeout = '10s'")
            conn.execute(sql.SQL("drop schema if exists {} cascade").format(sql.Identifier(schema)))
    except psycopg.Error:
        pass  # the server went away (a restart test): the schema is left, harmless and unique

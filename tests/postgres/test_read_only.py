"""A journal on a database that takes no writes (``default_transaction_read_only``, a standby, a
read-only role) is read as any other: opening it only reads the schema's version when that is
current. Every write fails as ``journal_unwritable`` saying the database takes no writes, and
writes nothing."""

from __future__ import annotations

import secrets
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import journal
from journal.postgres import PostgresJournal
from tests._helpers.hosts import host, host_db
from tests.conftest import ROOT
from tests.pg_fixtures import admin_connection, server_dsn


@pytest.fixture
def private_database() -> Iterator[str]:
    """A DSN to a database made for this test alone (dropped after it)."""
    name = f"flows_ro_{secrets.token_hex(6)}"
    with admin_connection() as conn:
        conn.execute(f"create database {name}")
    try:
        yield urllib.parse.urlsplit(server_dsn())._replace(path=f"/{name}").geturl()
    finally:
        with admin_connection() as conn:
            conn.execute(f"drop database if exists {name} with (force)")


def _read_only(dsn: str) -> None:
    name = urllib.parse.urlsplit(dsn).path.lstrip("/")
    with admin_connection() as conn:
        conn.execute(f"alter database {name} set default_transaction_read_only = on")


def test_a_read_only_database_is_read_and_refuses_every_write_clearly(private_database: str) -> None:
    from journal.postgres import PostgresJournal

    with PostgresJournal(private_database) as jr:
        info, lease = jr.begin("f", "s", {})
        jr.append(lease, "a", {"n": 1}, key="k")
        jr.release(lease)
    _read_only(private_database)
    with PostgresJournal(private_database) as jr:
        assert [r.run_id for r in jr.runs()] == [info.run_id]
        assert [r.payload for r in jr.read(info.run_id, "a")] == [{"n": 1}]
        assert jr.find(info.run_id, "a", "k") is not None
        assert jr.streams(info.run_id) == ["a"]
        for write in (lambda: jr.begin("f", "s", {}), lambda: jr.acquire(info.run_id)):
            with pytest.raises(journal.JournalUnwritable) as err:
                write()
            assert err.value.code == "journal_unwritable"
            assert "takes no writes" in str(err.value)
        assert len(jr.runs()) == 1  # nothing was written
        assert jr.run(info.run_id).epoch == 1


def test_a_store_learns_what_a_read_only_journal_holds(private_database: str, tmp_path: Path) -> None:
    store = host(tmp_path, "a", private_database)
    with store, store.session(scope="s") as s:
        s.learn({"text": "the fee is 0.3 percent"})
    _read_only(private_database)
    db = host_db(tmp_path, "b")
    db.parent.mkdir()
    where = ["--db", str(db), "--journal", private_database, "--json"]
    for command in (["sync"], ["recall", "--scope", "s"]):
        proc = subprocess.run(
            [sys.executable, "-m", "flows", *command, *where],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, (command, proc.stdout, proc.stderr)
    assert "the fee is 0.3 percent" in proc.stdout


@pytest.mark.parametrize("version", [0, 3])
def test_a_read_only_database_whose_schema_is_older_is_unavailable_saying_to_migrate_it_once(
    postgres_dsn: str, version: int
) -> None:
    """It cannot be migrated there, so nothing can be read: the driver's refusal of the first DDL
    said the database takes no writes and that reads work, which they did not."""
    if version:
        with PostgresJournal(postgres_dsn) as jr:
            _, lease = jr.begin("f", "s", {})
            jr.append(lease, "s", {"n": 1})
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:  # as version 3 left it
            conn.execute("drop table journal_heads")
            conn.execute("update journal_schema set version = %s", (version,))
    read_only = postgres_dsn.replace(
        "search_path%3D", "default_transaction_read_only%3Don%20-csearch_path%3D"
    )
    with PostgresJournal(read_only) as jr, pytest.raises(journal.JournalUnavailable) as err:
        jr.runs()
    message = str(err.value)
    assert "takes no writes" in message and "writable connection" in message
    assert "reads work" not in message
    assert (f"schema version {version}" in message) == bool(version)
    if version:
        with admin_connection() as conn:
            schema = postgres_dsn.rpartition("search_path%3D")[2]
            assert conn.execute(f'select version from "{schema}".journal_schema').fetchall() == [(version,)]

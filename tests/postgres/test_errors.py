"""Driver failures become journal errors in one place, and the backend reconnects afterwards."""

from __future__ import annotations

import inspect

import psycopg
import psycopg.errors
import pytest
from psycopg.conninfo import conninfo_to_dict

import journal
from journal.postgres import PostgresJournal, redact_dsn
from tests.pg_fixtures import admin_connection
from tests.postgres.conftest import OpenPg


def _driver_errors() -> list[type[psycopg.Error]]:
    found = {psycopg.Error, psycopg.InterfaceError}
    for _, obj in inspect.getmembers(psycopg.errors, inspect.isclass):
        if issubclass(obj, psycopg.Error):
            found.add(obj)
    return sorted(found, key=lambda c: c.__name__)


@pytest.mark.parametrize("reading", [True, False], ids=["read", "write"])
def test_every_driver_error_is_translated_to_a_journal_storage_error(reading: bool) -> None:
    jr = PostgresJournal("postgresql://flows:s3cret@db.example:5432/j")
    errors = _driver_errors()
    assert len(errors) > 200  # every SQLSTATE class psycopg knows, not a hand-picked few
    for cls in errors:
        with (
            pytest.raises(journal.JournalStorageError) as caught,
            jr._translated("testing", run_id="r1", stream="s", reading=reading),
        ):
            raise cls("boom")
        unavailable = issubclass(cls, psycopg.OperationalError | psycopg.InterfaceError)
        expected = (
            journal.JournalUnavailable
            if unavailable
            else journal.JournalReadInterrupted
            if reading
            else journal.JournalUnwritable
        )
        assert type(caught.value) is expected, cls
        assert (caught.value.run_id, caught.value.stream) == ("r1", "s")
        assert isinstance(caught.value.__cause__, cls)
        assert "s3cret" not in str(caught.value)
    jr.close()


def test_an_unreachable_server_is_journal_unavailable_naming_the_dsn_without_its_password() -> None:
    jr = journal.open_journal("postgresql://flows:s3cret@127.0.0.1:1/nowhere")
    with pytest.raises(journal.JournalUnavailable) as caught:
        jr.runs()
    assert caught.value.code == "journal_unavailable"
    assert "postgresql://flows@127.0.0.1:1/nowhere" in str(caught.value)
    assert "s3cret" not in str(caught.value)
    with pytest.raises(journal.JournalUnavailable) as caught:
        jr.acquire("20000101T000000-0000000000")
    assert caught.value.run_id == "20000101T000000-0000000000"
    with pytest.raises(journal.JournalUnavailable):
        jr.begin("f", "s", {})
    jr.close()


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("postgresql://u:pw@h:5432/db", "postgresql://u@h:5432/db"),
        ("postgres://u@h/db?password=pw&sslmode=require", "postgres://u@h/db?sslmode=require"),
        ("postgresql://h/db", "postgresql://h/db"),
        ("host=h user=u password=pw dbname=db", "host=h user=u dbname=db"),
    ],
)
def test_messages_name_the_dsn_without_its_password(dsn: str, shown: str) -> None:
    if "://" in dsn:
        assert redact_dsn(dsn) == shown
    else:  # libpq orders key=value pairs its own way
        assert conninfo_to_dict(redact_dsn(dsn)) == conninfo_to_dict(shown)


def _terminate_sessions_in(application: str) -> int:
    """Kill the server sessions that connected with ``application_name`` = ``application``."""
    with admin_connection() as conn:
        rows = conn.execute(
            "select pg_terminate_backend(pid) from pg_stat_activity"
            " where pid <> pg_backend_pid() and application_name = %s",
            (application,),
        ).fetchall()
    return len(rows)


def test_after_its_sessions_are_killed_the_journal_reconnects_and_reads_fresh_data(
    open_pg: OpenPg,
    postgres_dsn: str,
) -> None:
    dsn = f"{postgres_dsn}&application_name=reconnect-test"
    jr = open_pg(dsn)
    writer = open_pg()
    info, lease = writer.begin("f", "s", {})
    writer.append(lease, "a", {"n": 1})
    assert [r.payload["n"] for r in jr.read(info.run_id, "a")] == [1]
    assert _terminate_sessions_in("reconnect-test") >= 1
    writer.append(lease, "a", {"n": 2})
    # The pooled connection is dead; the call that meets it starts afresh instead of failing.
    assert [r.payload["n"] for r in jr.read(info.run_id, "a")] == [1, 2]
    jr.close()
    writer.close()


def test_a_failed_read_raises_unavailable_and_the_next_read_goes_to_the_server_again(
    open_pg: OpenPg, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    jr = open_pg(f"{postgres_dsn}&application_name=failed-read-test")
    info, lease = jr.begin("f", "s", {})
    jr.append(lease, "a", {"n": 1})
    assert len(jr.read(info.run_id, "a")) == 1
    _terminate_sessions_in("failed-read-test")

    def refused(*args: object, **kwargs: object) -> psycopg.Connection[object]:
        raise psycopg.OperationalError("connection refused (simulated outage)")

    monkeypatch.setattr(psycopg, "connect", refused)
    with pytest.raises(journal.JournalUnavailable) as caught:
        jr.read(info.run_id, "a")
    assert (caught.value.run_id, caught.value.stream) == (info.run_id, "a")
    assert "simulated outage" in str(caught.value)
    monkeypatch.undo()
    other = open_pg()
    other_lease = other.acquire(info.run_id)  # the holder's session was killed: the run is free
    other.append(other_lease, "a", {"n": 2})
    assert [r.payload["n"] for r in jr.read(info.run_id, "a")] == [1, 2]
    other.close()
    jr.close()


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://flows:s3cret-pw@[::1/db",  # libpq quotes the whole URI back
        "postgresql://flows:s3cr%zzet-pw@db.example/j",  # ... or the bad token: the password
        "postgresql://flows:s3cret-pw@db.example/j?nosuchoption=1",
        "host=db.example password=s3cret-pw port",
        "host=db.example password='s3cret-pw' dbname",
        "postgresql://flows:s3cret-pw@db.example/j\x00x",
        "postgresql://flows:s3cret-pw@db.example/j\nx",
    ],
)
def test_a_malformed_dsn_is_one_coded_line_that_never_shows_the_password(dsn: str) -> None:
    with pytest.raises(journal.JournalLocationInvalid) as err:
        PostgresJournal(dsn)
    if dsn.startswith("postgresql://"):
        with pytest.raises(journal.JournalLocationInvalid):
            journal.open_journal(dsn)
    text = str(err.value)
    assert err.value.code == "journal_location_invalid"
    assert "s3cr" not in text
    assert "\n" not in text and "\x00" not in text
    assert "DSN" in text and "FLOWS_JOURNAL" in text

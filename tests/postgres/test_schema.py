"""The backend creates and migrates its own schema, and one object serves many threads."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

import journal
from journal.postgres import MIGRATIONS, SCHEMA_VERSION, PostgresJournal
from tests.pg_fixtures import admin_connection, with_schema
from tests.postgres.conftest import OpenPg


def _tables(schema: str) -> list[str]:
    with admin_connection() as conn:
        rows = conn.execute(
            "select table_name from information_schema.tables where table_schema = %s order by 1",
            (schema,),
        ).fetchall()
    return [r[0] for r in rows]


def _schema_of(dsn: str) -> str:
    return dsn.rsplit("search_path%3D", 1)[1]


def test_the_first_use_creates_the_versioned_schema_once_even_when_many_open_it_at_once(
    open_pg: OpenPg,
    postgres_dsn: str,
) -> None:
    schema = _schema_of(postgres_dsn)
    assert _tables(schema) == []
    journals = [open_pg() for _ in range(8)]
    barrier = threading.Barrier(8)

    def first_use(jr: PostgresJournal) -> int:
        barrier.wait()
        return len(jr.runs())

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(first_use, journals)) == [0] * 8
    assert _tables(schema) == [
        "journal_heads",
        "journal_heads_deletes",
        "journal_records",
        "journal_runs",
        "journal_schema",
    ]
    with admin_connection() as conn:
        versions = conn.execute(f'select version from "{schema}".journal_schema').fetchall()
    assert versions == [(SCHEMA_VERSION,)]
    for jr in journals:
        jr.close()


def test_a_schema_newer_than_the_code_is_refused_with_a_message_saying_to_upgrade(
    open_pg: OpenPg,
    postgres_dsn: str,
) -> None:
    schema = _schema_of(postgres_dsn)
    with admin_connection() as conn:
        conn.execute(f'create table "{schema}".journal_schema (version integer not null)')
        conn.execute(f'insert into "{schema}".journal_schema values (%s)', (SCHEMA_VERSION + 1,))
    jr = open_pg()
    with pytest.raises(journal.JournalUnavailable, match="upgrade flows-memory"):
        jr.runs()
    jr.close()


def test_a_dsn_whose_search_path_names_no_existing_schema_is_refused_clearly(
    open_pg: OpenPg, postgres_dsn: str
) -> None:
    jr = open_pg(with_schema(postgres_dsn, "flows_no_such_schema"))
    with pytest.raises(journal.JournalUnavailable, match="no schema"):
        jr.runs()
    jr.close()


def test_threads_sharing_one_journal_append_without_gaps_and_one_record_per_key(
    pg: PostgresJournal,
) -> None:
    info, lease = pg.begin("f", "s", {})

    def work(worker: int) -> None:
        for i in range(20):
            pg.append(lease, "s", {"w": worker, "i": i}, key=f"{worker}-{i}")
            pg.append(lease, "shared", {"w": worker}, key=f"shared-{i}")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(8)))
    records = list(pg.read(info.run_id, "s"))
    assert [r.seq for r in records] == list(range(1, 161))
    shared = list(pg.read(info.run_id, "shared"))
    assert sorted(r.key or "" for r in shared) == sorted(f"shared-{i}" for i in range(20))
    assert [r.seq for r in shared] == list(range(1, 21))


def test_payloads_read_back_as_the_file_backend_reads_them(pg: PostgresJournal) -> None:
    info, lease = pg.begin("f", "s", {"nested": {"b": 1, "a": [1, 2.5, None]}})
    payload = {"z": "\u0000 nul and ünïcödé", "a": {"y": True, "x": 1.0}, "n": 2**53}
    appended = pg.append(lease, "s", payload, key="k")
    assert appended.payload == payload
    assert list(pg.read(info.run_id, "s")) == [appended]
    assert list(appended.payload) == ["a", "n", "z"]  # canonical: keys sorted, as in the file log
    assert dict(pg.run(info.run_id).meta) == {"nested": {"a": [1, 2.5, None], "b": 1}}


def test_a_schema_at_an_older_version_is_migrated_in_place_keeping_its_records(
    open_pg: OpenPg, postgres_dsn: str
) -> None:
    schema = _schema_of(postgres_dsn)
    with admin_connection() as conn:  # a journal written by version 1 of the schema
        conn.execute(f'set search_path to "{schema}"')
        conn.execute("create table journal_schema (version integer not null)")
        conn.execute("insert into journal_schema values (1)")
        for statement in MIGRATIONS[0][1]:
            conn.execute(statement)
        conn.execute(
            "insert into journal_runs values ('20260101T000000-00000000aa', 'f', 's', 'failed', 1,"
            " 1, 1, '{}', null, null, null)"
        )
        conn.execute(
            "insert into journal_records values"
            " ('20260101T000000-00000000aa', 's', 1, 'abcd', 'k', 5, '{\"old\":true}')"
        )
    jr = open_pg()
    # the heads the migration to version 4 filled from the records, then the append keeps
    heads, mark, _ = jr.heads_changed(["s"], None)
    assert heads == {"s": {"20260101T000000-00000000aa": 1}}
    lease = jr.acquire("20260101T000000-00000000aa")
    assert jr.append(lease, "s", {"new": True}, key="k2").seq == 2
    assert jr.heads_changed(["s"], mark)[0] == {"s": {"20260101T000000-00000000aa": 2}}
    assert [dict(r.payload) for r in jr.read(lease.run_id, "s")] == [{"old": True}, {"new": True}]
    with admin_connection() as conn:
        versions = conn.execute(f'select version from "{schema}".journal_schema').fetchall()
    assert versions == [(SCHEMA_VERSION,)]


def test_a_table_shadowing_the_journals_on_the_search_path_is_refused_not_read(
    postgres_dsn: str, other_dsn: str
) -> None:
    """search_path ``a, b`` with the journal in ``b``: a ``journal_records`` made in ``a`` would
    answer every read with its own rows (an empty one hides every record), and the turns would be
    named after ``a`` while the other hosts name them after ``b``."""
    journal_schema = other_dsn.rpartition("search_path%3D")[2]
    front = postgres_dsn.rpartition("search_path%3D")[2]
    with PostgresJournal(other_dsn) as jr:
        info, lease = jr.begin("f", "s", {})
        jr.append(lease, "s", {"n": 1})
        with admin_connection() as conn:
            conn.execute(f'create table "{front}".journal_records (like "{journal_schema}".journal_records)')
        both = PostgresJournal(postgres_dsn.replace(front, f"{front},{journal_schema}"))
        with both, pytest.raises(journal.JournalUnavailable) as err:
            both.read(info.run_id, "s")
        assert f"journal_runs in schema '{journal_schema}'" in str(err.value)
        assert [r.seq for r in jr.read(info.run_id, "s")] == [1]


def test_a_journal_restored_without_its_heads_table_is_refused_saying_how_to_make_it_again(
    open_pg: OpenPg, postgres_dsn: str
) -> None:
    jr = open_pg()
    info, lease = jr.begin("f", "s", {})
    jr.append(lease, "s", {"n": 1})
    jr.finish(lease, journal.RunState.DONE)
    with admin_connection() as conn:  # a dump restored without the derived table
        schema = postgres_dsn.rpartition("search_path%3D")[2]
        conn.execute(f'drop table "{schema}".journal_heads')
    with pytest.raises(journal.JournalUnavailable) as err:
        open_pg().heads_changed(["s"], None)
    assert "no table journal_heads" in str(err.value) and "version = 3" in str(err.value)
    with admin_connection() as conn:  # what the message says
        conn.execute(f'update "{schema}".journal_schema set version = 3')
    assert open_pg().heads_changed(["s"], None)[0] == {"s": {info.run_id: 1}}
    with admin_connection() as conn:
        heads = conn.execute(f'select run_id, head from "{schema}".journal_heads').fetchall()
    assert heads == [(info.run_id, 1)]
    # the table made again notices its rows deleted, as the one it replaces did (step 5 ran again)
    reader = open_pg()
    _, mark, _ = reader.heads_changed(["s"], None)
    with admin_connection() as conn:
        conn.execute(f'delete from "{schema}".journal_heads')
    assert reader.heads_changed(["s"], mark)[2] is True


def test_a_journal_at_version_4_is_migrated_to_notice_deleted_heads(
    open_pg: OpenPg, postgres_dsn: str
) -> None:
    schema = _schema_of(postgres_dsn)
    with admin_connection() as conn:  # a journal written by version 4 of the schema, heads and all
        conn.execute(f'set search_path to "{schema}"')
        conn.execute("create table journal_schema (version integer not null)")
        conn.execute("insert into journal_schema values (4)")
        for version, statements in MIGRATIONS:
            if version == 4:  # its heads filled from the records
                conn.execute(
                    "insert into journal_runs values ('20260101T000000-00000000aa', 'f', 's', 'failed',"
                    " 1, 1, 1, '{}', null, null, null)"
                )
                conn.execute(
                    "insert into journal_records values"
                    " ('20260101T000000-00000000aa', 's', 1, 'abcd', 'k', 5, '{\"old\":true}')"
                )
            for statement in statements if version <= 4 else ():
                conn.execute(statement)
    jr = open_pg()
    _, mark, _ = jr.heads_changed(["s"], None)
    lease = jr.acquire("20260101T000000-00000000aa")
    jr.append(lease, "s", {"new": True}, key="k2")
    with admin_connection() as conn:
        conn.execute(f'delete from "{schema}".journal_heads')
        versions = conn.execute(f'select version from "{schema}".journal_schema').fetchall()
    assert versions == [(SCHEMA_VERSION,)]
    assert jr.heads_changed(["s"], mark)[0::2] == ({"s": {"20260101T000000-00000000aa": 2}}, True)


def test_a_journal_at_version_5_is_migrated_to_notice_a_replica_role_sessions_deletes(
    open_pg: OpenPg, postgres_dsn: str
) -> None:
    schema = _schema_of(postgres_dsn)
    with admin_connection() as conn:  # a journal at version 5: its trigger fires for origin sessions
        conn.execute(f'set search_path to "{schema}"')
        conn.execute("create table journal_schema (version integer not null)")
        conn.execute("insert into journal_schema values (5)")
        for version, statements in MIGRATIONS:
            for statement in statements if version <= 5 else ():
                conn.execute(statement)
    jr = open_pg()
    info, lease = jr.begin("f", "s", {})
    jr.append(lease, "s", {"n": 1})
    _, mark, _ = jr.heads_changed(["s"], None)
    jr.append(lease, "s", {"n": 2})
    with admin_connection() as conn:
        versions = conn.execute(f'select version from "{schema}".journal_schema').fetchall()
        state = conn.execute(
            "select tgenabled from pg_trigger where tgname = 'journal_heads_deleted'"
            " and tgrelid = %s::regclass",
            (f'"{schema}".journal_heads',),
        ).fetchall()
        conn.execute("set session_replication_role = replica")
        conn.execute(f'delete from "{schema}".journal_heads')
    assert versions == [(SCHEMA_VERSION,)] and state == [("A",)]
    assert jr.heads_changed(["s"], mark)[0::2] == ({"s": {info.run_id: 2}}, True)


def test_a_journal_restored_without_its_deletes_table_is_refused_saying_how_to_make_it_again(
    open_pg: OpenPg, postgres_dsn: str
) -> None:
    jr = open_pg()
    info, lease = jr.begin("f", "s", {})
    jr.append(lease, "s", {"n": 1})
    schema = _schema_of(postgres_dsn)
    with admin_connection() as conn:
        conn.execute(f'drop table "{schema}".journal_heads_deletes')
    with pytest.raises(journal.JournalUnavailable) as err:
        open_pg().heads_changed(["s"], None)
    assert "no table journal_heads_deletes" in str(err.value) and "version = 4" in str(err.value)
    with admin_connection() as conn:  # what the message says
        conn.execute(f'update "{schema}".journal_schema set version = 4')
    again = open_pg()
    _, mark, _ = again.heads_changed(["s"], None)
    jr.append(lease, "s", {"n": 2})
    with admin_connection() as conn:  # the trigger made again fires for every session (step 6 ran again)
        conn.execute("set session_replication_role = replica")
        conn.execute(f'delete from "{schema}".journal_heads')
    assert again.heads_changed(["s"], mark)[0::2] == ({"s": {info.run_id: 2}}, True)

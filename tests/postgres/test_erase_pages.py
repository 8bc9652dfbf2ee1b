"""An erase on PostgreSQL leaves no old version of a rewritten row in the table's pages.

A rewrite is an update: the row's old version, holding the erased content, stays in its page until a
vacuum prunes it, and a vacuum prunes only versions no open snapshot may still see. The erase
vacuums after its rewrite, while it holds its scope's turn. A turn is an advisory lock held in an
open transaction; it was taken by a statement with parameters, whose portal kept its snapshot open
for as long as the turn was held, so the erase's own turn (and any other host's) kept the server from
pruning: ``SELECT`` found nothing, but the table's pages (and its file on disk, after a checkpoint)
still held the text, tags, metadata and source. These tests read every page of the table and its
TOAST table with ``pageinspect``, dead row versions included.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import journal
import memory
from journal.postgres import PostgresJournal
from tests._helpers.hosts import host
from tests.pg_fixtures import admin_connection

MARK = "zqerasepages"
EXTENSION_SCHEMA = "flows_test_pageinspect"


@pytest.fixture
def pages(postgres_dsn: str) -> Iterator[Any]:
    """A function that counts the pages of ``journal_records`` and its TOAST table holding bytes."""
    with admin_connection() as admin:
        try:
            admin.execute(f"create schema if not exists {EXTENSION_SCHEMA}")
            admin.execute(f"create extension if not exists pageinspect schema {EXTENSION_SCHEMA}")
        except Exception as exc:  # the server's contrib modules are its own
            if os.environ.get("CI"):
                raise
            pytest.skip(f"pageinspect is not available on the test server: {exc}")
        # an extension lives in one schema per database: wherever it was first created
        row = admin.execute(
            "select extnamespace::regnamespace::text from pg_extension where extname = 'pageinspect'"
        ).fetchone()
        where = str(row[0])

    def holding(needle: bytes) -> int:
        import psycopg

        found = 0
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute("checkpoint")
            toast = conn.execute(
                "select reltoastrelid::regclass::text from pg_class where oid = 'journal_records'::regclass"
            ).fetchone()
            for relation in ["journal_records", *([toast[0]] if toast and toast[0] != "-" else [])]:
                count = conn.execute("select pg_relation_size(%s::regclass) / 8192", (relation,)).fetchone()
                for page in range(int(count[0]) if count else 0):
                    raw = conn.execute(
                        f"select {where}.get_raw_page(%s::text, %s::int)", (relation, page)
                    ).fetchone()
                    found += bytes(raw[0]).count(needle) if raw else 0
        return found

    yield holding


def _learned(store: memory.MemoryStore, text: str) -> memory.Learned:
    with store.session(scope="team") as s:
        kept = s.learn({"text": "a finding that stays", "tags": ["kept"]})
        finding = {"text": text, "tags": [f"{MARK}tag"], "source": f"{MARK}source"}
        learned = s.learn({**finding, "metadata": {"who": f"{MARK}meta"}})
    assert kept.key != learned.key
    store.sync()
    return learned


@pytest.mark.parametrize("size", ["small", "toasted"])
def test_an_erase_leaves_no_old_row_version_in_the_tables_pages(
    tmp_path: Path, postgres_dsn: str, pages: Any, size: str
) -> None:
    # "toasted": a text past PostgreSQL's inline limit that does not compress, so it is stored
    # out of line in the TOAST table, in chunks the vacuum must prune too
    text = f"{MARK} ana lives in oslo" if size == "small" else f"{MARK} " + os.urandom(6000).hex()
    with host(tmp_path, "b", postgres_dsn) as b:
        learned = _learned(b, text)
        assert pages(MARK.encode()) > 0
        with b.session(scope="privacy") as s:
            s.erase(learned.key, reason="ana asked")
        assert pages(MARK.encode()) == 0
        assert [r.text for r in b.recall(scope="team")] == ["a finding that stays"]


def test_another_host_holding_a_turn_while_the_erase_runs_keeps_nothing_in_the_pages(
    tmp_path: Path, postgres_dsn: str, pages: Any
) -> None:
    with host(tmp_path, "b", postgres_dsn) as b:
        learned = _learned(b, f"{MARK} ana lives in oslo")
        other = PostgresJournal(postgres_dsn)  # another host, holding a turn of its own throughout
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with other.turn("another host's scope"):
                held.set()
                release.wait(60)

        holder = threading.Thread(target=hold)
        holder.start()
        try:
            assert held.wait(30)
            with b.session(scope="privacy") as s:
                s.erase(learned.key, reason="ana asked")
            assert pages(MARK.encode()) == 0  # while the other turn is still held
        finally:
            release.set()
            holder.join(30)
            other.close()


def test_an_older_snapshot_elsewhere_makes_the_erase_pending_until_repair_after_it_ends(
    tmp_path: Path, postgres_dsn: str, pages: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session of the server whose snapshot began before the rewrite (an analyst's open
    transaction, a dump) may still see the old row versions, so no vacuum may prune them: the erase
    says so (``memory_erase_pending`` naming the session), and ``flows check --repair`` finishes it
    once that session has ended."""
    import psycopg

    import memory._db
    from memory._erase import pending_markers
    from tests.adversarial.memory_support import flows

    monkeypatch.setattr(memory._db, "ERASE_LOG_WAIT_MS", 300)  # how long the erase waits for it
    db = tmp_path / "b" / "history.db"
    with host(tmp_path, "b", postgres_dsn) as b:
        learned = _learned(b, f"{MARK} ana lives in oslo")
        analyst = psycopg.connect(postgres_dsn)
        try:
            analyst.execute("set transaction isolation level repeatable read")
            analyst.execute("select count(*) from journal_records").fetchone()  # its snapshot, kept
            with b.session(scope="privacy") as s, pytest.raises(memory.ErasePending) as caught:
                s.erase(learned.key, reason="ana asked")
            assert f"session {analyst.info.backend_pid} " in str(caught.value)
            assert pages(MARK.encode()) > 0  # what the analyst's snapshot may still read
            assert [p.kind for p in memory.check_store(b)] == ["erase_pending"]
        finally:
            analyst.close()
    env = {"FLOWS_JOURNAL": postgres_dsn}
    assert flows(db, "check", "--repair", env=env).returncode == 0
    assert pending_markers(db) == []
    assert pages(MARK.encode()) == 0
    assert flows(db, "check", env=env).returncode == 0


@pytest.mark.parametrize("again", ["on another host", "after a restart"])
def test_erasing_again_while_that_snapshot_is_open_is_pending_too_and_done_once_it_ends(
    tmp_path: Path, postgres_dsn: str, pages: Any, monkeypatch: pytest.MonkeyPatch, again: str
) -> None:
    """The first erase rewrote the commits as tombstones and is pending on an older snapshot. An
    erase of the same memory again (on another host, or by this host after a restart) rewrites
    nothing; before, it then looked only at rewrites of its own, found none, and said done while
    the old row versions, the text in them, were in the table's pages."""
    import psycopg

    import memory._db

    monkeypatch.setattr(memory._db, "ERASE_LOG_WAIT_MS", 300)
    with host(tmp_path, "a", postgres_dsn) as a:
        learned = _learned(a, f"{MARK} ana lives in oslo")
        analyst = psycopg.connect(postgres_dsn)
        try:
            analyst.execute("set transaction isolation level repeatable read")
            analyst.execute("select count(*) from journal_records").fetchone()
            with a.session(scope="privacy") as s, pytest.raises(memory.ErasePending):
                s.erase(learned.key, reason="ana asked")
            assert pages(MARK.encode()) > 0
            with host(tmp_path, "b" if again == "on another host" else "a", postgres_dsn) as other:
                with other.session(scope="privacy") as s, pytest.raises(memory.ErasePending) as caught:
                    s.erase(learned.key, reason="ana asked again")
                assert f"session {analyst.info.backend_pid} " in str(caught.value)
        finally:
            analyst.close()
        with host(tmp_path, "b", postgres_dsn) as other, other.session(scope="privacy") as s:
            s.erase(learned.key, reason="once more, the snapshot ended")  # done now
        assert pages(MARK.encode()) == 0


def test_a_snapshot_that_ends_while_the_erase_waits_is_waited_for_not_reported(
    tmp_path: Path, postgres_dsn: str, pages: Any
) -> None:
    """Most snapshots older than a rewrite are a moment's (another host's statement in flight): the
    erase waits for them, as it waits for the history DB's readers. Three hosts racing reported
    their reads as keeping the erased rows."""
    import psycopg

    with host(tmp_path, "b", postgres_dsn) as b:
        learned = _learned(b, f"{MARK} ana lives in oslo")
        reader = psycopg.connect(postgres_dsn)
        reader.execute("set transaction isolation level repeatable read")
        reader.execute("select count(*) from journal_records").fetchone()
        ends = threading.Timer(1.0, reader.rollback)
        ends.start()
        try:
            with b.session(scope="privacy") as s:
                s.erase(learned.key, reason="ana asked")  # no memory_erase_pending
        finally:
            ends.join()
            reader.close()
        assert pages(MARK.encode()) == 0


def test_an_erased_commit_lowest_on_its_page_leaves_no_byte_in_the_pages_free_space(
    tmp_path: Path, postgres_dsn: str, pages: Any
) -> None:
    """A vacuum prunes a rewritten row's old version and compacts its page: it moves the live rows
    and zeroes nothing, so the bytes of an old version that lay below every live row stay in the
    page's free space. The erased commit here is the last row its page holds (filled so that
    nothing after it fits there). The erase now rewrites the table whole (``vacuum full``)."""
    import psycopg

    with admin_connection() as admin:
        where = admin.execute(
            "select extnamespace::regnamespace::text from pg_extension where extname = 'pageinspect'"
        ).fetchone()
    assert where is not None

    def last_page_free(conn: Any) -> tuple[int, int]:
        (size,) = conn.execute("select pg_relation_size('journal_records') / 8192").fetchone()
        lower, upper = conn.execute(
            f"select lower, upper from {where[0]}.page_header("
            f"{where[0]}.get_raw_page('journal_records', %s))",
            (int(size) - 1,),
        ).fetchone()
        return int(size) - 1, int(upper) - int(lower)

    text = (f"{MARK} " + os.urandom(700).hex())[:1400]  # inline: compressible by neither
    with host(tmp_path, "b", postgres_dsn) as b, psycopg.connect(postgres_dsn, autocommit=True) as conn:
        with b.session(scope="team") as s:
            probe = s.learn({"text": "probe " + os.urandom(700).hex()[: len(text) - 6]})
        (tuple_len,) = conn.execute(
            "select pg_column_size(r.*) from journal_records r where key = %s", (probe.key,)
        ).fetchone()
        with b.session(scope="team") as s:
            for _ in range(40):  # fill the last page until just the target fits in it
                _, free = last_page_free(conn)
                if tuple_len + 4 <= free < tuple_len + 4 + 150:
                    break
                room = free - (tuple_len + 4 + 60) - 4 - (tuple_len - len(text))
                filler = min(1400, room) if room > 20 and free >= tuple_len + 4 else 1400
                s.learn({"text": "filler " + os.urandom(filler).hex()[: max(1, filler - 7)]})
            else:
                pytest.fail("could not fill the page")
            page, _ = last_page_free(conn)
            target = s.learn({"text": text, "tags": [f"{MARK}tag"]})
        where_key = "select ctid::text from journal_records where key = %s"
        (ctid,) = conn.execute(where_key, (target.key,)).fetchone()
        assert ctid.startswith(f"({page},")  # on that page, the last row it has room for
        b.sync()
        assert pages(MARK.encode()) > 0
        with b.session(scope="privacy") as s:
            s.erase(target.key, reason="asked")
        assert pages(MARK.encode()) == 0


def test_an_erase_by_a_role_that_may_not_vacuum_the_records_is_pending_until_its_owner_repairs(
    tmp_path: Path, postgres_dsn: str, pages: Any
) -> None:
    """A host whose role may write every table of the journal but does not own ``journal_records``:
    the server skips its vacuum with a warning and no error, and the erase answered as done with
    the old row versions (the erased text) in the table's pages. It is pending, saying why, and
    ``flows check --repair`` run as the owner finishes it."""
    import secrets

    import psycopg
    from psycopg import sql

    from memory._erase import pending_markers
    from tests.adversarial.memory_support import flows

    role = f"flows_test_writer_{secrets.token_hex(4)}"
    schema = postgres_dsn.rsplit("search_path%3D", 1)[1]
    with admin_connection() as admin:
        admin.execute(sql.SQL("create role {} login").format(sql.Identifier(role)))
    try:
        with host(tmp_path, "a", postgres_dsn) as a:  # the owner makes the schema and the secret
            learned = _learned(a, f"{MARK} ana lives in oslo")
        with admin_connection() as admin:
            for grant in (
                "grant usage on schema {} to {}",
                "grant all on all tables in schema {} to {}",
                "grant all on all sequences in schema {} to {}",
                "grant execute on all functions in schema {} to {}",
            ):
                admin.execute(sql.SQL(grant).format(sql.Identifier(schema), sql.Identifier(role)))
        writer_dsn = postgres_dsn.replace("://postgres@", f"://{role}@", 1)
        assert writer_dsn != postgres_dsn
        db = tmp_path / "b" / "history.db"
        with host(tmp_path, "b", writer_dsn) as b:
            b.sync()
            with b.session(scope="privacy") as s, pytest.raises(memory.ErasePending) as caught:
                s.erase(learned.key, reason="ana asked")
            assert f"role '{role}', which may not vacuum journal_records" in str(caught.value)
            assert [r.text for r in b.recall(scope="team")] == ["a finding that stays"]
            assert [p.kind for p in memory.check_store(b)] == ["erase_pending"]
        assert pages(MARK.encode()) > 0  # the old row version, which only the owner may prune
        owner = {"FLOWS_JOURNAL": postgres_dsn}
        assert flows(db, "check", "--repair", env=owner).returncode == 0
        assert pending_markers(db) == []
        assert pages(MARK.encode()) == 0
    finally:
        with admin_connection() as admin, contextlib.suppress(psycopg.Error):
            admin.execute(sql.SQL("drop owned by {}").format(sql.Identifier(role)))
            admin.execute(sql.SQL("drop role {}").format(sql.Identifier(role)))


def test_rewrites_in_a_deferred_prune_leave_one_full_vacuum_to_the_callers_prune(postgres_dsn: str) -> None:
    """A full vacuum writes the whole table anew: an erase rewrites commits of several runs, and
    each rewrite pruning for itself rewrote the table once per run. Within ``deferred_prune`` a
    rewrite leaves the table as it is, and the caller's one ``prune`` rewrites it (a new file)."""
    import psycopg

    jr = PostgresJournal(postgres_dsn)
    try:
        runs = []
        for n in range(3):
            info, lease = jr.begin("f", "s", {})
            jr.append(lease, "memory-learn", {"text": f"{MARK} {n}"}, key=f"k{n}")
            jr.finish(lease, journal.RunState.DONE)
            runs.append(info.run_id)

        def table_file() -> int:
            with psycopg.connect(postgres_dsn, autocommit=True) as conn:
                row = conn.execute("select pg_relation_filenode('journal_records')").fetchone()
            assert row is not None
            return int(row[0])

        before = table_file()
        with jr.deferred_prune():
            for run_id in runs:
                jr.rewrite_payloads(run_id, "memory-learn", {1: {"text": ""}}, pad="pad")
        assert table_file() == before  # no vacuum yet
        assert jr.prune() is None
        after = table_file()
        assert after != before  # one full vacuum: the table written anew
        assert jr.prune() is None and table_file() == after  # nothing left to prune
        info, lease = jr.begin("f", "s", {})
        jr.append(lease, "memory-learn", {"text": f"{MARK} again"}, key="k")
        jr.finish(lease, journal.RunState.DONE)
        jr.rewrite_payloads(info.run_id, "memory-learn", {1: {"text": ""}}, pad="pad")
        assert table_file() != after  # a rewrite on its own prunes for itself
    finally:
        jr.close()

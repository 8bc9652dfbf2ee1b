"""``journal_heads`` is derived state: a row deleted there, a restored dump without its rows, a head
number past the real records, or a mark taken on another journal or before the server's ids went
back, never makes a reader skip a record another host appended (a forget above all)."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest

import journal
import memory
from journal.postgres import PostgresJournal
from tests._helpers.hosts import host, host_db
from tests.postgres.conftest import OpenPg


def _ahead(mark: str, by: int) -> str:
    """``mark`` with its transaction id moved ``by`` ahead (what a server whose ids went back sees)."""
    return re.sub(r"\d+$", lambda m: str(int(m.group()) + by), mark)


def test_a_fresh_store_honours_a_forget_whose_head_rows_are_gone(tmp_path: Path, postgres_dsn: str) -> None:
    a_db = host_db(tmp_path, "a")
    with memory.MemoryStore(a_db, journal=postgres_dsn) as a, a.session(scope="team") as s:
        key = s.learn({"text": "the door code is 4711"}).key
        other = s.learn({"text": "lunch is at noon"}).key
    with host(tmp_path, "b", postgres_dsn) as b:
        b.materialize()
        with b.session(scope="team") as s:
            s.forget(key, reason="rotated")
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("delete from journal_heads")  # a dump restored without them, an admin's delete
    with memory.MemoryStore(a_db, journal=postgres_dsn) as fresh:  # a fresh process on host A
        assert {e.key for e in fresh.recall(scope="team")} == {other}
        assert fresh.get(key) is None


def test_a_head_number_past_the_records_is_not_taken_for_the_head(
    pg: PostgresJournal, postgres_dsn: str
) -> None:
    info, lease = pg.begin("f", "s", {})
    pg.append(lease, "s", {"n": 1})
    pg.append(lease, "s", {"n": 2})
    _, mark, _ = pg.heads_changed(["s"], None)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:  # a crafted row, stamped as moved
        conn.execute("update journal_heads set head = 1000, changed = pg_current_xact_id()")
    assert pg.heads_changed(["s"], mark)[0] == {"s": {info.run_id: 2}}
    assert pg.heads_changed(["s"], None)[0] == {"s": {info.run_id: 2}}
    pg.append(lease, "s", {"n": 3})  # the record a reader holding 1000 would have skipped
    assert pg.heads_changed(["s"], mark)[0] == {"s": {info.run_id: 3}}


def test_a_mark_taken_on_another_journal_does_not_hold(open_pg: OpenPg, other_dsn: str) -> None:
    here, there = open_pg(), open_pg(other_dsn)
    info, lease = there.begin("f", "s", {})
    there.append(lease, "s", {"n": 1})  # stamped before the other journal's look
    _, elsewhere, _ = here.heads_changed(["s"], None)
    found, mark, whole = there.heads_changed(["s"], elsewhere)
    assert found == {"s": {info.run_id: 1}} and whole
    assert there.heads_changed(["s"], mark)[0] == {"s": {}}


def test_a_mark_ahead_of_the_servers_ids_does_not_hold(pg: PostgresJournal) -> None:
    """A server restored from a backup (or failed over to a replica) hands out ids again from below
    a mark taken before: a look from that mark would skip every append stamped under it."""
    info, lease = pg.begin("f", "s", {})
    pg.append(lease, "s", {"n": 1})
    _, mark, whole = pg.heads_changed(["s"], None)
    assert whole
    assert pg.heads_changed(["s"], mark)[0] == {"s": {}}
    found, _, whole = pg.heads_changed(["s"], _ahead(mark, 10**9))
    assert found == {"s": {info.run_id: 1}} and whole


def test_a_mark_that_is_not_one_is_refused_or_read_whole(pg: PostgresJournal) -> None:
    info, lease = pg.begin("f", "s", {})
    pg.append(lease, "s", {"n": 1})
    for bad in ("", "x", "1.2.3.x", "9" * 30):
        found, _, whole = pg.heads_changed(["s"], bad)
        assert found == {"s": {info.run_id: 1}} and whole
    with pytest.raises(ValueError):
        pg.heads_changed(["s"], "9" * 101)


def test_a_store_whose_mark_stops_holding_reads_every_run_again(tmp_path: Path, postgres_dsn: str) -> None:
    """A server restored from a backup gives numbers and ids again: a run's forget stream may hold,
    under a number the store has read, another forget than the one it read. Once its mark no longer
    holds (the ids went back below it), the store reads every run again rather than trust the
    numbers it holds."""
    with host(tmp_path, "a", postgres_dsn) as a:
        with a.session(scope="team") as s:
            first = s.learn({"text": "the old door code"}).key
            second = s.learn({"text": "the new door code"}).key
            kept = s.learn({"text": "lunch is at noon"}).key
        with a.session(scope="team", flow="forget-first") as s:
            s.forget(first, reason="rotated")
        b = host(tmp_path, "b", postgres_dsn)
        b.materialize()
        assert {e.key for e in b.recall(scope="team")} == {second, kept}
        with a.session(scope="team", flow="forget-second") as s:
            s.forget(second, reason="rotated")
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:  # the history after a restore:
        (old_run,) = conn.execute(  # the first forget's run holds the second's forget as record 1
            "select r.run_id from journal_runs r where r.flow = 'forget-first'"
        ).fetchone()
        (new_run, key, payload) = conn.execute(
            "select x.run_id, x.key, x.payload from journal_records x join journal_runs r using (run_id)"
            " where r.flow = 'forget-second' and x.stream = 'memory-forget'"
        ).fetchone()
        conn.execute(
            "update journal_records set id = %s, key = %s, payload = %s"
            " where run_id = %s and stream = 'memory-forget'",
            (journal.record_id(old_run, "memory-forget", key), key, payload, old_run),
        )
        for table in ("journal_heads", "journal_records", "journal_runs"):
            conn.execute(f"delete from {table} where run_id = %s", (new_run,))
    shared = b._retirer.shared  # what a restore does to the ids, applied to the store's mark
    shared._mark = _ahead(shared._mark, 10**9)
    assert {e.key for e in b.recall(scope="team")} == {kept}
    b.close()


def test_catch_up_whose_mark_stops_holding_reads_every_run_again(tmp_path: Path, postgres_dsn: str) -> None:
    """After its mark stops holding (ids gone back, as after a restore), ``catch_up`` no longer
    trusts the heads it reached: it reads every run again and publishes what this host lacks."""
    with host(tmp_path, "a", postgres_dsn) as a:
        with a.session(scope="team") as s:
            key = s.learn({"text": "learned on host a"}).key
        b = host(tmp_path, "b", postgres_dsn)
        assert b.catch_up() == 1
        assert b.catch_up() == 0
        (learned,) = (tmp_path / "b").rglob(f"{key}.json")
        learned.unlink()  # what a restored history may hold under a number this store had reached
        assert b.catch_up() == 0  # the mark holds: nothing moved
        b._catch_mark = _ahead(b._catch_mark, 10**9)  # what a restore does to the server's ids
        assert b.catch_up() == 1
        assert list((tmp_path / "b").rglob(f"{key}.json")) == [learned]
        b.close()


def _admin(dsn: str, *statements: str) -> None:
    """Run ``statements`` as an administrator would, on the journal's schema (``dsn``'s path)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


@pytest.mark.parametrize(
    "deletion",
    ["delete from journal_heads", "delete from journal_heads where stream = 's'", "truncate journal_heads"],
)
def test_a_head_row_deleted_after_an_append_does_not_hide_it_from_a_process_that_had_looked(
    open_pg: OpenPg, postgres_dsn: str, deletion: str
) -> None:
    """Two processes on one schema: the reader has looked; the writer's run appends, and its heads
    row is deleted before the reader looks again. The deletion is noticed: that look is whole, and
    lists the append; the one after it holds again."""
    reader, writer = open_pg(), open_pg()
    info, lease = writer.begin("f", "s", {})
    writer.append(lease, "s", {"n": 1})
    assert reader.heads_changed(["s"], None)[0] == {"s": {info.run_id: 1}}
    _, mark, _ = reader.heads_changed(["s"], None)
    writer.append(lease, "s", {"n": 2})
    _admin(postgres_dsn, deletion)
    found, mark, whole = reader.heads_changed(["s"], mark)
    assert (found, whole) == ({"s": {info.run_id: 2}}, True)
    found, _, whole = reader.heads_changed(["s"], mark)
    assert (found, whole) == ({"s": {}}, False)


def test_an_append_after_its_head_row_was_deleted_is_seen_by_a_process_that_had_looked(
    open_pg: OpenPg, postgres_dsn: str
) -> None:
    reader, writer = open_pg(), open_pg()
    info, lease = writer.begin("f", "s", {})
    writer.append(lease, "s", {"n": 1})
    _, mark, _ = reader.heads_changed(["s"], None)
    _admin(postgres_dsn, "delete from journal_heads")
    writer.append(lease, "s", {"n": 2})
    assert reader.heads_changed(["s"], mark)[0] == {"s": {info.run_id: 2}}


def test_a_delete_rolled_back_or_of_no_row_leaves_the_mark_holding_only_as_it_should(
    open_pg: OpenPg, postgres_dsn: str
) -> None:
    pg = open_pg()
    _, lease = pg.begin("f", "s", {})
    pg.append(lease, "s", {"n": 1})
    _, mark, _ = pg.heads_changed(["s"], None)
    with psycopg.connect(postgres_dsn) as conn:  # a delete that rolls back deleted nothing
        conn.execute("delete from journal_heads")
        conn.rollback()
    assert pg.heads_changed(["s"], mark)[2] is False
    _admin(postgres_dsn, "delete from journal_heads where stream = 'no-such-stream'")
    assert pg.heads_changed(["s"], mark)[2] is True  # a statement that deleted: counted, whatever it took


def test_with_the_delete_trigger_disabled_or_dropped_every_look_is_whole(
    pg: PostgresJournal, postgres_dsn: str
) -> None:
    info, lease = pg.begin("f", "s", {})
    pg.append(lease, "s", {"n": 1})
    _, mark, _ = pg.heads_changed(["s"], None)
    assert pg.heads_changed(["s"], mark)[2] is False
    _admin(postgres_dsn, "alter table journal_heads disable trigger journal_heads_deleted")
    found, mark, whole = pg.heads_changed(["s"], mark)
    assert (found, whole) == ({"s": {info.run_id: 1}}, True)
    # enabled for some sessions only: "enable trigger" (origin sessions, not replica-role ones) and
    # "enable replica trigger" (the other way round) miss some deletes, so every look is whole too
    for enabling in ("enable trigger", "enable replica trigger"):
        _admin(postgres_dsn, f"alter table journal_heads {enabling} journal_heads_deleted")
        _, mark, _ = pg.heads_changed(["s"], mark)
        assert pg.heads_changed(["s"], mark)[2] is True, enabling
    _admin(postgres_dsn, "alter table journal_heads enable always trigger journal_heads_deleted")
    _, mark, _ = pg.heads_changed(["s"], mark)
    assert pg.heads_changed(["s"], mark)[2] is False
    _admin(postgres_dsn, "drop trigger journal_heads_deleted on journal_heads")
    assert pg.heads_changed(["s"], mark)[2] is True


@pytest.mark.parametrize("deletion", ["delete from journal_heads", "truncate journal_heads"])
def test_a_head_row_deleted_by_a_replica_role_session_is_noticed_by_the_next_look(
    open_pg: OpenPg, postgres_dsn: str, deletion: str
) -> None:
    """A session with ``session_replication_role = replica`` (a logical-replication apply worker,
    ``pg_restore --disable-triggers``) fires only the triggers enabled ``always``: its delete of the
    row that was an append's only word is noticed all the same."""
    reader, writer = open_pg(), open_pg()
    info, lease = writer.begin("f", "s", {})
    writer.append(lease, "s", {"n": 1})
    _, mark, _ = reader.heads_changed(["s"], None)
    writer.append(lease, "s", {"n": 2})
    _admin(postgres_dsn, "set session_replication_role = replica", deletion)
    found, mark, whole = reader.heads_changed(["s"], mark)
    assert (found, whole) == ({"s": {info.run_id: 2}}, True)
    assert reader.heads_changed(["s"], mark)[2] is False


@pytest.mark.parametrize(
    ("role", "change"),
    [(role, change) for role in ("origin", "replica") for change in ("delete from", "set back in")],
)
def test_a_running_store_honours_a_forget_whose_head_row_was_deleted(
    tmp_path: Path, postgres_dsn: str, role: str, change: str
) -> None:
    """Host A reads (its look at the heads); host B forgets a finding, and B's forget run's heads
    row is deleted (or its stamp set back) before A reads again, by an administrator or by a
    replica-role session (a logical-replication apply): A's next read still leaves the finding out."""
    with host(tmp_path, "a", postgres_dsn) as a:
        with a.session(scope="team") as s:
            key = s.learn({"text": "the door code is 4711"}).key
            other = s.learn({"text": "lunch is at noon"}).key
        assert {e.key for e in a.recall(scope="team")} == {key, other}
        with host(tmp_path, "b", postgres_dsn) as b:
            b.materialize()
            with b.session(scope="team", flow="forget") as s:
                s.forget(key, reason="rotated")
        statement = (
            "delete from journal_heads h using journal_runs r"
            if change == "delete from"
            else "update journal_heads h set changed = '1' from journal_runs r"
        )
        _admin(
            postgres_dsn,
            f"set session_replication_role = {role}",
            statement + " where h.run_id = r.run_id and r.flow = 'forget'",
        )
        assert {e.key for e in a.recall(scope="team")} == {other}
        assert a.get(key) is None


@pytest.mark.parametrize(
    "moved",
    [
        "update journal_heads set changed = '1'",  # the stamp set back below the reader's mark
        "update journal_heads set changed = changed",  # rewritten as it was: not an append's stamp
        "update journal_heads set stream = 'elsewhere'",  # the row made another stream's
    ],
)
def test_a_head_row_rewritten_after_an_append_does_not_hide_it_from_a_process_that_had_looked(
    open_pg: OpenPg, postgres_dsn: str, moved: str
) -> None:
    """An update of a head row other than an append's (which stamps it with its own transaction's
    id) is taken as a deletion: the next look is whole, and lists the append the row was the only
    word of; the one after it holds again."""
    reader, writer = open_pg(), open_pg()
    info, lease = writer.begin("f", "s", {})
    writer.append(lease, "s", {"n": 1})
    _, mark, _ = reader.heads_changed(["s"], None)
    writer.append(lease, "s", {"n": 2})
    _admin(postgres_dsn, moved)
    found, mark, whole = reader.heads_changed(["s"], mark)
    assert (found, whole) == ({"s": {info.run_id: 2}}, True)
    found, _, whole = reader.heads_changed(["s"], mark)
    assert (found, whole) == ({"s": {}}, False)
    writer.append(lease, "s", {"n": 3})  # an append's own update of its row leaves the marks holding
    found, _, whole = reader.heads_changed(["s"], mark)
    assert (found, whole) == ({"s": {info.run_id: 3}}, False)


def test_with_the_rewrite_trigger_disabled_or_dropped_every_look_is_whole(
    pg: PostgresJournal, postgres_dsn: str
) -> None:
    info, lease = pg.begin("f", "s", {})
    pg.append(lease, "s", {"n": 1})
    _, mark, _ = pg.heads_changed(["s"], None)
    for change in ("disable trigger", "enable trigger", "enable replica trigger"):
        _admin(postgres_dsn, f"alter table journal_heads {change} journal_heads_rewritten")
        _, mark, _ = pg.heads_changed(["s"], mark)
        assert pg.heads_changed(["s"], mark)[2] is True, change
    _admin(postgres_dsn, "alter table journal_heads enable always trigger journal_heads_rewritten")
    _, mark, _ = pg.heads_changed(["s"], mark)
    assert pg.heads_changed(["s"], mark)[2] is False
    _admin(postgres_dsn, "drop trigger journal_heads_rewritten on journal_heads")
    found, _, whole = pg.heads_changed(["s"], mark)
    assert (found, whole) == ({"s": {info.run_id: 1}}, True)

"""A fresh store's first look at a shared PostgreSQL journal's retirements.

Before each read and learn a store sharing a PostgreSQL journal learns of every retirement other
hosts committed: the forgets, and the commits that retire the version they supersede. A fresh
process's first look covers every run; it is one query per stream however many runs there are, and
the server sends only the commits that retire something (``read_streams_after`` with ``containing``),
never every commit of the journal: what crosses the wire stays far below the journal's commits.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import memory
from journal import JournalCorrupt
from journal.postgres import PostgresJournal
from tests._helpers.hosts import host, host_db
from tests.postgres.conftest import OpenPg
from tests.postgres.test_caps import CountingProxy


@pytest.fixture
def proxy_dsn(postgres_dsn: str) -> Iterator[tuple[str, CountingProxy]]:
    """The test's DSN through a proxy that counts the bytes the server sends."""
    parts = urllib.parse.urlsplit(postgres_dsn)
    proxy = CountingProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@127.0.0.1:{proxy.port}" if userinfo else f"127.0.0.1:{proxy.port}"
    try:
        yield urllib.parse.urlunsplit(parts._replace(netloc=netloc)), proxy
    finally:
        proxy.close()


BIG = 64 * 1024  # each finding's text: the commits together are megabytes


def test_a_fresh_stores_first_read_is_sent_the_retiring_commits_not_every_commit(
    tmp_path: Path, postgres_dsn: str, proxy_dsn: tuple[str, CountingProxy]
) -> None:
    dsn, proxy = proxy_dsn
    a = host(tmp_path, "a", postgres_dsn)
    ids = []
    for run in range(4):  # several runs, each with commits
        with a.session(scope="team", flow=f"writer-{run}") as s:
            ids += [s.learn({"text": f"{run}-{i} " + "x" * BIG}).memory_id for i in range(10)]
    b_db = host_db(tmp_path, "b")
    with memory.MemoryStore(b_db, journal=postgres_dsn) as b0:
        b0.sync()  # host B holds every version in its history DB
    with a.session(scope="team") as s:
        newer = s.update(ids[7], {"text": "the corrected version"})
    committed = 40 * BIG
    with memory.MemoryStore(b_db, journal=dsn) as b:  # a fresh process on host B
        b.open_journal()
        proxy.reset()
        shown = b.recall(scope="team", limit=100)
        sent = proxy.received
    # the superseded version is hidden at once (B never synced the update), and the one that
    # replaced it is served from its commit ...
    assert len(shown) == 40 and [r.key for r in shown if r.memory_id == ids[7]] == [newer.key]
    # ... and the look that hid it was not sent the journal's 40 commits of 64 KiB
    assert sent < committed // 8, (sent, committed)
    a.close()


def _seeded(pg: PostgresJournal) -> dict[str, list[int]]:
    """Three runs: run i holds records 1..4 of stream "s"; records 2 and 4 carry the marker."""
    runs: dict[str, list[int]] = {}
    for i in range(3):
        info, lease = pg.begin("f", "s", {"n": i})
        runs[info.run_id] = []
        for n in range(1, 5):
            payload = {"n": n, **({"mark": True} if n % 2 == 0 else {})}
            runs[info.run_id].append(pg.append(lease, "s", payload).seq)
    return runs


def test_read_streams_after_reads_each_runs_records_after_its_number_in_one_answer(
    pg: PostgresJournal,
) -> None:
    runs = list(_seeded(pg))
    got = pg.read_streams_after("s", {runs[0]: 0, runs[1]: 2, runs[2]: 4})
    assert {r: [x.seq for x in recs] for r, recs in got.items()} == {runs[0]: [1, 2, 3, 4], runs[1]: [3, 4]}
    assert [x.payload["n"] for x in got[runs[1]]] == [3, 4]
    marked = pg.read_streams_after("s", dict.fromkeys(runs, 0), containing='"mark":')
    assert {r: [x.seq for x in recs] for r, recs in marked.items()} == {r: [2, 4] for r in runs}
    assert pg.read_streams_after("s", {}) == {}
    assert pg.read_streams_after("other", dict.fromkeys(runs, 0)) == {}


def test_read_streams_after_checks_every_row_it_returns(
    pg: PostgresJournal, postgres_dsn: str, open_pg: OpenPg
) -> None:
    runs = list(_seeded(pg))
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:  # a row missing: a gap
        conn.execute("delete from journal_records where run_id = %s and seq = 3", (runs[1],))
    with pytest.raises(JournalCorrupt) as err:
        pg.read_streams_after("s", dict.fromkeys(runs, 0))
    assert (err.value.run_id, err.value.stream, err.value.line) == (runs[1], "s", 3)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:  # a crafted payload the filter matches
        conn.execute(
            "update journal_records set payload = '[\"mark\":' where run_id = %s and seq = 4", (runs[2],)
        )
    with pytest.raises(JournalCorrupt) as err:
        pg.read_streams_after("s", dict.fromkeys(runs, 0), containing='"mark":')
    assert (err.value.run_id, err.value.line) == (runs[2], 4)
    for bad in ({runs[0]: -1}, {runs[0]: True}, {"../x": 0}):
        with pytest.raises(Exception) as caught:
            pg.read_streams_after("s", bad)  # type: ignore[arg-type]
        assert not isinstance(caught.value, JournalCorrupt)
    with pytest.raises(ValueError):
        pg.read_streams_after("s", {runs[0]: 0}, containing="")


def test_heads_changed_misses_no_append_that_commits_after_a_later_one(
    pg: PostgresJournal, postgres_dsn: str
) -> None:
    """The mark is the oldest transaction running at the look, not the newest head seen: an append
    whose transaction began first and commits last is still returned by the look after its commit."""
    slow, slow_lease = pg.begin("f", "s", {"n": 1})
    pg.append(slow_lease, "s", {"n": 1})
    first, mark, _ = pg.heads_changed(["s"], None)
    assert first == {"s": {slow.run_id: 1}}
    with psycopg.connect(postgres_dsn) as held:  # an append whose transaction stays open
        held.execute(
            "select * from journal_append(%s, %s, 's', null, 'heldappend', 1, '{\"n\":2}')",
            (slow.run_id, slow_lease.epoch),
        )
        quick, quick_lease = pg.begin("f", "s", {"n": 2})
        pg.append(quick_lease, "s", {"n": 1})  # a later transaction, committed first
        seen, mark, _ = pg.heads_changed(["s"], mark)
        assert seen["s"].get(quick.run_id) == 1 and seen["s"].get(slow.run_id, 1) == 1
        held.commit()
    after, mark, _ = pg.heads_changed(["s"], mark)
    assert after["s"][slow.run_id] == 2
    assert [r.payload["n"] for r in pg.read(slow.run_id, "s")] == [1, 2]
    again, _, _ = pg.heads_changed(["s", "other"], mark)
    assert again == {"s": {}, "other": {}}


def test_a_stores_look_before_each_read_is_sent_what_moved_not_a_head_per_run(
    tmp_path: Path, postgres_dsn: str, proxy_dsn: tuple[str, CountingProxy], pg: PostgresJournal
) -> None:
    dsn, proxy = proxy_dsn
    for n in range(300):  # a journal of many runs, each with commits that retire nothing
        _, lease = pg.begin("f", "s", {"n": n})
        pg.append(lease, "memory-learn", {"n": n})
    with memory.MemoryStore(tmp_path / "history.db", journal=dsn) as store:
        assert store.recall(limit=1) == []  # the first look lists every head once
        proxy.reset()
        for _ in range(5):
            assert store.recall(limit=1) == []
        sent = proxy.received
    # five looks, each a mark and no head (the 300 runs' heads are ~15 KiB a look)
    assert sent < 5 * 2048, sent


def test_catch_up_after_the_first_is_sent_what_moved_and_still_publishes_what_another_host_learned(
    tmp_path: Path, postgres_dsn: str, proxy_dsn: tuple[str, CountingProxy]
) -> None:
    dsn, proxy = proxy_dsn
    a = host(tmp_path, "a", postgres_dsn)
    for n in range(100):  # a hundred runs with commits
        with a.session(scope="team", flow=f"writer-{n}") as s:
            s.learn({"text": f"finding {n}"})
    with host(tmp_path, "b", dsn) as b:
        assert b.catch_up() == 100  # the first: a whole materialize
        b.recall(limit=1)  # and the retirements' first look, which lists every head once
        proxy.reset()
        for _ in range(5):
            assert b.catch_up() == 0
        sent = proxy.received
        with a.session(scope="team") as s:
            learned = s.learn({"text": "learned on host a"})
        assert b.catch_up() == 1
        assert learned.key in {r.key for r in b.recall(scope="team", limit=200)}
    # five catch-ups, each two marks and no head (the hundred runs' heads are ~6 KiB a look)
    assert sent < 5 * 1536, sent
    a.close()


@pytest.mark.parametrize("spelling", ['"supersedesScope" :', '"\\u0073upersedesScope":'])
def test_a_retiring_commit_stored_in_other_json_does_not_escape_the_first_looks_filter(
    tmp_path: Path, postgres_dsn: str, spelling: str
) -> None:
    """The first look asks the server for the commits whose stored text holds the canonical
    spelling of a supersede; a commit stored in other, equally valid JSON escaped it (the version
    it retires read as live on a host that holds it) while a sync parses and honours it. Such a
    commit is found by its key in any JSON spelling."""
    a = host(tmp_path, "a", postgres_dsn)
    with a.session(scope="team") as s:
        old = s.learn({"text": "the first version"})
    b_db = host_db(tmp_path, "b")
    with memory.MemoryStore(b_db, journal=postgres_dsn) as b0:
        b0.sync()  # host B holds the first version
    with a.session(scope="team") as s:
        s.update(old.memory_id, {"text": "the corrected version"})
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        changed = conn.execute(
            "update journal_records set payload = replace(payload, %s, %s)"
            " where stream = 'memory-learn' and strpos(payload, %s) > 0",
            ('"supersedesScope":', spelling, '"supersedesScope":'),
        ).rowcount
    assert changed == 1
    with memory.MemoryStore(b_db, journal=postgres_dsn) as b:
        assert old.key not in {r.key for r in b.recall(scope="team")}
    a.close()

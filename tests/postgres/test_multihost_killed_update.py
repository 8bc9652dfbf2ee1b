"""An update killed right after its commit, on a PostgreSQL journal two hosts share: the commit of
the new version is the retirement of the version it replaces, for every host and every path (a
read, an update by memory id, the store's open, ``sync``, ``check``). So the memory keeps one live
version, both hosts agree on it, and what was answered is never lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import memory
from tests._helpers.failpoints import run_armed
from tests._helpers.hosts import host, host_db

_KILLED = """
import sys
import memory
dsn, db, mid = sys.argv[1:4]
store = memory.MemoryStore(db, journal=dsn)
with store.session(scope="team") as s:
    print("ACK", s.update(mid, {"text": "v2 by the killed one"}).key, flush=True)
"""


def _live(store: memory.MemoryStore) -> list[str]:
    return sorted(e.text for e in store.recall(scope="team", limit=None))


@pytest.mark.parametrize("b_updates", [True, False], ids=["b-updates", "b-reads"])
def test_an_update_killed_after_its_commit_leaves_one_live_version_on_every_host(
    tmp_path: Path, postgres_dsn: str, b_updates: bool
) -> None:
    a = host(tmp_path, "a", postgres_dsn)
    with a.session(scope="team") as s:
        mid = s.learn({"text": "v1"}).memory_id
    a.close()
    a_db = str(host_db(tmp_path, "a"))
    killed = run_armed("memory.after_append=kill", _KILLED, postgres_dsn, a_db, mid)
    assert killed.returncode == -9 and "ACK" not in killed.stdout, killed.stderr[-2000:]

    b = host(tmp_path, "b", postgres_dsn)  # its open publishes the interrupted run's commit
    if b_updates:
        with b.session(scope="team") as s:
            third = s.update(mid, {"text": "v3 by b"})
        assert third.memory_id == mid
        want = "v3 by b"
    else:
        want = "v2 by the killed one"  # committed (never answered): the memory's live version
    a = host(tmp_path, "a", postgres_dsn)
    for store in (a, b):  # before any sync: the same live version on both hosts
        live = store.current(mid)
        assert live is not None and live.text == want
    for store in (a, b):
        store.sync()
        assert _live(store) == [want]  # one live version, v1 never again beside it
        live = store.current(mid)
        assert live is not None and live.text == want
        kinds = [e.kind for e in store.history(mid)]
        assert kinds.count("learned") == (3 if b_updates else 2)  # nothing lost from the history
        assert kinds.count("superseded") == kinds.count("learned") - 1
        assert memory.check_store(store) == []
    a.close()
    b.close()


def test_check_reports_and_repair_settles_a_memory_left_with_two_live_lines(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """A journal an earlier release wrote, where an update's retirement of the version it replaced
    was a record of its own and a crash kept it from being written: the new version's commit names
    what it supersedes but retires nothing, and a later update on another host superseded the new
    version. ``check`` reports it (``supersede_unfinished``) and ``--repair`` retires the old version
    by the rule: one live version, the same on both hosts."""
    import psycopg

    a = host(tmp_path, "a", postgres_dsn)  # a host whose folder is then lost: b and c remain
    with a.session(scope="team") as s:
        mid = s.learn({"text": "v1"}).memory_id
        second = s.update(mid, {"text": "v2"}).key
    a.close()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:  # the commit as it was written then
        (payload,) = conn.execute(
            "select payload from journal_records where stream = 'memory-learn' and key = %s", (second,)
        ).fetchone()
        old = json.loads(payload)
        assert old.pop("supersedesScope") == "team"
        conn.execute(
            "update journal_records set payload = %s where stream = 'memory-learn' and key = %s",
            (json.dumps(old), second),
        )
    b, c = host(tmp_path, "b", postgres_dsn), host(tmp_path, "c", postgres_dsn)
    c.sync()
    with c.session(scope="team") as s:
        third = s.update(second, {"text": "v3"}).key
    for store in (b, c):
        store.sync()
        assert _live(store) == ["v1", "v3"]  # the split: v1 beside the memory's newest version
    found = memory.check_store(b)
    assert [p.kind for p in found] == ["supersede_unfinished"]
    assert "two live lines" in found[0].message
    memory.repair_store(b, found)
    for store in (b, c):
        store.sync()
        assert _live(store) == ["v3"]
        live = store.current(mid)
        assert live is not None and live.key == third
        assert memory.check_store(store) == []
        store.close()

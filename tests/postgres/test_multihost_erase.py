"""An erase on one host of a memory another host learned and this one never synced.

The erase forgets every version the journal holds as live, not only those this host has: the other
host's next read leaves the memory out (its own process, and a fresh one), and its next ``sync``
removes its copies. Before, the erase on B forgot nothing it did not hold: A's process went on
answering with the erased text, and a fresh process of A failed every read and every ``sync``
closed on the learned file whose commit was now a tombstone, so its copy was never removed. A
``sync`` that meets such a copy (its commit a tombstone an erase record names) removes it rather than
fail: a sync without materialize (the LangGraph store's) failed closed on it even once the erase
forgot it, and so did every sync of a host where a copy of an erased version was left (a version
published again by a materialize racing the update that retired it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import memory
from tests._helpers.hosts import host

MARK = "zqmultihosterase"


def _files_holding(base: Path, needle: str) -> list[str]:
    return [str(p) for p in sorted(base.rglob("*")) if p.is_file() and needle.encode() in p.read_bytes()]


def _rows_holding(dsn: str, needle: str) -> int:
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "select count(*) from journal_records where payload like %s", (f"%{needle}%",)
        ).fetchone()
    return int(row[0]) if row else 0


@pytest.mark.parametrize("whole", [True, False], ids=["sync", "sync-without-materialize"])
@pytest.mark.parametrize("versions", [1, 2])
def test_an_erase_on_b_of_what_a_learned_unsynced_leaves_a_no_trace_at_its_next_read_and_sync(
    tmp_path: Path, postgres_dsn: str, versions: int, whole: bool
) -> None:
    a = host(tmp_path, "a", postgres_dsn)
    with a.session(scope="team") as s:
        first = s.learn({"text": f"{MARK} one: ana lives in oslo"})
        if versions == 2:
            s.update(first.memory_id, {"text": f"{MARK} two: ana lives in bergen"})
    assert [r.memory_id for r in a.recall(scope="team")] == [first.key]
    with host(tmp_path, "b", postgres_dsn) as b:
        assert b.recall(scope="team") == []  # B never synced: it holds nothing of the memory
        with b.session(scope="privacy") as s:
            erased = s.erase(first.key, reason="ana asked")
        assert len(erased.keys) == versions
    assert a.recall(scope="team") == []  # the process that learned it
    assert a.why("ana oslo bergen", scope="team") == []
    with host(tmp_path, "a", postgres_dsn) as fresh:
        assert fresh.recall(scope="team") == []  # a fresh one: never fails closed on the file
        assert fresh.why("ana oslo bergen", scope=None) == []
        fresh.sync(materialize=whole)  # never fails closed on the copy: removes it
        assert _files_holding(tmp_path / "a", MARK) == []
        assert fresh.recall(scope="team") == []
        fresh.sync()  # (a sync without materialize publishes no other host's retirement)
        assert memory.check_store(fresh) == []
    a.close()
    assert _files_holding(tmp_path, MARK) == []
    assert _rows_holding(postgres_dsn, MARK) == 0

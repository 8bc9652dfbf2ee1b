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

import os
import subprocess
import sys
from pathlib import Path

import pytest

import memory
from tests._helpers.hosts import host

MARK = "zqmultihosterase"
ROOT = Path(__file__).resolve().parents[2]


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


@pytest.mark.parametrize("aside", ["quarantined by a repair", "staged by a killed forget"])
def test_bs_erase_removes_at_as_sync_the_copies_a_holds_aside_with_no_row_or_live_file(
    tmp_path: Path, postgres_dsn: str, aside: str
) -> None:
    """A host that holds an erased memory neither as a row nor as a live file may still hold a copy
    of it aside: a file ``flows check --repair`` moved into ``flows-quarantine/`` (a finding another
    host forgot), or the hidden stage a forget killed part-way left. Its sync skipped the erasure (it
    only looked for rows and live versions), so the erased text stayed on its disk and its check
    said ``erase_incomplete`` right after; the sync now removes those copies too."""
    text = f"{MARK} aside: ana lives in oslo"
    with host(tmp_path, "a", postgres_dsn) as a, a.session(scope="team") as s:
        learned = s.learn({"text": text})
    with host(tmp_path, "b", postgres_dsn) as b:
        b.sync()
    if aside == "quarantined by a repair":
        with host(tmp_path, "b", postgres_dsn) as b, b.session(scope="team") as s:
            s.forget(learned.memory_id, reason="stale")
        with host(tmp_path, "a", postgres_dsn) as a:
            problems = memory.check_store(a)
            assert "learned_forgotten" in {p.kind for p in problems}
            memory.repair_store(a, problems)
    else:
        child = (
            "import sys, memory\n"
            "with memory.MemoryStore(sys.argv[1], journal=sys.argv[2]) as a, a.session(scope='team') as s:\n"
            "    s.forget(sys.argv[3], reason='stale')\n"
        )
        env = {**os.environ, "PYTHONPATH": str(ROOT), "FLOWS_FAILPOINTS": "memory.after_set_aside=kill"}
        db = str(tmp_path / "a" / "history.db")
        killed = subprocess.run(
            [sys.executable, "-c", child, db, postgres_dsn, learned.memory_id],
            check=False,
            env=env,
            timeout=120,
        )
        assert killed.returncode == -9
    assert _files_holding(tmp_path / "a", MARK) != []  # a copy aside, on A
    with host(tmp_path, "b", postgres_dsn) as b, b.session(scope="privacy") as s:
        s.erase(learned.memory_id, reason="ana asked")
    with host(tmp_path, "a", postgres_dsn) as a:
        a.sync()
        assert _files_holding(tmp_path / "a", MARK) == []
        assert memory.check_store(a) == []

"""An erase made in the root run that holds the memory's commits (a session, or a flow, erasing what
it learned itself) finishes at once: the run's holder rewrites its own records while the run runs,
so no byte of the memory is left in the journal behind the answered erase, and the run goes on
appending after it. Before, such an erase was refused with ``journal_lease_held`` by its own run,
and the content stayed in the journal after the session ended, until someone erased again or ran
``flows check --repair``."""

from __future__ import annotations

from pathlib import Path

import memory
from tests._helpers.grep import files_holding as _files_holding
from tests.memory.conftest import Clock

MARK = "ZQOWNRUNERASE"


def _pg_rows_holding(location: str, needle: str) -> int:
    if not location.startswith("postgres"):
        return 0
    import psycopg

    with psycopg.connect(location) as conn:
        row = conn.execute(
            "select count(*) from journal_records where payload like %s", (f"%{needle}%",)
        ).fetchone()
    return int(row[0]) if row else 0


def test_a_session_erasing_what_it_learned_leaves_no_byte_of_it_and_goes_on(
    tmp_path: Path, journal_location: str
) -> None:
    store = memory.MemoryStore(tmp_path / "store" / "history.db", journal=journal_location, clock=Clock())
    with store.session(scope="alice") as s:
        first = s.learn({"text": f"alice's secret {MARK}1", "tags": [f"{MARK}t"], "source": f"{MARK}s"})
        s.learn({"text": "something else entirely"})
        s.update(first.key, {"text": f"alice's secret {MARK}2", "metadata": {"k": f"{MARK}m"}})
        s.forget_where(reason="a filter naming it", meta={"k": f"{MARK}m"})
        erased = s.erase(first.key, reason="alice asked")
        assert erased.memory == first.memory_id and erased.rewritten == 3  # two commits, one filter
        # while the session (and its root run) is still open
        assert _files_holding(tmp_path, MARK) == [] and _pg_rows_holding(journal_location, MARK) == 0
        assert memory.check_store(store) == []
        after = s.learn({"text": "learned after the erase"})
    assert [f.text for f in store.recall(scope="alice", limit=None)] == [
        "learned after the erase",
        "something else entirely",
    ]
    assert store.get(after.key) is not None
    assert _files_holding(tmp_path, MARK) == [] and memory.check_store(store) == []
    store.close()


def test_an_erase_by_filter_in_the_run_that_learned_the_memories_finishes_them(tmp_path: Path) -> None:
    store = memory.MemoryStore(tmp_path / "history.db", clock=Clock())
    with store.session(scope="bob") as s:
        for i in range(3):
            s.learn({"text": f"bob note {i} {MARK}", "metadata": {"user": "bob"}})
        s.learn({"text": "kept"})
        ids = s.erase_where(reason="bob asked", meta={"user": "bob"})
        assert len(ids) == 3
        assert _files_holding(tmp_path, MARK) == [] and memory.check_store(store) == []
    assert [f.text for f in store.recall(scope="bob")] == ["kept"]
    store.close()

"""An erase while another process has a read of the history DB open.

SQLite keeps a row's old pages for as long as a reader may still need them: the erase's deletion goes
to the write-ahead log, and only a checkpoint of the whole log overwrites the DB's old pages. A
reader whose read began before the erase makes that checkpoint busy. The erase waited for it (up to
30 s), then returned as if done, and ``flows check`` called the store clean, while ``history.db``
still held the erased text, tags, metadata and source; with any other connection open (a long-lived
store), nothing overwrote them later. Now the erase raises ``memory_erase_pending`` naming what keeps
them, a marker in ``<db-dir>/flows-erase-pending`` keeps the duty, ``flows check`` reports it
(``erase_pending``), and ``--repair`` or erasing again finishes it once the reader has ended.
"""

from __future__ import annotations

import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

import memory
import memory._db
from memory._erase import pending_markers
from tests._helpers.grep import files_holding
from tests.adversarial.memory_support import flows

MARK = "ZQXPENDINGERASE"

_READER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
if sys.argv[2] == "read":
    conn.execute("BEGIN")
    conn.execute("SELECT count(*) FROM findings").fetchone()
print("ready", flush=True)
sys.stdin.readline()
if sys.argv[2] == "read":
    conn.execute("COMMIT")
print("ended", flush=True)
sys.stdin.readline()
conn.close()
"""


class _Reader:
    """Another process with the history DB open: reading (a read transaction begun) or idle."""

    def __init__(self, db: Path, how: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _READER, str(db), how],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def end_read(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "ended"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def readers(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[_Reader]]:
    monkeypatch.setattr(memory._db, "ERASE_LOG_WAIT_MS", 300)  # the erase's wait for readers
    opened: list[_Reader] = []
    yield opened
    for reader in opened:
        reader.close()


def _synced(db: Path) -> str:
    with memory.MemoryStore(db) as store:
        with store.session(scope="alice") as s:
            key = s.learn(
                {"text": f"alice's {MARK} secret", "tags": [f"{MARK}t"], "metadata": {"k": f"{MARK}m"}}
            ).key
            s.learn({"text": "something else entirely"})
        store.sync()
    return key


def test_an_erase_a_reader_keeps_old_pages_of_is_pending_reported_and_finished_by_repair(
    tmp_path: Path, readers: list[_Reader]
) -> None:
    db = tmp_path / "store" / "history.db"
    key = _synced(db)
    db.chmod(0o640)  # a store its group may read: the marker is the store's file like any other
    readers.append(_Reader(db, "idle"))  # a long-lived connection: no reader's close is the last one
    reading = _Reader(db, "read")
    readers.append(reading)
    with memory.MemoryStore(db) as store:
        with store.session(scope="privacy") as s, pytest.raises(memory.ErasePending) as caught:
            s.erase(key, reason="alice asked")
        assert caught.value.code == "memory_erase_pending"
        assert str(db) in str(caught.value) and "flows check --repair" in str(caught.value)
        assert len(caught.value.held) == 1 and "read of the history DB" in caught.value.held[0]
        # everything but the pages the reader keeps is erased
        assert [r.text for r in store.recall(scope="alice")] == ["something else entirely"]
        held_in = files_holding(tmp_path, MARK)
        assert held_in and all(Path(p).name.startswith("history.db") for p in held_in)
        (marker,) = pending_markers(db)
        assert orjson.loads(marker.read_bytes())["memories"] == [key]
        modes = (stat.S_IMODE(marker.stat().st_mode), stat.S_IMODE(marker.parent.stat().st_mode))
        assert modes == (0o640, 0o750)
        problems = memory.check_store(store)
        assert [p.kind for p in problems] == ["erase_pending"] and key in problems[0].message
        # while the reader reads, a repair cannot finish it, and says so
        memory.repair_store(store, problems)
        assert pending_markers(db) == [marker]
    reading.end_read()
    checked = flows(db, "check", "--json")
    assert checked.returncode == 1 and [p["kind"] for p in orjson.loads(checked.stdout)["problems"]] == [
        "erase_pending"
    ]
    repaired = flows(db, "check", "--repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert pending_markers(db) == []
    assert files_holding(tmp_path, MARK) == []
    assert flows(db, "check").returncode == 0


def test_erasing_again_once_the_reader_has_ended_finishes_it(tmp_path: Path, readers: list[_Reader]) -> None:
    db = tmp_path / "store" / "history.db"
    key = _synced(db)
    readers.append(_Reader(db, "idle"))
    reading = _Reader(db, "read")
    readers.append(reading)
    with memory.MemoryStore(db) as store:
        with store.session(scope="privacy") as s, pytest.raises(memory.ErasePending):
            s.erase(key, reason="alice asked")
        reading.end_read()
        with store.session(scope="privacy") as s:
            assert s.erase(key, reason="alice asked").keys == (key,)  # idempotent: no second record
        assert pending_markers(db) == []
        assert files_holding(tmp_path, MARK) == []
        assert memory.check_store(store) == []


def test_erasing_again_in_a_new_process_while_the_reader_still_reads_is_pending_too(
    tmp_path: Path, readers: list[_Reader]
) -> None:
    """The erase again rewrites nothing (its first did it all): it still says pending while the
    reader keeps the old pages, and done once the reader has ended."""
    db = tmp_path / "store" / "history.db"
    key = _synced(db)
    readers.append(_Reader(db, "idle"))
    reading = _Reader(db, "read")
    readers.append(reading)
    with (
        memory.MemoryStore(db) as store,
        store.session(scope="privacy") as s,
        pytest.raises(memory.ErasePending),
    ):
        s.erase(key, reason="alice asked")
    with memory.MemoryStore(db) as store:  # a process of its own, as a restart
        with store.session(scope="privacy") as s, pytest.raises(memory.ErasePending) as caught:
            s.erase(key, reason="alice asked again")
        assert "read of the history DB" in caught.value.held[0]
        assert files_holding(tmp_path, MARK) and pending_markers(db)
        reading.end_read()
        with store.session(scope="privacy") as s:
            s.erase(key, reason="alice asked once more")
        assert pending_markers(db) == []
        assert files_holding(tmp_path, MARK) == []


def test_an_erase_with_only_an_idle_connection_open_elsewhere_is_not_pending(
    tmp_path: Path, readers: list[_Reader]
) -> None:
    db = tmp_path / "store" / "history.db"
    key = _synced(db)
    readers.append(_Reader(db, "idle"))
    with memory.MemoryStore(db) as store:
        with store.session(scope="privacy") as s:
            s.erase(key, reason="alice asked")
        assert pending_markers(db) == []
        assert files_holding(tmp_path, MARK) == []


def _people(db: Path, n: int) -> list[str]:
    with memory.MemoryStore(db) as store:
        with store.session(scope="alice") as s:
            keys = [s.learn({"text": f"{MARK} {i}", "metadata": {"user": "alice"}}).key for i in range(n)]
            s.learn({"text": "bob's note", "metadata": {"user": "bob"}})
        store.sync()
    return keys


def test_an_erase_by_filter_with_a_reader_erases_every_memory_waits_once_and_says_so_once(
    tmp_path: Path, readers: list[_Reader], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI's erase by filter erased the first memory and stopped on its ``memory_erase_pending``
    (the rest left live, their text in the journal), and each erase waited for the reader again."""
    from flows._cli import main

    db = tmp_path / "store" / "history.db"
    keys = _people(db, 4)
    readers.append(_Reader(db, "idle"))
    reading = _Reader(db, "read")
    readers.append(reading)
    waits: list[int] = []
    real = memory._db._truncate_log

    def counted(conn: object, wait_ms: int) -> bool:
        waits.append(wait_ms)
        return real(conn, wait_ms)  # type: ignore[arg-type]

    monkeypatch.setattr(memory._db, "_truncate_log", counted)
    code = main(["erase", "--meta", "user=alice", "--reason", "alice asked", "--yes", "--db", str(db)])
    assert code == 1
    assert [w for w in waits if w > 0] == [300]  # the reader is waited for once, not once a memory
    (marker,) = pending_markers(db)
    assert sorted(orjson.loads(marker.read_bytes())["memories"]) == sorted(keys)
    with memory.MemoryStore(db) as store:
        assert [r.text for r in store.recall(scope="alice")] == ["bob's note"]
    reading.end_read()
    assert flows(db, "check", "--repair").returncode == 0
    assert files_holding(tmp_path, MARK) == []


def test_a_link_where_the_markers_folder_belongs_is_never_read_or_cleared_through(tmp_path: Path) -> None:
    """The markers' folder was listed through a link, and every erase that settled removed each
    ``*.json`` file wherever the link pointed."""
    db = tmp_path / "store" / "history.db"
    key = _synced(db)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "package.json").write_text("{}")
    (db.parent / "flows-erase-pending").symlink_to(elsewhere)
    with memory.MemoryStore(db) as store:
        with store.session(scope="privacy") as s:
            s.erase(key, reason="alice asked")
        assert (elsewhere / "package.json").exists()
        problems = memory.check_store(store)
        assert [(p.kind, p.repairable) for p in problems] == [("folder_wrong", False)]
        memory.repair_store(store, problems)
    assert (elsewhere / "package.json").exists()

"""A process's first read does only what it needs, and answers as any read does.

* it reads a scope folder from the files' index matched against the ``lstat`` the scan of every
  scope just took, without opening the folder again one component at a time;
* on a file journal it opens no journal unless a finding it returns needs its citation checked;
* its snapshot of the history DB opens the write-ahead log's index read-only, so it neither
  truncates nor rewrites the ``-shm`` (the next read opens the usual reader), and it falls back
  to the usual reader whenever SQLite cannot begin a read that way (a writer's committed frames
  that no read mark covers yet).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import journal
import memory
import memory._filecache
from memory._safe import Folder
from tests.conftest import ROOT
from tests.memory.conftest import Clock


def _learn(store: memory.MemoryStore, texts: list[str], scope: str = "desk") -> None:
    with store.session(scope=scope, flow="probe") as s:
        for text in texts:
            s.learn({"text": text, "tags": ["t"]})


def _store(db: Path, synced: list[str], unsynced: list[str]) -> None:
    clock = Clock(start=time.time_ns() // 1_000_000 - 10_000_000)
    with memory.MemoryStore(db, clock=clock) as store:
        _learn(store, synced)
        store.sync()
        _learn(store, unsynced)


def test_a_first_read_takes_the_index_for_the_folder_the_scan_just_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory._filecache, "_RACY_NS", 0)  # a test cannot age a folder's ctime
    db = tmp_path / "history.db"
    _store(db, [], ["one", "two", "three"])
    with memory.MemoryStore(db) as store:  # writes the files' index
        expected = [e.text for e in store.recall(tag="t")]
    assert expected == ["three", "two", "one"]
    opened: list[Path] = []
    real = Folder.open.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Folder], base: Path, path: Path) -> Folder | None:
        opened.append(path)
        return real(cls, base, path)  # type: ignore[no-any-return]

    monkeypatch.setattr(Folder, "open", classmethod(counting))
    with memory.MemoryStore(db) as store:
        assert [e.text for e in store.recall(tag="t")] == expected
    assert opened == []
    # a read of one scope still opens its folder without following a link
    with memory.MemoryStore(db) as store:
        assert [e.text for e in store.recall(tag="t", scope="desk")] == expected
    assert len(opened) == 1


def test_a_read_of_synced_rows_on_a_file_journal_opens_no_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "history.db"
    _store(db, ["one", "two"], [])
    memory.MemoryStore(db).close()  # the open's check for lost names, made once: the store has runs now
    opened: list[str] = []
    real = journal.open_journal

    def counting(location: str, **kwargs: int) -> journal.JournalBackend:
        opened.append(location)
        return real(location, **kwargs)

    monkeypatch.setattr(journal, "open_journal", counting)
    with memory.MemoryStore(db) as store:
        assert [e.text for e in store.recall(tag="t")] == ["two", "one"]
    assert opened == []
    with memory.MemoryStore(db) as store:  # an unsynced finding's citation is checked in the journal
        _learn(store, ["three"])
    opened.clear()
    with memory.MemoryStore(db) as store:
        assert [e.text for e in store.recall(tag="t")] == ["three", "two", "one"]
    assert len(opened) == 1
    # a journal location no journal can be opened at still fails the read, with its code
    with (
        memory.MemoryStore(db, journal="http://example.com/j") as store,
        pytest.raises(journal.JournalLocationInvalid) as caught,
    ):
        store.recall(tag="t")
    assert caught.value.code == "journal_location_invalid"


_FIRST_READS = r"""
import os, sys
import memory
db = sys.argv[1]
shm = db + "-shm"
before = os.stat(shm).st_mtime_ns
store = memory.MemoryStore(db)
first = [e.text for e in store.recall(tag="t")]
after_first = os.stat(shm).st_mtime_ns
second = [e.text for e in store.recall(tag="t")]
store.close()
print(first == second, before == after_first, ",".join(first))
"""


def test_the_first_read_of_a_process_leaves_the_wal_index_unwritten(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    _store(db, ["one", "two"], ["three"])
    with memory.MemoryStore(db) as store:  # a reader leaves an empty log and its index behind
        store.recall()
    assert os.path.getsize(f"{db}-wal") == 0 and os.path.getsize(f"{db}-shm") > 0
    time.sleep(0.05)  # past the file system's clock tick: a rewrite of the index would show
    out = subprocess.run(
        [sys.executable, "-c", _FIRST_READS, str(db)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
        timeout=60,
    )
    assert out.stdout.split() == ["True", "True", "three,two,one"], out.stderr


def test_a_first_read_while_a_writer_holds_unmarked_frames_sees_them(tmp_path: Path) -> None:
    """A writer that committed frames and read nothing since has set no read mark: a reader with
    a read-only index cannot begin a read then (SQLite's ``SQLITE_READONLY_CANTINIT``), so the
    first read opens the usual reader, which sees the commit."""
    db = tmp_path / "history.db"
    _store(db, ["one", "two"], [])
    with memory.MemoryStore(db) as store:
        store.recall()
    writer = sqlite3.connect(db, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("UPDATE findings SET retired_ms = 1 WHERE text = 'two'")  # as a forget's sync
        writer.execute("COMMIT")
        assert os.path.getsize(f"{db}-wal") > 0
        with memory.MemoryStore(db) as store:
            assert [e.text for e in store.recall(tag="t")] == ["one"]
            assert [e.text for e in store.recall(tag="t")] == ["one"]
    finally:
        writer.close()


def test_a_first_read_with_an_empty_log_and_a_writer_attached_sees_its_later_commit(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    _store(db, ["one", "two"], [])
    with memory.MemoryStore(db) as store:
        store.recall()
    writer = sqlite3.connect(db, isolation_level=None)
    try:
        assert writer.execute("SELECT count(*) FROM findings").fetchone()[0] == 2  # attached, log empty
        with memory.MemoryStore(db) as store:
            assert [e.text for e in store.recall(tag="t")] == ["two", "one"]
            writer.execute("UPDATE findings SET retired_ms = 1 WHERE text = 'two'")
            assert [e.text for e in store.recall(tag="t")] == ["one"]
    finally:
        writer.close()


def test_the_open_reads_each_small_file_of_its_check_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The open's check for lost names reads the boot id, the folder's mount and its memo: one
    read each, since a read that returns less than it asked for has reached the end."""
    db = tmp_path / "history.db"
    _store(db, ["one"], [])
    memory.MemoryStore(db).close()  # the store has runs: its check leaves the memo
    reads: list[int] = []
    real = os.read

    def counting(fd: int, n: int) -> bytes:
        reads.append(fd)
        return real(fd, n)

    monkeypatch.setattr(os, "read", counting)
    store = memory.MemoryStore(db)
    monkeypatch.undo()
    try:
        assert len(reads) == 3
        assert [e.text for e in store.recall()] == ["one"]
    finally:
        store.close()

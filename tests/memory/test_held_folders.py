"""A warm read of every scope checks its folders through descriptors it holds open (``memory._held``):
each change another process makes between two reads, and each folder moved or replaced, is still
seen by the next read, as a look by path sees it."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

import memory

_SETTLE_S = 0.1  # longer than the racy window: the folders' listings are trusted, and held


def _learn(db: Path, scope: str, text: str) -> str:
    """Learn ``text`` through a store of its own (as another process would); its key."""
    with memory.MemoryStore(db) as store, store.session(scope=scope, flow="notes") as s:
        return s.learn({"text": text, "tags": ["t"]}).key


def _texts(store: memory.MemoryStore) -> list[str]:
    return sorted(e.text for e in store.recall(tag="t", limit=None))


def _warm(store: memory.MemoryStore, expected: list[str]) -> None:
    """Two reads of every scope after the folders settled: the second through the held folders."""
    time.sleep(_SETTLE_S)
    assert _texts(store) == expected
    assert _texts(store) == expected
    assert store._search._held is not None  # the shortcut is what the next read takes


def test_a_learn_and_a_forget_made_elsewhere_are_seen_by_the_next_read(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    first = _learn(db, "desk", "one")
    with memory.MemoryStore(db) as reader:
        _warm(reader, ["one"])
        _learn(db, "desk", "two")  # a new file in a held learned-file folder
        assert _texts(reader) == ["one", "two"]
        _warm(reader, ["one", "two"])
        with memory.MemoryStore(db) as other, other.session(scope="desk") as s:
            s.forget(first, reason="wrong")  # the scope's retired-file folder is made
        assert _texts(reader) == ["two"]
        _warm(reader, ["two"])
        second = _learn(db, "desk", "three")
        _warm(reader, ["three", "two"])
        with memory.MemoryStore(db) as other, other.session(scope="desk") as s:
            s.forget(second, reason="wrong too")  # a new file in a held retired-file folder
        assert _texts(reader) == ["two"]


def test_a_forget_of_a_synced_finding_made_elsewhere_is_seen_by_the_next_read(tmp_path: Path) -> None:
    """The forget makes the scope's retired-file folder and leaves its learned-file folder as it
    was (the finding's file went at the sync): only the folder above them says so."""
    db = tmp_path / "history.db"
    first = _learn(db, "desk", "one")
    with memory.MemoryStore(db) as other:
        other.sync()
    _learn(db, "desk", "two")
    with memory.MemoryStore(db) as reader:
        _warm(reader, ["one", "two"])
        learned = memory.learned_dir(db, "desk")
        before = os.stat(learned).st_mtime_ns
        with memory.MemoryStore(db) as other, other.session(scope="desk") as s:
            s.forget(first, reason="wrong")
        assert os.stat(learned).st_mtime_ns == before
        assert _texts(reader) == ["two"]


def test_a_new_scope_and_a_sync_made_elsewhere_are_seen_by_the_next_read(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    _learn(db, "desk", "one")
    with memory.MemoryStore(db) as reader:
        _warm(reader, ["one"])
        _learn(db, "shelf", "two")  # a new scope folder
        assert _texts(reader) == ["one", "two"]
        _warm(reader, ["one", "two"])
        with memory.MemoryStore(db) as other:
            other.sync()  # the files leave their folders for the DB
        found = reader.recall(tag="t", limit=None)
        assert sorted(e.text for e in found) == ["one", "two"]
        assert all(e.synced for e in found)


@pytest.mark.parametrize("replaced", [".trajectories/compacted", ".trajectories"])
def test_a_scope_s_folder_replaced_between_two_reads_is_read_anew(tmp_path: Path, replaced: str) -> None:
    """The learned-file folder, or the scope's ``.trajectories`` (the scope folder above it is not
    held: the replaced folder's own ctime says it moved), replaced by a copy taken earlier."""
    db = tmp_path / "history.db"
    _learn(db, "desk", "one")
    [folder] = (tmp_path / "flows-memory").iterdir()
    target = folder / replaced
    saved = tmp_path / "saved"
    shutil.copytree(target, saved)  # a copy holding "one" alone
    _learn(db, "desk", "two")
    with memory.MemoryStore(db) as reader:
        _warm(reader, ["one", "two"])
        os.rename(target, target.with_name(".replaced"))
        os.rename(saved, target)
        assert _texts(reader) == ["one"]


def test_the_store_folder_replaced_between_two_reads_is_read_anew(tmp_path: Path) -> None:
    """The held tree starts at the DB's folder: a store folder moved away, another put in its place,
    changes the moved folder's ctime alone (its parent is not held), and the next read sees it."""
    store_dir = tmp_path / "store"
    db = store_dir / "history.db"
    _learn(db, "desk", "one")
    replacement = tmp_path / "replacement"
    _learn(replacement / "history.db", "desk", "two")
    with memory.MemoryStore(db) as reader:
        _warm(reader, ["one"])
        time.sleep(_SETTLE_S)  # the DB's folder settled too (its -wal and -shm came with the reader)
        assert _texts(reader) == ["one"]  # its stamp taken: the next read fstats it
        os.rename(store_dir, tmp_path / "moved")
        os.rename(replacement, store_dir)
        assert _texts(reader) == ["two"]

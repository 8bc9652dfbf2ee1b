"""A read made while another process updates a memory answers with the old version or the new one,
never with neither.

An update retires the version it replaces, then renames the new one into place. A read lists the
scope's folder, then reads its retired files: one that listed the folder just before the rename and
read the retired files just after the retirement found the old version retired and no new one, and
answered with nothing, though the memory was live at every instant. (A LangGraph store's delete
that looked then saw no item and returned, and the item, refreshed by another process meanwhile,
stayed.) Such a read now starts again and finds the new version.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import memory
from memory._safe import Folder

OLD = {"text": "the ferry leaves at seven", "tags": ["ferry"], "metadata": {"item": "ferry"}}
NEW = {
    "text": "the ferry leaves at eight from the north pier",
    "tags": ["ferry"],
    "metadata": {"item": "ferry"},
}


@pytest.mark.parametrize("read", ["recall", "recall by metadata", "recall of every scope", "why", "current"])
def test_a_read_between_an_updates_retirement_and_its_rename_finds_the_new_version(
    tmp_path: Path, read: str
) -> None:
    db = tmp_path / "history.db"
    with memory.MemoryStore(db) as writer, writer.session(scope="harbour") as s:
        old = s.learn(OLD)
    with memory.MemoryStore(db) as reader, memory.MemoryStore(db) as writer:
        assert [e.key for e in reader.recall(scope="harbour")] == [old.key]  # warm: listed, indexed
        disk = reader._search._disk
        real = disk.retired
        updated: list[Any] = []

        def retired_after_the_update(directory: Path) -> Any:
            # the listing is taken; now another process's update runs to its end (retire, rename,
            # remove the old file) before this read looks at the retired files
            if not updated:
                with writer.session(scope="harbour") as w:
                    updated.append(w.update(old.memory_id, NEW))
            return real(directory)

        disk.retired = retired_after_the_update  # type: ignore[method-assign]
        if read == "recall":
            found = [e.text for e in reader.recall(scope="harbour")]
        elif read == "recall by metadata":
            found = [e.text for e in reader.recall(scope="harbour", meta={"item": "ferry"}, limit=None)]
        elif read == "recall of every scope":
            found = [e.text for e in reader.recall(limit=None)]
        elif read == "why":
            found = [x.finding.text for x in reader.why("ferry leaves", scope="harbour")]
        else:
            current = reader.current(old.memory_id)
            found = [] if current is None else [current.text]
        assert updated, "the update did not run inside the read"
        assert found == [NEW["text"]]


def _before_each_open(monkeypatch: pytest.MonkeyPatch, before: Callable[[str], None]) -> None:
    """Run ``before(name)`` as any store of this process opens a file of a folder, by name (a read
    lists a folder, then opens each file it listed: this runs between the two)."""
    real_read, real_read_stat = Folder.read, Folder.read_stat

    def read_then(self: Folder, name: str, shown: str | None = None) -> Any:
        before(name)
        return real_read(self, name, shown)

    def read_stat_then(self: Folder, name: str, shown: str | None = None) -> Any:
        before(name)
        return real_read_stat(self, name, shown)

    monkeypatch.setattr(Folder, "read", read_then)
    monkeypatch.setattr(Folder, "read_stat", read_stat_then)


def _read(reader: memory.MemoryStore, read: str, memory_id: str) -> list[str]:
    if read == "recall":
        return [e.text for e in reader.recall(scope="harbour")]
    if read == "why":
        return [x.finding.text for x in reader.why("ferry leaves", scope="harbour")]
    current = reader.current(memory_id)
    return [] if current is None else [current.text]


@pytest.mark.parametrize("file_index", [True, False], ids=["files' index", "every file"])
@pytest.mark.parametrize("read", ["recall", "why", "current"])
@pytest.mark.parametrize("change", ["update", "forget"])
def test_a_listed_file_an_update_removes_before_the_read_opens_it_is_not_taken_for_a_synced_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read: str, file_index: bool, change: str
) -> None:
    """A read lists the folder, then opens each file: an update that runs wholly between the two
    removes the old version's file (the read takes a file gone for one a sync moved into the history
    DB) and renames the new one in (the listing lacks it). The read starts again when the gone
    file's retired file is there."""
    db = tmp_path / "history.db"
    with memory.MemoryStore(db) as writer, writer.session(scope="harbour") as s:
        old = s.learn(OLD)
    with memory.MemoryStore(db, file_index=file_index) as reader, memory.MemoryStore(db) as writer:
        changed: list[Any] = []

        def change_first(name: str) -> None:
            if not changed and name == f"{old.key}.json":
                changed.append(change)
                with writer.session(scope="harbour") as w:
                    if change == "update":
                        w.update(old.memory_id, NEW)
                    else:
                        w.forget(old.key, reason="the timetable changed")

        _before_each_open(monkeypatch, change_first)
        found = _read(reader, read, old.memory_id)
        assert changed, "the change did not run between the listing and the opening"
        assert found == ([NEW["text"]] if change == "update" else [])


@pytest.mark.parametrize("file_index", [True, False], ids=["files' index", "every file"])
def test_a_listed_file_a_sync_moves_before_the_read_opens_it_is_read_from_the_history_db(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, file_index: bool
) -> None:
    """The other way a listed file goes: a sync moves it into the history DB, and no retired file
    is left. The read goes on (it looks at the DB after the files) and answers with it."""
    db = tmp_path / "history.db"
    with memory.MemoryStore(db) as writer, writer.session(scope="harbour") as s:
        old = s.learn(OLD)
    with memory.MemoryStore(db, file_index=file_index) as reader, memory.MemoryStore(db) as writer:
        synced: list[Any] = []

        def sync_first(name: str) -> None:
            if not synced and name == f"{old.key}.json":
                synced.append(-1)
                synced[0] = writer.sync()

        _before_each_open(monkeypatch, sync_first)
        assert [e.text for e in reader.recall(scope="harbour")] == [OLD["text"]]
        assert [(r.ingested, r.dropped) for r in synced] == [(1, 1)], "the sync did not move the file"


@pytest.mark.parametrize("read", ["recall of every scope", "why of every scope", "current"])
def test_a_read_of_every_scope_during_an_update_that_moves_the_memory_finds_it_in_its_new_scope(
    tmp_path: Path, read: str
) -> None:
    """An update may move a memory to another scope. Its retired file names the new version's key,
    not its scope: a read that listed the new scope's folder before the rename and read the retired
    files after the retirement looked for the new version in the old scope alone, found it nowhere,
    and answered with neither. It now looks in the other folders it listed too."""
    db = tmp_path / "history.db"
    with memory.MemoryStore(db) as writer:
        with writer.session(scope="harbour") as s:
            old = s.learn(OLD)
        with writer.session(scope="pier") as s:
            s.learn({"text": "the pier lamp is broken"})
    with memory.MemoryStore(db) as reader, memory.MemoryStore(db) as writer:
        reader.recall(limit=None)  # warm: every folder listed and indexed
        disk = reader._search._disk
        real = disk.retired
        updated: list[Any] = []

        def retired_after_the_move(directory: Path) -> Any:
            if not updated:
                with writer.session(scope="pier") as w:
                    updated.append(w.update(old.memory_id, NEW))
            return real(directory)

        disk.retired = retired_after_the_move  # type: ignore[method-assign]
        if read == "recall of every scope":
            found = [e.text for e in reader.recall(limit=None) if "ferry" in e.text]
        elif read == "why of every scope":
            found = [x.finding.text for x in reader.why("ferry leaves")]
        else:
            current = reader.current(old.memory_id)
            found = [] if current is None else [current.text]
        assert updated, "the update did not run inside the read"
        assert found == [NEW["text"]]
        assert reader.current(old.memory_id).scope == "pier"  # type: ignore[union-attr]

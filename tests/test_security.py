"""Security basics: names cannot escape the store, links are not followed, modes are as intended."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

import journal
import memory


def _root(store: memory.MemoryStore, flow: str = "f", scope: str = "s") -> memory.RootRun:
    jr = store.open_journal()
    _, lease = jr.begin(flow, scope, {})
    return memory.RootRun(jr, lease, flow, scope)


@pytest.mark.parametrize("scope", ["../../escape", "/etc", "a\x00b", "..", "x/../../y"])
def test_a_scope_never_becomes_a_path_outside_the_store(tmp_path: Path, scope: str) -> None:
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store:
        if "\x00" in scope:  # a scope with NUL never gets a root run: the journal refuses the name
            with pytest.raises(journal.JournalNameInvalid):
                _root(store, scope=scope)
        else:
            learned = store.learn({"text": "contained"}, _root(store, scope=scope))
            assert learned.path.resolve().is_relative_to((tmp_path / "store" / "flows-memory").resolve())
    assert {p.name for p in tmp_path.iterdir()} <= {"store"}


@pytest.mark.parametrize("bad", ["../x", "a/b", "a\x00b", ".hidden", "..", "/abs"])
def test_run_ids_and_stream_names_cannot_name_a_path(tmp_path: Path, bad: str) -> None:
    jr = journal.FileJournal(tmp_path / "j")
    _, lease = jr.begin("f", "s", {})
    with pytest.raises(journal.JournalNameInvalid):
        jr.run(bad)
    with pytest.raises(journal.JournalNameInvalid):
        jr.append(journal.Lease(bad, 1), "s", {})
    with pytest.raises(journal.JournalNameInvalid):
        jr.append(lease, bad, {})


def test_a_symlink_planted_as_a_learned_directory_is_not_followed(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    outside = tmp_path / "outside"
    outside.mkdir()
    target = memory.learned_dir(db, "s")
    target.parent.mkdir(parents=True)
    target.symlink_to(outside, target_is_directory=True)
    with memory.MemoryStore(db) as store:
        root = _root(store)
        with pytest.raises(memory.Unwritable, match="symbolic link"):
            store.learn({"text": "x"}, root)
        assert list(store.open_journal().read(root.run_id, memory.STREAM)) == []
    assert list(outside.iterdir()) == []


def test_a_symlink_planted_as_a_learned_file_is_never_read_through(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    secret = tmp_path / "secret.json"
    secret.write_text('{"text": "secret"}')
    d = memory.learned_dir(db, "s")
    d.mkdir(parents=True)
    (d / ("a" * 32 + ".json")).symlink_to(secret)
    with memory.MemoryStore(db) as store, pytest.raises(memory.Unreachable, match="symbolic link"):
        store.recall()


def test_a_symlink_planted_as_a_run_directory_fails_closed(tmp_path: Path) -> None:
    jr = journal.FileJournal(tmp_path / "j")
    info, _ = jr.begin("f", "s", {})
    elsewhere = tmp_path / "elsewhere"
    (tmp_path / "j" / "runs" / info.run_id).rename(elsewhere)
    (tmp_path / "j" / "runs" / info.run_id).symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(journal.JournalCorrupt, match="symbolic link"):
        journal.FileJournal(tmp_path / "j").run(info.run_id)


def test_files_and_directories_are_created_private_and_never_world_writable(tmp_path: Path) -> None:
    old = os.umask(0)  # even with no umask to narrow them
    try:
        db = tmp_path / "store" / "history.db"
        with memory.MemoryStore(db) as store:
            store.learn({"text": "private"}, _root(store))
            store.sync()
            store.learn({"text": "follows the DB"}, _root(store))
    finally:
        os.umask(old)
    for path in (tmp_path / "store").rglob("*"):
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert not mode & stat.S_IWOTH, f"{path} is world-writable ({oct(mode)})"
        if path.is_dir():
            assert mode == 0o700, f"{path} {oct(mode)}"
    journal_files = [p for p in (tmp_path / "store" / "flows-journal").rglob("*") if p.is_file()]
    assert journal_files and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in journal_files)


def test_learned_files_take_the_db_mode_without_exec_or_world_write(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    db.write_bytes(b"")
    db.chmod(0o777)
    with memory.MemoryStore(db) as store:
        learned = store.learn({"text": "mode"}, _root(store))
    assert stat.S_IMODE(learned.path.stat().st_mode) == 0o664


def _swap_for_link(folder: Path, outside: Path) -> Path:
    """Move ``folder`` into ``outside`` and put a link to a copy of it (also in ``outside``) in its
    place: the path now resolves outside the store, to a folder holding what the store's held."""
    import shutil

    moved = outside / "moved"
    os.rename(folder, moved)
    shutil.copytree(moved, outside / "copy", symlinks=True)
    folder.symlink_to(outside / "copy", target_is_directory=True)
    return outside / "copy"


def _files_under(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if not p.is_dir()}


# which folder a long-lived process finds swapped for a link: the learned files' own, the scope's,
# or ``flows-memory`` (every scope's)
_SWAPPED = {
    "learned folder": lambda db: memory.learned_dir(db, "s"),
    "scope folder": lambda db: memory.learned_dir(db, "s").parent.parent,
    "flows-memory": lambda db: memory.learned_dir(db, "s").parent.parent.parent,
}


@pytest.mark.parametrize("which", list(_SWAPPED))
def test_a_folder_swapped_for_a_link_after_the_first_learn_is_never_written_through(
    tmp_path: Path, which: str
) -> None:
    """The first learn checks the way to its folder; a long-lived process must not trust that
    check for the next learn, update or forget: none of them may write outside the store."""
    db = tmp_path / "store" / "history.db"
    outside = tmp_path / "outside"
    outside.mkdir()
    with memory.MemoryStore(db) as store:
        root = _root(store)
        first = store.learn({"text": "learned before the swap"}, root)
        second = store.learn({"text": "to forget after the swap"}, root)
        copy = _swap_for_link(_SWAPPED[which](db), outside)
        before = _files_under(outside)
        with pytest.raises(memory.Unwritable, match="symbolic link"):
            store.learn({"text": "learned after the swap"}, root)
        # an update or a forget reads first: the read or the write refuses the link
        refused = (memory.Unwritable, memory.Unreachable)
        with pytest.raises(refused, match="symbolic link"):
            store.update(first.id, {"text": "updated after the swap"}, root)
        with pytest.raises(refused, match="symbolic link"):
            store.forget(second.id, root, reason="after the swap")
        keys = [r.payload["id"] for r in store.open_journal().read(root.run_id, memory.STREAM)]
        assert keys == [first.id, second.id]  # nothing staged outside, so nothing journaled
        # a forget journaled before its removal of the old file was refused keeps the finding out
        # of every read with its retired file, in the store (only the learned files' folder moved)
        if list(store.open_journal().read(root.run_id, memory.RETIRE_STREAM)):
            assert which == "learned folder"
            assert (memory.retired_dir(db, "s") / f"{second.id}.json").is_file()
    assert _files_under(outside) == before, "a file was written outside the store"
    assert all(not p.name.startswith(".stage-") for p in _files_under(copy))


def test_a_folder_replaced_by_another_folder_is_written_to_where_its_path_names(tmp_path: Path) -> None:
    """A folder moved away and made again under its name (no link) is the store's folder now: the
    next learn goes there, never into the folder held open before."""
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store:
        root = _root(store)
        store.learn({"text": "before the move"}, root)
        folder = memory.learned_dir(db, "s")
        moved = tmp_path / "moved"
        os.rename(folder, moved)
        folder.mkdir(mode=0o700)
        learned = store.learn({"text": "after the move"}, root)
        assert learned.path.parent == folder and learned.path.is_file()
        assert not (moved / learned.path.name).exists()
        assert learned.id in {r.key for r in store.recall(scope="s")}


@pytest.mark.parametrize("which", ["run folder", "streams folder", "runs folder"])
def test_a_journal_folder_swapped_for_a_link_while_in_use_is_never_written_or_read_through(
    tmp_path: Path, which: str
) -> None:
    """A journal checks its folders the first time it uses a run; a run folder (or its streams, or
    every run's folder) swapped for a link afterwards must not take the next append, run record or
    read: each fails with ``journal_corrupt`` and nothing lands outside the journal."""
    outside = tmp_path / "outside"
    outside.mkdir()
    jr = journal.FileJournal(tmp_path / "j")
    info, lease = jr.begin("f", "s", {})
    jr.append(lease, "kept", {"n": 1})
    assert [r.payload for r in jr.read(info.run_id, "kept")] == [{"n": 1}]
    run_dir = tmp_path / "j" / "runs" / info.run_id
    folder = {"run folder": run_dir, "streams folder": run_dir / "streams", "runs folder": run_dir.parent}
    copy = _swap_for_link(folder[which], outside)
    before = {p: p.read_bytes() for p in _files_under(outside)}
    for act in (
        lambda: jr.append(lease, "kept", {"n": 2}),
        lambda: jr.append(lease, "new", {"n": 3}),
        lambda: jr.read(info.run_id, "kept"),
        lambda: jr.streams(info.run_id),
        lambda: jr.finish(lease, journal.RunState.DONE),
    ):
        with pytest.raises(journal.JournalCorrupt) as caught:
            act()
        assert caught.value.reason == "folder replaced" and "symbolic link" in str(caught.value)
        assert caught.value.run_id == info.run_id
    assert {p: p.read_bytes() for p in _files_under(outside)} == before
    assert copy.exists()

"""Links inside the store: no read, sync, check or repair follows one. A scope folder (or
``flows-memory``, ``.trajectories``, ``compacted``, a learned file, a journal run folder) that is a
symbolic link is refused with a coded error naming it, reported by ``flows check``, moved aside
(as a link) by ``--repair``, and never read through: another store's findings are never shown,
ingested or deleted."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import orjson
import pytest

import memory
from tests.adversarial.memory_support import Store, error_code, flows, populate, snapshot


def _two_stores(tmp_path: Path) -> tuple[Store, Store]:
    mine = populate(tmp_path / "mine" / "history.db", ["my own finding"], scope="adv")
    theirs = populate(tmp_path / "theirs" / "history.db", ["their private finding"], scope="adv")
    return mine, theirs


def _link_scope_folder(mine: Store, theirs: Store) -> Path:
    """Replace my scope's folder by a link to theirs (same scope name, so the same hash)."""
    scope_folder = mine.folder.parent.parent
    for f in mine.folder.iterdir():
        f.unlink()
    mine.folder.rmdir()
    mine.folder.parent.rmdir()
    scope_folder.rmdir()
    scope_folder.symlink_to(theirs.folder.parent.parent, target_is_directory=True)
    return scope_folder


def _relink(mine: Store, theirs: Store, level: str) -> Path:
    """Make the folder at ``level`` of my store a link into their store; returns the link."""
    if level == "scope folder":
        return _link_scope_folder(mine, theirs)
    if level == "flows-memory":
        root = mine.db.parent / "flows-memory"
        os.rename(root, mine.db.parent / "flows-memory.moved")
        root.symlink_to(theirs.db.parent / "flows-memory", target_is_directory=True)
        return root
    target = {".trajectories": mine.folder.parent, "compacted": mine.folder}[level]
    os.rename(target, target.with_name(target.name + ".moved"))
    source = {".trajectories": theirs.folder.parent, "compacted": theirs.folder}[level]
    target.symlink_to(source, target_is_directory=True)
    return target


LEVELS = ["flows-memory", "scope folder", ".trajectories", "compacted"]


@pytest.mark.parametrize("level", LEVELS)
def test_reads_refuse_a_linked_folder_and_never_show_another_stores_findings(
    tmp_path: Path, level: str
) -> None:
    mine, theirs = _two_stores(tmp_path)
    link = _relink(mine, theirs, level)
    with memory.MemoryStore(mine.db) as store:
        reads = (store.recall, lambda: store.why("private finding"), lambda: store.recall(scope="adv"))
        for read in reads:
            with pytest.raises(memory.Unreachable) as caught:
                read()
            assert str(link) in str(caught.value) and "link" in str(caught.value)
    result = flows(mine.db, "recall")
    assert result.returncode == 1 and error_code(result) == "memory_unreachable"
    assert "their private finding" not in result.stdout + result.stderr


@pytest.mark.parametrize("level", LEVELS)
def test_sync_refuses_a_linked_folder_and_never_ingests_or_deletes_another_stores_files(
    tmp_path: Path, level: str
) -> None:
    mine, theirs = _two_stores(tmp_path)
    link = _relink(mine, theirs, level)
    theirs_before = snapshot(theirs.db.parent)
    result = flows(mine.db, "sync", "--no-materialize")
    assert result.returncode == 1, result.stdout
    assert error_code(result) == "memory_unreachable"
    assert str(link) in result.stderr
    assert snapshot(theirs.db.parent) == theirs_before  # not one of their files dropped
    with memory.MemoryStore(mine.db) as store:
        assert store.db.count() == 0


@pytest.mark.parametrize("level", LEVELS)
def test_check_reports_a_linked_folder_and_repair_moves_the_link_itself_aside(
    tmp_path: Path, level: str
) -> None:
    mine, theirs = _two_stores(tmp_path)
    link = _relink(mine, theirs, level)
    theirs_before = snapshot(theirs.db.parent)
    checked = flows(mine.db, "check", "--json")
    assert checked.returncode == 1, checked.stderr
    problems = orjson.loads(checked.stdout)["problems"]
    assert any(p["kind"] == "folder_wrong" and p["path"] == str(link) for p in problems), problems
    repaired = flows(mine.db, "check", "--repair", "--json")
    assert not link.is_symlink()  # gone, or a real folder the journal's findings were republished into
    moved = list((mine.db.parent / memory.QUARANTINE_DIR).rglob(link.name))
    assert len(moved) == 1 and moved[0].is_symlink()  # the link itself, never what it points to
    assert snapshot(theirs.db.parent) == theirs_before
    assert "Traceback" not in repaired.stderr


def test_a_learned_file_that_is_a_link_is_never_ingested_and_its_target_is_kept(tmp_path: Path) -> None:
    mine, theirs = _two_stores(tmp_path)
    (name,) = os.listdir(theirs.folder)
    (mine.folder / name).symlink_to(theirs.folder / name)
    theirs_before = snapshot(theirs.db.parent)
    result = flows(mine.db, "sync")
    assert result.returncode == 1 and error_code(result) == "memory_unreachable"
    assert "symbolic link" in result.stderr
    assert snapshot(theirs.db.parent) == theirs_before


def test_repair_never_sweeps_stages_through_a_linked_run_folder(tmp_path: Path) -> None:
    mine = populate(tmp_path / "mine" / "history.db", ["a finding"])
    outside = tmp_path / "outside"
    outside.mkdir()
    old_stage = outside / ".stage-0123456789abcdef.finding"
    old_stage.write_bytes(b"someone else's stage")
    past = time.time() - 7200
    os.utime(old_stage, (past, past))
    (mine.journal_dir / "runs" / "20990101T000000-linked").symlink_to(outside, target_is_directory=True)
    repaired = flows(mine.db, "check", "--repair")
    assert "Traceback" not in repaired.stderr
    assert old_stage.read_bytes() == b"someone else's stage"


def test_repair_never_moves_a_file_through_a_linked_quarantine(tmp_path: Path) -> None:
    mine = populate(tmp_path / "mine" / "history.db", ["a finding"])
    stray = mine.folder / ("e" * 32 + ".json")
    stray.write_bytes(b"not a finding")
    outside = tmp_path / "outside"
    outside.mkdir()
    (mine.db.parent / memory.QUARANTINE_DIR).symlink_to(outside, target_is_directory=True)
    repaired = flows(mine.db, "check", "--repair")
    assert repaired.returncode == 1
    assert error_code(repaired) == "memory_unwritable"
    assert memory.QUARANTINE_DIR in repaired.stderr and "symbolic link" in repaired.stderr
    assert list(outside.iterdir()) == []
    assert stray.read_bytes() == b"not a finding"


def test_a_retired_folder_that_is_a_link_is_refused_and_never_read_through(tmp_path: Path) -> None:
    mine = populate(tmp_path / "mine" / "history.db", ["a finding"])
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / f"{next(iter(mine.keys))}.json").write_bytes(b"a marker nobody journaled")
    link = mine.folder.parent / "retired"
    link.symlink_to(outside, target_is_directory=True)
    for args in (("recall",), ("sync",)):
        result = flows(mine.db, *args)
        assert result.returncode == 1 and error_code(result) == "memory_unreachable", args
        assert str(link) in result.stderr
    checked = flows(mine.db, "check", "--json")
    problems = orjson.loads(checked.stdout)["problems"]
    assert ("folder_wrong", str(link)) in [(p["kind"], p["path"]) for p in problems]
    assert flows(mine.db, "check", "--repair").returncode == 0
    assert not link.is_symlink() and sorted(os.listdir(outside)) == [f"{next(iter(mine.keys))}.json"]


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm"])
@pytest.mark.parametrize("what", ["link", "fifo", "folder"])
def test_a_history_db_file_that_is_not_a_regular_file_fails_the_read_naming_it(
    tmp_path: Path, suffix: str, what: str
) -> None:
    """The history DB, its ``-wal`` and its ``-shm`` are never followed or opened when anything but
    a regular file stands in their place: the read fails closed naming the path."""
    mine, theirs = _two_stores(tmp_path)
    with memory.MemoryStore(theirs.db) as store:
        store.sync()
    with memory.MemoryStore(mine.db) as store:
        store.sync()
    path = Path(f"{mine.db}{suffix}")
    path.unlink(missing_ok=True)
    if what == "link":
        path.symlink_to(f"{theirs.db}{suffix}" if suffix == "" else theirs.db)
    elif what == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    with memory.MemoryStore(mine.db, recover=False) as store, pytest.raises(memory.Unreachable) as caught:
        store.recall(limit=10)
    assert caught.value.path == path
    assert "never follows links or opens anything else" in str(caught.value)


@pytest.mark.parametrize("level", [".trajectories", "compacted"])
def test_a_folder_linked_after_a_removal_kept_it_open_is_refused_by_the_next_one(
    tmp_path: Path, level: str
) -> None:
    """A forget keeps its learned-file folder open for the next removal: a link put in that
    folder's place, or on the way to it, after the first removal is still refused by the next one
    (the same store object), and the other store's file of the same name stays."""
    mine = populate(tmp_path / "mine" / "history.db", ["first mine", "second mine"], scope="adv")
    theirs = populate(tmp_path / "theirs" / "history.db", ["their private finding"], scope="adv")
    first, second = sorted(mine.keys, key=lambda k: mine.keys[k])
    with memory.MemoryStore(mine.db) as store, store.session(scope="adv", flow="adv") as s:
        s.forget(first, reason="kept the folder open")
        planted = (mine.folder / f"{second}.json").read_bytes()  # a copy the read through the link finds
        (theirs.folder / f"{second}.json").write_bytes(planted)
        _relink(mine, theirs, level)
        with pytest.raises(memory.Unwritable) as raised:
            s.forget(second, reason="through a link")
    assert raised.value.code == "memory_unwritable" and "link" in str(raised.value)
    assert (theirs.folder / f"{second}.json").read_bytes() == planted


def test_a_folder_replaced_by_another_after_a_removal_kept_it_open_is_removed_from(tmp_path: Path) -> None:
    """The learned-file folder replaced by a real folder (restored from a copy) after a removal
    kept the old one open: the next removal takes the file from the folder the path names now."""
    mine = populate(tmp_path / "mine" / "history.db", ["first mine", "second mine"], scope="adv")
    first, second = sorted(mine.keys, key=lambda k: mine.keys[k])
    with memory.MemoryStore(mine.db) as store, store.session(scope="adv", flow="adv") as s:
        s.forget(first, reason="kept the folder open")
        copy = mine.folder.with_name("compacted.copy")
        shutil.copytree(mine.folder, copy)
        os.rename(mine.folder, mine.folder.with_name("compacted.old"))
        os.rename(copy, mine.folder)
        s.forget(second, reason="in the folder there now")
        assert not (mine.folder / f"{second}.json").exists()
        assert [e.key for e in store.recall(limit=None)] == []

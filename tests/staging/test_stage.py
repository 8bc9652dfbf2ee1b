"""Staging: hidden, exclusive, durable stages; atomic publish; sweeping."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

import staging
from tests._helpers.failpoints import armed


def _visible(directory: Path) -> list[str]:
    return sorted(n for n in os.listdir(directory) if not staging.is_stage_name(n))


def test_a_staged_file_is_never_listed_and_holds_the_bytes_with_the_mode(tmp_path: Path) -> None:
    staged = staging.stage(tmp_path, b"hello", 0o640, hint="f.json")
    assert staged.path.parent == tmp_path
    assert staging.is_stage_name(staged.path.name)
    assert _visible(tmp_path) == []
    assert staged.path.read_bytes() == b"hello"
    assert staged.path.stat().st_mode & 0o777 == 0o640


def test_publish_replaces_the_old_file_atomically(tmp_path: Path) -> None:
    final = tmp_path / "f.json"
    final.write_bytes(b"old")
    seen: set[bytes] = set()
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            seen.add(final.read_bytes())

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(200):
            staging.stage(tmp_path, b"new-%03d" % i * 100, hint="f").publish(final)
    finally:
        stop.set()
        t.join()
    assert final.read_bytes() == b"new-199" * 100
    assert all(s == b"old" or (len(s) == 700 and s[:4] == b"new-" and s == s[:7] * 100) for s in seen)
    assert _visible(tmp_path) == ["f.json"]
    assert [n for n in os.listdir(tmp_path) if staging.is_stage_name(n)] == []


def test_a_destination_that_is_not_a_directory_raises_and_leaves_nothing(tmp_path: Path) -> None:
    not_dir = tmp_path / "file"
    not_dir.write_bytes(b"x")
    with pytest.raises(staging.StageFailed) as err:
        staging.stage(not_dir, b"data")
    assert err.value.code == "staging_stage_failed"
    assert err.value.errno is not None
    with pytest.raises(staging.StageFailed):
        staging.stage(tmp_path / "missing", b"data")
    assert os.listdir(tmp_path) == ["file"]


def test_a_failing_write_leaves_no_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with armed(monkeypatch, "staging.before_fsync=ENOSPC"):
        with pytest.raises(staging.StageFailed) as err:
            staging.stage(tmp_path, b"x" * 10000)
        assert err.value.errno == 28
    assert os.listdir(tmp_path) == []


def test_publish_into_another_directory_or_twice_is_refused(tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    staged = staging.stage(tmp_path, b"x")
    with pytest.raises(ValueError, match="not in the stage's directory"):
        staged.publish(tmp_path / "other" / "f")
    staged.publish(tmp_path / "f")
    with pytest.raises(ValueError, match="already"):
        staged.publish(tmp_path / "f")


def test_publish_onto_a_directory_fails_and_removes_the_stage(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "keep").write_bytes(b"k")
    staged = staging.stage(tmp_path, b"x")
    with pytest.raises(staging.PublishFailed):
        staged.publish(tmp_path / "d")
    assert sorted(os.listdir(tmp_path)) == ["d"]


def test_discard_removes_the_stage_and_is_safe_twice(tmp_path: Path) -> None:
    staged = staging.stage(tmp_path, b"x")
    staged.discard()
    staged.discard()
    assert os.listdir(tmp_path) == []


def test_sweep_removes_only_stale_stages(tmp_path: Path) -> None:
    old = staging.stage(tmp_path, b"old")
    fresh = staging.stage(tmp_path, b"fresh")
    (tmp_path / "data.json").write_bytes(b"{}")
    past = time.time() - 7200
    os.utime(old.path, (past, past))
    os.utime(tmp_path / "data.json", (past, past))
    assert staging.stale_stages(tmp_path) == [old.path]
    assert staging.sweep(tmp_path) == [old.path]
    assert sorted(os.listdir(tmp_path)) == sorted([fresh.path.name, "data.json"])
    assert staging.sweep(tmp_path / "nope") == []


def test_sweep_removes_a_link_itself_and_leaves_a_folder_named_as_a_stage(tmp_path: Path) -> None:
    """A stage is a regular file: a link with a stage's name goes (never what it points to), a
    folder with one is left whole (sweeping raised IsADirectoryError)."""
    store, outside = tmp_path / "store", tmp_path / "outside"
    store.mkdir()
    outside.mkdir()
    (outside / "keep").write_bytes(b"keep me")
    (store / ".stage-folder").mkdir()
    (store / ".stage-folder" / "inner").write_bytes(b"x")
    os.symlink(outside / "keep", store / ".stage-link")
    past = time.time() - 7200
    for path in (store / ".stage-folder", store / ".stage-link", outside / "keep"):
        os.utime(path, (past, past), follow_symlinks=False)
    assert staging.sweep(store) == [store / ".stage-link"]
    assert os.listdir(store) == [".stage-folder"] and (outside / "keep").read_bytes() == b"keep me"


def test_threads_staging_at_once_share_their_data_syncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real_fsync, real_syncfs = os.fsync, staging._stage._syncfs
    assert real_syncfs is not None  # Linux

    def fsync(fd: int) -> None:
        calls.append("fsync")
        real_fsync(fd)

    def syncfs(fd: int) -> int:
        calls.append("syncfs")
        time.sleep(0.02)  # a slow disk: let the others queue up behind
        return real_syncfs(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(staging._stage, "_syncfs", syncfs)
    barrier = threading.Barrier(8)
    staged: list[staging.Staged] = []
    mutex = threading.Lock()

    def worker(w: int) -> None:
        for i in range(5):
            barrier.wait()
            s = staging.stage(tmp_path, b"%d-%d" % (w, i))
            with mutex:
                staged.append(s)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(staged) == 40
    assert sorted(s.path.read_bytes() for s in staged) == sorted(
        b"%d-%d" % (w, i) for w in range(8) for i in range(5)
    )
    assert "syncfs" in calls
    assert len(calls) < 40, calls


def _held_then_swapped(tmp_path: Path) -> tuple[staging.OpenDir, Path, Path]:
    """A folder held open, then moved away with a link to another folder put in its place."""
    folder, elsewhere = tmp_path / "store", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    held = staging.OpenDir(os.open(folder, os.O_RDONLY | os.O_DIRECTORY))
    moved = tmp_path / "moved"
    os.rename(folder, moved)
    folder.symlink_to(elsewhere, target_is_directory=True)
    return held, moved, elsewhere


def test_a_stage_made_in_a_held_folder_goes_there_whatever_its_path_names_since(tmp_path: Path) -> None:
    held, moved, elsewhere = _held_then_swapped(tmp_path)
    staged = staging.stage(tmp_path / "store", b"held", hint="f.json", at=held)
    staged.publish(tmp_path / "store" / "f.json")
    kept = staging.stage(tmp_path / "store", b"discarded", at=held)
    kept.discard()
    assert os.listdir(elsewhere) == []
    assert os.listdir(moved) == ["f.json"] and (moved / "f.json").read_bytes() == b"held"


def test_publish_many_stages_renames_and_syncs_through_the_folders_held(tmp_path: Path) -> None:
    held, moved, elsewhere = _held_then_swapped(tmp_path)
    finals = [(tmp_path / "store" / f"{i}.json", f"{i}".encode()) for i in range(3)]
    staging.publish_many(finals, dirs={tmp_path / "store": held})
    assert os.listdir(elsewhere) == []
    assert sorted(os.listdir(moved)) == ["0.json", "1.json", "2.json"]


def test_a_held_folder_closes_its_descriptor_with_its_last_reference(tmp_path: Path) -> None:
    held = staging.OpenDir(os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY))
    fd = held.fd
    staged = staging.stage(tmp_path, b"x", at=held)
    del held
    os.fstat(fd)  # the stage still uses it
    staged.publish(tmp_path / "x")
    del staged
    with pytest.raises(OSError):
        os.fstat(fd)


def test_a_stage_takes_no_randomness_of_its_own_and_a_fork_or_a_taken_name_draws_a_new_prefix(
    tmp_path: Path,
) -> None:
    """Stage names are this process's random prefix and a count (no ``getrandom`` per stage): two
    stages in a row share the prefix; a forked child's differ from its parent's; a name someone
    took is stepped over with a new prefix, not refused."""
    import os

    from staging import stage as make_stage

    def prefix(staged: staging.Staged) -> str:
        return Path(staged.where).name.split(".")[1][len("stage-") :][:10]

    first, second = make_stage(tmp_path, b"a", hint="x"), make_stage(tmp_path, b"b", hint="x")
    assert prefix(first) == prefix(second) and first.where != second.where
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.write(write, prefix(make_stage(tmp_path, b"c", hint="x")).encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 100).decode()
    os.close(read)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert child and child != prefix(second)
    # plant the next name this process would make: the stage steps over it
    nxt = Path(second.where).name.split(".")[1][len("stage-") :]
    planted = tmp_path / f".stage-{nxt[:10]}{int(nxt[10:], 16) + 1:x}.x"
    planted.write_bytes(b"planted")
    third = make_stage(tmp_path, b"d", hint="x")
    assert Path(third.where).read_bytes() == b"d" and planted.read_bytes() == b"planted"
    assert prefix(third) != prefix(second)
    for staged in (first, second, third):
        staged.discard()


def test_publish_tells_its_own_folder_however_the_final_path_spells_it(tmp_path: Path) -> None:
    # the folders are compared as strings first, and as ``dirname``s (which drop repeated and
    # trailing slashes) only when those differ: a final path spelled with a doubled slash, or
    # given as a string, is still in the stage's folder, and one folder down is still refused
    for n, final in enumerate([f"{tmp_path}//a.txt", str(tmp_path / "b.txt"), tmp_path / "c.txt"]):
        staged = staging.stage(tmp_path, b"%d" % n, hint="x")
        assert staged.publish(final) == Path(final)
        assert Path(final).read_bytes() == b"%d" % n
    at = staging.OpenDir(os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY))
    staged = staging.stage(tmp_path, b"held", hint="x", at=at)
    staged.publish(f"{tmp_path}//d.txt", sync_dir=True)
    assert (tmp_path / "d.txt").read_bytes() == b"held"
    (tmp_path / "sub").mkdir()
    staged = staging.stage(tmp_path, b"no", hint="x")
    with pytest.raises(ValueError, match="not in the stage's directory"):
        staged.publish(tmp_path / "sub" / "e.txt")
    staged.discard()

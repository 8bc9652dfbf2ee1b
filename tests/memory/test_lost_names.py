"""Names a power loss took: a learn's record is durable when it returns, its file's name later; the
store's open publishes again, from the journal, the file of each finding that a run which did not
end cleanly committed and whose file is missing, and never a retired or DB-held one.

A lost name is made here by removing the file: after a power loss that is exactly what is left (the
record durable, the name gone); the memo of the storage life the check ran under is removed too, as
a reboot makes it stale.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

import memory
from journal import RunState
from memory._filecache import CACHE_DIR
from memory._publisher import PendingNames
from memory._recovery import MEMO, storage_life
from tests.memory.conftest import Clock, Failpoints, learned_files

A = {"text": "the cache is cold at dawn", "tags": ["cache"]}
B = {"text": "the cache warms by noon", "tags": ["cache"]}


def _reboot(db: Path) -> None:
    """What a reboot does to the memo: it no longer names the storage's life."""
    memo = db.parent / CACHE_DIR / MEMO
    if memo.exists():
        memo.write_bytes(b"another boot\n")


def _learn_and_stop(
    db: Path, findings: list[dict[str, object]], how: str
) -> tuple[str, list[memory.Learned]]:
    """Learn ``findings`` in a root run ended ``how`` (interrupted, failed, done); the run's id."""
    with memory.MemoryStore(db, clock=Clock()) as store:
        jr = store.open_journal()
        _, lease = jr.begin("probe", "scope-a", {})
        root = memory.RootRun(jr, lease, "probe", "scope-a")
        learned = [store.learn(f, root) for f in findings]
        if how == "failed":
            jr.finish(lease, RunState.FAILED, {"code": "x", "message": "boom"})
        elif how == "done":
            store.flush()
            jr.finish(lease, RunState.DONE)
        else:
            jr.release(lease)
        return lease.run_id, learned


def test_the_open_publishes_again_the_lost_file_of_an_interrupted_run_byte_identical(db: Path) -> None:
    _, (a, b) = _learn_and_stop(db, [A, B], "interrupted")
    kept = a.path.read_bytes()
    a.path.unlink()
    _reboot(db)
    with memory.MemoryStore(db, recover=False) as reader:  # a reader that recovers nothing misses it
        assert [e.key for e in reader.recall(limit=None)] == [b.id]
    with memory.MemoryStore(db) as store:
        assert a.path.read_bytes() == kept
        assert sorted(e.key for e in store.recall(limit=None)) == sorted([a.id, b.id])
        assert memory.check_store(store) == []


def test_the_open_publishes_again_the_lost_file_of_a_failed_run(db: Path) -> None:
    _, (a,) = _learn_and_stop(db, [A], "failed")
    kept = a.path.read_bytes()
    a.path.unlink()
    with memory.MemoryStore(db):
        assert a.path.read_bytes() == kept


def test_the_open_does_not_walk_a_done_run_and_sync_materializes_its_file(db: Path) -> None:
    # A done run's names were made durable before it was marked done: nothing to look for there.
    _, (a,) = _learn_and_stop(db, [A], "done")
    kept = a.path.read_bytes()
    a.path.unlink()  # not a power loss: a file removed by hand
    with memory.MemoryStore(db) as store:
        assert not a.path.exists()
        assert store.materialize() == 1
        assert a.path.read_bytes() == kept


def test_a_finding_forgotten_in_another_run_is_not_published_again(db: Path) -> None:
    _, (a,) = _learn_and_stop(db, [A], "interrupted")
    with memory.MemoryStore(db, clock=Clock(1_800_000_000_000)) as store, store.session(scope="scope-a") as s:
        s.forget(a.id, reason="wrong")
    assert not a.path.exists()
    retired = db.parent / "flows-memory"
    (retired_file,) = retired.rglob(f"retired/{a.id}.json")
    retired_file.unlink()  # a crash took the retired file as well
    _reboot(db)
    with memory.MemoryStore(db) as store:
        assert not a.path.exists()
        assert retired_file.exists()  # published again from the forget's record
        assert store.recall(limit=None) == []
        assert store.get(a.id) is None


def test_a_finding_superseded_in_the_same_run_is_not_published_again(db: Path) -> None:
    with memory.MemoryStore(db, clock=Clock()) as store:
        jr = store.open_journal()
        _, lease = jr.begin("probe", "scope-a", {})
        root = memory.RootRun(jr, lease, "probe", "scope-a")
        a = store.learn(A, root)
        b = store.learn(B, root, supersedes=a.id)
        jr.release(lease)
    assert not a.path.exists()
    b.path.unlink()
    with memory.MemoryStore(db) as store:
        assert not a.path.exists()
        assert [e.key for e in store.recall(limit=None)] == [b.id]


def test_a_finding_the_history_db_holds_gets_no_file_again(db: Path) -> None:
    _, (a,) = _learn_and_stop(db, [A], "interrupted")
    with memory.MemoryStore(db) as store:
        store.sync()
    assert learned_files(db) == []  # the DB holds it; its disk copy is dropped
    _reboot(db)
    with memory.MemoryStore(db) as store:
        assert learned_files(db) == []
        assert [e.key for e in store.recall(limit=None)] == [a.id]


def test_the_walk_runs_once_per_storage_life_and_again_after_a_reboot(db: Path) -> None:
    _, (a,) = _learn_and_stop(db, [A], "interrupted")
    with memory.MemoryStore(db):
        pass
    memo = db.parent / CACHE_DIR / MEMO
    life = storage_life(db.parent)
    if life is None:  # no boot id here: every open walks
        return
    assert memo.read_bytes().startswith(life.encode())
    a.path.unlink()  # not a power loss: this life's memo says the walk was made
    with memory.MemoryStore(db):
        assert not a.path.exists()
    _reboot(db)
    with memory.MemoryStore(db):
        assert a.path.exists()


def test_a_damaged_or_planted_memo_only_makes_the_open_walk(db: Path) -> None:
    _, (a,) = _learn_and_stop(db, [A], "interrupted")
    with memory.MemoryStore(db):
        pass
    memo = db.parent / CACHE_DIR / MEMO
    a.path.unlink()
    memo.unlink()
    os.mkfifo(memo)  # a FIFO where the memo goes: never blocks the open, never trusted
    with memory.MemoryStore(db):
        assert a.path.exists()
    a.path.unlink()
    memo.unlink()
    memo.write_bytes(b"\0" * 10_000)
    with memory.MemoryStore(db):
        assert a.path.exists()


def test_a_reader_that_must_write_nothing_recovers_nothing(db: Path) -> None:
    _, (a,) = _learn_and_stop(db, [A], "interrupted")
    a.path.unlink()
    memo = db.parent / CACHE_DIR / MEMO
    assert not memo.exists()
    with memory.MemoryStore(db, file_index=False) as reader:
        assert reader.recall(limit=None) == []
    assert not a.path.exists() and not (db.parent / CACHE_DIR).exists()


def test_a_session_flush_and_close_leave_no_name_waiting(db: Path) -> None:
    with memory.MemoryStore(db) as store:
        with store.session(scope="scope-a") as s:
            s.learn(A)
            s.learn(B)
            s.flush()
            assert store._publisher.pending.snapshot()[1] == []
            s.learn({"text": "a third"})
        assert store._publisher.pending.snapshot()[1] == []
        assert store.open_journal().run(s.run_id).state is RunState.DONE


def test_a_session_whose_names_cannot_be_made_durable_ends_failed_not_done(
    db: Path, failpoints: Failpoints
) -> None:
    with memory.MemoryStore(db) as store:
        s = store.session(scope="scope-a")
        a = s.learn(A)
        failpoints.set("memory.before_flush_names=EIO")
        with pytest.raises(memory.Unwritable) as raised:
            s.close()
        assert raised.value.errno == errno.EIO
        failpoints.set("")
        info = store.open_journal().run(s.run_id)
        assert info.state is RunState.FAILED  # never done with a name that may not survive
        assert info.error is not None and info.error["code"] == "memory_unwritable"
        assert a.path.exists()  # readable; after a power loss the next open restores it


def test_a_sync_of_one_file_system_settles_only_the_names_waiting_on_it(tmp_path: Path) -> None:
    pending = PendingNames()
    here, there = tmp_path / "here", tmp_path / "there"
    pending.renamed(here)
    pending.renamed(there)
    mark = pending.mark()
    pending.renamed(here)  # after the sync began: not covered by it
    pending.settled(mark, lambda d: d == here)
    assert pending.snapshot() == (3, [there, here])
    pending.settled(pending.mark())
    assert pending.snapshot() == (3, [])


def test_the_open_publishes_again_a_lost_file_with_the_postgresql_journal(
    db: Path, postgres_dsn: str
) -> None:
    # No shared file-system sync there: each name waits for a group, a flush or this check.
    with memory.MemoryStore(db, journal=postgres_dsn, clock=Clock()) as store:
        jr = store.open_journal()
        _, lease = jr.begin("probe", "scope-a", {})
        a = store.learn(A, memory.RootRun(jr, lease, "probe", "scope-a"))
        jr.release(lease)
        assert jr.run(lease.run_id).state is RunState.INTERRUPTED
    kept = a.path.read_bytes()
    a.path.unlink()
    with memory.MemoryStore(db, journal=postgres_dsn) as store:
        assert a.path.read_bytes() == kept
        assert [e.key for e in store.recall(limit=None)] == [a.id]


def test_the_storage_life_is_the_boot_and_the_mount_the_store_is_reached_through(tmp_path: Path) -> None:
    life = storage_life(tmp_path)
    boot = Path("/proc/sys/kernel/random/boot_id")
    if not boot.exists():  # no boot id here: every open walks
        assert life is None
        return
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        info = Path(f"/proc/self/fdinfo/{fd}").read_text()
    finally:
        os.close(fd)
    mounts = [line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("mnt_id:")]
    expected = boot.read_text().strip() + (f" mount {mounts[0]}" if mounts else "")
    assert life == expected
    assert storage_life(tmp_path / "missing") is None  # nothing to open: no life, every open walks

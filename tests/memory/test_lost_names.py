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
import time
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


@pytest.mark.parametrize(
    "torn",
    [b"", b"\0" * 64, b'{"id": "', b"garbage that is not json\n"],
    ids=["empty", "zeros", "cut", "garbage"],
)
def test_the_open_writes_again_a_file_a_power_loss_tore_byte_identical(db: Path, torn: bytes) -> None:
    # The file's bytes were written without fsync (its record holds them all): a power loss can
    # keep its name and tear its bytes. A reader that recovers nothing refuses it, coded; the next
    # recovering open writes it again from the record.
    _, (a, b) = _learn_and_stop(db, [A, B], "interrupted")
    kept = b.path.read_bytes()
    b.path.write_bytes(torn)
    _reboot(db)
    with memory.MemoryStore(db, recover=False) as reader, pytest.raises(memory.Unreachable) as refused:
        reader.recall(limit=None)
    assert refused.value.path == b.path
    with memory.MemoryStore(db) as store:
        assert b.path.read_bytes() == kept
        assert sorted(e.key for e in store.recall(limit=None)) == sorted([a.id, b.id])
        assert memory.check_store(store) == []


def test_a_torn_file_whose_finding_the_db_holds_is_written_again_and_the_next_sync_drops_it(db: Path) -> None:
    # A sync ingested the file and removed it, and a power loss brought the name back, torn.
    _, (a,) = _learn_and_stop(db, [A], "interrupted")
    kept = a.path.read_bytes()
    with memory.MemoryStore(db) as store:
        store.sync()
    assert learned_files(db) == []
    a.path.write_bytes(b"\0" * 10)
    _reboot(db)
    with memory.MemoryStore(db) as store:
        assert a.path.read_bytes() == kept
        assert [e.key for e in store.recall(limit=None)] == [a.id]
        store.sync()
        assert learned_files(db) == []
        assert [e.key for e in store.recall(limit=None)] == [a.id]


def test_the_open_leaves_a_link_or_a_fifo_in_a_files_place_for_flows_check(db: Path, tmp_path: Path) -> None:
    _, (a, b) = _learn_and_stop(db, [A, B], "interrupted")
    outside = tmp_path / "outside.json"
    outside.write_bytes(b"not the store's")
    a.path.unlink()
    a.path.symlink_to(outside)
    b.path.unlink()
    os.mkfifo(b.path)
    _reboot(db)
    with memory.MemoryStore(db) as store:
        assert a.path.is_symlink() and outside.read_bytes() == b"not the store's"  # never followed
        assert b.path.is_fifo()
        kinds = sorted(p.kind for p in memory.check_store(store))
    assert kinds and all(k != "record_unpublished" for k in kinds), kinds


def test_the_open_keeps_a_newer_commit_of_the_finding_from_another_run(db: Path) -> None:
    _, (old,) = _learn_and_stop(db, [A], "interrupted")
    with memory.MemoryStore(db, clock=Clock(1_900_000_000_000)) as store:
        jr = store.open_journal()
        _, lease = jr.begin("probe", "scope-a", {})
        newer = store.learn(A, memory.RootRun(jr, lease, "probe", "scope-a"))
        jr.release(lease)
    assert newer.path == old.path and newer.citation != old.citation
    kept = newer.path.read_bytes()
    _reboot(db)
    with memory.MemoryStore(db):
        assert newer.path.read_bytes() == kept


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


@pytest.mark.parametrize("synced", [False, True], ids=["file", "db-row"])
def test_the_lost_retired_file_of_an_update_is_published_again_by_the_open(db: Path, synced: bool) -> None:
    # an update's retired file is named lazily, with the learned files: a power loss can take its
    # name and undo the removal of the old version's file, the record staying durable; the next
    # open publishes it again, so the old version is never read again (from its file or its row)
    with memory.MemoryStore(db, clock=Clock()) as store:
        jr = store.open_journal()
        _, lease = jr.begin("probe", "scope-a", {})
        root = memory.RootRun(jr, lease, "probe", "scope-a")
        a = store.learn(A, root)
        kept = a.path.read_bytes()
        if synced:
            store.sync()
        b = store.update(a.memory_id, B, root)
        retired = db.parent / "flows-memory" / a.path.parent.parent.parent.name / ".trajectories" / "retired"
        (gone,) = list(retired.iterdir())
        jr.release(lease)
    gone.unlink()  # the name lost
    if not synced:
        a.path.write_bytes(kept)  # the old version's removal undone
    _reboot(db)
    with memory.MemoryStore(db) as store:
        assert gone.exists() and not a.path.exists()
        assert [e.key for e in store.recall(limit=None)] == [b.key]
        assert store.current(a.memory_id).key == b.key


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


@pytest.mark.slow
def test_a_walk_over_many_runs_that_each_lost_a_name_scans_the_journal_once(db: Path) -> None:
    """The walk scans the whole journal for retirements before it publishes; once per walk, not
    once per run that lost a name: 60 such runs of 15 findings took 7.6 s to open here with a scan
    per run, against 0.3 s with nothing lost and 0.9 s now."""
    lost: list[Path] = []
    with memory.MemoryStore(db, clock=Clock()) as store:
        jr = store.open_journal()
        for r in range(60):
            _, lease = jr.begin("probe", "scope-a", {})
            root = memory.RootRun(jr, lease, "probe", "scope-a")
            found = [store.learn({"text": f"finding {r}.{i}", "tags": ["t"]}, root) for i in range(15)]
            lost.append(found[0].path)
            jr.release(lease)  # interrupted: walked by the next open after a reboot
    _reboot(db)
    started = time.monotonic()
    with memory.MemoryStore(db):
        pass
    baseline = time.monotonic() - started
    for path in lost:
        path.unlink()
    _reboot(db)
    started = time.monotonic()
    with memory.MemoryStore(db):
        elapsed = time.monotonic() - started
    assert all(path.exists() for path in lost)
    assert elapsed < max(4.0, 6 * baseline), (elapsed, baseline)


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


def test_pending_names_keep_their_order_and_which_files_are_loose(tmp_path: Path) -> None:
    pending = PendingNames()
    here, there = tmp_path / "here", tmp_path / "there"
    pending.renamed(here)
    pending.renamed(there, loose=True)
    upto = pending.snapshot()[0]
    pending.renamed(here, loose=True)  # after the flush began: not covered by it
    assert pending.snapshot() == (3, [here, there], [there, here])
    pending.settled(upto)
    assert pending.snapshot() == (3, [here], [here])
    pending.settled(3)
    assert pending.snapshot() == (3, [], [])


def test_one_group_flush_at_a_time_the_names_added_meanwhile_wait_for_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import memory._publisher

    monkeypatch.setattr(memory._publisher, "NAMES_GROUP", 2)
    pending = PendingNames()
    here = tmp_path / "here"
    assert pending.renamed(here) is False
    assert pending.renamed(here) is True  # the group is due: this caller flushes it
    assert pending.renamed(here) is False  # due, but a flush runs: not a second one at once
    pending.group_flushed()
    assert pending.renamed(here) is True  # still due after the flush ended: the next caller flushes


def test_a_group_flush_that_failed_lets_the_next_learn_flush_again(
    db: Path, failpoints: Failpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    import memory._publisher

    monkeypatch.setattr(memory._publisher, "NAMES_GROUP", 2)
    with memory.MemoryStore(db) as store, store.session(scope="scope-a") as s:
        s.learn(A)
        failpoints.set("memory.before_flush_names=EIO")
        with pytest.raises(memory.Unwritable):
            s.learn(B)  # the group's flush fails: the learn says so (its record is durable)
        failpoints.set("")
        s.learn({"text": "a third"})  # the names still wait: this learn's group flush takes them
        assert store._publisher.pending.snapshot()[1] == []


def test_threads_past_the_group_size_flush_once_per_group(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    import memory._publisher

    monkeypatch.setattr(memory._publisher, "NAMES_GROUP", 4)
    monkeypatch.setattr(memory._publisher, "NAMES_WAIT_S", 3600.0)
    with memory.MemoryStore(db) as store, store.session(scope="scope-a") as s:
        s.learn(A)  # the folder exists: every later stage is loose
        pub = store._publisher
        real = pub.flush_names
        gate = threading.Event()
        calls: list[int] = []

        def slow_flush(run_id: str | None = None) -> None:
            calls.append(1)
            gate.wait(5)  # every other thread renames while this flush runs
            real(run_id)

        monkeypatch.setattr(pub, "flush_names", slow_flush)
        threads = [threading.Thread(target=s.learn, args=({"text": f"finding {i}"},)) for i in range(12)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        while sum(t.is_alive() for t in threads) > 1 and time.monotonic() < deadline:
            time.sleep(0.01)  # every learn but the one flushing returns while its flush runs
        flushing = len(calls)
        gate.set()
        for t in threads:
            t.join()
        assert flushing == 1, calls  # not one flush per learn past the group size
        monkeypatch.undo()
        s.flush()
        assert pub.pending.snapshot()[1] == []


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

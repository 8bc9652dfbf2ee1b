"""Group commit: appenders share fsyncs, and still return only once their record is durable."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

import journal
import staging
from journal import LineLog, Record, RecordCodec
from tests._helpers.failpoints import armed


def test_threads_appending_at_once_share_fsyncs_and_every_record_is_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight threads append at once: the first sync of the stream is held until every thread's first
    line is written (each then waits for a sync), so those eight lines cost two fsyncs (the one held,
    which covers what was written before it began, and one after it for the rest; one alone when the
    machine let every line be written before the first sync began) rather than one each; and every
    append, first or later, returns only once the watermark covers its line."""
    jr = journal.FileJournal(tmp_path / "j")
    info, lease = jr.begin("f", "s", {})
    jr.append(lease, "s", {"w": -1}, key="made")  # the stream is made (and its creation synced)
    path = jr.stream_path(info.run_id, "s")
    syncs: list[int] = []  # the stream's fsyncs from here on
    real = os.fsync

    def held_first(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}") == str(path):
            syncs.append(fd)
            for _ in range(6000):  # the first: until every thread's first line is written
                if len(syncs) > 1 or path.read_bytes().count(b"\n") >= 9:
                    break
                time.sleep(0.01)
        real(fd)

    monkeypatch.setattr(os, "fsync", held_first)
    returned: list[Record] = []
    mutex = threading.Lock()
    after_first_round: list[int] = []
    # once every thread's first append has returned, before any goes on: the fsyncs they took
    first_round = threading.Barrier(8, action=lambda: after_first_round.append(len(syncs)))

    def writer(w: int) -> None:
        for i in range(10):
            rec = jr.append(lease, "s", {"w": w, "i": i}, key=f"{w}-{i}")
            data = path.read_bytes()
            line_end = data.index(b"\n", data.index(b'"key":"%b"' % f"{w}-{i}".encode())) + 1
            # returned => durable: the watermark (written only after an fsync returned) covers it
            assert (LineLog(path, RecordCodec(info.run_id, "s")).watermark() or 0) >= line_end
            with mutex:
                returned.append(rec)
            if i == 0:
                first_round.wait()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(returned) == 80
    assert [r.seq for r in jr.read(info.run_id, "s")] == list(range(1, 82))
    # two, or one when every first line was written before the first sync began (a busy machine)
    assert after_first_round in ([1], [2]), f"{after_first_round} fsyncs for the first 8 appends: none shared"
    log = LineLog(path, RecordCodec(info.run_id, "s"))
    assert log.watermark() == path.stat().st_size


def _log_with(tmp_path: Path, n: int) -> tuple[LineLog[Record], Path]:
    path = tmp_path / "s.jsonl"
    log = LineLog(path, RecordCodec("r", "s"), sequence=lambda r: r.seq)
    with log.locked():
        log.recover()
        for i in range(1, n + 1):
            log.append(Record("r", "s", i, f"id{i}", f"k{i}", i, {"t": "x" * i}))
    return log, path


def test_damage_past_the_watermark_spanning_several_lines_is_a_torn_tail(tmp_path: Path) -> None:
    log, path = _log_with(tmp_path, 3)
    durable = path.read_bytes()
    codec = RecordCodec("r", "s")
    unsynced = [
        codec.encode(Record("r", "s", i, f"id{i}", f"k{i}", i, {"t": "y"})) + b"\n" for i in (4, 5, 6)
    ]
    # a shared fsync never happened: the first unsynced line is a hole, the later ones landed
    path.write_bytes(durable + b"\x00" * len(unsynced[0]) + unsynced[1] + unsynced[2])
    with log.locked():
        assert [r.seq for r in log.recover()] == [1, 2, 3]
    assert path.read_bytes() == durable


def test_damage_below_the_watermark_fails_closed_even_without_later_lines(tmp_path: Path) -> None:
    _, path = _log_with(tmp_path, 3)
    data = path.read_bytes()
    last_start = data.rstrip(b"\n").rfind(b"\n") + 1
    path.write_bytes(data[:last_start] + b"\x00" * (len(data) - last_start - 1) + b"\n")
    fresh = LineLog(path, RecordCodec("r", "s"), sequence=lambda r: r.seq)
    with pytest.raises(journal.JournalCorrupt) as err, fresh.locked():
        fresh.recover()
    assert err.value.line == 3


def test_a_torn_watermark_is_ignored_not_trusted(tmp_path: Path) -> None:
    log, path = _log_with(tmp_path, 2)
    mark = Path(f"{path}.lock")
    mark.write_bytes(b"\xff" * 12)  # a torn write of the watermark: its checksum fails
    assert log.watermark() is None
    with open(path, "ab") as fh:
        fh.write(b"\x00" * 40)
    with log.locked():
        assert [r.seq for r in log.recover()] == [1, 2]  # the single-tail rule still cuts it


def test_a_failed_shared_fsync_takes_its_own_line_back_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jr = journal.FileJournal(tmp_path / "j")
    info, lease = jr.begin("f", "s", {})
    jr.append(lease, "s", {"n": 1})
    with armed(monkeypatch, "linelog.before_fsync=EIO:once"), pytest.raises(journal.JournalUnwritable):
        jr.append(lease, "s", {"n": 2}, key="two")
    assert [r.payload["n"] for r in jr.read(info.run_id, "s")] == [1]
    again = jr.append(lease, "s", {"n": 3}, key="two")
    assert (again.seq, again.payload["n"]) == (2, 3)


def test_a_failed_write_leaves_no_key_behind_for_a_record_never_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jr = journal.FileJournal(tmp_path / "j")
    info, lease = jr.begin("f", "s", {})
    no_space = armed(monkeypatch, "linelog.before_append=ENOSPC:once")
    with no_space, pytest.raises(journal.JournalUnwritable):
        jr.append(lease, "s", {"n": 1}, key="k")
    assert list(jr.read(info.run_id, "s")) == []
    assert jr.find(info.run_id, "s", "k") is None
    again = jr.append(lease, "s", {"n": 2}, key="k")  # written now, not answered from a stale index
    assert [r.payload["n"] for r in jr.read(info.run_id, "s")] == [2]
    assert again.payload["n"] == 2


def test_threads_queued_behind_a_writer_are_written_in_batches_with_one_lock_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jr = journal.FileJournal(tmp_path / "j")
    info, lease = jr.begin("f", "s", {})
    writes: list[int] = []
    real_write = LineLog.write_records

    def counted(self: LineLog[Record], records: list[Record]) -> list[int]:
        writes.append(len(records))
        return real_write(self, records)

    monkeypatch.setattr(LineLog, "write_records", counted)
    with armed(monkeypatch, "linelog.before_append=sleep5"):  # a slow writer: others queue
        threads = [
            threading.Thread(target=lambda w=w: [jr.append(lease, "s", {"w": w, "i": i}) for i in range(5)])
            for w in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sum(writes) == 40
    assert max(writes) > 1, writes  # some writes carried several threads' records
    assert len(writes) < 40
    assert [r.seq for r in jr.read(info.run_id, "s")] == list(range(1, 41))


@pytest.mark.skipif(not staging.HAVE_SYNCFS, reason="syncfs is Linux's")
def test_a_filesystem_sync_raises_its_own_mark_and_a_plain_fsync_does_not(tmp_path: Path) -> None:
    jr = journal.FileJournal(tmp_path / "j")
    info, lease = jr.begin("f", "s", {})
    path = jr.stream_path(info.run_id, "s")
    jr.append(lease, "s", {"n": 1})
    log = LineLog(path, RecordCodec(info.run_id, "s"))
    assert log.watermark() == path.stat().st_size
    assert log.filesystem_watermark() is None  # a plain fsync covers the log only
    assert jr.shares_filesystem(str(tmp_path))
    jr.append(lease, "s", {"n": 2}, sync_filesystem=True)
    assert log.filesystem_watermark() == path.stat().st_size == log.watermark()
    jr.append(lease, "s", {"n": 3})
    fs_mark = log.filesystem_watermark()
    assert fs_mark is not None and fs_mark < path.stat().st_size == log.watermark()


def test_a_syncer_queued_behind_another_process_s_sync_finds_its_mark_and_does_not_sync_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fcntl

    path = tmp_path / "s.jsonl"
    writer = LineLog(path, RecordCodec("r", "s"), sequence=lambda r: r.seq)
    with writer.locked():
        writer.recover()
        end = writer.write([Record("r", "s", 1, "id1", "k1", 1, {"t": "x"})])
    other = LineLog(path, RecordCodec("r", "s"), sequence=lambda r: r.seq)  # another process's view
    syncs: list[int] = []
    real_fsync = os.fsync

    def counted(fd: int) -> None:
        syncs.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counted)
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # "another process" is mid-sync
    waiter = threading.Thread(target=writer.sync_to, args=(end,))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()  # queued behind the sync in progress, not syncing beside it
    real_fsync(fd)
    other._set_watermark(end)  # that sync covered the waiter's line, and left its mark
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
    waiter.join()  # (it ends once the mark is found: no bound on how long that takes here)
    assert syncs == []  # the waiter found the mark and did not sync again
    assert writer.watermark() == end == path.stat().st_size


def test_unwrite_takes_back_unacknowledged_lines_only_and_their_sync_then_fails(tmp_path: Path) -> None:
    log, path = _log_with(tmp_path, 2)
    acked = path.read_bytes()
    with log.locked():
        log.recover()
        assert not log.unwrite(1, len(acked))  # acknowledged: never cut
        end = log.write([Record("r", "s", 3, "id3", "k3", 3, {"t": "y"})])
        gen = log.generation
        assert log.unwrite(1, end)
    assert path.read_bytes() == acked
    with pytest.raises(journal.JournalUnwritable):
        log.sync_to(end, generation=gen)


def _eight_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_second: bool
) -> tuple[list[Record | journal.JournalError], list[tuple[int, str]], list[int], Path, str]:
    """Eight threads append one record each at once; the stream's first sync (after the one that
    made it) is held until all eight lines are written. Returns each thread's result, the stream's
    fsyncs and ``flock``s (thread, what), the thread that made the first sync, the stream and its
    run. With ``fail_second`` the second sync fails (EIO)."""
    import fcntl

    jr = journal.FileJournal(tmp_path / "j")
    info, lease = jr.begin("f", "s", {})
    jr.append(lease, "s", {"w": -1}, key="made")
    path = jr.stream_path(info.run_id, "s")
    calls: list[tuple[int, str]] = []
    first: list[int] = []
    real_fsync, real_flock = os.fsync, fcntl.flock

    def ours(fd: int) -> bool:
        return os.readlink(f"/proc/self/fd/{fd}") == str(path)

    def fsync(fd: int) -> None:
        if ours(fd):
            calls.append((threading.get_ident(), "fsync"))
            if not first:
                first.append(threading.get_ident())
                for _ in range(6000):  # until every thread's line is written
                    if path.read_bytes().count(b"\n") >= 9:
                        break
                    time.sleep(0.01)
            elif fail_second and sum(what == "fsync" for _, what in calls) == 2:
                raise OSError(5, "injected write-back failure")
        real_fsync(fd)

    def flock(fd: int, op: int) -> None:
        if op == fcntl.LOCK_EX and ours(fd):
            calls.append((threading.get_ident(), "flock"))
        real_flock(fd, op)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(fcntl, "flock", flock)
    results: list[Record | journal.JournalError] = [journal.JournalError("not run")] * 8

    def writer(w: int) -> None:
        try:
            results[w] = jr.append(lease, "s", {"w": w}, key=f"w{w}")
        except journal.JournalError as exc:
            results[w] = exc

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    monkeypatch.undo()
    return results, calls, first, path, info.run_id


def test_the_thread_that_syncs_syncs_again_for_the_threads_waiting_behind_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight appends at once cost two fsyncs (the first, held, covers one line; the next the other
    seven), and both are made by the thread that made the first: the seven waiting behind it take
    no turn as syncer (no fsync, no ``flock`` of the log) and each returns once a mark covers it."""
    results, calls, first, path, run_id = _eight_at_once(tmp_path, monkeypatch, fail_second=False)
    assert all(isinstance(r, Record) for r in results), results
    assert [what for _, what in calls].count("fsync") == 2, calls
    assert {who for who, _ in calls} == set(first), "a waiting thread took the syncer's turn"
    log = LineLog(path, RecordCodec(run_id, "s"))
    assert log.watermark() == path.stat().st_size


def test_a_failed_sync_the_leader_makes_for_its_waiters_fails_every_one_of_them_and_not_the_leader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader's second sync, for the threads waiting behind it, fails: each of them gets the
    journal's ``journal_unwritable`` (none is acknowledged, and none of their records stays in the
    stream); the appends its first sync acknowledged (its own, and any written with it) stand."""
    results, calls, first, path, run_id = _eight_at_once(tmp_path, monkeypatch, fail_second=True)
    fsyncs = [who for who, what in calls if what == "fsync"]
    assert fsyncs[:2] == first * 2, "the failed sync was not the leader's round for its waiters"
    acked = [r for r in results if isinstance(r, Record)]
    failed = [r for r in results if not isinstance(r, Record)]
    assert acked and failed and len(acked) + len(failed) == 8, results
    assert all(isinstance(e, journal.JournalUnwritable) and e.code == "journal_unwritable" for e in failed)
    jr = journal.FileJournal(path.parents[3])
    assert [r.key for r in jr.read(run_id, "s")] == ["made"] + [r.key for r in acked]

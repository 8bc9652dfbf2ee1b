"""The sync leader of a line log (``LineLog.sync_to``) against what can go wrong around it.

Threads of one log share syncs through a leader; the others sleep on locks of their own. The
promises tried here: a round that fails fails every caller whose line it was to cover with
``journal_unwritable`` and none that an earlier sync acknowledged; a hundred callers all come back,
each with its record or the code; a caller interrupted while it waits leaves no lead behind; a
process SIGKILLed at any point of a sync loses no acknowledged line; and a child forked while a
thread of its parent leads a sync, of a log used bare (the agent's ledger does) as of a journal's
stream, appends and syncs without waiting for ever on a lock no thread of its own holds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import journal
from journal import JournalUnwritable, LineLog, Record, RecordCodec
from tests._helpers.failpoints import armed, child_env

THREADS = 100


def _rec(seq: int) -> Record:
    return Record("r", "s", seq, f"id{seq}", f"k{seq}", seq, {"n": seq})


def _fork_appending(log: LineLog[Record], real_fsync: Callable[[int], None]) -> int:
    """Fork; the child (where no other thread of the parent runs) appends record 3 to ``log``,
    syncs it with the real ``fsync`` and exits 0 (1, its traceback printed, on any failure). The
    parent gets the child's pid."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.fsync = real_fsync  # type: ignore[assignment]
            with log.locked():
                log.recover()
                mine = log.write([_rec(3)])
            log.sync_to(mine)
            code = 0
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def _exits_cleanly(pid: int, hung: str) -> None:
    """The child ``pid`` ends, with 0, within a minute (a bound for a hung child, not a measure of
    speed); else it is killed and the test fails saying ``hung``."""
    give_up = time.monotonic() + 60
    while (status := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < give_up:
        time.sleep(0.01)
    if status[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert status[0] == pid, hung
    assert os.waitstatus_to_exitcode(status[1]) == 0


def _many(jr: journal.FileJournal, lease: journal.Lease, count: int) -> list[Record | Exception]:
    """``count`` threads append one keyed record each to stream ``s`` at once (released together)."""
    results: list[Record | Exception] = [RuntimeError("not run")] * count
    go = threading.Barrier(count)

    def writer(i: int) -> None:
        go.wait()
        try:
            results[i] = jr.append(lease, "s", {"i": i}, key=f"w{i}")
        except Exception as exc:  # each caller's outcome is what is judged
            results[i] = exc

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a caller never came back from its append"
    return results


def _recovered_keys(root: Path, run_id: str, lease: journal.Lease) -> list[str]:
    """The stream's keys as a fresh journal finds them after a locked open (one more append)."""
    other = journal.FileJournal(root)
    try:
        other.append(lease, "s", {"i": -1}, key="after")
        return [r.key for r in other.read(run_id, "s") if r.key is not None]
    finally:
        other.close()


@pytest.mark.parametrize("nth", [1, 2])
def test_a_hundred_callers_one_failed_sync_each_either_stands_or_fails_with_the_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nth: int
) -> None:
    """A hundred threads append at once and the ``nth`` sync of the stream fails (EIO): every call
    comes back; each that failed says ``journal_unwritable``; after a locked open the stream holds
    exactly the records whose calls returned (none lost, none a failed caller's), in sequence. (The
    first sync always covers a caller; the second is made only when not every line shared the first.)"""
    jr = journal.FileJournal(tmp_path)
    info, lease = jr.begin("f", "s", {})
    jr.append(lease, "s", {"i": -2}, key="made")
    with armed(monkeypatch, f"linelog.before_fsync=EIO:nth{nth}"):
        results = _many(jr, lease, THREADS)
    failed = [r for r in results if not isinstance(r, Record)]
    acked = {r.key or "" for r in results if isinstance(r, Record)}
    assert failed or nth > 1, "the injected failure failed no caller"
    assert all(isinstance(e, JournalUnwritable) and e.code == "journal_unwritable" for e in failed), failed
    keys = _recovered_keys(tmp_path, info.run_id, lease)
    assert sorted(keys) == sorted({"made", "after", *acked})
    assert [r.seq for r in journal.FileJournal(tmp_path).read(info.run_id, "s")] == list(
        range(1, len(keys) + 1)
    )
    jr.close()


def test_a_hundred_callers_without_a_fault_are_all_acknowledged_and_read_back(tmp_path: Path) -> None:
    jr = journal.FileJournal(tmp_path)
    info, lease = jr.begin("f", "s", {})
    results = _many(jr, lease, THREADS)
    assert all(isinstance(r, Record) for r in results), [r for r in results if not isinstance(r, Record)]
    read = journal.FileJournal(tmp_path).read(info.run_id, "s")
    assert sorted(r.key or "" for r in read) == sorted(f"w{i}" for i in range(THREADS))
    jr.close()


_KILLED = """
import sys, threading
import journal
jr = journal.FileJournal(sys.argv[1])
lease = journal.Lease(sys.argv[2], 1)
out = threading.Lock()
go = threading.Barrier(40)
def writer(i):
    go.wait()
    for n in range(5):
        jr.append(lease, "s", {"i": i}, key=f"w{i}-{n}")
        with out:
            sys.stdout.write(f"w{i}-{n}\\n")
            sys.stdout.flush()
threads = [threading.Thread(target=writer, args=(i,)) for i in range(40)]
for t in threads:
    t.start()
for t in threads:
    t.join()
"""


@pytest.mark.parametrize(
    "point",
    ["linelog.before_fsync=kill:nth4", "linelog.before_mark=kill:nth3", "linelog.after_append=kill:nth1"],
)
def test_forty_callers_sigkilled_at_a_point_of_a_shared_sync_lose_no_acknowledged_line(
    tmp_path: Path, point: str
) -> None:
    """A process whose forty threads append five records each at once is SIGKILLed inside a sync
    (before the fsync, before the mark, after it): every append it reported returned is in the
    stream a fresh process opens, in sequence, and the stream takes appends again. (Each thread's
    appends follow one another, so the stream is fsync'd and marked five times at least, and a
    leader's own sync, after which the last point is, comes once at least.)"""
    jr = journal.FileJournal(tmp_path)
    info, lease = jr.begin("f", "s", {})
    jr.append(lease, "s", {"i": -2}, key="made")
    jr.close()  # the child appends under the same lease (the holder's descriptors are gone)
    done = subprocess.run(
        [sys.executable, "-c", _KILLED, str(tmp_path), info.run_id],
        env=child_env(point),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    acked = set(done.stdout.split())
    keys = _recovered_keys(tmp_path, info.run_id, lease)
    assert acked <= set(keys), sorted(acked - set(keys))
    assert keys[0] == "made" and keys[-1] == "after" and len(keys) == len(set(keys))


def _held_fsync(path: Path) -> tuple[threading.Event, threading.Event, Callable[[int], None]]:
    """An ``os.fsync`` that holds the first sync of ``path`` until released: (entered, release, it)."""
    real = os.fsync
    entered, release = threading.Event(), threading.Event()

    def held(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}") == str(path) and not entered.is_set():
            entered.set()
            release.wait(60)
        real(fd)

    return entered, release, held


@pytest.fixture
def real_fsync() -> Iterator[Callable[[int], None]]:
    real = os.fsync
    yield real
    os.fsync = real


def test_a_caller_interrupted_while_it_waits_for_the_leader_leaves_no_lead_behind(
    tmp_path: Path, real_fsync: Callable[[int], None]
) -> None:
    """The main thread waits behind a leader (another thread held inside its fsync) and is
    interrupted there (SIGINT: ``KeyboardInterrupt``): once the leader is done, the next append of
    the main thread is acknowledged (no lead or waiter was left behind), and every record whose call
    returned is read back."""
    jr = journal.FileJournal(tmp_path)
    info, lease = jr.begin("f", "s", {})
    jr.append(lease, "s", {"who": "first"})
    path = jr.stream_path(info.run_id, "s")
    entered, release, held = _held_fsync(path)
    os.fsync = held  # type: ignore[assignment]
    outcome: list[object] = []
    leader = threading.Thread(target=lambda: outcome.append(jr.append(lease, "s", {"who": "leader"})))
    leader.start()
    assert entered.wait(60)

    def interrupt() -> None:  # once the main thread's line is written (it then waits for a sync)
        give_up = time.monotonic() + 60
        while path.read_bytes().count(b"\n") < 3 and time.monotonic() < give_up:
            time.sleep(0.005)
        time.sleep(0.05)  # into its wait (an interrupt before it is as good: the lead is not had)
        os.kill(os.getpid(), signal.SIGINT)

    kicker = threading.Thread(target=interrupt)
    kicker.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            jr.append(lease, "s", {"who": "interrupted"})
    finally:
        release.set()
        kicker.join(60)
        leader.join(60)
        os.fsync = real_fsync  # type: ignore[assignment]
    assert outcome and isinstance(outcome[0], Record)
    after: list[Record] = []
    again = threading.Thread(
        target=lambda: after.append(jr.append(lease, "s", {"who": "again"})), daemon=True
    )
    again.start()
    again.join(60)
    assert after, "an append after the interrupted wait never returned: a lead was left with nobody"
    whos = [r.payload["who"] for r in journal.FileJournal(tmp_path).read(info.run_id, "s")]
    assert {"first", "leader", "again"} <= set(whos)
    jr.close()


def test_a_child_forked_while_a_thread_leads_a_bare_logs_sync_appends_and_syncs(
    tmp_path: Path, real_fsync: Callable[[int], None]
) -> None:
    """A log used bare (no journal around it, as the agent's ledger uses one), kept open: a thread
    of the parent leads its sync (held inside the fsync) when the process forks. The child's append
    and sync come back (no lead, lock or waiter of the parent's threads is the child's), and its line
    is read back after the parent's."""
    path = tmp_path / "s.jsonl"
    log: LineLog[Record] = LineLog(path, RecordCodec("r", "s"), sequence=lambda r: r.seq, keep_open=True)
    with log.locked():
        log.recover()
        log.sync_to(log.write([_rec(1)]))
    with log.locked():
        log.recover()
        end = log.write([_rec(2)])
    entered, release, held = _held_fsync(path)
    os.fsync = held  # type: ignore[assignment]
    try:
        leader = threading.Thread(target=lambda: log.sync_to(end))
        leader.start()
        assert entered.wait(60)
        pid = _fork_appending(log, real_fsync)
        release.set()
        leader.join(60)
    finally:
        os.fsync = real_fsync  # type: ignore[assignment]
        release.set()
    _exits_cleanly(pid, "the child waited for a sync a thread of its parent led at the fork")
    fresh: LineLog[Record] = LineLog(path, RecordCodec("r", "s"), sequence=lambda r: r.seq)
    assert [r.seq for r in fresh.read()] == [1, 2, 3]
    assert fresh.watermark() == path.stat().st_size


def test_a_child_forked_while_a_thread_holds_a_bare_log_appends_to_it(
    tmp_path: Path, real_fsync: Callable[[int], None]
) -> None:
    """A thread of the parent holds the log (inside ``locked``, its sync held) when the process
    forks: the child's own ``locked`` waits for the parent's lock on the file and then takes the log,
    rather than waiting for ever on the log's lock of a thread that does not run in it."""
    path = tmp_path / "s.jsonl"
    log: LineLog[Record] = LineLog(path, RecordCodec("r", "s"), sequence=lambda r: r.seq, keep_open=True)
    with log.locked():
        log.recover()
        log.sync_to(log.write([_rec(1)]))
    entered, release, held = _held_fsync(path)

    def holder() -> None:
        with log.locked():
            log.recover()
            log.sync_to(log.write([_rec(2)]))  # held inside, the log still held

    os.fsync = held  # type: ignore[assignment]
    try:
        thread = threading.Thread(target=holder)
        thread.start()
        assert entered.wait(60)
        pid = _fork_appending(log, real_fsync)
        release.set()
        thread.join(60)
    finally:
        os.fsync = real_fsync  # type: ignore[assignment]
        release.set()
    _exits_cleanly(pid, "the child waited for a log a thread of its parent held at the fork")
    fresh: LineLog[Record] = LineLog(path, RecordCodec("r", "s"), sequence=lambda r: r.seq)
    assert [r.seq for r in fresh.read()] == [1, 2, 3]

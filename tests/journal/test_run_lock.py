"""The run lock (``run.lock``) a journal keeps open while it appends to a run.

Taking it is one ``flock``, not an open, a stat and a close per append; the descriptor goes when
the run ends or the journal closes, and a forked child never shares its parent's (a flock belongs
to the open file both would share: the child would take a lock its parent holds).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import journal
from journal import FileJournal


def _run_lock_fds(path: Path) -> int:
    """How many of this process's descriptors are open on ``path``."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                count += 1
        except OSError:
            continue
    return count


def test_an_appending_journal_keeps_one_run_lock_open_until_the_run_ends(tmp_path: Path) -> None:
    jr = FileJournal(tmp_path)
    info, lease = jr.begin("flow", "scope", {})
    lock = tmp_path / "runs" / info.run_id / "run.lock"
    for n in range(3):
        jr.append(lease, "a", {"n": n})
        jr.append(lease, "b", {"n": n})
        assert _run_lock_fds(lock) == 1
    jr.finish(lease, journal.RunState.DONE)
    assert _run_lock_fds(lock) == 0
    other = FileJournal(tmp_path)
    info2, lease2 = other.begin("flow", "scope", {})
    other.append(lease2, "a", {"n": 1})
    lock2 = tmp_path / "runs" / info2.run_id / "run.lock"
    assert _run_lock_fds(lock2) == 1
    other.close()
    assert _run_lock_fds(lock2) == 0
    jr.close()


def _waiting_on(pid: int, ino: int) -> bool:
    """Whether ``pid`` waits for a flock on inode ``ino`` (``/proc/locks`` shows waiters as ``->``)."""
    with open("/proc/locks") as f:
        for line in f:
            fields = line.split()
            if "->" in fields and str(pid) in fields and any(f.endswith(f":{ino}") for f in fields):
                return True
    return False


def _exits_cleanly(pid: int, hung: str) -> None:
    """The child ``pid`` ends, with 0, within a minute (a bound for a hung child, not a measure of
    speed); else it is killed and the test fails saying ``hung``."""
    give_up = time.monotonic() + 60
    while (status := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < give_up:
        time.sleep(0.01)
    if status[0] == 0:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    assert status[0] == pid, hung
    assert os.waitstatus_to_exitcode(status[1]) == 0


def test_a_forked_child_waits_for_the_run_lock_its_parent_holds(tmp_path: Path) -> None:
    jr = FileJournal(tmp_path)
    info, lease = jr.begin("flow", "scope", {})
    jr.append(lease, "s", {"who": "parent"})  # the parent's run lock is open now
    ino = os.stat(tmp_path / "runs" / info.run_id / "run.lock").st_ino
    with jr._run_lock(info.run_id):
        pid = os.fork()
        if pid == 0:  # the child appends through the journal it inherited
            try:
                jr.append(lease, "s", {"who": "child"})
            finally:
                os._exit(0)
        try:
            give_up = time.monotonic() + 60  # a bound for a hung child, not a measure of speed
            while not _waiting_on(pid, ino):
                done, _ = os.waitpid(pid, os.WNOHANG)
                assert done == 0, "the child took the run lock its parent held"
                assert time.monotonic() < give_up, "the child neither waited for the run lock nor ended"
                time.sleep(0.01)
        except BaseException:
            os.kill(pid, 9)
            raise
    # and then gets it: its copy of its parent's descriptor does not keep the parent's flock held
    _exits_cleanly(pid, "the child never got the run lock its parent let go")
    assert [r.payload["who"] for r in jr.read(info.run_id, "s")] == ["parent", "child"]
    jr.append(lease, "s", {"who": "parent"})  # the parent's lock still works after the child's
    assert [r.seq for r in jr.read(info.run_id, "s")] == [1, 2, 3]
    jr.close()


def test_a_child_forked_while_a_thread_of_its_parent_syncs_a_stream_appends_to_it(tmp_path: Path) -> None:
    """A thread of the parent is inside a stream's sync (holding the stream's locks and the lead of
    its sync) when the process forks: no such thread runs in the child, so the child's journal
    must not wait on those locks. Its append through the journal it inherited ends, and both
    records are read back."""
    jr = FileJournal(tmp_path)
    info, lease = jr.begin("flow", "scope", {})
    jr.append(lease, "s", {"who": "first"})
    path = jr.stream_path(info.run_id, "s")
    real = os.fsync
    entered, release = threading.Event(), threading.Event()

    def held(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}") == str(path) and not entered.is_set():
            entered.set()
            release.wait(60)
        real(fd)

    os.fsync = held  # type: ignore[assignment]
    try:
        writer = threading.Thread(target=lambda: jr.append(lease, "s", {"who": "parent's thread"}))
        writer.start()
        assert entered.wait(60)
        pid = os.fork()
        if pid == 0:  # the child: no thread syncs here
            code = 1
            try:
                os.fsync = real
                jr.append(lease, "s", {"who": "child"})
                code = 0
            finally:
                os._exit(code)
        release.set()
        writer.join(60)
    finally:
        os.fsync = real  # type: ignore[assignment]
        release.set()
    _exits_cleanly(pid, "the child waited for a lock a thread of its parent held at the fork")
    whos = sorted(r.payload["who"] for r in jr.read(info.run_id, "s"))
    assert whos == ["child", "first", "parent's thread"]


_HOLDER_THAT_FORKS = """
import os, signal, sys, time
from journal import FileJournal
jr = FileJournal(sys.argv[1])
info, lease = jr.begin("flow", "scope", {})
jr.append(lease, "s", {"n": 1})
pid = os.fork()
if pid == 0:  # a helper the holder forked (a multiprocessing worker): it outlives the holder
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # so the test's pipes end with the holder
        os.dup2(null, fd)
    time.sleep(60)
    os._exit(0)
print(info.run_id, pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # the holder dies; its forked helper lives on
"""


def test_a_holder_killed_while_a_child_it_forked_lives_leaves_its_run_interrupted_and_resumable(
    tmp_path: Path,
) -> None:
    """The child's copy of the lease lock's descriptor would keep the lease's flock (it belongs to
    the open file both share) for as long as the child lives: the run read running and refused a
    resume. A forked child closes its copies of its parent's lease descriptors."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    done = subprocess.run(
        [sys.executable, "-c", _HOLDER_THAT_FORKS, str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
        check=False,
    )
    run_id, child = done.stdout.split()
    try:
        assert done.returncode == -9, done.stderr
        os.kill(int(child), 0)  # the helper is alive
        jr = FileJournal(tmp_path)
        assert jr.run(run_id).state is journal.RunState.INTERRUPTED
        lease = jr.acquire(run_id)
        assert lease.epoch == 2
        jr.append(lease, "s", {"n": 2})
        jr.close()
    finally:
        os.kill(int(child), 9)

"""The threads of one process share one lock of a scope's turn for their plain learns: the first to
take a share opens the turn folder and locks it shared, the others count themselves in, and the
last to let go unlocks it. What must hold: no learn of the process is without the lock while it is
between its look and its publish (so an update in another process still waits for every one of
them), and a forked child, which has none of the parent's threads, takes a lock of its own."""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import memory
from memory._publisher import Publisher

_WAIT_S = 30.0  # a bound on a wait that must end, not a timed assertion


@pytest.fixture
def store(tmp_path: Path) -> Iterator[memory.MemoryStore]:
    with memory.MemoryStore(tmp_path / "store" / "history.db") as store:
        with store.session(scope="s") as s:
            s.learn({"text": "the scope's folders made"})
        yield store


class _Holder:
    """A thread that takes a share of ``scope``'s turn through ``publisher`` and holds it until
    told to let go."""

    def __init__(self, publisher: Publisher, scope: str) -> None:
        self.taken, self.release, self.dropped = threading.Event(), threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run, args=(publisher, scope))
        self.thread.start()
        assert self.taken.wait(_WAIT_S)

    def _run(self, publisher: Publisher, scope: str) -> None:
        share = publisher.take_share(scope, None)
        self.taken.set()
        try:
            assert self.release.wait(60)
        finally:
            publisher.drop_share(share)
            self.dropped.set()

    def let_go(self) -> None:
        """Let go of the share (safe twice)."""
        self.release.set()
        self.thread.join(_WAIT_S)
        assert self.dropped.is_set()


def _locked_by_another(folder: Path) -> bool:
    """Whether an exclusive lock of ``folder`` from an open of its own (as an update in another
    process takes it) is refused now."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_a_learn_while_another_thread_holds_the_share_takes_no_lock_of_its_own(
    store: memory.MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    turn = store._publisher._turn_dir("s", None)
    inodes = {turn.stat().st_ino: "turn", turn.parent.stat().st_ino: "gate"}
    shared: list[str] = []
    flock = fcntl.flock

    def counted(fd: int, how: int) -> None:
        if how & fcntl.LOCK_SH:
            shared.append(inodes.get(os.fstat(fd).st_ino, "other"))
        flock(fd, how)

    holder = _Holder(store._publisher, "s")
    try:
        monkeypatch.setattr(fcntl, "flock", counted)
        with store.session(scope="s") as s:
            s.learn({"text": "learned while another thread holds the share"})
        assert shared == []  # counted in to the process's lock: no open, no flock, no close
        monkeypatch.setattr(fcntl, "flock", flock)
    finally:
        holder.let_go()
    monkeypatch.setattr(fcntl, "flock", counted)
    with store.session(scope="s") as s:
        s.learn({"text": "learned alone"})
    # the only learn of the process passes the gate and takes the lock itself
    assert sorted(shared) == ["gate", "turn"]


def test_the_process_keeps_its_lock_until_the_last_of_its_learns_lets_go(store: memory.MemoryStore) -> None:
    folder = store._publisher._turn_dir("s", None)
    assert not _locked_by_another(folder)
    holders = [_Holder(store._publisher, "s"), _Holder(store._publisher, "s")]
    try:
        assert _locked_by_another(folder)
        holders[0].let_go()  # the one that took the lock goes first: the other is between look and publish
        assert _locked_by_another(folder), "the process let go of its lock while a learn of it held a share"
        holders[1].let_go()
        assert not _locked_by_another(folder)
        holders.append(_Holder(store._publisher, "s"))  # the next learn takes the lock anew
        assert _locked_by_another(folder)
    finally:
        for holder in holders:
            holder.let_go()
    assert not _locked_by_another(folder)


def test_an_update_in_this_process_waits_for_the_last_share_and_then_goes(store: memory.MemoryStore) -> None:
    with store.session(scope="s") as s:
        mid = s.learn({"text": "to be updated"}).memory_id
    first = _Holder(store._publisher, "s")
    second = _Holder(store._publisher, "s")
    done = threading.Event()

    def update() -> None:
        with store.session(scope="s") as s:
            s.update(mid, {"text": "updated once every share is let go"})
        done.set()

    thread = threading.Thread(target=update)
    thread.start()
    try:
        first.let_go()
        assert not done.wait(0.3), "the update went while a learn of its process held a share"
        second.let_go()
        assert done.wait(_WAIT_S)
    finally:
        first.let_go()
        second.let_go()
        thread.join(_WAIT_S)
    assert "updated once every share is let go" in {f.text for f in store.recall(scope="s", limit=None)}


def _readable(fd: int) -> bool:
    """Whether ``fd`` has something to read within ``_WAIT_S`` (``poll``: a descriptor numbered
    past 1,024 is fine)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(_WAIT_S * 1000))


def _in_child(work: Callable[[], Any]) -> tuple[int, int, int]:
    """Fork a child that runs ``work``, writes one byte when done (``b"!"`` if it raised) and lives
    until killed: (pid, the pipe to read the byte from, the pipe to close to let it go)."""
    status_r, status_w = os.pipe()
    hold_r, hold_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(status_r)
            os.close(hold_w)
            code = b"."
            try:
                work()
            except BaseException:
                code = b"!"
            os.write(status_w, code)
            os.read(hold_r, 1)
        finally:
            os._exit(0)
    os.close(status_w)
    os.close(hold_r)
    return pid, status_r, hold_w


def test_a_child_forked_while_a_thread_holds_the_share_takes_a_lock_of_its_own(
    store: memory.MemoryStore,
) -> None:
    """The child has none of the parent's threads: counting itself in to the parent's share would
    leave its learn without a lock once the parent let go, and an update in a third process would
    then be between its look and its publish."""
    folder = store._publisher._turn_dir("s", None)
    holder = _Holder(store._publisher, "s")
    taken: list[object] = []
    pid, status_r, hold_w = _in_child(lambda: taken.append(store._publisher.take_share("s", None)))
    try:
        assert _readable(status_r) and os.read(status_r, 1) == b"."
        holder.let_go()
        assert _locked_by_another(folder), "the child's share holds no lock of its own"
    finally:
        holder.let_go()
        os.close(hold_w)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(status_r)
    assert not _locked_by_another(folder)  # the child's lock went with it


def _keep_learning(db_path: Path, who: str, stop: Callable[[], bool]) -> None:
    with memory.MemoryStore(db_path) as store, store.session(scope="s") as s:
        n = 0
        while not stop():
            s.learn({"text": f"{who} learns {n}"})
            n += 1


def _change(store: memory.MemoryStore, what: str, mid: str, n: int) -> Callable[[], None]:
    def change() -> None:
        with store.session(scope="s") as s:
            if what == "update":
                s.update(mid, {"text": f"updated {n} while learns kept coming"})
            else:
                s.forget(mid, reason="forgotten while learns kept coming")

    return change


def _gets_its_turn(store: memory.MemoryStore, what: str) -> None:
    """Three updates of one memory (or a forget of it) each finish while the learns go on."""
    with store.session(scope="s") as s:
        mid = s.learn({"text": "the memory changed while learns keep coming"}).memory_id
    for n in range(1 if what == "forget" else 3):
        thread = threading.Thread(target=_change(store, what, mid, n))
        thread.start()
        thread.join(_WAIT_S)
        assert not thread.is_alive(), f"the {what} waited for good while learns kept overlapping"


@pytest.mark.parametrize("what", ["update", "forget"])
def test_an_update_or_forget_gets_its_turn_while_threads_of_its_process_keep_learning(
    store: memory.MemoryStore, what: str
) -> None:
    """Shared locks are granted while an exclusive one waits: threads whose learns keep
    overlapping held the process's share for good, and the update of the scope waited for ever."""
    stop = threading.Event()
    learners = [
        threading.Thread(target=_keep_learning, args=(store.db_path, f"thread {i}", stop.is_set))
        for i in range(4)
    ]
    for learner in learners:
        learner.start()
    try:
        _gets_its_turn(store, what)
    finally:
        stop.set()
        for learner in learners:
            learner.join(_WAIT_S)


@pytest.mark.parametrize("what", ["update", "forget"])
def test_an_update_or_forget_gets_its_turn_while_other_processes_keep_learning(
    store: memory.MemoryStore, what: str
) -> None:
    """Eight processes learning without pause: their shares overlap, each taken whenever no
    exclusive lock is held, and the update of the scope waited for ever."""
    children: list[tuple[int, int, int]] = []
    try:
        for i in range(8):
            who = f"process {i}"
            children.append(_in_child(lambda who=who: _keep_learning(store.db_path, who, lambda: False)))
        _gets_its_turn(store, what)
    finally:
        for pid, status_r, hold_w in children:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(status_r)
            os.close(hold_w)


def _open_folders() -> list[Path]:
    """What this process's descriptors name (``/proc/self/fd``)."""
    named = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor is gone by now
            named.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
    return named


def test_a_process_learning_into_many_scopes_keeps_only_so_many_gates_open(tmp_path: Path) -> None:
    """Each scope's gate is kept open for its next learn; a process learning into thousands of
    scopes must not keep thousands of descriptors (the default limit is 1,024)."""
    with memory.MemoryStore(tmp_path / "store" / "history.db") as store:
        for n in range(3 * memory._publisher.GATES_KEPT):
            with store.session(scope=f"user-{n}") as s:
                s.learn({"text": f"a note of user {n}"})
        scopes = range(3 * memory._publisher.GATES_KEPT)
        gates = {store._publisher._turn_dir(f"user-{n}", None).parent for n in scopes}
        # (each gate counted once: a folder the publisher holds open for its writes may name the
        # same path, bounded by its own cache, as it did when earlier tests had run in the process)
        open_gates = {p for p in _open_folders() if p in gates}
        assert 0 < len(open_gates) <= memory._publisher.GATES_KEPT
        with store.session(scope="user-0") as s:  # a scope whose gate was let go takes it anew
            s.learn({"text": "user 0 again"})
        assert "user 0 again" in {f.text for f in store.recall(scope="user-0", limit=None)}

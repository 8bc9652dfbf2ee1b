"""``JournalStore``'s sync every ``sync_every`` writes runs on a thread of the store's own
(``flows.langgraph._background``): the put that asks for it returns without waiting, reads stay
right while it runs, a failure is raised by the next call or by ``close`` with its code, ``close``
waits for it, and a forked child makes its own thread."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.langgraph import JournalStore
from flows.langgraph._background import BackgroundSync
from memory import MemoryStore, Recalled, Unreachable, learned_dir

NS = ("bg",)
THREAD = "langgraph-store-sync"


class _HeldUpsert:
    """The history DB's ``upsert`` (the sync's write of rows), held at its start until ``go`` is
    set, the thread that ran each call noted; the real upsert runs after."""

    def __init__(self, store: JournalStore) -> None:
        self.real = store.memory.db.upsert
        self.started = threading.Event()
        self.go = threading.Event()
        self.threads: list[str] = []
        self.done = 0
        store.memory.db.upsert = self  # type: ignore[method-assign]

    def __call__(self, entries: list[Recalled], now_ms: int) -> None:
        self.threads.append(threading.current_thread().name)
        self.started.set()
        self.go.wait(10)  # on the caller's thread (the inline sync) nobody sets it: go on after 10 s
        self.real(entries, now_ms)
        self.done += 1


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, str]:
    return {"db": str(tmp_path / "history.db"), "journal": str(tmp_path / "journal")}


def _files(store: JournalStore) -> list[Path]:
    found = store.finding(NS, "k0")
    assert found is not None
    return sorted(learned_dir(store.memory.db_path, found.scope).glob("*.json"))


def _sync_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD]


def test_the_sync_runs_off_the_callers_thread_and_reads_stay_right_while_it_runs(
    paths: dict[str, str],
) -> None:
    store = JournalStore(**paths, sync_every=4)
    held = _HeldUpsert(store)
    try:
        for i in range(4):
            store.put(NS, f"k{i}", {"n": i})  # the 4th asks for a sync
        assert held.started.wait(10)
        assert held.threads == [THREAD]
        assert held.done == 0  # the put returned while its sync is under way
        # reads and writes while the sync is held between its look at the files and its rows
        assert [store.get(NS, f"k{i}").value for i in range(4)] == [{"n": i} for i in range(4)]  # type: ignore[union-attr]
        store.put(NS, "k1", {"n": "one"})
        store.put(NS, "k9", {"n": 9})
        assert {i.key: i.value["n"] for i in store.search(NS)} == {
            "k0": 0, "k1": "one", "k2": 2, "k3": 3, "k9": 9
        }
        held.go.set()
    finally:
        held.go.set()
        store.close()
    assert held.done >= 1 and _sync_threads() == []
    with JournalStore(**paths) as again:
        assert {i.key: i.value["n"] for i in again.search(NS)} == {
            "k0": 0, "k1": "one", "k2": 2, "k3": 3, "k9": 9
        }
        assert len(again.memory.recall(scope="langgraph:bg", limit=None)) == 5


def test_close_waits_for_the_sync_under_way_and_runs_one_asked_for_then_no_other(
    paths: dict[str, str],
) -> None:
    store = JournalStore(**paths, sync_every=4)
    held = _HeldUpsert(store)
    for i in range(8):  # the 4th put's sync is held; the 8th asks for another
        store.put(NS, f"k{i}", {"n": i})
    assert held.started.wait(10) and held.done == 0
    closing = threading.Thread(target=store.close)
    closing.start()
    closing.join(0.2)
    assert closing.is_alive()  # held by the sync under way
    held.go.set()
    closing.join(30)
    assert not closing.is_alive()
    assert held.done == 2 and held.threads == [THREAD, THREAD]
    assert _sync_threads() == []
    # every file synced into the DB, and the thread's writer closed last: the WAL folded into it
    assert not Path(paths["db"] + "-wal").exists()
    with MemoryStore(paths["db"], journal=paths["journal"]) as memory:
        assert memory.db.count() == 8
    store._wrote()  # a write counted after close (the 12th): no sync begins
    assert _sync_threads() == []


def _damage_another_namespace(store: JournalStore) -> Path:
    """An item in another namespace whose learned file is then damaged: the store's puts of ``NS``
    never read it, its sync does (every scope's unsynced files)."""
    store.put(("other",), "x", {"a": "b"})
    found = store.finding(("other",), "x")
    assert found is not None
    path = learned_dir(store.memory.db_path, found.scope) / f"{found.key}.json"
    path.write_bytes(b"{not json")
    return path


def test_a_failed_sync_is_logged_and_raised_by_the_next_call_once_with_its_code(
    paths: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    store = JournalStore(**paths, sync_every=4)
    try:
        damaged = _damage_another_namespace(store)
        for i in range(3):
            store.put(NS, f"k{i}", {"n": i})  # the 4th write: its sync fails, on the sync's thread
        store._background.wait()  # (for that sync)
        [said] = [r for r in caplog.records if r.name == "flows.langgraph._background"]
        assert said.levelname == "WARNING" and "memory_unreachable" in said.getMessage()
        with pytest.raises(Unreachable) as caught:
            store.get(NS, "k0")
        assert caught.value.code == "memory_unreachable" and str(damaged) in str(caught.value)
        assert any("background" in note for note in caught.value.__notes__)
        assert store.get(NS, "k0").value == {"n": 0}  # type: ignore[union-attr]  # raised once
    finally:
        store.close()


def test_a_failed_sync_not_yet_raised_is_raised_by_close_once_everything_is_closed(
    paths: dict[str, str],
) -> None:
    store = JournalStore(**paths, sync_every=4)
    _damage_another_namespace(store)
    for i in range(3):
        store.put(NS, f"k{i}", {"n": i})  # returns: the sync's failure is not this put's
    with pytest.raises(Unreachable) as caught:
        store.close()
    assert caught.value.code == "memory_unreachable"
    assert _sync_threads() == []
    store.close()  # closed: nothing more to raise


def test_a_forked_child_runs_its_syncs_on_a_thread_of_its_own(tmp_path: Path) -> None:
    # The parent's sync thread is in the middle of a sync when the process forks: the child has no
    # such thread, and must not wait for it (nor for a lock it held).
    ran: list[int] = []
    inside, go = threading.Event(), threading.Event()

    def sync() -> None:
        ran.append(os.getpid())
        if os.getpid() == parent:
            inside.set()
            go.wait(10)
        else:
            (tmp_path / "child-synced").write_text(threading.current_thread().name)

    parent = os.getpid()
    background = BackgroundSync(sync, lambda: None, THREAD)
    background.ask()
    assert inside.wait(10)
    pid = os.fork()
    if pid == 0:  # the child: ask, wait for that sync (stop), end
        code = 1
        try:
            background.ask()
            background.stop()
            background.end()
            code = 0 if (tmp_path / "child-synced").read_text() == THREAD else 2
        finally:
            os._exit(code)
    go.set()
    background.stop()
    background.end()
    status = _wait_child(pid, 30)
    assert status == 0
    assert ran == [parent]


def _wait_child(pid: int, within_s: float) -> int | None:
    """The child's exit code; None (the child killed) when it is still running after ``within_s``."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


@pytest.fixture(autouse=True)
def _no_thread_left() -> Iterator[None]:
    yield
    for t in _sync_threads():
        t.join(10)

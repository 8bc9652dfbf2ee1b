"""A process forked while another of its threads holds a scope's turn, or a plain learn's share of
it. A ``flock`` belongs to the open file, which the child shares: a child that kept its copy of the
other thread's lock would hold it for as long as it lives (and wait on it itself), and a child
that kept the other thread's turn of the store object would wait on a mutex no thread of it will
ever let go. The child closes its copies of the other threads' locks and starts their turns anew.
"""

from __future__ import annotations

import os
import select
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import memory

_WAIT_S = 30.0  # a bound on a wait that must end, not a timed assertion


def _store(tmp_path: Path) -> tuple[memory.MemoryStore, list[str]]:
    store = memory.MemoryStore(tmp_path / "store" / "history.db")
    with store.session(scope="s") as s:
        ids = [s.learn({"text": f"note {n}"}).memory_id for n in range(3)]
    return store, ids


class _Child:
    """A forked child that runs ``work`` at once, reports how it went, and lives on until let go."""

    def __init__(self, work: Callable[[], None]) -> None:
        self.status_r, status_w = os.pipe()
        hold_r, self.hold_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child: never returns into the test
            try:
                os.close(self.hold_w)
                code = b"ok"
                try:
                    work()
                except BaseException as exc:
                    code = f"{type(exc).__name__}: {exc}".encode()[:200]
                os.write(status_w, code)
                os.read(hold_r, 1)  # lives (holding what it holds) until the parent lets it go
            finally:
                os._exit(0)
        os.close(status_w)
        os.close(hold_r)

    def status(self) -> str:
        ready, _, _ = select.select([self.status_r], [], [], _WAIT_S)
        return os.read(self.status_r, 200).decode() if ready else "still waiting"

    def let_go(self) -> None:
        os.close(self.hold_w)
        os.kill(self.pid, signal.SIGKILL)  # done, or waiting for good when the test failed
        os.waitpid(self.pid, 0)
        os.close(self.status_r)


def _finishes(body: Callable[[], Any]) -> bool:
    thread = threading.Thread(target=body)
    thread.start()
    thread.join(_WAIT_S)
    return not thread.is_alive()


def _held_in_a_thread(
    hook_owner: Any, name: str, body: Callable[[], Any]
) -> tuple[threading.Event, threading.Thread]:
    """Run ``body`` in a thread that stops inside ``hook_owner.name`` until let go."""
    inside, release = threading.Event(), threading.Event()
    real = getattr(hook_owner, name)

    def hooked(*args: Any, **kwargs: Any) -> Any:
        inside.set()
        assert release.wait(60)
        return real(*args, **kwargs)

    setattr(hook_owner, name, hooked)
    thread = threading.Thread(target=body)
    thread.start()
    assert inside.wait(_WAIT_S)
    setattr(hook_owner, name, real)  # the child and later calls run the real one
    return release, thread


@pytest.mark.parametrize("held", ["share", "turn"])
def test_a_child_forked_while_a_thread_holds_a_share_or_a_turn_neither_keeps_it_nor_waits_on_it(
    tmp_path: Path, held: str
) -> None:
    """Another thread is inside a plain learn (holding a share of the scope's turn) or an update
    (holding the turn) when the process forks. The child updates through the same store object,
    which waits for the share or turn to go; the parent updates while the child still lives."""
    store, ids = _store(tmp_path)
    in_thread = "learned while the parent forks" if held == "share" else "updated by the parent's thread"

    def write_in_thread() -> None:
        with store.session(scope="s") as s:
            if held == "share":
                s.learn({"text": in_thread})
            else:
                s.update(ids[0], {"text": in_thread})

    hook = (store._publisher, "stage") if held == "share" else (store._learner, "_learn_version")
    release, thread = _held_in_a_thread(*hook, write_in_thread)

    def update_in_child() -> None:
        with store.session(scope="s") as s:
            s.update(ids[1], {"text": "updated by the child"})

    child = _Child(update_in_child)
    try:
        release.set()
        thread.join(_WAIT_S)
        assert child.status() == "ok"

        def update() -> None:
            with store.session(scope="s") as s:
                s.update(ids[2], {"text": "updated by the parent while the child lives"})

        assert _finishes(update), f"the child kept the parent's thread's {held} of the scope's turn"
    finally:
        release.set()
        child.let_go()
    texts = {f.text for f in memory.MemoryStore(store.db_path).recall(scope="s", limit=None)}
    assert {in_thread, "updated by the child", "updated by the parent while the child lives"} <= texts
    store.close()

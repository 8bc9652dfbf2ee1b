"""A plain learn racing an update onto the same content (two stores of one DB: two processes).

"A key is one memory's": an update to content another memory's live version holds takes the next
revision, and a plain learn of a live version is that version again (its memory id). A plain learn
holds a share of its scope's turn from its look at its key to its publish
(``Publisher.take_share``); an update holds the turn itself from its look at the version it
replaces to its publish. Each test starts the other side in a thread of its own at the racy point
of this side (after its look) and gives it a moment to run in full; with the exclusion in place it
waits instead, and runs once this side is done. Either way, what both sides were told must be what
the store reads afterwards.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import memory

SHARED = {"text": "the shared text ZQSHARED"}
_MOMENT_S = 1.0  # how long this side lets the other run before it goes on (not an assertion)


def _stores(tmp_path: Path) -> tuple[Path, memory.Learned]:
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store, store.session(scope="s") as s:
        alice = s.learn({"text": "alice's note"})
    return db, alice


class _Other:
    """The other side, run once in a thread of its own; its answer or its error kept."""

    def __init__(self, body: Callable[[], memory.Learned]) -> None:
        self.body = body
        self.got: list[memory.Learned] = []
        self.failed: list[BaseException] = []
        self.thread: threading.Thread | None = None

    def _run(self) -> None:
        try:
            self.got.append(self.body())
        except BaseException as exc:  # raised again in the test's thread by ``answer``
            self.failed.append(exc)

    def start_once(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._run)
            self.thread.start()
            self.thread.join(_MOMENT_S)

    def answer(self) -> memory.Learned:
        assert self.thread is not None, "the racy point was never reached"
        self.thread.join(60)
        assert not self.thread.is_alive(), "the other side never finished"
        if self.failed:
            raise self.failed[0]
        return self.got[0]


def _reads_as_told(db: Path, *told: memory.Learned) -> None:
    """Every answer is a live memory the store reads back: its key, its memory id, the text."""
    store = memory.MemoryStore(db)
    live = {f.memory_id: (f.key, f.text) for f in store.recall(scope=None, limit=None)}
    for got in told:
        assert live.get(got.memory_id) == (got.key, SHARED["text"]), ("an acknowledged memory is gone", got)
        read = store.get(got.key)
        assert read is not None and read.memory_id == got.memory_id, (got, read)
    assert memory.check_store(store) == []
    store.close()


# the scope the new version goes to, and the learn's: alice's own, or another (the update moves the
# memory there, and must hold that scope's turn as well as its own)
_TO = pytest.mark.parametrize("to", ["s", "t"])
# by memory id, or a supersede naming the version (``learn`` with ``supersedes=``)
_HOW = pytest.mark.parametrize("how", ["update", "supersede"])


def _update(session: memory.MemorySession, how: str, alice: memory.Learned) -> memory.Learned:
    if how == "update":
        return session.update(alice.memory_id, SHARED)
    return session.learn(SHARED, supersedes=alice.key)


@_TO
@_HOW
def test_a_learn_started_while_an_update_looked_does_not_lose_its_memory_to_the_update(
    tmp_path: Path, to: str, how: str
) -> None:
    """The update of alice's memory to ``SHARED`` has looked (the key free) when another store
    learns ``SHARED``; the update then commits. The learn is either alice's new version (it came
    after the update) or a memory of its own that the update did not take over."""
    db, alice = _stores(tmp_path)
    updater, learner = memory.MemoryStore(db), memory.MemoryStore(db)

    def learn() -> memory.Learned:
        with learner.session(scope=to) as other:
            return other.learn(SHARED)

    other = _Other(learn)
    real = updater._learner._learn_version

    def after_the_look(*args: Any, **kwargs: Any) -> Any:
        other.start_once()
        return real(*args, **kwargs)

    updater._learner._learn_version = after_the_look  # type: ignore[method-assign]
    with updater.session(scope=to) as s:
        new = _update(s, how, alice)
    learned = other.answer()
    assert new.memory_id == alice.key
    _reads_as_told(db, new, learned)
    updater.close()
    learner.close()


@_TO
@_HOW
def test_an_update_started_while_a_learn_looked_does_not_take_the_learns_key(
    tmp_path: Path, to: str, how: str
) -> None:
    """A plain learn of ``SHARED`` has looked (the key free, and no memory holding it) and is
    staging its file when another store's update of alice's memory to ``SHARED`` starts; the learn
    then commits. What the learn answers (its memory id) is what the store reads its key as, and
    alice's memory keeps a version of its own."""
    db, alice = _stores(tmp_path)
    updater, learner = memory.MemoryStore(db), memory.MemoryStore(db)

    def update() -> memory.Learned:
        with updater.session(scope=to) as other:
            return _update(other, how, alice)

    other = _Other(update)
    real = learner._publisher.stage

    def after_the_look(*args: Any, **kwargs: Any) -> Any:
        other.start_once()
        return real(*args, **kwargs)

    learner._publisher.stage = after_the_look  # type: ignore[method-assign]
    with learner.session(scope=to) as s:
        got = s.learn(SHARED)
    new = other.answer()
    assert new.memory_id == alice.key
    _reads_as_told(db, got, new)
    updater.close()
    learner.close()

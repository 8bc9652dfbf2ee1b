"""A plain learn racing an update onto the same content (two stores of one DB: two processes).

"A key is one memory's": an update to content another memory's live version holds takes the next
revision, and a plain learn of a live version is that version again (its memory id). Updates of
one scope take turns (``Publisher.update_turn``); a plain learn takes none, so its look for the key
and an update's look, commit and publish can interleave. Each test runs the other side in full at
one point of this side's learn (the hook is an interleaving, not a stand-in for a store).

Both fail today (``xfail(strict=True)``: they flip once the hole is closed, which needs the plain
learn's look-to-commit to exclude an update's of its scope, across processes and hosts).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import memory

SHARED = {"text": "the shared text ZQSHARED"}
_HOLE = "a plain learn takes no turn of its scope: an update's look and commit interleave with it"


def _stores(tmp_path: Path) -> tuple[Path, memory.Learned]:
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store, store.session(scope="s") as s:
        alice = s.learn({"text": "alice's note"})
    return db, alice


@pytest.mark.xfail(strict=True, reason=_HOLE)
def test_a_learn_acknowledged_while_an_update_looked_is_not_taken_over_by_the_update(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The update of alice's memory to ``SHARED`` has looked (the key free) when another store
    learns ``SHARED``, acknowledged as a memory of its own; the update then commits. Both memories
    stay: the learned one keeps its live version, alice's new version takes the next revision."""
    db, alice = _stores(tmp_path)
    updater, learner = memory.MemoryStore(db), memory.MemoryStore(db)
    learned: list[memory.Learned] = []
    real = updater._learner._learn_version

    def after_the_look(*args: Any, **kwargs: Any) -> Any:
        if not learned:
            with learner.session(scope="s") as other:
                learned.append(other.learn(SHARED))
        return real(*args, **kwargs)

    monkeypatch.setattr(updater._learner, "_learn_version", after_the_look)
    with updater.session(scope="s") as s:
        new = s.update(alice.key, SHARED)
    live = {f.memory_id: (f.key, f.text) for f in memory.MemoryStore(db).recall(scope="s", limit=None)}
    mine = live.get(learned[0].memory_id)
    assert mine == (learned[0].key, SHARED["text"]), "an acknowledged memory is gone"
    assert live[alice.key] == (new.key, SHARED["text"]) and new.key != learned[0].key


@pytest.mark.xfail(strict=True, reason=_HOLE)
def test_a_learn_that_looked_before_an_update_committed_answers_the_memory_the_store_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain learn of ``SHARED`` has looked (the key free, and no memory holding it) and is
    staging its file when another store's update of alice's memory to ``SHARED`` runs in full; the
    learn then commits. What it answers (its memory id) is what the store then reads its key as."""
    db, alice = _stores(tmp_path)
    updater, learner = memory.MemoryStore(db), memory.MemoryStore(db)
    done: list[memory.Learned] = []
    real = learner._publisher.stage

    def after_the_look(*args: Any, **kwargs: Any) -> Any:
        if not done:
            with updater.session(scope="s") as other:
                done.append(other.update(alice.key, SHARED))
        return real(*args, **kwargs)

    monkeypatch.setattr(learner._publisher, "stage", after_the_look)
    with learner.session(scope="s") as s:
        got = s.learn(SHARED)
    read = memory.MemoryStore(db).get(got.key)
    assert read is not None and read.memory_id == got.memory_id, (got.memory_id, read)

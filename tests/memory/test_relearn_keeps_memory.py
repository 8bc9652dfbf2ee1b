"""Learning again, in another run, the content a memory's live version holds (a version an update
wrote) answers with that version and keeps its memory id: the finding stays a version of the memory
in every read (for a version synced into the DB, from the next sync on: a learn never opens the
DB), and the memory's next update builds on it. Before, the new commit carried no memory
id and its file replaced the version's, so the version read as a memory of its own (its key as
its memory id) and the next update by the first memory id made versions of that other memory."""

from __future__ import annotations

import pytest

import memory


@pytest.mark.parametrize("synced", [False, True], ids=["unsynced", "synced"])
def test_learning_a_live_version_again_keeps_its_memory(store: memory.MemoryStore, synced: bool) -> None:
    with store.session(scope="s") as s:
        first = s.learn({"text": "alpha"})
        second = s.update(first.key, {"text": "beta"})
    if synced:
        store.sync()
    with store.session(scope="s") as s:
        again = s.learn({"text": "beta"})
    assert again.key == second.key
    if not synced:  # the version's file is there: the commit keeps its memory id at once
        assert again.memory_id == first.key
    for each in (synced, True):
        if each:
            store.sync()  # a version synced into the DB keeps its memory id in its row
        (live,) = store.recall(scope="s", limit=None)
        assert (live.key, live.memory_id) == (second.key, first.key)
        assert store.current(first.key) == live
    with store.session(scope="s") as s:
        third = s.update(first.key, {"text": "gamma"})
    assert third.memory_id == first.key
    assert [(f.key, f.memory_id) for f in store.recall(scope="s", limit=None)] == [(third.key, first.key)]
    assert {e.memory for e in store.history(first.key)} == {first.key}
    assert memory.check_store(store) == []

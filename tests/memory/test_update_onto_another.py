"""An update (or a supersede) whose new content is what another memory's live version holds, in the
same scope, is a new version of the memory updated, under a key of its own (the next revision):
the other memory keeps its identity, its history and its content. Before, the new version took
the other memory's key: that memory was read as a version of the one updated, its history became
the other's, and erasing the memory updated erased the other memory's content with it."""

from __future__ import annotations

import pytest

import memory
from tests._helpers.grep import files_holding as _files_holding


@pytest.mark.parametrize("synced", [False, True], ids=["unsynced", "synced"])
@pytest.mark.parametrize("how", ["update", "supersede"])
def test_an_update_to_another_memorys_content_keeps_both_memories(
    store: memory.MemoryStore, synced: bool, how: str
) -> None:
    with store.session(scope="s") as s:
        alice = s.learn({"text": "likes tea ZQALICE"})
        bob = s.learn({"text": "bob's note ZQBOB"})
    if synced:
        store.sync()
    with store.session(scope="s") as s:
        if how == "update":
            new = s.update(alice.key, {"text": "bob's note ZQBOB"})
        else:
            new = s.learn({"text": "bob's note ZQBOB"}, supersedes=alice.key)
    assert new.key != bob.key and new.memory_id == alice.key
    live = {f.memory_id: (f.key, f.text) for f in store.recall(scope="s", limit=None)}
    assert live == {alice.key: (new.key, "bob's note ZQBOB"), bob.key: (bob.key, "bob's note ZQBOB")}
    assert [(e.kind, e.key) for e in store.history(bob.key)] == [("learned", bob.key)]
    assert [(e.kind, e.key) for e in store.history(alice.key)] == [
        ("learned", alice.key),
        ("learned", new.key),
        ("superseded", alice.key),
    ]
    with store.session(scope="admin") as s:
        erased = s.erase(alice.key, reason="alice asked")
    assert sorted(erased.keys) == sorted([alice.key, new.key])
    assert store.get(bob.key) is not None and store.get(bob.key).memory_id == bob.key  # type: ignore[union-attr]
    assert _files_holding(store.db_path.parent, "ZQALICE") == []
    assert memory.check_store(store) == []


def test_an_update_to_its_own_live_content_still_writes_nothing(store: memory.MemoryStore) -> None:
    with store.session(scope="s") as s:
        first = s.learn({"text": "same"})
        second = s.update(first.key, {"text": "other"})
        again = s.update(first.key, {"text": "other"})
        assert again.key == second.key and again.citation == second.citation

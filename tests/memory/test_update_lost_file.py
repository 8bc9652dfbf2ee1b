"""An update of a memory whose only version lost its learned file (unsynced, on a file journal)
says how to get it back, and works once ``sync`` has published it again from the journal."""

from __future__ import annotations

from pathlib import Path

import pytest

import memory


def test_an_update_of_a_memory_whose_file_was_lost_says_to_sync(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    with memory.MemoryStore(db) as store, store.session(scope="team") as s:
        first = s.learn({"text": "the first version"})
    [lost] = [p for p in db.parent.rglob(f"{first.key}.json") if "retired" not in p.parts]
    lost.unlink()
    with memory.MemoryStore(db) as store:
        with (
            pytest.raises(memory.FindingUnknown, match=r"flows sync") as caught,
            store.session(scope="team") as s,
        ):
            s.update(first.memory_id, {"text": "the second version"})
        assert caught.value.code == "memory_finding_unknown"
        store.sync()
        with store.session(scope="team") as s:
            s.update(first.memory_id, {"text": "the second version"})
        assert [r.text for r in store.recall(scope="team", limit=None)] == ["the second version"]

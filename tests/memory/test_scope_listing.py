"""Reads across every scope notice a scope that appears after they were last made."""

from __future__ import annotations

import time
from pathlib import Path

import memory


def _learn(db: Path, scope: str, text: str) -> None:
    with memory.MemoryStore(db) as store:
        jr = store.open_journal()
        _, lease = jr.begin("f", scope, {})
        store.learn({"text": text}, memory.RootRun(jr, lease, "f", scope))


def test_a_new_scope_learned_elsewhere_is_seen_by_a_warm_store(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    _learn(db, "first", "one")
    time.sleep(0.1)  # old enough for the listing of scopes to be remembered
    with memory.MemoryStore(db) as reader:
        assert [e.text for e in reader.recall()] == ["one"]
        assert [e.text for e in reader.recall()] == ["one"]  # served from the remembered listing
        _learn(db, "second", "two")  # another store, as another process would
        assert sorted(e.text for e in reader.recall()) == ["one", "two"]
        time.sleep(0.1)
        _learn(db, "third", "three")
        assert sorted(e.text for e in reader.recall()) == ["one", "three", "two"]
        assert [e.finding.text for e in reader.why("three")] == ["three"]

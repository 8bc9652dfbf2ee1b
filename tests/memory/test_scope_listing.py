"""Reads across every scope notice a scope that appears after they were last made."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

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


def test_a_read_lists_the_scope_folders_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One listing of ``flows-memory`` gives a read both the scopes' learned-file folders and
    their retired-file folders (and whether every scope has its learned-file folder yet)."""
    db = tmp_path / "history.db"
    for scope in ("first", "second"):
        _learn(db, scope, scope)
    root = str(tmp_path / "flows-memory")
    listed: list[str] = []
    real = os.listdir

    def counting(path: str | int = ".") -> list[str]:
        listed.append(str(path))
        return real(path)

    monkeypatch.setattr(os, "listdir", counting)
    with memory.MemoryStore(db, recover=False) as reader:
        assert sorted(e.text for e in reader.recall()) == ["first", "second"]
    assert listed.count(root) == 1


def test_a_link_where_a_scope_folder_belongs_fails_every_read_naming_it(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    _learn(db, "first", "one")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "flows-memory" / "0123456789abcdef").symlink_to(elsewhere)
    with (
        memory.MemoryStore(db, recover=False) as reader,
        pytest.raises(memory.Unreachable, match="0123456789abcdef") as caught,
    ):
        reader.recall()
    assert "symbolic link" in str(caught.value)

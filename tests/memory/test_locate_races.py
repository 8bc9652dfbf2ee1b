"""A version looked for by key while another process moves its file on: the learned file is listed,
then synced into the DB (or retired and synced) before it is read. The look goes on to where the
version went (the DB's row, the retired file), never failing on the file's absence.

Seen under load with four processes creating one item each: a put's supersede failed with
``memory_unreachable`` ("cannot read learned file …: it does not exist") when a sync in another
process dropped the file the put had just listed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import memory
from memory import _retire

OLD = {"text": "the pool's fee is 0.3 percent", "tags": ["fees"]}
NEW = {"text": "the pool's fee is 0.05 percent since the vote", "tags": ["fees"]}


def _before_first_read(monkeypatch: pytest.MonkeyPatch, key: str, act: Callable[[], None]) -> list[str]:
    """Run ``act`` (another process's work) once, when the learned file of ``key`` has been listed
    and is about to be read; the paths read are returned as they are read."""
    real = _retire.read_learned
    read: list[str] = []

    def racing(path: Path) -> Any:
        first = path.name == f"{key}.json" and not read
        read.append(str(path))
        if first:
            act()  # (its own reads of the file pass through: ``read`` is not empty any more)
        return real(path)

    monkeypatch.setattr(_retire, "read_learned", racing)
    return read


def test_a_supersede_whose_file_a_sync_drops_as_it_is_read_finds_the_db_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, journal = tmp_path / "history.db", str(tmp_path / "journal")
    with memory.MemoryStore(db, journal=journal) as store, memory.MemoryStore(db, journal=journal) as other:
        with store.session(scope="desk") as s:
            old = s.learn(OLD)
        # the other process's sync puts the file in the DB and drops it, after the look listed it
        read = _before_first_read(monkeypatch, old.key, lambda: other.sync(materialize=False))
        with store.session(scope="desk") as s:
            new = s.learn(NEW, supersedes=old.key)  # before: memory_unreachable, "it does not exist"
        assert read, "the learned file was never looked for: the race was not run"
        assert [e.key for e in store.recall(scope="desk", limit=None)] == [new.key]
        assert store.history(old.key)[-1].by == new.key


def test_a_supersede_whose_version_is_forgotten_as_it_is_read_is_refused_as_retired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, journal = tmp_path / "history.db", str(tmp_path / "journal")
    with memory.MemoryStore(db, journal=journal) as store, memory.MemoryStore(db, journal=journal) as other:
        with store.session(scope="desk") as s:
            old = s.learn(OLD)

        def forget_and_sync() -> None:
            with other.session(scope="desk") as s:
                s.forget(old.key, reason="the vote changed it")
            other.sync(materialize=False)

        read = _before_first_read(monkeypatch, old.key, forget_and_sync)
        with store.session(scope="desk") as s, pytest.raises(memory.FindingRetired) as caught:
            s.learn(NEW, supersedes=old.key)
        assert read and caught.value.key == old.key
        assert store.recall(scope="desk", limit=None) == []

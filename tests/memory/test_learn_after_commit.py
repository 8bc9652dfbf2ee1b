"""A learn that fails after its commit is durable and before its file is published: the commit stands
(a later open, resume or sync publishes it), and the learn's hidden stage goes with the failure
rather than lying in the scope's folder for `flows check` to report."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import memory
from tests._helpers.failpoints import arm, disarm
from tests.memory.conftest import Clock, stages


@pytest.fixture
def failing_after_the_commit(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    arm(monkeypatch, "memory.after_append=EIO")
    yield
    disarm(monkeypatch)


def test_a_learn_failing_after_its_commit_leaves_no_stage_and_its_commit_is_published_later(
    tmp_path: Path, journal_location: str, failing_after_the_commit: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "store" / "history.db"
    store = memory.MemoryStore(db, journal=journal_location, clock=Clock())
    with store.session(scope="team") as s, pytest.raises(OSError, match=r"failpoint memory\.after_append"):
        s.learn({"text": "the pump was replaced on Tuesday"})
    store.close()
    folders = memory.scope_dirs(db)
    assert folders and all(stages(folder) == [] for folder in folders)
    disarm(monkeypatch)
    with memory.MemoryStore(db, journal=journal_location, clock=Clock()) as again:
        again.sync()
        assert [e.text for e in again.recall(scope="team")] == ["the pump was replaced on Tuesday"]
        assert memory.check_store(again) == []

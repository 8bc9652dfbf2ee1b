"""A forget of a version that an update in another process is replacing: between the update's
retirement of the old version and the rename of the new one, neither is live. A forget there must
not answer "superseded by the new version" before that version is readable, or a caller that then
reads the item's live versions to forget them too (the LangGraph store's delete) finds none, returns,
and the new version appears a moment later: a delete that did not delete.

Seen under load: ``tests/langgraph/test_refresh_race.py``, a refreshing read in one process racing a
delete in another, left the item live after the delete returned."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import memory
from memory import _learn

OLD = {"text": "the pool's fee is 0.3 percent", "tags": ["fees"]}
NEW = {"text": "the pool's fee is 0.05 percent since the vote", "tags": ["fees"]}


def test_a_forget_that_finds_the_version_superseded_answers_once_the_new_version_is_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, journal = tmp_path / "history.db", str(tmp_path / "journal")
    with memory.MemoryStore(db, journal=journal) as store, memory.MemoryStore(db, journal=journal) as other:
        with store.session(scope="desk") as s:
            old = s.learn(OLD)
        seen: dict[str, Any] = {}
        errors: list[BaseException] = []

        def forget_then_read() -> None:  # the other process's delete
            try:
                with other.session(scope="desk") as o:
                    seen["by"] = o.forget(old.key, reason="deleted").by
                seen["live"] = [e.key for e in other.recall(scope="desk", limit=None)]
            except BaseException as exc:  # reported by the test below
                errors.append(exc)

        forgetter = threading.Thread(target=forget_then_read)
        real = _learn.Learner._publish_unless_newer

        def renamed_after_a_forget(self: Any, *args: Any, **kwargs: Any) -> Any:
            # The update has committed and published the old version's retired file; its new
            # version is about to be renamed into place: the delete runs now (it waits for the
            # update's turn if it takes it; the wait here is cut short then, and the rename goes on)
            if forgetter.ident is None:
                forgetter.start()
                forgetter.join(timeout=3.0)
            return real(self, *args, **kwargs)

        monkeypatch.setattr(_learn.Learner, "_publish_unless_newer", renamed_after_a_forget)
        with store.session(scope="desk") as s:
            new = s.learn(NEW, supersedes=old.key)
        monkeypatch.undo()
        forgetter.join(timeout=60)
        assert forgetter.ident is not None, "the update never reached its rename: the race was not run"
        assert not forgetter.is_alive() and not errors, errors
        assert seen["by"] == new.key
        assert seen["live"] == [new.key], "the forget named a replacement that no read found"

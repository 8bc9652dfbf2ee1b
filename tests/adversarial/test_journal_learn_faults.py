"""The journal's group-commit promise seen through ``learn``: a sync that fails under concurrent learns
never leaves a published finding whose journal record is gone (``flows check`` finds nothing
learned but unjournaled), and every learn that returned is recallable with its record."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import journal
import memory
from tests._helpers.failpoints import armed


def test_concurrent_learns_across_a_failed_shared_sync_leave_no_finding_without_its_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store:
        jr = store.open_journal()
        info, lease = jr.begin("f", "s", {})
        root = memory.RootRun(jr, lease, "f", "s")
        outcomes: dict[str, Any] = {}
        mutex = threading.Lock()

        def learner(w: int) -> None:
            for i in range(3):
                text = f"finding {w}-{i}"
                try:
                    got: Any = store.learn({"text": text}, root)
                except journal.JournalError as exc:
                    got = exc
                with mutex:
                    outcomes[text] = got

        plan = "linelog.before_append=sleep5,linelog.before_fsync=EIO:nth3,linelog.before_fsync=EIO:nth6"
        with armed(monkeypatch, plan):
            threads = [threading.Thread(target=learner, args=(w,)) for w in range(6)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
        assert len(outcomes) == 18
        failed = {t for t, o in outcomes.items() if isinstance(o, journal.JournalError)}
        assert failed and all(outcomes[t].code == "journal_unwritable" for t in failed)
        store.learn({"text": "after the fault"}, root)  # the next locked open recovers the stream
        records = {r.payload["finding"]["text"] for r in jr.read(info.run_id, memory.STREAM)}
        recalled = {f.text for f in store.recall(limit=100)}
        for text, outcome in outcomes.items():
            if text not in failed:  # returned: recorded, published and recallable
                assert text in records and text in recalled
                assert outcome.path.exists()
        # A learn that failed published nothing (its record may survive a failed file-system sync
        # whose plain fsync had covered it: a resumed body would find it and publish it).
        assert failed.isdisjoint(recalled)
        problems = [p.kind for p in memory.check_store(store)]
        assert "learned_unjournaled" not in problems, problems

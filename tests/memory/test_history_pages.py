"""``MemoryStore.history_page``: a memory's history a page at a time, oldest first, each event once,
with the same events ``history`` lists whole (a lost update, a forget and an expiry among them)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import memory


def test_pages_list_every_event_once_in_order_as_history_does(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store:
        with store.session(scope="desk", flow="cron") as s:
            expires = int(time.time() * 1000) + 1000  # passed before the history is read
            first = s.learn({"text": "version 0", "expiresMs": expires})
            for n in range(1, 40):
                last = s.update(first.memory_id, {"text": f"version {n}", "tags": [f"v{n}"]})
        with store.session(scope="desk", flow="forgetter") as s:
            s.forget(last.key, reason="the user asked")
        # an update killed before it looked, whose version was retired first: it lost its race
        item = memory.validate({"text": "the update that lost"}, "desk")
        lost_key = memory.finding_id("desk", item)
        jr = store.open_journal()
        _, lease = jr.begin("updater", "desk", {})
        payload = {
            "id": lost_key,
            "scope": "desk",
            "flow": "updater",
            "finding": item.as_json(),
            "learnedMs": int(time.time() * 1000) + 1,
            "memory": first.memory_id,
            "supersedes": last.key,
            "supersedesScope": "desk",
        }
        jr.append(lease, memory.STREAM, payload, key=lost_key)
        time.sleep(max(0.0, expires / 1000 - time.time() + 0.05))
        whole = [e.as_json() for e in store.history(first.key)]
        kinds = {e["kind"] for e in whole}
        assert {"learned", "superseded", "forgotten", "expired", "lost"} <= kinds
        pages = [store.history_page(last.key, limit=7)]
        while pages[-1].next_offset is not None:
            pages.append(store.history_page(first.key, offset=pages[-1].next_offset, limit=7))
        default = store.history_page(first.key)
        past = store.history_page(first.key, offset=len(whole))
        tiny = store.history_page(first.key, max_bytes=1)
        with pytest.raises(memory.ArgumentInvalid, match="offset"):
            store.history_page(first.key, offset=-1)
        for bad in (0, -3, True):
            with pytest.raises(memory.ArgumentInvalid, match="limit"):
                store.history_page(first.key, limit=bad)
    assert [e.as_json() for p in pages for e in p.events] == whole
    assert all(len(p.events) <= 7 and p.total == len(whole) and p.versions == 41 for p in pages)
    assert [p.offset for p in pages] == list(range(0, len(whole), 7))
    assert pages[-1].as_json().keys() == {"key", "events", "total"}
    assert default.as_json()["events"] == whole[: memory.HISTORY_PAGE]
    assert (default.total, len(default.events)) == (len(whole), min(len(whole), memory.HISTORY_PAGE))
    assert past.events == () and past.next_offset is None and past.total == len(whole)
    # a page past its bytes still gives one event, and says where the next starts
    assert [e.as_json() for e in tiny.events] == whole[:1] and tiny.as_json()["nextOffset"] == 1


def test_a_history_checks_only_its_memorys_commits_however_many_its_runs_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A memory's three events in a run of 300 other findings: its history checks its own commits,
    not the run's every one (each check parses and validates the finding again: a page of a memory
    in a long session's run cost as much as checking the whole session)."""
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store:
        with store.session(scope="desk", flow="bulk") as s:
            first = s.learn({"text": "the one memory"})
            for n in range(300):
                s.learn({"text": f"another finding {n}"})
            second = s.update(first.memory_id, {"text": "the one memory, corrected"})
            s.forget(second.key, reason="done with it")
        expected = [(e.kind, e.key) for e in store.history(first.key)]
        checked: list[object] = []
        check = memory._retire.checked_commit
        monkeypatch.setattr(
            memory._retire, "checked_commit", lambda r, where: checked.append(r.id) or check(r, where)
        )
        for runs in (None, [r.run_id for r in store.open_journal().runs()]):
            checked.clear()
            events = store.history(first.key, runs=runs)
            assert [(e.kind, e.key) for e in events] == expected
            assert len(checked) == 2, len(checked)  # the two versions' commits
    assert [k for k, _ in expected] == ["learned", "learned", "superseded", "forgotten"]

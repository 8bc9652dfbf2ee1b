"""A page of scopes (``MemoryStore.scopes``: the dashboard's findings form and ``/api/scopes``) in a
store where many scopes hold only findings that have expired: the page asks the DB for the scopes of
rows neither retired nor expired, so it looks at no such scope (a store of a scope per user whose
notes expire looked at every one of them, one ``recall`` each, on every findings page).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import memory

GONE = 30


def test_a_page_of_scopes_looks_at_no_scope_whose_findings_all_expired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    start = int(time.time() * 1000)
    now = [start]
    store = memory.MemoryStore(tmp_path / "store" / "history.db", clock=lambda: now[0])
    for i in range(GONE):  # sorting before the live one: a page met them first
        with store.session(scope=f"gone-{i:02d}", flow="f") as s:
            s.learn({"text": f"a note that expires {i}", "expiresMs": start + 1000})
    with store.session(scope="live", flow="f") as s:
        s.learn({"text": "a note that stays"})
    store.sync()
    now[0] = start + 2000  # every note of the gone scopes has expired
    looked: list[Any] = []
    search: Any = store._search
    recall = search.recall

    def counted(**kwargs: Any) -> Any:
        looked.append(kwargs.get("scope"))
        return recall(**kwargs)

    monkeypatch.setattr(search, "recall", counted)
    assert store.scopes(limit=1) == ["live"]
    assert looked == ["live"], f"the page looked at {len(looked) - 1} scopes holding nothing live"
    assert store.scopes() == ["live"]
    now[0] = start  # before they expired, every scope is one
    assert store.scopes() == [*(f"gone-{i:02d}" for i in range(GONE)), "live"]
    store.close()

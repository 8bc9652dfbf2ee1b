"""The LangGraph store on two hosts (separate ``db``s) sharing one PostgreSQL journal: an item put
on one host is read, updated and deleted as that one item on the other, with no sync between."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("psycopg")

from flows.langgraph import JournalStore


def test_an_item_put_on_one_host_is_one_item_on_both(tmp_path: Path, postgres_dsn: str) -> None:
    ns = ("users", "u1")
    with (
        JournalStore(db=str(tmp_path / "a" / "history.db"), journal=postgres_dsn) as a,
        JournalStore(db=str(tmp_path / "b" / "history.db"), journal=postgres_dsn) as b,
    ):
        a.put(ns, "prefs", {"drink": "tea"})
        got = b.get(ns, "prefs")
        assert got is not None and got.value == {"drink": "tea"}
        b.put(ns, "prefs", {"drink": "coffee"})  # an update of A's item, not a second item
        for store in (a, b):
            item = store.get(ns, "prefs")
            assert item is not None and item.value == {"drink": "coffee"}
            assert [(i.key, i.value) for i in store.search(ns)] == [("prefs", {"drink": "coffee"})]
        created = a.get(ns, "prefs")
        assert created is not None and got.created_at == created.created_at  # one item all along
        a.delete(ns, "prefs")
        assert b.get(ns, "prefs") is None and b.search(ns) == []
        b.put(ns, "prefs", {"drink": "water"})
        assert [(i.key, i.value) for i in a.search(ns)] == [("prefs", {"drink": "water"})]

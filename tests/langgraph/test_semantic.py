"""`JournalStore` with LangGraph's ``index={"embed", "dims"}``: `search(query=…)` finds items by
meaning as LangGraph's own stores do, through the memory's vectors (a delete takes the item out
of every search, and its vector out of the vectors file); sync and async functions both embed."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

import anyio

import memory
from flows.langgraph import JournalStore
from memory._vectors import vectors_path


def _embed(texts: Sequence[str]) -> list[list[float]]:
    return [[float(v) for v in row] for row in memory.default_embedder().embed(list(texts))]


async def _aembed(texts: list[str]) -> list[list[float]]:
    return _embed(texts)


def test_search_finds_items_by_meaning_and_a_delete_takes_them_out(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    for embed in (_embed, _aembed):
        with JournalStore(db=str(db), index={"embed": embed, "dims": 256, "fields": ["text"]}) as store:
            store.put(("users", "alice"), "allergy", {"text": "The user is allergic to peanuts"})
            store.put(("users", "alice"), "home", {"text": "The user lives in Berlin"})
            store.put(("users", "bob"), "allergy", {"text": "Bob is allergic to shellfish"})
            hits = store.search(("users", "alice"), query="what food should I avoid for this user?")
            assert [h.key for h in hits][:1] == ["allergy"] and hits[0].score is not None
            assert [h.namespace for h in hits] == [("users", "alice")] * len(hits)
            assert store.search(("users",), query="nuts", limit=1)[0].value["text"].endswith("peanuts")
            store.delete(("users", "alice"), "allergy")
            assert "allergy" not in [h.key for h in store.search(("users", "alice"), query="nuts")]
            store.delete(("users", "alice"), "home")
            store.delete(("users", "bob"), "allergy")
    with sqlite3.connect(vectors_path(db)) as conn:
        assert conn.execute("SELECT count(*) FROM vectors").fetchone() == (0,)


def test_async_search_by_meaning(tmp_path: Path) -> None:
    async def main() -> list[str]:
        async with JournalStore(db=str(tmp_path / "h.db"), index={"embed": _embed, "dims": 256}) as store:
            await store.aput(("n",), "a", {"note": "The user is allergic to peanuts"})
            await store.aput(("n",), "b", {"note": "Deploys happen on Fridays"})
            return [h.key for h in await store.asearch(("n",), query="nuts")]

    assert anyio.run(main)[:1] == ["a"]

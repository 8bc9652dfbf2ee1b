"""Store and checkpoint filters agree with LangGraph's SQL stores and savers.

The cases are LangGraph's own (``langgraph-checkpoint-sqlite``'s ``tests/test_store.py`` and
``tests/test_sqlite.py``, which its wheel does not ship, so they are carried here as facts) and
each runs against LangGraph's ``SqliteStore``/``SqliteSaver`` too: where the two disagree, the peer
shows which side is wrong.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.store.sqlite import SqliteStore

from flows.langgraph import FilterInvalid, JournalSaver, JournalStore


@pytest.fixture(params=["journal", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "journal":
        with JournalStore(db=str(tmp_path / "history.db")) as s:
            yield s
    else:
        conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        s = SqliteStore(conn)
        s.setup()
        yield s
        conn.close()


def _keys(items: list[Any]) -> list[str]:
    return sorted(i.key for i in items)


def test_filter_keys_with_hyphens_and_digits_and_dotted_paths(store: Any) -> None:
    store.put(("docs",), "hyphen", {"access-level": "public", "user": {"access-level": "nested"}})
    store.put(("docs",), "digit", {"123abc": "ok", "user": {"123abc": "ok2"}})
    assert _keys(store.search(("docs",), filter={"access-level": "public"})) == ["hyphen"]
    assert _keys(store.search(("docs",), filter={"user.access-level": "nested"})) == ["hyphen"]
    assert _keys(store.search(("docs",), filter={"123abc": "ok"})) == ["digit"]
    assert _keys(store.search(("docs",), filter={"user.123abc": "ok2"})) == ["digit"]
    assert _keys(store.search(("docs",), filter={"user.access-level": "public"})) == []


MALICIOUS_KEYS = [
    "access') = 'public' OR '1'='1' OR json_extract(value, '$.",
    "x') OR '1'='1",
    "x') OR 1=1 --",
    "'; DROP TABLE store; --",
    "a b",
    "a/b",
    "",
]


@pytest.mark.parametrize("key", MALICIOUS_KEYS)
def test_a_malicious_filter_key_is_refused_as_langgraph_refuses_it(store: Any, key: str) -> None:
    store.put(("docs",), "public", {"access": "public"})
    with pytest.raises(ValueError, match="Invalid filter key"):
        store.search(("docs",), filter={key: "dummy"})


def test_a_refused_filter_key_is_coded(tmp_path: Path) -> None:
    with JournalStore(db=str(tmp_path / "h.db")) as store, pytest.raises(FilterInvalid) as caught:
        store.search(("docs",), filter={"x') OR 1=1": "dummy"})
    assert caught.value.code == "langgraph_filter_invalid"


@pytest.mark.parametrize(
    "value",
    [
        "public' OR '1'='1",
        "public'; --",
        "public' UNION SELECT * FROM store --",
        "public\x00' OR '1'='1",
        "''''",
    ],
)
def test_a_malicious_filter_value_is_only_a_value_at_any_depth(store: Any, value: str) -> None:
    store.put(("docs",), "doc1", {"access": "public", "meta": {"access": "public"}})
    store.put(("docs",), "doc2", {"access": "private", "meta": {"access": "private"}})
    assert store.search(("docs",), filter={"access": value}) == []
    assert store.search(("docs",), filter={"meta.access": value}) == []
    store.put(("docs",), "doc4", {"meta": {"title": "O'Brien's Document"}})
    assert _keys(store.search(("docs",), filter={"meta.title": "O'Brien's Document"})) == ["doc4"]


def test_numeric_operators_with_infinities_nan_and_huge_numbers_on_a_dotted_path(store: Any) -> None:
    for i, price in enumerate((10, 20, 30)):
        store.put(("items",), f"item{i + 1}", {"stock": {"price": price, "quantity": 5 - i}})
    assert _keys(store.search(("items",), filter={"stock.price": {"$gt": 15}})) == ["item2", "item3"]
    assert len(store.search(("items",), filter={"stock.price": {"$lt": float("inf")}})) == 3
    assert len(store.search(("items",), filter={"stock.price": {"$gt": float("-inf")}})) == 3
    assert store.search(("items",), filter={"stock.price": {"$eq": float("nan")}}) == []
    assert len(store.search(("items",), filter={"stock.price": {"$lt": 10**100}})) == 3
    assert _keys(store.search(("items",), filter={"stock.price": {"$gte": 20, "$lte": 20}})) == ["item2"]
    assert _keys(store.search(("items",), filter={"stock.price": {"$ne": 20}})) == ["item1", "item3"]
    assert _keys(store.search(("items",), filter={"stock.price": {"$eq": 30.0}})) == ["item3"]
    store.put(("items",), "item4", {"stock": {"price": -10, "quantity": 0}})
    assert _keys(store.search(("items",), filter={"stock.price": {"$lt": 0}})) == ["item4"]


def test_operators_on_a_dotted_path(store: Any) -> None:
    store.put(("items",), "a", {"stats": {"score": 4.5, "label": "b"}})
    store.put(("items",), "b", {"stats": {"score": 2.0, "label": "a"}})
    assert _keys(store.search(("items",), filter={"stats.score": {"$gt": 3}})) == ["a"]
    assert _keys(store.search(("items",), filter={"stats.label": {"$lt": "b"}})) == ["b"]
    assert _keys(store.search(("items",), filter={"stats.score": {"$gte": 2.0, "$lt": 3}})) == ["b"]


def test_boolean_list_and_string_filters_on_dotted_paths(store: Any) -> None:
    store.put(("flags",), "flag1", {"f": {"active": True, "tags": ["draft"], "author": "John Doe"}})
    store.put(("flags",), "flag2", {"f": {"active": False, "tags": ["final"], "author": "Jane"}})
    store.put(("flags",), "flag3", {"f": {"active": True, "tags": ["draft"], "author": "John Doe"}})
    assert _keys(store.search(("flags",), filter={"f.active": True})) == ["flag1", "flag3"]
    assert _keys(store.search(("flags",), filter={"f.active": False})) == ["flag2"]
    assert _keys(store.search(("flags",), filter={"f.author": "John Doe"})) == ["flag1", "flag3"]


def test_a_long_string_value_is_found_by_equality(store: Any) -> None:
    long = "x" * 300  # longer than what the memory's metadata index keeps
    store.put(("docs",), "long", {"body": long})
    assert _keys(store.search(("docs",), filter={"body": long})) == ["long"]


@pytest.fixture(params=["journal", "sqlite"])
def saver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "journal":
        with JournalSaver(db=str(tmp_path / "history.db")) as s:
            yield s
    else:
        with SqliteSaver.from_conn_string(":memory:") as s:
            yield s


def test_checkpoint_metadata_filters_take_dotted_paths(saver: Any) -> None:
    cfg = {"configurable": {"thread_id": "thread-hyphen-digit", "checkpoint_ns": ""}}
    metadata = {"access-level": "public", "user": {"access-level": "nested", "123abc": "ok2"}, "123abc": "ok"}
    saver.put(cfg, empty_checkpoint(), metadata, {})
    for filter in (
        {"access-level": "public"},
        {"user.access-level": "nested"},
        {"123abc": "ok"},
        {"user.123abc": "ok2"},
    ):
        assert len(list(saver.list(None, filter=filter))) == 1, filter
    assert list(saver.list(None, filter={"user.access-level": "public"})) == []


@pytest.mark.parametrize("key", MALICIOUS_KEYS[:5])
def test_a_malicious_checkpoint_filter_key_is_refused(saver: Any, key: str) -> None:
    saver.put(
        {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
        empty_checkpoint(),
        {"access": "public"},
        {},
    )
    assert len(list(saver.list(None, filter={"access": "public"}))) == 1
    with pytest.raises(ValueError, match="Invalid filter key"):
        list(saver.list(None, filter={key: "dummy"}))

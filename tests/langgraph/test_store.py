"""``JournalStore``: LangGraph's store interface on the findings memory."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import InvalidNamespaceError, PutOp
from langgraph.store.memory import InMemoryStore

from flows.langgraph import (
    ConfigInvalid,
    FilterInvalid,
    JournalStore,
    NamespaceInvalid,
    ValueTooLarge,
    ValueUnserializable,
)
from flows.langgraph._store import SCOPE_PREFIX, scope_of
from memory import STREAM as LEARN_STREAM
from tests.langgraph.helpers import next_millisecond


@pytest.fixture
def store(journal_location: str, tmp_path: Path) -> Any:
    with JournalStore(db=str(tmp_path / "history.db"), journal=journal_location) as s:
        yield s


# -- against LangGraph's InMemoryStore ---------------------------------------------------------

_NAMESPACES = [("a",), ("a", "b"), ("a", "b", "c"), ("a", "x"), ("b",), ("b", "a"), ("c", "a", "b")]
_KEYS = ["k1", "k2", "k3", "k4"]


def _random_value(rng: random.Random) -> dict[str, Any]:
    return {
        "color": rng.choice(["red", "green", "blue"]),
        "size": rng.randrange(5),
        "tags": rng.sample(["x", "y", "z"], rng.randrange(3)),
        "nested": {"deep": rng.choice([True, False])},
        "text": rng.choice(["the fee is low", "fees were high", "nothing to say"]),
    }


def _random_filter(rng: random.Random) -> dict[str, Any] | None:
    return rng.choice(
        [
            None,
            {"color": rng.choice(["red", "green", "blue"])},
            {"size": {"$gte": rng.randrange(5)}},
            {"size": {"$lt": 3}, "color": {"$ne": "red"}},
            {"nested": {"deep": True}},
            {"tags": ["x", "y"]},
        ]
    )


def _items(found: list[Any]) -> set[tuple[tuple[str, ...], str, str]]:
    import json

    return {(tuple(i.namespace), i.key, json.dumps(i.value, sort_keys=True)) for i in found}


def _live_copy(reference: InMemoryStore) -> InMemoryStore:
    """A fresh InMemoryStore holding just the reference's items: InMemoryStore also lists
    namespaces it has emptied or merely been asked about; a namespace is listed here (and by
    LangGraph's SQL stores) only while it holds an item."""
    copy = InMemoryStore()
    for item in reference.search((), limit=10_000):
        copy.put(tuple(item.namespace), item.key, item.value)
    return copy


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_store_answers_like_langgraphs_in_memory_store_on_random_operations(
    store: JournalStore, seed: int
) -> None:
    rng = random.Random(seed)
    reference = InMemoryStore()
    for step in range(50):
        ns, key = rng.choice(_NAMESPACES), rng.choice(_KEYS)
        what = rng.choices(["put", "delete", "get", "search", "list"], weights=[5, 2, 3, 3, 2])[0]
        where = f"seed {seed} step {step}: {what} {ns} {key}"
        if what == "put":
            value = _random_value(rng)
            store.put(ns, key, value)
            reference.put(ns, key, value)
        elif what == "delete":
            store.delete(ns, key)
            reference.delete(ns, key)
        elif what == "get":
            ours, theirs = store.get(ns, key), reference.get(ns, key)
            assert (ours and (ours.namespace, ours.key, ours.value)) == (
                theirs and (theirs.namespace, theirs.key, theirs.value)
            ), where
        elif what == "search":
            prefix = ns[: rng.randrange(len(ns) + 1)]
            flt = _random_filter(rng)
            ours_found = store.search(prefix, filter=flt, limit=1000)
            assert _items(ours_found) == _items(reference.search(prefix, filter=flt, limit=1000)), where
            assert len(ours_found) == len(_items(ours_found)), where  # each item once
        else:
            prefix = rng.choice([None, ("a",), ("a", "b"), ("b",), ("*", "a")])
            suffix = rng.choice([None, ("b",), ("a",)])
            depth = rng.choice([None, 1, 2])
            wanted = _live_copy(reference).list_namespaces(
                prefix=prefix, suffix=suffix, max_depth=depth, limit=1000
            )
            ours_ns = store.list_namespaces(prefix=prefix, suffix=suffix, max_depth=depth, limit=1000)
            assert ours_ns == wanted, where
    final = _items(store.search((), limit=1000))
    assert final == _items(reference.search((), limit=1000))


def test_pages_of_a_search_cover_every_match_once_newest_first(store: JournalStore) -> None:
    for i in range(7):
        next_millisecond()
        store.put(("p",), f"k{i}", {"i": i, "even": i % 2 == 0})
    next_millisecond()  # an update makes k2 the newest
    store.put(("p",), "k2", {"i": 2, "even": True, "again": 1})
    pages = [store.search(("p",), filter={"even": True}, limit=2, offset=o) for o in (0, 2, 4)]
    keys = [i.key for page in pages for i in page]
    assert keys == ["k2", "k6", "k4", "k0"]


# -- journal-first, history, citations ---------------------------------------------------------


def test_put_update_delete_are_a_learn_a_supersede_and_a_forget_with_citations(store: JournalStore) -> None:
    store.put(("docs",), "d1", {"text": "first draft"})
    first = store.finding(("docs",), "d1")
    assert first is not None
    store.put(("docs",), "d1", {"text": "second draft"})
    second = store.finding(("docs",), "d1")
    assert second is not None and second.key != first.key
    item = store.get(("docs",), "d1")
    assert item is not None and item.value == {"text": "second draft"}
    assert item.created_at < item.updated_at or item.created_at == item.updated_at

    # Each version is a record of the journal; the finding cites it.
    backend = store.memory.open_journal()
    for found in (first, second):
        records = backend.read(found.citation.run_id, found.citation.stream)
        assert found.citation.stream == LEARN_STREAM
        assert any(r.id == found.citation.id for r in records)

    store.delete(("docs",), "d1")
    assert store.get(("docs",), "d1") is None
    assert store.finding(("docs",), "d1") is None
    # one memory: the item's versions, oldest first, whichever version's key is asked
    kinds = [(e.kind, e.key) for e in store.memory.history(first.key)]
    assert kinds == [
        ("learned", first.key),
        ("learned", second.key),
        ("superseded", first.key),
        ("forgotten", second.key),
    ]
    assert store.memory.history(second.key) == store.memory.history(first.key)
    assert second.memory_id == first.key


def test_putting_the_same_value_again_journals_nothing(store: JournalStore) -> None:
    store.put(("n",), "k", {"v": 1})
    found = store.finding(("n",), "k")
    assert found is not None
    before = len(store.memory.open_journal().read(found.citation.run_id, LEARN_STREAM))
    store.put(("n",), "k", {"v": 1})
    assert len(store.memory.open_journal().read(found.citation.run_id, LEARN_STREAM)) == before
    assert store.finding(("n",), "k") == found


def test_a_query_search_ranks_with_the_memorys_why(store: JournalStore) -> None:
    store.put(("kb",), "a", {"text": "the exchange fee is 0.3 percent"})
    store.put(("kb",), "b", {"text": "rain follows a falling barometer"})
    store.put(("kb", "sub"), "c", {"text": "a swap pays the fee", "other": {"note": "swap only"}})
    found = store.search(("kb",), query="which fee does a swap pay", limit=5)
    assert [i.key for i in found] == ["c", "a"]  # more of the question's words first
    assert found[0].score is not None and found[1].score is not None and found[0].score > found[1].score
    assert store.search(("kb",), query="barometer", filter={"text": {"$ne": "x"}}, limit=5)[0].key == "b"
    assert store.search(("kb", "sub"), query="barometer", limit=5) == []
    assert [i.key for i in store.search(("kb",), query="fee", limit=5, offset=1)] == ["a"]


def test_another_store_on_the_same_files_sees_every_write(journal_location: str, tmp_path: Path) -> None:
    db = str(tmp_path / "history.db")
    with (
        JournalStore(db=db, journal=journal_location) as one,
        JournalStore(db=db, journal=journal_location) as two,
    ):
        one.put(("s",), "k", {"v": 1})
        item = two.get(("s",), "k")
        assert item is not None and item.value == {"v": 1}
        two.put(("s",), "k", {"v": 2})
        item = one.get(("s",), "k")
        assert item is not None and item.value == {"v": 2}
        one.delete(("s",), "k")
        assert two.get(("s",), "k") is None


def test_a_put_overtaken_on_every_attempt_is_still_written_and_kept(
    journal_location: str, tmp_path: Path
) -> None:
    """Another process replaces the item between each of this put's reads and its write (the race
    made certain: the other store's put runs just before each of this store's supersedes). The put
    returns; so its value must have been written, and it is the newest, so the item holds it."""
    db = str(tmp_path / "history.db")
    with (
        JournalStore(db=db, journal=journal_location) as mine,
        JournalStore(db=db, journal=journal_location) as other,
    ):
        other.put(("s",), "k", {"v": "first"})
        learn = mine.memory.learn
        turns = iter(range(1000))

        def overtaken(finding: Any, root: Any, *, supersedes: str | None = None) -> Any:
            if supersedes is not None:
                other.put(("s",), "k", {"v": f"other-{next(turns)}"})
            return learn(finding, root, supersedes=supersedes)

        mine.memory.learn = overtaken  # type: ignore[method-assign]
        mine.put(("s",), "k", {"v": "mine"})
        mine.memory.learn = learn  # type: ignore[method-assign]
        assert next(turns) > 1  # overtaken again and again
        for store in (mine, other):
            item = store.get(("s",), "k")
            assert item is not None and item.value == {"v": "mine"}
            assert [i.value for i in store.search(("s",))] == [{"v": "mine"}]
        found = other.finding(("s",), "k")
        assert found is not None
        assert [e.kind for e in other.memory.history(found.key)] == ["learned"]


def test_the_async_methods_run_the_same_operations(store: JournalStore) -> None:
    async def go() -> list[Any]:
        await store.aput(("as",), "k", {"v": 1})
        got = await store.aget(("as",), "k")
        found = await store.asearch(("as",), filter={"v": 1})
        spaces = await store.alist_namespaces(prefix=("as",))
        await store.adelete(("as",), "k")
        return [got, found, spaces, await store.aget(("as",), "k")]

    got, found, spaces, gone = asyncio.run(go())
    assert got.value == {"v": 1} and [i.key for i in found] == ["k"]
    assert spaces == [("as",)] and gone is None


def test_items_with_a_ttl_expire_and_a_read_refreshes_them(journal_location: str, tmp_path: Path) -> None:
    now = [1_000_000_000_000]
    with JournalStore(
        db=str(tmp_path / "h.db"),
        journal=journal_location,
        ttl={"default_ttl": 1.0, "refresh_on_read": True},
        clock=lambda: now[0],
    ) as store:
        store.put(("t",), "old", {"v": 1})  # expired long ago, by the real clock
        assert store.get(("t",), "old") is None
        now[0] = time.time_ns() // 1_000_000  # the memory judges expiry by the real clock
        store.put(("t",), "fresh", {"v": 2})
        first = store.finding(("t",), "fresh")
        assert first is not None and first.expires_ms == now[0] + 60_000
        now[0] += 30_000
        assert store.get(("t",), "fresh") is not None  # refreshes: a new expiry from now
        second = store.finding(("t",), "fresh")
        assert second is not None and second.expires_ms == now[0] + 60_000
        store.put(("t",), "forever", {"v": 3}, ttl=None)
        forever = store.finding(("t",), "forever")
        assert forever is not None and forever.expires_ms is None


# -- bad input ---------------------------------------------------------------------------------


def _written(store: JournalStore) -> tuple[list[str], int]:
    return store.memory.scopes(), len(store.memory.open_journal().runs())


@pytest.mark.parametrize(
    "namespace",
    [("a.b",), ("",), ("a", ""), (), ("langgraph", "x"), ("nul\x00",), ("x" * 300,), (1,)],
)
def test_a_namespace_langgraph_refuses_raises_its_own_error_and_writes_nothing(
    store: JournalStore, namespace: Any
) -> None:
    before = _written(store)
    with pytest.raises(InvalidNamespaceError):
        store.put(namespace, "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(namespace, "k", {"v": 1})])
    assert _written(store) == before


@pytest.mark.parametrize("label", ["a.b", "nul\x00", ""])
def test_every_method_that_looks_at_a_namespace_refuses_a_label_langgraph_refuses_with_a_code(
    store: JournalStore, label: str
) -> None:
    """LangGraph's own methods look at the labels before ``batch``: each refusal carries the code."""
    calls: list[Any] = [
        lambda: store.get((label,), "k"),
        lambda: store.search((label,)),
        lambda: store.delete((label,), "k"),
        lambda: store.list_namespaces(prefix=(label,)),
        lambda: store.list_namespaces(suffix=(label,)),
        lambda: store.put((label,), "k", {"v": 1}),
        lambda: asyncio.run(store.aget((label,), "k")),
        lambda: asyncio.run(store.asearch((label,))),
        lambda: asyncio.run(store.adelete((label,), "k")),
        lambda: asyncio.run(store.alist_namespaces(prefix=(label,))),
        lambda: asyncio.run(store.aput((label,), "k", {"v": 1})),
    ]
    before = _written(store)
    for call in calls:
        with pytest.raises(NamespaceInvalid) as raised:
            call()
        assert raised.value.code == "langgraph_namespace_invalid"
        assert isinstance(raised.value, InvalidNamespaceError)  # LangGraph's own error still
    assert _written(store) == before


@pytest.mark.parametrize(
    "value",
    [
        {"when": __import__("datetime").datetime(2026, 1, 1)},
        {"big": 2**70},
        {"nan": float("nan")},
        {"deep": {"er": {"set": {1, 2}}}},
        {"": "empty key"},
        {1: "int key"},
        {"surrogate": "\udc80"},
    ],
)
def test_a_value_that_is_not_plain_json_raises_unserializable_and_writes_nothing(
    store: JournalStore, value: Any
) -> None:
    store.put(("ok",), "k", {"v": 1})
    before = _written(store)
    with pytest.raises(ValueUnserializable) as caught:
        store.put(("ok",), "k", value)
    assert caught.value.code == "langgraph_value_unserializable"
    assert "value" in caught.value.message
    assert _written(store) == before
    item = store.get(("ok",), "k")
    assert item is not None and item.value == {"v": 1}


def test_an_oversized_value_raises_value_too_large_and_writes_nothing(store: JournalStore) -> None:
    before = _written(store)
    with pytest.raises(ValueTooLarge) as caught:
        store.put(("ok",), "k", {"blob": "x" * 20_000})
    assert caught.value.code == "langgraph_value_too_large" and caught.value.size > caught.value.limit
    assert _written(store) == before


def test_a_bad_batch_writes_none_of_its_puts(store: JournalStore) -> None:
    with pytest.raises(ValueUnserializable):
        store.batch([PutOp(("ok",), "a", {"v": 1}), PutOp(("ok",), "b", {"v": object()})])
    assert store.get(("ok",), "a") is None


def test_unsupported_configuration_and_filters_raise_config_invalid(
    store: JournalStore, tmp_path: Path
) -> None:
    with pytest.raises(ConfigInvalid, match="both 'embed' and 'dims'"):
        JournalStore(db=str(tmp_path / "x.db"), index={"embed": lambda texts: [[0.0] * 3]})
    with pytest.raises(ConfigInvalid, match="langchain"):
        JournalStore(db=str(tmp_path / "x.db"), index={"dims": 3, "embed": "openai:text-embedding-3-small"})
    store.put(("f",), "k", {"v": 1})
    with pytest.raises(FilterInvalid, match="Unsupported operator"):  # a ValueError, as LangGraph's
        store.search(("f",), filter={"v": {"$regex": "1"}})


def test_namespaces_are_scopes_under_the_store_prefix(store: JournalStore) -> None:
    store.put(("users", "u-1", "prefs"), "theme", {"v": "dark"})
    assert scope_of(("users", "u-1", "prefs")) == SCOPE_PREFIX + "users.u-1.prefs"
    assert SCOPE_PREFIX + "users.u-1.prefs" in store.memory.scopes()


def test_use_after_close_is_journal_closed_and_close_is_safe_twice(
    journal_location: str, tmp_path: Path
) -> None:
    import journal

    store = JournalStore(db=str(tmp_path / "history.db"), journal=journal_location)
    store.put(("a",), "k", {"v": 1})
    store.close()
    store.close()
    for call in (lambda: store.get(("a",), "k"), lambda: asyncio.run(store.aget(("a",), "k"))):
        with pytest.raises(journal.JournalClosed) as err:
            call()
        assert err.value.code == "journal_closed"
        assert isinstance(err.value, RuntimeError)  # what it was before it had a code
        assert "make a new one" in str(err.value)


@pytest.mark.parametrize("key", ["\x01" * 1024, "鍵" * 1024], ids=["control", "cjk"])
def test_a_long_key_beside_a_value_near_the_bound_raises_value_too_large(
    store: JournalStore, key: str
) -> None:
    """The key lives in the finding's metadata with the value: both count toward the bound, so
    the store refuses the pair with its own code rather than the memory with another."""
    before = _written(store)
    with pytest.raises(ValueTooLarge) as caught:
        store.put(("ok",), key, {"blob": "x" * 14_000})
    assert caught.value.code == "langgraph_value_too_large" and caught.value.size > caught.value.limit
    assert _written(store) == before
    store.put(("ok",), key, {"blob": "x" * 9_000})  # the same key with a smaller value fits
    item = store.get(("ok",), key)
    assert item is not None and item.value == {"blob": "x" * 9_000}


def test_a_filter_object_with_a_non_string_key_matches_nothing(store: JournalStore) -> None:
    store.put(("ok",), "k", {"user": {"name": "ann"}, "n": 1})
    assert store.search(("ok",), filter={"user": {1: None}}) == []
    assert store.search(("ok",), filter={"user": {"name": "ann", 2: "x"}}) == []
    assert [i.key for i in store.search(("ok",), filter={"user": {"name": "ann"}})] == ["k"]


HOSTILE_PAGES: dict[str, tuple[str, dict[str, Any]]] = {
    "search offset -2": ("search", {"offset": -2}),
    "search limit -1": ("search", {"limit": -1}),
    "search limit a string": ("search", {"limit": "3"}),
    "search offset a float": ("search", {"offset": 1.5}),
    "search limit True": ("search", {"limit": True}),
    "list_namespaces offset -1": ("list_namespaces", {"offset": -1}),
    "list_namespaces limit -1": ("list_namespaces", {"limit": -1}),
    "list_namespaces max_depth 0": ("list_namespaces", {"max_depth": 0}),
    "list_namespaces max_depth -1": ("list_namespaces", {"max_depth": -1}),
    "list_namespaces max_depth a string": ("list_namespaces", {"max_depth": "2"}),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_PAGES))
def test_a_page_that_is_not_non_negative_integers_is_config_invalid_sync_and_async(
    store: JournalStore, name: str
) -> None:
    """A negative offset or limit would slice from the end (another page than asked for) and a
    non-integer fail with a bare TypeError: both are refused, by ``batch`` and ``abatch`` alike."""
    for i in range(4):
        store.put(("p",), f"k{i}", {"v": i})
    method, kwargs = HOSTILE_PAGES[name]
    args = (("p",),) if method == "search" else ()
    with pytest.raises(ConfigInvalid) as caught:
        getattr(store, method)(*args, **kwargs)
    assert caught.value.code == "langgraph_config_invalid"
    with pytest.raises(ConfigInvalid):
        asyncio.run(getattr(store, "a" + method)(*args, **kwargs))


@pytest.mark.parametrize("bad", [[("v", 1)], "v=1", 5])
def test_a_filter_that_is_not_a_mapping_is_filter_invalid(store: JournalStore, bad: Any) -> None:
    store.put(("f",), "k", {"v": 1})
    with pytest.raises(FilterInvalid) as caught:
        store.search(("f",), filter=bad)
    assert caught.value.code == "langgraph_filter_invalid"
    with pytest.raises(FilterInvalid):
        asyncio.run(store.asearch(("f",), filter=bad))


def test_two_live_versions_of_one_item_read_as_its_newest_everywhere(tmp_path: Path) -> None:
    # Puts racing on several hosts can leave two versions of an item live until its next put; a
    # search must show the item once, as get does (its newest), never an older version a filter
    # or a query matched.
    with JournalStore(db=str(tmp_path / "history.db")) as store:
        ns = ("race",)
        store.put(ns, "k", {"colour": "red", "n": 1})
        older = store.finding(ns, "k")
        assert older is not None
        scope = older.scope
        finding = {
            "text": older.text.replace("red", "blue"),
            "source": older.source,
            "metadata": {**older.metadata, "value": {"colour": "blue", "n": 2}, "v.colour": "blue", "v.n": 2},
        }
        with store.memory.session(scope=scope, flow="race") as s:
            s.learn(finding)  # beside the first, as a put that lost every race does
        assert len(store.memory.recall(scope=scope, limit=None)) == 2
        got = store.get(ns, "k")
        assert got is not None and got.value["colour"] == "blue"
        assert [i.value["colour"] for i in store.search(ns)] == ["blue"]
        assert [i.value["colour"] for i in store.search(ns, filter={"colour": "red"})] == []
        assert [i.value["n"] for i in store.search(ns, filter={"n": 1})] == []
        assert [i.value["colour"] for i in store.search(ns, query="blue")] == ["blue"]
        assert [i.value["colour"] for i in store.search(ns, query="red")] == []


def test_a_search_page_skips_older_live_versions_and_looks_up_only_what_the_page_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An older live version (a lost race) is skipped before offset and limit count, so paging
    # shows each item once; and whether a match is its item's newest is asked only until the page
    # is full: a page of 3 over 60 matches costs a few look-ups, not 60.
    with JournalStore(db=str(tmp_path / "history.db")) as store:
        ns = ("paged",)
        for i in range(60):
            store.put(ns, f"k{i:02}", {"colour": "red", "n": i})
        older = store.finding(ns, "k30")
        assert older is not None
        with store.memory.session(scope=older.scope, flow="race") as s:
            s.learn(  # a newer version of k30 beside the first, in another colour
                {
                    "text": older.text,
                    "source": older.source,
                    "metadata": {**older.metadata, "value": {"colour": "blue", "n": 30}, "v.colour": "blue"},
                }
            )
        pages = [store.search(ns, filter={"colour": "red"}, limit=7, offset=o) for o in range(0, 63, 7)]
        keys = [item.key for page in pages for item in page]
        # newest first: puts made within one millisecond (the commit time's grain) list either way
        when = {item.key: item.updated_at for page in pages for item in page}
        assert [when[k] for k in keys] == sorted(when.values(), reverse=True)
        assert len(set(keys)) == len(keys)
        assert sorted(keys, key=lambda k: (when[k], k), reverse=True) == [
            f"k{i:02}" for i in range(59, -1, -1) if i != 30
        ]
        calls = []
        real = store.memory.recall

        def counted(**kwargs: Any) -> Any:
            calls.append(kwargs)
            return real(**kwargs)

        monkeypatch.setattr(store.memory, "recall", counted)
        assert [i.key for i in store.search(ns, filter={"colour": "red"}, limit=3)] == keys[:3]
        assert len(calls) <= 5, calls

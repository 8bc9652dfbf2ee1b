"""Inputs to ``JournalStore`` that LangGraph lets through and the memory cannot hold.

A TTL that is NaN, infinite, negative or past what an expiry can say; a lone surrogate in a
namespace label or a key; a label or key far too long: each is a coded error, raised before
anything is written, never a raw ``ValueError``/``OverflowError``/``UnicodeEncodeError``. A bad
namespace is also LangGraph's ``InvalidNamespaceError``. Reads of such a namespace or key find
nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import InvalidNamespaceError, ListNamespacesOp, MatchCondition, PutOp, SearchOp

from flows.langgraph import ConfigInvalid, JournalStore, NamespaceInvalid
from staging import CodedError


@pytest.fixture
def store(tmp_path: Path) -> Iterator[JournalStore]:
    with JournalStore(db=str(tmp_path / "history.db")) as s:
        yield s


def _journaled(store: JournalStore) -> int:
    backend = store.memory.open_journal()
    return sum(len(backend.read(r.run_id, s)) for r in backend.runs() for s in backend.streams(r.run_id))


@pytest.mark.parametrize(
    "ttl", [float("nan"), float("inf"), float("-inf"), -1, 0, -0.0, 10.0**300, 2**80, True]
)
def test_a_ttl_that_is_not_a_positive_finite_number_of_minutes_is_config_invalid(
    store: JournalStore, ttl: Any
) -> None:
    store.put(("ns",), "other", {"a": 1})
    before = _journaled(store)
    with pytest.raises(ConfigInvalid) as caught:
        store.put(("ns",), "k", {"a": 1}, ttl=ttl)
    assert caught.value.code == "langgraph_config_invalid"
    assert isinstance(caught.value, CodedError) and isinstance(caught.value, ValueError)
    assert "TTL" in caught.value.message
    assert _journaled(store) == before
    assert store.get(("ns",), "k") is None


def test_a_default_ttl_that_is_nan_is_config_invalid_at_put(tmp_path: Path) -> None:
    with (
        JournalStore(db=str(tmp_path / "h.db"), ttl={"default_ttl": float("nan")}) as store,
        pytest.raises(ConfigInvalid),
    ):
        store.put(("ns",), "k", {"a": 1})


BAD_NAMESPACES: dict[str, tuple[str, ...]] = {
    "a lone surrogate": ("users", "a\ud800b"),
    "a lone low surrogate first": ("\udc80",),
    "a huge label": ("x" * 100_000,),
    "many labels": tuple("x" * 10 for _ in range(100)),
}


@pytest.mark.parametrize("name", sorted(BAD_NAMESPACES))
def test_a_namespace_the_memory_cannot_hold_is_namespace_invalid_and_langgraphs_error(
    store: JournalStore, name: str
) -> None:
    namespace = BAD_NAMESPACES[name]
    for call in (
        lambda: store.put(namespace, "k", {"a": 1}),
        lambda: store.batch([PutOp(namespace, "k", {"a": 1})]),
    ):
        with pytest.raises(NamespaceInvalid) as caught:
            call()
        assert isinstance(caught.value, InvalidNamespaceError)
        assert caught.value.code == "langgraph_namespace_invalid"
        assert len(caught.value.message) < 600
    assert store.get(namespace, "k") is None
    assert store.search(namespace) == []
    assert store.list_namespaces(prefix=namespace) == []
    store.delete(namespace, "k")
    assert _journaled(store) == 0


def test_namespaces_langgraph_refuses_are_coded_too(store: JournalStore) -> None:
    """Through ``batch`` and through ``put``/``aput``, whose own look (LangGraph's, before
    ``batch``) raised its uncoded ``InvalidNamespaceError``."""
    for namespace in [("a.b",), ("",), ("langgraph", "x"), ("a\x00",)]:
        for call in (
            lambda ns=namespace: store.batch([PutOp(ns, "k", {"a": 1})]),
            lambda ns=namespace: store.put(ns, "k", {"a": 1}),
            lambda ns=namespace: asyncio.run(store.aput(ns, "k", {"a": 1})),
        ):
            with pytest.raises(NamespaceInvalid) as caught:
                call()
            assert caught.value.code == "langgraph_namespace_invalid"
    assert _journaled(store) == 0


@pytest.mark.parametrize("key", ["k\ud800", "\udfff", "k" * 1025, ""])
def test_a_key_the_memory_cannot_hold_is_config_invalid_and_reads_find_nothing(
    store: JournalStore, key: str
) -> None:
    with pytest.raises(ConfigInvalid) as caught:
        store.put(("ns",), key, {"a": 1})
    assert caught.value.code == "langgraph_config_invalid"
    assert store.get(("ns",), key) is None
    store.delete(("ns",), key)
    assert _journaled(store) == 0


def test_a_lone_surrogate_in_a_query_or_filter_finds_nothing_rather_than_failing(store: JournalStore) -> None:
    store.put(("ns",), "k", {"a": "text"})
    store.search(("ns",), query="te\ud800xt")  # ranked: may match "te"; must not raise
    assert store.search(("ns",), filter={"a": "te\ud800xt"}) == []


@pytest.mark.parametrize("key", [" ", "\n", "\t \r", "\u3000", "\x1c", "\u2028"])
def test_a_key_of_whitespace_alone_holds_a_value_without_text(store: JournalStore, key: str) -> None:
    # LangGraph takes any string as a key; a value without strings is ranked by its key, and the
    # memory refuses a finding whose text is blank: the key is the text as JSON (quoted) instead
    store.put(("ns",), key, {"n": 1})
    store.put(("ns",), key + "x", {"n": 2}, index=False)
    store.put(("ns",), key + "y", {"text": "words"}, index=False)
    for k, n in ((key, 1), (key + "x", 2)):
        got = store.get(("ns",), k)
        assert got is not None and got.key == k and got.value == {"n": n}
    assert {i.key for i in store.search(("ns",))} == {key, key + "x", key + "y"}
    store.put(("ns",), key, {"n": 1})  # the same value again: nothing new is journaled
    before = _journaled(store)
    store.put(("ns",), key, {"n": 1})
    assert _journaled(store) == before
    store.delete(("ns",), key)
    assert store.get(("ns",), key) is None


def test_a_string_where_a_namespace_belongs_is_refused_not_read_as_its_characters(
    store: JournalStore,
) -> None:
    # ``search("us")`` read the prefix as its characters, the namespace ("u", "s"), and returned
    # that namespace's items; a listing's prefix or suffix likewise
    store.put(("u", "s"), "k", {"v": "theirs"})
    store.put(("us",), "k", {"v": "ours"})
    for call in (
        lambda: store.search("us"),
        lambda: store.list_namespaces(prefix="us"),  # type: ignore[arg-type]
        lambda: store.list_namespaces(suffix="s"),  # type: ignore[arg-type]
        lambda: store.batch([SearchOp(("us", 1))]),  # type: ignore[arg-type]
        lambda: store.batch([ListNamespacesOp(match_conditions=("us",))]),  # type: ignore[arg-type]
        lambda: store.batch([ListNamespacesOp(match_conditions=(MatchCondition("infix", ("us",)),))]),  # type: ignore[arg-type]
    ):
        with pytest.raises(ConfigInvalid) as caught:
            call()
        assert caught.value.code == "langgraph_config_invalid"
    assert [i.value for i in store.search(("us",))] == [{"v": "ours"}]
    assert [i.value for i in store.search(["us"])] == [{"v": "ours"}]  # type: ignore[arg-type]


def test_a_put_or_delete_op_of_another_shape_is_coded_before_anything_runs(store: JournalStore) -> None:
    # a list namespace or an unhashable key in a delete failed with a bare TypeError
    store.put(("ns",), "k", {"v": 1})
    bad: list[Any] = [
        (PutOp(["ns"], "k", None), NamespaceInvalid),  # type: ignore[arg-type]
        (PutOp(["ns"], "k", {"v": 2}), NamespaceInvalid),  # type: ignore[arg-type]
        (PutOp(("ns",), ["k"], None), ConfigInvalid),  # type: ignore[arg-type]
        (PutOp(("ns",), 5, None), ConfigInvalid),  # type: ignore[arg-type]
    ]
    before = _journaled(store)
    for op, error in bad:
        with pytest.raises(error):
            store.batch([PutOp(("ns",), "k", None), op])  # nothing runs: the delete beside it neither
    assert _journaled(store) == before
    got = store.get(("ns",), "k")
    assert got is not None and got.value == {"v": 1}


@pytest.mark.parametrize(
    "value",
    [{"\ud800": "x"}, {"outer": {"in\udcffner": 1}}, {"list": [{"\ud83d": None}]}],
    ids=["top", "nested", "in-a-list"],
)
def test_a_lone_surrogate_in_a_values_key_is_value_unserializable_and_nothing_is_written(
    store: JournalStore, value: dict[str, Any]
) -> None:
    from flows.langgraph import ValueUnserializable

    with pytest.raises(ValueUnserializable, match="lone surrogate") as caught:
        store.put(("ns",), "k", value)
    assert caught.value.code == "langgraph_value_unserializable"
    with pytest.raises(ValueUnserializable):
        asyncio.run(store.aput(("ns",), "k", value))
    assert store.get(("ns",), "k") is None and _journaled(store) == 0

"""Reads filtered by several tags (all must match) and by metadata equality, on history-DB rows and
unsynced files alike, with the limit applied after the merge; bad filters refused."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import memory
from memory import _db
from tests.memory.conftest import Clock

SYMBOLS = ["ETH", "BTC", "SOL"]
TAGS = ["gas", "fees", "risk", "ops"]


@pytest.fixture
def store(db: Path, clock: Clock, journal_location: str) -> Iterator[memory.MemoryStore]:
    """A store over ``db`` whose journal is each backend in turn."""
    with memory.MemoryStore(db, journal=journal_location, clock=clock) as s:
        yield s


def _findings(n: int) -> list[dict[str, Any]]:
    rng = random.Random(14)
    out = []
    for i in range(n):
        meta: dict[str, Any] = {"symbol": rng.choice(SYMBOLS), "size": rng.choice([1, 2, 2.0, 3])}
        if i % 3 == 0:
            meta["venue"] = {"name": rng.choice(["uni", "curve"]), "fee": 0.3}
        if i % 4 == 0:
            meta["live"] = rng.choice([True, 1])
        out.append({"text": f"finding {i}", "tags": rng.sample(TAGS, rng.randint(0, 3)), "metadata": meta})
    return out


QUERIES: list[dict[str, Any]] = [
    {},
    {"tags": ["gas"]},
    {"tags": ["gas", "fees"]},
    {"tags": ["fees", "risk", "ops"]},
    {"meta": {"symbol": "ETH"}},
    {"meta": {"symbol": "ETH", "size": 2}},
    {"meta": {"size": 2.0}},
    {"meta": {"live": True}},
    {"meta": {"live": 1}},
    {"meta": {"venue": {"fee": 0.3, "name": "uni"}}},
    {"tags": ["gas"], "meta": {"symbol": "BTC"}},
    {"tags": ["risk", "gas"], "meta": {"symbol": "SOL", "size": 3}, "limit": 2},
    {"meta": {"symbol": "ETH"}, "limit": 3},
    {"tags": ["ops"], "limit": 1},
    {"meta": {"nothing": "here"}},
]


def _expected(findings: list[dict[str, Any]], keys: list[str], query: dict[str, Any]) -> list[str]:
    """The keys a query must return, computed from the findings themselves, newest first."""

    def same(a: Any, b: Any) -> bool:  # JSON equality: a whole float equals the integer, bool is not 1
        if isinstance(a, bool) or isinstance(b, bool):
            return type(a) is type(b) and a == b
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        return bool(a == b)

    hits = [
        k
        for f, k in zip(findings, keys, strict=True)
        if all(t in f["tags"] for t in query.get("tags", ()))
        and all(m in f["metadata"] and same(f["metadata"][m], v) for m, v in query.get("meta", {}).items())
    ]
    hits.reverse()
    return hits[: query.get("limit", 20)]


def test_several_tags_and_metadata_filter_rows_and_files_alike_with_the_limit_after_the_merge(
    store: memory.MemoryStore,
) -> None:
    findings = _findings(40)
    with store.session(scope="desk") as s:
        keys = [s.learn(f).key for f in findings[:25]]
    store.sync()  # the older 25 are rows, the newer 15 files: every query spans both
    with store.session(scope="desk") as s:
        keys += [s.learn(f).key for f in findings[25:]]
    for stage in ("mixed", "all rows"):
        for query in QUERIES:
            got = [e.key for e in store.recall(**query)]
            assert got == _expected(findings, keys, query), (stage, query)
            answered = {
                a.finding.key
                for a in store.why("finding", limit=50, **{k: v for k, v in query.items() if k != "limit"})
            }
            assert answered == set(_expected(findings, keys, {**query, "limit": 50})), (stage, query)
        store.sync()


def test_a_metadata_filter_walks_the_index_past_many_non_matching_rows(store: memory.MemoryStore) -> None:
    with store.session(scope="desk") as s:
        rare = s.learn({"text": "the rare one", "metadata": {"symbol": "XMR"}})
        for i in range(30):
            s.learn({"text": f"common {i}", "metadata": {"symbol": "ETH"}, "tags": ["gas"]})
    store.sync()
    assert [e.key for e in store.recall(meta={"symbol": "XMR"}, limit=1)] == [rare.key]
    assert len(store.recall(tags=["gas"], meta={"symbol": "ETH"}, limit=None)) == 30


BAD_FILTERS: list[dict[str, Any]] = [
    {"tags": "gas"},
    {"tags": [""]},
    {"tags": [1]},
    {"tags": None},
    {"meta": ["symbol"]},
    {"meta": {"": "x"}},
    {"meta": {"price": float("nan")}},
    {"meta": {"symbol": object()}},
    {"limit": -1},
    {"limit": "3"},
    {"limit": True},
    {"before_ms": "yesterday"},
    {"scope": 3},
    {"source": ["a"]},
    {"tag": 5},
]


@pytest.mark.parametrize("bad", BAD_FILTERS, ids=[str(b) for b in BAD_FILTERS])
def test_a_bad_filter_is_refused_naming_it(store: memory.MemoryStore, bad: dict[str, Any]) -> None:
    with store.session(scope="desk") as s:
        s.learn({"text": "x"})
    (name,) = bad
    with pytest.raises(memory.ArgumentInvalid) as caught:
        store.recall(**bad)
    assert caught.value.code == "memory_argument_invalid"
    assert name in str(caught.value)
    if name in ("tags", "meta", "limit", "scope"):
        with pytest.raises(memory.ArgumentInvalid):
            store.why("x", **bad)


OUT_OF_RANGE: list[dict[str, Any]] = [
    {"limit": 10**30},
    {"limit": 2**63},
    {"before_ms": 10**30},
    {"before_ms": 2**63},
    {"before_ms": -(2**63) - 1},
]


@pytest.mark.parametrize("bad", OUT_OF_RANGE, ids=[str(b) for b in OUT_OF_RANGE])
def test_a_limit_or_before_ms_past_64_bits_is_refused_naming_its_bound_before_and_after_a_sync(
    store: memory.MemoryStore, bad: dict[str, Any]
) -> None:
    with store.session(scope="desk") as s:
        s.learn({"text": "hello world"})
    (name,) = bad
    for _ in ("unsynced", "synced"):
        with pytest.raises(memory.ArgumentInvalid, match=rf"{name} must .*2\*\*63 - 1") as caught:
            store.recall(**bad)
        assert caught.value.code == "memory_argument_invalid"
        with pytest.raises(memory.ArgumentInvalid, match=name):
            store.why("hello", **bad)
        if name == "before_ms":
            with pytest.raises(memory.ArgumentInvalid, match=name):
                store.forget_where(None, reason="r", dry_run=True, **bad)
        store.sync()


def test_a_filter_of_the_most_tags_and_pairs_answers_and_one_more_is_refused_before_and_after_a_sync(
    store: memory.MemoryStore,
) -> None:
    tags = [f"t{i}" for i in range(memory.TAGS_MAX)]
    meta = {f"k{i}": i for i in range(memory.META_FILTER_MAX)}
    with store.session(scope="desk") as s:
        s.learn({"text": "hello world", "tags": tags})
    for _ in ("unsynced", "synced"):
        assert len(store.recall(tags=tags)) == 1
        assert store.recall(tags=tags, meta=meta, tag="other") == []
        assert len(store.why("hello", tags=tags)) == 1
        for bad in ({"tags": [*tags, "one more"]}, {"meta": {**meta, "one": "more"}}):
            with pytest.raises(memory.ArgumentInvalid, match="_MAX") as caught:
                store.recall(**bad)
            assert caught.value.code == "memory_argument_invalid"
            with pytest.raises(memory.ArgumentInvalid, match="_MAX"):
                store.why("hello", **bad)
        store.sync()


def test_a_why_subject_over_the_finding_text_limit_is_refused_before_any_work(
    store: memory.MemoryStore,
) -> None:
    with store.session(scope="desk") as s:
        s.learn({"text": "hello world"})
    assert store.why("hello " + "z" * (memory.TEXT_MAX_BYTES - 6)) != []
    for subject in ("hello " + "z" * memory.TEXT_MAX_BYTES, "hello \udce9" * (memory.TEXT_MAX_BYTES // 8)):
        with pytest.raises(memory.ArgumentInvalid, match="TEXT_MAX_BYTES") as caught:
            store.why(subject)
        assert caught.value.code == "memory_argument_invalid"


def test_a_why_with_no_limit_answers_every_match_from_rows_and_files(store: memory.MemoryStore) -> None:
    """``limit=None`` is "no limit", as for ``recall`` (the error for a negative limit says so): it
    raised a bare TypeError."""
    with store.session(scope="desk") as s:
        for i in range(12):
            s.learn({"text": f"the kettle is descaled on day {i}"})
        store.sync()
        for i in range(12, 15):
            s.learn({"text": f"the kettle is descaled on day {i}"})
        s.learn({"text": "the printer is out of toner"})
        texts = {a.finding.text for a in s.why("kettle descaled", limit=None)}
    assert texts == {f"the kettle is descaled on day {i}" for i in range(15)}
    assert len(store.why("kettle descaled", limit=None, scope="desk")) == 15


def test_a_history_db_of_schema_3_gains_metadata_filters_for_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    # a row's key must hash its finding (rows are checked when read)
    key = memory.finding_id("old", memory.Finding("an old finding", "f", (), {"size": 2.0}))
    conn = sqlite3.connect(path, isolation_level=None)
    for version in (1, 2, 3):
        for statement in _db._split(_db._MIGRATIONS[version]):  # type: ignore[arg-type]
            conn.execute(statement)
    conn.execute(
        "INSERT INTO findings (key, scope, flow, text, source, tags, learned_ms, run_id, stream, record_id,"
        " synced_ms, metadata) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            key,
            "old",
            "f",
            "an old finding",
            "f",
            "[]",
            5,
            "r",
            memory.STREAM,
            "1" * 16,
            6,
            '{"size":2.0}',
        ),
    )
    conn.execute("PRAGMA user_version = 3")
    conn.close()
    with memory.MemoryStore(path) as store:
        assert [e.key for e in store.recall(meta={"size": 2})] == [key]
        assert store.recall(meta={"size": 3}) == []

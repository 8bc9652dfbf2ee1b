"""A finding's ``metadata`` and ``expiresMs``: part of its id, validated with the path of the bad part,
carried through files, the DB and every read; an expired finding is never returned."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

import memory
from memory import _db
from tests.memory.conftest import Clock, learned_files, stages

TRADE = {
    "text": "ETH gas is cheapest before the US open",
    "tags": ["gas"],
    "metadata": {"symbol": "ETH", "price": 2512.5, "levels": [1, 2, 3], "venue": {"name": "uni", "fee": 0.3}},
}


@pytest.fixture
def store(db: Path, clock: Clock, journal_location: str) -> Iterator[memory.MemoryStore]:
    """A store over ``db`` whose journal is each backend in turn."""
    with memory.MemoryStore(db, journal=journal_location, clock=clock) as s:
        yield s


def test_metadata_and_expiry_travel_from_the_journal_to_the_file_the_db_and_every_read(
    store: memory.MemoryStore, clock: Clock
) -> None:
    expires = clock.now + 3_600_000
    with store.session(scope="desk") as s:
        learned = s.learn({**TRADE, "expiresMs": expires})
        run_id = s.run_id
    (record,) = store.open_journal().read(run_id, memory.STREAM)
    assert record.payload["finding"]["metadata"] == TRADE["metadata"]
    assert record.payload["finding"]["expiresMs"] == expires
    on_disk = orjson.loads(learned.path.read_bytes())
    assert (on_disk["metadata"], on_disk["expiresMs"]) == (TRADE["metadata"], expires)
    assert learned.path.read_bytes() == memory.render(record)

    (unsynced,) = store.recall()
    store.sync()
    (synced,) = store.recall()
    for found in (unsynced, synced):
        assert dict(found.metadata) == TRADE["metadata"]
        assert found.expires_ms == expires
        body = found.as_json()
        assert (body["key"], body["metadata"], body["expiresMs"]) == (learned.key, TRADE["metadata"], expires)
        assert body["citation"] == {
            "runId": run_id,
            "stream": memory.STREAM,
            "id": record.id,
            "committedMs": learned.learned_ms,
        }
    assert unsynced.id < 0 < synced.id
    with pytest.raises(TypeError):
        found.metadata["symbol"] = "BTC"  # type: ignore[index]


def test_metadata_and_expiry_are_part_of_the_id_and_key_order_is_not(store: memory.MemoryStore) -> None:
    base = memory.validate({"text": "t"}, "s")
    with_meta = memory.validate({"text": "t", "metadata": {"a": 1, "b": [1, {"y": 2, "x": 1}]}}, "s")
    reordered = memory.validate({"text": "t", "metadata": {"b": [1, {"x": 1, "y": 2}], "a": 1}}, "s")
    other = memory.validate({"text": "t", "metadata": {"a": 2, "b": [1, {"x": 1, "y": 2}]}}, "s")
    expiring = memory.validate({"text": "t", "expiresMs": 1_900_000_000_000}, "s")
    empty = memory.validate({"text": "t", "metadata": {}}, "s")
    ids = [memory.finding_id("x", f) for f in (base, with_meta, reordered, other, expiring, empty)]
    assert ids[1] == ids[2]
    assert len({ids[0], ids[1], ids[3], ids[4]}) == 4
    assert ids[5] == ids[0]  # empty metadata is no metadata
    # A finding without the new fields keeps the id and bytes it always had.
    assert memory.canonical(base) == b'{"source":"s","tags":[],"text":"t"}'


def _deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = {"d": value}
    return value


BAD = [
    ({"metadata": ["not", "an", "object"]}, "metadata"),
    ({"metadata": "ETH"}, "metadata"),
    ({"metadata": {"price": float("nan")}}, "metadata.price"),
    ({"metadata": {"price": float("inf")}}, "metadata.price"),
    ({"metadata": {"levels": [1, 2, object()]}}, "metadata.levels[2]"),
    ({"metadata": {"venue": {"fee": {1, 2}}}}, "metadata.venue.fee"),
    ({"metadata": {"raw": b"bytes"}}, "metadata.raw"),
    ({"metadata": {"n": 2**64}}, "metadata.n"),
    ({"metadata": {"s": "\ud800"}}, "metadata.s"),
    ({"metadata": {1: "x"}}, "metadata[1]"),
    ({"metadata": {"": "x"}}, "metadata['']"),
    ({"metadata": {"k" * 129: "x"}}, "metadata['" + "k" * 39),
    ({"metadata": {"a\nb": "x"}}, "metadata['a\\nb']"),
    ({"metadata": {"odd key": {"x": float("nan")}}}, "metadata['odd key'].x"),
    ({"metadata": {"big": "x" * (16 * 1024)}}, "metadata"),
    ({"metadata": _deep(18)}, "metadata" + ".d" * 17),
    ({"expiresMs": "tomorrow"}, "expiresMs"),
    ({"expiresMs": True}, "expiresMs"),
    ({"expiresMs": 0}, "expiresMs"),
    ({"expiresMs": -5}, "expiresMs"),
    ({"expiresMs": 1.5e12}, "expiresMs"),
    ({"expiresMs": 2**53}, "expiresMs"),
    ({"expires": 1}, "expires"),
]


@pytest.mark.parametrize(("extra", "path"), BAD, ids=[p for _, p in BAD])
def test_a_bad_metadata_or_expiry_is_refused_naming_the_path_and_nothing_is_written(
    store: memory.MemoryStore, extra: dict[str, Any], path: str
) -> None:
    with store.session(scope="desk") as s, pytest.raises(memory.FindingInvalid) as caught:
        s.learn({"text": "a finding", **extra})
    assert caught.value.code == "memory_finding_invalid"
    assert caught.value.field is not None and caught.value.field.startswith(path)
    assert path in str(caught.value)
    assert store.open_journal().runs() == []  # not even a root run
    assert learned_files(store.db_path) == []
    assert stages(memory.learned_dir(store.db_path, "desk")) == []


def test_metadata_up_to_the_bound_is_taken(store: memory.MemoryStore) -> None:
    fits = {"big": "x" * (16 * 1024 - len('{"big":""}'))}
    with store.session(scope="desk") as s:
        s.learn({"text": "just fits", "metadata": fits, "expiresMs": 2**53 - 1})
        s.learn({"text": "deep enough", "metadata": _deep(17)})  # 16 levels inside it
    assert len(store.recall()) == 2


def test_an_expired_finding_is_not_returned_by_any_read_before_or_after_a_sync(
    store: memory.MemoryStore, clock: Clock
) -> None:
    with store.session(scope="desk") as s:
        soon = s.learn({"text": "the promo fee ends soon", "expiresMs": clock.now + 30_000})
        s.learn({"text": "the base fee stays", "tags": ["fee"]})
        s.learn({"text": "already over", "expiresMs": 1_000})
    assert sorted(e.text for e in store.recall()) == ["the base fee stays", "the promo fee ends soon"]
    assert store.get(soon.key) is not None
    for synced in (False, True):
        if synced:
            store.sync()
            clock.now -= 60_000  # back before the expiry: the DB row is returned
            assert store.get(soon.key) is not None
        clock.now += 60_000
        assert [e.text for e in store.recall()] == ["the base fee stays"]
        assert [a.finding.text for a in store.why("promo fee")] == ["the base fee stays"]
        assert store.get(soon.key) is None
    assert store.scopes() == ["desk"]


def test_a_scope_whose_findings_all_expired_is_not_listed(store: memory.MemoryStore, clock: Clock) -> None:
    with store.session(scope="fleeting") as s:
        s.learn({"text": "gone soon", "expiresMs": clock.now + 5_000})
    assert store.scopes() == ["fleeting"]
    clock.now += 10_000
    assert store.scopes() == []


@pytest.mark.parametrize(
    "change",
    [
        {"metadata": []},
        {"metadata": {"": 1}},
        {"expiresMs": "x"},
        {"expiresMs": 0},
    ],
)
def test_a_learned_file_with_a_malformed_metadata_or_expiry_fails_reads_naming_it(
    db: Path, clock: Clock, change: dict[str, Any]
) -> None:
    with memory.MemoryStore(db, clock=clock) as store:
        with store.session(scope="desk") as s:
            learned = s.learn({"text": "x", "metadata": {"a": 1}, "expiresMs": 2_000_000_000_000})
        body = orjson.loads(learned.path.read_bytes())
        body.update(change)
        tmp = learned.path.with_name(".tmp-damage")
        tmp.write_bytes(orjson.dumps(body))
        os.replace(tmp, learned.path)
    with memory.MemoryStore(db, clock=clock) as fresh, pytest.raises(memory.Unreachable) as caught:
        fresh.recall()
    assert str(learned.path) in str(caught.value)


def test_a_history_db_of_the_first_schema_is_migrated_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for statement in _db._split(_db._MIGRATIONS[1]):
        conn.execute(statement)
    conn.execute(
        "INSERT INTO findings (key, scope, flow, text, source, tags, learned_ms, run_id, stream, record_id,"
        " synced_ms) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        ("0" * 32, "old", "f", "an old finding", "f", '["t"]', 5, "r", memory.STREAM, "1" * 16, 6),
    )
    conn.execute("INSERT INTO finding_tags VALUES ('t', 5, 1)")
    conn.execute("PRAGMA user_version = 1")
    conn.close()

    with memory.MemoryStore(path) as store:
        (row,) = store.recall(tag="t")
        assert (row.key, row.text) == ("0" * 32, "an old finding")
        assert (dict(row.metadata), row.expires_ms) == ({}, None)
        assert [a.finding.key for a in store.why("old finding")] == ["0" * 32]
    check = sqlite3.connect(path)
    assert check.execute("PRAGMA user_version").fetchone()[0] == memory.SCHEMA_VERSION
    check.close()

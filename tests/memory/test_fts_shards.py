"""The history DB's full-text index is split into shards by row id, so that an erase merges only the
shards that held the erased rows. ``why`` must find over the shards exactly what it finds over one
index (the newest candidates first, across shard boundaries, and a word only the oldest shard
holds); an erase in an old shard leaves none of its bytes and leaves the other shards as they were;
a DB made before shards keeps its rows searchable; a damaged shard list is reported, never read as
an empty index."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import memory
from memory import _db
from tests.memory.conftest import Clock

MARK = "QZVSHARDMARK"
QUERIES = ("apple", "word3", "zebra", "apple zebra", "pear word5", MARK.lower())


def _fill(store: memory.MemoryStore, n: int, *, batch: int = 5) -> list[str]:
    """Learn ``n`` findings in syncs of ``batch`` (each sync adds rows with new ids): all hold
    "apple", one in seven each ``wordK``, the oldest alone "zebra", and the tenth the mark."""
    keys = []
    for start in range(0, n, batch):
        with store.session(scope="s") as s:
            for i in range(start, min(n, start + batch)):
                text = f"apple note {i} word{i % 7}" + (" zebra" if i == 0 else "")
                text += " pear" if i % 3 else ""
                if i == 10:
                    text += f" {MARK}"
                keys.append(s.learn({"text": text, "tags": [f"t{i % 4}"]}).key)
        store.sync()
    return keys


def _shard_tables(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return sorted(
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB 'findings_stems*'"
                " AND sql LIKE 'CREATE VIRTUAL TABLE%'"
            )
        )


def test_why_finds_over_the_shards_exactly_what_it_finds_over_one_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found: dict[int, list[list[str]]] = {}
    for rows in (4, 1 << 17):
        monkeypatch.setattr(_db, "SHARD_ROWS", rows)
        db = tmp_path / str(rows) / "history.db"
        with memory.MemoryStore(db, clock=Clock()) as store:
            _fill(store, 70)
            found[rows] = [[h.key for h in store.why(q, limit=20)] for q in QUERIES]
            # 70 findings hold "apple": more than ``why`` takes as candidates, so which are the
            # newest must be decided across shards
            assert len(found[rows][0]) == 20
            assert found[rows][2] and found[rows][3]  # "zebra" is only in the oldest shard
        shards = _shard_tables(db)
        assert len(shards) == (1 if rows > 70 else 18), shards
    assert found[4] == found[1 << 17]


def test_an_erase_in_an_old_shard_leaves_no_byte_and_does_not_touch_the_other_shards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_db, "SHARD_ROWS", 4)
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db, clock=Clock()) as store:
        keys = _fill(store, 30)
        assert store.why(MARK.lower())
        with sqlite3.connect(db) as conn:
            lows = [r[0] for r in conn.execute("SELECT low FROM stem_shards ORDER BY low")]
            (marked,) = [r[0] for r in conn.execute("SELECT id FROM findings WHERE key = ?", (keys[10],))]
            holder = max(low for low in lows if low <= marked)
            others = {
                low: conn.execute(f"SELECT * FROM {_db._shard_table(low)}_data ORDER BY id").fetchall()
                for low in lows
                if low != holder
            }
        assert holder not in (lows[0], lows[-1])  # a shard in the middle
        with store.session(scope="cli", flow="privacy") as s:
            s.erase(keys[10], reason="the test erases the marked finding")
        assert not store.why(MARK.lower()) and store.why("zebra")
        for path in (tmp_path / "store").rglob("*"):
            if path.is_file():
                assert MARK.encode() not in path.read_bytes(), path
                assert MARK.lower().encode() not in path.read_bytes(), path
        with sqlite3.connect(db) as conn:
            for low, data in others.items():
                table = _db._shard_table(low)
                assert conn.execute(f"SELECT * FROM {table}_data ORDER BY id").fetchall() == data


def test_a_db_made_before_shards_keeps_its_rows_searchable_and_erasable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db, clock=Clock()) as store:
        keys = _fill(store, 12)
    with sqlite3.connect(db) as conn:  # the DB as the schema before shards left it
        conn.execute("DROP TABLE stem_shards")
        conn.execute("PRAGMA user_version = 8")
    monkeypatch.setattr(_db, "SHARD_ROWS", 4)
    with memory.MemoryStore(db, clock=Clock(start=1_800_000_000_000)) as store:
        with store.session(scope="s") as s:
            newer = s.learn({"text": "zebra crossing learned after the upgrade"}).key
        store.sync()
        assert store.db.schema_version() == memory.SCHEMA_VERSION
        assert len(_shard_tables(db)) == 2  # the old index whole, the new row in a shard of its own
        assert {h.key for h in store.why("zebra")} == {keys[0], newer}
        with store.session(scope="cli", flow="privacy") as s:
            s.erase(keys[10], reason="the test erases the marked finding")
        assert not store.why(MARK.lower()) and len(store.why("apple", limit=50)) == 11
        files = [p for p in db.parent.rglob("*") if p.is_file()]
        assert not [p for p in files if MARK.lower().encode() in p.read_bytes()]


def test_a_damaged_shard_list_is_reported_and_a_sync_into_it_changes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db, clock=Clock()) as store:
        _fill(store, 6)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE stem_shards SET low = -3 WHERE low = 0")
    with memory.MemoryStore(db, clock=Clock(start=1_800_000_000_000)) as store:
        with pytest.raises(memory.Unreachable, match=r"damaged .*full-text shards.*flows sync"):
            store.why("apple")
        with store.session(scope="s") as s:
            s.learn({"text": "apple learned into a damaged DB"})
        with pytest.raises(memory.Unreachable, match="full-text shards"):
            store.sync()
        with sqlite3.connect(db) as conn:  # the failed sync left no row and no open transaction
            conn.execute("UPDATE stem_shards SET low = 0 WHERE low = -3")
            assert conn.execute("SELECT count(*) FROM findings").fetchone()[0] == 6
        store.sync()
        assert len(store.why("apple", limit=50)) == 7

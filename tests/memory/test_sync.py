"""sync, the history DB it writes, and where everything lives."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

import memory
from tests.conftest import run_python
from tests.memory.conftest import Clock, learned_files

# -- sync -------------------------------------------------------------------------------


def test_sync_is_idempotent(store: memory.MemoryStore, root: memory.RootRun) -> None:
    for i in range(3):
        store.learn({"text": f"finding {i}"}, root)
    assert store.sync() == memory.SyncReport(materialized=0, ingested=3, dropped=3)
    rows = store.recall(limit=None)
    assert store.sync() == memory.SyncReport(materialized=0, ingested=0, dropped=0)
    assert store.recall(limit=None) == rows
    assert store.db.count() == 3


def test_ingesting_the_same_finding_twice_keeps_one_row_with_its_id(
    store: memory.MemoryStore, root: memory.RootRun
) -> None:
    learned = store.learn({"text": "the cache is cold at dawn", "tags": ["cache", "cache"]}, root)
    [entry] = store.recall()
    store.db.upsert([entry], 1)
    [row] = store.recall()
    store.db.upsert([entry, entry], 2)
    assert store.recall() == [row]
    assert row.id > 0
    assert row.citation == learned.citation
    assert store.recall(tag="cache") == [row]


def test_a_newer_commit_of_a_finding_replaces_the_row_and_an_older_one_never_does(
    store: memory.MemoryStore, root: memory.RootRun
) -> None:
    store.learn({"text": "the cache is cold at dawn"}, root)
    store.sync()
    [old] = store.recall()
    jr = root.journal
    _, lease = jr.begin("probe", "scope-a", {})
    newer = store.learn({"text": "the cache is cold at dawn"}, memory.RootRun(jr, lease, "probe", "scope-a"))
    store.sync()
    [row] = store.recall()
    assert (row.id, row.citation, row.learned_ms) == (old.id, newer.citation, newer.learned_ms)
    store.db.upsert([old], 3)
    assert store.recall() == [row]


def test_sync_keeps_a_file_that_a_learn_replaced_while_it_ran(
    store: memory.MemoryStore, root: memory.RootRun, db: Path
) -> None:
    learned = store.learn({"text": "the cache is cold at dawn"}, root)
    jr = root.journal
    _, lease = jr.begin("probe", "scope-a", {})
    second_run = memory.RootRun(jr, lease, "probe", "scope-a")
    real_upsert = store.db.upsert
    relearned: list[memory.Learned] = []

    def upsert_then_a_flow_relearns(entries: list[memory.Recalled], now_ms: int) -> None:
        real_upsert(entries, now_ms)
        if not relearned:
            with memory.MemoryStore(db, clock=Clock(start=10**13)) as other:
                relearned.append(other.learn({"text": "the cache is cold at dawn"}, second_run))

    store.db.upsert = upsert_then_a_flow_relearns  # type: ignore[method-assign]
    report = store.sync()
    del store.db.upsert

    assert (report.ingested, report.dropped) == (1, 0)
    assert learned.path.read_bytes() == memory.render(jr.read(second_run.run_id, memory.STREAM)[0])
    assert store.sync().dropped == 1
    [row] = store.recall()
    assert row.citation == relearned[0].citation


@pytest.mark.slow
def test_sync_while_flows_learn_loses_nothing_and_duplicates_nothing(
    store: memory.MemoryStore, root: memory.RootRun, db: Path
) -> None:
    done = threading.Event()
    errors: list[BaseException] = []
    learned: list[memory.Learned] = []

    def learner() -> None:
        try:
            with memory.MemoryStore(db) as mine:
                for i in range(120):
                    learned.append(mine.learn({"text": f"finding number {i}", "tags": [f"t{i % 3}"]}, root))
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    def syncer() -> None:
        try:
            with memory.MemoryStore(db) as mine:
                while not done.is_set():
                    mine.sync(materialize=False)
                    mine.recall(tag="t1", limit=5)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=learner), threading.Thread(target=syncer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(100)
    assert errors == []

    everything = store.recall(limit=None)
    assert sorted(r.key for r in everything) == sorted(x.id for x in learned)
    store.sync()
    assert learned_files(db) == []
    assert store.db.count() == 120
    assert {r.citation for r in store.recall(limit=None)} == {x.citation for x in learned}


def test_sync_republishes_a_commit_whose_file_was_lost_and_ingests_it(
    store: memory.MemoryStore, root: memory.RootRun
) -> None:
    learned = store.learn({"text": "the cache is cold at dawn"}, root)
    learned.path.unlink()
    assert store.recall() == []
    report = store.sync()
    assert (report.materialized, report.ingested, report.dropped) == (1, 1, 1)
    [row] = store.recall()
    assert (row.key, row.citation) == (learned.id, learned.citation)


# -- the history DB ----------------------------------------------------------------------------


def test_the_db_is_migrated_to_the_current_schema_in_wal_mode(
    store: memory.MemoryStore, root: memory.RootRun, db: Path
) -> None:
    store.learn({"text": "x"}, root)
    store.sync()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == memory.SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        columns = {r[1] for r in conn.execute("PRAGMA table_info(findings)")}
    assert {"key", "text", "source", "tags", "learned_ms", "run_id", "stream", "record_id"} <= columns
    conn.close()


def test_a_db_from_a_newer_version_is_refused_as_unreachable(db: Path) -> None:
    db.parent.mkdir(parents=True)
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {memory.SCHEMA_VERSION + 1}")
    conn.close()
    with memory.MemoryStore(db) as store, pytest.raises(memory.Unreachable) as caught:
        store.recall()
    assert caught.value.code == "memory_unreachable"
    assert caught.value.path == db


def test_a_damaged_db_is_unreachable(db: Path) -> None:
    db.parent.mkdir(parents=True)
    db.write_bytes(b"this is not a database" * 100)
    with memory.MemoryStore(db) as store, pytest.raises(memory.Unreachable) as caught:
        store.recall(tag="x")
    assert caught.value.path == db


@pytest.mark.parametrize(
    "damage",
    [
        "text = 'the cache is warm'",
        "source = 'elsewhere'",
        "scope = 'scope-b'",
        'tags = \'["cache","risk"]\'',
        "tags = '[\"cache\", 3]'",
        "tags = 'not json'",
        "metadata = '{\"n\": 2}'",
        "metadata = '[1]'",
        "expires_ms = 4102444800000",
        "learned_ms = 'yesterday'",
        "run_id = x'00'",
        "key = 'x'",
    ],
)
def test_a_db_row_that_does_not_hold_the_finding_its_key_names_fails_the_read(
    store: memory.MemoryStore, root: memory.RootRun, db: Path, damage: str
) -> None:
    """SQLite keeps no checksum of its pages: a row read back well-formed but changed (its finding
    no longer hashing to its key, or a field of the wrong type) fails the read, naming the DB."""
    store.learn({"text": "the cache is cold at dawn", "tags": ["cache"], "metadata": {"n": 1}}, root)
    store.sync()
    store.close()
    with sqlite3.connect(db) as conn:
        conn.execute(f"UPDATE findings SET {damage}")
    conn.close()
    with memory.MemoryStore(db) as fresh, pytest.raises(memory.Unreachable, match="damaged") as caught:
        fresh.recall(tag="cache")
    assert caught.value.path == db


def test_another_process_reads_while_this_one_holds_the_write_lock(
    store: memory.MemoryStore, root: memory.RootRun, db: Path
) -> None:
    store.learn({"text": "the cache is cold at dawn"}, root)
    store.sync()
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        result = run_python(
            "import sys, memory; print(len(memory.MemoryStore(sys.argv[1]).recall()))", str(db)
        )
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert (result.returncode, result.stdout.strip()) == (0, "1"), result.stderr


def test_close_is_safe_twice(db: Path) -> None:
    store = memory.MemoryStore(db)
    store.close()
    store.close()


# -- paths -------------------------------------------------------------------------------------


def test_the_db_comes_from_the_argument_then_flows_db_then_xdg_data_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("FLOWS_DB", str(tmp_path / "env" / "h.db"))
    assert memory.resolve_db(tmp_path / "arg.db") == tmp_path / "arg.db"
    assert memory.resolve_db() == tmp_path / "env" / "h.db"
    monkeypatch.delenv("FLOWS_DB")
    assert memory.resolve_db() == tmp_path / "xdg" / "flows" / "history.db"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert memory.resolve_db() == tmp_path / "home" / ".local" / "share" / "flows" / "history.db"


def test_the_journal_defaults_to_a_folder_beside_the_db(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLOWS_JOURNAL", raising=False)
    assert memory.resolve_journal(db) == str(db.parent / "flows-journal")
    assert memory.resolve_journal(db, "/elsewhere") == "/elsewhere"
    monkeypatch.setenv("FLOWS_JOURNAL", "/from-env")
    assert memory.resolve_journal(db) == "/from-env"


def test_learned_files_live_at_the_documented_path(db: Path) -> None:
    expected = db.parent / "flows-memory" / memory.scope_hash("s") / ".trajectories" / "compacted"
    assert memory.learned_dir(db, "s") == expected
    assert memory.learned_root(db) == db.parent / "flows-memory"


def test_which_keys_the_db_holds_is_the_same_answer_for_few_keys_and_many(
    store: memory.MemoryStore, root: memory.RootRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A few keys are looked up one by one (a statement SQLite prepares once and cheaply, where an
    IN list of them costs more to prepare), many in IN lists: the same answer either way."""
    learned = [store.learn({"text": f"finding {i}"}, root) for i in range(12)]
    store.sync()
    held = {k.id: k.citation for k in learned}
    unknown = [f"{i:032x}" for i in range(600)]
    statements: list[str] = []
    conn = store.db._reader()
    assert conn is not None
    conn.set_trace_callback(statements.append)
    for n in (0, 1, 3, 4):  # up to 8 keys
        keys = [k.id for k in learned[:n]] + unknown[:n]
        assert store.db.held(keys) == {k: held[k] for k in keys[:n]}
    assert statements and not any(" IN (" in s for s in statements)
    keys = [k.id for k in learned] + unknown
    assert store.db.held(keys) == held
    assert any(" IN (" in s for s in statements)


@pytest.mark.parametrize(
    "path", ["/data/flows/history.db", "/a b/h.db", "/x%20y/?#[]/h.db", "/données/h.db", "/t~u_v-w.x/h.db"]
)
def test_the_db_uri_quotes_the_path_as_urllib_does(path: str) -> None:
    from urllib.parse import quote

    from memory._db import _file_uri

    assert _file_uri(Path(path)) == "file:" + quote(path, safe="/")


def test_a_snapshot_inside_a_snapshot_is_part_of_it_and_a_failed_block_still_ends_it(
    store: memory.MemoryStore, root: memory.RootRun
) -> None:
    store.learn({"text": "the cache is cold at dawn"}, root)
    store.sync()
    db = store.db
    with db.snapshot():
        conn = db._reader()
        assert conn is not None and conn.in_transaction
        with db.snapshot():
            assert db.count() == 1
        assert conn.in_transaction  # the inner block left the outer transaction open
    assert not conn.in_transaction
    with pytest.raises(RuntimeError), db.snapshot():
        assert conn.in_transaction
        raise RuntimeError("the block failed")
    assert not conn.in_transaction
    assert getattr(db._local, "snapshot", None) is None

"""A store opened ``read_only`` never writes: no migration, no files' index, and no file beside the
history DB (SQLite makes a ``-shm`` and a ``-wal`` for a plain ``mode=ro`` reader of a WAL database,
and leaves them). It still sees what a writer commits, while the writer runs and after it is gone."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import memory
from tests.adversarial.memory_support import without_dac_override
from tests.conftest import ROOT

Tree = dict[str, tuple[str, int]]


def tree(root: Path) -> Tree:
    """Every path under ``root`` with its content's hash (or ``dir``) and mtime."""
    out: Tree = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
        out[str(path.relative_to(root))] = (digest, st.st_mtime_ns)
    return out


def learn(db: Path, *texts: str, sync: bool = True) -> None:
    with memory.MemoryStore(db) as store:
        with store.session(scope="ops", flow="probe") as s:
            for text in texts:
                s.learn({"text": text, "tags": ["probe"], "metadata": {"n": len(text)}})
        if sync:
            store.sync()


@pytest.fixture
def synced(db: Path) -> Path:
    """A history DB in WAL mode holding three findings, every connection to it closed."""
    learn(db, "alpha is cold", "beta is warm", "gamma is hot")
    assert not Path(f"{db}-wal").exists() and not Path(f"{db}-shm").exists()
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    return db


def every_read(store: memory.MemoryStore) -> list[str]:
    """Every read the memory API has, once; returns the texts recall found."""
    found = store.recall(limit=None)
    assert store.why("cold alpha")[0].finding.text == "alpha is cold"
    assert store.get(found[0].key) == found[0]
    assert store.recall(tags=["probe"], meta={"n": 13}) == [f for f in found if f.text == "alpha is cold"]
    assert store.scopes() == ["ops"]
    assert [e.kind for e in store.history(found[0].key)] == ["learned"]
    assert store.scope_of(found[0].key) == "ops"
    return sorted(f.text for f in found)


def test_a_plain_read_only_open_of_a_wal_db_leaves_files_behind(synced: Path) -> None:
    """Why a read-only store cannot just use ``mode=ro``: SQLite makes the WAL's files for it."""
    conn = sqlite3.connect(f"file:{synced}?mode=ro", uri=True)
    conn.execute("SELECT count(*) FROM findings").fetchone()
    conn.close()
    assert Path(f"{synced}-shm").exists() and Path(f"{synced}-wal").exists()


def test_reading_a_closed_wal_db_read_only_creates_no_file(synced: Path) -> None:
    before = tree(synced.parent)
    with memory.MemoryStore(synced, read_only=True) as store:
        assert every_read(store) == ["alpha is cold", "beta is warm", "gamma is hot"]
        assert store.db.schema_version() == memory.SCHEMA_VERSION
    assert tree(synced.parent) == before


def test_a_read_only_store_reads_beside_an_open_writer_and_sees_its_commits(synced: Path) -> None:
    with memory.MemoryStore(synced) as writer:
        writer.sync()  # the writer's connection stays open: the DB's -wal and -shm are there
        names = sorted(os.listdir(synced.parent))
        with memory.MemoryStore(synced, read_only=True) as store:
            assert len(every_read(store)) == 3
            with writer.session(scope="ops", flow="later") as s:
                s.learn({"text": "delta is new", "tags": ["probe"]})
            writer.sync()
            assert "delta is new" in [f.text for f in store.recall(limit=None)]
        assert sorted(os.listdir(synced.parent)) == names


def test_a_db_changed_under_a_lock_free_read_is_read_again(synced: Path) -> None:
    with memory.MemoryStore(synced, read_only=True) as store:
        assert len(store.recall(limit=None)) == 3  # read immutable: no log, nothing watched by SQLite
        learn(synced, "delta is new")  # a writer comes and goes: the DB file itself changes
        assert not Path(f"{synced}-wal").exists()
        texts = [f.text for f in store.recall(limit=None)]
        assert "delta is new" in texts and len(texts) == 4
        assert store.db.changes_seen == 1
    assert not Path(f"{synced}-shm").exists()


def test_a_log_with_content_and_no_index_is_refused_and_nothing_is_created(
    synced: Path, tmp_path: Path
) -> None:
    writer = sqlite3.connect(synced)
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("CREATE TABLE scratch (x)")  # committed to the log only
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copyfile(synced, copy / "history.db")
    shutil.copyfile(f"{synced}-wal", copy / "history.db-wal")  # a crash's leftovers, minus the index
    writer.close()
    before = tree(copy)
    with memory.MemoryStore(copy / "history.db", read_only=True) as store:
        with pytest.raises(memory.Unreachable, match="write-ahead log") as caught:
            store.recall()
        assert caught.value.code == "memory_unreachable"
    assert tree(copy) == before


def test_an_older_schema_is_refused_not_migrated(synced: Path) -> None:
    with contextlib.closing(sqlite3.connect(synced)) as conn:
        conn.execute("PRAGMA user_version = 4")
        conn.commit()
    before = tree(synced.parent)
    with memory.MemoryStore(synced, read_only=True) as store:
        assert store.db.schema_version() == 4
        with pytest.raises(memory.Unreachable, match="older than this flows-memory"):
            store.recall()
    assert tree(synced.parent) == before


def test_a_read_only_store_refuses_to_write_the_db(synced: Path) -> None:
    learn(synced, "delta is unsynced", sync=False)
    before = tree(synced.parent)
    with (
        memory.MemoryStore(synced, read_only=True) as store,
        pytest.raises(memory.Unwritable, match="opened read-only"),
    ):
        store.sync(materialize=False)
    assert tree(synced.parent) == before


def test_a_read_only_folder_holding_a_wal_db_reads(synced: Path) -> None:
    """Modes that bind even root (its override dropped in the child): the folder cannot get a file."""
    learn(synced, "delta is unsynced", sync=False)  # and a learned file not yet in the DB
    folders = [synced.parent, *(p for p in synced.parent.rglob("*") if p.is_dir())]
    for folder in folders:
        os.chmod(folder, 0o555)
    try:
        before = tree(synced.parent)
        code = (
            "import os, sys, memory\n"
            "assert not os.access(os.path.dirname(sys.argv[1]), os.W_OK), 'the folder is writable'\n"
            "with memory.MemoryStore(sys.argv[1], read_only=True) as s:\n"
            "    print(sorted(f.text for f in s.recall(limit=None)))\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", code, str(synced)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            preexec_fn=without_dac_override,  # the child may not override modes
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert "'alpha is cold'" in result.stdout and "'delta is unsynced'" in result.stdout
        assert tree(synced.parent) == before
    finally:
        for folder in folders:
            os.chmod(folder, 0o755)


@pytest.mark.parametrize("read_only", [False, True])
def test_a_reader_opens_the_db_with_one_statement_and_waits_thirty_seconds_for_a_writer(
    synced: Path, read_only: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first statement a reader runs reads the schema version (which opens the file and the
    WAL's index); SQLite's busy timeout comes from ``connect``, not from a statement of its own (a
    read-only store reads this closed DB ``immutable``, taking no lock, so it never waits)."""
    statements: list[str] = []
    real = sqlite3.connect

    def tracing(*args: object, **kwargs: object) -> sqlite3.Connection:
        conn = real(*args, **kwargs)  # type: ignore[arg-type]
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", tracing)
    with memory.MemoryStore(synced, read_only=read_only) as store:
        assert len(store.recall(tag="probe", limit=10)) == 3
        assert statements[:2] == ["PRAGMA user_version", "BEGIN"]
        conn = store.db._reader()
        assert conn is not None
        if not read_only:
            assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000

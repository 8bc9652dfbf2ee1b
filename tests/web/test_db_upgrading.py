"""A history DB that a `flows sync` is creating or migrating while the dashboard reads it.

The sync creates the DB as an empty file (schema 0), then migrates it one schema version per
transaction: a read in the middle saw an older schema and answered `serve_db_outdated`, telling the
user to run the sync that was running.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

import memory
from flows.web import ServeConfig
from flows.web import _reader as reader_module
from tests.web.conftest import client_for

TEXTS = ("the pump hums before it fails", "the valve sticks when cold", "the gauge reads high after rain")


@pytest.fixture
def unsynced(tmp_path: Path) -> Path:
    """A store whose findings are learned files only: no history DB yet."""
    db = tmp_path / "store" / "history.db"
    db.parent.mkdir()
    with memory.MemoryStore(db) as store, store.session(scope="plant") as session:
        for text in TEXTS:
            session.learn({"text": text, "source": "observation"})
    assert not db.exists()
    return db


@pytest.fixture
def client(unsynced: Path) -> Iterator[TestClient]:
    with client_for(ServeConfig(db=str(unsynced))) as c:
        yield c
    c.app.state.reader.close()  # type: ignore[attr-defined]


def _asked_in_a_thread(client: TestClient, url: str) -> tuple[threading.Thread, list[httpx.Response]]:
    answers: list[httpx.Response] = []
    thread = threading.Thread(target=lambda: answers.append(client.get(url)))
    thread.start()
    return thread, answers


def test_a_read_while_a_sync_creates_the_db_answers_the_synced_findings(
    client: TestClient, unsynced: Path
) -> None:
    store = memory.MemoryStore(unsynced)
    try:
        # where a sync stands after making the DB's file and before its first migration: schema 0
        os.close(os.open(unsynced, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        thread, answers = _asked_in_a_thread(client, "/api/findings")
        time.sleep(0.1)  # the request has seen schema 0 (before, it answered 503 at once)
        store.sync()  # migrates the DB to this version, then ingests the files
        thread.join(30)
    finally:
        store.close()
    (answer,) = answers
    assert answer.status_code == 200, answer.text
    assert sorted(f["text"] for f in answer.json()) == sorted(TEXTS)
    assert sorted(p.name for p in (unsynced.parent / "flows-memory").rglob("*.json")) == []  # synced


def test_a_db_still_being_written_below_this_schema_after_the_wait_is_said_to_be_upgrading(
    client: TestClient, unsynced: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reader_module, "DB_WAIT_S", 0.6)
    writer = sqlite3.connect(unsynced, isolation_level=None, check_same_thread=False)  # schema 0
    writer.execute("PRAGMA journal_mode = WAL")  # written all the while, as a migration writes
    writer.execute("CREATE TABLE t (x)")
    stop = threading.Event()

    def write() -> None:
        while not stop.is_set():
            writer.execute("INSERT INTO t VALUES (randomblob(4096))")
            time.sleep(0.05)

    busy = threading.Thread(target=write)
    busy.start()
    try:
        page = client.get("/findings")
        started = time.monotonic()
        api = client.get("/api/findings")
        again = time.monotonic() - started
    finally:
        stop.set()
        busy.join()
        writer.close()
    assert (page.status_code, api.status_code) == (503, 503)
    # the request right after one that waited the whole wait is answered at once: requests queue on
    # the store's lock behind whoever waits, and each waiting again held the next a wait longer
    assert again < reader_module.DB_WAIT_S
    error = api.json()
    assert (error["code"], error["version"], error["upgrading"]) == ("serve_db_outdated", 0, True)
    assert "being upgraded right now" in error["message"] and "reload in a moment" in error["message"]
    for text in (page.text, error["message"]):
        assert "run `flows sync`" not in text


def test_an_older_db_that_holds_still_is_outdated_and_the_next_request_says_so_at_once(
    client: TestClient, unsynced: Path
) -> None:
    sqlite3.connect(unsynced).close()  # an empty DB nobody migrates: schema 0
    started = time.monotonic()
    first = client.get("/api/findings")
    waited = time.monotonic() - started
    started = time.monotonic()
    again = client.get("/api/findings")
    assert waited >= reader_module.DB_QUIET_S and time.monotonic() - started < reader_module.DB_QUIET_S
    for answer in (first, again):
        error = answer.json()
        assert answer.status_code == 503
        assert (error["code"], error["version"], error["upgrading"]) == ("serve_db_outdated", 0, False)
        assert "run `flows sync` once to upgrade it" in error["message"]

"""The peers, measured on the same findings, in the benchmark's own venv (``setup_peers.sh``).

Run by ``python -m benchmarks`` as ``.bench-venv/bin/python benchmarks/peers.py KIND PARAMS`` (the
``_common.Worker`` protocol); it imports nothing of the project. Each peer at its most durable setting:

* ``eventsourcing``: the library's ``SQLiteApplicationRecorder`` (WAL, ``synchronous=FULL`` set on
  every pooled connection); one finding = one new aggregate's first event, one ``insert_events`` call
  (one transaction).
* ``langgraph``: ``langgraph.store.sqlite.SqliteStore.put`` (its own transaction per call) on a
  connection as ``SqliteStore.from_conn_string`` makes it (rollback journal), or with ``wal`` in WAL;
  ``synchronous=FULL`` either way.
* ``dbos``: DBOS Transact with its SQLite system database (``system_database_url=sqlite:///...``;
  SQLite's default rollback journal, ``synchronous=FULL``): one workflow with one step per finding,
  each checkpointed before the call returns.

Reads (``*-read`` kinds) load the same findings (a JSON-lines export) untimed, then time the peer's
filtered read of the newest 10 with a tag.
"""

from __future__ import annotations

import importlib.metadata
import json
import sqlite3
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks._common import serve

Run = Callable[[int, int], "dict[str, Any] | None"]
TOPIC = "bench:FindingLearned"


def _finding(who: str, i: int) -> dict[str, Any]:
    return {"text": f"peer finding {who}-{i}", "source": "bench", "tags": ["bench"]}


def _es_recorder(path: str) -> Any:
    from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

    datastore = SQLiteDatastore(path, lock_timeout=60)
    create = datastore.pool._create_connection

    def durable() -> Any:  # the most durable setting, whatever the library or SQLite defaults to
        conn = create()
        conn._sqlite_conn.execute("PRAGMA synchronous = FULL")
        return conn

    datastore.pool._create_connection = durable  # type: ignore[method-assign]
    recorder = SQLiteApplicationRecorder(datastore)
    recorder.create_table()
    return recorder


def _eventsourcing(params: dict[str, Any]) -> Run:
    from eventsourcing.persistence import StoredEvent

    recorder = _es_recorder(params["path"])
    who = params["who"]

    def run(n: int, start: int) -> None:
        for i in range(start, start + n):
            state = json.dumps(_finding(who, i)).encode()
            recorder.insert_events([StoredEvent(uuid.uuid4(), 1, TOPIC, state)])

    return run


def _lg_store(path: str, wal: bool = True) -> Any:
    """A ``SqliteStore`` on a connection made as ``SqliteStore.from_conn_string`` makes it (SQLite's
    rollback journal), or in WAL; ``synchronous=FULL`` either way."""
    from langgraph.store.sqlite import SqliteStore

    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=60)
    if wal:
        conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    store = SqliteStore(conn)
    store.setup()
    return store


def _langgraph(params: dict[str, Any]) -> Run:
    store = _lg_store(params["path"], wal=params.get("wal", False))
    who = params["who"]

    def run(n: int, start: int) -> None:
        for i in range(start, start + n):
            store.put(("findings", "bench"), f"{who}-{i}", _finding(who, i))

    return run


def _dbos(params: dict[str, Any]) -> tuple[dict[str, Any], Run]:
    import logging

    from dbos import DBOS

    logging.getLogger("dbos").setLevel(logging.WARNING)
    DBOS(
        config={
            "name": "flows-bench",
            "system_database_url": f"sqlite:///{params['path']}",
            "run_admin_server": False,
            "log_level": "WARNING",
        }
    )

    @DBOS.step()
    def record(finding: dict[str, Any]) -> str:
        return str(finding["text"])

    @DBOS.workflow()
    def learn(finding: dict[str, Any]) -> str:
        return record(finding)

    DBOS.launch()
    who = params["who"]

    def run(n: int, start: int) -> None:
        for i in range(start, start + n):
            learn(_finding(who, i))

    return {"version": importlib.metadata.version("dbos")}, run


def _dataset(path: str) -> list[dict[str, Any]]:
    """The findings, oldest first (``key, text, source, tags, learnedMs``)."""
    with open(path, "rb") as f:
        return [json.loads(line) for line in f]


def _median_ms(fn: Callable[[], object], calls: int) -> float:
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def _eventsourcing_read(params: dict[str, Any]) -> Run:
    """Newest 10 with a tag: the notification log paged backwards from its end, events decoded and
    filtered (the recorder has no secondary index; a user without a projection reads it so)."""
    from eventsourcing.persistence import StoredEvent

    recorder = _es_recorder(params["path"])
    rows = _dataset(params["dataset"])
    for i in range(0, len(rows), 1000):
        recorder.insert_events(
            [
                StoredEvent(uuid.uuid5(uuid.NAMESPACE_URL, r["key"]), 1, TOPIC, json.dumps(r).encode())
                for r in rows[i : i + 1000]
            ]
        )
    page = 500

    def newest(tag: str, limit: int = 10) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        stop = recorder.max_notification_id() or 0
        while stop > 0 and len(found) < limit:
            start = max(1, stop - page + 1)
            batch = recorder.select_notifications(start, page, stop=stop)
            for note in reversed(batch):
                obj = json.loads(note.state)
                if tag in obj["tags"]:
                    found.append(obj)
                    if len(found) == limit:
                        break
            stop = start - 1
        return found

    tags = params["tags"]

    def run(n: int, start: int) -> dict[str, Any]:
        it = iter(tags * (n // len(tags) + 1))
        first = [r["key"] for r in newest(tags[0])]
        return {"median_ms": _median_ms(lambda: newest(next(it)), n), "first": first}

    return run


def _langgraph_read(params: dict[str, Any]) -> Run:
    """Newest 10 with a tag: ``SqliteStore.search`` with a filter (its filters are equality on value
    keys, so each value also carries ``tagset: {tag: true}``; the store orders by ``updated_at``)."""
    from langgraph.store.base import PutOp

    store = _lg_store(params["path"])
    rows = _dataset(params["dataset"])
    for i in range(0, len(rows), 1000):
        store.batch(
            [
                PutOp(("findings", "bench"), r["key"], {**r, "tagset": dict.fromkeys(r["tags"], True)})
                for r in rows[i : i + 1000]
            ]
        )
        time.sleep(0.002)  # distinct updated_at per batch keeps "newest" meaning newest learned

    def newest(tag: str) -> list[Any]:
        return store.search(("findings",), filter={f"tagset.{tag}": True}, limit=10)

    tags = params["tags"]

    def run(n: int, start: int) -> dict[str, Any]:
        it = iter(tags * (n // len(tags) + 1))
        first = [item.key for item in newest(tags[0])]
        return {"median_ms": _median_ms(lambda: newest(next(it)), n), "first": first}

    return run


def setup(kind: str, params: dict[str, Any]) -> tuple[dict[str, Any], Run]:
    """Build the peer ``kind``; return what it reports when ready and its round function."""
    if kind == "eventsourcing":
        return {}, _eventsourcing(params)
    if kind == "langgraph":
        return {}, _langgraph(params)
    if kind == "dbos":
        return _dbos(params)
    if kind == "eventsourcing-read":
        return {}, _eventsourcing_read(params)
    if kind == "langgraph-read":
        return {}, _langgraph_read(params)
    raise ValueError(f"unknown peer kind {kind!r}")


if __name__ == "__main__":
    serve(setup)

"""Write contenders run in their own processes, on the project's interpreter (see ``_common.Worker``).

Kinds (``python -m benchmarks._worker KIND PARAMS``):

* ``append``: the floor's first half: append one line to a shared file under an exclusive
  portalocker lock and fsync it;
* ``file``: the floor's second half: a new file (exclusive create, write, fsync), ``os.replace``,
  fsync of the directory;
* ``floor``: the raw journal-first sequence, both halves (three fsyncs), no library code;
* ``oneflush``: the raw sequence a learn makes now: a new file written without fsync, the line
  appended and fsync'd under the lock, the rename (no directory fsync): one device flush;
* ``oneflush_update``: the raw sequence an update makes on a file journal, the ``oneflush`` one and
  then the old version's retirement: its retired file written without fsync and renamed into the
  retired folder, its learned file renamed to a hidden name, those names unlinked 128 at a time;
* ``learn``: ``MemoryStore.learn`` of distinct findings on the root run ``run_id``/``epoch`` (given the
  lease token, as another process on the same root); ``threads`` > 1 learns on that many threads;
* ``flow``: a flow run per round (``flows.run``) whose body starts every learn before awaiting any,
  so the store's executor (8 threads) learns concurrently;
* ``sqlite``: plain ``sqlite3``, one insert per transaction, WAL, ``synchronous=FULL``.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import portalocker

from benchmarks._common import serve

Run = Callable[[int, int], None]


def _append_line(journal_fd: int, data: bytes) -> None:
    portalocker.lock(journal_fd, portalocker.LockFlags.EXCLUSIVE)
    try:
        os.write(journal_fd, data)
        os.fsync(journal_fd)
    finally:
        portalocker.unlock(journal_fd)


def _new_file(directory: Path, name: str, data: bytes) -> None:
    stage_path = directory / f".stage-{name}"
    fd = os.open(stage_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.write(fd, data)
    os.fsync(fd)
    os.close(fd)
    os.replace(stage_path, directory / name)
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(dfd)
    os.close(dfd)


def _raw(params: dict[str, Any], kind: str) -> Run:
    directory = Path(params["dir"])
    directory.mkdir(parents=True, exist_ok=True)
    journal_fd = os.open(params["journal"], os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    who = params["who"]

    def run(n: int, start: int) -> None:
        for i in range(start, start + n):
            data = orjson.dumps({"id": f"{who}-{i}", "text": f"raw finding {i}", "tags": ["bench"]}) + b"\n"
            if kind != "file":  # the journal-first order: stage, append, publish
                staged = kind in ("floor", "oneflush")
                if staged:
                    stage_path = directory / f".stage-{who}-{i}.json"
                    fd = os.open(stage_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
                    os.write(fd, data)
                    if kind == "floor":
                        os.fsync(fd)
                    os.close(fd)
                _append_line(journal_fd, data)
                if staged:
                    os.replace(stage_path, directory / f"{who}-{i}.json")
                if kind == "floor":
                    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
                    os.fsync(dfd)
                    os.close(dfd)
            else:
                _new_file(directory, f"{who}-{i}.json", data)

    return run


def _raw_update(params: dict[str, Any]) -> Run:
    directory = Path(params["dir"])
    retired = directory.parent / "retired"
    directory.mkdir(parents=True, exist_ok=True)
    retired.mkdir(parents=True, exist_ok=True)
    journal_fd = os.open(params["journal"], os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    who, memories = params["who"], params.get("memories", 50)
    live = {m: f"{who}-{m}-first.json" for m in range(memories)}
    for name in live.values():  # the first versions, untimed
        (directory / name).write_bytes(b"{}\n")
    gone: list[str] = []

    def staged(folder: Path, data: bytes) -> Path:
        path = folder / f".stage-{os.urandom(8).hex()}.finding"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        os.write(fd, data)
        os.close(fd)
        return path

    def run(n: int, start: int) -> None:
        for i in range(start, start + n):
            m = i % memories
            old = live[m]
            data = orjson.dumps({"id": f"{who}-{i}", "text": f"raw version {i}", "supersedes": old}) + b"\n"
            stage = staged(directory, data)
            _append_line(journal_fd, data)
            live[m] = f"{who}-{m}-{i}.json"
            os.replace(stage, directory / live[m])
            os.replace(staged(retired, data), retired / old)
            hidden = f".stage-{os.urandom(8).hex()}.gone"
            os.rename(directory / old, directory / hidden)
            gone.append(hidden)
            if len(gone) >= 128:
                for name in gone:
                    os.unlink(directory / name)
                gone.clear()

    return run


def _learn(params: dict[str, Any]) -> Run:
    import journal
    import memory

    store = memory.MemoryStore(params["db"], journal=params["journal"])
    jr = store.open_journal()
    root = memory.RootRun(jr, journal.Lease(params["run_id"], params["epoch"]), "bench", params["scope"])
    jr.read(root.run_id, memory.STREAM)  # connect and warm before the clock starts
    who, threads = params["who"], params.get("threads", 1)
    pool = ThreadPoolExecutor(threads) if threads > 1 else None

    def one(i: int) -> None:
        store.learn({"text": f"engine finding {who}-{i}", "tags": ["bench"]}, root)

    def run(n: int, start: int) -> None:
        if pool is None:
            for i in range(start, start + n):
                one(i)
        else:
            list(pool.map(one, range(start, start + n)))

    return run


def _update(params: dict[str, Any]) -> Run:
    """``update`` of memories learned at setup (untimed), round-robin: each op finds a memory's
    live version and journals its next one (a learn that supersedes it)."""
    import journal
    import memory

    store = memory.MemoryStore(params["db"], journal=params["journal"])
    jr = store.open_journal()
    root = memory.RootRun(jr, journal.Lease(params["run_id"], params["epoch"]), "bench", params["scope"])
    who = params["who"]
    ids = [
        store.learn({"text": f"memory {who}-{i} as first learned", "tags": ["bench"]}, root).memory_id
        for i in range(params["memories"])
    ]

    from memory._reaper import REAPER

    def run(n: int, start: int) -> None:
        for i in range(start, start + n):
            store.update(
                ids[i % len(ids)],
                {"text": f"memory {who}-{i % len(ids)} version {i}", "tags": ["bench"]},
                root,
            )
        # the old versions' files are unlinked in the background: the round ends when they are
        # gone, so their device time is the round's, never the next contender's
        REAPER.drain()

    return run


def _flow(params: dict[str, Any]) -> Run:
    import flows
    import memory

    store = memory.MemoryStore(params["db"], journal=params["journal"])

    def run(n: int, start: int) -> None:
        @flows.flow(name="bench-flow", scope=params["scope"])
        async def body(f: Any) -> None:
            steps = [
                f.memory.learn({"text": f"flow finding {i}", "tags": ["bench"]})
                for i in range(start, start + n)
            ]
            for step in steps:
                await step

        result = flows.run(body, store=store)
        if not result.ok:
            raise RuntimeError(f"the flow failed: {result.error}")

    run(1, -1)  # warm: begin a root, start the executor
    return run


def _sqlite(params: dict[str, Any]) -> Run:
    # Writers starting at once take turns to set the file up: SQLite answers a switch to WAL that
    # meets another connection's switch with "database is locked" at once, whatever the busy timeout
    with portalocker.Lock(params["path"] + ".setup-lock", timeout=60):
        conn = sqlite3.connect(params["path"], isolation_level=None, timeout=60)
        conn.execute("PRAGMA busy_timeout = 60000")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("CREATE TABLE IF NOT EXISTS f (id INTEGER PRIMARY KEY, k TEXT UNIQUE, body TEXT)")
    who = params["who"]
    lock = threading.Lock()

    def run(n: int, start: int) -> None:
        with lock:
            for i in range(start, start + n):
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT INTO f (k, body) VALUES (?, ?)", (f"{who}-{i}", f"sqlite finding {i}"))
                conn.execute("COMMIT")

    return run


def setup(kind: str, params: dict[str, Any]) -> tuple[dict[str, Any], Run]:
    """Build the contender ``kind``; return what it reports when ready and its round function."""
    if kind in ("append", "file", "floor", "oneflush"):
        return {}, _raw(params, kind)
    if kind == "oneflush_update":
        return {}, _raw_update(params)
    if kind == "learn":
        return {}, _learn(params)
    if kind == "update":
        return {}, _update(params)
    if kind == "flow":
        return {}, _flow(params)
    if kind == "sqlite":
        return {"sqlite": sqlite3.sqlite_version}, _sqlite(params)
    raise ValueError(f"unknown worker kind {kind!r}")


if __name__ == "__main__":
    serve(setup)

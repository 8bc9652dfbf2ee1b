"""Where in the journal each finding's records are: a derived index, so an erase reads a few runs.

An erase must find every record that holds a memory's content (each commit of each of its
versions, in any run) and its forgets and earlier erasures. Without help that is a read of every
run's streams: seconds per 100,000 records. This index, ``<db-dir>/flows-cache/journal-keys.sqlite3``,
keeps, for the ``memory-learn``, ``memory-forget`` and ``memory-erase`` streams of every run, which
keys (and which memory) each run holds records of. It holds keys and run ids only, never content,
so an erase leaves it in place (keys and memory ids are what the erase's own audit keeps).

It is brought up to date before each use, at the cost of one look per stream: on a file journal
a ``stat`` of the stream's file (its inode, size and mtime; a stream whose stamp changed is read
again whole, and its rows replaced), on PostgreSQL one query per stream for every run's newest
record (``stream_heads``; records are only ever added, and an erase's rewrite keeps each record's
number and key). The stamp is taken before the read, so a stream that grows meanwhile is read
again next time. Runs no longer listed lose their rows.

It is never trusted for content: the caller reads the runs it names through the journal, which
checks every record as always. It only narrows which runs are read. It is derived state, safe to
delete; a damaged or unreadable index is removed and the caller reads every run (``runs_of``
returns None). What it does not promise: a process that can write the store's folder can forge it
and hide a run from an erase, as it could rewrite the journal itself; ``flows check`` reads every
run and reports an erase left incomplete.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import stat
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from journal import FileJournal, JournalBackend, Record
from memory._filecache import cache_dir

log = logging.getLogger(__name__)

KEYS_FILE = "journal-keys.sqlite3"
"""The index's file name in ``flows-cache``."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS streams (run_id TEXT NOT NULL, stream TEXT NOT NULL, stamp TEXT NOT NULL,
    PRIMARY KEY (run_id, stream)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS keyed (key TEXT NOT NULL, memory TEXT, run_id TEXT NOT NULL, stream TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS keyed_key ON keyed (key);
CREATE INDEX IF NOT EXISTS keyed_memory ON keyed (memory);
CREATE INDEX IF NOT EXISTS keyed_run ON keyed (run_id, stream);
"""


def keys_path(db_path: Path) -> Path:
    """``<db-dir>/flows-cache/journal-keys.sqlite3``."""
    return cache_dir(db_path) / KEYS_FILE


def _entries(rec: Record, streams: tuple[str, str, str]) -> list[tuple[str, str | None]]:
    """The (key, memory) pairs a record is about; nothing for a record of another shape (the read
    that follows checks every record it is sent to)."""
    learn, retire, erase = streams
    p = rec.payload
    if not isinstance(p, Mapping):
        return []
    out: list[tuple[str, str | None]] = []
    if rec.stream == learn:
        key, memory = p.get("id"), p.get("memory")
        if isinstance(key, str):
            out.append((key, memory if isinstance(memory, str) else key))
            old = p.get("supersedes")
            if isinstance(old, str) and "supersedesScope" in p:  # the commit retires that version
                out.append((old, memory if isinstance(memory, str) else key))
    elif rec.stream == retire:
        if isinstance(p.get("id"), str):
            out.append((p["id"], None))
        ids = p.get("ids")
        if isinstance(ids, list):
            out += [(i[0], None) for i in ids if isinstance(i, list) and i and isinstance(i[0], str)]
    elif rec.stream == erase:
        memory = p.get("memory")
        if isinstance(memory, str):
            out.append((memory, memory))
            keys = p.get("keys")
            if isinstance(keys, list):
                out += [(k, memory) for k in keys if isinstance(k, str)]
    return out


class JournalKeys:
    """The index of one store (see the module). Thread-safe; each process keeps its own connection."""

    def __init__(self, db_path: Path, streams: tuple[str, str, str], *, enabled: bool = True) -> None:
        """``enabled`` False: a store that must write nothing keeps no index (every use reads
        every run)."""
        self._enabled = enabled
        self._path = keys_path(db_path)
        self._streams = streams
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _db(self) -> sqlite3.Connection | None:
        if self._conn is None:
            try:
                self._conn = self._open()
            except sqlite3.Error as exc:  # not an index of ours: built again
                self._drop(exc)
                try:
                    self._conn = self._open()
                except sqlite3.Error:
                    return None
        return self._conn

    def _open(self) -> sqlite3.Connection | None:
        """The index, opened (and made, with its private folder); None where it is not a regular
        file in a real folder (a link is never followed) or cannot be made."""
        folder = self._path.parent
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            if not stat.S_ISDIR(os.lstat(folder).st_mode):
                return None
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    return None
            finally:
                os.close(fd)
        except OSError:
            return None
        conn = sqlite3.connect(str(self._path), timeout=30, check_same_thread=False, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = OFF")  # derived: a power loss costs a rebuild at most
            conn.executescript(_SCHEMA)
        except BaseException:
            conn.close()
            raise
        return conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _drop(self, why: BaseException) -> None:
        """Remove a damaged index (the next use builds it again from the journal)."""
        log.warning("the journal's key index %s is unusable (%s): it is built again", self._path, why)
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(OSError):
                os.unlink(f"{self._path}{suffix}")

    def refresh(self, backend: JournalBackend, progress: Callable[[int, int], None] | None = None) -> bool:
        """Bring the index up to date now, telling ``progress(done, total)`` of the streams it reads
        again (the first use of a store's index reads every run); whether the store keeps one.

        Raises:
            JournalError: a stream could not be read.
        """
        with self._lock:
            return self._refreshed(backend, progress) is not None

    def runs_of(self, backend: JournalBackend, key: str, *, again: bool = True) -> set[str] | None:
        """The runs holding a record of the memory ``key`` names (any version's commit, forget or
        erasure), after bringing the index up to date; None when this journal keeps no index here
        (the caller reads every run).

        Raises:
            JournalError: a stream the index had to read again could not be read.
        """
        runs: set[str] | None = None
        with self._lock:
            fresh = self._refreshed(backend, None)
            if fresh is not None:
                conn, listed = fresh
                try:
                    found = self._runs(conn, key)
                except sqlite3.Error as exc:
                    self._drop(exc)
                else:
                    strays = found - listed  # rows naming no run of the journal: damage, a forgery
                    if strays:
                        named = list(strays)[:3]
                        self._drop(ValueError(f"it names runs the journal does not hold: {named!r}"))
                    else:
                        runs = found
        if runs is None and again and self._kept(backend):  # built again from the journal, once
            return self.runs_of(backend, key, again=False)
        return runs

    def _kept(self, backend: JournalBackend) -> bool:
        """Whether this store keeps an index of ``backend`` at all."""
        return self._enabled and self._stamper(backend) is not None

    def _refreshed(
        self, backend: JournalBackend, progress: Callable[[int, int], None] | None
    ) -> tuple[sqlite3.Connection, set[str]] | None:
        """The index brought up to date, and the runs the journal lists; None when none is kept
        here, or it was unusable (then deleted). The caller holds the lock."""
        if not self._kept(backend):
            return None
        conn = self._db()
        if conn is None:
            return None
        try:
            return conn, self._refresh(conn, backend, self._stamper(backend), progress)
        except sqlite3.Error as exc:
            self._drop(exc)
            return None

    def _stamper(self, backend: JournalBackend) -> Any:
        if isinstance(backend, FileJournal):
            return self._file_stamps
        if getattr(backend, "stream_heads", None) is not None:
            return self._head_stamps
        return None

    def _file_stamps(self, backend: JournalBackend) -> Iterable[tuple[str, str, str | None]]:
        assert isinstance(backend, FileJournal)
        for run_id in backend.run_ids():
            for stream, path in zip(self._streams, backend.stream_files(run_id, self._streams), strict=True):
                try:
                    st = os.lstat(path)
                except FileNotFoundError:
                    yield run_id, stream, None
                    continue
                except OSError:
                    yield run_id, stream, "?"  # read it: the journal says what is wrong
                    continue
                kind = "f" if stat.S_ISREG(st.st_mode) else "?"
                yield run_id, stream, f"{kind}{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"

    def _head_stamps(self, backend: JournalBackend) -> Iterable[tuple[str, str, str | None]]:
        heads = {stream: backend.stream_heads(stream) for stream in self._streams}  # type: ignore[attr-defined]
        for run in backend.runs():
            for stream in self._streams:
                head = heads[stream].get(run.run_id)
                yield run.run_id, stream, None if head is None else str(head)

    def _refresh(
        self,
        conn: sqlite3.Connection,
        backend: JournalBackend,
        stamps: Any,
        progress: Callable[[int, int], None] | None = None,
    ) -> set[str]:
        """Bring the index up to date with the journal; the ids of the runs it lists."""
        known = dict(((r, s), t) for r, s, t in conn.execute("SELECT run_id, stream, stamp FROM streams"))
        seen: set[tuple[str, str]] = set()
        stale = []
        for run_id, stream, stamp in stamps(backend):
            seen.add((run_id, stream))
            want = stamp or "-"
            if known.get((run_id, stream)) != want or stamp == "?":
                stale.append((run_id, stream, stamp, want))
        for done, (run_id, stream, stamp, want) in enumerate(stale, 1):
            if progress is not None and (done % 50 == 0 or done == len(stale)):
                progress(done, len(stale))
            records = backend.read(run_id, stream) if stamp is not None else ()
            rows = [(k, m, run_id, stream) for rec in records for k, m in _entries(rec, self._streams)]
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute("DELETE FROM keyed WHERE run_id = ? AND stream = ?", (run_id, stream))
                conn.executemany("INSERT INTO keyed VALUES (?, ?, ?, ?)", rows)
                conn.execute("INSERT OR REPLACE INTO streams VALUES (?, ?, ?)", (run_id, stream, want))
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
        gone = [k for k in known if k not in seen]
        if gone:
            conn.execute("BEGIN IMMEDIATE")
            for run_id, stream in gone:
                conn.execute("DELETE FROM keyed WHERE run_id = ? AND stream = ?", (run_id, stream))
                conn.execute("DELETE FROM streams WHERE run_id = ? AND stream = ?", (run_id, stream))
            conn.execute("COMMIT")
        return {run_id for run_id, _ in seen}

    def _runs(self, conn: sqlite3.Connection, key: str) -> set[str]:
        learn = self._streams[0]
        row = conn.execute(
            "SELECT memory FROM keyed WHERE key = ? AND stream = ? AND memory IS NOT NULL LIMIT 1",
            (key, learn),
        ).fetchone()
        memory = row[0] if row is not None else key
        versions = conn.execute("SELECT key FROM keyed WHERE memory = ? AND stream = ?", (memory, learn))
        keys = {key, memory} | {k for (k,) in versions}
        marks = ",".join("?" * len(keys))
        return {
            r
            for (r,) in conn.execute(
                f"SELECT DISTINCT run_id FROM keyed WHERE key IN ({marks}) OR memory = ?", [*keys, memory]
            )
        }

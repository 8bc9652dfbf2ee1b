"""Everything the dashboard reads, behind one lock, opened for reading only.

* The journal is opened by location; the dashboard only reads runs and streams (whether a run's
  holder lives is a shared, non-blocking probe of its lease lock, which is what a reader does).
* The history DB is read through the memory layer. Its connection migrates an older schema on
  first use, which is a write: so before the first read, the DB's schema version is read through a
  connection SQLite opens read-only (``mode=ro``), and an older one is refused (``serve_db_outdated``:
  run ``flows sync`` once to upgrade it). At the current schema the memory layer's reads write
  nothing to the store (SQLite keeps its shared-memory index, ``-shm``, beside a WAL database for
  every reader).
* Agent homes are read with plain read-only opens (``Agent``); the ledger's snapshot is never
  written.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import memory
from flows.web._agent import Agent
from flows.web._errors import ServeDbOutdated, ServeNotFound
from flows.web._runs import RunIndex
from journal import JournalBackend


@dataclass(frozen=True)
class ServeConfig:
    """What ``flows serve`` was asked to show and how to guard it."""

    db: str | None = None
    journal: str | None = None
    sail_homes: tuple[Path, ...] = ()
    token: str | None = None


class Reader:
    """The store, its journal and the agent homes, read under one lock (``lock``).

    The memory layer and the journal keep caches that are not meant for concurrent use from many
    request threads; a dashboard's reads are short, so one at a time is simple and enough.
    """

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.lock = threading.Lock()
        # file_index=False: the dashboard writes nothing, not even the derived files' index
        self.store = memory.MemoryStore(config.db, journal=config.journal, file_index=False, recover=False)
        self.agents = [Agent(i, home) for i, home in enumerate(config.sail_homes)]
        self._backend: JournalBackend | None = None
        self._index: RunIndex | None = None
        self._db_checked: tuple[int, int] | None = None

    @property
    def backend(self) -> JournalBackend:
        """The journal, opened on first use.

        Raises:
            journal.JournalUnavailable: a PostgreSQL journal cannot be reached.
        """
        if self._backend is None:
            self._backend = self.store.open_journal()
        return self._backend

    @property
    def runs(self) -> RunIndex:
        """The runs listing, kept current between requests."""
        if self._index is None:
            self._index = RunIndex(self.backend)
        return self._index

    def memory(self) -> memory.MemoryStore:
        """The findings memory, after checking that reading its DB will not migrate it.

        Raises:
            ServeDbOutdated: the DB's schema is older than this flows-memory.
            memory.Unreachable: the DB cannot be opened or is damaged.
        """
        path = self.store.db_path
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return self.store  # reads of a missing DB see no rows and create nothing
        except OSError as exc:
            raise memory.Unreachable(
                f"cannot read the history DB {path}: {exc.strerror or exc}", path=path
            ) from exc
        if self._db_checked != (st.st_dev, st.st_ino):
            version = _schema_version(path)
            if version < memory.SCHEMA_VERSION:
                raise ServeDbOutdated(
                    f"the history DB {path} has schema {version}, older than this flows-memory "
                    f"({memory.SCHEMA_VERSION}); the dashboard never writes the store: run `flows sync` "
                    "once to upgrade it, then reload",
                    path=path,
                )
            self._db_checked = (st.st_dev, st.st_ino)
        return self.store

    def agent(self, number: int) -> Agent:
        """The agent at ``/agents/<number>``.

        Raises:
            ServeNotFound: there is no such agent.
        """
        if not 0 <= number < len(self.agents):
            raise ServeNotFound(
                f"no agent {number}: this server shows {len(self.agents)} agent home(s) (--sail-home)"
            )
        return self.agents[number]

    def journal_label(self) -> str:
        """Where the journal is, for the page's footer (a DSN never shows its password)."""
        location = str(self.store.journal_location)
        if "://" not in location:
            return location
        parts = urllib.parse.urlsplit(location)
        host = parts.hostname or ""
        netloc = f"{parts.username}@{host}" if parts.username else host
        if parts.port:
            netloc += f":{parts.port}"
        return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))

    def close(self) -> None:
        """Close the store and its journal (safe twice)."""
        with self.lock:
            self.store.close()
            self._backend = None
            self._index = None


def _schema_version(path: Path) -> int:
    """``PRAGMA user_version`` of the DB at ``path``, through a read-only connection."""
    uri = "file:" + urllib.parse.quote(str(path)) + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=30.0)
        try:
            return int(conn.execute("PRAGMA user_version").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise memory.Unreachable(
            f"cannot open the history DB {path}: {exc}; check the path, or move a damaged DB aside and "
            "run `flows sync`",
            path=path,
        ) from exc

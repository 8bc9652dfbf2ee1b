"""Everything the dashboard reads, opened for reading only; the store behind one lock.

* The journal is opened by location; the dashboard only reads runs and streams (whether a run's
  holder lives is a shared, non-blocking probe of its lease lock, which is what a reader does).
* The history DB is read through the memory layer opened ``read_only``: it never migrates the DB
  and creates no file beside it (SQLite would make a ``-shm`` and a ``-wal`` for a plain ``mode=ro``
  reader of a WAL database; see ``HistoryDB._open_without_creating``). Before the first read the
  DB's schema version is read the same way, and an older one is refused (``serve_db_outdated``: run
  ``flows sync`` once to upgrade it) once it has held still: ``flows sync`` creates the DB and
  migrates it a schema version per transaction, so a read in the middle sees an older schema that
  is moments from this one (``Reader.memory``).
* Agent homes are read with plain read-only opens (``Agent``); the ledger's snapshot is never
  written.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import memory
from flows.web._agent import Agent
from flows.web._errors import ServeDbOutdated, ServeNotFound
from flows.web._findings import KeyIndex
from flows.web._runs import RunIndex
from journal import JournalBackend, shown_location

#: how long an older schema and the DB's files must hold still before the DB is called outdated: a
#: ``flows sync`` creating or migrating it writes its log at each version's commit, far more often
DB_QUIET_S = 1.0
#: the longest a read waits for a DB that is being migrated to reach this flows-memory's schema
DB_WAIT_S = 5.0
#: how often the DB is looked at meanwhile
DB_POLL_S = 0.02


@dataclass(frozen=True)
class ServeConfig:
    """What ``flows serve`` was asked to show and how to guard it."""

    db: str | None = None
    journal: str | None = None
    sail_homes: tuple[Path, ...] = ()
    token: str | None = None


class Reader:
    """The store and its journal, read under one lock (``lock``), and the agent homes, read under none.

    The memory layer and the journal keep caches that are not meant for concurrent use from many
    request threads (as do the runs listing and the key index kept here), so the store's reads go
    one at a time. An agent's reads share nothing: each opens its own descriptors on the home's
    files and keeps nothing between requests, so an agent's page (its journal narrates every line
    of two days: seconds on a busy ledger) holds up no other client's page.
    """

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.lock = threading.Lock()
        # read_only: the dashboard writes nothing, not even the derived files' index or SQLite's -shm
        self.store = memory.MemoryStore(config.db, journal=config.journal, read_only=True)
        self.agents = [Agent(i, home) for i, home in enumerate(config.sail_homes)]
        self._backend: JournalBackend | None = None
        self._index: RunIndex | None = None
        self._db_checked: tuple[int, int] | None = None
        self._db_still: tuple[int, object] | None = None  # an older DB's version and files, found still
        self._db_busy_until = 0.0  # until then, an older DB found still being written is said so at once
        self._keys = KeyIndex()

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

    def runs_naming(self, key: str) -> list[str]:
        """The ids of the root runs whose memory streams name the finding ``key`` (a finding's
        history looks in these only), from the runs listing kept current between requests."""
        return self._keys.runs_naming(self.backend, self.runs.runs(), key)

    def memory(self) -> memory.MemoryStore:
        """The findings memory, after checking that reading its DB will not migrate it.

        A DB whose schema is older than this flows-memory's is looked at again until it reaches it
        (a ``flows sync`` was creating or migrating it: the read answers from the synced DB), or until
        neither its version nor its files changed for ``DB_QUIET_S`` (nobody is migrating it: it is
        outdated), for at most ``DB_WAIT_S`` (a migration still running: said so, to reload).

        Raises:
            ServeDbOutdated: the DB's schema is older than this flows-memory, and held still; or a
                migration was still writing it after ``DB_WAIT_S`` (``upgrading``).
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
            version, upgrading = self._settled_schema(path)
            if upgrading:
                raise ServeDbOutdated(
                    f"the history DB {path} is being upgraded right now, or written by an older "
                    f"flows-memory (schema {version} of {memory.SCHEMA_VERSION}, still being written "
                    f"after {DB_WAIT_S:g} s): reload in a moment; if it stays so, stop the older "
                    "flows-memory writing it",
                    path=path,
                    version=version,
                    upgrading=True,
                )
            if version < memory.SCHEMA_VERSION:
                raise ServeDbOutdated(
                    f"the history DB {path} has schema {version}, older than this flows-memory "
                    f"({memory.SCHEMA_VERSION}); the dashboard never writes the store: run `flows sync` "
                    "once to upgrade it, then reload",
                    path=path,
                    version=version,
                    upgrading=False,
                )
            self._db_checked = (st.st_dev, st.st_ino)
        return self.store

    def _settled_schema(self, path: Path) -> tuple[int, bool]:
        """The DB's schema version, and whether it was still changing below this flows-memory's
        when ``DB_WAIT_S`` ran out (see ``memory``). An older DB found still is remembered with its
        files' stamps, so the next request over the same files answers at once."""
        version = self.store.db.schema_version()
        if version >= memory.SCHEMA_VERSION:
            return version, False
        seen = (version, _files_stamp(path))
        if seen == self._db_still:
            return version, False
        started = changed = time.monotonic()
        if started < self._db_busy_until:
            # a request waited the whole wait on it just now: each request after it within a wait
            # is answered at once (they queue on the store's lock behind whoever waits, so waiting
            # again would hold each a wait more than the last)
            return version, True
        while True:
            time.sleep(DB_POLL_S)
            version = self.store.db.schema_version()
            if version >= memory.SCHEMA_VERSION:
                return version, False
            now, looked = time.monotonic(), (version, _files_stamp(path))
            if looked != seen:
                seen, changed = looked, now
            elif now - changed >= DB_QUIET_S:
                self._db_still = seen
                return version, False
            if now - started >= DB_WAIT_S:
                self._db_busy_until = time.monotonic() + DB_WAIT_S
                return version, True

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
            return location  # a folder, shown whole ('?' and all)
        return shown_location(location).partition("?")[0]  # the footer shows where, not how

    def close(self) -> None:
        """Close the store and its journal (safe twice)."""
        with self.lock:
            self.store.close()
            self._backend = None
            self._index = None
            self._keys = KeyIndex()


def _files_stamp(path: Path) -> tuple[tuple[int, int, int] | None, ...]:
    """The inode, size and mtime of the DB and of its write-ahead log (None for one not there): a
    migration commits to the log, so they move while one runs."""
    stamps: list[tuple[int, int, int] | None] = []
    for name in (str(path), f"{path}-wal"):
        try:
            st = os.stat(name)
        except OSError:
            stamps.append(None)
            continue
        stamps.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(stamps)

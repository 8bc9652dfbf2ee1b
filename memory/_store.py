"""``MemoryStore``: the front of the findings memory.

It owns the lifecycle (the history DB, the journal, the one executor async calls run on) and wires the
parts, each in its own module:

* ``_publisher.Publisher``: scope folders, staging and publishing learned files, fsyncs;
* ``_learn.Learner``: learn journal-first, republish a resumed run's commits;
* ``_search.Search``: recall and why over the DB and the unsynced files;
* ``_syncing.Syncer``: materialize from the journal, sync into the DB.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

import journal
from journal import JournalBackend, JournalError, JournalLeaseHeld, Record
from memory import _db as memory_db
from memory._citations import Citations
from memory._db import HistoryDB, db_mode
from memory._errors import (
    ArgumentInvalid,
    ErasePending,
    FindingRetired,
    FindingUnknown,
    StoreClosed,
    Unreachable,
    Unwritable,
)
from memory._filecache import cache_dir
from memory._files import own_entry, parse_learned
from memory._finding import (
    ERASE_STREAM,
    FORGET_MANY_MAX,
    RETIRE_STREAM,
    STREAM,
    check_filters,
    check_key,
    check_reason,
    checked_commit,
    filter_erased,
    finding_id,
    is_erased,
    render,
    retirements_in,
    validate,
)
from memory._keyindex import KEYS_FILE, JournalKeys
from memory._learn import Learner, scope_turn
from memory._paths import (
    QUARANTINE_DIR,
    refuse_odd_db,
    refuse_odd_folder,
    refuse_odd_journal,
    resolve_db,
    resolve_journal,
)
from memory._publisher import Publisher
from memory._reaper import DRAIN_AT_EXIT_S, REAPER
from memory._recovery import Recovery
from memory._results import HISTORY_PAGE, Citation, Recalled
from memory._retire import Located, Retirer, lists_heads
from memory._safe import read_file
from memory._search import Search, check_read
from memory._syncing import Syncer, latest_commits
from staging import StagingError, failpoint, stage

if TYPE_CHECKING:
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from memory._embed import Embedder
    from memory._erase import Erased
    from memory._files import Retired
    from memory._outcomes import (
        Explained,
        Forgotten,
        ForgottenMany,
        HistoryEvent,
        HistoryPage,
        Learned,
        SyncReport,
    )
    from memory._root import Root
    from memory._session import MemorySession

T = TypeVar("T")

UPDATE_ATTEMPTS = 16
"""How many times an update reads its memory's version again when another update replaced the one it
read before it could (updates of one scope take turns on a host, so each turn goes to one of them)."""
log = logging.getLogger(__name__)

CAUGHT_UP_FILE = "caught-up.json"
"""Where ``catch_up`` keeps the heads it reached, in ``<db-dir>/flows-cache`` (derived state)."""

EVERY_SCOPE_TURN = "memory-scopes"
"""The turn, among the hosts sharing a journal, that every scope's turn is part of (``_hosts_turn``):
a forget by filter holds it whole, so no update of any scope is between its look and its writes."""


def _check_where(
    verb: str,
    *,
    scope: str | None,
    tags: Sequence[str],
    meta: object,
    source: str | None,
    before_ms: int | None,
) -> tuple[tuple[str, ...], dict[str, str]]:
    """The one check of a forget's or an erase's filter: each part of the type and in the range a
    read takes (``check_read``: ``before_ms`` a signed 64-bit integer, never a bool or a float;
    ``check_filters``), and at least one part given, since an empty filter would reach every memory.
    Returns the tags and metadata pairs as ``check_filters`` does.

    Raises:
        ArgumentInvalid: a part is malformed or out of range, or no part is given.
    """
    check_read(scope=scope, source=source, tag=None, before_ms=before_ms, limit=None)
    every_tag, wanted_meta = check_filters(tags, meta)
    if scope is None and not tags and not meta and source is None and before_ms is None:
        raise ArgumentInvalid(
            f"{verb} by filter needs at least one of scope, tags, meta, source or before: an empty "
            f"filter would {verb} every memory of the store"
        )
    return every_tag, wanted_meta


def _now_ms() -> int:
    return journal.now_ms()


class MemoryStore:
    """Findings memory rooted at a history DB path.

    Args:
        db: the history DB (default: ``$FLOWS_DB``, else ``$XDG_DATA_HOME/flows/history.db``).
        journal: the journal location for reads and sync (default: ``$FLOWS_JOURNAL``, else
            ``<db-dir>/flows-journal``).
        clock: milliseconds since the epoch.
        max_workers: threads of the one executor that async calls run on.
        file_index: keep the unsynced files' index in ``<db-dir>/flows-cache`` (read by a fresh
            process's first read, written when it disagreed with the files). False for a reader
            that must write nothing (a long-lived one keeps its own index in memory either way).
        read_only: never write the store: the history DB is opened without creating any file
            beside it (``HistoryDB``'s ``read_only``), never migrated, and the files' index is
            neither read nor written (``file_index`` is then False). Writes (``learn``, ``forget``,
            ``sync``…) fail; reads answer as usual. For a reader that must leave the store exactly
            as it found it (the dashboard).
        recover: make the open-time check (``_recovery``): after a power loss, publish again the
            files of findings that runs which did not end cleanly committed and whose names were
            lost (None, the default: as ``file_index``; never with ``read_only``). False for a
            reader that must write nothing (it may then miss such a finding until a store is
            opened with it, or ``sync`` runs).

    The store is a context manager; ``close()`` is safe twice.

    Raises:
        Unreachable: the history DB's folder is there and is no folder (a file, a FIFO, a socket),
            or is a link to nothing.
    """

    def __init__(
        self,
        db: str | os.PathLike[str] | None = None,
        *,
        journal: str | os.PathLike[str] | None = None,
        clock: Callable[[], int] = _now_ms,
        max_workers: int = 8,
        file_index: bool = True,
        read_only: bool = False,
        recover: bool | None = None,
        embedder: Embedder | None = None,
    ) -> None:
        if embedder is None:
            self.embedder: Embedder | None = None
        else:
            from memory._embed import checked_embedder  # not at import: a store without one never needs it

            self.embedder = checked_embedder(embedder)
        self._clock = clock
        self.db_path = resolve_db(db)
        # a folder that is a file, a FIFO or a link to nothing holds no store: said here, naming it,
        # not later as an unreadable file below it or an empty store (one stat)
        refuse_odd_folder(self.db_path.parent)
        # so is a journal folder that is a FIFO, a file or below one: said here, not as a warning of
        # the open's recovery walk and an empty answer
        refuse_odd_journal(self.db_path, journal)
        self.journal_location = resolve_journal(self.db_path, journal)
        self.read_only = read_only
        file_index = file_index and not read_only
        self._db = HistoryDB(self.db_path, read_only=read_only)
        self._journal: JournalBackend | None = None
        self._journal_lock = threading.Lock()
        self._caught_up: dict[str, int] | None = None  # run id -> its last learn read (``catch_up``)
        self._catch_mark: str | None = None  # where ``catch_up``'s next look at moved heads starts
        self._erasures_seen: dict[str, int] = {}  # run id -> its last erase record a sync read
        self._closed = False
        self._catching_up = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._max_workers = max_workers
        self._publisher = Publisher(self.db_path)
        self._citations = Citations(self.open_journal)
        self._retirer = Retirer(self._db, self._publisher, self.open_journal, clock, self.journal_location)
        self._learner = Learner(self._publisher, self._retirer, clock)
        self._search = Search(
            self._db,
            self._publisher,
            clock,
            self._citations,
            file_index=file_index,
            embedder=self.embedder,
            shared=self._retirer.shared.current,
            read_only=read_only,
        )
        self._retirer.on_retired = self._search.discard_vectors
        self._publisher.hosts_turn = self._hosts_turn
        self._publisher.recover = self._recover_turn
        self._shared_turns: bool | None = None  # ``_shares_turns``, once the journal is known
        self._learner.hosts_journal = self._hosts_journal
        self._journal_keys = JournalKeys(
            self.db_path, (STREAM, RETIRE_STREAM, ERASE_STREAM), enabled=file_index
        )
        self._learner.on_learned = self._search.noted_version
        self._learner.on_updated = self._search.noted_update
        self._learner.on_committed = self._citations.committed
        self._retirer.on_committed = self._citations.committed
        self._retirer.check_retired = self._citations.check_retired
        self._syncer = Syncer(
            self._db, self._publisher, self.open_journal, clock, self._retirer, citations=self._citations
        )
        if not read_only:
            self._search.publish_successor = self._syncer.publish_successor
        self._search.successor_entry = self._successor_entry
        if (file_index if recover is None else recover) and not read_only:
            Recovery(
                self.db_path,
                self.journal_location,
                self.open_journal,
                self._restore_missing,
                walk=self._learner.one_scan,
            ).check()

    # -- lifecycle -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed(
                f"this memory store ({self.db_path}) is closed; open a new MemoryStore to go on",
                path=self.db_path,
            )

    def open_journal(self) -> JournalBackend:
        """The journal at ``journal_location``, opened once and shared."""
        self._check_open()
        with self._journal_lock:
            if self._journal is None:
                st = refuse_odd_db(self.db_path)  # before a write makes a journal beside it
                # a file journal made here takes the DB's mode, as the learned files do
                mode = db_mode(self.db_path, st)
                self._journal = journal.open_journal(self.journal_location, mode=mode)
            return self._journal

    def _hosts_turn(self, scope: str) -> contextlib.AbstractContextManager[None]:
        """The turn of ``scope`` among the hosts sharing this store's journal, which an update (and
        a forget or an erase) holds inside this host's (``Publisher.update_turn``): on a journal
        hosts share, two hosts retiring one version at once would each append a retirement, and
        which of them stands would be settled by the clocks of their records, after one of them
        had answered. A journal of one host needs none."""
        if not self._shares_turns():
            return contextlib.nullcontext()
        return self.open_journal().turn(  # type: ignore[attr-defined,no-any-return]
            scope_turn(scope), under=EVERY_SCOPE_TURN
        )

    def _recover_turn(self, run_id: str) -> None:
        """Finish what a holder of a scope's turn left when it died in it, from the records of its
        root run ``run_id``: the retired files of what it retired (a forget, a forget by filter, an
        update's supersede) and the files of what it committed (``restore_missing``, which the
        store's open makes after a power loss). On a journal hosts share, every read and learn
        consults the journal's retirements already: nothing to do."""
        if self._shares_turns():
            return
        try:
            self._restore_missing(self.open_journal(), run_id)
        except journal.JournalRunNotFound:  # a run deleted since: nothing of it to finish
            return
        except journal.JournalCorrupt as exc:
            # as the open's walk: damage in that run is for `flows check` to report (record_corrupt)
            # and a person to mend; it does not keep every write of the scope out meanwhile
            log.warning("what root run %s left in a scope's turn could not be finished: %s", run_id, exc)

    def _hosts_journal(self) -> JournalBackend | None:
        """This store's journal when hosts share it (an update looks there for its new key, since
        another host's learn may hold it: ``Learner``); None on a journal of one host."""
        return self.open_journal() if self._shares_turns() else None

    def _every_scope_turn(self) -> contextlib.AbstractContextManager[None]:
        """The turn of every scope at once among the hosts sharing this store's journal: while it
        is held, no update, forget or erase of any scope on any host (nor in another process of
        this host) is between its look and its last write (each holds its scope's turn, which is
        part of this one: ``_hosts_turn``), so a look then sees each memory whole: the version an
        update retired and the one that replaced it are never both missed. A journal of one host
        needs none. Whoever holds it must not take a scope's turn (``Publisher.update_turn``)."""
        if not self._shares_turns():
            return contextlib.nullcontext()
        return self.open_journal().turn(EVERY_SCOPE_TURN)  # type: ignore[attr-defined,no-any-return]

    @property
    def db(self) -> HistoryDB:
        """The history DB."""
        return self._db

    def flush(self) -> None:
        """Make durable the name of every learned file this store's learns renamed into place.

        A learn returns once its record is durable; its file's name is made durable in groups
        (``NAMES_GROUP`` names, or ``NAMES_WAIT_S``), by the ``syncfs`` of a later learn, and here:
        one fsync per folder with a name waiting. The flows runtime calls it before it marks a run
        ``done``, a session on ``flush()`` and ``close()``, ``close()`` here (best effort). Whoever
        ends a run with ``JournalBackend.finish`` directly calls it first.

        Raises:
            Unwritable: a folder could not be fsync'd (its names keep waiting).
        """
        self._publisher.flush_names()

    def close(self) -> None:
        """Make the learned files' names durable (best effort: a name a failure leaves waiting is
        one of a run not marked done, which the next open restores after a power loss), wait for
        the background unlinks of the files removed so far (``memory._reaper``, at most
        ``DRAIN_AT_EXIT_S``), then close the DB connection, the journal and the executor (safe
        twice). A store used after it raises ``StoreClosed``."""
        self._closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        try:
            self._publisher.flush_names()
        except Unwritable as exc:
            log.warning("closing the store: %s", exc)
        REAPER.drain(DRAIN_AT_EXIT_S)
        self._publisher.close()
        self._db.close()
        self._search.close()
        self._journal_keys.close()
        if self._journal is not None:
            self._journal.close()
            self._journal = None

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def _off_loop(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await self._submit(fn, *args, **kwargs)

    def _submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> asyncio.Future[T]:
        """``fn(*args, **kwargs)`` handed to the store's executor now (the running loop's future)."""
        self._check_open()
        import asyncio  # only async callers pay for asyncio and the thread pool
        from concurrent.futures import ThreadPoolExecutor

        if self._executor is None:
            self._executor = ThreadPoolExecutor(self._max_workers, thread_name_prefix="flows-memory")
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(self._executor, partial(fn, *args, **kwargs))

    # -- learn ---------------------------------------------------------------------------------

    def session(self, *, scope: str, flow: str = "session", source: str | None = None) -> MemorySession:
        """A session that learns (and forgets) in ``scope`` under a durable root run of its own,
        named ``flow``; ``source`` is its findings' default source (default: ``flow``).

        The root run is begun by the session's first write and ended by ``close()`` (``done``), or
        by a ``with`` / ``async with`` block that raises (``failed``, the error recorded). See
        ``MemorySession``.

        Raises:
            ArgumentInvalid: ``scope``, ``flow`` or ``source`` is not a non-empty string (at most
                256 characters, no NUL).
        """
        self._check_open()
        from memory._session import MemorySession  # a read-only command never opens a session

        return MemorySession(self, scope=scope, flow=flow, source=source)

    def learn(self, finding: object, root: Root | None, *, supersedes: str | None = None) -> Learned:
        """Learn ``finding`` journal-first: validate, stage, append to the root run's
        ``memory-learn`` stream, then publish the learned file.

        The published file is rendered from the first commit of this finding in the root's
        ``memory-learn`` stream, so racing attempts and resumed runs publish the same bytes.

        ``supersedes`` names the key of a finding this one replaces: once the new finding is
        committed and published, the old one is retired (a ``memory-forget`` record with ``by``,
        then its retired file) and no read returns it again; both stay in the journal.

        A finding whose key was forgotten or superseded is learned as a new memory, under the first
        revision of it whose key is not retired (``finding_id``); the retired key stays retired. A
        resumed attempt of a root run that committed the key before its retirement is answered with
        that commit instead, publishing nothing (``docs/MEMORY.md``, "Retired is final").

        Raises:
            Unjournaled: ``root`` is None; nothing is written.
            UnsupportedHeader: the flow's header says ``memory.script: false``.
            FindingInvalid: the finding is malformed; nothing is staged or journaled.
            ArgumentInvalid: ``supersedes`` is not a key, or is the key of this very finding.
            FindingUnknown: no finding has the key ``supersedes`` names; nothing is written.
            FindingRetired: this finding was retired at every revision its key can take; nothing
                is written.
            Unwritable: the file could not be staged (nothing journaled) or published.
            JournalError: any journal failure, unchanged; nothing is published.
        """
        self._check_open()
        return self._learner.learn(finding, root, supersedes)

    async def alearn(self, finding: object, root: Root | None, *, supersedes: str | None = None) -> Learned:
        """``learn`` off the event loop, on the store's one executor; a resumed body's re-learn of a
        finding already republished (a file read, no write) is answered on the loop."""
        return await self.start_learn(finding, root, supersedes=supersedes)

    def start_learn(
        self, finding: object, root: Root | None, *, supersedes: str | None = None
    ) -> asyncio.Future[Learned]:
        """``alearn``, begun before this returns: the learn is on the store's executor (or, for a
        resumed body's re-learn of a finding already republished, answered) whether or not the
        caller awaits the future soon. Needs a running event loop."""
        import asyncio

        if supersedes is None:
            done = self._learner.republished(finding, root)
            if done is not None:
                answered: asyncio.Future[Learned] = asyncio.get_running_loop().create_future()
                answered.set_result(done)
                return answered
        return self._submit(self._learner.learn, finding, root, supersedes)

    def update(self, memory_id: str, finding: object, root: Root | None) -> Learned:
        """Journal a new version of the memory ``memory_id`` (the key of its first version; any
        version's key names its memory too): ``finding`` is learned and supersedes the memory's
        live version, and keeps its memory id (``Recalled.memory_id``). ``history`` lists every
        version. Updating to the content the memory holds already returns its version.

        Raises:
            ArgumentInvalid: ``memory_id`` is not 32 lowercase hex digits.
            FindingUnknown: the memory has no live version (never learned, or forgotten: learn it
                again, which starts a new memory).
            FindingInvalid, Unjournaled, UnsupportedHeader, Unwritable, JournalError: as ``learn``.
        """
        self._check_open()
        item = validate(finding, default_source=root.source or root.flow) if root is not None else None
        for attempt in range(UPDATE_ATTEMPTS):
            # the version to replace is read in its scope's turn, where no other update of this host
            # is between reading a version and retiring it (a read outside may catch one there)
            scope = self._search.noted_scope(check_key(memory_id, "memory id")) if attempt == 0 else None
            if scope is None:
                seen = self._current(memory_id, publish=True)
                located = self._retirer.locate(memory_id) if seen is None else None
                scope = seen.scope if seen is not None else None if located is None else located.scope
            if scope is None:
                raise self._no_live_version(memory_id)
            # the turn of the scope the new version goes to as well, where no plain learn is
            # between its look at a key and its publish
            to = {scope} if root is None else {scope, root.scope}
            with self._publisher.update_turns(to, None if root is None else root.run_id):
                live = self._live_version(memory_id)
                if live.scope != scope:
                    continue  # moved to another scope meanwhile: take that scope's turn
                scope = None if root is None else root.scope
                same = scope is not None and item is not None and finding_id(scope, item, live.revision)
                if same == live.key:
                    from memory._outcomes import Learned  # not at import: a recall makes none of them

                    path = self._publisher.scope_dir(live.scope) / f"{live.key}.json"
                    return Learned(live.key, live.citation, path, live.learned_ms, live.memory)
                # what was just read is handed on: the learn neither validates nor looks for it again
                read = (item, Located(live.scope, None, live.memory_id)) if item is not None else None
                # the key just computed for that check, at the live version's revision (the learn's
                # first revision is 0, so it is that learn's key unless a retirement moves it on)
                keyed = (live.revision, same) if isinstance(same, str) else None
                try:
                    return self._learner.learn(finding, root, live.key, live=read, keyed=keyed)
                except FindingRetired as exc:
                    # retired by another host, or by a forget, after the look: read the memory again
                    # (a forgotten one then has no live version)
                    if exc.key != live.key or attempt == UPDATE_ATTEMPTS - 1:
                        raise
        raise FindingRetired(
            f"memory {memory_id} changed under every one of {UPDATE_ATTEMPTS} attempts to update it; "
            "nothing was written: try the update again",
            key=memory_id,
        )

    def update_lost(self, record: Record, chosen: Mapping[str, Record] | None = None) -> bool:
        """Whether ``record`` (a checked ``memory-learn`` commit) is an update that lost its race: the
        version it replaces was retired first by another (``chosen``: the retirement to publish of
        each key, when no retired file stands yet). Such a version is never published. False when
        the standing retired file is damaged (reads fail closed on it; check mends it)."""
        self._check_open()
        return self._retirer.lost(record, chosen)

    def _successor_entry(self, retired: Retired) -> Recalled | None:
        """The entry of the version that superseded ``retired`` (its retirement's citation is that
        version's commit), read from that commit, checked like every record read back; None when
        the journal does not hold it as such, it is erased, or it is an update that lost its race."""
        record = self._citations.successor_commit(retired)
        if record is None or is_erased(record):
            return None
        checked_commit(record, self.journal_location)
        if record.payload["id"] != retired.by or self._retirer.lost(record):
            return None
        return own_entry(record)[1]

    def _live_version(self, memory_id: str) -> Recalled:
        """``current(memory_id)`` (a version another host wrote published here first), or
        ``FindingUnknown`` when the memory has no live version."""
        live = self._current(memory_id, publish=True)
        if live is None:
            raise self._no_live_version(memory_id)
        return live

    @staticmethod
    def _no_live_version(memory_id: str) -> FindingUnknown:
        return FindingUnknown(
            f"memory {memory_id} has no live version to update: it was never learned, or it was "
            "forgotten (see `flows history`; learn the finding again to start a new memory), or its "
            "file was lost from this store (`flows check` says so; `flows sync` publishes it again)",
            key=memory_id,
        )

    async def aupdate(self, memory_id: str, finding: object, root: Root | None) -> Learned:
        """``update`` off the event loop (the same arguments, the same errors)."""
        return await self._off_loop(self.update, memory_id, finding, root)

    def current(self, memory_id: str) -> Recalled | None:
        """The live version of the memory ``memory_id`` (or of the memory the key ``memory_id`` is a
        version of), or None when it has none.

        On a journal hosts share, a version another host wrote and this one has not synced is
        read from its commit (``_adopt_newer``); nothing is written.

        Raises:
            ArgumentInvalid: ``memory_id`` is not 32 lowercase hex digits.
        """
        self._check_open()
        return self._current(memory_id, publish=False)

    def _current(self, memory_id: str, *, publish: bool) -> Recalled | None:
        """``current``; with ``publish`` (an update, about to build on it), a version read from
        another host's commit is published here first, its file rendered from that commit."""
        key = check_key(memory_id, "memory id")
        noted = self._read(self._search.noted_current, key)  # a version this process wrote or read
        if noted is not None:
            return noted
        found = self._read(self._search.current, key)  # a memory id, as listings show it
        if found is not None:
            return found
        memory = self._memory_id(key)  # a version's key: its memory's
        found = None if memory == key else self._read(self._search.current, memory)
        for _ in range(UPDATE_ATTEMPTS):  # the version published may be superseded in the meantime
            if found is not None:
                break
            newer = self._read(self._adopt_newer, key)
            if newer is None:
                break
            path = self._publisher.scope_dir(newer.payload["scope"]) / f"{newer.payload['id']}.json"
            if not publish:
                entry = parse_learned(path, render(newer))
                expired = entry.expires_ms is not None and entry.expires_ms <= self._clock()
                return None if expired else entry
            if not os.path.lexists(path) and not self._db.held([newer.payload["id"]]):
                self.republish(newer)  # else here already (another process): read again
            found = self._read(self._search.current, memory)
        return found

    def _adopt_newer(self, key: str) -> Record | None:
        """On a journal that hosts share: when the version ``key`` was superseded, on another host,
        by versions this host has not published yet (they reach its folders on ``sync`` or
        ``catch_up``), the newest one's commit, so that ``current`` and an update by memory id find
        the memory's live version instead of calling it forgotten. The chain of supersedes is read
        from the journal's retirements (``SharedRetirements``); the commit is checked like every
        record read back, and an update that lost its race or an erased version is never returned.

        Raises:
            JournalError: the journal cannot be read, or the commit is not of the exact shape.
        """
        backend = self.open_journal()
        if not lists_heads(backend):
            return self._adopt_unpublished(key, backend)
        shared = self._retirer.shared.current()
        standing: Retired | None = None
        at, seen = key, set[str]()
        while at not in seen:  # (a loop is damage: it ends there, and nothing is adopted)
            seen.add(at)
            retired = shared.get(at)
            if retired is None:
                break
            if retired.by is None:
                return None  # forgotten: the memory has no live version anywhere
            standing, at = retired, retired.by
        if standing is None or at in shared:
            return None
        record = backend.find(standing.citation.run_id, STREAM, at)
        if record is None or is_erased(record):
            return None
        checked_commit(record, backend.location)
        if record.payload["id"] != at or self.update_lost(record):
            return None
        return record

    def _adopt_unpublished(self, key: str, backend: JournalBackend) -> Record | None:
        """``_adopt_newer`` on a journal of one host: when the versions of ``key``'s line end in a
        supersede whose new version has no file here yet (an update killed between the retired file
        of the version it replaced and the rename of its own), that version's commit, found through
        the retired files' citations and checked like every record read back; None otherwise."""
        located = self._retirer.locate(key)
        retired = None if located is None else located.retired
        record: Record | None = None
        seen: set[str] = set()
        while retired is not None and retired.by is not None and retired.by not in seen and len(seen) < 9_999:
            seen.add(retired.by)
            record = backend.find(retired.citation.run_id, STREAM, retired.by)
            if record is None or is_erased(record):
                return None
            checked_commit(record, backend.location)
            if record.payload["id"] != retired.by or self.update_lost(record):
                return None
            retired = self._retirer.published_retirement(retired.by, record.payload["scope"])
        if record is None or retired is not None:
            return None  # not superseded, or the line ends in a forget (or a loop)
        held = self._db.held([record.payload["id"]])
        path = self._publisher.scope_dir(record.payload["scope"]) / f"{record.payload['id']}.json"
        return None if held or os.path.lexists(path) else record

    def _memory_id(self, key: str) -> str:
        """The memory ``key`` names: its own (a memory id), or the one its version belongs to. A
        superseded version whose memory no file or row records is followed to the version that
        replaced it (the supersede's ``by``), whose record does."""
        seen: set[str] = set()
        at = key
        while at not in seen and len(seen) < 10_000:
            seen.add(at)
            located = self._read(self._retirer.locate, at)
            if located is None:
                break
            if located.memory is not None:
                return located.memory
            if located.retired is None or located.retired.by is None:
                break
            at = located.retired.by
        return key

    def forget(self, key: str, root: Root, *, reason: str) -> Forgotten:
        """Forget the finding ``key`` journal-first: append a ``memory-forget`` record (the key, its
        scope, ``reason``) to the root run, then publish the retired file that keeps it out of every
        read in every process, and remove its learned file. Its learn records stay in the journal.

        Forgetting a finding already forgotten (or superseded) writes nothing and returns the
        first retirement.

        Raises:
            ArgumentInvalid: ``key`` is not a key, or ``reason`` is not a non-empty string of at
                most 1024 characters; nothing is written.
            FindingUnknown: no finding has ``key``; nothing is written.
            Unwritable: the retired file could not be published (the record stands: ``sync``,
                ``flows check --repair`` or a resume of the root publish it).
            JournalError: any journal failure, unchanged; nothing is published.
        """
        self._check_open()
        return self._retirer.forget(key, root, reason)

    async def aforget(self, key: str, root: Root, *, reason: str) -> Forgotten:
        """``forget`` off the event loop, on the store's one executor."""
        return await self.start_forget(key, root, reason=reason)

    def start_forget(self, key: str, root: Root, *, reason: str) -> asyncio.Future[Forgotten]:
        """``aforget``, begun on the store's executor before this returns (see ``start_learn``)."""
        return self._submit(self._retirer.forget, key, root, reason)

    @contextlib.contextmanager
    def turn(self, scope: str) -> Iterator[None]:
        """Hold the turn of ``scope`` that every update, forget and erase of the scope holds from
        its look at a version to its last write (in every process of this host, and on a journal
        hosts share, on every host): while it is held none of them is half done, so a read made in
        it sees each memory of the scope whole (an update's old version retired and its new one
        not yet in place is never met). Updates, forgets and erases made in it by this thread go
        on (the turn is re-entrant within a thread); other threads' and processes' wait. The turn
        belongs to the thread that takes it: leave the block in that thread (coroutines that share
        a thread share its turns too: an async caller holds it in a thread of its own).

        Raises:
            ArgumentInvalid, JournalNameInvalid: ``scope`` is not a scope a session can have.
            Unwritable: the scope's folder cannot be made, opened or locked.
            JournalError: the turn among the hosts could not be taken.
        """
        from memory._session import check_name  # the check a session's scope gets

        self._check_open()
        with self._publisher.update_turn(check_name("scope", scope), None):
            yield

    def forget_where(
        self,
        root: Root,
        *,
        reason: str,
        scope: str | None = None,
        tags: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
        source: str | None = None,
        before_ms: int | None = None,
        dry_run: bool = False,
        only: Collection[str] | None = None,
    ) -> ForgottenMany:
        """Forget every live finding the filter matches (everything about one user, say) with ONE
        journal record that names the filter and every key it retires: the whole deletion commits
        at once, or nothing does. The filter is ``recall``'s (every tag, every metadata pair, the
        scope, the source, learned before ``before_ms``), and at least one part is required: an
        empty filter, which would forget everything, is refused. ``dry_run`` lists what it would
        forget and writes nothing. Findings forgotten already are not named again. On a journal
        hosts share, what other hosts learned and this one has not synced matches too
        (``catch_up`` first), and the forget looks and writes holding every scope's turn among
        the hosts (updates, forgets and erases of every scope wait for it, and it for them), so a
        memory an update is replacing is forgotten in the version the update leaves live.
        ``only``: of the matches, those keys alone (what a dry run listed and a person confirmed: a
        finding learned since is not forgotten with them).

        Raises:
            ArgumentInvalid: no filter, a malformed one, a malformed reason, or more than
                ``FORGET_MANY_MAX`` matches (narrow the filter).
            JournalError, Unwritable: as ``forget``.
        """
        self._check_open()
        from memory._outcomes import ForgottenMany  # not at import: a recall makes none of them

        check_reason(reason)
        every_tag, _ = _check_where(
            "forget", scope=scope, tags=tags, meta=meta, source=source, before_ms=before_ms
        )
        chosen: dict[str, Any] = {}
        for name, value in (("scope", scope), ("source", source), ("beforeMs", before_ms)):
            if value is not None:
                chosen[name] = value
        if every_tag:
            # the tags as checked (each once): the record keeps the filter for good, and a list
            # that names one tag a million times is one tag
            chosen["tags"] = list(every_tag)
        if meta:
            chosen["meta"] = dict(meta)
        where = {"scope": scope, "tags": tags, "meta": meta, "source": source, "before_ms": before_ms}
        # hosts share the journal: what they learned that this host has not synced matches too
        self.catch_up()
        if dry_run:
            listed = self._forget_matches(where, only)
            return ForgottenMany(tuple(sorted(e.key for e in listed)), reason, chosen, dry_run=True)
        # On a journal hosts share, the look that chooses is taken in every scope's turn, which each
        # update holds from its look at the version it replaces until the new one is in place: a
        # look outside may fall between an update's commit (which retires the old version, as this
        # host's read learns from the journal) and this host catching up with the new version, and
        # see neither; and no update retires a match between the look and this record (both
        # retirements would then stand in the journal). The catch-up above was outside it, so the
        # one in it has little to read.
        # On a journal of one host, the turns of the scopes it matches in (``_matched_scopes_turns``).
        shared = self._shares_turns()
        with self._every_scope_turn() if shared else self._matched_scopes_turns(root, where, only):
            self.catch_up()
            found = self._forget_matches(where, only)
            keys = tuple(sorted(e.key for e in found))
            if not keys:
                return ForgottenMany((), reason, chosen)
            ids = sorted((e.key, e.scope) for e in found)
            record = self._retirer.forget_many(root, ids, reason=reason, filter=chosen)
        citation = Citation(record.run_id, record.stream, record.id)
        return ForgottenMany(keys, reason, chosen, citation, int(record.payload["forgottenMs"]))

    def _shares_turns(self) -> bool:
        """Whether this store's journal is one hosts share (its turns are theirs: ``_every_scope_turn``)."""
        shared = self._shared_turns
        if shared is None:
            backend = self.open_journal()
            shared = self._shared_turns = getattr(backend, "turn", None) is not None and lists_heads(backend)
        return shared

    @contextlib.contextmanager
    def _matched_scopes_turns(
        self, root: Root, where: Mapping[str, Any], only: Collection[str] | None
    ) -> Iterator[None]:
        """On a journal of one host, the turn of every scope a forget by filter matches in, held
        in sorted order (as an erase holds its scopes'), so no update in another process or thread
        of this host is between its look at the version it replaces and that version's retired
        file while the forget looks again and writes: a look outside may have chosen a version an
        update retires before the forget's record, which would then retire that version a second
        time and leave the update's new one, matching, live. The scopes come from a look outside
        the turns, taken again until the looks inside find no scope not held (a new scope's match
        since is a learn; after ``UPDATE_ATTEMPTS`` looks the forget goes on with the turns held)."""
        held: set[str] = set()
        with contextlib.ExitStack() as turns:
            for _ in range(UPDATE_ATTEMPTS):
                scopes = {e.scope for e in self._forget_matches(where, only)} - held
                if not scopes:
                    break
                # a turn is taken in sorted order only among those not held yet; two forgets by
                # filter whose scopes interleave would then wait on each other, so let go and
                # take them all again in order
                turns.close()
                held |= scopes
                for scope in sorted(held):
                    turns.enter_context(self._publisher.update_turn(scope, root.run_id))
            yield

    def _forget_matches(self, where: Mapping[str, Any], only: Collection[str] | None) -> list[Recalled]:
        """The live findings a forget by filter retires: those ``where`` (``recall``'s filter)
        matches, less those not in ``only`` when it is given.

        Raises:
            ArgumentInvalid: more than ``FORGET_MANY_MAX`` of them (narrow the filter).
        """
        found = self.recall(**where, limit=None)
        if only is not None:
            allowed = set(only)
            found = [e for e in found if e.key in allowed]
        if len(found) > FORGET_MANY_MAX:
            raise ArgumentInvalid(
                f"the filter matches {len(found)} findings, more than one forget takes ({FORGET_MANY_MAX}): "
                "narrow it (a scope, a tag, --before)"
            )
        return found

    def retire_superseded(self, key: str, by: str, root: Root) -> bool:
        """Commit the retirement of ``key`` as superseded ``by`` its newer version, when nothing has
        retired it yet: the half of a supersede (or an update) a crash left undone after the new
        version's commit, which names the version it replaces. False when it was retired already.
        ``flows check --repair`` calls it (``supersede_unfinished``).

        Raises:
            FindingUnknown: nothing knows ``key``.
            JournalError, Unwritable: as ``forget``.
        """
        self._check_open()
        check_key(key)
        check_key(by, "by")
        located = self._read(self._retirer.locate, key)
        if located is None:
            raise FindingUnknown(f"no finding has key {key}", key=key)
        if located.retired is not None:
            return False
        self._retirer.retire(root, key, located.scope, reason=None, by=by)
        return True

    def erase(self, key: str, root: Root, *, reason: str, settle: bool = True) -> Erased:
        """Erase the memory ``key`` names (every version of it): forgotten first, then one
        ``memory-erase`` record (memory id, keys, when, by which flow, why, and a digest of each
        erased commit), then its content removed from the history DB (rows, index and log, bytes
        overwritten), the learned files, stages, the files' index and the vectors, and last each of
        its journal commits rewritten as a tombstone (``memory._erase``). Idempotent: erasing
        again writes no second record and finishes what a crash left. Old copies that another reader
        keeps (a read of the history DB open in another process, waited for up to 30 s; on
        PostgreSQL a snapshot older than the rewrite) are ``ErasePending`` (``settle``: said here;
        ``erase_where`` says it once for all its memories).

        Raises:
            ArgumentInvalid: ``key`` or ``reason`` is malformed.
            FindingUnknown: nothing knows the key.
            JournalLeaseHeld: a commit of it is in a root run that is still running (erase once it
                has ended); the memory is forgotten and the record committed, the rest is left for
                the next erase or ``flows check --repair``.
            JournalError, Unwritable: the journal or a file could not be written; as above.
            ErasePending: everything is erased but the old copies a reader keeps (``held``), which
                a marker keeps as a duty for ``flows check --repair`` or the next erase.
        """
        self._check_open()
        check_key(key)
        check_reason(reason)
        backend = self.open_journal()
        held: set[str] = set()
        for _ in range(UPDATE_ATTEMPTS):
            # in the turn of each scope a live version of the memory is in, so no update of this host
            # is between reading one of its versions and writing the next: every version is seen
            with self._publisher.update_turns(held, root.run_id):
                (events, _), runs = self._history_narrowed(key)
                keys = sorted({e.key for e in events if e.kind != "erased"})
                now = self.current(events[0].memory or key)
                if now is not None and now.key not in keys:  # a version newer than the key index
                    events, runs = self._read(self._retirer.history, key, None)[0], None
                    keys = sorted({e.key for e in events if e.kind != "erased"})
                live = [found for found in map(self.get, keys) if found is not None]
                # the scopes of every version, live or not: a read outside their turns may catch an
                # update between publishing its version and retiring the one before (none live)
                scopes = {found.scope for found in live} | {
                    located.scope for located in map(self._retirer.locate, keys) if located is not None
                }
                if scopes <= held:
                    erased = self._erase_seen(backend, root, reason, (events, runs, keys), live)
                    break
                held |= scopes
        else:
            raise FindingRetired(
                f"memory {key} kept gaining versions in new scopes while it was being erased; nothing "
                "more was done: erase it again",
                key=key,
            )
        if settle:
            self._settle_erasure(backend, [erased.memory])
        return erased

    def _erasure_held(self, backend: JournalBackend, *, every: bool = False) -> list[str]:
        """What still keeps old copies of what this process erased last: a reader of the history
        DB (its checkpoint was busy: tried once more, without waiting) and, on PostgreSQL, an open
        snapshot older than the rewrite (``prune``); each said for a person. Empty when nothing."""
        held = []
        if self._db.pages_held and not self._db.truncate_log(0):
            held.append(
                f"another process has a read of the history DB {self.db_path} open, which keeps its "
                "old pages (SQLite overwrites them once that read ends)"
            )
        prune = getattr(backend, "prune", None)
        # ``every`` (an erase): every rewrite committed so far, not only this process's: an erase
        # that found its commits tombstones already (another host's erase, or this host's before a
        # restart, left their old versions to a reader's snapshot) rewrote nothing, and must not say
        # done while those versions are in the table's pages. (Not for a sync that removed what
        # another host erased: that host's erase vacuums, not every host's sync.)
        wait_s = memory_db.ERASE_LOG_WAIT_MS / 1000
        who = prune(every=every, wait_s=wait_s) if prune is not None else None
        if who is not None:
            held.append(f"on the PostgreSQL journal {backend.location}, {who} keeps the old row versions")
        return held

    def note_erasure_held(self, memories: Sequence[str]) -> list[str]:
        """After ``finish_erasure`` outside an erase (a sync removing what another host erased,
        ``flows check --repair``): what still keeps old copies of ``memories``, written down as a
        marker for ``flows check`` to report, without raising."""
        from memory._erase import mark_pending

        held = self._erasure_held(self.open_journal())
        if held:
            mark_pending(self.db_path, memories, held, self._clock())
        return held

    def settle_erasures(self, memories: Sequence[str]) -> None:
        """After erasing ``memories`` one by one with ``erase(..., settle=False)`` (a caller's own
        loop, as ``erase_where``'s): say once whether a reader keeps old copies of any of them.

        Raises:
            ErasePending: as ``erase``; the marker names every memory in ``memories``.
        """
        self._check_open()
        if memories:
            self._settle_erasure(self.open_journal(), memories)

    def _settle_erasure(self, backend: JournalBackend, memories: Sequence[str]) -> None:
        """After an erase of ``memories``: when old copies of what it erased are still kept by a
        reader, a marker says so durably and ``ErasePending`` is raised; otherwise the markers of
        erasures left pending earlier are finished too, where nothing keeps theirs now.

        Raises:
            ErasePending: someone keeps old copies (``held``); the marker is written.
            Unwritable: the marker could not be written.
        """
        from memory._erase import mark_pending, pending_dir

        held = self._erasure_held(backend, every=True)
        if not held:
            self.finish_pending(wait_ms=0)
            return
        mark_pending(self.db_path, memories, held, self._clock())
        raise ErasePending(
            f"erased {len(memories)} memor{'y' if len(memories) == 1 else 'ies'} from the journal, the "
            f"files, the rows and the indexes, but {'; and '.join(held)}. A marker in "
            f"{pending_dir(self.db_path)} keeps this: once that reader has ended, erase again or run "
            "`flows check --repair`",
            path=self.db_path,
            held=tuple(held),
        )

    def finish_pending(self, *, wait_ms: int | None = None) -> list[str]:
        """Finish the erasures left pending (markers in ``<db-dir>/flows-erase-pending``): the
        history DB's log checkpointed whole and truncated (waiting up to ``wait_ms`` for readers),
        on PostgreSQL the records' table vacuumed; the markers removed once nothing keeps old
        copies any more. Returns what still keeps them (empty: every marker was removed)."""
        from memory._erase import clear_pending, pending_markers

        markers = pending_markers(self.db_path)
        if not markers:
            return []
        if wait_ms is None:  # the erase's own wait (``memory._db.ERASE_LOG_WAIT_MS``), read now
            wait_ms = memory_db.ERASE_LOG_WAIT_MS
        held = []
        if not self._db.truncate_log(wait_ms):
            held.append(f"another process has a read of the history DB {self.db_path} open")
        prune = getattr(self.open_journal(), "prune", None)
        who = prune(every=True, wait_s=wait_ms / 1000) if prune is not None else None
        if who is not None:
            held.append(f"on the PostgreSQL journal, {who}")
        if not held:
            clear_pending(markers)
        return held

    def _erase_seen(
        self,
        backend: JournalBackend,
        root: Root,
        reason: str,
        seen: tuple[list[HistoryEvent], set[str] | None, list[str]],
        live: list[Recalled],
    ) -> Erased:
        """``erase`` once the memory's history (events, the runs to read, its keys) and its live
        versions are read, in their scopes' turns."""
        from memory._erase import Erased, audit_key, audit_payload, audits, commits_of

        events, runs, keys = seen
        memory = events[0].memory or keys[0]
        for found in live:
            self._retirer.forget(found.key, root, reason)
        # A version this host neither holds nor has published (learned on another host sharing the
        # journal, not synced here) is live there: forgotten too, so every host's next read leaves
        # it out, as for the versions live here
        gone = {found.key for found in live} | {
            e.key for e in events if e.kind in ("superseded", "forgotten", "erased")
        }
        for version in sorted({e.key for e in events if e.kind in ("learned", "lost")} - gone):
            self._retirer.forget(version, root, reason)
        # A learn of the same content in another run (another process) may have committed one of
        # the keys after the history was read and before the forget: its run is looked up again,
        # now that the forget keeps any later learn of the content off these keys.
        runs = self._runs_now(backend, memory, runs)
        targets = commits_of(backend, set(keys), runs)
        done = [
            r
            for r in audits(backend, runs)
            if r.payload["memory"] == memory and set(keys) <= set(r.payload["keys"])
        ]
        citation = None
        if not done:
            payload = audit_payload(
                memory, keys, targets, reason=reason, flow=root.flow, erased_ms=self._clock()
            )
            record = root.journal.append(root.lease, ERASE_STREAM, payload, key=audit_key(memory, keys))
            citation = Citation(record.run_id, record.stream, record.id)
        failpoint("memory.erase_after_record")
        # A learn of the content that looked for the keys' retirement before the forget may have
        # committed after the look above: found now, once the record is there (a learn that commits
        # later finds the record, and erases its own commit: ``Learner``).
        runs = self._runs_now(backend, memory, runs)
        known = {(r.run_id, r.seq) for r in targets}
        targets += [r for r in commits_of(backend, set(keys), runs) if (r.run_id, r.seq) not in known]
        try:
            rewritten = self.finish_erasure(keys, targets, runs, root=root)
        except JournalLeaseHeld as exc:
            raise _held_erasure(backend, memory, exc) from exc
        return Erased(memory, tuple(keys), citation, rewritten)

    def _runs_now(self, backend: JournalBackend, memory: str, runs: set[str] | None) -> set[str] | None:
        """``runs`` and every run the journal's key index names for ``memory`` now (None, every
        run, when ``runs`` is None or there is no index)."""
        if runs is None:
            return None
        now = self._journal_keys.runs_of(backend, memory)
        return None if now is None else runs | now

    def erase_where(
        self,
        root: Root,
        *,
        reason: str,
        scope: str | None = None,
        tags: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
        source: str | None = None,
        before_ms: int | None = None,
        dry_run: bool = False,
    ) -> list[str]:
        """Erase every memory with a commit the filter matches (``recall``'s filter, applied to
        every commit the journal holds, forgotten and superseded ones included: everything about one
        user, whatever became of it); at least one part is required. Returns the memory ids it
        erased (or, with ``dry_run``, would erase), each by ``erase``.

        Raises:
            ArgumentInvalid: no filter, or a malformed one; and what ``erase`` raises.
        """
        self._check_open()
        from memory._erase import commits_matching

        check_reason(reason)
        every_tag, wanted_meta = _check_where(
            "erase", scope=scope, tags=tags, meta=meta, source=source, before_ms=before_ms
        )
        keys = commits_matching(
            self.open_journal(),
            scope=scope,
            tags=every_tag,
            meta=wanted_meta,
            source=source,
            before_ms=before_ms,
        )
        memories: list[str] = []
        for key, named in keys.items():
            # the memory the commit names (a version forgotten or superseded keeps no file or row
            # to say it; its commit does), else the key's own (a first version: its memory id)
            memory = named if named is not None else self._memory_id(key)
            if memory not in memories:
                memories.append(memory)
        if not dry_run:
            for memory in memories:
                self.erase(memory, root, reason=reason, settle=False)
            if memories:  # what a reader kept of any of them, said once
                self._settle_erasure(self.open_journal(), memories)
        return memories

    def finish_erasure(
        self,
        keys: Sequence[str],
        targets: Sequence[Record] | None = None,
        runs: Iterable[str] | None = None,
        *,
        root: Root | None = None,
    ) -> int:
        """Remove the content of the findings ``keys`` from every derived place, then rewrite
        their journal commits that still hold it (``targets``, else looked up) as tombstones, and
        each forget by filter that retired one of them without its filter's tags, metadata and
        source (looked up in ``runs``, default every run); how many records were rewritten. What
        ``erase`` does after its record, and what ``flows check --repair`` does for an erase a
        crash left unfinished.

        Raises:
            JournalLeaseHeld: a commit is in a root run still running, other than ``root`` (the
                erase's own, whose records its holder rewrites); the derived places are done.
            JournalError, Unwritable: as ``erase``.
        """
        self._check_open()
        from memory._erase import (
            batches_of,
            cache_files_holding,
            commits_of,
            quarantined_holding,
            rewrite,
            stages_holding,
            sync_folders,
        )
        from memory._filecache import cache_dir
        from memory._paths import scope_folders, stage_folders
        from memory._vectors import VECTORS_FILE

        wanted = set(keys)
        backend = self.open_journal()
        if targets is None:
            targets = commits_of(backend, wanted)
        self._db.erase(sorted(wanted))
        pub = self._publisher
        scopes = {str(r.payload["scope"]) for r in targets}
        gone: set[Path] = {pub.scope_dir(scope) for scope in scopes}  # folders files left (the forget's too)
        # every scope folder's learned file of each key: a commit's scope names its folder, but a
        # copy with no commit left to name it (a tombstoned one, a backup restored) is found too
        scope_dirs = scope_folders(self.db_path)
        learned = [f / ".trajectories" / "compacted" for f in scope_dirs]
        pub.remove_many([d / f"{k}.json" for d in learned for k in sorted(wanted)], None, now=True)
        gone.update(learned)
        for path in stages_holding(stage_folders(scope_dirs), wanted):
            path.unlink(missing_ok=True)
            gone.add(path.parent)
        for path in quarantined_holding(self.db_path.parent / QUARANTINE_DIR, wanted):
            path.unlink(missing_ok=True)  # copies `flows check --repair` moved aside
            gone.add(path.parent)
        failpoint("memory.erase_after_derived")
        for path in cache_files_holding(cache_dir(self.db_path), wanted, keep=[VECTORS_FILE, KEYS_FILE]):
            path.unlink(missing_ok=True)
            gone.add(path.parent)
        self._search.erase_vectors(sorted(wanted))  # or the vectors file goes whole
        self._search.forget_cached(wanted)
        # Once the commits are tombstones, check no longer reports the erasure as unfinished: a
        # removal a power loss undid then would leave the content on disk, unreported.
        sync_folders(gone)
        failpoint("memory.erase_before_rewrite")
        # the erase's own root run (a session or a flow erasing what it learned) is rewritten by
        # its holder while it runs; another running run's commits are JournalLeaseHeld
        lease = root.lease if root is not None else None
        done = rewrite(backend, targets, lease=lease)
        # last, each forget by filter that retired one of them: its filter named their tags,
        # metadata or source, and keeps only its scope and time bound
        return done + rewrite(backend, batches_of(backend, wanted, runs), filter_erased, lease=lease)

    def history(self, key: str, *, runs: Iterable[str] | None = None) -> list[HistoryEvent]:
        """Everything the journal says of the finding ``key``, oldest first: each commit of it
        (``learned``), its retirement (``superseded`` with ``by``, ``forgotten`` with ``reason``),
        and ``expired`` once its ``expiresMs`` has passed; each with its citation. The commit of an
        update that lost its race (``update_lost``) is ``lost``, not ``learned``: its ``reason``
        names the retirement that stood; its version never lived.

        ``runs`` are the ids of the root runs to look in (default: the runs the journal's key index
        names, brought up to date by a look at every run's streams, ``memory._keyindex``; every run
        where the store keeps no index); a reader that keeps the list of runs current itself (the
        dashboard) passes it.

        Raises:
            ArgumentInvalid: ``key`` is not a key.
            FindingUnknown: neither the journal nor the store knows ``key``.
            JournalError: the journal cannot be read, unchanged.
        """
        self._check_open()
        if runs is not None:
            return self._read(self._retirer.history, key, runs)[0]
        return self._history_narrowed(key)[0][0]

    def history_page(
        self,
        key: str,
        *,
        offset: int = 0,
        limit: int = HISTORY_PAGE,
        runs: Iterable[str] | None = None,
        max_bytes: int | None = None,
    ) -> HistoryPage:
        """A page of ``history(key)``: at most ``limit`` events from ``offset`` (counted from the
        oldest), and how many events there are in all (``HistoryPage.total``); its ``next_offset``
        is where the next page starts. With ``max_bytes``, the page also stops before its events
        would pass that many bytes as JSON (at least one is always given). Every event is placed
        and counted, but only the page's own are built with their content: a memory of many
        versions costs less to page through than to list whole. ``runs`` as for ``history``.

        Raises:
            ArgumentInvalid: ``key`` is not a key, ``offset`` is not a whole number from 0, or
                ``limit`` or ``max_bytes`` not one from 1.
            FindingUnknown, JournalError: as ``history``.
        """
        self._check_open()
        for name, value, low in (("offset", offset, 0), ("limit", limit, 1), ("max_bytes", max_bytes, 1)):
            if value is None and name == "max_bytes":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ArgumentInvalid(f"{name} must be a whole number from {low}, got {value!r:.80}")
        window = slice(offset, offset + limit)
        if runs is not None:
            events, every = self._read(self._retirer.history, key, runs, window)
        else:
            (events, every), _ = self._history_narrowed(key, window)
        if max_bytes is not None:
            size = 0
            for n, event in enumerate(events):
                size += len(orjson.dumps(event.as_json()))
                if n and size > max_bytes:
                    events = events[:n]
                    break
        from memory._outcomes import HistoryPage  # not at import: a recall makes none of them

        return HistoryPage(key, tuple(events), offset, len(every), len({e.key for e in every}))

    def index_journal(self, progress: Callable[[int, int], None] | None = None) -> bool:
        """Bring the journal's key index up to date now (``memory._keyindex``: which runs hold
        records of which memory, what ``history`` and ``erase`` read through), telling
        ``progress(done, total)`` of the streams it reads; the first time a store does this it
        reads every run. Whether the store keeps the index (not for a reader that must write
        nothing). ``history`` and ``erase`` do it themselves; a caller that wants to show the first
        time's progress calls this first.

        Raises:
            JournalError: a stream could not be read.
        """
        self._check_open()
        return self._journal_keys.refresh(self.open_journal(), progress)

    def _history_narrowed(
        self, key: str, window: slice | None = None
    ) -> tuple[tuple[list[HistoryEvent], list[HistoryEvent]], set[str] | None]:
        """``history(key)`` (its events in ``window``, and all of them without their content,
        ``Retirer.history``) read from the runs the
        journal's key index names (``_keyindex``), and those runs; from every run (and None) when
        there is no index, the key is unknown to it, or the history DB or a learned file cites a
        commit in a run it did not name (stale, or tampered with)."""
        check_key(key)
        runs = self._journal_keys.runs_of(self.open_journal(), key)
        if runs is not None:
            try:
                read = self._read(self._retirer.history, key, runs, window)
            except FindingUnknown:
                read = ([], [])
            if read[1] and all(e.citation.run_id in runs for e in read[1]):
                return read, runs
        return self._read(self._retirer.history, key, None, window), None

    def republish_run(self, backend: JournalBackend, run_id: str) -> int:
        """Publish, in batches, the learned file of every finding ``run_id`` committed whose file
        does not already hold exactly its record's bytes; returns how many were published.

        ``resume`` calls it before re-running the body, so the body's re-learns find their files
        in place (and, through ``alearn``, are answered from the commits read here). The folders
        of files already in place are fsync'd once each. Never writes to the journal.

        Raises:
            Unwritable: a file or folder could not be published or fsync'd.
            JournalError: the run's stream could not be read, unchanged.
        """
        self._check_open()
        return self._learner.republish_run(backend, run_id)

    def _restore_missing(self, backend: JournalBackend, run_id: str) -> int:
        return self._learner.restore_missing(backend, run_id, self._db.held)

    def republish(self, record: Record, key: str | None = None) -> Path:
        """Publish the learned file of ``record`` (a ``memory-learn`` commit) in its scope's folder,
        rendered from the record alone and replacing whatever is at that name; returns its path.
        Given ``key``, the version an update's commit supersedes (and retires, ``supersede_in``):
        that version's retired file instead.

        ``flows check --repair`` restores a missing, damaged or wrong file with it. Never writes to
        the journal. A retirement record publishes its retired file the same way; a forget by
        filter publishes the retired files it names that are missing (the first retirement of a key
        stands), or, given ``key``, that key's file whatever is there.

        Raises:
            ValueError: ``record`` is not from the ``memory-learn`` or ``memory-forget`` stream, or
                does not retire ``key``.
            JournalCorrupt: ``record`` is not a finding's commit (or retirement) of the exact shape
                (``checked_commit``, ``checked_retirement``); nothing is written.
            Unwritable: the file could not be staged or published.
        """
        self._check_open()
        if record.stream == RETIRE_STREAM:
            views = retirements_in(record, self.open_journal().location)
            if views[0] is record:  # a forget or a supersede: its file, whatever is there
                self._retirer.settle(record, replace=True)
            elif key is not None:  # one key of a forget by filter: its file, whatever is there
                views = [v for v in views if v.payload["id"] == key] or views[:0]
                for view in views:
                    self._retirer.settle(view, replace=True)
                if not views:
                    raise ValueError(f"record {record.id} of {record.run_id} does not retire {key}")
            else:  # a forget by filter: the keys whose retired file is missing (the first stands)
                self._retirer.publish_missing(views)
            first = views[0].payload
            return self._publisher.retired_dir(first["scope"]) / f"{first['id']}.json"
        if record.stream != STREAM:
            raise ValueError(f"record {record.id} of {record.run_id} is not a {STREAM} record")
        if key is not None and key != record.payload.get("id"):  # an update's commit: the retired file
            retiring = [v for v in retirements_in(record, self.open_journal().location) if v.key == key]
            if not retiring:
                raise ValueError(f"record {record.id} of {record.run_id} does not retire {key}")
            self._retirer.settle(retiring[0], replace=True)
            return self._publisher.retired_dir(retiring[0].payload["scope"]) / f"{key}.json"
        if is_erased(record):
            raise ValueError(f"record {record.id} of {record.run_id} was erased: there is nothing to publish")
        checked_commit(record, self.open_journal().location)
        data = render(record)
        final = self._publisher.scope_dir(record.payload["scope"]) / f"{record.payload['id']}.json"
        staged = self._publisher.stage(final.parent, data, record.run_id)
        self._publisher.publish(staged, final, record.run_id)
        return final

    # -- reads ---------------------------------------------------------------------------------

    def _read(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)``, done again once when it failed because the history DB changed
        under a read that held none of SQLite's locks (``HistoryDB._unchanged``): the second try
        reads through a fresh connection, which sees the change."""
        seen = self._db.changes_seen
        try:
            return fn(*args, **kwargs)
        except Unreachable:
            if self._db.changes_seen == seen:
                raise
        return fn(*args, **kwargs)

    def recall(
        self,
        *,
        scope: str | None = None,
        source: str | None = None,
        tags: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
        before_ms: int | None = None,
        limit: int | None = 20,
        tag: str | None = None,
    ) -> list[Recalled]:
        """Live findings matching every filter, from the DB and unsynced files, newest first.

        ``tags``: every one must be on the finding (``tag`` is one more); ``meta``: each top-level
        metadata key must have that value (JSON equality; a whole float equals the integer);
        ``before_ms`` keeps findings learned strictly before it. A finding the DB holds comes from
        its row (its disk copy is left out); retired and expired findings are never returned;
        ``limit`` (None: all) applies after the merge.

        Raises:
            ArgumentInvalid: a filter has the wrong type (``tags`` a lone string, a bad ``meta``,
                a negative ``limit``…).
            Unreachable: a learned or retired file is damaged (named), or the DB cannot be read.
        """
        self._check_open()
        return self._read(
            self._search.recall,
            source=source,
            tag=tag,
            tags=tags,
            meta=meta,
            before_ms=before_ms,
            limit=limit,
            scope=scope,
        )

    async def arecall(
        self,
        *,
        scope: str | None = None,
        source: str | None = None,
        tags: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
        before_ms: int | None = None,
        limit: int | None = 20,
        tag: str | None = None,
    ) -> list[Recalled]:
        """``recall`` off the event loop (the same filters, the same errors)."""
        return await self._off_loop(
            partial(
                self.recall,
                scope=scope,
                source=source,
                tags=tags,
                meta=meta,
                before_ms=before_ms,
                limit=limit,
                tag=tag,
            )
        )

    def why(
        self,
        subject: str,
        *,
        limit: int | None = 10,
        scope: str | None = None,
        tags: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
        source: str | None = None,
        before_ms: int | None = None,
        mode: str | None = None,
    ) -> list[Explained]:
        """Live findings that answer ``subject``, best first.

        ``mode`` says how they match: ``keyword`` (the subject's words, stemmed: findings matching
        more of them first; a word in a tag or the source weighs more than one in the text; ties go
        to the newest), ``semantic`` (the cosine similarity of the subject's vector and each
        finding's, from the store's ``embedder``), or ``hybrid`` (the similarity, the words' score
        scaled to at most 0.1, and the question's words aligned with the finding's by meaning:
        docs/MEMORY.md, "Ranking"). The default is ``hybrid`` when the store has an embedder,
        ``keyword`` otherwise.
        ``scope``, ``tags``, ``meta``, ``source`` and ``before_ms`` filter as in ``recall``, before
        anything is ranked; ``limit`` answers at most (None: every match). Each answer carries the
        finding's citation, flow and commit time, and says whether it matched by words, by meaning
        or both.

        Raises:
            ArgumentInvalid: a filter or the mode is malformed.
            EmbedderUnavailable: ``semantic`` or ``hybrid`` was asked of a store with no embedder.
            EmbedderFailed: the embedder raised or returned malformed vectors.
            Unreachable: a learned or retired file is damaged (named), or the DB cannot be read.
        """
        self._check_open()
        return self._read(
            self._search.why,
            subject,
            limit=limit,
            scope=scope,
            tags=tags,
            meta=meta,
            source=source,
            before_ms=before_ms,
            mode=mode,
        )

    async def awhy(
        self,
        subject: str,
        *,
        limit: int | None = 10,
        scope: str | None = None,
        tags: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
        source: str | None = None,
        before_ms: int | None = None,
        mode: str | None = None,
    ) -> list[Explained]:
        """``why`` off the event loop (the same arguments, the same errors)."""
        call = partial(
            self.why,
            subject,
            limit=limit,
            scope=scope,
            tags=tags,
            meta=meta,
            source=source,
            before_ms=before_ms,
            mode=mode,
        )
        return await self._off_loop(call)

    def derive_vectors(self, scope: str | None = None, *, again: bool = False) -> int:
        """Compute and keep the vectors of every live finding (of ``scope``) that has none for the
        store's embedder, ahead of the first search by meaning; returns how many findings are live.
        ``again`` first drops the vectors this process remembers (after the file was repaired).

        Raises:
            EmbedderUnavailable: the store has no embedder.
            EmbedderFailed: the embedder raised or returned malformed vectors.
        """
        self._check_open()
        return self._read(self._search.derive_vectors, scope, again=again)

    def get(self, key: str) -> Recalled | None:
        """The live finding whose key is ``key`` (from the DB, else its unsynced file), or None
        when no live finding has it.

        Raises:
            ArgumentInvalid: ``key`` is not 32 lowercase hex digits.
            Unreachable: a learned file is damaged (named), or the DB cannot be read.
        """
        self._check_open()
        return self._read(self._search.get, check_key(key))

    def scope_of(self, key: str) -> str | None:
        """The scope of the finding ``key`` (live, retired or expired), looked for in the files, the
        DB and then the journal; None when no finding has it.

        Raises:
            ArgumentInvalid: ``key`` is not 32 lowercase hex digits.
            Unreachable: a file or the DB that holds the key cannot be read.
            JournalError: the journal cannot be read (asked only when the store does not know it).
        """
        self._check_open()
        found = self._read(self._retirer.locate, check_key(key))
        return None if found is None else found.scope

    def scopes(self, *, after: str | None = None, limit: int | None = None) -> list[str]:
        """The names of the scopes that hold at least one live finding (DB rows and unsynced
        files), sorted by code point.

        ``after`` and ``limit`` page them: only the scopes sorting after ``after`` (the last of the
        previous page), at most ``limit`` of them (None: all). A page looks only at as many scopes as
        it needs (and those it passes for holding no live finding), not at every scope.

        Raises:
            ArgumentInvalid: ``after`` is not a string, or ``limit`` not an integer from 0.
            Unreachable: a learned file is damaged (named), or the DB cannot be read.
        """
        self._check_open()
        return self._read(self._search.scopes, after=after, limit=limit)

    # -- sync ----------------------------------------------------------------------------------

    def latest_commits(self, progress: Callable[[int, int], None] | None = None) -> dict[str, Record]:
        """For each finding id in the journal, the ``memory-learn`` commit to publish (newest across runs)."""
        self._check_open()
        return latest_commits(self.open_journal(), progress)

    def catch_up(self) -> int:
        """On a journal that hosts share (PostgreSQL): publish the learned file of every finding
        committed since this store last caught up, by any host or process, that this host has
        neither as a file nor as a row; returns how many. The first call of a store object is a
        whole ``materialize``; later ones ask the journal which runs' ``memory-learn`` streams grew
        (``heads_changed``: one indexed query for the heads moved since the last call, where the
        journal keeps them; else ``stream_heads``) and read only the records after the last one read
        (``read_after``), each checked as every record read back. What is retired, or an update
        that lost its race, gets no file. Nothing on a file journal (one host's: its stores see
        each other's learns at once) or on a read-only store. The LangGraph store calls it before
        every batch, so an item put on one host is read, updated and deleted as one item on all.

        Raises:
            JournalError: the journal cannot be read, or a record is not of the exact shape.
            Unwritable: a file could not be published.
        """
        self._check_open()
        if self.read_only:
            return 0
        backend = self.open_journal()
        if not lists_heads(backend):
            return 0
        with self._catching_up:
            changed = getattr(backend, "heads_changed", None)
            mark = None
            if changed is not None:  # every head at the first look, then only those that moved
                moved, mark, whole = changed((STREAM,), self._catch_mark)
                heads: Mapping[str, int] = moved[STREAM]
                # a mark that did not hold (another journal, a server restored or failed over): the
                # heads reached are unknown, so every run is read again
                self._caught_up = {} if whole and self._catch_mark is not None else self._caught_up
            else:
                heads = backend.stream_heads(STREAM)  # type: ignore[attr-defined]
            if self._caught_up is None:
                self._caught_up = self._load_caught_up(backend.location)
            if self._caught_up is None:  # before the scan: what is appended during it is read again
                made = self.materialize()
                self._caught_up = dict(heads)
                self._save_caught_up(backend.location)
                self._catch_mark = mark
                return made
            latest: dict[str, Record] = {}
            for run_id, head in heads.items():
                seen = self._caught_up.get(run_id, 0)
                if head <= seen:
                    continue
                for rec in backend.read_after(run_id, STREAM, seen):  # type: ignore[attr-defined]
                    if is_erased(rec):
                        continue
                    checked_commit(rec, backend.location)
                    fid = rec.payload["id"]
                    kept = latest.get(fid)
                    if kept is None or rec.payload["learnedMs"] >= kept.payload["learnedMs"]:
                        latest[fid] = rec
            shared = self._retirer.shared.current()
            fresh = {
                fid: rec
                for fid, rec in latest.items()
                if fid not in shared
                and not os.path.lexists(self._retirer.retired_path(rec.payload["scope"], fid))
            }
            made = self._syncer.publish_commits(fresh, {})
            if any(self._caught_up.get(run_id, 0) < head for run_id, head in heads.items()):
                self._caught_up.update(heads)
                self._save_caught_up(backend.location)
            self._catch_mark = mark
            return made

    def _load_caught_up(self, location: str) -> dict[str, int] | None:
        """The heads the last ``catch_up`` of this store against the journal ``location`` reached
        (``<db-dir>/flows-cache/caught-up.json``, derived state: anything missing, damaged or for
        another journal is None, and the next catch-up is a whole ``materialize``)."""
        try:
            data = read_file(cache_dir(self.db_path) / CAUGHT_UP_FILE)
            got = orjson.loads(data) if data is not None else None
        except (OSError, orjson.JSONDecodeError):
            return None
        heads = got.get("heads") if isinstance(got, dict) and got.get("journal") == location else None
        if not isinstance(heads, dict):
            return None
        if not all(isinstance(k, str) and type(v) is int and 0 <= v < 2**63 for k, v in heads.items()):
            return None
        return heads

    def _save_caught_up(self, location: str) -> None:
        """Keep the heads ``catch_up`` reached for this store's next process (best effort: a store
        that cannot write its cache reads the whole journal again next time)."""
        folder = cache_dir(self.db_path)
        data = orjson.dumps({"journal": location, "heads": self._caught_up})
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            if not stat.S_ISDIR(os.lstat(folder).st_mode):  # a link there is never followed
                return
            stage(folder, data, sync=False).publish(folder / CAUGHT_UP_FILE, sync_dir=False)
        except (OSError, StagingError) as exc:
            log.warning(
                "could not keep %s in %s (%s): the next catch-up reads the whole journal",
                CAUGHT_UP_FILE,
                folder,
                exc,
            )

    def materialize(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Publish a learned file for each finding the journal holds but neither the DB nor the
        disk does (a finding learned on another host sharing the journal, or a lost file).

        Returns how many files were published. Never writes to the journal.
        """
        self._check_open()
        return self._syncer.materialize(progress)

    def sync(
        self, *, materialize: bool = True, progress: Callable[[int, int], None] | None = None
    ) -> SyncReport:
        """Ingest learned files into the history DB, then drop the disk copies it now holds.

        With ``materialize`` (the default) it first publishes files for findings the journal holds
        that this host has neither as a file nor as a row, and removes this host's copies (rows,
        files, caches, vectors) of every memory the journal records as erased, on any host.
        Without it, on a journal hosts share, it still removes this host's copies of what was
        erased since this store object last looked (the erase stream's heads: one query), so a
        store that syncs only its own files (the LangGraph store) keeps no erased content either.
        Idempotent; safe while flows learn: a file replaced by a learn during the sync is kept,
        never dropped.

        Raises:
            Unreachable: a learned file is damaged (named); nothing after it is ingested.
            Unwritable: the DB cannot be written.
        """
        self._check_open()
        late: list[str] = []
        erased: list[tuple[Path, Recalled]] = []
        report = self._syncer.sync(materialize=materialize, progress=progress, late=late, erased=erased)
        from memory._erase import audits, audits_after

        backend = self.open_journal()
        if erased:
            # copies here of what an erase (on another host sharing the journal) made tombstones:
            # removed, once an erase record names each key; a tombstone no erase names is damage
            named = {k for r in audits(backend) for k in r.payload["keys"] if isinstance(k, str)}
            for path, entry in erased:
                if entry.key not in named:
                    raise Citations.tombstoned(path, entry, named=False)
            self.finish_erasure(sorted({entry.key for _, entry in erased}), targets=[])
        if materialize:
            self._purge_erased(audits(backend))
        elif lists_heads(backend):  # what another host erased since this store last looked
            self._purge_erased(audits_after(backend, self._erasures_seen))
        elif late:
            # a file journal: an erase that ran while this sync read the files may have deleted
            # rows before this sync wrote them (its retired files were published after the look)
            wanted = set(late)
            self._purge_erased([r for r in audits(backend) if wanted & set(r.payload["keys"])])
        if self._db.pages_held:  # a reader kept the old pages of rows this sync erased: said by a marker
            self.note_erasure_held(sorted({entry.key for _, entry in erased}) or ["(erased on another host)"])
        return report

    def _purge_erased(self, erasures: list[Record]) -> None:
        """Remove this host's copies of what any host erased (``erasures``, the journal's erase
        records): its rows, files, caches and vectors; the journal itself was rewritten by the
        erase."""
        left = self._erased_copies_aside(
            {k for record in erasures for k in record.payload["keys"] if isinstance(k, str)}
        )
        for record in erasures:
            keys = [k for k in record.payload["keys"] if isinstance(k, str)]
            if (
                left.intersection(keys)
                or self._db.rows_of(keys)
                or any(self.get(k) is not None for k in keys)
            ):
                self.finish_erasure(keys, targets=[])
        if erasures:
            # the files this sync removed wait for the background unlink: one may hold what an
            # erase took (a retirement of it published here just now), so none outlives the sync
            REAPER.drain(DRAIN_AT_EXIT_S)

    def _erased_copies_aside(self, keys: set[str]) -> set[str]:
        """Which of ``keys`` this host still has a copy of where no read looks: a hidden stage file
        (a learn, publish or forget killed part-way) or a file ``flows check --repair`` moved into
        ``flows-quarantine/``. A host with no row and no live file of an erased memory still removes
        those at its sync (``finish_erasure``), as the erasure's own host does."""
        from memory._erase import keys_in_file, keys_in_stages, quarantined_holding
        from memory._paths import scope_folders, stage_folders

        if not keys:
            return set()
        found = keys_in_stages(stage_folders(scope_folders(self.db_path)), keys)
        for path in quarantined_holding(self.db_path.parent / QUARANTINE_DIR, keys):
            found |= ({path.name[: -len(".json")]} & keys) | keys_in_file(path, keys)
        return found

    async def async_sync(self) -> SyncReport:
        """``sync`` off the event loop."""
        return await self._off_loop(self.sync)


def _held_erasure(backend: JournalBackend, memory: str, exc: JournalLeaseHeld) -> JournalLeaseHeld:
    """The refusal of an erasure one of whose records is in a root run still running (``exc``): what
    was done, what was not, who holds the run, and what to do."""
    held = f"root run {exc.run_id}"
    try:
        run = backend.run(exc.run_id) if exc.run_id is not None else None
    except JournalError:
        run = None
    if run is not None:
        held += f" (flow {run.flow!r}, scope {run.scope!r})"
    return JournalLeaseHeld(
        f"memory {memory} is forgotten, its erasure recorded and its copies outside the journal "
        f"removed, but {held} still holds records of its content: that run is still running (its "
        "process is alive: a flow, or for flow 'mcp' an MCP server whose client has not ended its "
        "session; a session ends when its client closes it, the server stops, or the server reaps it "
        "idle), and the journal rewrites no record of a running run. Once the run has ended, erase "
        f"it again (`flows erase {memory} --yes`) or run `flows check --repair`; until then `flows "
        "check` reports it as erase_incomplete",
        run_id=exc.run_id,
        stream=exc.stream,
    )

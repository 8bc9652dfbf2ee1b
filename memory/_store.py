"""The findings memory: learn (journal-first), recall and why (DB + unsynced files), sync."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import heapq
import itertools
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import journal
from journal import JournalBackend, Lease, Record
from memory._db import HistoryDB, db_mode
from memory._errors import FindingInvalid, Unjournaled, UnsupportedHeader, Unwritable
from memory._files import (
    DiskIndex,
    Listing,
    Terms,
    learned_names,
    newest_first,
    parse_learned,
    terms_of,
    words,
)
from memory._finding import STREAM, finding_id, learn_payload, render, validate
from memory._paths import learned_dir, learned_root, resolve_db, resolve_journal, scope_dirs
from memory._results import Citation, Explained, Learned, Recalled, SyncReport
from staging import (
    STAGE_PREFIX,
    StagingError,
    ensure_dir,
    failpoint,
    fsync_dir,
    publish_many,
    stage,
    sync_dir_shared,
)

T = TypeVar("T")
E = TypeVar("E")
_SYNC_BATCH = 500


def _now_ms() -> int:
    return journal.now_ms()


@dataclass(frozen=True)
class RootRun:
    """The root run a learn journals into: the backend, the lease, and the flow's name and scope.

    ``script`` is the flow header's ``memory.script``; when False every learn raises
    ``UnsupportedHeader``.
    """

    journal: JournalBackend
    lease: Lease
    flow: str
    scope: str
    script: bool = True

    @property
    def run_id(self) -> str:
        """The root run's id."""
        return self.lease.run_id


_STOPWORDS = frozenset(
    {
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "did",
        "do",
        "does",
        "for",
        "from",
        "has",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "so",
        "that",
        "the",
        "their",
        "there",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
    }
)


def refuse_links(base: Path, directory: Path, run_id: str | None = None) -> None:
    """Raise ``Unwritable`` if any component of ``directory`` below ``base`` is a symbolic link.

    A link planted in the store could send learned files anywhere; the store never follows one.
    """
    probe = directory
    while probe != base and base in probe.parents:
        if probe.is_symlink():
            raise Unwritable(
                f"{probe} is a symbolic link; the store never follows links: remove it",
                path=probe,
                run_id=run_id,
            )
        probe = probe.parent


def _words(text: str) -> list[str]:
    return words(text)


def _key(e: Recalled) -> str:
    return e.key


def _best_first(x: Explained) -> tuple[float, int, int]:
    return (x.score, x.finding.learned_ms, x.finding.id)


def _subject_words(subject: str) -> list[str]:
    """The words of a question worth matching: lower-cased, de-duplicated, without stop words."""
    return [w for w in dict.fromkeys(_words(subject)) if w not in _STOPWORDS]


class MemoryStore:
    """Findings memory rooted at a history DB path.

    Args:
        db: the history DB (default: ``$FLOWS_DB``, else ``$XDG_DATA_HOME/flows/history.db``).
        journal: the journal location for reads and sync (default: ``$FLOWS_JOURNAL``, else
            ``<db-dir>/flows-journal``).
        clock: milliseconds since the epoch.
        max_workers: threads of the one executor that async calls run on.

    The store is a context manager; ``close()`` is safe twice.
    """

    def __init__(
        self,
        db: str | os.PathLike[str] | None = None,
        *,
        journal: str | os.PathLike[str] | None = None,
        clock: Callable[[], int] = _now_ms,
        max_workers: int = 8,
    ) -> None:
        self.db_path = resolve_db(db)
        self.journal_location = resolve_journal(self.db_path, journal)
        self._clock = clock
        self._db = HistoryDB(self.db_path)
        self._disk = DiskIndex()
        self._journal: JournalBackend | None = None
        self._ready_dirs: set[Path] = set()
        self._scope_dirs: dict[str, Path] = {}
        self._durable_names: set[Path] = set()  # learned files this store published durably
        self._shared_fs: dict[tuple[JournalBackend, Path], bool] = {}
        # run id -> (scope, finding id) -> its commit, as republish_run read them (resumed roots)
        self._committed: dict[str, dict[tuple[str, str], Record]] = {}
        self._learned_root = learned_root(self.db_path)
        self._scope_listing: tuple[tuple[int, int], list[Path], int] | None = None
        self._held_cache: dict[str, bool] = {}
        self._held_version: tuple[int, int] | None = None
        self._held_mutex = threading.Lock()
        self._journal_lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._max_workers = max_workers

    # -- plumbing ------------------------------------------------------------------------------

    def open_journal(self) -> JournalBackend:
        """The journal at ``journal_location``, opened once and shared."""
        with self._journal_lock:
            if self._journal is None:
                self._journal = journal.open_journal(self.journal_location)
            return self._journal

    @property
    def db(self) -> HistoryDB:
        """The history DB."""
        return self._db

    def close(self) -> None:
        """Close the DB connection, the journal and the executor (safe twice)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        self._db.close()
        if self._journal is not None:
            self._journal.close()
            self._journal = None

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def _off_loop(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self._max_workers, thread_name_prefix="flows-memory")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, partial(fn, *args, **kwargs))

    # -- learn ---------------------------------------------------------------------------------

    def learn(self, finding: object, root: RootRun | None) -> Learned:
        """Learn ``finding`` journal-first: validate, stage, append, then publish (SPEC R-L1..R-L6).

        The published file is rendered from the first commit of this finding in the root's
        ``memory-learn`` stream, so racing attempts and resumed runs publish the same bytes.

        Raises:
            Unjournaled: ``root`` is None; nothing is written.
            UnsupportedHeader: the flow's header says ``memory.script: false``.
            FindingInvalid: the finding is malformed; nothing is staged or journaled.
            Unwritable: the file could not be staged (nothing journaled) or published.
            JournalError: any journal failure, unchanged; nothing is published.
        """
        if root is None:
            raise Unjournaled("learn needs a root run to journal into; run the flow with `flows run`")
        if not root.script:
            raise UnsupportedHeader(
                f"flow {root.flow!r} declares memory.script: false, so it cannot learn", run_id=root.run_id
            )
        item = validate(finding, default_source=root.flow)
        fid = finding_id(root.scope, item)
        directory = self._scope_dir(root.scope)
        final = directory / f"{fid}.json"
        # Only a finding whose file is already there can have been committed and published (a
        # resumed body's re-learn): look it up then. Otherwise the keyed append below returns a
        # commit that raced ahead of this one, and its bytes are what get published.
        existing = root.journal.find(root.run_id, STREAM, fid) if os.path.lexists(final) else None
        if existing is None:
            payload = learn_payload(fid, root.scope, root.flow, item, self._clock())
            expected = Record(
                root.run_id, STREAM, 0, journal.record_id(root.run_id, STREAM, fid), fid, 0, payload
            )
        else:
            expected = existing
        data = render(expected)
        if existing is not None and self._holds(final, data):
            # Committed and published already (a resumed body): make sure the name is durable, in
            # case the publish that made it died before its directory fsync, and say so.
            if final not in self._durable_names:
                self._sync_dir(directory, root.run_id)
            return Learned(
                fid,
                Citation(existing.run_id, existing.stream, existing.id),
                final,
                int(existing.payload["learnedMs"]),
            )
        # Journal and file on one file system: the stage is written without fsync and the append's
        # own sync (a syncfs) makes both durable with one device flush.
        shared = existing is None and self._shares_filesystem(root.journal, directory)
        staged = self._stage(directory, data, root.run_id, sync=not shared)
        try:
            if existing is not None:
                record = existing
            else:
                record = root.journal.append(
                    root.lease, STREAM, expected.payload, key=fid, sync_filesystem=shared
                )
        except BaseException:
            staged.discard()
            raise
        failpoint("memory.after_append")
        if render(record) != data:  # another attempt committed first: publish its bytes
            staged.discard()
            staged = self._stage(directory, render(record), root.run_id)
        self._publish(staged, final, root.run_id)
        return Learned(
            id=fid,
            citation=Citation(record.run_id, record.stream, record.id),
            path=final,
            learned_ms=int(record.payload["learnedMs"]),
        )

    @staticmethod
    def _holds(path: Path, data: bytes) -> bool:
        """Whether ``path`` (never through a link) holds exactly ``data``."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            return os.read(fd, len(data) + 1) == data
        except OSError:
            return False
        finally:
            os.close(fd)

    def _sync_dir(self, directory: Path, run_id: str | None) -> None:
        try:
            sync_dir_shared(directory)
        except OSError as exc:
            raise Unwritable(
                f"cannot fsync {directory}: {exc.strerror or exc}",
                path=directory,
                run_id=run_id,
                errno=exc.errno,
            ) from exc

    def republish_run(self, backend: JournalBackend, run_id: str) -> int:
        """Publish, in batches, the learned file of every finding ``run_id`` committed whose file
        does not already hold exactly its record's bytes; returns how many were published.

        ``resume`` calls it before re-running the body, so the body's re-learns find their files
        in place (and, through ``alearn``, are answered from the commits read here). The folders
        of files already in place are fsync'd once each. Never writes to the journal.
        """
        wanted: list[tuple[Path, bytes]] = []
        intact: list[Path] = []
        committed: dict[tuple[str, str], Record] = {}
        for rec in backend.read(run_id, STREAM):
            scope = rec.payload.get("scope")
            fid = rec.payload.get("id")
            if not isinstance(scope, str) or not isinstance(fid, str):
                continue
            final = self._scope_dir(scope) / f"{fid}.json"
            data = render(rec)
            committed[(scope, fid)] = rec
            if self._holds(final, data):
                intact.append(final)
            else:
                wanted.append((final, data))
        self._publish_batches(wanted)
        # Files already in place may be names a crashed publish never made durable: one fsync of
        # each of their folders settles them all.
        for directory in dict.fromkeys(final.parent for final in intact):
            self._sync_dir(directory, run_id)
        self._durable_names.update(intact)
        self._committed[run_id] = committed
        return len(wanted)

    def _republished(self, finding: object, root: RootRun | None) -> Learned | None:
        """A resumed body's re-learn of a finding ``republish_run`` found committed and whose file
        this store published durably and still holds its bytes: answered without a journal read,
        an executor hop or a write. None in every other case (``learn`` then decides)."""
        if root is None or not root.script:
            return None
        known = self._committed.get(root.run_id)
        if not known:
            return None
        try:
            fid = finding_id(root.scope, validate(finding, default_source=root.flow))
        except FindingInvalid:
            return None
        rec = known.get((root.scope, fid))
        if rec is None:
            return None
        final = self._scope_dir(root.scope) / f"{fid}.json"
        if final not in self._durable_names or not self._holds(final, render(rec)):
            return None
        return Learned(fid, Citation(rec.run_id, rec.stream, rec.id), final, int(rec.payload["learnedMs"]))

    def _publish_batches(self, wanted: list[tuple[Path, bytes]]) -> None:
        for i in range(0, len(wanted), _SYNC_BATCH):
            batch = wanted[i : i + _SYNC_BATCH]
            for directory in dict.fromkeys(final.parent for final, _ in batch):
                refuse_links(self.db_path.parent, directory)
                try:
                    ensure_dir(directory)
                except OSError as exc:
                    raise Unwritable(
                        f"cannot create {directory}: {exc.strerror or exc}", path=directory
                    ) from exc
            try:
                publish_many(batch, db_mode(self.db_path))
                self._durable_names.update(final for final, _ in batch)
            except StagingError as exc:
                raise Unwritable(
                    f"cannot publish learned files: {exc}", path=exc.path, errno=exc.errno
                ) from exc

    def _scope_dir(self, scope: str) -> Path:
        """The scope's folder of learned files (its path computed once per store)."""
        directory = self._scope_dirs.get(scope)
        if directory is None:
            directory = self._scope_dirs[scope] = learned_dir(self.db_path, scope)
        return directory

    def _shares_filesystem(self, backend: JournalBackend, directory: Path) -> bool:
        """Whether ``backend``'s append can make files staged in ``directory`` durable (asked once
        per backend and directory, after the directory exists)."""
        if directory not in self._ready_dirs:
            return False
        found = self._shared_fs.get((backend, directory))
        if found is None:
            found = self._shared_fs[(backend, directory)] = backend.shares_filesystem(str(directory))
        return found

    def _stage(self, directory: Path, data: bytes, run_id: str | None, *, sync: bool = True) -> Any:
        ready = directory in self._ready_dirs  # checked for links and created once per store
        if not ready:
            refuse_links(self.db_path.parent, directory, run_id)
        try:
            failpoint("memory.before_stage")
            if not ready:
                ensure_dir(directory)
                self._ready_dirs.add(directory)
            return stage(directory, data, db_mode(self.db_path), hint="finding", sync=sync)
        except (StagingError, OSError) as exc:
            if ready and getattr(exc, "errno", None) == errno.ENOENT:  # removed since: check again
                self._ready_dirs.discard(directory)
                return self._stage(directory, data, run_id)  # synced: the folder is new
            path = getattr(exc, "path", directory)
            raise Unwritable(
                f"cannot stage a learned file in {directory}: {exc}",
                path=path,
                run_id=run_id,
                errno=getattr(exc, "errno", None),
            ) from exc

    def _publish(self, staged: Any, final: Path, run_id: str | None) -> None:
        try:
            staged.publish(final)
        except StagingError as exc:
            raise Unwritable(
                f"cannot publish {final}: {exc}", path=final, run_id=run_id, errno=exc.errno
            ) from exc

    async def alearn(self, finding: object, root: RootRun | None) -> Learned:
        """``learn`` off the event loop, on the store's one executor; a resumed body's re-learn of a
        finding already republished (a file read, no write) is answered on the loop."""
        done = self._republished(finding, root)
        if done is not None:
            return done
        return await self._off_loop(self.learn, finding, root)

    # -- reads ---------------------------------------------------------------------------------

    def _listings(self, scope: str | None) -> list[Listing]:
        """The scope's (or every scope's) unsynced listings, each parsed whole so damage fails closed."""
        dirs = [self._scope_dir(scope)] if scope is not None else self._every_scope_dir()
        return [self._disk.listing(d) for d in dirs]

    def _every_scope_dir(self) -> list[Path]:
        """``scope_dirs``, remembered until ``<db-dir>/flows-memory`` changes (a scope comes or goes).

        A listing taken while the folder is fresh (mtimes are coarse) is not remembered, and a
        scope whose folders exist but not yet its learned-file folder is looked for again each time.
        """
        root = self._learned_root
        try:
            st = os.stat(root)
        except FileNotFoundError:
            return []
        stamp = (st.st_mtime_ns, st.st_ino)
        cached = self._scope_listing
        if cached is not None and cached[0] == stamp and cached[2] == len(cached[1]):
            return cached[1]
        found = scope_dirs(self.db_path)
        names = len(os.listdir(root))
        if time.time_ns() - st.st_mtime_ns > 50_000_000:
            self._scope_listing = (stamp, found, names)
        return found

    def _held_keys(self, keys: list[str]) -> set[str]:
        """Which of ``keys`` the DB holds, remembered until the DB changes (``HistoryDB.version``)."""
        with self._held_mutex:
            version = self._db.version()
            if version != self._held_version:
                self._held_cache.clear()
                self._held_version = version
            unknown = [k for k in keys if k not in self._held_cache]
            if unknown:
                found = self._db.held(unknown)
                for k in unknown:
                    self._held_cache[k] = k in found
            return {k for k in keys if self._held_cache[k]}

    def _not_held(self, candidates: Iterable[E], want: int | None, key: Callable[[E], str]) -> list[E]:
        """The candidates (in their order) whose key the DB does not hold, stopping at ``want``.

        ``candidates`` is consumed lazily, a chunk per DB query, so a small ``want`` reads little.
        """
        kept: list[E] = []
        if want is not None and want <= 0:
            return kept
        it = iter(candidates)
        step = 500 if want is None else max(16, 2 * want)
        while chunk := list(itertools.islice(it, step)):
            held = self._held_keys([key(e) for e in chunk])
            kept.extend(e for e in chunk if key(e) not in held)
            if want is not None and len(kept) >= want:
                break
        return kept

    def recall(
        self,
        *,
        source: str | None = None,
        tag: str | None = None,
        before_ms: int | None = None,
        limit: int | None = 20,
        scope: str | None = None,
    ) -> list[Recalled]:
        """Findings matching every filter, from the DB and unsynced files, newest first (R-R1..R-R3).

        ``before_ms`` keeps findings learned strictly before it; ``limit`` applies after the merge.

        Raises:
            Unreachable: a learned file is damaged (named), or the DB cannot be read.
        """
        listings = self._listings(scope)
        ordered = [listing.with_tag(tag) if tag is not None else listing.entries for listing in listings]
        newest = ordered[0] if len(ordered) == 1 else heapq.merge(*ordered, key=newest_first, reverse=True)
        disk: Iterable[Recalled] = (
            e
            for e in newest
            if (scope is None or e.scope == scope)
            and (source is None or e.source == source)
            and (tag is None or tag in e.tags)
            and (before_ms is None or e.learned_ms < before_ms)
        )
        rows = self._db.recall(scope=scope, source=source, tag=tag, before_ms=before_ms, limit=limit)
        if limit and len(rows) >= limit:  # older entries than the last row cannot make the cut
            last = rows[-1].learned_ms
            disk = itertools.takewhile(lambda e: e.learned_ms >= last, disk)
        kept = self._not_held(disk, limit, key=_key)
        merged = sorted([*rows, *kept], key=lambda e: (e.learned_ms, e.id), reverse=True)
        return merged if limit is None else merged[:limit]

    async def arecall(self, **filters: Any) -> list[Recalled]:
        """``recall`` off the event loop."""
        return await self._off_loop(partial(self.recall, **filters))

    def why(self, subject: str, *, limit: int = 10, scope: str | None = None) -> list[Explained]:
        """Findings whose text, tags or source share words with ``subject``, best match first (R-R5).

        Findings matching more of the subject's words come first; among equals, a word matching a
        tag or the source weighs more than one in the text; remaining ties go to the newest.
        Each answer carries the finding's citation, flow and commit time.
        """
        words = _subject_words(subject)
        if not words:
            return []
        wanted = set(words)
        disk: list[Explained] = []
        for listing in self._listings(scope):
            for e, terms in listing.sharing(wanted, best=max(50, 4 * limit)):
                score, matched = self._score_terms(terms, wanted)
                if score > 0 and (scope is None or e.scope == scope):
                    disk.append(Explained(finding=e, score=score, matched=matched))
        disk.sort(key=_best_first, reverse=True)
        scored = self._not_held(disk, limit, key=lambda x: x.finding.key)
        for e in self._db.search(words, scope=scope, limit=max(50, limit * 5)):
            score, matched = self._score(e, wanted)
            if score > 0:
                scored.append(Explained(finding=e, score=score, matched=matched))
        scored.sort(key=_best_first, reverse=True)
        return scored[:limit]

    @classmethod
    def _score(cls, e: Recalled, wanted: set[str]) -> tuple[float, tuple[str, ...]]:
        return cls._score_terms(terms_of(e), wanted)

    @staticmethod
    def _score_terms(terms: Terms, wanted: set[str]) -> tuple[float, tuple[str, ...]]:
        text, tags, source = terms.text, terms.tags, terms.source
        weight = 0.0
        matched = []
        for w in sorted(wanted):
            s = (1.0 if w in text else 0.0) + (1.5 if w in tags else 0.0) + (1.0 if w in source else 0.0)
            if s:
                matched.append(w)
                weight += s
        # More of the question's words matched ranks first; where they match (tags, source) breaks ties.
        return (len(matched) + weight / 10 if matched else 0.0), tuple(matched)

    async def awhy(self, subject: str, **kwargs: Any) -> list[Explained]:
        """``why`` off the event loop."""
        return await self._off_loop(partial(self.why, subject, **kwargs))

    # -- sync ----------------------------------------------------------------------------------

    def latest_commits(self, progress: Callable[[int, int], None] | None = None) -> dict[str, Record]:
        """For each finding id in the journal, its newest ``memory-learn`` commit across runs."""
        jr = self.open_journal()
        latest: dict[str, Record] = {}
        runs = jr.runs()
        for n, run in enumerate(runs, 1):
            for rec in jr.read(run.run_id, STREAM):
                fid = rec.payload.get("id")
                if not isinstance(fid, str):
                    continue
                prev = latest.get(fid)
                if prev is None or (rec.payload["learnedMs"], rec.run_id) > (
                    prev.payload["learnedMs"],
                    prev.run_id,
                ):
                    latest[fid] = rec
            if progress:
                progress(n, len(runs))
        return latest

    def materialize(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Publish a learned file for each finding the journal holds but neither the DB nor the
        disk does (a finding learned on another host sharing the journal, or a lost file).

        Returns how many files were published. Never writes to the journal.
        """
        latest = self.latest_commits(progress)
        held = self._db.held(latest)
        wanted: list[tuple[Path, bytes]] = []
        for fid, rec in latest.items():
            if fid in held:
                continue
            final = self._scope_dir(rec.payload["scope"]) / f"{fid}.json"
            data = render(rec)
            try:
                current: bytes | None = final.read_bytes()
            except FileNotFoundError:
                current = None
            if current == data:
                continue
            # A damaged file is not overwritten here: it fails closed (memory_unreachable).
            if current is not None and parse_learned(final, current).learned_ms >= rec.payload["learnedMs"]:
                continue
            wanted.append((final, data))
        # Many files at once (a lost store, another host's findings): stage them all, one data
        # sync, the renames, one directory fsync per scope.
        self._publish_batches(wanted)
        return len(wanted)

    def sync(
        self, *, materialize: bool = True, progress: Callable[[int, int], None] | None = None
    ) -> SyncReport:
        """Ingest learned files into the history DB, then drop the disk copies it now holds (R-R6).

        With ``materialize`` (the default) it first publishes files for findings the journal holds
        that this host has neither as a file nor as a row. Idempotent; safe while flows learn: a
        file replaced by a learn during the sync is kept, never dropped.

        Raises:
            Unreachable: a learned file is damaged (named); nothing after it is ingested.
            Unwritable: the DB cannot be written.
        """
        made = self.materialize() if materialize else 0
        files: list[tuple[Path, bytes, Recalled]] = []
        for d in scope_dirs(self.db_path):
            for name in learned_names(d):
                path = d / name
                try:
                    data = path.read_bytes()
                except FileNotFoundError:
                    continue
                files.append((path, data, parse_learned(path, data)))
        ingested = dropped = 0
        for i in range(0, len(files), _SYNC_BATCH):
            batch = files[i : i + _SYNC_BATCH]
            self._db.upsert([e for _, _, e in batch], self._clock())
            ingested += len(batch)
            failpoint("memory.sync_after_upsert")
            dirs = set()
            for path, data, _ in batch:
                if self._drop(path, data):
                    dropped += 1
                    dirs.add(path.parent)
            for d in dirs:
                fsync_dir(d)
            if progress:
                progress(min(i + _SYNC_BATCH, len(files)), len(files))
        return SyncReport(materialized=made, ingested=ingested, dropped=dropped)

    @staticmethod
    def _drop(path: Path, ingested: bytes) -> bool:
        """Remove ``path`` if it still holds ``ingested``; a newer file published meanwhile stays."""
        claim = path.parent / f"{STAGE_PREFIX}sync-{secrets.token_hex(6)}.{path.name}"
        try:
            os.rename(path, claim)
        except FileNotFoundError:
            return False
        if claim.read_bytes() != ingested:  # a learn replaced it after we read it: put it back
            with contextlib.suppress(FileExistsError):
                os.link(claim, path)
            os.unlink(claim)
            return False
        os.unlink(claim)
        return True

    async def async_sync(self) -> SyncReport:
        """``sync`` off the event loop."""
        return await self._off_loop(self.sync)

"""Bringing the store level with the journal and the history DB: ``latest_commits``, ``materialize``
and ``sync`` (the DB's only writer)."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from journal import JournalBackend, Record
from memory._citations import Citations
from memory._db import HistoryDB
from memory._errors import Unreachable, Unwritable
from memory._files import Retired, parse_learned, read_folder, read_new_retired, unreadable
from memory._finding import (
    RETIRE_STREAM,
    STREAM,
    checked_commit,
    commit_to_publish,
    is_erased,
    render,
    retirement_to_publish,
    retirements_in,
    supersede_in,
)
from memory._paths import retired_dirs, scan_scopes, wrong_folder_message
from memory._publisher import SYNC_BATCH, Publisher
from memory._reaper import REAPER
from memory._results import Recalled
from memory._retire import Retirer, lists_heads
from memory._safe import Folder, describe, is_damage
from staging import STAGE_PREFIX, failpoint

if TYPE_CHECKING:
    from memory._outcomes import SyncReport


@dataclass
class JournalScan:
    """What the journal says of every finding: the commit to publish of each learned one
    (``commit_to_publish``) and the first retirement of each forgotten or superseded one
    (``retirement_to_publish``)."""

    latest: dict[str, Record] = field(default_factory=dict)
    retired: dict[str, Record] = field(default_factory=dict)


def scan_journal(
    backend: JournalBackend,
    progress: Callable[[int, int], None] | None = None,
    *,
    learns: bool = True,
    retirements: bool = True,
    known: Mapping[str, list[Record]] | None = None,
) -> JournalScan:
    """Read every run's ``memory-learn`` (with ``learns``, or ``retirements``: an update's commit
    retires the version it supersedes, ``supersede_in``) and ``memory-forget`` (with
    ``retirements``) streams; ``progress(done, runs)`` is called after each run is read.

    Every record is checked to the exact shape before anything is built from it. ``known`` (for a scan
    of ``retirements`` alone): runs whose retirements the caller has just read and checked, by run
    id; they are taken as given, and those runs are not read (nor checked) again.

    Raises:
        JournalCorrupt: a record is not a finding's commit or retirement (``checked_commit``,
            ``checked_retirement``), naming run, stream and line.
        JournalError: a run could not be read, unchanged.
    """
    scan = JournalScan()
    runs = backend.runs()
    views: list[Record] = []
    for n, run in enumerate(runs, 1):
        given = known.get(run.run_id) if known is not None and retirements and not learns else None
        if given is not None:
            views += given
        elif learns or retirements:
            for rec in backend.read(run.run_id, STREAM):
                erased = is_erased(rec)
                if not erased:
                    checked_commit(rec, backend.location)  # once, before anything is built from it
                view = supersede_in(rec) if retirements else None
                if view is not None:  # an update's commit (erased or not) retires what it replaced
                    views.append(view)
                if learns and not erased:
                    fid = rec.payload["id"]
                    scan.latest[fid] = commit_to_publish(scan.latest.get(fid), rec)
        if retirements:
            if given is None:
                for record in backend.read(run.run_id, RETIRE_STREAM):
                    views += retirements_in(record, backend.location)
            for rec in views:
                key = rec.payload["id"]
                scan.retired[key] = retirement_to_publish(scan.retired.get(key), rec)
            views.clear()
        if progress:
            progress(n, len(runs))
    return scan


def latest_commits(
    backend: JournalBackend, progress: Callable[[int, int], None] | None = None
) -> dict[str, Record]:
    """For each finding id in ``backend``, the commit to publish (``commit_to_publish``) across
    runs; ``progress(done, runs)`` is called after each run is read.

    Raises:
        JournalCorrupt: a ``memory-learn`` record is not a finding's commit (``checked_commit``).
        JournalError: a run could not be read, unchanged.
    """
    return scan_journal(backend, progress, retirements=False).latest


def _drop(folder: Folder, name: str, ingested: bytes, retired: bool, hidden: list[str]) -> bool:
    """Remove ``name`` from ``folder`` if it still holds ``ingested``; a newer file published
    meanwhile stays, unless the finding is ``retired`` (then no file of it has a place).
    Everything goes through the folder's descriptor, never a path. The file is renamed to a hidden
    stage name, appended to ``hidden`` for the background unlink (``memory._reaper``); a retired
    finding's is unlinked at once (it may be one an erase on another host took: its bytes must not
    wait for a batch)."""
    fd = folder.fd
    claim = f"{STAGE_PREFIX}sync-{secrets.token_hex(6)}.{name}"
    try:
        os.rename(name, claim, src_dir_fd=fd, dst_dir_fd=fd)
    except FileNotFoundError:
        return False
    try:
        same = folder.read(claim) == ingested
    except OSError:
        same = False
    if not same and not retired:  # a learn replaced it after we read it: put it back
        with contextlib.suppress(FileExistsError):
            os.link(claim, name, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
        os.unlink(claim, dir_fd=fd)
        return False
    if retired:
        os.unlink(claim, dir_fd=fd)
    else:
        hidden.append(claim)
    return True


def _unwritable(exc: OSError, doing: str) -> Unwritable:
    where = exc.filename or ""
    return Unwritable(f"cannot {doing} {where}: {describe(exc)}", path=where or None, errno=exc.errno)


class Syncer:
    """Materializes files from the journal ``open_journal`` returns and syncs them into ``db``."""

    def __init__(
        self,
        db: HistoryDB,
        publisher: Publisher,
        open_journal: Callable[[], JournalBackend],
        clock: Callable[[], int],
        retirer: Retirer,
        *,
        citations: Citations,
    ) -> None:
        self._db = db
        self._publisher = publisher
        self._open_journal = open_journal
        # the learned files of the last ``_files`` whose commit is an erasure's tombstone
        self.tombstoned: list[tuple[Path, Recalled]] = []
        self._clock = clock
        self._retirer = retirer
        self._citations = citations
        self._base = publisher.db_path.parent

    def _current(self, final: Path) -> bytes | None:
        """What is at ``final`` now (None when nothing), read without following a link."""
        try:
            folder = Folder.open(self._base, final.parent)
            if folder is None:
                return None
            with folder:
                return folder.read(final.name)
        except OSError as exc:
            if is_damage(exc):
                raise unreadable(exc.filename or final, exc) from exc
            raise _unwritable(exc, "read") from exc

    def materialize(self, progress: Callable[[int, int], None] | None = None) -> int:
        """See ``MemoryStore.materialize``."""
        scan = scan_journal(self._open_journal(), progress)
        # Retired files first: a finding the journal says is forgotten never gets a file here.
        made = self._retirer.publish_missing(scan.retired.values())
        return made + self.publish_commits(scan.latest, scan.retired)

    def publish_successor(self, retired: Retired) -> bool:
        """Publish the learned file of the version that superseded ``retired`` (a retired file
        checked against its record) when this host has it neither as a file nor as a row nor as a
        retired file; True when it did.

        An update retires the version it replaces (its retired file) a moment before it renames
        the new version into place, so that no reader ever sees both live. A process killed in that
        moment leaves the memory with no live version on this host: the old one retired, the new
        one committed with no file. Its root's resume, ``sync`` or ``check --repair`` would publish
        it; a read or a sync that meets the retired file publishes it first, from the commit the
        retired file cites (checked as every record read back), so the acknowledged memory never
        goes missing in between. A live update in that very moment publishes the same bytes. Not on
        a journal hosts share: there ``catch_up`` publishes what this host lacks, and a read writes
        nothing (it serves another host's version from its commit: ``Search._serve_successor``).

        Raises:
            JournalError: the journal could not be read, or the commit is not of the exact shape.
            Unwritable: the file could not be published.
        """
        backend = self._open_journal()
        if lists_heads(backend):
            return False
        record = self._citations.successor_commit(retired)
        if record is None or is_erased(record):
            return False
        fid, scope = record.payload["id"], record.payload["scope"]
        if not isinstance(scope, str) or not isinstance(fid, str):
            return False
        if os.path.lexists(self._publisher.scope_dir(scope) / f"{fid}.json") or os.path.lexists(
            self._retirer.retired_path(scope, fid)
        ):
            return False
        checked_commit(record, backend.location)
        return self.publish_commits({fid: record}, {}) > 0

    def publish_commits(self, latest: Mapping[str, Record], retired: Mapping[str, Record]) -> int:
        """Publish the learned file of each commit of ``latest`` (checked ``memory-learn`` commits,
        the newest of each finding) that this host has neither as a row nor as that file, unless
        it is retired (``retired``: the retirement to publish of each key) or an update that lost
        its race; returns how many."""
        held = self._db.held(latest)
        wanted: list[tuple[Path, bytes]] = []
        keys: list[tuple[str, str]] = []
        for fid, rec in latest.items():
            if fid in held or fid in retired or self._retirer.lost(rec, retired):
                continue
            scope = rec.payload["scope"]
            if os.path.lexists(self._retirer.retired_path(scope, fid)):
                continue  # retired since ``latest`` was read (an update or forget finished meanwhile)
            final = self._publisher.scope_dir(scope) / f"{fid}.json"
            data = render(rec)
            current = self._current(final)
            if current == data:
                continue
            # A damaged file is not overwritten here: it fails closed (memory_unreachable).
            if current is not None and parse_learned(final, current).learned_ms >= rec.payload["learnedMs"]:
                continue
            wanted.append((final, data))
            keys.append((scope, fid))
        # Many files at once (a lost store, another host's findings): stage them all, one data
        # sync, the renames, one directory fsync per scope.
        self._publisher.publish_batches(wanted)
        # A retirement that began after the look above removes the file it retires only once its
        # retired file is down: a file published before that removal is removed by it, and one
        # published after it is found here, beside its retired file, and removed.
        stray = [
            final
            for (final, _), (scope, fid) in zip(wanted, keys, strict=True)
            if os.path.lexists(self._retirer.retired_path(scope, fid))
        ]
        if stray:
            self._publisher.remove_many(stray, None)
        return len(wanted) - len(stray)

    def _files(self) -> list[tuple[Path, bytes, Recalled]]:
        """Every learned file of every scope, parsed and checked against its journal record; a file
        whose commit is an erasure's tombstone is left out, and kept in ``tombstoned``."""
        try:
            folders, wrong = scan_scopes(self._publisher.db_path)
        except OSError as exc:
            raise _unwritable(exc, "list") from exc
        if wrong:
            raise Unreachable(wrong_folder_message(*wrong[0]), path=wrong[0][0])
        files: list[tuple[Path, bytes, Recalled]] = []
        for d in folders:
            try:
                files += read_folder(self._base, d)[1]
            except Unreachable as exc:
                cause = exc.__cause__
                if isinstance(cause, OSError) and not is_damage(cause):  # permission, I/O
                    raise Unwritable(exc.message, path=exc.path, errno=exc.errno) from cause
                raise
        tombstoned: list[Path] = []
        self._citations.verify(files, tombstoned)  # a file citing nothing is damage: never ingested
        if not tombstoned:
            return files
        out = set(tombstoned)
        self.tombstoned += [(path, entry) for path, _, entry in files if path in out]
        return [f for f in files if f[0] not in out]

    def sync(
        self,
        *,
        materialize: bool,
        progress: Callable[[int, int], None] | None,
        late: list[str] | None = None,
        erased: list[tuple[Path, Recalled]] | None = None,
    ) -> SyncReport:
        """See ``MemoryStore.sync``. ``late``: given, it is told the keys this sync wrote rows of
        whose retired file was published while it ran (after the look at the retired files): an
        erase among them ran while the files were read, and may have deleted their rows before
        this sync wrote them. ``erased``: told each learned file whose commit an erase made a
        tombstone (not ingested: the caller removes it once an erase record names its key)."""
        from memory._outcomes import SyncReport  # not at import: a recall makes none of them

        made = self.materialize() if materialize else 0
        # Retirements into the DB first, so the rows of the findings they retire are marked as
        # they arrive. Retired files stay: they keep the finding out of reads and learns for good.
        # Only the retired files whose retirement the DB does not hold are read: the others are
        # known by name (a retired file is named after its key), and a retirement is kept for good,
        # so a sync costs a listing per folder, not a look at every retirement ever made.
        known = self._db.retired_keys()
        fresh = self._retired_files(known)
        for r in fresh:  # a retired file no record backs never marks a row: it would hide it for good
            self._citations.check_retired(r, Path(self._retirer.retired_path(r.scope, r.key)))
            self.publish_successor(r)  # an update killed before its rename: ingested below
        for i in range(0, len(fresh), SYNC_BATCH):
            self._db.retire(fresh[i : i + SYNC_BATCH], self._clock())
        if fresh:
            self._retirer.on_retired([r.key for r in fresh])
        gone = known  # (read for this sync alone)
        gone.update(r.key for r in fresh)
        self.tombstoned = [] if erased is None else erased
        files = self._files()
        ingested = dropped = 0
        for i in range(0, len(files), SYNC_BATCH):
            batch = files[i : i + SYNC_BATCH]
            self._db.upsert([e for _, _, e in batch], self._clock())
            ingested += len(batch)
            failpoint("memory.sync_after_upsert")
            dropped += self._drop_batch(batch, gone)
            if progress:
                progress(min(i + SYNC_BATCH, len(files)), len(files))
        if late is not None and files:
            late += self._retired_since(files, gone)
        return SyncReport(materialized=made, ingested=ingested, dropped=dropped)

    def _retired_since(self, files: list[tuple[Path, bytes, Recalled]], gone: set[str]) -> list[str]:
        """The keys of ``files`` not in ``gone`` that have a retired file now (one ``lstat`` each:
        a retired folder may hold a file for every version an update replaced)."""
        return [
            e.key
            for _, _, e in files
            if e.key not in gone and os.path.lexists(self._retirer.retired_path(e.scope, e.key))
        ]

    def _retired_files(self, known: AbstractSet[str]) -> list[Retired]:
        """Every scope's retired files whose key is not in ``known``, read without following links."""
        try:
            folders = retired_dirs(self._publisher.db_path)
        except Unreachable as exc:
            cause = exc.__cause__
            if isinstance(cause, OSError) and not is_damage(cause):  # permission, I/O
                raise Unwritable(exc.message, path=exc.path, errno=exc.errno) from cause
            raise
        found: list[Retired] = []
        for d in folders:
            try:
                found += read_new_retired(self._base, d, known)
            except Unreachable as exc:
                cause = exc.__cause__
                if isinstance(cause, OSError) and not is_damage(cause):
                    raise Unwritable(exc.message, path=exc.path, errno=exc.errno) from cause
                raise
        return found

    def _drop_batch(self, batch: list[tuple[Path, bytes, Recalled]], gone: set[str]) -> int:
        """Drop the disk copies of ``batch`` (the DB now holds them, or the finding is retired:
        ``gone``), one fsync per folder."""
        by_folder: dict[Path, list[tuple[str, bytes, bool]]] = {}
        for path, data, entry in batch:
            by_folder.setdefault(path.parent, []).append((path.name, data, entry.key in gone))
        dropped = 0
        for directory, names in by_folder.items():
            try:
                folder = Folder.open(self._base, directory)
                if folder is None:
                    continue
                with folder:
                    hidden: list[str] = []
                    try:
                        done = sum(_drop(folder, n, data, retired, hidden) for n, data, retired in names)
                    finally:
                        if hidden:
                            # a batch of its own: the folder is one a store keeps writing and
                            # listing, each hidden name a name more in every listing until unlinked
                            REAPER.put(os.dup(folder.fd), hidden, now=True)
                    if done:
                        folder.fsync()
            except OSError as exc:
                where = OSError(exc.errno, exc.strerror, str(directory))
                raise _unwritable(where, "drop synced files in") from exc
            dropped += done
        return dropped

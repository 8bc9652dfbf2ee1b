"""Bringing the store level with the journal and the history DB: ``latest_commits``, ``materialize``
and ``sync`` (the DB's only writer)."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from journal import JournalBackend, Record
from memory._db import HistoryDB
from memory._files import learned_names, parse_learned, read_retired
from memory._finding import RETIRE_STREAM, STREAM, commit_to_publish, render, retirement_to_publish
from memory._paths import retired_dirs, scope_dirs
from memory._publisher import SYNC_BATCH, Publisher
from memory._results import Recalled, SyncReport
from memory._retire import Retirer
from staging import STAGE_PREFIX, failpoint, fsync_dir


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
) -> JournalScan:
    """Read every run's ``memory-learn`` (with ``learns``) and ``memory-forget`` (with
    ``retirements``) streams; ``progress(done, runs)`` is called after each run is read."""
    scan = JournalScan()
    runs = backend.runs()
    for n, run in enumerate(runs, 1):
        if learns:
            for rec in backend.read(run.run_id, STREAM):
                fid = rec.payload.get("id")
                if isinstance(fid, str):
                    scan.latest[fid] = commit_to_publish(scan.latest.get(fid), rec)
        if retirements:
            for rec in backend.read(run.run_id, RETIRE_STREAM):
                key = rec.payload.get("id")
                if isinstance(key, str):
                    scan.retired[key] = retirement_to_publish(scan.retired.get(key), rec)
        if progress:
            progress(n, len(runs))
    return scan


def latest_commits(
    backend: JournalBackend, progress: Callable[[int, int], None] | None = None
) -> dict[str, Record]:
    """For each finding id in ``backend``, the commit to publish (``commit_to_publish``) across
    runs; ``progress(done, runs)`` is called after each run is read."""
    return scan_journal(backend, progress, retirements=False).latest


def _drop(path: Path, ingested: bytes, retired: bool = False) -> bool:
    """Remove ``path`` if it still holds ``ingested``; a newer file published meanwhile stays,
    unless the finding is ``retired`` (then no file of it has a place)."""
    claim = path.parent / f"{STAGE_PREFIX}sync-{secrets.token_hex(6)}.{path.name}"
    try:
        os.rename(path, claim)
    except FileNotFoundError:
        return False
    if claim.read_bytes() != ingested and not retired:  # a learn replaced it after we read it: put it back
        with contextlib.suppress(FileExistsError):
            os.link(claim, path)
        os.unlink(claim)
        return False
    os.unlink(claim)
    return True


class Syncer:
    """Materializes files from the journal ``open_journal`` returns and syncs them into ``db``."""

    def __init__(
        self,
        db: HistoryDB,
        publisher: Publisher,
        open_journal: Callable[[], JournalBackend],
        clock: Callable[[], int],
        retirer: Retirer,
    ) -> None:
        self._db = db
        self._publisher = publisher
        self._open_journal = open_journal
        self._clock = clock
        self._retirer = retirer

    def materialize(self, progress: Callable[[int, int], None] | None = None) -> int:
        """See ``MemoryStore.materialize``."""
        scan = scan_journal(self._open_journal(), progress)
        # Retired files first: a finding the journal says is forgotten never gets a file here.
        made = self._retirer.publish_missing(scan.retired.values())
        latest = scan.latest
        held = self._db.held(latest)
        wanted: list[tuple[Path, bytes]] = []
        for fid, rec in latest.items():
            if fid in held or fid in scan.retired:
                continue
            final = self._publisher.scope_dir(rec.payload["scope"]) / f"{fid}.json"
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
        self._publisher.publish_batches(wanted)
        return made + len(wanted)

    def sync(self, *, materialize: bool, progress: Callable[[int, int], None] | None) -> SyncReport:
        """See ``MemoryStore.sync``."""
        made = self.materialize() if materialize else 0
        # Retirements into the DB first, so the rows of the findings they retire are marked as
        # they arrive. Retired files stay: they keep the finding out of reads and learns for good.
        retired = [
            read_retired(d / n) for d in retired_dirs(self._publisher.db_path) for n in learned_names(d)
        ]
        known = self._db.retired_keys()
        fresh = [r for r in retired if r.key not in known]
        for i in range(0, len(fresh), SYNC_BATCH):
            self._db.retire(fresh[i : i + SYNC_BATCH], self._clock())
        gone = known | {r.key for r in retired}
        files: list[tuple[Path, bytes, Recalled]] = []
        for d in scope_dirs(self._publisher.db_path):
            for name in learned_names(d):
                path = d / name
                try:
                    data = path.read_bytes()
                except FileNotFoundError:
                    continue
                files.append((path, data, parse_learned(path, data)))
        ingested = dropped = 0
        for i in range(0, len(files), SYNC_BATCH):
            batch = files[i : i + SYNC_BATCH]
            self._db.upsert([e for _, _, e in batch], self._clock())
            ingested += len(batch)
            failpoint("memory.sync_after_upsert")
            dirs = set()
            for path, data, entry in batch:
                if _drop(path, data, retired=entry.key in gone):
                    dropped += 1
                    dirs.add(path.parent)
            for d in dirs:
                fsync_dir(d)
            if progress:
                progress(min(i + SYNC_BATCH, len(files)), len(files))
        return SyncReport(materialized=made, ingested=ingested, dropped=dropped)

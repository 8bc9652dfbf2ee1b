"""Retiring findings journal-first: ``forget``, the retiring half of a supersede, and ``history``.

A retirement is a record in the root run's ``memory-forget`` stream, keyed by the key of the finding
it retires, or, for the version an update supersedes, the update's own commit (``supersede_in``: one
record and one flush; a commit an earlier release wrote on PostgreSQL has a record of its own). Once
it is committed, a *retired file* rendered from it is published in the finding's scope
(``<scope-folder>/.trajectories/retired/<key>.json``)
and the finding's learned file is removed. The retired file stays for good: every read leaves out
the keys it names, ``learn`` refuses to bring the key back, and ``sync`` copies it into the history
DB, which then marks the finding's row.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from journal import JournalBackend, JournalCorrupt, Record, hosts_share
from memory._db import HistoryDB
from memory._errors import FindingUnknown, Unreachable
from memory._files import Retired, parse_retired, read_learned, read_retired
from memory._finding import (
    ERASE_STREAM,
    PAD,
    RETIRE_STREAM,
    STREAM,
    batch_key,
    check_key,
    check_reason,
    checked_commit,
    filter_erased,
    filter_holds_content,
    is_erased,
    render_retirement,
    retire_many_payload,
    retire_payload,
    retirement_to_publish,
    retirements_in,
    supersede_in,
)
from memory._paths import scope_folders
from memory._publisher import Publisher, holds
from memory._results import HISTORY_KINDS, Citation, Recalled, frozen_metadata
from memory._safe import named, regular_prefix
from staging import failpoint

if TYPE_CHECKING:
    from memory._outcomes import Forgotten, HistoryEvent
    from memory._root import Root

_KIND_ORDER = {kind: n for n, kind in enumerate(HISTORY_KINDS)}


@dataclass(frozen=True)
class Located:
    """Where a key was found: its finding's scope, and its retirement if it has one."""

    scope: str
    retired: Retired | None
    memory: str | None = None  # the memory id of the finding, when a learned file, row or record says


def forgotten_of(retired: Retired) -> Forgotten:
    """The ``Forgotten`` a retirement answers a ``forget`` with."""
    from memory._outcomes import Forgotten  # not at import: a recall makes none of them

    reason = retired.reason if retired.reason is not None else f"superseded by {retired.by}"
    return Forgotten(retired.key, reason, retired.citation, retired.forgotten_ms, by=retired.by)


def retired_of(record: Record) -> Retired:
    """A ``memory-forget`` record as a ``Retired``."""
    p = record.payload
    return Retired(
        key=p["id"],
        scope=p["scope"],
        flow=p["flow"],
        reason=p["reason"],
        by=p["by"],
        forgotten_ms=p["forgottenMs"],
        citation=Citation(record.run_id, record.stream, record.id),
    )


def retirement_event(r: Retired, memory: str | None = None) -> HistoryEvent:
    """A retirement as a ``HistoryEvent``: ``superseded`` when it names the key that replaced the
    finding, else ``forgotten``."""
    from memory._outcomes import HistoryEvent  # not at import: a recall makes none of them

    kind = "forgotten" if r.by is None else "superseded"
    return HistoryEvent(
        kind, r.key, r.forgotten_ms, r.citation, reason=r.reason, by=r.by, flow=r.flow, memory=memory or r.key
    )


def _lost_reason(beaten: Retired) -> str:
    """What a ``lost`` history event says: the version the update would replace was retired first,
    by which record, so the update's version was never published."""
    how = f"forgotten: {beaten.reason}" if beaten.by is None else f"superseded by {beaten.by}"
    c = beaten.citation
    return (
        f"this update lost its race and its version was never published: the version it replaces, "
        f"{beaten.key}, was retired first ({how}) by record {c.id} of root run {c.run_id}"
    )


def _learned_event(entry: Recalled) -> HistoryEvent:
    """The ``learned`` event of a finding the DB or a learned file holds (its journal gone)."""
    from memory._outcomes import HistoryEvent  # not at import: a recall makes none of them

    content: dict[str, Any] = {"text": entry.text, "source": entry.source, "tags": list(entry.tags)}
    if entry.metadata:
        content["metadata"] = dict(entry.metadata)
    if entry.expires_ms is not None:
        content["expiresMs"] = entry.expires_ms
    return HistoryEvent(
        "learned",
        entry.key,
        entry.learned_ms,
        entry.citation,
        flow=entry.flow,
        content=frozen_metadata(content),
        memory=entry.memory_id,
    )


def unknown(key: str, what: str = "key") -> FindingUnknown:
    """The error for a well-formed key that no finding has."""
    return FindingUnknown(
        f"no finding has {what} {key}: neither the history DB, the learned files nor the journal know "
        "it; `flows recall --json` lists the keys",
        key=key,
    )


def _memory_of(payload: Mapping[str, Any]) -> str | None:
    """The memory id a ``memory-learn`` payload names: its ``memory``, else its own ``id``."""
    memory = payload.get("memory")
    fid = payload.get("id")
    return memory if isinstance(memory, str) else fid if isinstance(fid, str) else None


def _names_any(payload: Mapping[str, Any], keys: set[str]) -> bool:
    """Whether the ``memory-learn`` payload commits one of ``keys`` or supersedes one."""
    fid, old = payload.get("id"), payload.get("supersedes")
    return (isinstance(fid, str) and fid in keys) or (isinstance(old, str) and old in keys)


def _erased_events(erasures: Iterable[Record], memory: str) -> list[HistoryEvent]:
    """The ``erased`` events of ``memory``: when, by whom and why; never what it said."""
    from memory._outcomes import HistoryEvent  # not at import: a recall makes none of them

    out = []
    for rec in erasures:
        p = rec.payload
        if isinstance(p, Mapping) and p.get("memory") == memory and isinstance(p.get("erasedMs"), int):
            out.append(
                HistoryEvent(
                    "erased",
                    memory,
                    int(p["erasedMs"]),
                    Citation(rec.run_id, rec.stream, rec.id),
                    reason=p["reason"] if isinstance(p.get("reason"), str) else None,
                    flow=p["flow"] if isinstance(p.get("flow"), str) else None,
                    memory=memory,
                )
            )
    return out


def _torn(path: str, record: Record) -> bool:
    """Whether ``path`` is a regular file that holds neither the rendering of the retirement
    ``record`` nor a retirement another record made (the first retirement stands): a torn or
    damaged copy, which the record restores. A link, a FIFO, a folder or a file that cannot be read
    is left for ``flows check``."""
    data = render_retirement(record)
    held = regular_prefix(Path(path), max(len(data) + 1, 1 << 20))
    if held is None or held == data:
        return False
    try:
        there = parse_retired(Path(path), held)
    except Unreachable:
        return True
    return (there.citation.run_id, there.citation.id) == (record.run_id, record.id)


def _checked_or_none(record: Record, location: str) -> Record | None:
    """``record`` (a ``memory-learn`` record) as ``checked_commit`` gives it (an erased one as it
    is), or None when it is not of a commit's shape (``flows check`` reports it)."""
    try:
        return record if is_erased(record) else checked_commit(record, location)
    except JournalCorrupt:
        return None


def _retirements(backend: JournalBackend, run_id: str, checked: Iterable[Record | None]) -> list[Record]:
    """Every retirement the run's records make, one per key, its updates' commits' included
    (``checked``: the run's ``memory-learn`` records, each checked once, ``_checked_or_none``). A
    damaged record is left for ``flows check`` to report: a history shows the rest."""
    out = [view for view in map(supersede_in, filter(None, checked)) if view is not None]
    for record in backend.read(run_id, RETIRE_STREAM):
        try:
            out += retirements_in(record, backend.location)
        except JournalCorrupt:
            continue
    return out


def lists_heads(backend: JournalBackend) -> bool:
    """Whether ``backend`` can list each stream's newest record per run (``stream_heads``): a
    journal hosts share, whose stores learn of each other's retirements from its ``memory-forget``
    and ``memory-learn`` heads (``SharedRetirements``)."""
    return all(getattr(backend, name, None) is not None for name in ("stream_heads", "read_after"))


def _nothing(keys: list[str]) -> None:
    return None


_NONE: Mapping[str, Retired] = {}

# The key a commit that retires the version it supersedes has in its payload, as a JSON token: what
# a journal that can filter on the server looks for (``_read_moved``; it also sends any payload with
# a ``\u`` escape, which may spell the key otherwise).
_SUPERSEDES = '"supersedesScope"'


def _read_moved(
    backend: JournalBackend, stream: str, moved: Mapping[str, int], marker: str | None
) -> Iterable[Sequence[Record]]:
    """The records of ``stream`` after each run's number in ``moved``, run by run: in one query of
    the records holding ``marker`` where the journal can (``read_streams_after``: a fresh process's
    first look at a journal of many runs and commits is one query, and the commits that retire
    nothing are not sent), else one ``read_after`` per run."""
    if not moved:
        return ()
    several = getattr(backend, "read_streams_after", None)
    if several is not None:
        found: dict[str, list[Record]] = several(stream, moved, containing=marker)
        return found.values()
    read_after = backend.read_after  # type: ignore[attr-defined]
    return (read_after(run_id, stream, seen) for run_id, seen in moved.items())


class SharedRetirements:
    """The retirements every store sharing this journal has committed, learned of before each read
    and learn: on a journal that can list a stream's newest record per run (PostgreSQL's
    ``stream_heads``), one query per stream says which runs forgot or committed something since the
    last look, and only those records are read, of every such run in one query (the commits that
    retire nothing are not sent: ``_read_moved``), checked and expanded
    (``retirements_in``): the ``memory-forget`` records, and the ``memory-learn`` commits that
    retire the version they supersede (``supersede_in``). So a read on this host never returns a
    finding whose forget or supersede another host has committed, and a learn never brings one back
    under its old key; an update killed after its commit leaves no host with the old version live.
    A file journal belongs to one host: it has no such list, and its stores see each other's
    forgets on ``sync`` (which publishes every retirement's file)."""

    def __init__(self, open_journal: Callable[[], JournalBackend], location: str | None = None) -> None:
        self._open_journal = open_journal
        self._location = location  # where ``open_journal`` opens it, when known
        self._seen: dict[tuple[str, str], int] = {}  # (stream, run id) -> its last record read here
        self._by_key: dict[str, Retired] = {}
        self._lock = threading.Lock()
        self._listless = False
        self._mark: str | None = None  # where the next look at the heads that moved starts

    def current(self) -> Mapping[str, Retired]:
        """Every retirement in the journal by key (the earliest of a key); empty on a journal that
        cannot list them.

        Raises:
            JournalError: the journal cannot be read: a read fails closed rather than answer with a
                finding another host may have forgotten.
        """
        if self._listless:
            return _NONE
        if self._location is not None and not hosts_share(self._location):
            self._listless = True  # a file journal's location: known without opening it (see the class)
            return _NONE
        backend = self._open_journal()
        if not lists_heads(backend):
            self._listless = True  # a file journal: one host's, no list to ask (see the class)
            return _NONE
        with self._lock:
            changed = getattr(backend, "heads_changed", None)
            moved_heads: Mapping[str, Mapping[str, int]] | None = None
            mark = self._mark
            if changed is not None:  # only the heads that moved since the last look (one query)
                moved_heads, mark, whole = changed((RETIRE_STREAM, STREAM), self._mark)
                if whole:  # a first look, or the last one's mark did not hold (another journal,
                    self._seen.clear()  # a server restored or failed over): read every run again
            for stream, marker in ((RETIRE_STREAM, None), (STREAM, _SUPERSEDES)):
                heads: Mapping[str, int] = (
                    backend.stream_heads(stream)  # type: ignore[attr-defined]
                    if moved_heads is None
                    else moved_heads[stream]
                )
                moved = {
                    run_id: self._seen.get((stream, run_id), 0)
                    for run_id, head in heads.items()
                    if head > self._seen.get((stream, run_id), 0)
                }
                for records in _read_moved(backend, stream, moved, marker):
                    for record in records:
                        if stream == STREAM and "supersedesScope" not in record.payload:
                            continue  # a commit that retires nothing (see ``supersede_in``)
                        for view in retirements_in(record, backend.location):
                            self._keep(retired_of(view))
                for run_id in moved:
                    self._seen[(stream, run_id)] = heads[run_id]
            self._mark = mark  # only once every moved head is read: a failed look is taken again
            return self._by_key

    def _keep(self, found: Retired) -> None:
        """Keep ``found`` unless an earlier retirement of its key is kept (``retirement_to_publish``)."""
        kept = self._by_key.get(found.key)
        if kept is None or (found.forgotten_ms, found.citation.run_id) < (
            kept.forgotten_ms,
            kept.citation.run_id,
        ):
            self._by_key[found.key] = found


class Retirer:
    """Forgets and supersedes findings of the store whose files ``publisher`` places, and reads
    their history from the journal ``open_journal`` returns."""

    def __init__(
        self,
        db: HistoryDB,
        publisher: Publisher,
        open_journal: Callable[[], JournalBackend],
        clock: Callable[[], int],
        location: str | None = None,
    ) -> None:
        self._db = db
        self._publisher = publisher
        self._open_journal = open_journal
        self._clock = clock
        # (run id, lease epoch) -> that attempt's first fresh commit's time (None before one), and
        # the keys it forgot or superseded (committed or answered): what ``before_attempt`` asks
        self._attempts: dict[tuple[str, int], tuple[list[int | None], set[str]]] = {}
        self._attempts_lock = threading.Lock()
        # told the keys each settled retirement took out of reads (the store drops their vectors)
        self.on_retired: Callable[[list[str]], None] = _nothing
        # the other hosts' retirements; ``location`` (where ``open_journal`` opens the journal) tells a
        # file journal, which lists none, without opening it
        self.shared = SharedRetirements(open_journal, location)
        # told each retirement record this process appends (``Citations.committed``)
        self.on_committed: Callable[[Record], None] = lambda record: None
        # checks a retired file read back against the record it cites (``Citations.check_retired``)
        self.check_retired: Callable[[Retired, Path], None] = lambda retired, path: None

    # -- attempts of a root run ----------------------------------------------------------------

    def noted(self, root: Root, *, committed_ms: int | None = None, key: str | None = None) -> None:
        """Note what the current attempt of ``root`` (its run's lease epoch) did: a fresh commit
        stamped ``committed_ms`` (the first one is when the attempt is taken to have begun), a
        retirement of ``key`` it committed or was answered with. Nothing while ``root`` is not
        begun (such a root committed nothing)."""
        if not root.begun:
            return
        lease = root.lease
        with self._attempts_lock:
            found = self._attempts.get((lease.run_id, lease.epoch))
            if found is None:
                found = self._attempts[(lease.run_id, lease.epoch)] = ([None], set())
            if committed_ms is not None and found[0][0] is None:
                found[0][0] = committed_ms
            if key is not None:
                found[1].add(key)

    def before_attempt(self, root: Root, retired: Retired) -> bool:
        """Whether ``retired`` was made before the current attempt of ``root`` began and not by it
        (a learn of that key by this attempt then replays an earlier attempt's commit): true when
        the attempt has neither retired the key nor made a fresh commit before the retirement's time.
        """
        lease = root.lease
        with self._attempts_lock:
            found = self._attempts.get((lease.run_id, lease.epoch))
        if found is None:
            return True
        began, keys = found
        return retired.key not in keys and (began[0] is None or retired.forgotten_ms < began[0])

    # -- where a key is ------------------------------------------------------------------------

    def read_checked(self, path: str | Path) -> Retired:
        """The retired file at ``path``, checked against the record it cites: one that no record
        backs is never taken as a retirement (a forget answered with it, a supersede refused by it).

        Raises:
            Unreachable: the file cannot be read, is damaged, or no record backs it.
            JournalError: the journal could not be read.
        """
        found = read_retired(Path(path))
        self.check_retired(found, Path(path))
        return found

    def retired_path(self, scope: str, key: str) -> str:
        """The path of the retired file that would keep ``key`` of ``scope`` out of every read."""
        return os.path.join(self._publisher.retired_dir(scope), f"{key}.json")

    def locate(self, key: str, scope: str | None = None) -> Located | None:
        """The scope of the finding ``key`` and its retirement, looked for in the retired and
        learned files, then the DB, then the journal; None when nothing knows it. ``scope``, when
        the caller knows the likely one, is looked in first (two names), before every folder is.

        Raises:
            Unreachable: a file or the DB that holds the key cannot be read.
            JournalError: the journal cannot be read (only asked when the store does not know it).
        """
        elsewhere = self.shared.current().get(key)  # any store sharing the journal (this one too)
        if elsewhere is None and scope is not None:
            hinted = self._locate_in(key, scope)
            if hinted is not None:
                return hinted
        return (
            self._locate(key)
            if elsewhere is None
            else Located(elsewhere.scope, elsewhere, self._db.memory_of(key))
        )

    def retirement(self, key: str, scope: str) -> Retired | None:
        """``locate(key, scope).retired``, reading only the retired file when it is there (the
        finding's memory is not asked for).

        Raises:
            Unreachable, JournalError: as ``locate``.
        """
        published = self.published_retirement(key, scope)
        if published is not None:
            return published
        found = self.locate(key, scope)
        return None if found is None else found.retired

    def published_retirement(self, key: str, scope: str) -> Retired | None:
        """The retirement of ``key`` another host committed, or its retired file's in ``scope``
        (checked against its record); None when neither is there. What an update looks at again in
        its turn: a retirement made since the version was read is published there."""
        elsewhere = self.shared.current().get(key)
        if elsewhere is not None:
            return elsewhere
        path = self.retired_path(scope, key)
        return self.read_checked(path) if os.path.lexists(path) else None

    def held_memory(self, key: str, scope: str, *, db: bool = True, db_looked: bool = False) -> str | None:
        """The memory id of the finding ``key`` this host holds in ``scope``: its learned file's,
        else (with ``db``) its DB row's, live or not; None when it holds neither (one ``lstat``,
        and one indexed read with ``db``, when it holds none), or when its file does not read (the
        caller's own path judges that file). ``db_looked``: the caller has just looked for the DB
        (an update reading the version it replaces), so a DB not found then is not looked for
        again.

        Raises:
            Unreachable: the DB cannot be read.
        """
        # (``os.path.lexists`` without the exception a missing name raises: it mostly is missing)
        if named(f"{self._publisher.scope_dir(scope)}/{key}.json"):
            try:
                found = self._locate_in(key, scope)
            except Unreachable:
                found = None
            if found is not None and found.retired is None:
                return found.memory or key
        if not db or (db_looked and not self._db.seen):
            return None
        return self._db.memory_of(key)

    def _locate_in(self, key: str, scope: str) -> Located | None:
        """``_locate`` in the files of ``scope`` alone (a key hashes its scope, so a file of it
        there is the one); None when neither file is there."""
        pub = self._publisher
        return self._in_files(key, [pub.retired_dir(scope)], [pub.scope_dir(scope)])

    def _in_files(self, key: str, retired_dirs: list[Path], learned_dirs: list[Path]) -> Located | None:
        """Where ``key``'s retired file (first) or learned file is, among these folders, read.

        A file listed and gone when read was moved on by another process (a sync that put it in
        the DB, a retirement that replaced it): the folders are looked at again, in the same order,
        so what replaced it is found (a retired file here, else the DB's row, which a sync commits
        before it drops the file). A file that stays and does not read fails as it is."""
        for _ in range(8):
            found, vanished = self._in_files_once(key, retired_dirs, learned_dirs)
            if not vanished:
                return found
        return None  # moved on eight times in a row: the DB and the journal answer (``_locate``)

    def _in_files_once(
        self, key: str, retired_dirs: list[Path], learned_dirs: list[Path]
    ) -> tuple[Located | None, bool]:
        """``_in_files``'s one look: what it found, and whether a file vanished as it was read."""
        name = f"{key}.json"
        for directory in retired_dirs:
            path = directory / name
            if os.path.lexists(path):
                try:
                    found = self.read_checked(path)
                except Unreachable:
                    if os.path.lexists(path):
                        raise
                    return None, True
                return Located(found.scope, found, self._db.memory_of(key)), False
        for directory in learned_dirs:
            path = directory / name
            if os.path.lexists(path):
                try:
                    entry = read_learned(path)
                except Unreachable:
                    if os.path.lexists(path):
                        raise
                    return None, True
                return Located(entry.scope, None, entry.memory_id), False
        return None, False

    def _locate(self, key: str) -> Located | None:
        folders = scope_folders(self._publisher.db_path)
        in_files = self._in_files(
            key,
            [f / ".trajectories" / "retired" for f in folders],
            [f / ".trajectories" / "compacted" for f in folders],
        )
        if in_files is not None:
            return in_files
        retired = self._db.retirement(key)
        if retired is not None:
            return Located(retired.scope, retired, self._db.memory_of(key))
        scope = self._db.scope_of(key)
        if scope is not None:
            return Located(scope, None, self._db.memory_of(key))
        backend = self._open_journal()
        for run in backend.runs():
            for rec in backend.read(run.run_id, STREAM):
                if rec.payload.get("id") == key and isinstance(rec.payload.get("scope"), str):
                    memory = rec.payload.get("memory")
                    return Located(rec.payload["scope"], None, memory if isinstance(memory, str) else key)
        return None

    # -- retiring ------------------------------------------------------------------------------

    def forget(self, key: str, root: Root, reason: str) -> Forgotten:
        """See ``MemoryStore.forget``."""
        check_key(key)
        check_reason(reason)
        found = self.locate(key)
        if found is None:
            raise unknown(key)
        if found.retired is None or found.retired.by is not None:
            # Looked at again in the scope's turn, which an update holds from its look at the
            # version it replaces until the new version is in place: a forget that finds the
            # version superseded answers with a replacement every read finds (between the
            # update's retirement of the old version and its rename of the new one, neither is
            # live: a delete that read then would miss the new version). On a journal hosts
            # share, the turn is theirs too: no update on another host retires the version
            # between the look and this record (both would then stand in the journal, and which
            # came first would be for the clocks to say).
            with self._publisher.update_turn(found.scope, root.run_id):
                found = self.locate(key, found.scope) or found
                return self._forget_found(key, root, reason, found)
        return self._forget_found(key, root, reason, found)

    def _forget_found(self, key: str, root: Root, reason: str, found: Located) -> Forgotten:
        if found.retired is not None:  # forgotten (or superseded) already: the first one stands
            self.noted(root, key=key)
            return forgotten_of(found.retired)
        record = self.retire(root, key, found.scope, reason=reason, by=None)
        if self._retired_by_another(record):  # another retired it as this forget ran: that one stands
            standing = self.retirement(key, found.scope)
            if standing is not None:
                return forgotten_of(standing)
        return forgotten_of(retired_of(record))

    def retire(
        self, root: Root, key: str, scope: str, *, reason: str | None, by: str | None, lazy: bool = False
    ) -> Record:
        """Commit the retirement of ``key`` (of ``scope``) to the root run, then publish its
        retired file and remove the finding's learned file; returns the commit.

        ``lazy`` (a supersede): the retired file's name, and its bytes where the journal shares its
        file system, are made durable later with the learned files' names (``flush_names``: a
        group of them, a run's end, a session's flush), not before this returns. The record is
        durable first either way; a power loss that takes the file is undone by the store's next
        open, which publishes the retirements of every run that did not end cleanly.

        Raises:
            JournalError: the append failed, unchanged; nothing is published.
            Unwritable: the retired file could not be published (the commit stands; ``sync``,
                ``flows check --repair`` or a resume publish it).
        """
        payload = retire_payload(key, scope, root.flow, reason=reason, by=by, forgotten_ms=self._clock())
        record = root.journal.append(root.lease, RETIRE_STREAM, payload, key=key)
        self.on_committed(record)
        self.noted(root, committed_ms=payload["forgottenMs"], key=key)
        failpoint("memory.after_append")
        if by is not None and self._retired_by_another(record):
            return record  # retired by another first: that retirement stands (the caller sees it)
        if lazy:
            self._settle_lazily(record, root)
        else:
            self.settle(record)
        return record

    def settle_supersede(
        self, view: Record, root: Root, *, keep_file: bool = False, mode: int | None = None
    ) -> bytes | None:
        """Publish (lazily, as ``retire`` with ``lazy``) the retired file of ``view``, the
        retirement an update's commit makes of the version it supersedes (``supersede_in``), and
        remove that version's learned file (``keep_file``: the caller removes it, once the new
        version is in place); unless a retired file of another retirement of it is there already:
        that one stands (the caller sees it). ``mode``: the file's mode, as the update took it for
        its new version's file (``Publisher.file_mode``). The bytes published, or None."""
        self.noted(root, key=view.payload["id"])
        # which looks for another's under the folder's lock
        return self._settle_lazily(view, root, keep_file=keep_file, mode=mode)

    def lost(self, record: Record, chosen: Mapping[str, Record] | None = None) -> bool:
        """Whether ``record`` (a checked ``memory-learn`` commit) is an update that lost its race:
        the version it supersedes was retired first by another (a forget, an erase, another update),
        as that version's standing retired file says, or, with none published, the retirement
        ``chosen`` for it (``retirement_to_publish``). The update that wrote it forgets it on seeing
        that (``Learner._refuse_if_retired``); when a crash kept it from looking, the new version
        must not come back either, so no path publishes it, and ``history`` lists it as ``lost``.
        A damaged retired file tells nothing: False (every read of its scope fails closed on it
        until ``flows check --repair``)."""
        return self.lost_to(record, chosen) is not None

    def lost_to(self, record: Record, chosen: Mapping[str, Record] | None = None) -> Retired | None:
        """The retirement of the version ``record`` supersedes that was made first by another, when
        ``record`` is an update that lost its race (see ``lost``); None when it did not lose."""
        p = record.payload
        old = p.get("supersedes")
        if not isinstance(old, str):
            return None
        try:
            standing = self.published_retirement(old, p.get("supersedesScope", p["scope"]))
        except Unreachable:
            return None  # damaged: reads fail closed on it, and check reports and mends it
        if standing is not None:
            return standing if standing.by != p["id"] else None
        first = None if chosen is None else chosen.get(old)
        return retired_of(first) if first is not None and first.payload.get("by") != p["id"] else None

    def still_ours(self, key: str) -> bool:
        """Whether the retirement of ``key`` that ``settle_supersede`` has just published (its
        retired file, renamed in under the retired folder's lock after it found none there) stands:
        no other host retired it. Its file is not read back: a retired file is final (nothing
        renames over one, every retirement looks under that lock first), so it still holds what was
        published."""
        return key not in self.shared.current()

    def _retired_by_another(self, record: Record, path: str | Path | None = None) -> bool:
        """Whether the retired file of the key ``record`` retires (at ``path``, when the caller has
        its path) is there and cites another retirement (the first one published stands)."""
        if path is None:
            path = self.retired_path(record.payload["scope"], record.payload["id"])
        if not os.path.lexists(path):
            return False
        there = self.read_checked(path)
        return (there.citation.run_id, there.citation.id) != (record.run_id, record.id)

    def _settle_lazily(
        self, record: Record, root: Root, *, keep_file: bool = False, mode: int | None = None
    ) -> bytes | None:
        """``settle``, with the retired file's name (and, on the journal's file system, its bytes)
        left for ``flush_names`` (see ``retire``); the retired file's bytes, or None when another
        retirement's file was there first (it stands; nothing is published). ``keep_file``: the
        retired version's learned file stays (see ``settle_supersede``); ``mode``: the file's mode
        (``Publisher.stage``)."""
        scope, key = record.payload["scope"], record.payload["id"]
        pub = self._publisher
        directory = pub.retired_dir(scope)
        loose = pub.shares_filesystem(root.journal, directory)
        data = render_retirement(record)
        staged = pub.stage(directory, data, record.run_id, sync=not loose, mode=mode)
        final = directory / f"{key}.json"
        if not self._publish_first(staged, record, final, lazy=True):
            return None
        pub.renamed_lazily(final, record.run_id, loose=loose, folder=directory)
        if not keep_file:
            pub.remove_in(pub.scope_dir(scope), final.name, record.run_id)
        self.on_retired([key])
        return data

    def _publish_first(self, staged: Any, record: Record, final: Path, *, lazy: bool = False) -> bool:
        """Rename ``staged`` (the retired file of ``record``) to ``final`` unless a retired file of
        another retirement of the key is there: the first one published stands. The look and the
        rename are one step under the retired folder's lock, so of two processes retiring one key at
        once (two updates of a memory, an update and a forget or an erase) exactly one publishes,
        and the other sees that one (False: ``staged`` is discarded)."""
        pub = self._publisher
        with pub.folder_lock(final.parent, record.run_id, staged.at):
            if self._retired_by_another(record, final):
                staged.discard()
                return False
            pub.publish(staged, final, record.run_id, sync=not lazy)
        return True

    def forget_many(
        self, root: Root, ids: list[tuple[str, str]], *, reason: str, filter: Mapping[str, Any]
    ) -> Record:
        """Commit one record that retires every (key, scope) of ``ids``, then publish each key's
        retired file (unless one is there: the first retirement of a key stands) and remove its
        learned file; returns the record.

        Raises:
            JournalError: the append failed, unchanged; nothing is published.
            Unwritable: a retired file could not be published (the commit stands; ``sync``,
                ``flows check --repair`` or a resume publish the rest).
        """
        forgotten_ms = self._clock()
        payload = retire_many_payload(ids, root.flow, reason=reason, filter=filter, forgotten_ms=forgotten_ms)
        record = root.journal.append(root.lease, RETIRE_STREAM, payload, key=batch_key(ids))
        self.on_committed(record)
        views = retirements_in(record, root.journal.location)
        for view in views:
            self.noted(root, committed_ms=forgotten_ms, key=view.payload["id"])
        failpoint("memory.after_append")
        self._drop_erased_values(root, record)
        pub = self._publisher
        missing: list[Record] = []
        by_folder: dict[Path, list[Record]] = {}
        for v in views:
            by_folder.setdefault(pub.retired_dir(v.payload["scope"]), []).append(v)
        for directory, group in by_folder.items():
            # the retired files in batches (one data sync, the renames, one fsync per folder),
            # durable before the learned files go; the look for a retirement published first and
            # the renames under the folder's lock, as every retirement's (``_publish_first``)
            pub.ensure_folder(directory, record.run_id)
            with pub.folder_lock(directory, record.run_id):
                mine = [v for v in group if not os.path.lexists(directory / f"{v.payload['id']}.json")]
                pub.publish_batches(
                    [(directory / f"{v.payload['id']}.json", render_retirement(v)) for v in mine]
                )
            missing += mine
        pub.remove_many(
            [pub.scope_dir(v.payload["scope"]) / f"{v.payload['id']}.json" for v in missing], record.run_id
        )
        self.on_retired([v.payload["id"] for v in views])
        return record

    def _drop_erased_values(self, root: Root, record: Record) -> None:
        """Rewrite ``record``, this root run's forget by filter just committed, without its filter's
        tags, metadata and source (``filter_erased``) when an erase names one of the keys it retires:
        it listed them before that erase's forget, and the erase, which rewrites every such record
        it finds after its own, may have returned before this one was committed. (On a journal
        hosts share, a forget by filter and an erase of one scope take turns: the erase finds it.)
        A kill before the rewrite leaves it to ``flows check`` (``erase_incomplete``)."""
        if lists_heads(root.journal) or not filter_holds_content(record):
            return
        from memory._erase import audits  # not at import: a forget by filter naming content only

        keys = {pair[0] for pair in record.payload["ids"]}
        if any(keys & set(rec.payload["keys"]) for rec in audits(root.journal)):
            erased = {record.seq: filter_erased(record.payload)}
            root.journal.rewrite_payloads(record.run_id, record.stream, erased, pad=PAD, lease=root.lease)

    def settle(self, record: Record, *, notify: bool = True, replace: bool = False) -> None:
        """Publish the retired file of ``record`` and remove its finding's learned file, unless a
        retired file of another retirement of the key was published first (it stands); ``replace``:
        whatever is there (a repair's republish of a damaged or torn file).

        Raises:
            Unwritable: the retired file could not be published or the learned file removed.
        """
        scope, key = record.payload["scope"], record.payload["id"]
        pub = self._publisher
        directory = pub.retired_dir(scope)
        staged = pub.stage(directory, render_retirement(record), record.run_id)
        if replace:
            pub.publish(staged, directory / f"{key}.json", record.run_id)
        elif not self._publish_first(staged, record, directory / f"{key}.json"):
            return  # another retirement of the key was published first: it stands
        pub.remove(pub.scope_dir(scope) / f"{key}.json", record.run_id)
        if notify:
            self.on_retired([key])

    def publish_missing(self, records: Iterable[Record], *, notify: bool = True, torn: bool = False) -> int:
        """Settle each retirement in ``records`` whose retired file is missing (``torn``: or is a
        regular file its record's rendering a power loss tore, ``_torn``); returns how many.

        Any other retired file that is there but damaged is left for ``flows check`` (reads fail
        closed on it). ``torn`` is for the walks of runs that did not end cleanly (the store's open,
        a resume): an update names its retired file lazily, its bytes unsynced where the journal
        shares their file system, so a power loss can keep the name and tear the bytes.
        """
        done = 0
        for record in records:
            path = self.retired_path(record.payload["scope"], record.payload["id"])
            there = os.path.lexists(path)
            if not there or (torn and _torn(path, record)):
                self.settle(record, notify=notify, replace=there)  # a torn one is this record's own
                done += 1
        return done

    # -- history -------------------------------------------------------------------------------

    def history(
        self, key: str, runs: Iterable[str] | None = None, window: slice | None = None
    ) -> tuple[list[HistoryEvent], list[HistoryEvent]]:
        """See ``MemoryStore.history``: the events of every version of the memory ``key`` is (or is
        a version of), oldest first, those in ``window`` (default: all) with their content, and all
        of them without it: the content of an event outside the window is never copied out of its
        record."""
        check_key(key)
        backend = self._open_journal()
        run_ids = [r.run_id for r in backend.runs()] if runs is None else list(runs)
        commits = {
            run_id: [r for r in backend.read(run_id, STREAM) if isinstance(r.payload, Mapping)]
            for run_id in run_ids
        }
        memory = next(
            (_memory_of(r.payload) for rs in commits.values() for r in rs if r.payload.get("id") == key), None
        )
        if memory is None:
            memory = self._db.memory_of(key) or key
        versions = {key, memory} | {
            str(r.payload.get("id")) for rs in commits.values() for r in rs if _memory_of(r.payload) == memory
        }
        versions.update(self._db.versions(memory))
        learns: list[tuple[Record, Record | None]] = []  # each record, and it checked (once)
        retires: list[Record] = []
        erasures: list[Record] = []
        for run_id, records in commits.items():
            # only this memory's commits are checked (the costly part): a run of many findings
            # made a history of three events cost as much as checking all of them
            run_learns = [
                (r, _checked_or_none(r, backend.location)) for r in records if _names_any(r.payload, versions)
            ]
            learns += run_learns
            retires += _retirements(backend, run_id, (c for _, c in run_learns))
            erasures += backend.read(run_id, ERASE_STREAM)
        chosen: dict[str, Record] = {}  # key -> the retirement of it to publish (``lost``)
        for rec in retires:
            chosen[rec.payload["id"]] = retirement_to_publish(chosen.get(rec.payload["id"]), rec)
        events, lost, contents = self._commit_events(learns, versions, memory, chosen)
        for rec in retires:
            # the supersede a lost update committed never took effect: the first retirement stands
            if rec.payload.get("id") in versions and (rec.payload["id"], rec.payload["by"]) not in lost:
                events.append(retirement_event(retired_of(rec), memory))
        erased = _erased_events(erasures, memory)
        if erased:
            # an erase record names the memory: no content of it is ever copied out, though an
            # erase refused part-way (a commit in a run still running) left some commits whole
            contents = {}
        events += erased
        if not events:
            for k in sorted(versions):
                events += self._history_from_store(k, memory)
        if not events:
            raise unknown(key)
        events.sort(key=lambda e: (e.at_ms, _KIND_ORDER[e.kind], e.citation.run_id))
        shown = events if window is None else events[window]
        return [
            replace(e, content=frozen_metadata(contents[e.citation]))
            if e.kind in ("learned", "lost") and e.citation in contents
            else e
            for e in shown
        ], events

    def _commit_events(
        self,
        learns: Iterable[tuple[Record, Record | None]],
        versions: set[str],
        memory: str,
        chosen: Mapping[str, Record],
    ) -> tuple[list[HistoryEvent], set[tuple[str, str]], dict[Citation, dict[str, Any]]]:
        """The events of the commits in ``learns`` (each record and it checked) of the keys
        ``versions``: ``learned`` for each, ``expired`` once the first commit's ``expiresMs`` has
        passed, and ``lost`` for the commit of an update that lost its race (``lost_to``, with
        ``chosen`` the retirement to publish of each key): its version never lived. Also each
        (version replaced, key) such an update names, and the content each ``learned`` or ``lost``
        event committed, by its citation (the events leave it out: it is copied for those shown)."""
        from memory._outcomes import HistoryEvent  # not at import: a recall makes none of them

        now = self._clock()
        events: list[HistoryEvent] = []
        contents: dict[Citation, dict[str, Any]] = {}
        expiring: dict[str, tuple[int, Citation, int]] = {}  # key -> expiresMs, the first commit, its time
        lost: set[tuple[str, str]] = set()
        for rec, checked in learns:
            # a record not of a commit's shape is left for ``flows check`` to report: nothing of
            # it is read here (its time, content or expiry could be anything)
            if checked is None:
                continue
            p = checked.payload
            fid = p.get("id")
            if fid not in versions or not isinstance(fid, str):
                continue
            citation = Citation(rec.run_id, rec.stream, rec.id)
            if isinstance(p.get("finding"), dict):
                contents[citation] = p["finding"]
            flow = p["flow"] if isinstance(p.get("flow"), str) else None
            ms = int(p["learnedMs"])
            beaten = self._lost_in(rec, checked, chosen)
            if beaten is not None:
                lost.add((beaten.key, fid))
                why = _lost_reason(beaten)
                events.append(HistoryEvent("lost", fid, ms, citation, why, flow=flow, memory=memory))
                continue
            events.append(HistoryEvent("learned", fid, ms, citation, flow=flow, memory=memory))
            expires = (p.get("finding") or {}).get("expiresMs")
            if isinstance(expires, int) and (fid not in expiring or ms < expiring[fid][2]):
                expiring[fid] = (expires, citation, ms)
        for fid, (expires, citation, _) in expiring.items():
            if expires <= now:
                events.append(HistoryEvent("expired", fid, expires, citation, memory=memory))
        return events, lost, contents

    def _lost_in(
        self, record: Record, checked: Record | None, chosen: Mapping[str, Record]
    ) -> Retired | None:
        """``lost_to(record, chosen)`` for a commit a history reads (``checked``: it checked, None
        when it is not of a commit's shape): the retirement that beat it when it is an update that
        lost its race; None for any other commit, or one that is not of a commit's shape (``flows
        check`` reports it)."""
        if "supersedes" not in record.payload or checked is None:
            return None
        if not isinstance(checked.payload.get("scope"), str):
            return None
        if self._own_retirement_stands(checked):
            return None
        return self.lost_to(checked, chosen)

    def _own_retirement_stands(self, commit: Record) -> bool:
        """Whether the retired file of the version the update ``commit`` supersedes holds exactly
        the retirement the commit itself makes (``supersede_in``), and no other host retired that
        version: then ``lost_to`` would find it did not lose, whatever the file's check says. One
        read and a comparison of bytes, where ``lost_to`` parses the file and checks it against its
        record: a memory of many versions reads one such file per update."""
        view = supersede_in(commit)
        if view is None or view.payload["id"] in self.shared.current():
            return False
        return holds(self.retired_path(view.payload["scope"], view.payload["id"]), render_retirement(view))

    def _history_from_store(self, key: str, memory: str | None = None) -> list[HistoryEvent]:
        """What the DB or a learned file knows of ``key`` when the journal holds none of it."""
        events: list[HistoryEvent] = []
        for row in self._db.rows_of([key]):
            events.append(_learned_event(row))
        if not events:
            for folder in scope_folders(self._publisher.db_path):
                path = folder / ".trajectories" / "compacted" / f"{key}.json"
                if os.path.lexists(path):
                    events.append(_learned_event(read_learned(path)))
        retired = self._db.retirement(key)
        if retired is not None:
            events.append(retirement_event(retired, memory))
        return events

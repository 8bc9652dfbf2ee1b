"""Checking a learned file, or a retired file, against the journal record it cites.

A learned file is only a finding if the journal holds the record it cites and the file is that
record's rendering: a well-formed file citing nothing (forged, or its run deleted) is damage, never
served and never synced. Reads check each unsynced entry they are about to return (``check``: the
entry's fields against the record's); ``sync`` checks every file it ingests, byte for byte
(``verify``): against the rendering of the record it cites, or, for a file this process published
from a commit it made (``memory._files.published_own``), against that commit's rendering, when the
journal's record is that commit (its shape was made by the learn, from a finding it validated).
The records of each run are read once and kept; a citation not found among them makes the run be
read again (the journal's reads are incremental), so a file published after the last read is still
found; a commit this process appended is known as it returns (``committed``). A record is never
expected to leave an append-only journal: one found once is trusted for the life of the store
object.

A fresh process need not read a whole run to check one citation. The journal gives, for each
record of a stream it read, a hint for finding that record again (``JournalBackend.hints``: on the
file backend, the offset its line begins at); those are kept per run in ``flows-cache/``, each
entry tagged with the files' index's key (``FileCache.journal_hint``, which finds and checks only
the entry it is asked for). A citation with a hint is checked with ``JournalBackend.lookup``,
which reads that one line and takes it only when it is the cited record, acknowledged and intact,
and otherwise reads the stream as before: a wrong, stale or forged hint costs time, never a file
served whose record is not in the journal. The hints are written after a
full read of a run found a citation the hints did not know.

A retired file keeps a finding out of every read, so it is checked the same way before it is
taken as a retirement (``check_retired``): by ``sync`` before it marks a row, by a read at the
moment it would leave a finding out, by a write before it answers with it. The ``memory-forget``
records of each run are kept like the commits, and a process's own are known as it appends them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from journal import JournalBackend, JournalNameInvalid, JournalRunNotFound, Record
from memory._errors import Unreachable
from memory._filecache import FileCache
from memory._files import Retired, own_commit
from memory._finding import RETIRE_STREAM, STREAM, checked_commit, is_erased, render, retirements_in
from memory._results import Citation, Recalled

_MAX_RUNS = 10_000  # runs whose records are kept; past it the cache starts again
_MAX_CHECKED = 200_000  # entries remembered as checked


class Citations:
    """The ``memory-learn`` records of the journal ``open_journal`` returns, by run, as files cite them."""

    def __init__(self, open_journal: Callable[[], JournalBackend]) -> None:
        self._open_journal = open_journal
        self._hint_store: FileCache | None = None
        self._hints: dict[str, dict[str, int]] = {}  # run id -> its records' hints, as saved here
        # (run id, stream) -> (records read, by id): ``memory-learn`` commits, ``memory-forget`` retirements
        self._runs: dict[tuple[str, str], tuple[int, dict[str, Record]]] = {}
        # the retirements of each retirement record read, by key (``_retirements_of``), by its id()
        self._views: dict[int, tuple[Record, dict[Any, Mapping[str, Any]]]] = {}
        self._checked: dict[Citation, Recalled] = {}  # entries ``check`` passed, by citation
        self._retirements: set[Retired] = set()  # retired files ``check_retired`` passed
        self._mutex = threading.Lock()

    def cited(self, entry: Recalled) -> Record | None:
        """The record ``entry`` cites, or None when the journal does not hold it.

        Raises:
            JournalError: the run's stream could not be read (its own error, unchanged).
        """
        return self._lookup(entry.citation.run_id, STREAM, entry.citation.id)

    def _lookup(self, run_id: str, stream: str, rid: str) -> Record | None:
        """Record ``rid`` of the run's ``stream`` (``memory-learn``: through a kept hint first), or
        None when the journal does not hold it; the stream's records are read once and kept, and
        read again when one asked for is not among them."""
        with self._mutex:
            known = self._runs.get((run_id, stream))
        if known is not None and rid in known[1]:
            return known[1][rid]
        backend = self._open_journal()
        hint = self._hint(backend, run_id, rid) if stream == STREAM else None
        if hint is not None:
            try:
                found = backend.lookup(run_id, STREAM, rid, hint=hint)
            except (JournalRunNotFound, JournalNameInvalid):
                found = None
            if found is not None:
                return found
        try:
            records = backend.read(run_id, stream)
        except (JournalRunNotFound, JournalNameInvalid):
            records = ()
        with self._mutex:
            known = self._runs.get((run_id, stream))
            if known is None or known[0] != len(records):
                if len(self._runs) >= _MAX_RUNS:
                    self._runs.clear()
                known = self._runs[(run_id, stream)] = (len(records), {r.id: r for r in records})
        record = known[1].get(rid)
        if record is not None and stream == STREAM and self._hint_store is not None and hint is None:
            self._save_hints(backend, run_id)
        return record

    def committed(self, record: Record) -> None:
        """Know ``record``, a ``memory-learn`` commit or ``memory-forget`` retirement this process's
        journal append just returned, as read: the next check of the file that cites it reads no
        stream and writes no hints."""
        with self._mutex:
            known = self._runs.get((record.run_id, record.stream))
            if known is None:
                if len(self._runs) >= _MAX_RUNS:
                    self._runs.clear()
                known = self._runs[(record.run_id, record.stream)] = (0, {})
            known[1][record.id] = record

    def use_hints(self, store: FileCache | None) -> None:
        """Keep the journal's hints in ``store`` (None: keep none, read every run whole)."""
        self._hint_store = store

    def _hint(self, backend: JournalBackend, run_id: str, rid: str) -> int | None:
        """The kept hint for record ``rid`` of the run: from the hints this object saved, else
        the one entry of the run's hints file (``FileCache.journal_hint``); None when there is none."""
        if self._hint_store is None:
            return None
        with self._mutex:
            saved = self._hints.get(run_id)
        if saved is not None:
            return saved.get(rid)
        return self._hint_store.journal_hint(backend.location, run_id, STREAM, rid)

    def _save_hints(self, backend: JournalBackend, run_id: str) -> None:
        """Keep the hints of every record of the run as just read (best effort)."""
        assert self._hint_store is not None
        try:
            hints = backend.hints(run_id, STREAM)
        except (JournalRunNotFound, JournalNameInvalid):
            return
        if hints:
            self._hint_store.save_journal_hints(backend.location, run_id, STREAM, hints)
        with self._mutex:
            if len(self._hints) >= _MAX_RUNS:
                self._hints.clear()
            self._hints[run_id] = hints

    def check(self, entry: Recalled, path_of: Callable[[Recalled], Path]) -> None:
        """Check that ``entry`` (read from the learned file ``path_of(entry)``) is what its cited
        record says: the same finding, scope, flow and commit time.

        Raises:
            Unreachable: the journal does not hold the record, or it says something else.
            JournalError: the run's stream could not be read, unchanged.
        """
        if self._checked.get(entry.citation) is entry:
            return
        record = self.cited(entry)
        if record is None:
            raise self._unjournaled(path_of(entry), entry)
        p = record.payload
        finding = p.get("finding")
        if not (
            record.stream == STREAM
            and p.get("id") == entry.key
            and p.get("scope") == entry.scope
            and p.get("flow") == entry.flow
            and p.get("learnedMs") == entry.learned_ms
            and isinstance(finding, dict)
            and finding.get("text") == entry.text
            and finding.get("source") == entry.source
            and finding.get("tags") == list(entry.tags)
        ):
            raise self._mismatch(path_of(entry), entry)
        with self._mutex:
            if len(self._checked) >= _MAX_CHECKED:
                self._checked.clear()
            self._checked[entry.citation] = entry

    def verify(
        self, files: Iterable[tuple[Path, bytes, Recalled]], erased: list[Path] | None = None
    ) -> None:
        """Check that each ``(path, bytes, entry)`` read from disk is its cited record's rendering.
        ``erased``, when given, is told each file whose cited commit is an erasure's tombstone (a
        copy an erase on another host, or a crash, left here) rather than failing for it.

        Raises:
            Unreachable: a file cites a record the journal does not hold, or differs from its
                rendering; the message names the file and the journal, and what repair will do.
            JournalCorrupt: the cited record is not a finding's commit (``checked_commit``).
            JournalError: a run's stream could not be read, unchanged.
        """
        for path, data, entry in files:
            record = self.cited(entry)
            if record is None:
                raise self._unjournaled(path, entry)
            # bytes this process rendered from that very commit, made from a finding it validated
            if own_commit(path, data) == record:
                continue
            if is_erased(record) and erased is not None:
                erased.append(path)
                continue
            if is_erased(record):
                raise self.tombstoned(path, entry, named=None)
            # the record is untrusted too: one of the wrong shape is journal_corrupt, never rendered
            if is_erased(record) or render(checked_commit(record, self._open_journal().location)) != data:
                raise self._mismatch(path, entry)

    def check_retired(self, retired: Retired, path: Path) -> None:
        """Check that the retired file ``retired`` (read from ``path``) is what the record it cites
        says: a retirement of that finding (a forget, a forget by filter naming it, or the update
        that superseded it) with the same scope, flow, reason, successor and time. A retired file
        keeps a finding out of every read for good, so one that no record backs (forged, or copied
        from another finding's) must never hide a finding the journal holds as live.

        Raises:
            Unreachable: the journal does not hold the record, or it retires something else.
            JournalCorrupt: the cited record is of no retirement's shape.
            JournalError: the run's stream could not be read, unchanged.
        """
        if retired in self._retirements:
            return
        c = retired.citation
        backend = self._open_journal()
        record = self._lookup(c.run_id, c.stream, c.id) if c.stream in (STREAM, RETIRE_STREAM) else None
        view = None if record is None else self._retirements_of(record, backend.location).get(retired.key)
        if view is None or (
            view.get("scope"),
            view.get("flow"),
            view.get("reason"),
            view.get("by"),
            view.get("forgottenMs"),
        ) != (retired.scope, retired.flow, retired.reason, retired.by, retired.forgotten_ms):
            what = (
                f"which the journal {backend.location} does not hold"
                if record is None
                else f"which in the journal {backend.location} does not retire finding {retired.key} as "
                "the file says"
            )
            raise Unreachable(
                f"retired file {path} cites record {c.id} of root run {c.run_id} ({c.stream}), {what}, "
                "so it retires nothing: `flows check --repair` moves it to flows-quarantine/ beside the "
                "store",
                path=path,
                run_id=c.run_id,
            )
        with self._mutex:
            if len(self._retirements) >= _MAX_CHECKED:
                self._retirements.clear()
            self._retirements.add(retired)

    def _retirements_of(self, record: Record, location: str) -> dict[Any, Mapping[str, Any]]:
        """The retirements ``record`` makes (``retirements_in``), by the key each retires: made once
        per record read (the stream's records are kept, ``_lookup``). A forget by filter of N
        findings is one record of N retirements, and the first read after it checks the retired
        file of each: made anew for each, they cost N² (1,000 forgotten findings: 3 s; 4,000: 53 s)."""
        with self._mutex:
            kept = self._views.get(id(record))
        if kept is not None and kept[0] is record:
            return kept[1]
        views = {view.payload.get("id"): view.payload for view in retirements_in(record, location)}
        with self._mutex:
            if len(self._views) >= _MAX_RUNS:
                self._views.clear()
            self._views[id(record)] = (record, views)
        return views

    def successor_commit(self, retired: Retired) -> Record | None:
        """The ``memory-learn`` commit of the version that superseded ``retired`` (a retired file
        ``check_retired`` passed: its citation is that commit), or None for a forget, or when the
        journal does not hold it as such.

        Raises:
            JournalError: the run's stream could not be read (its own error, unchanged).
        """
        c = retired.citation
        if retired.by is None or c.stream != STREAM:
            return None
        record = self._lookup(c.run_id, c.stream, c.id)
        return record if record is not None and record.payload.get("id") == retired.by else None

    @staticmethod
    def mismatch(path: Path, entry: Recalled) -> Unreachable:
        """The error of a learned file that is not its cited record's rendering."""
        return Citations._mismatch(path, entry)

    @staticmethod
    def tombstoned(path: Path, entry: Recalled, *, named: bool | None) -> Unreachable:
        """The error of a learned file whose cited commit is an erasure's tombstone: a copy an
        unfinished erasure left (``named``: an erase record names its key), or, when none does,
        a sign of a damaged journal (``named`` None: not looked up)."""
        c = entry.citation
        said = f"learned file {path} cites record {c.id} of root run {c.run_id}, which the journal holds as "
        if named is False:
            said += (
                "an erasure's tombstone that no erase record names, so it is not served: the journal is "
                "damaged (an erase record lost, or a commit rewritten by something that is no erase), "
                "and `flows check` reports it as tombstone_unbacked; restore the journal from a backup"
            )
        else:
            said += (
                "an erasure's tombstone, so it is not served: `flows check --repair` deletes it and "
                f"finishes the erasure when an erase record names finding {entry.key}, and when none "
                "does the journal is damaged (`flows check` reports tombstone_unbacked)"
            )
        return Unreachable(said, path=path, run_id=c.run_id)

    @staticmethod
    def _mismatch(path: Path, entry: Recalled) -> Unreachable:
        return Unreachable(
            f"learned file {path} is not the rendering of the record it cites (record "
            f"{entry.citation.id} of root run {entry.citation.run_id}), so it is not served: "
            "`flows check --repair` republishes it from that record",
            path=path,
            run_id=entry.citation.run_id,
        )

    def _unjournaled(self, path: Path, entry: Recalled) -> Unreachable:
        location = self._open_journal().location
        return Unreachable(
            f"learned file {path} cites record {entry.citation.id} of root run {entry.citation.run_id}, "
            f"which the journal {location} does not hold, so it is not served. If the journal lives "
            "elsewhere, pass --journal (or set $FLOWS_JOURNAL); otherwise `flows check --repair` "
            "republishes the finding if the journal records it, and else moves the file to "
            "flows-quarantine/ beside the store",
            path=path,
            run_id=entry.citation.run_id,
        )

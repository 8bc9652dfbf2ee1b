"""Checking a learned file against the journal record it cites.

A learned file is only a finding if the journal holds the record it cites and the file is that
record's rendering: a well-formed file citing nothing (forged, or its run deleted) is damage, never
served and never synced. Reads check each unsynced entry they are about to return (``check``: the
entry's fields against the record's); ``sync`` checks every file it ingests, byte for byte
(``verify``). The records of each run are read once and kept; a citation not found among them
makes the run be read again (the journal's reads are incremental), so a file published after the
last read is still found. A record is never expected to leave an append-only journal: one found
once is trusted for the life of the store object.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from journal import JournalBackend, JournalNameInvalid, JournalRunNotFound, Record
from memory._errors import Unreachable
from memory._finding import STREAM, checked_commit, render
from memory._results import Citation, Recalled

_MAX_RUNS = 10_000  # runs whose records are kept; past it the cache starts again
_MAX_CHECKED = 200_000  # entries remembered as checked


class Citations:
    """The ``memory-learn`` records of the journal ``open_journal`` returns, by run, as files cite them."""

    def __init__(self, open_journal: Callable[[], JournalBackend]) -> None:
        self._open_journal = open_journal
        self._runs: dict[str, tuple[int, dict[str, Record]]] = {}  # run id -> (records read, by id)
        self._checked: dict[Citation, Recalled] = {}  # entries ``check`` passed, by citation
        self._mutex = threading.Lock()

    def cited(self, entry: Recalled) -> Record | None:
        """The record ``entry`` cites, or None when the journal does not hold it.

        Raises:
            JournalError: the run's stream could not be read (its own error, unchanged).
        """
        run_id, rid = entry.citation.run_id, entry.citation.id
        with self._mutex:
            known = self._runs.get(run_id)
        if known is not None and rid in known[1]:
            return known[1][rid]
        backend = self._open_journal()
        try:
            records = backend.read(run_id, STREAM)
        except (JournalRunNotFound, JournalNameInvalid):
            records = ()
        with self._mutex:
            known = self._runs.get(run_id)
            if known is None or known[0] != len(records):
                if len(self._runs) >= _MAX_RUNS:
                    self._runs.clear()
                known = self._runs[run_id] = (len(records), {r.id: r for r in records})
        return known[1].get(rid)

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

    def verify(self, files: Iterable[tuple[Path, bytes, Recalled]]) -> None:
        """Check that each ``(path, bytes, entry)`` read from disk is its cited record's rendering.

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
            # the record is untrusted too: one of the wrong shape is journal_corrupt, never rendered
            if render(checked_commit(record, self._open_journal().location)) != data:
                raise self._mismatch(path, entry)

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

"""The agent ledger: ``<sail-dir>/memory/ledger.jsonl``, append-only, one fsync'd line per entry.

Writes go through ``Ledger.writer()``, which holds the ledger's lock, cuts a torn last line left by a
crash (the only thing ever cut, SPEC R-A1) and hands out a ``LedgerWriter``. Reads take no lock.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import portalocker

from journal import LineDamaged, LineLog
from memory.ledger import _snapshot
from memory.ledger._codec import LedgerCodec
from memory.ledger._entries import Acted, Entry, Outcome, Skipped
from memory.ledger._errors import LedgerBusy, LedgerInvalidEntry
from memory.ledger._snapshot import LastAct, Snapshot

_BLOCK = 64 * 1024
#: how far a line's ``ts`` may run ahead of when it was written (chain clock vs. the tick's clock)
CLOCK_SKEW_S = 3600
#: a backward read stops this many lines past the newest confirmed act at the latest
MAX_SCAN_PAST_CONFIRMED = 10_000


class Ledger:
    """The ledger of one agent, kept in its ``.sail`` directory.

    Args:
        sail_dir: the agent's ``.sail`` directory; the ledger is ``memory/ledger.jsonl`` in it and
            the derived snapshot ``memory/state.json``.
    """

    def __init__(self, sail_dir: str | os.PathLike[str]) -> None:
        self.sail_dir = Path(sail_dir)
        self.path = self.sail_dir / "memory" / "ledger.jsonl"
        self.snapshot_path = self.sail_dir / "memory" / "state.json"
        self._codec = LedgerCodec()
        self._log: LineLog[Entry] = LineLog(self.path, self._codec)

    # -- reads (no lock) -------------------------------------------------------------------------

    def entries(self) -> Sequence[Entry]:
        """Every entry, oldest first (read-only: the line log's own cache). Missing reads as empty.

        Raises:
            journal.JournalCorrupt: a damaged line that is not a torn tail (path and line named).
        """
        return self._log.read()

    def iter_reverse(self) -> Iterator[Entry]:
        """Entries newest first, reading the file backwards (costs the tail read, not the file).

        Raises:
            journal.JournalCorrupt: a damaged line among those read.
        """
        return self._log.iter_reverse()

    def last_confirmed(self) -> LastAct | None:
        """The agent's last ``acted`` entry with outcome ``confirmed`` (SPEC R-A4), or None.

        "Last" is by ``ts`` (the block's time), not by line: an unverified dispatch resolved after a
        newer one was confirmed is appended later but happened earlier, and must not make the agent
        look idle for longer than it was. A backward read therefore goes on past the newest
        confirmed line until a skip or unverified line (stamped by its tick's clock when written)
        is older than the best ``ts`` by more than ``CLOCK_SKEW_S``, or ``MAX_SCAN_PAST_CONFIRMED``
        lines.

        O(1) in the ledger's length with a valid snapshot; when the ledger has grown past it, only
        the new lines are decoded; when it is stale or missing, the ledger's tail is read backwards
        to the newest confirmed act and the snapshot is rewritten. The ledger always wins.

        Raises:
            journal.JournalCorrupt: a damaged line among those read.
        """
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            snap = self._current_snapshot(fd)
        finally:
            os.close(fd)
        return snap.last_confirmed

    def _current_snapshot(self, fd: int) -> Snapshot:
        snap = _snapshot.load(self.snapshot_path)
        if snap is not None and _snapshot.covers(snap, fd):
            size = os.fstat(fd).st_size
            if size == snap.size:
                return snap
            caught = self._catch_up(fd, snap, size)
            if caught is not None:
                _snapshot.save(self.snapshot_path, caught)
                return caught
        rebuilt = self._rebuild(fd)
        _snapshot.save(self.snapshot_path, rebuilt)
        return rebuilt

    def _catch_up(self, fd: int, snap: Snapshot, size: int) -> Snapshot | None:
        """Extend ``snap`` over complete lines appended since; None if one does not decode."""
        data = os.pread(fd, size - snap.size, snap.size)
        end = data.rfind(b"\n") + 1
        last = snap.last_confirmed
        for raw in data[:end].split(b"\n")[:-1]:
            try:
                entry = self._codec.decode(raw)
            except LineDamaged:
                return None  # let the backward read judge it (torn tail or damage)
            if _is_confirmed(entry) and (last is None or entry.ts > last.ts):
                assert isinstance(entry, Acted)
                last = _last_act(entry)
        covered = snap.size + end
        head, tail = _snapshot.prefix_digests(fd, covered)
        return Snapshot(covered, head, tail, last)

    def _rebuild(self, fd: int) -> Snapshot:
        """A snapshot of the prefix up to the last newline, from a backward read of the ledger."""
        covered = _last_line_end(fd)
        last: LastAct | None = None
        beyond = 0
        for entry in self._log.iter_reverse():
            if _is_confirmed(entry):
                assert isinstance(entry, Acted)
                if last is None or entry.ts > last.ts:
                    last = _last_act(entry)
            elif last is not None and _stamped_when_written(entry) and entry.ts + CLOCK_SKEW_S < last.ts:
                break  # everything written before this line has an older ts than ``last``
            if last is not None:
                beyond += 1
                if beyond > MAX_SCAN_PAST_CONFIRMED:
                    break
        head, tail = _snapshot.prefix_digests(fd, covered)
        return Snapshot(covered, head, tail, last)

    # -- writes (under the lock) ------------------------------------------------------------------

    @contextlib.contextmanager
    def writer(self, timeout: float = 30.0) -> Iterator[LedgerWriter]:
        """Hold the ledger's lock and yield a writer; a torn last line is cut first.

        Everything that must not interleave with another tick (reconcile, decide, append) runs
        inside one ``writer()`` block.

        Raises:
            journal.JournalCorrupt: a damaged line that is not a torn tail.
            journal.JournalUnwritable: the ledger or its lock could not be created or opened.
            LedgerBusy: the lock was not had within ``timeout`` seconds.
        """
        with contextlib.ExitStack() as stack:
            try:
                log = stack.enter_context(self._log.locked(timeout))
            except portalocker.exceptions.LockException as exc:
                raise LedgerBusy(
                    f"another tick has held {self.path}.lock for over {timeout:g}s; if no tick is "
                    "running, check for a stuck `sail tick` process",
                    path=self.path,
                ) from exc
            writer = LedgerWriter(self, log, list(log.recover()))
            yield writer
            if writer.appended:
                self.last_confirmed()  # brings the snapshot up to date over the new lines, once


class LedgerWriter:
    """Appends entries while its ``Ledger.writer()`` block holds the lock."""

    def __init__(self, ledger: Ledger, log: LineLog[Entry], entries: list[Entry]) -> None:
        self._ledger = ledger
        self._log = log
        self.entries: list[Entry] = entries  # a copy of the ledger, oldest first, kept current
        self.appended = 0  # entries this writer appended

    def append(self, entry: Entry) -> None:
        """Validate ``entry`` and append it as one fsync'd line.

        The snapshot is brought up to date when the ``writer()`` block ends (a crash before then
        leaves it behind the ledger, and the next lookup catches it up).

        Raises:
            LedgerInvalidEntry: ``entry`` is not an ``Acted`` or ``Skipped``.
            journal.JournalUnwritable: the line could not be made durable (nothing of it remains).
        """
        if not isinstance(entry, Acted | Skipped):
            raise LedgerInvalidEntry("(entry)", f"must be Acted or Skipped, got {type(entry).__name__}")
        self._log.append(entry)
        self.entries.append(entry)
        self.appended += 1

    def final_tx_hashes(self) -> set[str]:
        """Hashes of dispatches the ledger holds with a final outcome (confirmed or reverted)."""
        return {e.tx_hash.lower() for e in self.entries if isinstance(e, Acted) and e.is_final}

    def unverified_tx_hashes(self) -> set[str]:
        """Hashes of dispatches the ledger holds as ``unverified`` (final or not since)."""
        return {
            e.tx_hash.lower()
            for e in self.entries
            if isinstance(e, Acted) and e.outcome is Outcome.UNVERIFIED
        }


def _is_confirmed(entry: Entry) -> bool:
    return isinstance(entry, Acted) and entry.outcome is Outcome.CONFIRMED


def _stamped_when_written(entry: Entry) -> bool:
    """True for lines whose ``ts`` is the writing tick's clock (skips, unverified acts)."""
    return isinstance(entry, Skipped) or (isinstance(entry, Acted) and entry.outcome is Outcome.UNVERIFIED)


def _last_act(entry: Acted) -> LastAct:
    assert entry.block is not None  # a confirmed entry always has its block (schema)
    return LastAct(ts=entry.ts, block=entry.block, tx_hash=entry.tx_hash)


def _last_line_end(fd: int) -> int:
    """The offset just past the file's last newline (0 when it has none)."""
    end = os.fstat(fd).st_size
    while end > 0:
        start = max(0, end - _BLOCK)
        nl = os.pread(fd, end - start, start).rfind(b"\n")
        if nl >= 0:
            return start + nl + 1
        end = start
    return 0

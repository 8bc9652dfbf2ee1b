"""The agent ledger: ``<sail-dir>/memory/ledger.jsonl``, append-only, one fsync'd line per entry.

Writes go through ``Ledger.writer()``, which holds the ledger's lock, cuts a torn last line left by a
crash (the only thing ever cut) and hands out a ``LedgerWriter``. Reads take no lock and go through
``memory.ledger._lines``: they cost what they read, and every one of them judges the ledger's last
lines the same way (a damaged acknowledged line fails closed with ``journal_corrupt``).

What a tick needs beyond the last few lines — the last confirmed act, the dispatches not yet
resolved, token metadata — comes from the snapshot (``state.json``), verified against the ledger and
the activity log on every use and rebuilt from them when it disagrees.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import portalocker

from journal import LineLog
from memory.ledger import _snapshot
from memory.ledger._activity import (
    ActivityCodec,
    ActivityRecord,
    DispatchIncluded,
    DispatchSettled,
    DispatchSigned,
    DispatchSubmitted,
    ReorgAcknowledged,
    ReorgDetected,
)
from memory.ledger._codec import LedgerCodec
from memory.ledger._entries import Acted, Entry, Outcome, Skipped, check_writable
from memory.ledger._errors import LedgerBusy, LedgerInvalidEntry
from memory.ledger._index import StateBuilder
from memory.ledger._lines import Line, LineFile, line_sha256, ready_to_append, require_regular
from memory.ledger._snapshot import Coverage, Included, LastAct, LineRef, Marked, OpenDispatch, Snapshot

#: how far a line's ``ts`` may run ahead of when it was written (chain clock vs. the tick's clock)
CLOCK_SKEW_S = 3600
#: a reader writes the snapshot back when it folded more than this (a rebuild always)
SAVE_AFTER_BYTES = 64 * 1024
#: a tail read for recent confirmed acts gives up (and the snapshot is rebuilt) past this many lines
MAX_TAIL_LINES = 100_000


@dataclass(frozen=True)
class _Open:
    """Both files open for reading, with their readable ends (the ledger's measured first)."""

    ledger_fd: int | None
    ledger_end: int
    activity_fd: int | None
    activity_end: int


class Ledger:
    """The ledger of one agent, kept in its ``.sail`` directory.

    Args:
        sail_dir: the agent's ``.sail`` directory; the ledger is ``memory/ledger.jsonl`` in it, the
            derived snapshot ``memory/state.json``, and the runner's activity log ``activity.jsonl``.
    """

    def __init__(self, sail_dir: str | os.PathLike[str]) -> None:
        self.sail_dir = Path(sail_dir)
        self.path = self.sail_dir / "memory" / "ledger.jsonl"
        self.snapshot_path = self.sail_dir / "memory" / "state.json"
        self.activity_path = self.sail_dir / "activity.jsonl"
        self._codec = LedgerCodec()
        self._log: LineLog[Entry] = LineLog(self.path, self._codec)
        self.lines: LineFile[Entry] = LineFile(self.path, self._codec)
        self._activity: LineFile[ActivityRecord] = LineFile(self.activity_path, ActivityCodec())

    def _files(self) -> tuple[Path, ...]:
        return (
            self.path,
            Path(f"{self.path}.lock"),
            self.activity_path,
            Path(f"{self.activity_path}.lock"),
        )

    # -- reads (no lock) -------------------------------------------------------------------------

    def entries(self) -> Sequence[Entry]:
        """Every entry, oldest first, judged as every reader judges the file (``scan``, ``tail``,
        ``iter_reverse``). Missing reads as empty.

        Raises:
            journal.JournalCorrupt: a damaged line that is not a torn tail (path and line named).
            LedgerNotAFile: the ledger or its lock is not a regular file.
        """
        return self.lines.read_all()

    def scan(self) -> Iterator[Entry]:
        """Every entry, oldest first, streamed: each line decoded and checked, none held after.

        Raises:
            journal.JournalCorrupt: a damaged line (path and line named), or a damaged acknowledged
                last line (judged as a locked open would).
            LedgerNotAFile: the ledger or its lock is not a regular file.
        """
        fd = self.lines.open()
        if fd is None:
            return
        try:
            end = self.lines.readable_end(fd)
            for line in self.lines.forward(fd, 0, end):
                yield line.record
        finally:
            os.close(fd)

    def numbered(self) -> Iterator[tuple[int, str, Entry]]:
        """Every entry, oldest first, with its line number (from 1) and its line's SHA-256 (its bytes
        without the newline): what a citation names, so a reader can check the line it came from.

        Raises:
            journal.JournalCorrupt: a damaged line (path and line named), or a damaged acknowledged
                last line (judged as a locked open would).
            LedgerNotAFile: the ledger or its lock is not a regular file.
        """
        fd = self.lines.open()
        if fd is None:
            return
        try:
            end = self.lines.readable_end(fd)
            for number, line in enumerate(self.lines.forward(fd, 0, end), start=1):
                yield number, line_sha256(line.raw), line.record
        finally:
            os.close(fd)

    def iter_reverse(self) -> Iterator[Entry]:
        """Entries newest first, reading the file backwards (costs the tail read, not the file).

        Raises:
            journal.JournalCorrupt: a damaged line among those read, or a damaged acknowledged
                last line (judged as a locked open would).
            LedgerNotAFile: the ledger or its lock is not a regular file.
        """
        fd = self.lines.open()
        if fd is None:
            return
        try:
            end = self.lines.readable_end(fd)
            for line in self.lines.iter_reverse(fd, end):
                yield line.record
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def tail(self) -> Iterator[Tail]:
        """Both files open at one moment with their verified snapshot (caught up in memory, never
        written), to read backwards with every line's number: the snapshot says how many lines each
        covered prefix holds, so a read of the tail costs the lines it reads, not the file.

        Raises:
            journal.JournalCorrupt: a damaged line among those the snapshot's check reads.
            LedgerNotAFile: a file of the agent is not a regular file.
        """
        with self._opened() as files:
            snap, _ = self._current(files)
            yield Tail(self, files, snap)

    def last_confirmed(self) -> LastAct | None:
        """The agent's last ``acted`` entry with outcome ``confirmed``, or None.

        "Last" is by ``ts`` (the block's time), not by line: an unverified dispatch resolved after a
        newer one was confirmed is appended later but happened earlier, and must not make the agent
        look idle for longer than it was. Comes from the verified snapshot (see ``state``).

        Raises:
            journal.JournalCorrupt: a damaged line among those read.
            LedgerNotAFile: a file of the agent is not a regular file.
        """
        return self.state().last_confirmed

    def recent_confirmed(self, since: int) -> tuple[LastAct | None, bool]:
        """The latest-by-``ts`` confirmed act at or after ``since``, read from the ledger's tail.

        Costs the lines written since about ``since``, not the ledger's length: the backward read
        stops at the first skip or unverified line (stamped by its tick's clock when written) older
        than ``since`` by more than ``CLOCK_SKEW_S``, since every line before it was written before
        then, and a confirmed act is written after its block. Returns the act (or None) and whether
        the read was conclusive (False when it gave up after ``MAX_TAIL_LINES`` lines).

        Raises:
            journal.JournalCorrupt: a damaged line among those read.
            LedgerNotAFile: the ledger or its lock is not a regular file.
        """
        best: LastAct | None = None
        for count, entry in enumerate(self.iter_reverse()):
            if count >= MAX_TAIL_LINES:
                return best, False
            if isinstance(entry, Acted) and entry.outcome is Outcome.CONFIRMED:
                if entry.ts >= since and (best is None or entry.ts > best.ts):
                    best = LastAct(entry.ts, entry.block or 0, entry.tx_hash)
            elif _stamped_when_written(entry) and entry.ts + CLOCK_SKEW_S < since:
                return best, True
        return best, True

    def recent_signing(self, since: int) -> tuple[int | None, bool]:
        """The latest time at or after ``since`` at which the agent signed a swap that a receipt
        says was mined without reverting, read from the activity log's tail: its ``dispatch_signed``
        (or ``dispatch_submitted``) line, with a ``dispatch_included`` line of status 1 (or an older
        agent's ``dispatch_executed``) for it after.

        Every activity line is stamped by its tick's clock when written, so the backward read stops
        at the first line older than ``since`` by more than ``CLOCK_SKEW_S`` (it trusts those times
        to run forward, as ``recent_confirmed`` trusts a skip's). It answers what the snapshot's
        ``signed_ts`` (the latest signing of a confirmed act) says, from the files, for a snapshot
        that under-states it (a chain whose clock runs behind stamps the act itself too far back
        for ``recent_confirmed`` to see). Returns the time (or None) and whether the read was conclusive
        (False after ``MAX_TAIL_LINES`` lines).

        Raises:
            journal.JournalCorrupt: a damaged line among those read.
            LedgerNotAFile: the activity log or its lock is not a regular file.
        """
        mined: set[str] = set()
        best: int | None = None
        fd = self._activity.open()
        if fd is None:
            return None, True
        try:
            end = self._activity.readable_end(fd)
            for count, line in enumerate(self._activity.iter_reverse(fd, end)):
                record = line.record
                if count >= MAX_TAIL_LINES:
                    return best, False
                if record.ts + CLOCK_SKEW_S < since:
                    return best, True
                if (isinstance(record, DispatchIncluded) and record.status == 1) or (
                    isinstance(record, DispatchSettled) and record.event == "dispatch_executed"
                ):
                    mined.add(record.tx_hash.lower())
                elif (
                    isinstance(record, DispatchSigned | DispatchSubmitted)
                    and record.action == "swap"
                    and record.tx_hash.lower() in mined
                    and record.ts >= since
                    and (best is None or record.ts > best)
                ):
                    best = record.ts
            return best, True
        finally:
            os.close(fd)

    def holds_outcome(self, tx_hash: str, since: int) -> bool | None:
        """Whether the ledger's tail holds a final entry (confirmed or reverted) for ``tx_hash``
        stamped at or after ``since`` (its block's time); None when the read gave up after
        ``MAX_TAIL_LINES`` lines. Reads back as ``recent_confirmed`` does.

        Raises:
            journal.JournalCorrupt: a damaged line among those read.
            LedgerNotAFile: the ledger or its lock is not a regular file.
        """
        key = tx_hash.lower()
        for count, entry in enumerate(self.iter_reverse()):
            if count >= MAX_TAIL_LINES:
                return None
            if isinstance(entry, Acted) and entry.outcome is not Outcome.UNVERIFIED:
                if entry.tx_hash.lower() == key and entry.ts >= since:
                    return True
            elif _stamped_when_written(entry) and entry.ts + CLOCK_SKEW_S < since:
                return False
        return False

    def state(self, *, save: bool = True) -> Snapshot:
        """The snapshot, verified against the ledger and the activity log, caught up or rebuilt.

        With a snapshot that verifies, this reads a few small pieces of each file and whatever was
        appended since, whatever their length; otherwise both files are read whole and the
        snapshot is rebuilt. With ``save``, a rebuilt snapshot, or one that had fallen more than
        ``SAVE_AFTER_BYTES`` behind, is written back (a tick's writer saves it at the end of every
        tick); never one from a read that failed.

        Raises:
            journal.JournalCorrupt: a damaged line among those read (nothing is saved).
            LedgerNotAFile: a file of the agent is not a regular file.
        """
        with self._opened() as files:
            snap, folded = self._current(files)
        if save and folded > SAVE_AFTER_BYTES:
            _snapshot.save(self.snapshot_path, snap)
        return snap

    @contextlib.contextmanager
    def _opened(self) -> Iterator[_Open]:
        require_regular(*self._files())
        ledger_fd = self.lines.open()
        try:
            activity_fd = self._activity.open()
            try:
                ledger_end = 0 if ledger_fd is None else self.lines.readable_end(ledger_fd)
                activity_end = 0 if activity_fd is None else self._activity.readable_end(activity_fd)
                yield _Open(ledger_fd, ledger_end, activity_fd, activity_end)
            finally:
                if activity_fd is not None:
                    os.close(activity_fd)
        finally:
            if ledger_fd is not None:
                os.close(ledger_fd)

    def _current(self, files: _Open) -> tuple[Snapshot, int]:
        """The verified state, and how many bytes were folded to get it (all, for a rebuild)."""
        loaded = _snapshot.load(self.snapshot_path)
        if loaded is not None and self._verified(loaded, files):
            behind = files.ledger_end - loaded.ledger.size + files.activity_end - loaded.activity.size
            if loaded.ledger.lines is None or loaded.activity.lines is None:
                # a version 2 snapshot: count its prefixes' lines once, and have it written back
                return self._fold(files, loaded), behind + SAVE_AFTER_BYTES + 1
            return (loaded, 0) if behind == 0 else (self._fold(files, loaded), behind)
        return self._fold(files, None), files.ledger_end + files.activity_end + SAVE_AFTER_BYTES + 1

    def _rebuilt(self) -> Snapshot:
        """The state folded from both files whole, whatever the snapshot says."""
        with self._opened() as files:
            return self._fold(files, None)

    def _advance(self, snap: Snapshot) -> Snapshot:
        """``snap`` (verified earlier in this process) caught up with what was appended since."""
        with self._opened() as files:
            if snap.ledger.holds(files.ledger_fd, files.ledger_end, self.path) and snap.activity.holds(
                files.activity_fd, files.activity_end, self.activity_path
            ):
                if (snap.ledger.size, snap.activity.size) == (files.ledger_end, files.activity_end):
                    return snap
                return self._fold(files, snap)
            return self._fold(files, None)

    def _fold(self, files: _Open, start: Snapshot | None) -> Snapshot:
        """Fold the activity lines past ``start``'s prefix, then the ledger's (all, when None).

        Lines that cannot change the state (tick records, skips) are parsed as JSON but not
        validated field by field: a full rebuild reads both files whole, and this keeps it to the
        cost of parsing them. Damage in such a line mid-file is for full reads to find.
        """
        builder = StateBuilder(start)
        activity_lines = 0 if start is None else _counted(self._activity, files.activity_fd, start.activity)
        if files.activity_fd is not None:
            begin = 0 if start is None else start.activity.size
            for offset, raw in self._activity.forward_raw(files.activity_fd, begin, files.activity_end):
                activity_lines += 1
                if _field(raw, "event") not in _INERT_EVENTS:
                    builder.fold_activity(
                        Line(offset, raw, self._activity.decode(raw, offset, files.activity_fd))
                    )
        ledger_lines = 0 if start is None else _counted(self.lines, files.ledger_fd, start.ledger)
        if files.ledger_fd is not None:
            begin = 0 if start is None else start.ledger.size
            for offset, raw in self.lines.forward_raw(files.ledger_fd, begin, files.ledger_end):
                ledger_lines += 1
                if _field(raw, "kind") != "skipped":
                    builder.fold_ledger(Line(offset, raw, self.lines.decode(raw, offset, files.ledger_fd)))
        return builder.freeze(
            Coverage.of(files.ledger_fd, files.ledger_end, self.path, ledger_lines),
            Coverage.of(files.activity_fd, files.activity_end, self.activity_path, activity_lines),
        )

    def _verified(self, snap: Snapshot, files: _Open) -> bool:
        """Whether ``snap`` agrees with both files at every point it names (a few small reads)."""
        return (
            snap.ledger.holds(files.ledger_fd, files.ledger_end, self.path)
            and snap.activity.holds(files.activity_fd, files.activity_end, self.activity_path)
            and self._last_holds(snap, files)
            and all(
                self._dispatch_holds(d, snap, files)
                for d in (*snap.open, *snap.unsent, *snap.dropped, *snap.resolved)
            )
            and all(d.nonce is not None for d in (*snap.unsent, *snap.dropped, *snap.resolved))
            and self._reorg_lines_hold(snap, files)
        )

    def _reorg_lines_hold(self, snap: Snapshot, files: _Open) -> bool:
        """Whether the activity lines the reorganisation check relies on are there and say the same:
        the last act's ``dispatch_included`` line (for that act, in its block), the pending ones,
        the held ``chain_reorged`` line and the newest ``reorg_acknowledged`` one."""
        anchor, last = snap.anchor, snap.last_confirmed
        if anchor is not None and (
            last is None or (anchor.tx_hash.lower(), anchor.block) != (last.tx_hash.lower(), last.block)
        ):
            return False
        included = [i for i in (anchor, *snap.included) if i is not None]
        reorged, acked = snap.reorged, snap.acknowledged
        return (
            all(self._included_holds(i, snap, files) for i in included)
            and (reorged is None or self._marked_holds(reorged, ReorgDetected, snap, files))
            and (acked is None or self._marked_holds(acked, ReorgAcknowledged, snap, files))
        )

    def _activity_record(self, ref: LineRef, snap: Snapshot, files: _Open) -> ActivityRecord | None:
        if files.activity_fd is None or ref.offset >= snap.activity.size:
            return None
        line = self._activity.line_at(files.activity_fd, ref.offset, ref.sha256)
        return None if line is None else line.record

    def _included_holds(self, included: Included, snap: Snapshot, files: _Open) -> bool:
        record = self._activity_record(included.line, snap, files)
        return isinstance(record, DispatchIncluded) and (
            record.tx_hash,
            record.block,
            record.block_hash,
            record.chain_id,
        ) == (included.tx_hash, included.block, included.block_hash, included.chain_id)

    def _marked_holds(
        self, marked: Marked, kind: type[ReorgDetected | ReorgAcknowledged], snap: Snapshot, files: _Open
    ) -> bool:
        record = self._activity_record(marked.line, snap, files)
        return isinstance(record, kind) and record.tx_hash == marked.tx_hash

    def activity_at(self, ref: LineRef) -> ActivityRecord | None:
        """The activity record at ``ref`` (its offset, checked against its SHA-256), or None when
        the line there is not that one (one small read)."""
        fd = self._activity.open()
        if fd is None:
            return None
        try:
            line = self._activity.line_at(fd, ref.offset, ref.sha256)
            return None if line is None else line.record
        finally:
            os.close(fd)

    def _last_holds(self, snap: Snapshot, files: _Open) -> bool:
        """Whether the ledger line ``lastConfirmed`` names is there and says the same."""
        ref = snap.last_line
        if ref is None or snap.last_confirmed is None:
            return ref is None and snap.last_confirmed is None
        if files.ledger_fd is None or ref.offset >= snap.ledger.size:
            return False
        line = self.lines.line_at(files.ledger_fd, ref.offset, ref.sha256)
        entry = None if line is None else line.record
        if not isinstance(entry, Acted) or entry.outcome is not Outcome.CONFIRMED:
            return False
        last = snap.last_confirmed
        if (entry.ts, entry.block or 0, entry.tx_hash) != (last.ts, last.block, last.tx_hash):
            return False
        if snap.last_signed is None or last.signed_ts is None:
            return snap.last_signed is None and last.signed_ts is None
        record = self._activity_record(snap.last_signed, snap, files)
        return (
            isinstance(record, DispatchSigned | DispatchSubmitted)
            and record.action == "swap"
            and record.ts == last.signed_ts
        )

    def _dispatch_holds(self, dispatch: OpenDispatch, snap: Snapshot, files: _Open) -> bool:
        if files.activity_fd is None or dispatch.line.offset >= snap.activity.size:
            return False
        line = self._activity.line_at(files.activity_fd, dispatch.line.offset, dispatch.line.sha256)
        record = None if line is None else line.record
        if not isinstance(record, DispatchSigned | DispatchSubmitted):
            return False
        nonce = record.nonce if isinstance(record, DispatchSigned) else None
        return (record.tx_hash, nonce, record.ts) == (dispatch.tx_hash, dispatch.nonce, dispatch.ts)

    # -- writes (under the lock) ------------------------------------------------------------------

    @contextlib.contextmanager
    def writer(self, timeout: float = 30.0) -> Iterator[LedgerWriter]:
        """Hold the ledger's lock and yield a writer; a torn last line is cut first.

        Everything that must not interleave with another tick (reconcile, decide, append) runs
        inside one ``writer()`` block. The snapshot is brought up to date when the block ends
        without an error.

        Raises:
            journal.JournalCorrupt: a damaged line that is not a torn tail.
            journal.JournalUnwritable: the ledger or its lock could not be created or opened.
            LedgerBusy: the lock was not had within ``timeout`` seconds.
            LedgerNotAFile: a file of the agent is not a regular file.
        """
        require_regular(*self._files())
        with contextlib.ExitStack() as stack:
            try:
                log = stack.enter_context(self._log.locked(timeout))
            except portalocker.exceptions.LockException as exc:
                raise LedgerBusy(
                    f"another tick has held {self.path}.lock for over {timeout:g}s; if no tick is "
                    "running, check for a stuck `sail tick` process",
                    path=self.path,
                ) from exc
            ready_to_append(log, self.lines)
            with self._opened() as files:
                state, folded = self._current(files)
            if folded > SAVE_AFTER_BYTES:  # a rebuild: keep it even if the tick fails
                _snapshot.save(self.snapshot_path, state)
                folded = 0
            writer = LedgerWriter(self, log, state)
            yield writer
            if writer.refresh() != state or folded:
                _snapshot.save(self.snapshot_path, writer.state)


class Tail:
    """The ledger and the activity log as ``Ledger.tail()`` opened them, read newest first.

    ``snapshot`` is their verified state; its prefixes end where the files' readable ends were
    measured, and say how many lines they hold.
    """

    def __init__(self, ledger: Ledger, files: _Open, snapshot: Snapshot) -> None:
        self._ledger = ledger
        self._files = files
        self.snapshot = snapshot

    def ledger(self) -> Iterator[tuple[int, str, Entry]]:
        """Every entry, newest first, with its line number (from 1) and its line's SHA-256.

        Raises:
            journal.JournalCorrupt: a damaged line among those read.
        """
        fd, number = self._files.ledger_fd, self.snapshot.ledger.lines
        if fd is None or number is None:
            return
        lines = self._ledger.lines
        for offset, raw in lines.reverse_raw(fd, self._files.ledger_end):
            yield number, line_sha256(raw), lines.decode(raw, offset, fd)
            number -= 1

    def activity(
        self, events: frozenset[str], *, back_to: int | None = None
    ) -> Iterator[tuple[int, str, ActivityRecord]]:
        """The activity records whose ``event`` is in ``events``, newest first, each with its line
        number (counting every line) and its line's SHA-256; other lines are not decoded. With
        ``back_to``, the read stops at the first line stamped before it (every record's ``ts`` is
        its writer's clock).

        Raises:
            journal.JournalCorrupt: a damaged line among those decoded.
        """
        fd, number = self._files.activity_fd, self.snapshot.activity.lines
        if fd is None or number is None:
            return
        lines = self._ledger._activity
        marks = tuple(f'"{event}"'.encode() for event in events)
        for offset, raw in lines.reverse_raw(fd, self._files.activity_end):
            if back_to is not None:
                ts = _field(raw, "ts")
                if type(ts) is int and ts < back_to:
                    return
            if any(mark in raw for mark in marks) and _field(raw, "event") in events:
                yield number, line_sha256(raw), lines.decode(raw, offset, fd)
            number -= 1


class LedgerWriter:
    """Appends entries while its ``Ledger.writer()`` block holds the lock.

    ``state`` is the verified snapshot as of the last ``refresh()``: the last confirmed act, the
    dispatches not yet resolved, token metadata.
    """

    def __init__(self, ledger: Ledger, log: LineLog[Entry], state: Snapshot) -> None:
        self._ledger = ledger
        self._log = log
        self.state = state
        self.appended = 0  # entries this writer appended

    @property
    def ledger(self) -> Ledger:
        """The ledger this writer appends to."""
        return self._ledger

    def append(self, entry: Entry) -> None:
        """Validate ``entry`` and append it as one fsync'd line.

        ``state`` does not see it until ``refresh()``; the snapshot is brought up to date when the
        ``writer()`` block ends (a crash before then leaves it behind, and the next read catches up).

        Raises:
            LedgerInvalidEntry: ``entry`` is not an ``Acted`` or ``Skipped``, or a text of it is longer
                than ``MAX_TEXT_CHARS`` (nothing is written).
            journal.JournalUnwritable: the line could not be made durable (nothing of it remains).
        """
        if not isinstance(entry, Acted | Skipped):
            raise LedgerInvalidEntry("(entry)", f"must be Acted or Skipped, got {type(entry).__name__}")
        check_writable(entry)
        self._log.append(entry)
        self.appended += 1

    def refresh(self) -> Snapshot:
        """Fold what was appended to the ledger and the activity log since; return the new state."""
        self.state = self._ledger._advance(self.state)
        return self.state

    def rebuild(self) -> Snapshot:
        """Fold both files whole, ignoring the snapshot (it disagreed with the ledger's tail)."""
        self.state = self._ledger._rebuilt()
        return self.state

    def last_confirmed(self) -> LastAct | None:
        """The last confirmed act as of the last ``refresh()``."""
        return self.state.last_confirmed


#: activity events that never change the snapshot's state
_INERT_EVENTS = frozenset({"tick_started", "tick_finished"})


def _counted(lines: LineFile[Any], fd: int | None, prefix: Coverage) -> int:
    """How many lines ``prefix`` holds: as the snapshot says, else counted (a version 2 snapshot)."""
    if prefix.lines is not None:
        return prefix.lines
    return 0 if fd is None or prefix.size == 0 else lines.count_lines(fd, prefix.size)


def _field(raw: bytes, name: str) -> object:
    """The value of key ``name`` in the JSON object ``raw`` holds (None when it is not one)."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return obj.get(name) if isinstance(obj, dict) else None


def _stamped_when_written(entry: Entry) -> bool:
    """True for lines whose ``ts`` is the writing tick's clock (skips, unverified acts)."""
    return isinstance(entry, Skipped) or (isinstance(entry, Acted) and entry.outcome is Outcome.UNVERIFIED)

"""The durable line log: append-only lines, one record each, with torn-tail recovery.

One module serves every append-only file of the project: journal streams (whose codec adds a
sequence number and a checksum to each line) and the agent ledger (whose lines are the seed's
schema, bare). The log itself knows nothing of what a record means; its codec encodes a record as
one line and decodes a line back, raising ``LineDamaged`` when the bytes are not a valid record.

Durability: ``append`` writes the line and its newline with one ``os.write`` and fsyncs before it
returns. A new log file is fsync'd, and so is its directory, when it is created.

Recovery: an append that never returned can leave a *torn tail* — a part of its line, or, after a
power loss, zeros or stale bytes. On a locked open (``recover``) that tail is cut, so the next
append starts on its own line. Damage anywhere else fails closed with ``JournalCorrupt`` naming the
file and the line; it is never skipped. The rule that tells one from the other:

* the tail is everything from the first line that does not decode (or is out of sequence) to the
  end of the file, provided no later line decodes (in a numbered log, as a record after it: a
  copy of an earlier line is stale bytes a power loss left in an unsynced append);
* except that a line whose codec says it is a *complete* record that fails its check
  (``LineDamaged(torn=False)``, e.g. a checksum mismatch on well-formed JSON) is damage, not a
  tear, wherever it is: no crash writes a well-formed record with a wrong checksum.

The *watermark* sharpens the rule. Whoever fsyncs the log records, in ``<path>.lock`` and with a
checksum, how many bytes that fsync covered (written after the fsync returned, itself not fsync'd, so
after a crash it can only be lower than the truth). Every acknowledged append lies below it; so
damage below it is damage, and anything at or past it is a torn tail however it looks (several
lines, when appenders shared an fsync). A log without a readable watermark uses the rule above.

A second mark, after the first, records how far *file-system* syncs reached (``sync_to(end,
filesystem=True)``, Linux's ``syncfs``): a sync that also made durable every write made on the log's
file system before it began. A caller that wrote another file without fsync before appending (a
staged finding) needs that kind; a plain fsync of the log never raises the second mark.

Lock-free readers (``read``, ``iter_reverse``) apply the same rule but never cut: a tail that may be
an append in flight is simply not a record yet.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from journal._errors import JournalCorrupt, JournalReadInterrupted, JournalUnwritable
from staging import HAVE_SYNCFS, ensure_dir, failpoint, fsync_dir, syncfs, write_all

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

_REVERSE_BLOCK = 64 * 1024


def _pack_mark(value: int) -> bytes:
    raw = value.to_bytes(8, "little")
    return raw + zlib.crc32(raw).to_bytes(4, "little")


def _unpack_mark(raw: bytes) -> int | None:
    """The watermark in ``raw``, or None when it is missing or torn (its checksum fails)."""
    if len(raw) != 12 or zlib.crc32(raw[:8]).to_bytes(4, "little") != raw[8:]:
        return None
    return int.from_bytes(raw[:8], "little")


class LineDamaged(Exception):
    """Raised by a codec's ``decode`` when a line is not a valid record.

    ``torn`` says whether these bytes could be what a torn append leaves (the default). A codec sets
    it to False for a line that is a complete, well-formed record whose own check fails, such as a
    checksum mismatch: that is damage even on the last line.
    """

    def __init__(self, reason: str, *, torn: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.torn = torn


class LineCodec(Protocol[T]):
    """How records become lines and back."""

    def encode(self, record: T, /) -> bytes:
        """Return the record as one line, without the newline; it must not contain ``b"\\n"``."""
        ...

    def decode(self, line: bytes, /) -> T:
        """Return the record a line holds (given without its newline); raise ``LineDamaged``."""
        ...


@dataclass(frozen=True)
class _Scan(Generic[T]):
    records: list[T]
    good_end: int  # byte offset just past the last good line
    tail: bytes  # what follows good_end: empty, or a torn tail


class LineLog(Generic[T]):
    """An append-only file of one-record lines.

    Args:
        path: the log file.
        codec: encodes and decodes records.
        mode: permission bits for a newly created file.
        sequence: when given, returns a record's sequence number; records must then be numbered
            1, 2, 3 … in file order, and a line out of sequence counts as damaged.

    Appending requires the lock: use ``with log.locked(): log.recover(); log.append(r)``, or
    ``held()`` when the caller already holds a lock that covers this file (the journal's run lock).
    Several threads and processes may use one log; a lock is an open file of its own per holder.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        codec: LineCodec[T],
        *,
        mode: int = 0o600,
        sequence: Callable[[T], int] | None = None,
        keep_open: bool = False,
    ) -> None:
        self._path = Path(path)
        self._path_str = str(self._path)
        self._keep_open = keep_open
        self._kept: int | None = None  # with keep_open: one O_APPEND descriptor for the log's life
        self._kept_mark: int | None = None
        self._codec = codec
        self._mode = mode
        self._sequence = sequence
        self._mutex = threading.RLock()
        self._syncing = threading.Lock()
        self._durable = 0  # bytes this object knows durable (its own fsyncs), per inode below
        self._durable_fs = 0  # of those, covered by a file-system sync (never more than _durable)
        self._durable_ino: int | None = None
        self._mark = f"{self._path}.lock"
        # Verified records and the file offset they end at; a cache only of verified bytes, which a
        # recovery never removes, so it stays valid while the file's inode is the same.
        self._cached: list[T] = []
        self._cached_end = 0
        self._cached_ino: int | None = None
        self._fd: int | None = None
        self._owner: int | None = None

    @property
    def path(self) -> Path:
        """The log file's path."""
        return self._path

    # -- locking ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self, timeout: float = 30.0) -> Iterator[LineLog[T]]:
        """Hold an exclusive lock on ``<path>.lock`` and the log open for appending.

        Creates the log (fsyncing it and its directory) when it does not exist.

        Raises:
            JournalUnwritable: the lock or the log could not be created or opened.
            portalocker.exceptions.LockException: the lock was not had within ``timeout`` seconds.
        """
        import portalocker  # imported by the lock paths only: a read-only command never pays for it

        lock_path = Path(f"{self._path}.lock")
        try:
            ensure_dir(self._path.parent)
            os.close(os.open(lock_path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, self._mode))
            lock = portalocker.Lock(
                str(lock_path),
                mode="a",
                timeout=timeout,
                check_interval=0.005,
                flags=portalocker.LockFlags.EXCLUSIVE | portalocker.LockFlags.NON_BLOCKING,
            )
        except OSError as exc:
            raise JournalUnwritable(
                f"cannot create {self._path.parent}: {exc.strerror or exc}", path=self._path
            ) from exc
        try:
            lock.acquire()
        except OSError as exc:
            raise JournalUnwritable(
                f"cannot open the lock {lock_path}: {exc.strerror or exc}", path=lock_path
            ) from exc
        try:
            with self.held():
                yield self
        finally:
            lock.release()

    @contextlib.contextmanager
    def held(self) -> Iterator[LineLog[T]]:
        """Open the log for appending, assuming the caller holds a lock that covers it."""
        with self._mutex:
            fd = self._kept if self._kept is not None and self._still_here(self._kept) else None
            if fd is None:
                fd = self._open_for_append()
                if self._keep_open:
                    self._forget_kept()
                    self._kept = fd
            self._fd, self._owner = fd, threading.get_ident()
            try:
                yield self
            finally:
                self._fd = self._owner = None
                if fd != self._kept:
                    os.close(fd)

    def _still_here(self, fd: int) -> bool:
        """Whether ``fd`` is still the file at the log's path (it was not replaced or removed)."""
        try:
            return os.stat(self._path_str).st_ino == os.fstat(fd).st_ino
        except OSError:
            return False

    def _forget_kept(self) -> None:
        for fd in (self._kept, self._kept_mark):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._kept = self._kept_mark = None

    def close(self) -> None:
        """Close descriptors kept open (``keep_open``); safe twice, and the log stays usable."""
        with self._mutex:
            self._forget_kept()

    def _open_for_append(self) -> int:
        flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            return os.open(self._path, flags)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise JournalUnwritable(
                f"cannot open {self._path} for appending: {exc.strerror or exc}", path=self._path
            ) from exc
        try:
            ensure_dir(self._path.parent)
            fd = os.open(self._path, flags | os.O_CREAT | os.O_EXCL, self._mode)
            os.fsync(fd)
            fsync_dir(self._path.parent)
        except FileExistsError:
            return os.open(self._path, flags)
        except OSError as exc:
            raise JournalUnwritable(
                f"cannot create {self._path}: {exc.strerror or exc}", path=self._path
            ) from exc
        return fd

    def _require_held(self) -> int:
        if self._fd is None or self._owner != threading.get_ident():
            raise RuntimeError(f"{self._path}: recover() and append() need locked() or held()")
        return self._fd

    # -- recovery and append -----------------------------------------------------------------

    def recover(self) -> Sequence[T]:
        """Cut a torn tail, if any, and return every record in order. Requires the lock.

        Raises:
            JournalCorrupt: a damaged line that is not a torn tail (path and 1-based line named).
            JournalUnwritable: the cut could not be made durable.

        The returned sequence is the log's own cache: read it, never change it.
        """
        fd = self._require_held()
        scan = self._scan(fd)
        if scan.tail:
            try:
                os.ftruncate(fd, scan.good_end)
                os.fsync(fd)
            except OSError as exc:
                raise JournalUnwritable(
                    f"cannot cut the torn tail of {self._path}: {exc.strerror or exc}", path=self._path
                ) from exc
            self._durable = min(self._durable, scan.good_end)
            self._durable_fs = min(self._durable_fs, scan.good_end)
            self._lower_watermarks(scan.good_end)
        return scan.records

    def append(self, record: T) -> None:
        """Write ``record`` as one line and fsync it. Requires the lock and a prior ``recover``.

        On failure the file is cut back to where it was, so no part of the line remains.

        Raises:
            ValueError: the codec produced a line with a newline in it.
            JournalUnwritable: the line could not be written or made durable.
        """
        fd = self._require_held()
        line = self._codec.encode(record)
        if b"\n" in line:
            raise ValueError(f"{self._path}: an encoded record must be one line")
        start = self._cached_end
        try:
            failpoint("linelog.before_append")
            write_all(fd, line + b"\n")
            failpoint("linelog.before_fsync")
            os.fsync(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
                os.fsync(fd)
            raise JournalUnwritable(
                f"cannot append to {self._path}: {exc.strerror or exc}; check free space and the disk",
                path=self._path,
            ) from exc
        self._cached.append(record)
        self._cached_end = start + len(line) + 1
        self._set_watermark(self._cached_end)
        failpoint("linelog.after_append")

    def write(self, records: Sequence[T]) -> int:
        """Write ``records`` as lines with one ``write``, without fsync; return the end offset.

        Requires the lock and a prior ``recover``. The records are not durable until ``sync_to``
        of the returned offset returns; call it after letting go of the lock, so that appenders in
        other threads and processes overlap their fsyncs (group commit). On a failed write the file
        is cut back to where it was.

        Raises:
            ValueError: the codec produced a line with a newline in it.
            JournalUnwritable: the lines could not be written.
        """
        fd = self._require_held()
        lines = [self._codec.encode(r) for r in records]
        if any(b"\n" in line for line in lines):
            raise ValueError(f"{self._path}: an encoded record must be one line")
        data = b"".join(line + b"\n" for line in lines)
        start = self._cached_end
        try:
            failpoint("linelog.before_append")
            write_all(fd, data)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            raise JournalUnwritable(
                f"cannot append to {self._path}: {exc.strerror or exc}; check free space and the disk",
                path=self._path,
            ) from exc
        self._cached.extend(records)
        self._cached_end = start + len(data)
        return self._cached_end

    def unwrite(self, count: int, end: int) -> bool:
        """Cut the last ``count`` records back off, if they still end the file at ``end``.

        For a writer whose ``sync_to`` failed: when nobody appended after it, its lines go, so no
        unacknowledged record stays behind. Requires the lock. Returns whether it cut.
        """
        fd = self._require_held()
        self._scan(fd)
        if self._cached_end != end or os.fstat(fd).st_size != end or count > len(self._cached):
            return False
        kept = self._cached[: len(self._cached) - count]
        start = end - sum(len(self._codec.encode(r)) + 1 for r in self._cached[len(kept) :])
        try:
            os.ftruncate(fd, start)
            os.fsync(fd)
        except OSError:
            return False
        self._cached, self._cached_end = kept, start
        # Another appender's fsync may have raised the mark past the cut: bring it back, or bytes
        # written here later would be taken for durable before they are.
        self._durable = min(self._durable, start)
        self._durable_fs = min(self._durable_fs, start)
        self._lower_watermarks(start)
        return True

    def end(self) -> int:
        """The offset just past the last verified record (as of the last scan or write)."""
        return self._cached_end

    def sync_to(self, end: int, *, filesystem: bool = False) -> None:
        """Return once the log's first ``end`` bytes are durable; no lock is needed.

        Skips the fsync when the watermark (the durable length recorded by whoever fsync'd last, in
        this process or another) already covers ``end``; otherwise fsyncs and raises the watermark,
        so concurrent appenders share fsyncs.

        With ``filesystem`` (where ``HAVE_SYNCFS``), the sync is a ``syncfs`` of the log's file
        system, and only such a sync counts: when this returns, every write made to any file on that
        file system before the log reached ``end`` is durable too. A caller that wrote a file
        without fsync, then appended, has both made durable by one device flush.

        Raises:
            JournalUnwritable: the fsync failed; whether those bytes survive is then unknown, and
                the caller must treat its records as not written (a resumed caller finds them if
                they did survive).
            ValueError: ``filesystem`` where syncfs is missing.
        """
        if filesystem and not HAVE_SYNCFS:
            raise ValueError("a file-system sync needs syncfs, which this platform lacks")
        if self._known_durable(end, filesystem):
            return
        if (self._marks()[1 if filesystem else 0] or 0) >= end:  # another process's sync covers it
            return
        with self._syncing:  # threads queue here; the sync ahead of them may already cover them
            if self._known_durable(end, filesystem):
                return
            self._fsync_covering(filesystem, end)

    def _known_durable(self, end: int, filesystem: bool) -> bool:
        """Whether this object's own syncs (of the kind asked) cover the first ``end`` bytes."""
        durable = self._durable_fs if filesystem else self._durable
        return durable >= end and self._durable_ino == self._cached_ino

    def sync_now(self, *, filesystem: bool = False) -> None:
        """Sync the log (with ``filesystem``, its whole file system) now, whatever the marks say:
        for a caller whose own writes elsewhere must be covered by a sync that begins after them.

        Raises:
            JournalUnwritable: the sync failed.
        """
        if filesystem and not HAVE_SYNCFS:
            raise ValueError("a file-system sync needs syncfs, which this platform lacks")
        with self._syncing:
            self._fsync_covering(filesystem, None)

    def _fsync_covering(self, filesystem: bool, end: int | None) -> None:
        """Sync, unless (with ``end``) a sync that finished while this one queued covered ``end``.

        One syncer of the log at a time, across processes: an exclusive ``flock`` on the log file
        itself (no other lock uses it) is held from the check of the marks to the new mark, so
        processes that queue behind a sync find the mark it left and need not sync again.
        """
        kept = self._kept
        try:
            fd = kept if kept is not None else os.open(self._path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError as exc:
            raise JournalUnwritable(
                f"cannot open {self._path}: {exc.strerror or exc}", path=self._path
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if end is not None and (self._marks()[1 if filesystem else 0] or 0) >= end:
                    return  # the sync this one queued behind covered it
                st = os.fstat(fd)
                covered, ino = st.st_size, st.st_ino  # every byte written before the sync is covered
                failpoint("linelog.before_fsync")
                if filesystem:
                    syncfs(fd)
                else:
                    os.fsync(fd)
                if ino == self._cached_ino:
                    self._durable, self._durable_ino = max(self._durable, covered), ino
                    if filesystem:
                        self._durable_fs = max(self._durable_fs, covered)
                self._set_watermark(covered, filesystem=filesystem)  # before waiters look
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError as exc:
            raise JournalUnwritable(
                f"cannot make {self._path} durable: {exc.strerror or exc}; check the disk", path=self._path
            ) from exc
        finally:
            if fd != kept:
                os.close(fd)
        failpoint("linelog.after_append")

    # -- the watermark: how much of the log is known durable -----------------------------------

    def watermark(self) -> int | None:
        """The durable length last recorded, or None when no appender has recorded one.

        It is written (without fsync) only after an fsync returned, so after a crash it can only
        be lower than the truth: bytes past it are not known durable and were never acknowledged.
        """
        plain, filesystem = self._marks()
        if plain is None or filesystem is None:
            return filesystem if plain is None else plain
        return max(plain, filesystem)

    def filesystem_watermark(self) -> int | None:
        """How far file-system syncs (``sync_to(end, filesystem=True)``) reached, or None."""
        return self._marks()[1]

    def _marks(self) -> tuple[int | None, int | None]:
        if self._kept_mark is not None:
            try:
                raw = os.pread(self._kept_mark, 24, 0)
            except OSError:
                return None, None
        else:
            try:
                fd = os.open(self._mark, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            except OSError:
                return None, None
            try:
                raw = os.pread(fd, 24, 0)
            except OSError:
                return None, None
            finally:
                os.close(fd)
        return _unpack_mark(raw[:12]), _unpack_mark(raw[12:24])

    def _set_watermark(self, value: int, *, filesystem: bool = False) -> None:
        # Written without reading first: if another appender's higher mark is overwritten with a
        # lower one, the mark only under-claims, which costs a sync, never a guarantee.
        self._write_marks(_pack_mark(value) * 2 if filesystem else _pack_mark(value))

    def _lower_watermarks(self, value: int) -> None:
        """After a cut at ``value``: neither mark may claim bytes past it (the second never rises)."""
        second = self._marks()[1]
        self._write_marks(_pack_mark(value) + (b"" if second is None else _pack_mark(min(second, value))))

    def _write_marks(self, raw: bytes) -> None:
        fd = self._kept_mark
        if fd is None:
            try:
                fd = os.open(self._mark, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, self._mode)
            except OSError:
                return  # only a hint: without it, recovery falls back to the single-tail rule
            if self._keep_open and self._kept is not None:
                self._kept_mark = fd
        try:
            os.pwrite(fd, raw, 0)
        except OSError:
            pass
        finally:
            if fd != self._kept_mark:
                os.close(fd)

    # -- reading -----------------------------------------------------------------------------

    def read(self) -> Sequence[T]:
        """Return every record in order, without a lock. A missing file reads as empty.

        The returned sequence is the log's own cache: read it, never change it.

        A tail that may be an append in flight is not returned. Failures are never cached.

        Raises:
            JournalCorrupt: a damaged line that is not a torn tail.
            JournalReadInterrupted: the file could not be read.
        """
        with self._mutex:
            if self._kept is not None and self._still_here(self._kept):
                return self._scan(self._kept).records
            try:
                fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            except FileNotFoundError:
                return []
            except OSError as exc:
                raise JournalReadInterrupted(
                    f"cannot read {self._path}: {exc.strerror or exc}", path=self._path
                ) from exc
            try:
                return self._scan(fd).records
            finally:
                os.close(fd)

    def _scan(self, fd: int) -> _Scan[T]:
        """Bring the cache up to date from ``fd`` and classify what follows the good lines."""
        try:
            st = os.fstat(fd)
            if st.st_ino != self._cached_ino or st.st_size < self._cached_end:
                self._cached, self._cached_end, self._cached_ino = [], 0, st.st_ino
                self._durable = self._durable_fs = 0
            start = self._cached_end
            data = os.pread(fd, st.st_size - start, start) if st.st_size > start else b""
        except OSError as exc:
            raise JournalReadInterrupted(
                f"cannot read {self._path}: {exc.strerror or exc}", path=self._path
            ) from exc
        records, consumed, tail = self._parse(data, start)
        self._cached.extend(records)
        self._cached_end = start + consumed
        return _Scan(self._cached, self._cached_end, tail)

    def _parse(self, data: bytes, start: int) -> tuple[list[T], int, bytes]:
        """Decode complete lines of ``data``; return the records, bytes consumed and the tail."""
        records: list[T] = []
        pos = 0
        expected = (self._sequence(self._cached[-1]) + 1) if (self._sequence and self._cached) else 1
        while True:
            nl = data.find(b"\n", pos)
            if nl < 0:
                return records, pos, data[pos:]
            line = data[pos:nl]
            try:
                record = self._codec.decode(line)
                if self._sequence is not None and self._sequence(record) != expected:
                    raise LineDamaged(f"sequence {self._sequence(record)}, expected {expected}")
            except LineDamaged as damage:
                watermark = self.watermark()  # read only when there is damage to judge
                if not damage.torn or watermark is None or start + pos < watermark:
                    self._judge_damage(data, nl, damage, len(self._cached) + len(records), watermark)
                # at or past the watermark: never acknowledged, so a torn tail however it looks
                return records, pos, data[pos:]
            records.append(record)
            expected += 1
            pos = nl + 1

    def _judge_damage(
        self, data: bytes, nl: int, damage: LineDamaged, before: int, watermark: int | None
    ) -> None:
        """Raise ``JournalCorrupt`` unless the damaged line ending at ``nl`` begins a torn tail.

        A complete record that fails its own check (``torn=False``) is never what a crash leaves.
        Below the watermark every byte was made durable and acknowledged: damage there is damage.
        Without a watermark, the single-tail rule of the module docstring decides.
        """
        rest = data[nl + 1 :]
        later_good = any(self._continues(chunk, before + 1) for chunk in rest.split(b"\n")[:-1])
        if watermark is not None or not damage.torn or later_good:
            line_no = before + 1
            raise JournalCorrupt(
                f"{self._path} line {line_no} is damaged ({damage.reason}); the log fails closed: "
                "restore it from a backup or inspect it with `flows check`",
                path=self._path,
                line=line_no,
                reason=damage.reason,
            )

    def _continues(self, line: bytes, damaged_seq: int) -> bool:
        """Whether ``line`` is a record that could follow the damaged line numbered ``damaged_seq``.

        In a numbered log a line at or before that number is not a later record but stale bytes a
        power loss left in an unsynced append (a copy of an earlier line): part of the torn tail.
        """
        try:
            record = self._codec.decode(line)
        except LineDamaged:
            return False
        return self._sequence is None or self._sequence(record) > damaged_seq

    def iter_reverse(self) -> Iterator[T]:
        """Yield records newest first, reading the file backwards in blocks, without a lock.

        Only the lines actually consumed are decoded, so finding a recent record costs the size of
        the tail, not of the file. The newest segment is skipped when it does not decode (a torn or
        in-flight append); any other damaged line raises ``JournalCorrupt``.
        """
        try:
            fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise JournalReadInterrupted(
                f"cannot read {self._path}: {exc.strerror or exc}", path=self._path
            ) from exc
        try:
            yield from self._reverse(fd)
        finally:
            os.close(fd)

    def _reverse(self, fd: int) -> Iterator[T]:
        end = os.fstat(fd).st_size
        buf = b""
        newest = True  # the first segment seen, from the end: no newline after it means torn
        in_tail = True  # until a good line is found, undecodable lines may be a torn tail
        while True:
            if end > 0:
                size = min(_REVERSE_BLOCK, end)
                end -= size
                buf = os.pread(fd, size, end) + buf
            lines = buf.split(b"\n")
            # lines[0] may have its start in an earlier block, unless the file's start was reached.
            keep, complete = (lines[0], lines[1:]) if end > 0 else (b"", lines)
            for raw in reversed(complete):
                if newest:
                    newest = False
                    continue  # b"" when the file ends with a newline; else an unfinished append
                try:
                    record = self._codec.decode(raw)
                except LineDamaged as damage:
                    if in_tail and damage.torn:
                        continue
                    line_no = self._line_number(fd, raw)
                    raise JournalCorrupt(
                        f"{self._path} line {line_no} is damaged ({damage.reason}); the log fails "
                        "closed: restore it from a backup or inspect it with `flows check`",
                        path=self._path,
                        line=line_no,
                        reason=damage.reason,
                    ) from None
                in_tail = False
                yield record
            buf = keep
            if end == 0:
                return

    def _line_number(self, fd: int, raw: bytes) -> int:
        data = os.pread(fd, os.fstat(fd).st_size, 0)
        idx = data.find(raw + b"\n")
        return data.count(b"\n", 0, max(idx, 0)) + 1

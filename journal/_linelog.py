"""The durable line log: append-only lines, one record each, with torn-tail recovery.

One module serves every append-only file of the project: journal streams (whose codec adds a
sequence number and a checksum to each line) and the agent ledger (whose lines are the entry schema's
schema, bare). The log itself knows nothing of what a record means; its codec encodes a record as
one line and decodes a line back, raising ``LineDamaged`` when the bytes are not a valid record.

Files. Every open goes through ``open_regular``: a link is refused, never followed; a FIFO never
blocks an open; anything but a regular file at the log's path or its ``.lock`` is ``JournalCorrupt``
naming the path.

Durability: ``append`` writes the line and its newline with one ``os.write`` and syncs before it
returns. A new log file is fsync'd, and so is its directory, when it is created.

Recovery: an append that never returned can leave a *torn tail* — a part of its line, or, after a
power loss, zeros or stale bytes. On a locked open (``recover``) that tail is cut, so the next
append starts on its own line. Damage anywhere else fails closed with ``JournalCorrupt`` naming the
file and the line; it is never skipped.

The *watermark* decides. Whoever syncs the log records, in ``<path>.lock`` and with a checksum, how
many bytes that sync covered: always the end of a whole line (a write seen in part is not counted),
written after the sync returned, itself not fsync'd, so after a crash it can only be lower than the
truth. Every acknowledged append ends at or below it, so **below the watermark nothing is ever
cut**:

* a line that begins below the watermark and does not decode, is out of sequence, or has no end
  (its newline) at or below the watermark is damage;
* a file shorter than its watermark (or missing while the watermark counts bytes) lost
  acknowledged lines: damage, naming the first missing line. Only a cut lowers the watermark, and
  it records the lower mark (synced) before it truncates;
* past the watermark nothing was acknowledged: what does not decode there is a torn tail however
  it looks (several lines, when appenders shared a sync), and it is cut from the first such line.

A log without a readable watermark (never synced by this module, or its ``.lock`` damaged) falls
back to a narrower rule: the tail is everything from the first line that does not decode (or is a
copy of an earlier line, stale bytes a power loss left in an unsynced append) to the end of the
file, provided no later line decodes as a record after it. A locked open that finds no watermark
syncs the log once and records one. Everywhere, two kinds of line are damage and never a tear:
a complete record that fails its own check (``LineDamaged(torn=False)``, e.g. a checksum mismatch
on well-formed JSON), and in a numbered log a record whose number jumps forward (a crash leaves
part of a line, zeros or stale bytes, never a later record in an earlier one's place).

A second mark, after the first, records how far *file-system* syncs reached (``sync_to(end,
filesystem=True)``, Linux's ``syncfs``): a sync that also made durable every write made on the log's
file system before it began. A caller that wrote another file without fsync before appending (a
staged finding) needs that kind; a plain fsync of the log never raises the second mark.

Failed syncs. A sync that fails says nothing about which of the bytes it covered reached the disk,
and a later sync that succeeds says nothing either (the kernel may have dropped the pages whose
write-back failed). So the failing syncer *poisons* the log, in a third slot of ``<path>.lock``:
every byte past the watermark is in doubt. From then on no append whose bytes end past that point
is acknowledged, in any thread or process: each such caller gets ``JournalUnwritable``. The next
locked open cuts the log back to the poisoned point (every line past it belongs to a caller that
failed or will fail), makes that durable, and raises the log's *generation*; a caller whose bytes
were cut sees the new generation and fails instead of taking a later sync of other bytes for its
own. A caller never cuts anything but its own unwritten bytes (a failed ``write``); no
acknowledged line is ever cut. The mark file is untrusted bytes: marks this module never writes (a
poison below a watermark or past the end, a value of 2**63 or more) are ``JournalCorrupt`` naming
it, never obeyed, and what a poisoned end's cut takes is kept beside the log (``kept_cut_path``).
Every sync, cut and mark update of a log holds an exclusive ``flock`` on the log file, so they
happen one at a time across processes.

Formats. A codec may read lines of an older version's format (``LineOldFormat``, carrying the
record): a version writes its own format from its first append on and never goes back, so such a
line is taken only before the log's first line in the current format, and after one it is damage
(never a tear) from every reader. A read that goes on from its cache knows the format of the last
line it holds; a tail open whose last acknowledged line is old reads the line before it too; the
reverse reader gives an old-format line only once the line before it is read; ``read_at`` never
answers with one (the full read judges it). A codec that knows its log began in the current format
(the journal's, from ``run.json``) raises plain ``LineDamaged`` (torn=False) for such a line instead:
damage wherever it stands, the first lines too.

Lock-free readers (``read``, ``iter_reverse``) apply the same rules but never cut: a tail that may
be an append in flight is simply not a record yet, nor is a line past a poisoned point.

Opening for append costs the tail, not the file: ``recover_tail`` (and ``append`` or ``write``
without a prior ``recover``) decodes only from the last complete line at or below the watermark to
the end. Damage below the watermark is still found, by a full ``read`` or ``recover``.
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import logging
import os
import struct
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from stat import S_ISREG
from typing import Any, Generic, Protocol, TypeVar

from journal._errors import JournalCorrupt, JournalError, JournalUnwritable
from journal._fs import open_regular, read_failed
from staging import ensure_dir, failpoint, fsync_dir, have_syncfs, syncfs, write_all

T = TypeVar("T")
_logger = logging.getLogger("journal")
T_co = TypeVar("T_co", covariant=True)

_REVERSE_BLOCK = 64 * 1024
_SCAN_BLOCK = 1024 * 1024  # a forward read's block (shorter than any codec's ``max_line`` it reads)
_LINE_BLOCK = 4096  # the first read of a one-line lookup (``read_at``): most lines are shorter
_NO_POISON = 2**64 - 1
_MAX_MARK = 2**63  # no offset or count the marks hold reaches it (an ``off_t`` is signed 64 bits)
_MARKS_LEN = 92  # plain mark (12), file-system mark (12), state (68): see _STATE
_LEAD_ROUNDS = 8  # a sync's leader syncs for the threads waiting behind it at most this often


_MARK = struct.Struct("<Q")
# poison, generation, the last 4 cuts, the file-system poison and the generation it applies up to
_STATE = struct.Struct("<8Q")
_CUTS = 4  # how many recent cuts the state remembers (a caller older than that just fails)
_NO_CUTS: tuple[int | None, ...] = (None,) * _CUTS


def _crc(raw: bytes) -> bytes:
    return zlib.crc32(raw).to_bytes(4, "little")


def _pack_mark(value: int) -> bytes:
    raw = _MARK.pack(value)
    return raw + _crc(raw)


def _unpack_mark(raw: bytes) -> int | None:
    """The watermark in ``raw``, or None when it is missing or torn (its checksum fails)."""
    if len(raw) != 12 or _crc(raw[:8]) != raw[8:]:
        return None
    value: int = _MARK.unpack_from(raw)[0]
    return value


def _unpack_state(raw: bytes) -> tuple[int | None, ...] | None:
    """The state's values (None for an unset one); all unset for a log that never had one; None
    when the slot is torn."""
    if not raw:
        return (None, 0, *_NO_CUTS, None, None)
    size = _STATE.size
    if len(raw) != size + 4 or _crc(raw[:size]) != raw[size:]:
        return None
    return tuple(None if v == _NO_POISON else v for v in _STATE.unpack_from(raw))


# The last state slot parsed, and the last packed (its values and bytes), by any log of the
# process: each is a function of the other alone, so one entry answers while the state stays put.
_LAST_STATE: list[tuple[bytes, tuple[int | None, ...] | None]] = [(b"?", None)]
_LAST_PACKED: list[tuple[tuple[int | None, ...], bytes]] = [((), b"")]


@dataclass(frozen=True)
class LineMarks:
    """What ``<path>.lock`` says: how far syncs reached, what is poisoned, the generation."""

    plain: int | None
    filesystem: int | None
    poison: int | None
    generation: int | None  # None: unreadable (torn), so nothing can be verified against it
    cuts: tuple[int | None, ...] = _NO_CUTS  # where the latest cuts that raised it were made
    # A failed file-system sync: callers of generations up to ``fs_poison_gen`` whose lines end past
    # ``fs_poison`` are refused a file-system sync (the writes it was to cover are in doubt).
    fs_poison: int | None = None
    fs_poison_gen: int | None = None

    @property
    def durable(self) -> int | None:
        if self.plain is None or self.filesystem is None:
            return self.filesystem if self.plain is None else self.plain
        return max(self.plain, self.filesystem)

    @classmethod
    def parse(cls, raw: bytes) -> LineMarks:
        # The state slot changes only with a cut or a poison; the watermarks with every sync, by
        # whichever writer made it: the last state read is parsed once, not again at each sync.
        state_raw = raw[24:_MARKS_LEN]
        last = _LAST_STATE[0]
        if last[0] == state_raw:
            state = last[1]
        else:
            state = _unpack_state(state_raw)
            _LAST_STATE[0] = (state_raw, state)
        plain, filesystem = _unpack_mark(raw[:12]), _unpack_mark(raw[12:24])
        if state is None:
            return cls(plain, filesystem, None, None)
        poison, generation, *cuts, fs_poison, fs_poison_gen = state
        return _new_marks(plain, filesystem, poison, generation, tuple(cuts), fs_poison, fs_poison_gen)

    def pack(self) -> bytes:
        empty = b"\0" * 12
        plain = empty if self.plain is None else _pack_mark(self.plain)
        filesystem = empty if self.filesystem is None else _pack_mark(self.filesystem)
        values = (self.poison, self.generation or 0, *self.cuts, self.fs_poison, self.fs_poison_gen)
        last = _LAST_PACKED[0]
        if last[0] == values:
            return plain + filesystem + last[1]
        raw = _STATE.pack(*(_NO_POISON if v is None else v for v in values))
        state = raw + _crc(raw)
        _LAST_PACKED[0] = (values, state)
        return plain + filesystem + state

    def holds(self, end: int, generation: int) -> bool:
        """Whether a caller that wrote bytes up to ``end`` in ``generation`` still has them: the
        same generation, or every cut since (of the few remembered) was made at or past ``end``."""
        if self.generation is None or self.generation == generation:
            return self.generation is not None
        since = self.generation - generation
        return 0 < since <= _CUTS and all(c is not None and end <= c for c in self.cuts[:since])


def _new_marks(  # noqa: PLR0917 - every field of the dataclass, in its order
    plain: int | None,
    filesystem: int | None,
    poison: int | None,
    generation: int | None,
    cuts: tuple[int | None, ...],
    fs_poison: int | None,
    fs_poison_gen: int | None,
) -> LineMarks:
    """``LineMarks(...)`` of every field, an equal value made without the frozen dataclass's
    ``__init__`` (one ``object.__setattr__`` per field: a marks parse or a sync's new marks, which
    other writers' syncs make at each append)."""
    marks: LineMarks = _new_object(LineMarks)
    fields = marks.__dict__
    fields["plain"], fields["filesystem"], fields["poison"], fields["generation"] = (
        plain,
        filesystem,
        poison,
        generation,
    )
    fields["cuts"], fields["fs_poison"], fields["fs_poison_gen"] = cuts, fs_poison, fs_poison_gen
    return marks


_new_object = object.__new__
_NO_MARKS = LineMarks(None, None, None, 0)
_UNKNOWN_MARKS = LineMarks(None, None, None, None)


def marks_claim_bytes(mark_path: str) -> bool:
    """Whether the mark file at ``mark_path`` says some bytes of its log were acknowledged (a
    durable mark above 0), or is a thing no reader takes (not a regular file): then a reader of the
    log must look at it even when the log is empty or missing, as that is damage. A missing, torn
    or unreadable mark file claims nothing (its log reads as one without marks)."""
    try:
        fd = open_regular(mark_path, os.O_RDONLY)
    except JournalCorrupt:
        return True
    except OSError:
        return False
    try:
        raw = os.pread(fd, _MARKS_LEN, 0)
    except OSError:
        return False
    finally:
        os.close(fd)
    return bool(LineMarks.parse(raw).durable)


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


class LineOldFormat(LineDamaged, Generic[T]):
    """Raised by a codec's ``decode`` for a line that holds a valid record in the format of an
    earlier version (``record``), which the line log reads only where that version could have
    written it: before the log's first line in the current format.

    A version writes lines in its own format from where it began to append, and never goes back:
    so a log is old-format lines, then current-format ones. An old-format line after a current
    one was written by no version there (copied or moved in from elsewhere); it is damage
    (``torn=False``) wherever it is. ``reason`` says what such a line is, for that error.
    """

    def __init__(self, record: T, reason: str) -> None:
        super().__init__(reason, torn=False)
        self.record = record


_Held = tuple[int, T, LineOldFormat[T]]  # an old-format line read backwards: offset, record, its word


def _after_current(old: LineOldFormat[T]) -> LineDamaged:
    """The damage an old-format line is where it follows a line in the current format."""
    return LineDamaged(
        f"{old.reason}, after a line in the current format, where no version writes one: a line "
        "copied or moved in from elsewhere",
        torn=False,
    )


class LineCodec(Protocol[T]):
    """How records become lines and back."""

    def encode(self, record: T, /) -> bytes:
        """Return the record as one line, without the newline; it must not contain ``b"\\n"``."""
        ...

    def decode(self, line: bytes, /) -> T:
        """Return the record a line holds (given without its newline); raise ``LineDamaged``."""
        ...


@dataclass
class _Parsed(Generic[T]):
    records: list[T]
    ends: list[int]  # the file offset just past each record's newline
    consumed: int  # bytes of the parsed data that hold good lines
    tail: bytes  # what follows them: empty, or a torn tail
    first_current: int | None = None  # the index of the first record in the current format, if any


class _Kept:
    """The descriptors a ``keep_open`` log holds between holds (``None`` while not open)."""

    __slots__ = ("log", "log_ino", "mark", "read_mark")

    def __init__(self) -> None:
        self.log: int | None = None
        self.log_ino = -1  # the inode ``log`` holds open (a descriptor's file never changes)
        self.mark: int | None = None
        self.read_mark: int | None = None

    def close(self) -> None:
        for fd in (self.log, self.mark, self.read_mark):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.log = self.mark = self.read_mark = None
        self.log_ino = -1

    def __del__(self, _close: Callable[[int], None] = os.close) -> None:
        """Only its log refers to this object: when the log is collected, so is this, and its
        descriptors close (as a ``weakref.finalize`` would, without what one costs to make).
        ``os.close`` is bound here: at interpreter exit the module's names may be gone."""
        for fd in (self.log, self.mark, self.read_mark):
            if fd is not None:
                try:  # noqa: SIM105 - no module's name at interpreter exit (``contextlib`` may be gone)
                    _close(fd)
                except OSError:
                    pass


class _Waiter:
    """A thread waiting for a sync of a log (``LineLog.sync_to``): how far, of which kind and
    generation, and the lock it sleeps on until a leader releases it."""

    __slots__ = ("end", "filesystem", "generation", "lead", "wake")

    def __init__(self, end: int, filesystem: bool, generation: int) -> None:
        self.end, self.filesystem, self.generation = end, filesystem, generation
        self.lead = False  # handed the lead (or took it), rather than covered
        self.wake = threading.Lock()


def _forked() -> None:
    """In a forked child: only the thread that forked runs here, so a lock another thread of the
    parent held at the fork (a log's, its sync's, the lead of its syncs) would be held for good,
    and the child's next hold or sync of that log would wait for ever. Each log starts over
    (``LineLog._after_fork``)."""
    me = threading.get_ident()
    for log in list(_LOGS):
        log._after_fork(me)


# Every line log of this process, so that a forked child starts each afresh (``_forked``)
_LOGS: weakref.WeakSet[LineLog[Any]] = weakref.WeakSet()
os.register_at_fork(after_in_child=_forked)


class LineLog(Generic[T]):
    """An append-only file of one-record lines.

    Args:
        path: the log file.
        codec: encodes and decodes records.
        mode: permission bits for a newly created file.
        sequence: when given, returns a record's sequence number; records must then be numbered
            1, 2, 3 … in file order, and a line out of sequence counts as damaged.
        keep_open: keep one descriptor of the log (and of its ``.lock``) open between holds.

    Appending requires the lock: use ``with log.locked(): log.append(r)`` (``recover()`` first when
    every record is wanted), or ``held()`` when the caller already holds a lock that covers this
    file (the journal's run lock). Several threads and processes may use one log; a lock is an open
    file of its own per holder.
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
        # With keep_open: one O_APPEND descriptor of the log for its life, one of the mark file, and
        # a reader's descriptor of the mark file. They close with close(), or when the log is
        # collected: a caller that drops a log without closing it leaks no descriptor.
        self._k = _Kept()  # closes its descriptors when collected with this log
        self._last_marks: tuple[bytes, LineMarks] | None = None  # the bytes last parsed, and what they say
        self._codec = codec
        # the longest line a record may be (a codec's ``max_line``, if it has one): a read stops at
        # a longer one, never holding it whole
        limit = getattr(codec, "max_line", None)
        self._max_line: int | None = limit if isinstance(limit, int) and limit > 0 else None
        self._mode = mode
        self._sequence = sequence
        self._mutex = threading.RLock()  # the cache and the held descriptor
        self._syncing = threading.Lock()  # this object's syncs, cuts and mark updates, one at a time
        # Group commit among this object's threads (``sync_to``): one leads, syncing round after round
        # for the threads waiting in ``_waiters``, and after each round wakes those it covered.
        self._group = threading.Lock()  # ``_leading`` and ``_waiters``
        self._leading = False
        self._waiters: list[_Waiter] = []
        self._durable = 0  # bytes this object knows durable (its own syncs), per inode and generation
        self._durable_fs = 0  # of those, covered by a file-system sync (never more than _durable)
        self._durable_ino: int | None = None
        self._durable_gen: int | None = None
        self._mark = f"{self._path}.lock"
        self._gen = 0  # the log's generation as of this object's last locked open
        self._poisoned: tuple[int, int] | None = None  # (generation, offset) should the mark not take it
        self._poisoned_fs: tuple[int, int] | None = None  # (offset, generation): the same, file-system
        # Verified records, the offset each ends at, and where the first begins (0 unless a tail
        # open started at the watermark); valid while the inode and the generation are the same.
        self._cached: list[T] = []
        self._ends: list[int] = []
        # The index in the cache of its first record in the codec's current format (None: none
        # yet); every record after it must be in that format too (``LineOldFormat``).
        self._first_current: int | None = None
        self._base = 0
        self._cached_end = 0
        self._cached_ino: int | None = None
        self._cached_gen: int | None = None
        # What the last read found: the file (device, inode, size), its marks and the cache after
        # (see ``_unchanged``); None until a read succeeds.
        self._read_stamp: tuple[object, ...] | None = None
        self._scanned: tuple[int, int, int, LineMarks] | None = None  # the last scan's file and marks
        self._fd: int | None = None
        self._owner: int | None = None
        self._settled = False  # a recovery ran under the current hold
        self._lock_fds: dict[int, int] = {}  # the lock descriptors ``locked`` holds -> their thread
        _LOGS.add(self)

    @property
    def path(self) -> Path:
        """The log file's path."""
        return self._path

    @property
    def generation(self) -> int:
        """How many times the log was cut back after a failed sync, as of the last locked open.

        Pass it to ``sync_to`` with the end a ``write`` returned: a sync then fails, rather than
        succeed for other bytes, when the caller's own bytes were cut in between.
        """
        return self._gen

    # -- locking ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self, timeout: float = 30.0) -> Iterator[LineLog[T]]:
        """Hold an exclusive lock on ``<path>.lock`` and the log open for appending.

        Creates the log (fsyncing it and its directory) when it does not exist.

        Raises:
            JournalCorrupt: the log or its lock is a link, directory, FIFO or other non-regular file.
            JournalUnwritable: the lock or the log could not be created or opened.
            portalocker.exceptions.LockException: the lock was not had within ``timeout`` seconds.
        """
        try:
            ensure_dir(self._path.parent)
            fd = open_regular(self._mark, os.O_RDWR | os.O_CREAT, self._mode)
        except OSError as exc:
            raise JournalUnwritable(
                f"cannot open the lock {self._mark}: {exc.strerror or exc}", path=self._mark
            ) from exc
        self._lock_fds[fd] = threading.get_ident()
        try:
            self._flock_within(fd, timeout)
            with self.held():
                yield self
        finally:
            self._lock_fds.pop(fd, None)
            os.close(fd)  # closing the file releases the flock

    def _after_fork(self, me: int) -> None:
        """In a forked child (``me``: the thread that forked, the only one here): fresh locks, no
        lead and no waiter of syncs. A hold of another thread's is gone: its lock descriptors and
        the kept ones are closed (the child's copies only: the parent's flocks stay as they are,
        and the child's own holds and syncs take flocks on descriptors of their own, which a copy
        of the parent's open file would share) and what it had read is read again. The forking
        thread's own hold, if any, goes on."""
        self._syncing, self._group = threading.Lock(), threading.Lock()
        self._leading, self._waiters = False, []
        self._mutex = threading.RLock()  # a hold of ``me`` lets go of the lock it took, as it began
        for fd, thread in list(self._lock_fds.items()):
            if thread != me:
                del self._lock_fds[fd]
                with contextlib.suppress(OSError):
                    os.close(fd)
        if self._owner == me:
            return
        kept, self._k = self._k, _Kept()
        kept.close()
        self._fd = self._owner = None
        self._settled = False
        self._read_stamp = self._scanned = None
        self._reset_cache(None, None)

    def _flock_within(self, fd: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    import portalocker  # only for its exception type: a reader never imports it

                    raise portalocker.exceptions.AlreadyLocked(
                        f"{self._mark} was held by another writer for over {timeout:g}s"
                    ) from None
                time.sleep(0.005)
            except OSError as exc:
                raise JournalUnwritable(
                    f"cannot lock {self._mark}: {exc.strerror or exc}", path=self._mark
                ) from exc

    @contextlib.contextmanager
    def held(self) -> Iterator[LineLog[T]]:
        """Open the log for appending, assuming the caller holds a lock that covers it.

        Raises:
            JournalCorrupt: the log is a link, directory, FIFO or other non-regular file.
            JournalUnwritable: the log could not be created or opened.
        """
        with self._mutex:
            fd = self._k.log if self._k.log is not None and self._still_here() else None
            if fd is None:
                fd = self._open_for_append()
                if self._keep_open:
                    self._forget_kept()
                    try:
                        self._k.log_ino = os.fstat(fd).st_ino
                    except OSError as exc:
                        os.close(fd)
                        raise JournalUnwritable(
                            f"cannot stat {self._path}: {exc.strerror or exc}", path=self._path
                        ) from exc
                    self._k.log = fd
            self._fd, self._owner, self._settled = fd, threading.get_ident(), False
            try:
                yield self
            finally:
                self._fd = self._owner = None
                self._settled = False
                if fd != self._k.log:
                    os.close(fd)

    def _still_here(self) -> bool:
        """Whether the kept descriptor is still the file at the log's path (not replaced, removed
        or a link): one ``lstat``, against the inode noted when it was opened."""
        try:
            return os.lstat(self._path_str).st_ino == self._k.log_ino
        except OSError:
            return False

    def _forget_kept(self) -> None:
        with self._syncing:
            self._k.close()

    def close(self) -> None:
        """Close descriptors kept open (``keep_open``); safe twice, and the log stays usable."""
        with self._mutex:
            self._forget_kept()

    def _open_for_append(self) -> int:
        flags = os.O_RDWR | os.O_APPEND
        try:
            return open_regular(self._path, flags)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise JournalUnwritable(
                f"cannot open {self._path} for appending: {exc.strerror or exc}", path=self._path
            ) from exc
        try:
            ensure_dir(self._path.parent)
            fd = open_regular(self._path, flags | os.O_CREAT | os.O_EXCL, self._mode)
        except FileExistsError:
            return self._open_for_append()
        except OSError as exc:
            raise JournalUnwritable(
                f"cannot create {self._path}: {exc.strerror or exc}", path=self._path
            ) from exc
        try:
            os.fsync(fd)
            fsync_dir(self._path.parent)
        except OSError as exc:
            os.close(fd)
            raise JournalUnwritable(
                f"cannot create {self._path}: {exc.strerror or exc}", path=self._path
            ) from exc
        return fd

    def _require_held(self) -> int:
        if self._fd is None or self._owner != threading.get_ident():
            raise RuntimeError(f"{self._path}: recover() and append() need locked() or held()")
        return self._fd

    @contextlib.contextmanager
    def _flocked(self, fd: int) -> Iterator[None]:
        """One sync, cut or mark update of this log at a time, across processes (call under
        ``_syncing``: threads sharing one descriptor share its flock)."""
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    # -- recovery --------------------------------------------------------------------------------

    def recover(self) -> Sequence[T]:
        """Cut a torn tail (and a poisoned end), if any, and return every record in order.

        Requires the lock. The returned sequence is the log's own cache: read it, never change it.

        Raises:
            JournalCorrupt: a damaged line that is not a torn tail (path and 1-based line named).
            JournalUnwritable: the cut could not be made durable.
            RuntimeError: called without the lock (``locked()`` or ``held()``) in this thread;
                a programming error of the caller, never a state on disk.
        """
        fd = self._require_held()
        self._settle(fd, full=True)
        return self._cached

    def recover_tail(self) -> int:
        """Cut a torn tail (and a poisoned end), if any, reading only past the watermark.

        Requires the lock. Costs the lines after the last acknowledged one, not the whole log:
        damage below the watermark is left for ``read`` or ``recover`` to find. Returns the offset
        just past the last good line (where the next append goes). ``append`` and ``write`` call
        this themselves when no recovery ran under the current hold.

        Raises:
            JournalCorrupt: the last acknowledged line, or a line in the tail that must be whole, is
                damaged.
            JournalUnwritable: the cut could not be made durable.
        """
        fd = self._require_held()
        self._settle(fd, full=False)
        return self._cached_end

    def _settle(self, fd: int, *, full: bool) -> None:
        marks = self._read_marks(strict=True)
        if marks.generation is None or self._poison_of(marks) is not None:
            marks = self._clear_poison(fd)
        tail, good_end = self._scan(fd, marks, full=full)
        if tail or (marks.plain is None and good_end > 0):
            # A torn tail goes; a log without a watermark gets one (the cut syncs what stays).
            marks = self._cut(fd, good_end, bump=False)
        self._gen = marks.generation or 0
        self._settled = True

    def _clear_poison(self, fd: int) -> LineMarks:
        """Cut the log back to its poisoned point (or repair a torn state); return the marks."""
        with self._syncing, self._flocked(fd):
            marks = self._read_marks(strict=True)
            poison = self._poison_of(marks)
            if poison is not None:
                if marks.poison is not None and marks.poison > os.fstat(fd).st_size:
                    raise self._bad_marks(
                        f"a poisoned point at byte {marks.poison}, past the log's end: a poison is "
                        "recorded at a watermark, and the log is cut only back to it"
                    )
                # Only this process's own record can lie below the watermark (its failed sync could
                # not record the poison, and another's sync acknowledged lines past it since):
                # acknowledged lines are never cut, so the cut stops at the watermark.
                at = poison if marks.durable is None else max(poison, marks.durable)
                return self._cut_locked(fd, at, marks, bump=True, keep=True)
            if marks.generation is None:  # only damage makes it unreadable under the flock
                fixed = LineMarks(
                    marks.plain, marks.filesystem, None, self._gen + 1, fs_poison=0, fs_poison_gen=self._gen
                )
                self._write_marks(fixed)
                return fixed
            return marks

    def _cut(self, fd: int, at: int, *, bump: bool) -> LineMarks:
        with self._syncing, self._flocked(fd):
            return self._cut_locked(fd, at, self._read_marks(strict=True), bump=bump)

    def _cut_locked(self, fd: int, at: int, marks: LineMarks, *, bump: bool, keep: bool = False) -> LineMarks:
        """Cut the log at ``at``, sync it, record the marks; under ``_syncing`` and the flock.

        ``bump`` raises the generation: the cut took bytes of callers still waiting on a sync
        (a poisoned end), who must fail rather than be answered by a later sync of other bytes.
        ``keep`` copies the bytes cut to ``.<name>.cut-<generation>`` beside the log first
        (``_keep_cut``): a poisoned end is cut on the mark file's word alone.
        """
        if marks.durable is not None and at < marks.durable:
            marks = self._lower_marks(marks, at)
        poison = self._poison_of(marks)
        if poison is not None and marks.durable is not None:
            poison = max(poison, marks.durable)  # acknowledged lines are never in doubt (``_poison``)
        kept_poison = poison if poison is not None and poison < at else None
        generation = (marks.generation if marks.generation is not None else self._gen) + (1 if bump else 0)
        if bump:
            cuts = (at, *marks.cuts[: _CUTS - 1])
        else:  # bytes past ``at`` are gone for every caller, whenever it wrote
            cuts = tuple(None if c is None else min(c, at) for c in marks.cuts)
        after = LineMarks(
            # the sync below makes every byte before ``at`` durable; but past a poison that stays
            # (another's failed sync, below a caller's own cut bytes) a sync proves nothing, and a
            # mark is never recorded past a poisoned point
            plain=at if kept_poison is None else kept_poison,
            filesystem=None if marks.filesystem is None else min(marks.filesystem, at),
            poison=kept_poison,
            generation=generation,
            cuts=cuts,
            fs_poison=marks.fs_poison,  # scoped by generation: it outlives the cut
            fs_poison_gen=marks.fs_poison_gen,
        )
        try:
            if os.fstat(fd).st_size > at:
                if keep:
                    self._keep_cut(fd, at, generation)
                os.ftruncate(fd, at)
            os.fsync(fd)
            # A cleared poison must stay cleared after a crash, or a recovery would cut lines
            # acknowledged after this point: the mark file is synced when one is cleared.
            self._write_marks(after, sync=poison is not None and kept_poison is None)
        except OSError as exc:
            # The failed sync may have lost bytes below ``at`` too: in doubt from the watermark.
            self._poison(marks, at if marks.durable is None else min(at, marks.durable))
            raise JournalUnwritable(
                f"cannot cut {self._path} back to byte {at}: {exc.strerror or exc}; check the disk, "
                "then retry (the next locked open tries again)",
                path=self._path,
            ) from exc
        self._poisoned = None if kept_poison is None else (generation, kept_poison)
        if self._durable_gen == marks.generation:
            self._durable, self._durable_fs = min(self._durable, at), min(self._durable_fs, at)
            self._durable_gen = generation
        self._drop_cached_past(at, marks.generation, generation)
        return after

    def kept_cut_path(self, generation: int) -> Path:
        """Where the cut that raised the log to ``generation`` kept the bytes it took."""
        return self._path.with_name(f".{self._path.name}.cut-{generation}")

    def _keep_cut(self, fd: int, at: int, generation: int) -> None:
        """Copy the log's bytes from ``at`` to its end into ``kept_cut_path(generation)``, synced
        with its folder, before a poisoned end is cut: nothing there was acknowledged when the
        poison is true, but the mark file is untrusted bytes (a stale copy restored with an older
        log, a crafted one), and what it makes the log cut is kept, not destroyed.

        The name is one anybody can predict: whatever lies there (a crash's earlier copy of the
        same cut, a planted link or FIFO) is removed unread and the copy created anew, never
        written through. Read and written in blocks: a crafted poison far below a huge end costs
        disk, not memory.

        Raises:
            OSError: the copy could not be made durable (the cut is then not made).
        """
        kept = self.kept_cut_path(generation)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(kept)
        out = os.open(kept, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, self._mode)
        try:
            pos = at
            while chunk := os.pread(fd, _SCAN_BLOCK, pos):
                write_all(out, chunk)
                pos += len(chunk)
            os.fsync(out)
        finally:
            os.close(out)
        fsync_dir(self._path.parent)
        _logger.warning(
            "%s: cut back to byte %d after a failed sync (the mark file %s says so); the %d bytes "
            "cut, which no sync acknowledged if the mark file is true, are kept in %s",
            self._path,
            at,
            self._mark,
            pos - at,
            kept,
        )

    def _lower_marks(self, marks: LineMarks, at: int) -> LineMarks:
        """Record (durably) that no byte from ``at`` on is acknowledged, before a cut there: a
        reader never sees a file shorter than its mark, unless lines were lost."""
        lowered = replace(
            marks,
            plain=None if marks.plain is None else min(marks.plain, at),
            filesystem=None if marks.filesystem is None else min(marks.filesystem, at),
        )
        try:
            self._write_marks(lowered, sync=True)
        except OSError as exc:
            raise JournalUnwritable(
                f"cannot record the cut of {self._path} at byte {at} in {self._mark}: "
                f"{exc.strerror or exc}; check the disk, then retry",
                path=self._mark,
            ) from exc
        return lowered

    def _drop_cached_past(self, at: int, before: int | None, generation: int) -> None:
        if self._cached_gen is None or self._cached_gen != before or at < self._base:
            self._reset_cache(self._cached_ino, generation)
            return
        keep = bisect.bisect_right(self._ends, at)
        if keep < len(self._cached):
            self._cached, self._ends = self._cached[:keep], self._ends[:keep]  # new lists: see index()
            if self._first_current is not None and self._first_current >= keep:
                self._first_current = None
            self._cached_end = self._ends[-1] if self._ends else self._base
        self._cached_gen = generation

    # -- appending -------------------------------------------------------------------------------

    def append(self, record: T) -> None:
        """Write ``record`` as one line and sync it. Requires the lock.

        On failure the line is taken back out before this raises (when the disk allows; else the
        next locked open does it), so no part of it remains.

        Raises:
            ValueError: the codec produced a line with a newline in it.
            JournalUnwritable: the line could not be written or made durable.
            RuntimeError: called without the lock (``locked()`` or ``held()``) in this thread;
                a programming error of the caller, never a state on disk.
        """
        fd = self._require_held()
        end = self._write(fd, [record])[-1]
        try:
            self.sync_to(end, generation=self._gen)
        except JournalError:
            with contextlib.suppress(JournalError):
                self._settle(fd, full=False)  # cuts the poisoned end: this line
            raise

    def write(self, records: Sequence[T]) -> int:
        """Write ``records`` as lines with one ``write``, without fsync; return the end offset.

        Requires the lock. The records are not durable until ``sync_to`` of the returned offset
        returns; call it after letting go of the lock, so that appenders in other threads and
        processes overlap their syncs (group commit). On a failed write the file is cut back to
        where it was.

        Raises:
            ValueError: the codec produced a line with a newline in it.
            JournalUnwritable: the lines could not be written.
            RuntimeError: called without the lock (``locked()`` or ``held()``) in this thread;
                a programming error of the caller, never a state on disk.
        """
        fd = self._require_held()
        ends = self._write(fd, records) if records else []
        return ends[-1] if ends else self._cached_end

    def write_records(self, records: Sequence[T]) -> list[int]:
        """Like ``write``, but return the offset just past each record's line, in order."""
        return self._write(self._require_held(), records) if records else []

    def _write(self, fd: int, records: Sequence[T]) -> list[int]:
        if not self._settled:
            self._settle(fd, full=False)
        lines = [self._codec.encode(r) + b"\n" for r in records]
        for line in lines:
            if line.find(b"\n", 0, -1) >= 0:
                raise ValueError(f"{self._path}: an encoded record must be one line")
        start = self._cached_end
        ends: list[int] = []
        end = start
        for line in lines:
            end += len(line)
            ends.append(end)
        try:
            failpoint("linelog.before_append")
            write_all(fd, b"".join(lines))
        except OSError as exc:
            with contextlib.suppress(JournalError):
                self._cut(fd, start, bump=False)  # only this call's own bytes: nobody wrote after them
            raise JournalUnwritable(
                f"cannot append to {self._path}: {exc.strerror or exc}; check free space and the disk",
                path=self._path,
            ) from exc
        if self._first_current is None:  # a codec writes its current format
            self._first_current = len(self._cached)
        self._cached.extend(records)
        self._ends.extend(ends)
        self._cached_end = end
        return ends

    def unwrite(self, count: int, end: int) -> bool:
        """Cut the last ``count`` records back off, if they still end the file at ``end`` and no
        sync acknowledged them. Requires the lock. Returns whether it cut.

        Their writers' syncs then fail (the generation rises), whatever later syncs cover.
        """
        fd = self._require_held()
        self._settle(fd, full=True)
        if self._cached_end != end or os.fstat(fd).st_size != end or not 0 < count <= len(self._cached):
            return False
        start = self._ends[-count - 1] if count < len(self._ends) else self._base
        durable = self._read_marks(strict=True).durable
        if durable is not None and start < durable:
            return False  # acknowledged bytes are never cut
        try:
            self._cut(fd, start, bump=True)
        except JournalError:
            return False
        self._gen = self._cached_gen or 0
        return True

    def end(self) -> int:
        """The offset just past the last verified record (as of the last scan or write)."""
        return self._cached_end

    # -- syncing ---------------------------------------------------------------------------------

    def sync_to(self, end: int, *, filesystem: bool = False, generation: int | None = None) -> None:
        """Return once the log's first ``end`` bytes are durable; no lock is needed.

        Skips the sync when the watermark (the durable length recorded by whoever synced last, in
        this process or another) already covers ``end``; otherwise syncs and raises the watermark,
        so concurrent appenders share syncs. Threads of this object have one leader at a time: the
        others sleep until one of its rounds (``_lead_on``) made and marked a sync that covers their
        ``end``, or until it steps down and hands the longest waiting the lead (``_step_down``).

        With ``filesystem`` (where ``HAVE_SYNCFS``), the sync is a ``syncfs`` of the log's file
        system, and only such a sync counts: when this returns, every write made to any file on that
        file system before the log reached ``end`` is durable too. A caller that wrote a file
        without fsync, then appended, has both made durable by one device flush.

        ``generation`` is the log's ``generation`` when the caller wrote (default: as of this
        object's last locked open).

        Raises:
            JournalUnwritable: this sync, or an earlier one over these bytes, failed, or the bytes
                were cut since (see the module docstring); whether they survive is then unknown,
                and the caller must treat its records as not written (a resumed caller finds them
                if they did survive).
            ValueError: ``filesystem`` where syncfs is missing.
        """
        if filesystem and not have_syncfs():
            raise ValueError("a file-system sync needs syncfs, which this platform lacks")
        gen = self._gen if generation is None else generation
        if self._known_durable(end, filesystem, gen):
            return
        if not self._leading and self._covers(self._read_marks(strict=False), end, filesystem, gen):
            return  # another process's sync covers it
        me = None
        with self._group:  # threads wait for the leader's round that covers them
            if self._known_durable(end, filesystem, gen):
                return
            if self._leading:
                me = _Waiter(end, filesystem, gen)
                me.wake.acquire()  # released by the round that covers it, or to hand it the lead
                self._waiters.append(me)
            else:
                self._leading = True
        if me is not None:
            try:
                me.wake.acquire()
            except BaseException:  # interrupted while waiting: never leave the lead with nobody
                with self._group:
                    if me in self._waiters:
                        self._waiters.remove(me)
                    elif me.lead:
                        self._step_down()
                raise
            if not me.lead:
                return  # a round covered it: the leader saw a mark of this object's own sync do so
        try:
            with self._syncing:
                self._sync_locked(end, filesystem, gen, force=False, lead=True)
        finally:
            with self._group:
                self._step_down()

    def _step_down(self) -> None:
        """The leader is done: hand the lead to the thread that has waited longest (it syncs for
        itself and the rest, or fails as its own sync would), or leave none. Call under ``_group``."""
        if self._waiters:
            self._wake_covered()
        if self._waiters:
            successor = self._waiters.pop(0)
            successor.lead = True
            successor.wake.release()
        else:
            self._leading = False

    def sync_now(
        self, *, filesystem: bool = False, end: int | None = None, generation: int | None = None
    ) -> None:
        """Sync the log (with ``filesystem``, its whole file system) now, whatever the marks say:
        for a caller whose own writes elsewhere must be covered by a sync that begins after them.

        With ``end``, it also fails as ``sync_to`` does when the first ``end`` bytes were poisoned
        or cut (``generation`` as there).

        Raises:
            JournalUnwritable: the sync failed, or the bytes up to ``end`` are not acknowledged.
        """
        if filesystem and not have_syncfs():
            raise ValueError("a file-system sync needs syncfs, which this platform lacks")
        with self._syncing:
            self._sync_locked(end, filesystem, self._gen if generation is None else generation, force=True)

    def _known_durable(self, end: int, filesystem: bool, generation: int) -> bool:
        """Whether this object's own syncs (of the kind asked) cover the first ``end`` bytes."""
        durable = self._durable_fs if filesystem else self._durable
        return durable >= end and self._durable_ino == self._cached_ino and self._durable_gen == generation

    def _covers(self, marks: LineMarks, end: int, filesystem: bool, generation: int) -> bool:
        """Whether ``marks`` say the first ``end`` bytes, of this generation, are durable."""
        if not marks.holds(end, generation):
            return False
        poison = self._poison_of(marks)
        if poison is not None and end > poison:
            return False
        if filesystem and self._fs_refused(marks, end, generation):
            return False
        mark = marks.filesystem if filesystem else marks.durable
        return mark is not None and mark >= end

    def _sync_locked(
        self, end: int | None, filesystem: bool, generation: int, *, force: bool, lead: bool = False
    ) -> None:
        """Sync unless (with ``end``, not ``force``) a sync that finished while this one queued
        covered it; then check that it covered the caller's own bytes. Call under ``_syncing``.
        With ``lead`` (``sync_to``'s leader), then sync on for the threads waiting (``_lead_on``).

        One syncer of the log at a time, across processes: an exclusive ``flock`` on the log file
        itself is held from the check of the marks to the new mark, so processes that queue behind
        a sync find the mark it left and need not sync again.
        """
        kept = self._k.log
        try:
            fd = kept if kept is not None else open_regular(self._path, os.O_RDONLY)
        except OSError as exc:
            raise JournalUnwritable(
                f"cannot open {self._path}: {exc.strerror or exc}", path=self._path
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # ``_flocked``, without a generator's context: once per append
            try:
                marks = self._read_marks(strict=True)
                if end is not None:
                    self._refuse_lost(end, generation, marks, filesystem=filesystem)
                    if not force and self._covers(marks, end, filesystem, generation):
                        return  # the sync this one queued behind covered it
                covered = self._sync_and_mark(fd, marks, filesystem)
                if end is not None and covered < end:
                    raise JournalUnwritable(
                        f"{self._path} ends before byte {end}: this append's line is gone; retry it",
                        path=self._path,
                    )
                if lead:
                    self._lead_on(fd, filesystem, generation)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            if fd != kept:
                os.close(fd)
        try:
            failpoint("linelog.after_append")
        except OSError as exc:
            raise JournalUnwritable(
                f"{self._path} was synced, then failed: {exc.strerror or exc}", path=self._path
            ) from exc

    def _lead_on(self, fd: int, filesystem: bool, generation: int) -> None:
        """The leader's rounds for the others: wake the threads its last sync covered, and while
        threads of this object wait for bytes of the same kind and generation past it, sync again
        (at most ``_LEAD_ROUNDS`` times; then a waiter leads). Call under ``_syncing`` and the flock,
        once the leader's own sync returned: no thread hands the syncer's turn to another between
        rounds, and the flock and the marks are not taken and read again.

        A round that fails poisons the log (``_sync_and_mark``), as any sync does, and ends the
        rounds without raising (the leader's own append was acknowledged): no waiter it covered is
        woken as covered; each is handed the lead in turn (``_step_down``), finds the poison
        (``_refuse_lost``) and fails as its own sync would have. No waiter returns without a mark
        of this object's own sync that covers it."""
        kind = (filesystem, generation)
        for _ in range(_LEAD_ROUNDS):
            if not self._waiters:  # read without the lock: one that joins now is seen at ``_step_down``
                return
            with self._group:
                self._wake_covered()
                want = max((w.end for w in self._waiters if (w.filesystem, w.generation) == kind), default=0)
            if want == 0:
                return
            try:
                marks = self._read_marks(strict=True)
                self._refuse_lost(want, generation, marks, filesystem=filesystem)
                if self._sync_and_mark(fd, marks, filesystem) < want:
                    return  # cut since: the waiters find out themselves
            except JournalError:
                return

    def _wake_covered(self) -> None:
        """Wake, and take off the list, every waiter a mark of this object's own syncs covers (what
        ``sync_to`` returns on). Call under ``_group``."""
        covered = [w for w in self._waiters if self._known_durable(w.end, w.filesystem, w.generation)]
        for w in covered:
            self._waiters.remove(w)
            w.wake.release()

    def _sync_and_mark(self, fd: int, marks: LineMarks, filesystem: bool) -> int:
        """Sync, record the new mark, and return how many bytes the sync covered."""
        try:
            st = os.fstat(fd)
        except OSError as exc:
            raise JournalUnwritable(
                f"cannot stat {self._path}: {exc.strerror or exc}", path=self._path
            ) from exc
        covered, ino = st.st_size, st.st_ino  # every byte written before the sync is covered
        try:
            # A write may be visible in part (a large one, or another process's in flight): the
            # mark covers whole lines only, so a reader may hold every line below it to be whole.
            covered = self._whole_lines_end(fd, covered)
        except OSError as exc:
            raise JournalUnwritable(
                f"cannot read {self._path}: {exc.strerror or exc}", path=self._path
            ) from exc
        poison = self._poison_of(marks)
        if poison is not None:
            covered = min(covered, poison)  # never claim a byte in doubt
        try:
            failpoint("linelog.before_fsync")
            if filesystem:
                syncfs(fd)
            else:
                os.fsync(fd)
        except OSError as exc:
            self._poison(marks, None, filesystem=filesystem)
            raise JournalUnwritable(
                f"cannot make {self._path} durable: {exc.strerror or exc}; the appends it held are not "
                "acknowledged (a resumed run finds any that survived); check the disk",
                path=self._path,
            ) from exc
        # Acknowledge only what the mark records: a later failure poisons from the mark, so a
        # byte acknowledged above it could be cut.
        after = _new_marks(
            covered,
            covered if filesystem else marks.filesystem,
            marks.poison,
            marks.generation,
            marks.cuts,
            marks.fs_poison,
            marks.fs_poison_gen,
        )
        try:
            failpoint("linelog.before_mark")
            self._write_marks(after)
        except OSError as exc:
            raise JournalUnwritable(
                f"synced {self._path} but could not record it in {self._mark}: {exc.strerror or exc}; "
                "the appends it held are not acknowledged, but they are on disk and stand as records "
                "(the run's resume, or flows check --repair, publishes them): check the disk, then "
                "resume the run rather than append them again",
                path=self._mark,
            ) from exc
        if ino == self._cached_ino:
            if self._durable_gen != marks.generation or self._durable_ino != ino:
                self._durable = self._durable_fs = 0
            self._durable, self._durable_ino, self._durable_gen = (
                max(self._durable, covered),
                ino,
                marks.generation,
            )
            if filesystem:
                self._durable_fs = max(self._durable_fs, covered)
        return covered

    @classmethod
    def _whole_lines_end(cls, fd: int, size: int) -> int:
        """The end of the last whole line in the first ``size`` bytes (one byte read, as a rule)."""
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return size
        return cls._last_newline_before(fd, size) + 1

    def _refuse_lost(self, end: int, generation: int, marks: LineMarks, *, filesystem: bool = False) -> None:
        if not marks.holds(end, generation):
            raise JournalUnwritable(
                f"{self._path} was cut back after a failed sync, and this append's line was part of "
                "what was cut: it is not written; retry it",
                path=self._path,
            )
        poison = self._poison_of(marks)
        if poison is not None and end > poison:
            raise JournalUnwritable(
                f"a sync of {self._path} failed, so bytes past {poison} may never reach the disk and "
                f"this append (ending at byte {end}) is not acknowledged; retry it (the next append "
                "cuts them) and check the disk",
                path=self._path,
            )
        if filesystem and self._fs_refused(marks, end, generation):
            raise JournalUnwritable(
                f"a file-system sync of {self._path} failed, so what it was to make durable with this "
                "append (files written before it) may never reach the disk; the append is not "
                "acknowledged: retry it and check the disk",
                path=self._path,
            )

    def _poison_of(self, marks: LineMarks) -> int | None:
        """Where the doubtful bytes begin: the mark file's word, or this process's own record."""
        poison = marks.poison
        if self._poisoned is not None and self._poisoned[0] == marks.generation:
            poison = self._poisoned[1] if poison is None else min(poison, self._poisoned[1])
        return poison

    def _fs_poison_of(self, marks: LineMarks) -> tuple[int, int] | None:
        """(offset, up to generation) of a failed file-system sync: the mark file's, or our own."""
        found = None
        if marks.fs_poison is not None and marks.fs_poison_gen is not None:
            found = (marks.fs_poison, marks.fs_poison_gen)
        own = self._poisoned_fs
        if own is not None:
            found = own if found is None else (min(found[0], own[0]), max(found[1], own[1]))
        return found

    def _fs_refused(self, marks: LineMarks, end: int, generation: int) -> bool:
        """Whether a failed file-system sync leaves a caller's file-system sync unanswerable: it
        wrote in a generation the failure reached, and its line ends past the file-system mark
        the failure found (everything it wrote elsewhere before may be lost)."""
        found = self._fs_poison_of(marks)
        return found is not None and generation <= found[1] and end > found[0]

    def _poison(self, marks: LineMarks, at: int | None, *, filesystem: bool = False) -> None:
        """Record that the bytes from ``at`` (default: the watermark) on are in doubt, and with
        ``filesystem`` that file-system syncs up to now failed past the file-system mark. Call
        under ``_syncing`` and the flock."""
        if at is None:
            at = marks.durable
            if at is None:  # no readable mark (a damaged lock file): what this object knows
                at = self._durable if self._durable_gen == marks.generation else 0
        poison = self._poison_of(marks)
        at = at if poison is None else min(at, poison)
        generation = marks.generation if marks.generation is not None else self._gen
        self._poisoned = (generation, at)  # this process honours it even if the mark file cannot
        fs_poison = self._fs_poison_of(marks)
        if filesystem:
            fs_at = marks.filesystem or 0
            fs_poison = (fs_at, generation) if fs_poison is None else (min(fs_poison[0], fs_at), generation)
            self._poisoned_fs = fs_poison
        # The mark file never holds a poison below its watermark (``_refuse_impossible``): should
        # this process's own record be lower, another's sync acknowledged the lines since.
        recorded = at if marks.durable is None else max(at, marks.durable)
        after = replace(marks, poison=recorded, generation=generation)
        if fs_poison is not None:
            after = replace(after, fs_poison=fs_poison[0], fs_poison_gen=fs_poison[1])
        with contextlib.suppress(OSError):
            self._write_marks(after)

    # -- the marks: how much of the log is known durable, what is in doubt -----------------------

    def watermark(self) -> int | None:
        """The durable length last recorded, or None when no appender has recorded one.

        It is written (without fsync) only after a sync returned, so after a crash it can only
        be lower than the truth: bytes past it are not known durable and were never acknowledged.
        """
        return self._read_marks(strict=False).durable

    def filesystem_watermark(self) -> int | None:
        """How far file-system syncs (``sync_to(end, filesystem=True)``) reached, or None."""
        return self._read_marks(strict=False).filesystem

    def _read_marks(self, *, strict: bool) -> LineMarks:
        """The marks; missing reads as none. An unreadable file is unknown, or with ``strict``
        (a decision depends on it) ``JournalUnwritable``. A non-regular file is ``JournalCorrupt``."""
        try:
            kept = self._k.mark if self._k.mark is not None else self._k.read_mark
            if kept is not None:
                raw = os.pread(kept, _MARKS_LEN, 0)
            else:
                fd = open_regular(self._mark, os.O_RDONLY)
                try:
                    raw = os.pread(fd, _MARKS_LEN, 0)
                finally:
                    if self._keep_open and self._k.read_mark is None:
                        self._k.read_mark = fd  # the file is only ever rewritten in place
                    else:
                        os.close(fd)
        except FileNotFoundError:
            return _NO_MARKS
        except OSError as exc:
            if strict:
                raise JournalUnwritable(
                    f"cannot read {self._mark}: {exc.strerror or exc}", path=self._mark
                ) from exc
            return _UNKNOWN_MARKS
        last = self._last_marks
        if last is not None and last[0] == raw:
            return last[1]
        marks = LineMarks.parse(raw)
        self._refuse_impossible(marks)
        self._last_marks = (raw, marks)
        return marks

    def _refuse_impossible(self, marks: LineMarks) -> None:
        """``JournalCorrupt`` naming the mark file when its checksummed values are ones this module
        never writes: a CRC is not a signature, and a locked open obeys the poison by cutting.

        A value of 2**63 or more (no file is that long; no count of cuts reaches it); a poisoned
        point below a watermark (a poison is recorded at the watermark, and no sync raises a mark
        past it while it stands): obeyed, its cut would take acknowledged lines."""
        values = (
            marks.plain,
            marks.filesystem,
            marks.poison,
            marks.generation,
            *marks.cuts,
            marks.fs_poison,
            marks.fs_poison_gen,
        )
        reason = None
        for v in values:  # a plain loop: a generator's frames cost more than these ten compares
            if v is not None and v >= _MAX_MARK:
                reason = f"a value of {max(v for v in values if v is not None):,}, past any file or count"
                break
        poison, durable = marks.poison, marks.durable
        if reason is None and poison is not None and durable is not None and poison < durable:
            reason = (
                f"a poisoned point at byte {marks.poison}, below its durable mark at byte "
                f"{marks.durable} (lines a sync acknowledged)"
            )
        if reason is not None:
            raise self._bad_marks(reason)

    def _bad_marks(self, reason: str) -> JournalCorrupt:
        return JournalCorrupt(
            f"{self._mark} holds marks this journal never writes ({reason}); nothing was cut: "
            f"restore the file from a backup, or move it aside (the log {self._path} then reads by "
            "the rule for a log without a watermark), then retry",
            path=self._mark,
            line=0,
            reason=f"impossible marks: {reason}",
        )

    def _write_marks(self, marks: LineMarks, *, sync: bool = False) -> None:
        """Write every slot of the mark file. Call under ``_syncing`` and the flock.

        Raises:
            OSError: the file could not be opened or written (or synced, with ``sync``).
            JournalCorrupt: it is not a regular file.
        """
        fd = self._k.mark
        if fd is None:
            fd = open_regular(self._mark, os.O_RDWR | os.O_CREAT, self._mode)
            if self._keep_open and self._k.log is not None:
                self._k.mark = fd
        try:
            raw = marks.pack()
            if os.pwrite(fd, raw, 0) != len(raw):
                raise OSError(0, "a short write")
            if sync:
                os.fsync(fd)
        finally:
            if fd != self._k.mark:
                os.close(fd)
        if marks.generation is not None:  # what these bytes parse back to: the next read need not
            self._last_marks = (raw, marks)

    def _set_watermark(self, value: int, *, filesystem: bool = False) -> None:
        """Record ``value`` as the (plain, or both) watermark, leaving the rest (tests use it)."""
        fd = open_regular(self._mark, os.O_RDWR | os.O_CREAT, self._mode)
        try:
            os.pwrite(fd, _pack_mark(value) * 2 if filesystem else _pack_mark(value), 0)
        finally:
            os.close(fd)

    # -- reading ---------------------------------------------------------------------------------

    def read(self) -> Sequence[T]:
        """Return every record in order, without a lock. A missing file reads as empty.

        The returned sequence is the log's own cache: read it, never change it.

        A tail that may be an append in flight is not returned, nor a line past a poisoned point.
        Failures are never cached.

        Raises:
            JournalCorrupt: a damaged line that is not a torn tail; the log or its lock is not a
                regular file.
            JournalReadInterrupted: the file could not be read.
        """
        with self._mutex:
            # a reader of a log unchanged since its last read has nothing to open
            marks = self._unchanged() if self._k.log is None else None
            if marks is None:
                marks = self._read_again()
            poison = self._poison_of(marks)
            if poison is not None and self._ends and self._ends[-1] > poison:
                return self._cached[: bisect.bisect_right(self._ends, poison)]
            return self._cached

    def reread(self) -> None:
        """Forget the records read so far: the next read decodes every line again (after the codec
        changed what it takes). What this object knows durable is kept."""
        with self._mutex:
            self._read_stamp = None
            self._scanned = None
            self._reset_cache(self._cached_ino, self._cached_gen)

    def stamp(self) -> tuple[object, ...] | None:
        """A token naming what the last ``read`` returned, while the file is still exactly what
        that read saw (``_unchanged``: the same file, size and marks, read to its end then); None
        otherwise, or while this object keeps the log open for appending (its reads go to the file).

        Two equal tokens mean no byte of the log changed between the two calls: a caller that
        took a token, then read, and later gets an equal token knows its read is still the whole
        log, and need not read again. One ``lstat`` and one read of the marks."""
        with self._mutex:
            stamp = self._read_stamp
            if stamp is None or self._k.log is not None or self._unchanged() is None:
                return None
            return stamp

    def _read_again(self) -> LineMarks:
        """Bring the cache up to date from the file (``_read_once``), again while a cut in another
        process came between the reads; return the marks."""
        for _ in range(3):
            marks, moved = self._read_once()
            if not moved:
                break
            after = self._read_marks(strict=False)
            if after.generation == marks.generation:
                break
        return marks

    def _cache_state(self) -> tuple[object, ...]:
        return (self._cached_end, self._cached_gen, self._cached_ino, self._base, len(self._cached))

    def _unchanged(self) -> LineMarks | None:
        """The marks, when the log is as this object's last read left it: the file at the path is
        the one read then (device and inode), of the size it had when that read began and read to
        its end then (no torn tail), its marks (watermarks, generation, poison) are the same, and
        the cache is untouched since. Append-only, its whole lines cut only under a new generation,
        the file then holds no byte that read did not see, so one ``lstat`` and one read of the
        marks answer, where a read opens and ``fstat``s the log. None otherwise, or when the marks
        cannot be verified."""
        stamp = self._read_stamp
        if stamp is None:
            return None
        try:
            st = os.lstat(self._path_str)
        except OSError:
            return None  # the full read says what is wrong
        marks = self._read_marks(strict=False)
        if (
            marks.generation is None
            or not S_ISREG(st.st_mode)
            or stamp
            != (  # ``_cache_state``, spelled out: this is every read's hot path
                st.st_dev,
                st.st_ino,
                st.st_size,
                marks,
                self._cached_end,
                self._cached_gen,
                self._cached_ino,
                self._base,
                len(self._cached),
            )
        ):
            return None
        return marks

    def _read_once(self) -> tuple[LineMarks, bool]:
        """Bring the cache up to date; return the marks and whether new bytes were read."""
        self._read_stamp = None
        kept = self._k.log if self._k.log is not None and self._still_here() else None
        if kept is not None:
            fd = kept
        else:
            try:
                fd = open_regular(self._path, os.O_RDONLY)
            except FileNotFoundError:
                marks = self._read_marks(strict=False)
                if marks.durable:
                    raise self._missing(None, 0, marks.durable) from None
                self._reset_cache(None, None)
                return _NO_MARKS, False
            except OSError as exc:
                raise read_failed(f"read {self._path}", self._path, exc) from exc
        try:
            marks = self._read_marks(strict=False)
            before = (self._cached_end, self._cached_gen)
            self._scanned = None
            self._scan(fd, marks, full=True)
            if self._scanned is not None:
                self._read_stamp = (*self._scanned, *self._cache_state())
            return marks, (self._cached_end, self._cached_gen) != before
        finally:
            if fd != kept:
                os.close(fd)

    def _reset_cache(self, ino: int | None, generation: int | None) -> None:
        if ino != self._cached_ino:
            self._durable = self._durable_fs = 0
        self._cached, self._ends = [], []  # new lists: holders of the old ones see the change
        self._first_current = None
        self._base = self._cached_end = 0
        self._cached_ino, self._cached_gen = ino, generation

    def _scan(self, fd: int, marks: LineMarks, *, full: bool) -> tuple[bytes, int]:
        """Bring the cache up to date from ``fd``; return the tail after it and where it begins.

        With ``full`` the cache holds every record from the start of the file; without, a cache
        started afresh begins at the last complete line at or below the watermark.
        """
        try:
            st = os.fstat(fd)
            size = st.st_size
            if marks.durable is not None and marks.durable > size:
                # A cut in another process lowers the mark before it truncates: look once more.
                marks = self._read_marks(strict=False)
                st = os.fstat(fd)
                size = st.st_size
            if (
                st.st_ino != self._cached_ino
                or size < self._cached_end
                or marks.generation is None
                or marks.generation != self._cached_gen
                or (full and self._base != 0)
            ):
                self._reset_cache(st.st_ino, marks.generation)
                if not full:
                    self._anchor(fd, marks, size)
            start = self._cached_end
            data, over = self._read_lines(fd, start, size)
        except OSError as exc:
            raise read_failed(f"read {self._path}", self._path, exc) from exc
        mark = marks.durable
        upto = None if mark is None else min(mark, size if over is None else over)
        parsed = self._parse(fd, data, start, upto, self._next_seq(), current=self._first_current is not None)
        if mark is not None and mark > size:
            raise self._missing(fd, size, mark)
        if over is not None and start + parsed.consumed == over:
            # a line longer than any record's: acknowledged (or with no watermark to tell), damage;
            # past the watermark, a torn tail (its first bytes stand for it: it is never read whole)
            if mark is None or over < mark:
                raise self._corrupt(fd, over, self._over_long())
            parsed.tail = os.pread(fd, 1, over) or b"\0"
        if self._first_current is None and parsed.first_current is not None:
            self._first_current = len(self._cached) + parsed.first_current
        self._cached.extend(parsed.records)
        self._ends.extend(parsed.ends)
        self._cached_end = start + parsed.consumed
        # Only a file read to its end with nothing left over can be known unchanged by its size: a
        # torn tail may be cut (no new generation) and the same number of bytes appended after it.
        self._scanned = (st.st_dev, st.st_ino, size, marks) if self._cached_end == size else None
        return parsed.tail, self._cached_end

    def _acknowledged_lines(self, fd: int, start: int, size: int, mark: int) -> bytes:
        """``_read_lines``; ``JournalCorrupt`` when a line below ``mark`` is longer than a record's."""
        region, over = self._read_lines(fd, start, size)
        if over is not None and over < mark:
            raise self._corrupt(fd, over, self._over_long())
        return region

    def _over_long(self) -> LineDamaged:
        limit = self._max_line or 0
        return LineDamaged(f"a line of more than {limit:,} bytes, over what a record's may hold")

    def _read_lines(self, fd: int, start: int, size: int) -> tuple[bytes, int | None]:
        """The bytes of ``fd`` from ``start`` to ``size``, read in blocks; with a ``max_line``, they
        stop where a line longer than it begins (and that offset is given too, else None): a huge
        line (a crafted one, a sparse file) is never read whole, nor held."""
        if size <= start:
            return b"", None
        if self._max_line is None:
            return os.pread(fd, size - start, start), None
        limit = self._max_line
        chunks: list[bytes] = []
        pos = line_start = start  # ``line_start``: where the line not yet ended begins
        while pos < size:
            chunk = os.pread(fd, min(_SCAN_BLOCK, size - pos), pos)
            if not chunk:
                break
            first = chunk.find(b"\n")
            ends = pos + (first if first >= 0 else len(chunk))  # the line's end, or the bytes so far
            if ends - line_start > limit:  # a block is shorter than the limit: only this line can be
                return b"".join(chunks)[: line_start - start], line_start
            if first >= 0:
                line_start = pos + chunk.rfind(b"\n") + 1
            chunks.append(chunk)
            pos += len(chunk)
        return b"".join(chunks), None

    def _trusted_mark(self, fd: int, marks: LineMarks, size: int) -> int | None:
        """The watermark; ``JournalCorrupt`` when it claims bytes the file does not have.

        Every byte below the mark was made durable and acknowledged, and only a cut lowers it
        (it records the lower mark before it truncates): a file shorter than its mark lost
        acknowledged lines (deleted, or the file cut short or replaced).
        """
        mark = marks.durable
        if mark is not None and mark > size:
            # every line the file has was acknowledged: name the first damaged one, if any (read in
            # blocks, stopping at a line longer than a record's: a crafted mark past a sparse file's
            # end does not make the whole file be read into memory)
            region = self._acknowledged_lines(fd, 0, size, size)
            self._parse(fd, region, 0, size, None if self._sequence is None else 1, current=False)
            raise self._missing(fd, size, mark)
        return mark

    def _missing(self, fd: int | None, size: int, mark: int) -> JournalCorrupt:
        line_no = 1 if fd is None else self._line_number(fd, size)
        reason = f"the file ends at byte {size} but its durable mark says {mark} bytes were acknowledged"
        return JournalCorrupt(
            f"{self._path} line {line_no} is missing ({reason}); the log fails closed: "
            "restore it from a backup or inspect it with `flows check`",
            path=self._path,
            line=line_no,
            reason=reason,
        )

    def _next_seq(self) -> int | None:
        if self._sequence is None:
            return None
        return self._sequence(self._cached[-1]) + 1 if self._cached else 1

    def _anchor(self, fd: int, marks: LineMarks, size: int) -> None:
        """Start an empty cache at the last complete line at or below the watermark (that line
        decoded: it was acknowledged), so a tail open reads only what follows it."""
        mark = self._trusted_mark(fd, marks, size)
        if not mark:
            return
        last_nl = self._line_start_before(fd, mark) - 1
        if last_nl < 0:
            return
        start = self._line_start_before(fd, last_nl)
        line = os.pread(fd, last_nl - start, start)
        record, old = self._decode_anchor(fd, start, line)
        if old is not None and start > 0:
            self._check_before_old(fd, start, old)
        self._cached, self._ends = [record], [last_nl + 1]
        self._first_current = 0 if old is None else None
        self._base, self._cached_end = start, last_nl + 1

    def _check_before_old(self, fd: int, start: int, old: LineOldFormat[T]) -> None:
        """``JournalCorrupt`` when the line before the old-format one at ``start`` (acknowledged,
        as it is) is in the current format, or does not decode: one line more, read only for an
        old-format anchor, so a tail open refuses a line copied in as the last one as a full read
        does."""
        before = self._line_start_before(fd, start - 1)
        try:
            self._codec.decode(os.pread(fd, start - 1 - before, before))
        except LineOldFormat:
            return
        except LineDamaged as damage:
            raise self._corrupt(fd, before, damage) from None
        raise self._corrupt(fd, start, _after_current(old))

    def _decode_anchor(self, fd: int, start: int, line: bytes) -> tuple[T, LineOldFormat[T] | None]:
        """The record of the acknowledged line ``line`` (at ``start``) a tail read begins from, and
        what the codec said of it when it is in an old format (else None); ``JournalCorrupt`` when
        it does not decode.

        A tail open knows nothing of the lines before it: an old-format anchor is taken (whether
        a line before it is in the current format is for a full read to find, as any damage below
        the watermark), and the lines after it may be in either format, in order."""
        try:
            return self._codec.decode(line), None
        except LineOldFormat as old:
            return old.record, old
        except LineDamaged as damage:
            raise self._corrupt(fd, start, damage) from None

    @staticmethod
    def _last_newline_before(fd: int, limit: int) -> int:
        """The offset of the last newline before ``limit``, or -1; read backwards in blocks."""
        pos = limit
        while pos > 0:
            size = min(_REVERSE_BLOCK, pos)
            pos -= size
            found = os.pread(fd, size, pos).rfind(b"\n")
            if found >= 0:
                return pos + found
        return -1

    def _line_start_before(self, fd: int, limit: int) -> int:
        """Where the line holding the byte before ``limit`` begins (0 for the file's first line),
        read backwards in blocks; with a ``max_line``, no further back than a line may be long:
        a longer one (all of it below the watermark, where this is asked) is ``JournalCorrupt``,
        so a crafted hole of gigabytes is not read through."""
        if self._max_line is None:
            return self._last_newline_before(fd, limit) + 1
        floor = max(0, limit - self._max_line - 1)
        pos = limit
        while pos > floor:
            size = min(_REVERSE_BLOCK, pos - floor)
            pos -= size
            found = os.pread(fd, size, pos).rfind(b"\n")
            if found >= 0:
                return pos + found + 1
        if floor == 0:
            return 0
        raise self._corrupt(fd, floor, self._over_long())

    def _parse(
        self, fd: int, data: bytes, start: int, mark: int | None, expected: int | None, *, current: bool
    ) -> _Parsed[T]:
        """Decode complete lines of ``data`` (which begins at file offset ``start``); ``current``
        says whether the line before it is in the codec's current format (``LineOldFormat``)."""
        out: _Parsed[T] = _Parsed([], [], 0, b"", 0 if current else None)
        first = out.first_current
        pos = 0
        # bound once: every line another writer appended since the last read passes here
        decode, sequence, find = self._codec.decode, self._sequence, data.find
        records, ends = out.records, out.ends
        while True:
            nl = find(b"\n", pos)
            if nl < 0:
                if mark is not None and start + pos < mark:  # acknowledged bytes without their end
                    damage = LineDamaged("the line has no end, yet the durable mark covers it", torn=False)
                    raise self._corrupt(fd, start + pos, damage)
                out.consumed, out.tail = pos, data[pos:]
                return out
            try:
                try:
                    record = decode(data[pos:nl])
                except LineOldFormat as old:
                    if first is not None:
                        raise _after_current(old) from None
                    record = old.record
                else:
                    if first is None:
                        first = out.first_current = len(records)
                if expected is not None and sequence is not None and sequence(record) != expected:
                    got = sequence(record)
                    # A crash leaves part of a line, zeros or stale bytes, never a later record in
                    # an earlier one's place: a forward jump is lines lost, wherever it is.
                    raise LineDamaged(f"sequence {got}, expected {expected}", torn=got < expected)
            except LineDamaged as damage:
                # The mark always falls at the end of a line (a sync records only whole lines),
                # so a line that begins below it was acknowledged whole.
                acknowledged = mark is not None and start + pos < mark
                if not damage.torn or acknowledged or mark is None:
                    self._judge_damage(fd, data, nl, damage, at=start + pos, expected=expected, mark=mark)
                # past the watermark: never acknowledged, so a torn tail however it looks
                out.consumed, out.tail = pos, data[pos:]
                return out
            records.append(record)
            ends.append(start + nl + 1)
            if expected is not None:
                expected += 1
            pos = nl + 1

    def _judge_damage(
        self,
        fd: int,
        data: bytes,
        nl: int,
        damage: LineDamaged,
        *,
        at: int,
        expected: int | None,
        mark: int | None,
    ) -> None:
        """Raise ``JournalCorrupt`` unless the damaged line ending at ``nl`` begins a torn tail.

        A complete record that fails its own check (``torn=False``) is never what a crash leaves.
        At or below the watermark every byte was made durable and acknowledged: damage there is
        damage. Without a watermark, the single-tail rule of the module docstring decides.
        """
        rest = data[nl + 1 :]
        later_good = any(self._continues(chunk, expected) for chunk in rest.split(b"\n")[:-1])
        if mark is not None or not damage.torn or later_good:
            raise self._corrupt(fd, at, damage)

    def _corrupt(self, fd: int, line_start: int, damage: LineDamaged) -> JournalCorrupt:
        line_no = self._line_number(fd, line_start)
        return JournalCorrupt(
            f"{self._path} line {line_no} is damaged ({damage.reason}); the log fails closed: "
            "restore it from a backup or inspect it with `flows check`",
            path=self._path,
            line=line_no,
            reason=damage.reason,
        )

    @staticmethod
    def _line_number(fd: int, offset: int) -> int:
        """The 1-based number of the line that begins at ``offset`` (counts the newlines before)."""
        count, pos = 0, 0
        while pos < offset:
            chunk = os.pread(fd, min(1 << 20, offset - pos), pos)
            if not chunk:
                break
            count += chunk.count(b"\n")
            pos += len(chunk)
        return count + 1

    def _continues(self, line: bytes, damaged_seq: int | None) -> bool:
        """Whether ``line`` is a record that could follow the damaged line numbered ``damaged_seq``.

        In a numbered log a line at or before that number is not a later record but stale bytes a
        power loss left in an unsynced append (a copy of an earlier line): part of the torn tail.
        """
        try:
            record = self._codec.decode(line)
        except LineOldFormat as old:  # a record all the same: what comes before it is no torn tail
            record = old.record
        except LineDamaged:
            return False
        return self._sequence is None or damaged_seq is None or self._sequence(record) > damaged_seq

    def read_at(self, offset: int) -> tuple[T, int] | None:
        """The acknowledged record whose line begins at ``offset``, and where its line ends; None
        when nothing there counts as one. No lock; nothing is cut; the cache is left alone.

        A line counts only if ``offset`` is a line start (0, or just after a newline), its line
        ends (newline included) at or below the watermark (a line past it was never acknowledged,
        however it looks), before a poisoned point, and it decodes under the codec (its checksum
        and fields). None says only "not here": the caller falls back to a full ``read``, which
        judges damage (a damaged line below the watermark fails that read closed). The line's
        place in the sequence is not checked (that needs the lines before it): a caller that needs
        it compares the record's own sequence number with what it expects. Nor is an old-format
        line's place (``LineOldFormat``: only the lines before it say whether one may stand there),
        so such a line is None too, and the full read judges it.

        Raises:
            JournalCorrupt: the log or its lock is not a regular file.
            JournalReadInterrupted: the file could not be read.
        """
        if type(offset) is not int or offset < 0:
            return None
        try:
            fd = open_regular(self._path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise read_failed(f"read {self._path}", self._path, exc) from exc
        try:
            found = self._acknowledged_line(fd, offset)
        except OSError as exc:
            raise read_failed(f"read {self._path}", self._path, exc) from exc
        finally:
            os.close(fd)
        if found is None:
            return None
        try:
            return self._codec.decode(found[0]), found[1]
        except LineDamaged:  # an old-format line too: only the lines before it say if it may be one
            return None

    def _acknowledged_line(self, fd: int, offset: int) -> tuple[bytes, int] | None:
        """The line beginning at ``offset`` (without its newline) and its end, when ``offset`` is
        a line start and the line ends at or below the watermark and before a poisoned point."""
        marks = self._read_marks(strict=False)
        mark = marks.durable
        limit = mark if mark is not None and mark <= os.fstat(fd).st_size else None  # else: read judges
        poison = self._poison_of(marks)
        if limit is not None and poison is not None:
            limit = min(limit, poison)
        if limit is None or offset >= limit:
            return None  # nothing acknowledged there
        # One read usually holds the byte before the line (a newline where a line begins) and the
        # whole line; a longer line is read on in blocks.
        pos = offset - 1 if offset > 0 else 0
        chunk = os.pread(fd, min(_LINE_BLOCK, limit - pos), pos)
        if offset > 0:
            if chunk[:1] != b"\n":
                return None  # mid-line: not where a line begins
            chunk = chunk[1:]
            pos += 1
        chunks: list[bytes] = []
        while chunk:
            nl = chunk.find(b"\n")
            if nl >= 0:
                chunks.append(chunk[:nl])
                return b"".join(chunks), pos + nl + 1
            chunks.append(chunk)
            pos += len(chunk)
            if pos >= limit:
                break
            chunk = os.pread(fd, min(_REVERSE_BLOCK, limit - pos), pos)
        return None  # no newline at or below the watermark: never acknowledged

    def starts(self, count: int) -> list[int] | None:
        """Where each of the first ``count`` records of the cache (as ``read`` last returned them)
        begins in the file; None when the cache does not start at the file's first line."""
        with self._mutex:
            if self._base != 0 or count > len(self._ends):
                return None
            return [0, *self._ends[: count - 1]] if count else []

    def iter_reverse(self) -> Iterator[T]:
        """Yield records newest first, reading the file backwards in blocks, without a lock.

        Only the lines actually consumed are decoded, so finding a recent record costs the size of
        the tail, not of the file. Past the watermark the forward rules apply (a torn or in-flight
        tail is skipped, as is a poisoned end); at or below it every line must decode, and a
        damaged one raises ``JournalCorrupt``, as a full ``read`` would.

        Raises:
            JournalCorrupt: a damaged line among those read; the log is not a regular file.
            JournalReadInterrupted: the file could not be read.
        """
        for _, record in self.iter_reverse_at():
            yield record

    def iter_reverse_at(self) -> Iterator[tuple[int, T]]:
        """Like ``iter_reverse``, with the file offset at which each record's line begins."""
        try:
            fd = open_regular(self._path, os.O_RDONLY)
        except FileNotFoundError:
            mark = self._read_marks(strict=False).durable
            if mark:
                raise self._missing(None, 0, mark) from None
            return
        except OSError as exc:
            raise read_failed(f"read {self._path}", self._path, exc) from exc
        try:
            yield from self._reverse(fd)
        except OSError as exc:
            raise read_failed(f"read {self._path}", self._path, exc) from exc
        finally:
            os.close(fd)

    def _reverse(self, fd: int) -> Iterator[tuple[int, T]]:
        marks = self._read_marks(strict=False)
        size = os.fstat(fd).st_size
        if marks.durable is not None and marks.durable > size:  # a cut lowers it first: look again
            marks = self._read_marks(strict=False)
            size = os.fstat(fd).st_size
        mark = self._trusted_mark(fd, marks, size)
        if not mark:
            yield from self._reverse_guessing(fd, size)
            return
        last_nl = self._line_start_before(fd, mark) - 1
        start = self._line_start_before(fd, last_nl) if last_nl >= 0 else 0
        region = self._acknowledged_lines(fd, start, size, mark)
        tail: list[tuple[int, T]] = []
        expected: int | None = 1 if self._sequence is not None else None
        skip = 0
        # An old-format line is yielded only once the line before it is known to be no line in the
        # current format (``LineOldFormat``): a reader that stops at it never takes a line copied in.
        held: _Held[T] | None = None
        below: int | None = None  # the number of the oldest record read (the next must be one less)
        if last_nl >= 0:  # the last acknowledged line: it must decode
            anchor, old = self._decode_anchor(fd, start, region[: last_nl - start])
            if old is not None:
                held = (start, anchor, old)
            else:
                tail.append((start, anchor))
            expected = self._sequence(anchor) + 1 if self._sequence is not None else None
            skip = last_nl + 1 - start
            below = self._sequence(anchor) if self._sequence is not None else None
        current = last_nl >= 0 and held is None  # the format of the line before the parsed ones
        parsed = self._parse(fd, region[skip:], start + skip, mark, expected, current=current)
        begin = start + skip
        for record, end in zip(parsed.records, parsed.ends, strict=True):
            tail.append((begin, record))
            begin = end
        poison = self._poison_of(marks)
        for at, record in reversed(tail):
            if poison is None or at < poison:
                yield at, record
        if last_nl >= 0:  # else the first line is the last acknowledged one: nothing lies before it
            yield from self._reverse_below(fd, start, held, below)

    def _reverse_below(
        self, fd: int, start: int, held: _Held[T] | None, below: int | None
    ) -> Iterator[tuple[int, T]]:
        """The lines before ``start`` (all acknowledged), newest first: every one must decode, in
        sequence (``below``: the number of the line at ``start``), and ``held`` (that line, when it
        is in an old format) is yielded once the line before it allows it."""
        for at, raw in self._backward_lines(fd, start):  # all acknowledged: every line must decode
            try:
                record, old = self._decode_any(raw)
                if below is not None and self._sequence is not None:
                    # each line holds the number just below the one after it (none lost or moved)
                    got = self._sequence(record)
                    if got != below - 1:
                        raise LineDamaged(f"sequence {got}, expected {below - 1}", torn=False)
                    below -= 1
            except LineDamaged as damage:
                raise self._corrupt(fd, at, damage) from None
            held = yield from self._release(fd, held, at, record, old)
        if held is not None:
            yield held[0], held[1]
        if below is not None and below != 1:  # the first line is not record 1: lines were lost
            raise self._corrupt(fd, 0, LineDamaged(f"the log begins at sequence {below}, not 1", torn=False))

    def _decode_any(self, raw: bytes) -> tuple[T, LineOldFormat[T] | None]:
        """The record ``raw`` holds, in either format, and the codec's word when it is an old one."""
        try:
            return self._codec.decode(raw), None
        except LineOldFormat as old:
            return old.record, old

    def _release(
        self, fd: int, held: _Held[T] | None, at: int, record: T, old: LineOldFormat[T] | None
    ) -> Generator[tuple[int, T], None, _Held[T] | None]:
        """Going backwards, the line at ``at`` (``record``; ``old`` when in an old format) comes
        just before ``held``: yield ``held`` unless this line, in the current format, shows it to
        be an old-format line after a current one (``JournalCorrupt`` naming ``held``); then yield
        this line, or hold it too when it is an old-format one. Returns what is held now."""
        if held is not None:
            if old is None:
                raise self._corrupt(fd, held[0], _after_current(held[2]))
            yield held[0], held[1]
        if old is not None:
            return (at, record, old)
        yield at, record
        return None

    def _reverse_guessing(self, fd: int, size: int) -> Iterator[tuple[int, T]]:
        """Without a watermark: skip undecodable lines at the end (a torn tail) until a good one."""
        in_tail = True
        held: _Held[T] | None = None
        for at, raw in self._backward_lines(fd, size):
            try:
                record, old = self._decode_any(raw)
            except LineDamaged as damage:
                if in_tail and damage.torn:
                    continue
                raise self._corrupt(fd, at, damage) from None
            in_tail = False
            held = yield from self._release(fd, held, at, record, old)
        if held is not None:
            yield held[0], held[1]

    def _backward_lines(self, fd: int, limit: int) -> Iterator[tuple[int, bytes]]:
        """Yield (offset, line) for the newline-terminated lines before ``limit``, newest first
        (what follows the last newline before ``limit`` is not a line yet).

        Each byte is read once and copied a bounded number of times, however long a line is: the
        blocks of a line longer than a block are kept apart until its start is read, then joined
        once. With a ``max_line``, a line found longer than it is ``JournalCorrupt`` as soon as
        its held bytes pass it (it is never held whole), named by its line.
        """
        limit_line = self._max_line
        pos, started = limit, False
        held: list[bytes] = []  # the line being read, its blocks newest read (earliest) last
        held_len = 0
        line_end = limit  # the offset of the newline that ends the line being read
        while pos > 0:
            size = min(_REVERSE_BLOCK, pos)
            pos -= size
            data = os.pread(fd, size, pos)
            if not started:
                nl = data.rfind(b"\n")
                if nl < 0:
                    continue  # after the last newline before ``limit``: an unfinished line
                data, started, line_end = data[:nl], True, pos + nl
            if b"\n" not in data:
                held.append(data)  # the middle of a long line: its start is in an earlier block
                held_len += len(data)
                if limit_line is not None and held_len > limit_line:
                    raise self._corrupt(fd, pos, self._over_long())
                continue
            parts = data.split(b"\n")
            held.append(parts[-1])
            raw = b"".join(reversed(held))
            at = line_end - len(raw)
            if limit_line is not None and len(raw) > limit_line:
                raise self._corrupt(fd, at, self._over_long())
            yield at, raw
            for raw in reversed(parts[1:-1]):
                at, line_end = at - 1 - len(raw), at - 1
                if limit_line is not None and len(raw) > limit_line:
                    raise self._corrupt(fd, at, self._over_long())
                yield at, raw
            line_end = at - 1
            held, held_len = [parts[0]], len(parts[0])  # its start may lie in an earlier block
            if limit_line is not None and held_len > limit_line:
                raise self._corrupt(fd, pos, self._over_long())
        if started:  # the file's first line
            raw = b"".join(reversed(held))
            if limit_line is not None and len(raw) > limit_line:
                raise self._corrupt(fd, 0, self._over_long())
            yield 0, raw

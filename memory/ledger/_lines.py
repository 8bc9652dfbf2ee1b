"""Reading the agent's line files directly: safe opens, the readable end, lines by offset, backwards.

The ledger and the activity log are ``journal.LineLog`` files; their writers go through the line
log (lock, torn-tail cut, fsync). Their readers go through here, so every reader of the agent's
files applies one rule and costs what it reads, not the file's length:

* **Opens** never follow a link and never block (``O_NOFOLLOW | O_NONBLOCK``), and what they open
  must be a regular file, or ``LedgerNotAFile`` names it. A FIFO where the ledger belongs would
  otherwise hang a reader forever.
* **The readable end** (``readable_end``) is found from the end of the file: the bytes after the last
  line that decodes may only be a torn or in-flight append — text without its newline, or complete
  lines that do not decode as a tear would, all at or past the line log's durability watermark. Any
  other undecodable line there is acknowledged damage and raises ``journal.JournalCorrupt`` naming
  the line, and so does a watermark past the last whole line (an acknowledged line lost its end, or
  the file lost lines). A line that is well-formed JSON but breaks the schema is damage wherever it
  is. Every line between the watermark and the readable end must decode too: each append is its
  own write and fsync, so a crash leaves damage only at the very end, and a line that does not decode
  *before* one that does is damage, never a tear. The readable end reads those lines (the bytes past
  the watermark, a line or none but after a crash), so the readers that go backwards and stop early
  (``sail status``, ``sail why``) give the verdict the full forward reads give.
* **Appends** judge the tail the same way before the line log cuts it (``ready_to_append``): the
  line log alone cuts from the first line past its watermark that does not decode, complete lines
  after it included, where every reader here fails closed.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from journal import JournalCorrupt, JournalReadInterrupted, LineCodec, LineDamaged, LineLog
from memory.ledger._errors import LedgerNotAFile

T = TypeVar("T")

_BLOCK = 64 * 1024
_FIRST_BLOCK = 4096
_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


def ready_to_append(log: LineLog[T], lines: LineFile[T]) -> None:
    """Make a held line log ready to append: its end judged as every reader judges it (``lines``,
    the same file), then a torn tail cut.

    Where the line log can (``recover_tail``), only its tail past the durability watermark is read,
    so a tick's appends cost the same on a ten-line log and a million-line one; a line log without
    it recovers by reading every line (``recover``).

    Raises:
        journal.JournalCorrupt: the end of the file is damage, not a tear (nothing is cut).
    """
    fd = lines.open()
    if fd is not None:
        try:
            lines.readable_end(fd)
        finally:
            os.close(fd)
    tail = getattr(log, "recover_tail", None)
    if callable(tail):
        tail()
    else:
        log.recover()


def describe(mode: int) -> str:
    """What kind of file ``mode`` is, in words."""
    for test, what in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return what
    return "not a regular file"


def require_regular(*paths: Path) -> None:
    """Raise ``LedgerNotAFile`` for each path that exists and is not a regular file (links included).

    Called before the line log opens a file or its lock, so that nothing blocks on a FIFO.
    """
    for path in paths:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise JournalReadInterrupted(f"cannot inspect {path}: {exc.strerror or exc}", path=path) from exc
        if not stat.S_ISREG(st.st_mode):
            raise LedgerNotAFile(path, describe(st.st_mode))


def open_regular(path: Path) -> int | None:
    """Open ``path`` for reading, never following a link or blocking; None when it does not exist.

    Raises:
        LedgerNotAFile: the path is a link, directory, FIFO, socket or device.
        journal.JournalReadInterrupted: it could not be opened (permission, I/O).
    """
    try:
        fd = os.open(path, _FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LedgerNotAFile(path, "a symbolic link") from None
        raise JournalReadInterrupted(f"cannot open {path}: {exc.strerror or exc}", path=path) from exc
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        raise JournalReadInterrupted(f"cannot inspect {path}: {exc.strerror or exc}", path=path) from exc
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise LedgerNotAFile(path, describe(mode))
    return fd


def pread(fd: int, size: int, offset: int, path: Path) -> bytes:
    """``os.pread``, with an I/O error translated to ``JournalReadInterrupted``."""
    try:
        return os.pread(fd, size, offset)
    except OSError as exc:
        raise JournalReadInterrupted(f"cannot read {path}: {exc.strerror or exc}", path=path) from exc


def file_size(fd: int, path: Path) -> int:
    """The size of the open file."""
    try:
        return os.fstat(fd).st_size
    except OSError as exc:
        raise JournalReadInterrupted(f"cannot inspect {path}: {exc.strerror or exc}", path=path) from exc


def line_sha256(raw: bytes) -> str:
    """The digest a snapshot keeps of one line (its bytes without the newline)."""
    return hashlib.sha256(raw).hexdigest()


@dataclass(frozen=True)
class Line(Generic[T]):
    """One decoded line: where it starts, its bytes (without newline) and its record."""

    offset: int
    raw: bytes
    record: T

    @property
    def end(self) -> int:
        """The offset just past its newline."""
        return self.offset + len(self.raw) + 1


class LineFile(Generic[T]):
    """Lock-free reads of one line file (the ledger, or the activity log) through its codec.

    Args:
        path: the file.
        codec: decodes lines (raises ``LineDamaged``).
    """

    def __init__(self, path: Path, codec: LineCodec[T]) -> None:
        self.path = path
        self.codec = codec
        self._log: LineLog[T] = LineLog(path, codec)

    def open(self) -> int | None:
        """Open the file for reading (see ``open_regular``); the lock file is checked too."""
        require_regular(Path(f"{self.path}.lock"))
        return open_regular(self.path)

    def watermark(self) -> int | None:
        """The line log's durability watermark: every byte below it was acknowledged."""
        return self._log.watermark()

    def decode(self, raw: bytes, offset: int, fd: int) -> T:
        """Decode a complete line that must be good (not part of a tail); damage raises."""
        try:
            return self.codec.decode(raw)
        except LineDamaged as damage:
            raise self._corrupt(fd, offset, damage.reason) from None

    def readable_end(self, fd: int) -> int:
        """The offset just past the last line that decodes, after judging what follows it.

        Raises:
            journal.JournalCorrupt: a line after it is acknowledged damage (see the module docstring).
        """
        watermark = self.watermark()  # before the size: an append in between only adds bytes
        for _ in range(2):
            end = self._last_good_end(fd, file_size(fd, self.path), watermark)
            if watermark is None or watermark <= end:
                return end
            again = self.watermark()  # a cut lowers the mark before it truncates: look once more
            if again == watermark:
                break
            watermark = again
        reason = f"bytes up to {watermark} were acknowledged, but the whole lines end at {end}"
        raise self._corrupt(fd, end, reason)

    def _last_good_end(self, fd: int, size: int, watermark: int | None) -> int:
        end: int | None = None
        for offset, raw in self.reverse_raw(fd, size):
            if end is not None and (watermark is None or offset < watermark):
                break  # below the watermark: acknowledged lines, for the full reads to check
            try:
                self.codec.decode(raw)
            except LineDamaged as damage:
                if end is not None:  # before a line that decodes: not where a crash leaves a tear
                    reason = f"{damage.reason}; a later line decodes, so it is no torn append"
                    raise self._corrupt(fd, offset, reason) from None
                if not damage.torn or (watermark is not None and offset < watermark):
                    raise self._corrupt(fd, offset, damage.reason) from None
                continue  # a torn or in-flight append: not a record yet
            if end is None:
                end = offset + len(raw) + 1
        return end or 0

    def read_all(self) -> list[T]:
        """Every record, oldest first, by the rules above; a missing file reads as empty.

        Raises:
            journal.JournalCorrupt: a damaged line (path and line named).
            LedgerNotAFile: the file or its lock is not a regular file.
        """
        fd = self.open()
        if fd is None:
            return []
        try:
            end = self.readable_end(fd)
            return [line.record for line in self.forward(fd, 0, end)]
        finally:
            os.close(fd)

    def reverse_raw(self, fd: int, end: int) -> Iterator[tuple[int, bytes]]:
        """Complete lines before ``end``, newest first, as ``(offset, bytes)``.

        Text after the last newline before ``end`` (an unfinished append) is not a line. Each byte
        is read once and copied a bounded number of times, however long a line is: the blocks of a
        line longer than a block are kept apart until its start is read, then joined once.
        """
        pos, buf, started = end, b"", False  # buf holds the file's bytes [pos + len(held), …)
        held: list[bytes] = []  # blocks read inside one long line, newest read (earliest) last
        block = _FIRST_BLOCK  # most readers want a few lines: start small, then read more at once
        while pos > 0:
            size = min(block, pos)
            pos -= size
            data = pread(fd, size, pos, self.path)
            block = min(_BLOCK, block * 4)
            if not started:
                nl = data.rfind(b"\n")
                if nl < 0:
                    continue  # after the last newline before ``end``: an unfinished append
                data, started = data[: nl + 1], True
            elif pos > 0 and b"\n" not in data:
                held.append(data)  # the middle of a long line: its start is in an earlier block
                continue
            buf = data + b"".join(reversed(held)) + buf
            held.clear()
            parts = buf[:-1].split(b"\n")
            partial = parts.pop(0) if pos > 0 else None  # its start may lie in an earlier block
            line_end = pos + len(buf) - 1  # the offset of the newline ending the newest part
            for raw in reversed(parts):
                start = line_end - len(raw)
                yield start, raw
                line_end = start - 1
            if partial is None:
                return
            buf = partial + b"\n"

    def iter_reverse(self, fd: int, end: int) -> Iterator[Line[T]]:
        """Decoded lines before ``end`` (a readable end), newest first; damage raises."""
        for offset, raw in self.reverse_raw(fd, end):
            yield Line(offset, raw, self.decode(raw, offset, fd))

    def forward_raw(self, fd: int, start: int, end: int) -> Iterator[tuple[int, bytes]]:
        """Complete lines in ``[start, end)``, oldest first, as ``(offset, bytes)``."""
        pos = start
        rest: list[bytes] = []  # the unfinished line's chunks: joined once, when its end is read
        while pos < end:
            chunk = pread(fd, min(4 * _BLOCK, end - pos), pos, self.path)
            if not chunk:
                return
            pos += len(chunk)
            if b"\n" not in chunk:
                rest.append(chunk)
                continue
            data = b"".join([*rest, chunk]) if rest else chunk
            base = pos - len(data)
            lines = data.split(b"\n")
            tail = lines.pop()
            rest = [tail] if tail else []
            for raw in lines:
                yield base, raw
                base += len(raw) + 1

    def forward(self, fd: int, start: int, end: int) -> Iterator[Line[T]]:
        """Decoded lines in ``[start, end)`` (``end`` a readable end), oldest first; damage raises."""
        for offset, raw in self.forward_raw(fd, start, end):
            yield Line(offset, raw, self.decode(raw, offset, fd))

    def line_at(self, fd: int, offset: int, sha256: str) -> Line[T] | None:
        """The line that starts at ``offset`` if its digest is ``sha256``; None when it is not there."""
        size = file_size(fd, self.path)
        if offset < 0 or offset >= size or (offset and pread(fd, 1, offset - 1, self.path) != b"\n"):
            return None
        buf = b""
        while True:
            chunk = pread(fd, 4096, offset + len(buf), self.path)
            if not chunk:
                return None
            nl = chunk.find(b"\n")
            if nl >= 0:
                raw = buf + chunk[:nl]
                break
            buf += chunk
            if len(buf) > 1 << 20:
                return None
        if line_sha256(raw) != sha256:
            return None
        try:
            return Line(offset, raw, self.codec.decode(raw))
        except LineDamaged:
            return None

    def _corrupt(self, fd: int, offset: int, reason: str) -> JournalCorrupt:
        line_no = self._line_number(fd, offset)
        return JournalCorrupt(
            f"{self.path} line {line_no} is damaged ({reason}); the log fails closed: restore it "
            "from a backup or inspect it with `flows check`",
            path=self.path,
            line=line_no,
            reason=reason,
        )

    def count_lines(self, fd: int, end: int) -> int:
        """How many newlines the first ``end`` bytes hold (reads them: the whole prefix)."""
        return self._line_number(fd, end) - 1

    def _line_number(self, fd: int, offset: int) -> int:
        """1-based number of the line starting at ``offset`` (reads the prefix: failure path only)."""
        count, pos = 0, 0
        while pos < offset:
            chunk = pread(fd, min(4 * _BLOCK, offset - pos), pos, self.path)
            if not chunk:
                break
            count += chunk.count(b"\n")
            pos += len(chunk)
        return count + 1

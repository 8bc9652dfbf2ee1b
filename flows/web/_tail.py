"""Reading an append-only line log backwards from any line boundary, read-only and without a lock.

The agent page pages a ledger of a million lines newest first, so a page must cost its own lines:
each line comes with its byte offset, and the offset of the oldest line shown is where the next
(older) page starts. Where the lines end is the agent's own readers' judgement (``readable_end``,
the ledger's ``Ledger.lines.readable_end``): past the last line that decodes there may only be an
append in flight or a torn one beyond the line log's durability watermark; an acknowledged line that
is damaged or missing there fails closed, as ``sail ledger`` and ``sail status`` do. Every line
before that end must decode, or the read fails closed with ``journal_corrupt``, naming the file and
its 1-based line.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Generic, TypeVar

from journal import JournalCorrupt, JournalReadInterrupted, LineDamaged

T = TypeVar("T")
_BLOCK = 64 * 1024


class TailReader(Generic[T]):
    """Lines of the file at ``path`` decoded by ``decode``, newest first, each with its offset.

    Args:
        path: the log; a missing file reads as empty.
        decode: turns one line (without its newline) into a record; raises ``LineDamaged``.
        readable_end: the offset just past the last line that can be read, from the open file
            (raises ``journal.JournalCorrupt`` for an acknowledged line damaged or missing at the end).
    """

    def __init__(
        self, path: Path, decode: Callable[[bytes], T], readable_end: Callable[[int], int]
    ) -> None:
        self.path = path
        self._decode = decode
        self._readable_end = readable_end

    def size(self) -> int:
        """The file's size now (0 when it is missing)."""
        try:
            return os.stat(self.path).st_size
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise JournalReadInterrupted(
                f"cannot read {self.path}: {exc.strerror or exc}", path=self.path
            ) from exc

    def backwards(
        self,
        before: int | None = None,
        *,
        lines: int | None = None,
    ) -> Iterator[tuple[int, T]]:
        """Yield ``(offset, record)`` newest first, from the end (``before`` None) or from the line
        boundary ``before`` (the offset of a line already read; the lines before it come next).

        Every line is decoded (and so checked) before the next is read. ``lines`` stops the read
        after that many lines (a window of the newest lines, whatever they hold).

        Raises:
            ValueError: ``before`` is not the start of a line within the readable end.
            journal.JournalCorrupt: a damaged line (path and line named), or an acknowledged one
                damaged or missing at the end.
            journal.JournalReadInterrupted: the file could not be read.
        """
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            if before:
                raise ValueError(f"offset {before} is past the end of the missing {self.path}") from None
            return
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise self._not_a_file("a symbolic link") from None
            raise JournalReadInterrupted(
                f"cannot read {self.path}: {exc.strerror or exc}", path=self.path
            ) from exc
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise self._not_a_file("not a regular file")
            yield from self._backwards(fd, before, lines)
        finally:
            os.close(fd)

    def _not_a_file(self, what: str) -> JournalCorrupt:
        return JournalCorrupt(
            f"{self.path} is {what}; a log is never read through a link or from a device: put the "
            "real file back",
            path=self.path,
            line=0,
            reason=what,
        )

    def _backwards(
        self, fd: int, before: int | None, lines: int | None
    ) -> Iterator[tuple[int, T]]:
        readable = self._readable_end(fd)
        end = readable if before is None else before
        if not 0 <= end <= readable or (before and os.pread(fd, 1, end - 1) != b"\n"):
            raise ValueError(f"offset {end} is not the start of a line of {self.path}")
        newest = True  # the (empty) segment after the last newline read
        left = lines  # how many more lines may be read (None: all)
        # the bytes read from ``buf_start`` on whose line's start is not read yet, newest block first:
        # joined once that start is found, so a line of any length costs its length (joining them on
        # each block, as this did, cost its length squared: a 40 MB line held the server 16 s)
        pending: list[bytes] = []
        buf_start = end
        while buf_start > 0:
            start = max(0, buf_start - _BLOCK)
            block = os.pread(fd, buf_start - start, start)
            buf_start = start
            if start > 0 and b"\n" not in block:
                pending.append(block)
                continue
            buf = block + b"".join(reversed(pending))
            parts = buf.split(b"\n")
            # parts[0] may begin in an earlier block, unless the file's start was reached
            head, complete = (parts[0], parts[1:]) if start > 0 else (b"", parts)
            offsets, pos = [], start + (len(head) + 1 if start > 0 else 0)
            for raw in complete:
                offsets.append(pos)
                pos += len(raw) + 1
            for raw, offset in zip(reversed(complete), reversed(offsets), strict=True):
                if newest:
                    newest = False
                    continue
                if left is not None:
                    if left <= 0:
                        return
                    left -= 1
                try:
                    record = self._decode(raw)
                except LineDamaged as damage:
                    raise self._corrupt(fd, offset, damage) from None
                yield offset, record
            pending = [head]

    def _corrupt(self, fd: int, offset: int, damage: LineDamaged) -> JournalCorrupt:
        line_no = _count_newlines(fd, offset) + 1
        return JournalCorrupt(
            f"{self.path} line {line_no} is damaged ({damage.reason}); the log fails closed: restore it "
            "from a backup or inspect it with `flows check`",
            path=self.path,
            line=line_no,
            reason=damage.reason,
        )


def _count_newlines(fd: int, upto: int) -> int:
    count, pos = 0, 0
    while pos < upto:
        chunk = os.pread(fd, min(1 << 20, upto - pos), pos)
        if not chunk:
            break
        count += chunk.count(b"\n")
        pos += len(chunk)
    return count

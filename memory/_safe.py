"""Opening what the store holds without following a link and without blocking.

Everything under ``<db-dir>/flows-memory`` is untrusted: a symbolic link planted there could send a
read (or ``sync``'s drops) into another store, and a FIFO named like a learned file would block a
plain ``open`` forever. So every file is opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked to be a
regular file, and every folder below ``<db-dir>`` is opened one component at a time with
``O_NOFOLLOW | O_DIRECTORY`` relative to its parent's descriptor (``Folder``), so a link anywhere
on the way is refused rather than resolved. ``<db-dir>`` itself is the user's choice and may be
reached through links.

The functions here raise ``OSError``; ``OSError.filename`` names the path that failed, and
``describe`` turns one into words. The callers map them to their own coded errors.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class NotRegular(OSError):
    """What was opened as a file is not a regular file (a FIFO, a folder, a device, a socket)."""


def kind_of(mode: int) -> str:
    """Words for the type of a file whose ``st_mode`` is ``mode``."""
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISREG, "a regular file"),
    ):
        if test(mode):
            return name
    return "of an unknown type"


def describe(exc: OSError) -> str:
    """Why ``exc`` happened, in words a user can act on."""
    if isinstance(exc, NotRegular):
        return exc.strerror or "not a regular file"
    if exc.errno == errno.ELOOP:
        return "it is a symbolic link, which the store never follows"
    if exc.errno == errno.ENXIO:
        return "it is a socket or a device, not a regular file"
    if exc.errno == errno.EISDIR:
        return "it is a folder, not a regular file"
    if exc.errno == errno.ENOTDIR:
        return "it is not a folder"
    return exc.strerror or str(exc)


def is_damage(exc: OSError) -> bool:
    """Whether ``exc`` says the store holds the wrong kind of thing (a link, a FIFO, a folder where
    a file belongs...), as opposed to the storage failing (permission, I/O)."""
    return isinstance(exc, NotRegular) or exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.ENOTDIR)


def read_fd(fd: int, path: str | os.PathLike[str]) -> bytes:
    """Read the whole regular file open at ``fd`` (raising ``NotRegular`` for anything else)."""
    return read_fd_stat(fd, path)[0]


def read_fd_stat(fd: int, path: str | os.PathLike[str]) -> tuple[bytes, os.stat_result]:
    """``read_fd``, and the ``fstat`` of the file it read (taken before the read)."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegular(errno.EINVAL, f"it is {kind_of(st.st_mode)}, not a regular file", os.fspath(path))
    want = st.st_size + 1  # one more than the size: a short read is the whole file
    data = os.read(fd, want)
    if len(data) < want:
        return data, st
    chunks = [data]  # it grew since the fstat: read on to its end
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks), st


def read_file(
    path: str | os.PathLike[str], *, dir_fd: int | None = None, shown: str | None = None
) -> bytes | None:
    """The bytes of the regular file at ``path`` (relative to ``dir_fd`` when given), never through a
    link and never blocking; None when there is nothing at that name.

    Raises:
        NotRegular: it is a FIFO, a folder, a device.
        OSError: a link (``ELOOP``), a socket (``ENXIO``), permission or I/O; ``filename`` is
            ``shown`` (or ``path``).
    """
    read = read_file_stat(path, dir_fd=dir_fd, shown=shown)
    return None if read is None else read[0]


def read_file_stat(
    path: str | os.PathLike[str], *, dir_fd: int | None = None, shown: str | None = None
) -> tuple[bytes, os.stat_result] | None:
    """``read_file``, and the ``fstat`` of the very file it read: a stat key that names those
    bytes, with no window for a rename between a separate stat and the read."""
    where = shown if shown is not None else os.fspath(path)
    try:
        fd = os.open(path, _FILE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, where) from None
    try:
        return read_fd_stat(fd, where)
    except NotRegular:
        raise
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, where) from None
    finally:
        os.close(fd)


class Folder:
    """A folder below ``base`` opened one component at a time, none of them a link.

    Reads, renames and fsyncs go through the folder's descriptor, so a link swapped in after the
    open cannot redirect them. A context manager; ``close()`` is safe twice.
    """

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd

    @classmethod
    def open(cls, base: Path, path: Path) -> Folder | None:
        """Open ``path`` (a folder below ``base``); None when it, or a folder on the way, is missing.

        Raises:
            OSError: a component is a link (``ELOOP``) or not a folder (``ENOTDIR``), or cannot be
                opened (permission, I/O); ``filename`` names that component.
        """
        base_str, path_str = os.fspath(base), os.fspath(path)
        if not path_str.startswith(base_str + os.sep):
            raise ValueError(f"{path} is not below {base}")
        parts: Sequence[str] = path_str[len(base_str) + 1 :].split(os.sep)
        try:
            fd = os.open(base_str, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, base_str) from None
        for n, part in enumerate(parts):
            try:
                child = os.open(part, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                os.close(fd)
                return None
            except OSError as exc:
                os.close(fd)
                here = os.path.join(base_str, *parts[: n + 1])
                if exc.errno == errno.ENOTDIR:  # Linux says ENOTDIR, not ELOOP, for a link here
                    try:
                        if stat.S_ISLNK(os.lstat(here).st_mode):
                            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), here) from None
                    except FileNotFoundError:
                        return None
                raise OSError(exc.errno, exc.strerror, here) from None
            os.close(fd)
            fd = child
        return cls(path, fd)

    def names(self) -> list[str]:
        """The names in the folder (as ``os.listdir``)."""
        try:
            return os.listdir(self.fd)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, str(self.path)) from None

    def read(self, name: str, shown: str | None = None) -> bytes | None:
        """The bytes of the regular file ``name`` in the folder, or None when it is missing
        (see ``read_file``; ``shown`` is its path for messages, by default built from ``name``)."""
        return read_file(name, dir_fd=self.fd, shown=shown if shown is not None else str(self.path / name))

    def read_stat(self, name: str, shown: str | None = None) -> tuple[bytes, os.stat_result] | None:
        """``read``, and the ``fstat`` of the file it read (``read_file_stat``)."""
        where = shown if shown is not None else str(self.path / name)
        return read_file_stat(name, dir_fd=self.fd, shown=where)

    def stat(self) -> os.stat_result:
        """The folder's own ``stat``."""
        return os.fstat(self.fd)

    def fsync(self) -> None:
        """Make the names changed in the folder durable."""
        os.fsync(self.fd)

    def close(self) -> None:
        """Close the folder's descriptor (safe twice)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def named(path: str | os.PathLike[str], *, dir_fd: int | None = None) -> bool:
    """Whether anything is at ``path`` (relative to ``dir_fd`` when given): a file, a folder, a
    link (not followed), anything. ``os.path.lexists``'s answer, and False wherever it is False (a
    missing name, a folder on the way that cannot be searched), asked by ``faccessat(F_OK,
    AT_SYMLINK_NOFOLLOW | AT_EACCESS)``: a missing name answers without the ``FileNotFoundError``
    an ``lstat`` raises (with its message decoded) and without a ``stat_result``, several times
    the look's own cost on a learn's path, which asks it of names that are mostly missing."""
    return os.access(path, os.F_OK, dir_fd=dir_fd, effective_ids=True, follow_symlinks=False)


def regular_prefix(path: str | os.PathLike[str], limit: int, *, dir_fd: int | None = None) -> bytes | None:
    """The first ``limit`` bytes of ``path`` (relative to ``dir_fd`` when given) if it is a regular
    file that can be read (never through a link, never blocking on a FIFO), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        return os.read(fd, limit) if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except OSError:
        return None
    finally:
        os.close(fd)


def write_beside(
    folder: str | os.PathLike[str],
    name: str,
    data: bytes | Callable[[BinaryIO], None],
    *,
    exclusive: bool = False,
) -> bool:
    """Write the file ``name`` of ``folder`` (a derived file: a cache, an index, a memo) through a
    temporary file of random name, then a rename over ``name`` (``exclusive``: a link, which fails
    when ``name`` exists). ``data`` is the bytes, or a function that writes them to a binary file.
    ``folder`` is made (private) when missing; every other step goes through one descriptor of it,
    opened without following a link, and the file is created exclusively (``O_EXCL | O_NOFOLLOW``,
    mode 0600): a link in the folder's place, or planted at any name, is never written through.
    Not fsync'd. Best effort: False, nothing left behind, on any failure."""
    tmp = f".tmp-{secrets.token_hex(8)}"
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        at = os.open(folder, DIR_FLAGS)
    except OSError:
        return False  # a link (or a file, or no room) in the folder's place
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o600, dir_fd=at)
        with os.fdopen(fd, "wb") as fh:
            if isinstance(data, bytes):
                fh.write(data)
            else:
                data(fh)
        if exclusive:
            os.link(tmp, name, src_dir_fd=at, dst_dir_fd=at, follow_symlinks=False)
            os.unlink(tmp, dir_fd=at)
        else:
            os.replace(tmp, name, src_dir_fd=at, dst_dir_fd=at)
        return True
    except (OSError, ValueError):
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=at)
        return False
    finally:
        os.close(at)

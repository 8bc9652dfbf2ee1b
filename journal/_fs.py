"""Opening the journal's own files: a regular file, or a clear error.

Every file the journal and the line log open goes through ``open_regular``: a symbolic link is
refused, never followed (``O_NOFOLLOW``); the open never waits on a FIFO (``O_NONBLOCK``); and what
was opened must be a regular file (``fstat``). Anything else where a journal file belongs — a link,
a directory, a FIFO, a socket, a device — is ``JournalCorrupt`` naming the path, never a hang and
never an ``IsADirectoryError``. Folders the journal owns are checked with ``lstat`` (``check_dir``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from journal._errors import JournalCorrupt, JournalReadInterrupted

# What an errno of an O_NOFOLLOW | O_NONBLOCK open says about the thing at the path.
_REFUSED = {
    errno.ELOOP: "a symbolic link",
    errno.EISDIR: "a directory",
    errno.ENXIO: "a FIFO or a socket",
    errno.ENOTDIR: "below something that is not a folder",
}


def describe(mode: int) -> str:
    """What kind of file ``mode`` (an ``st_mode``) is, for a message."""
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISREG, "a regular file"),  # where a folder belongs (a stray file in runs/)
    )
    return next((name for test, name in kinds if test(mode)), "of an unknown kind")


def refused(path: str | os.PathLike[str], what: str, *, expected: str = "a regular file") -> JournalCorrupt:
    """The error for ``path`` being ``what`` where the journal expects ``expected``."""
    said = f"lies {what}" if what.startswith("below ") else f"is {what}, not {expected}"
    why = (
        "the journal keeps only its own folders there"
        if what == "a regular file"
        else "the journal never follows links or opens special files"
    )
    return JournalCorrupt(
        f"{os.fspath(path)} {said}; {why}: move it aside, then retry",
        path=Path(path),
        line=0,
        reason=f"{what}, not {expected}",
    )


def open_regular(path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
    """Open ``path`` with ``flags`` as a regular file and return the descriptor.

    Raises:
        FileNotFoundError: nothing is there (and ``flags`` did not ask to create it).
        JournalCorrupt: a link, directory, FIFO, socket or device is there, or a folder on the way
            is not a folder.
        OSError: any other failure of the open (permission, I/O), for the caller to translate.
    """
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        what = _REFUSED.get(exc.errno or 0)
        if what is None:
            raise
        raise refused(path, what) from None
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise refused(path, describe(st.st_mode))
    held = stat.S_IMODE(st.st_mode)
    if flags & os.O_CREAT and held != mode and held & ~mode == 0 and st.st_uid == os.geteuid():
        # a file of ours with fewer bits than asked (the umask narrowed a new one, or it predates
        # a wider mode): widened to ``mode``; a file with other bits (a person's chmod) or someone
        # else's is left as it is
        with contextlib.suppress(OSError):
            os.fchmod(fd, mode)
    return fd


def check_dir(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a real directory, False when nothing is there.

    Raises:
        JournalCorrupt: something else is there (a link, even to a directory; a file; a FIFO).
        OSError: the ``lstat`` failed otherwise (permission, I/O).
    """
    return dir_stat(path) is not None


def dir_stat(path: str | os.PathLike[str]) -> os.stat_result | None:
    """``check_dir``, answering with the directory's ``lstat`` (None when nothing is there).

    Raises:
        JournalCorrupt: something else is there (a link, even to a directory; a file; a FIFO).
        OSError: the ``lstat`` failed otherwise (permission, I/O).
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise refused(path, _REFUSED[errno.ENOTDIR], expected="a directory") from None
    if stat.S_ISDIR(st.st_mode):
        return st
    raise refused(path, describe(st.st_mode), expected="a directory")


def read_failed(
    what: str, path: str | os.PathLike[str], exc: OSError, *, run_id: str | None = None
) -> JournalReadInterrupted:
    """The error of a failed read of the journal (``what``: "read X", "list X", "look at X") at
    ``path``. A permission error says what to do, and names the folder that refused it when that is
    a folder on the way (an unreadable ``streams/`` refuses the open of every stream in it, and the
    stream it was asked for may not even exist): the user running this cannot fix it by retrying."""
    said = f"cannot {what}: {exc.strerror or exc}"
    where = Path(path)
    if exc.errno in (errno.EACCES, errno.EPERM):
        user = f"the user running this (uid {os.geteuid()})"
        blocked = _unsearchable(where)
        if blocked is not None:
            where = blocked
            said = (
                f"cannot {what}: {exc.strerror or exc} on the folder {blocked}, which {user} may not "
                "search; grant it read and search access to that folder (and to the folders above "
                "it), or run as the journal's owner"
            )
        else:
            said += (
                f"; grant {user} read access to {where} (a folder needs search access too), or run "
                "as the journal's owner"
            )
    return JournalReadInterrupted(said, run_id=run_id, path=where)


def _unsearchable(path: Path) -> Path | None:
    """The first folder on the way to ``path`` (from the top) that this process may not search,
    or None."""
    for folder in reversed(path.parents):
        try:
            if stat.S_ISDIR(os.stat(folder).st_mode) and not os.access(folder, os.X_OK):
                return folder
        except OSError:
            return None  # a folder above it refused the stat: reported at that one's turn
    return None

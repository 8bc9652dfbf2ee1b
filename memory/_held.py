"""The folders a warm read of every scope checks through descriptors held open, not by path.

A read of every scope looks at three folders by path each time (``flows-memory`` for new scopes,
each scope's learned-file folder, each scope's retired-file folder), a path walk of a dozen
components each. Once those folders have stood unchanged long enough to trust their listings
(``RACY_S``: mtimes are coarse), ``hold`` opens the tree once, one component at a time and never
through a link, and keeps open: the DB's folder, ``flows-memory``, and for each scope its
``.trajectories``, its learned-file folder and its retired-file folder when there is one.
``HeldTree.unchanged`` then ``fstat``s each descriptor: no path is resolved.

Why that sees every change a path would: an entry created, removed or renamed in a folder changes
the folder's mtime (a learn's rename, a forget's retired file, a sync's removal, a new scope, a
retired-file folder made); a folder renamed or moved (replaced by another under its name) changes
its own ctime and its parent's mtime, and a folder removed drops its link count to 0. So every
folder on the way to a listed one is held, or its parent is (a scope folder: ``flows-memory``), and
while every held folder's mtime, ctime and link count are the ones seen, each path of the tree
still names the folder held, and each folder holds the entries it held. The one change it cannot
see is above the DB's folder (the store's parent folders renamed or replaced): the history DB's
SQLite connection keeps reading the file it opened then too.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from memory._files import RACY_S
from memory._paths import LEARNED_ROOT
from memory._safe import DIR_FLAGS

MAX_SCOPES = 8  # more scope folders than this are looked at by path (a descriptor each is kept)

Stamp = tuple[int, int]  # a folder's (mtime_ns, inode), as the listings record it
_UNSETTLED = (-1, -1, -1)  # the DB's folder's stamp while it changed too lately to be trusted


class HeldTree:
    """Descriptors of the folders a read of every scope looked at, with each one's (mtime, ctime,
    link count) then, and what the read found there: its listings and its retired files by key."""

    __slots__ = ("_db_dir", "_db_dir_id", "_fds", "_stamps", "listings", "retired")

    def __init__(
        self,
        db_dir: Path,
        fds: list[int],
        stamps: list[tuple[int, int, int]],
        listings: list[Any],
        retired: Mapping[str, Any],
    ) -> None:
        self._db_dir = db_dir
        first = os.fstat(fds[0])
        self._db_dir_id = (first.st_ino, first.st_dev)  # the DB's folder held
        self._fds = fds
        self._stamps = stamps
        self.listings = listings
        self.retired = retired

    def unchanged(self) -> bool:
        """Whether every held folder is as it was (see the module): its listings still hold."""
        try:
            fds, stamps = self._fds, self._stamps
            if stamps[0] is _UNSETTLED:  # the DB's folder changed lately: looked at by path
                if not self._same_db_dir():
                    return False
            else:
                st = os.fstat(fds[0])
                if (st.st_mtime_ns, st.st_ctime_ns, st.st_nlink) != stamps[0] and not self._same_db_dir():
                    return False
            for fd, stamp in zip(fds[1:], stamps[1:], strict=True):
                st = os.fstat(fd)
                if (st.st_mtime_ns, st.st_ctime_ns, st.st_nlink) != stamp:
                    return False
        except OSError:
            return False
        return True

    def _same_db_dir(self) -> bool:
        """Whether the folder at the DB's folder's path is still the one held. Its own entries come
        and go (SQLite's ``-wal`` and ``-shm`` with the first and last connection, other files put
        beside the DB) and this tree reads none of them, so after a change there it is looked at by
        path, one ``stat`` a read, until the change has settled; then its stamp is taken again."""
        here = os.stat(self._db_dir)
        if (here.st_ino, here.st_dev) != self._db_dir_id:
            return False
        settled = max(here.st_mtime_ns, here.st_ctime_ns) < time.time_ns() - int(RACY_S * 1e9)
        self._stamps[0] = (here.st_mtime_ns, here.st_ctime_ns, here.st_nlink) if settled else _UNSETTLED
        return True

    def __del__(self) -> None:  # closed once no read uses it (a read in progress holds a reference)
        for fd in self._fds:
            try:  # noqa: SIM105 - no module's name at interpreter exit (``contextlib`` may be gone)
                os.close(fd)
            except OSError:
                pass


def hold(
    db_dir: Path,
    root: Stamp,
    scopes: Sequence[tuple[str, Stamp, Stamp | None]],
    listings: list[Any],
    retired: Mapping[str, Any],
) -> HeldTree | None:
    """Open the tree a read of every scope found, or None when it is not as that read saw it.

    ``root``: ``flows-memory``'s (mtime, inode) as the read saw it; ``scopes``: each scope folder's
    name, its learned-file folder's stamp and its retired-file folder's (None: there was none).
    Each folder opened must have that stamp, and every one an mtime older than ``RACY_S``.
    """
    fds: list[int] = []
    wanted: list[Stamp | None] = []

    def enter(name: str, at: int, stamp: Stamp | None) -> int:
        fd = os.open(name, DIR_FLAGS, dir_fd=at)
        fds.append(fd)
        wanted.append(stamp)
        return fd

    try:
        fds.append(os.open(db_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        wanted.append(None)
        top = enter(LEARNED_ROOT, fds[0], root)
        for name, learned, retired_at in scopes:
            folder = os.open(name, DIR_FLAGS, dir_fd=top)  # only on the way (see the module)
            try:
                trajectories = enter(".trajectories", folder, None)
            finally:
                os.close(folder)
            enter("compacted", trajectories, learned)
            if retired_at is not None:
                enter("retired", trajectories, retired_at)
            else:
                try:
                    os.stat("retired", dir_fd=trajectories, follow_symlinks=False)
                except FileNotFoundError:
                    pass
                else:
                    return None  # one was made since the read looked: read by path again
        settled = time.time_ns() - int(RACY_S * 1e9)
        stamps: list[tuple[int, int, int]] = [_UNSETTLED]  # the DB's folder: by path till it settles
        for fd, stamp in zip(fds[1:], wanted[1:], strict=True):
            st = os.fstat(fd)
            if max(st.st_mtime_ns, st.st_ctime_ns) > settled or (
                stamp is not None and (st.st_mtime_ns, st.st_ino) != stamp
            ):
                return None
            stamps.append((st.st_mtime_ns, st.st_ctime_ns, st.st_nlink))
        held = HeldTree(db_dir, fds, stamps, listings, retired)
        fds = []  # the tree's now
        return held
    except OSError:
        return None
    finally:
        for fd in fds:
            os.close(fd)

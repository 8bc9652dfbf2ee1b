"""Placing learned files: each scope's folder, staging, publishing one file or many, and fsyncs.

Every path that writes a learned file (learn, republishing a resumed run, materialize, repair) goes
through one ``Publisher``, so the folders it has checked and the names it made durable are known once
per store.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import os
import secrets
import stat
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from journal import JournalBackend, JournalNameInvalid, check_name
from memory._db import db_mode, folder_mode
from memory._errors import Unwritable
from memory._paths import learned_dir, retired_dir
from memory._reaper import REAPER
from memory._safe import Folder, describe
from staging import (
    STAGE_PREFIX,
    OpenDir,
    StagingError,
    ensure_dir,
    failpoint,
    publish_many,
    stage,
    sync_dir_shared,
    syncfs,
)

SYNC_BATCH = 500
"""Files published (or ingested by ``sync``) per batch."""

NAMES_GROUP = 1024
"""A learn's rename is not fsync'd on its own: once this many names wait, the learn that adds the
last one fsyncs their folders (one fsync per folder covers every name waiting in it; with loose
files, one ``syncfs``). The record of each is durable already: the group bounds only what a power
loss may make the store's next open publish again. A ``syncfs`` also writes back every other dirty
page of the file system, several milliseconds on a shared disk, so it is paid once per many learns."""

NAMES_WAIT_S = 1.0
"""Nor does a name wait longer than this while learns go on: the first learn that finds the oldest
waiting name this old flushes the group (``flush_names``). One second, well inside the file system's
own periodic commit of names (ext4 commits every five seconds by default)."""


class _AsideNames:
    """The hidden names files are set aside under: this process's random prefix and a count, not
    ``getrandom`` per removal (as a stage's name). A forked child draws its own prefix, and so does
    a rename refused because the name is taken by something a rename cannot replace (a folder put
    there: the names are predictable)."""

    def __init__(self) -> None:
        self.renew()

    def renew(self) -> None:
        self.prefix, self.count = secrets.token_hex(8), itertools.count()  # count: atomic under the GIL

    def next(self) -> str:
        return f"{STAGE_PREFIX}{self.prefix}{next(self.count):x}.gone"


_ASIDE = _AsideNames()
os.register_at_fork(after_in_child=_ASIDE.renew)


def _set_aside(name: str, folder_fd: int, hidden: list[str]) -> bool:
    """Rename ``name`` (a regular file or a link) in the folder ``folder_fd`` to a hidden stage
    name, appended to ``hidden``; False, touching nothing, when it is anything else (its unlink then
    fails or succeeds as it would).

    Raises:
        FileNotFoundError: nothing is there.
        OSError: the rename failed.
    """
    if not stat.S_ISREG(mode := os.lstat(name, dir_fd=folder_fd).st_mode) and not stat.S_ISLNK(mode):
        return False
    for tries in range(3):
        aside = _ASIDE.next()
        try:
            os.rename(name, aside, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
            break
        except FileNotFoundError:
            raise  # ``name`` is gone (the hidden name's folder is its own)
        except OSError:
            if tries == 2:
                raise
            _ASIDE.renew()  # the name is a folder someone put there: draw a prefix nobody has seen
    hidden.append(aside)
    failpoint("memory.after_set_aside")  # a crash here leaves the hidden name: a stage, swept
    return True


def refuse_links(base: Path, directory: Path, run_id: str | None = None) -> None:
    """Raise ``Unwritable`` if any component of ``directory`` below ``base`` is a symbolic link.

    A link planted in the store could send learned files anywhere; the store never follows one.
    """
    probe = directory
    while probe != base and base in probe.parents:
        try:
            is_link = stat.S_ISLNK(os.lstat(probe).st_mode)
        except FileNotFoundError:
            is_link = False
        except OSError as exc:  # a folder this user may not search: nothing can be written below it
            raise Unwritable(
                f"cannot look at {probe}: {exc.strerror or exc}", path=probe, run_id=run_id, errno=exc.errno
            ) from exc
        if is_link:
            raise Unwritable(
                f"{probe} is a symbolic link; the store never follows links: remove it",
                path=probe,
                run_id=run_id,
            )
        probe = probe.parent


def holds(path: str | Path, data: bytes) -> bool:
    """Whether ``path`` is a regular file holding exactly ``data`` (never through a link, never
    blocking on a FIFO)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and os.read(fd, len(data) + 1) == data
    except OSError:
        return False
    finally:
        os.close(fd)


_HELD_DIRS = 16  # folders kept open; past it they are all let go and opened anew


class PendingNames:
    """The folders holding names a learn renamed into place but did not fsync, in rename order.

    Each rename takes the next number. ``settled(upto)`` forgets every rename numbered up to
    ``upto``: a flush that began after it was numbered made it durable (a folder fsync, or a
    ``syncfs`` of the whole file system). A *loose* name's file was written without fsync as well,
    so only a ``syncfs`` settles it. Thread-safe.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._seq = 0
        # (number, folder, when renamed, loose)
        self._waiting: deque[tuple[int, Path, float, bool]] = deque()
        self._group_flushing = False

    def renamed(self, directory: Path, loose: bool = False) -> bool:
        """Note a name renamed into ``directory`` and not yet durable (``loose``: nor its file's
        bytes); return whether the caller should now flush the group (``NAMES_GROUP`` names wait,
        or the oldest is ``NAMES_WAIT_S`` old). While one caller's group flush runs, the others are
        not asked to flush too: the names they add wait for the next group. A caller told to flush
        calls ``group_flushed`` when it is done, whether the flush worked or not."""
        now = time.monotonic()
        with self._mutex:
            self._seq += 1
            waiting = self._waiting
            waiting.append((self._seq, directory, now, loose))
            due = len(waiting) >= NAMES_GROUP or now - waiting[0][2] >= NAMES_WAIT_S
            if not due or self._group_flushing:
                return False
            self._group_flushing = True
            return True

    def group_flushed(self) -> None:
        """The group flush ``renamed`` asked for has ended."""
        with self._mutex:
            self._group_flushing = False

    def settled(self, upto: int) -> None:
        """Forget the renames numbered up to ``upto`` (a flush begun after them returned)."""
        with self._mutex:
            waiting = self._waiting
            while waiting and waiting[0][0] <= upto:
                waiting.popleft()

    def snapshot(self) -> tuple[int, list[Path], list[Path]]:
        """The newest rename's number, the folders with a name waiting, and those with a loose
        name waiting (each once)."""
        with self._mutex:
            waiting = self._waiting
            folders = list(dict.fromkeys(w[1] for w in waiting))
            return self._seq, folders, list(dict.fromkeys(w[1] for w in waiting if w[3]))


def _no_turn(scope: str) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


HOLDER_FILE = "turn-holder"
"""The file in a scope's turn folder naming the root run holding the turn (empty when none does)."""


def _holder_died(fd: int) -> bool:
    """Whether the ``turn-holder`` file of the turn folder ``fd`` names a root run, with a share of
    the turn just taken: no holder is alive then, so one died holding it (one ``fstatat``)."""
    try:
        return os.stat(HOLDER_FILE, dir_fd=fd, follow_symlinks=False).st_size > 0
    except OSError:
        return False


def _open_holder(fd: int, mode: Callable[[], int]) -> int:
    """The ``turn-holder`` file of the turn folder ``fd``, opened to read and write (never through
    a link); made when missing, with the mode the store's files take (``mode()``, looked up then
    only), so every user that may write the store may hold its turns."""
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(HOLDER_FILE, flags, dir_fd=fd)
    except FileNotFoundError:
        holder = os.open(HOLDER_FILE, flags | os.O_CREAT, 0o600, dir_fd=fd)
        try:
            os.fchmod(holder, mode())
        except BaseException:
            os.close(holder)
            raise
        return holder


def _clear_holder(holder: int) -> None:
    """Empty the ``turn-holder`` file (its descriptor ``holder``) as its turn is let go, and close it."""
    try:
        os.ftruncate(holder, 0)
    finally:
        os.close(holder)


class _Turn:
    """A scope's turn for updates in this process: a re-entrant mutex for its threads, and how deep
    the holding thread is (the folder's ``flock`` is taken at depth 1)."""

    def __init__(self) -> None:
        self.mutex = threading.RLock()
        self.depth = 0
        self.owner = 0  # the ident of the thread inside the mutex at depth 1 (0: none yet)


class _ThreadFolders(threading.local):
    """The folders whose ``flock`` this thread holds as a scope's turn or a share of it (through any
    store object of this process), and how deep: a thread that holds one takes it again without
    waiting (the lock is per open, so a second open of the same folder would wait for the first)."""

    def __init__(self) -> None:
        self.depth: dict[Path, int] = {}


_THREAD = _ThreadFolders()


PROBE_EVERY = 8
"""How many learns of a process count themselves in to its share of a scope's turn between two
looks at the scope's gate (``_Share``): an update waiting there gets its turn within so many more."""


class _Share:
    """This process's share of one scope's turn (``Publisher.take_share``): one shared ``flock``
    held by the process while any of its threads is between a plain learn's look and its publish,
    taken by the first of them and let go by the last. The threads of one process never exclude each
    other here, so they need no lock of their own each: one held for them all spares every learn
    but the first of an overlap its open, its ``flock`` and its close, each a system call that
    hands the interpreter's lock to another thread. ``mutex`` is held by the thread taking the lock
    until the kernel grants it (the others wait for it there as they would for the lock), never
    while it is let go.

    **The gate.** A shared lock is granted whenever no exclusive one is held, however long an
    exclusive one has waited, so learns that keep overlapping (several threads, or several
    processes) would keep an update, a forget or an erase of the scope waiting for good. So an
    update first locks the scope's gate (the turn folder's parent) exclusively, then waits for the
    turn, and lets the gate go once it has the turn. The first learn of a process to take the turn
    passes the gate first (a shared lock taken and let go at once: it waits while an update holds
    the gate), and every ``PROBE_EVERY``-th learn counting itself in looks at the gate without
    waiting: shut, no learn counts in any more (``closing``) until the learns in flight are done,
    the process lets go of the turn, and the update gets it. The gate only orders who waits:
    learns never hold it, and what keeps a key from being taken twice is the turn alone."""

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.drained = threading.Condition(self.mutex)  # notified when ``count`` falls to 0
        self.count = 0  # the threads of this process holding the share
        self.fd = -1  # the descriptor holding the shared lock while ``count`` is above 0
        self.gate = -1  # this process's open of the scope's gate, kept once made
        self.entries = 0  # learns counted in since the lock was taken
        self.closing = False  # an update waits at the gate: no learn counts in until ``count`` is 0


_SHARES: dict[Path, _Share] = {}  # by turn folder, for every store object of this process

GATES_KEPT = 16
"""How many scopes' gates a process keeps open (``_Share.gate``); past it, those of scopes with no
learn in flight are let go (a process learning into thousands of scopes keeps no thousand
descriptors)."""


class _KeptGates:
    """The shares whose gate this process keeps open, and the mutex that guards the set (taken
    while a share's own mutex is held: other shares' mutexes are only tried, never waited for)."""

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.shares: set[_Share] = set()

    def make_room(self, share: _Share) -> None:
        """Let go of the gates of shares with no learn in flight when ``GATES_KEPT`` are kept, and
        count ``share``'s gate, about to be opened, in."""
        with self.mutex:
            if len(self.shares) >= GATES_KEPT:
                for other in list(self.shares):
                    if other is share or not other.mutex.acquire(blocking=False):
                        continue
                    try:
                        if not other.count:
                            self.shares.discard(other)
                            if other.gate >= 0:
                                fd, other.gate = other.gate, -1
                                _LOCKS.close(fd)
                    finally:
                        other.mutex.release()
            self.shares.add(share)

    def after_fork_in_child(self) -> None:
        self.mutex = threading.Lock()
        self.shares = set()


_GATES = _KeptGates()


class _OpenLocks:
    """Every descriptor this process opened to ``flock`` a folder, with the thread that holds it.

    A lock belongs to the open file, which a forked child shares: a child that kept its copy of a
    lock another thread of its parent held would hold that lock for as long as it lives (every
    update of the scope would wait for it, and a plain learn in the child of a parent's shared
    lock). So a fork waits while a descriptor is being opened and registered, and the child closes
    the copies of the locks other threads held (its own thread's stay: it goes on inside them)."""

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.owners: dict[int, int] = {}  # descriptor -> the ident of the thread that holds it

    def open(self, at: OpenDir, owner: int | None = None) -> int:
        """A new open of the folder ``at`` holds, registered to ``owner`` (a thread's ident; this
        thread when None; 0 for none, which a forked child always closes) (``O_CLOEXEC``).

        Raises:
            OSError: the folder could not be opened.
        """
        with self.mutex:
            fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=at.fd)
            self.owners[fd] = threading.get_ident() if owner is None else owner
        return fd

    def close(self, fd: int) -> None:
        with self.mutex:
            self.owners.pop(fd, None)
            os.close(fd)

    def before_fork(self) -> None:
        self.mutex.acquire()

    def after_fork_in_parent(self) -> None:
        self.mutex.release()

    def after_fork_in_child(self) -> None:
        me = threading.get_ident()
        for fd, owner in list(self.owners.items()):
            if owner != me:
                del self.owners[fd]
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.mutex = threading.Lock()
        for publisher in list(_PUBLISHERS):
            publisher.turns_after_fork(me)
        _SHARES.clear()  # their descriptors (registered to no thread) are closed above
        _GATES.after_fork_in_child()


def _cannot(what: str, directory: Path, run_id: str | None, exc: OSError) -> Unwritable:
    """The error of a folder that could not be opened or locked (``what``) for a publish."""
    return Unwritable(
        f"cannot {what} {directory} to publish into it: {describe(exc)}",
        path=directory,
        run_id=run_id,
        errno=exc.errno,
    )


def _flock(fd: int, how: int, directory: Path, run_id: str | None) -> None:
    """``flock(how)`` on ``fd``, an open of ``directory``.

    Raises:
        Unwritable: the lock could not be taken.
    """
    try:
        fcntl.flock(fd, how)
    except OSError as exc:
        raise _cannot("lock", directory, run_id, exc) from exc


_LOCKS = _OpenLocks()
_SHARED = -2  # what ``take_share`` hands back for a hold of the process's share
_PUBLISHERS: weakref.WeakSet[Publisher] = weakref.WeakSet()
os.register_at_fork(
    before=_LOCKS.before_fork,
    after_in_parent=_LOCKS.after_fork_in_parent,
    after_in_child=_LOCKS.after_fork_in_child,
)


class Publisher:
    """Stages and publishes the learned files of the store whose history DB is ``db_path``.

    Files take the DB's mode. Remembers the scope folders it computed, the folders it checked for
    links and created (``ready``), and the files it published or fsync'd durably (``durable``).

    Every file it writes, renames or removes goes through a descriptor of its folder (``held``),
    opened one component at a time with no link on the way, never through the folder's path: a
    folder of the store swapped for a link (or a link put on the way to it) after the first write
    in a long-lived process cannot send the next one outside the store.
    """

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self._scope_dirs: dict[str, Path] = {}
        self._retired_dirs: dict[str, Path] = {}
        self._ready_dirs: set[Path] = set()
        self._shared_fs: dict[tuple[JournalBackend, Path], bool] = {}
        self._durable_names: set[Path] = set()
        self.pending = PendingNames()
        self._held: dict[Path, OpenDir] = {}  # folders opened for writes and removals, kept open
        self._holding = threading.Lock()
        self._turns: dict[Path, _Turn] = {}  # a scope's turn for updates (``update_turn``)
        self._turn_dirs: dict[str, Path] = {}  # by scope: the folder whose lock is its turn
        # the scope's turn among the hosts sharing the journal, taken inside this host's (the store
        # sets it: a journal that hosts share hands out turns; one host's flock is enough otherwise)
        self.hosts_turn: Callable[[str], contextlib.AbstractContextManager[None]] = _no_turn
        # what a holder of a scope's turn that died left half done, finished from its root run's
        # records (the store sets it; ``update_turn``)
        self.recover: Callable[[str], None] | None = None
        _PUBLISHERS.add(self)

    def scope_dir(self, scope: str) -> Path:
        """The scope's folder of learned files (its path computed once per store)."""
        directory = self._scope_dirs.get(scope)
        if directory is None:
            directory = self._scope_dirs[scope] = learned_dir(self.db_path, scope)
        return directory

    def retired_dir(self, scope: str) -> Path:
        """The scope's folder of retired files (its path computed once per store)."""
        directory = self._retired_dirs.get(scope)
        if directory is None:
            directory = self._retired_dirs[scope] = retired_dir(self.db_path, scope)
        return directory

    def place(self, final: Path, data: bytes, run_id: str | None) -> None:
        """Stage ``data`` beside ``final`` and publish it there (replacing what is there), durably.

        Raises:
            Unwritable: as ``stage`` and ``publish``.
        """
        self.publish(self.stage(final.parent, data, run_id), final, run_id)

    def remove(self, final: Path, run_id: str | None) -> bool:
        """Remove the file ``final`` (never following a link, in its folder or on the way to it);
        False when it was not there.

        The removal is not fsync'd: every file removed this way is one a retired file already keeps
        out of every read, so a removal a power loss undoes changes no answer (``sync`` and ``flows
        check --repair`` finish it). A regular file (or a link) is renamed to a hidden stage name in
        its folder and unlinked in the background (``memory._reaper``: an unlink can wait for the
        device to discard the file's blocks); anything else is unlinked here, or refused.

        Raises:
            Unwritable: the file is there and cannot be removed, or a folder on the way is a link.
        """
        return self.remove_many([final], run_id) == 1

    def remove_many(self, finals: list[Path], run_id: str | None, *, now: bool = False) -> int:
        """``remove`` each of ``finals``, opening each folder once (a forget by filter of
        thousands of findings, most of them synced and so without a file); how many were there.
        ``now``: unlink each file before returning (an erase: no byte may outlive it).

        Raises:
            Unwritable: as ``remove``.
        """
        by_folder: dict[Path, list[str]] = {}
        for final in finals:
            by_folder.setdefault(final.parent, []).append(final.name)
        return sum(self._remove_in(directory, names, run_id, now) for directory, names in by_folder.items())

    def remove_in(self, directory: Path, name: str, run_id: str | None, at: OpenDir | None = None) -> bool:
        """``remove`` of the file ``name`` in ``directory`` (no path of it is built). ``at``: that
        folder as the caller holds it open (a stage's ``at``, just published into), not looked at
        again.

        Raises:
            Unwritable: as ``remove``.
        """
        return self._remove_in(directory, [name], run_id, False, at) == 1

    def _remove_in(
        self, directory: Path, names: list[str], run_id: str | None, now: bool, at: OpenDir | None = None
    ) -> int:
        gone = 0
        name = None
        try:
            held = self.held(directory) if at is None else at
            if held is None:
                return 0
            fd = held.fd  # ``held`` is referenced below: the descriptor stays open
            hidden: list[str] = []
            for name in names:
                try:
                    if now or not _set_aside(name, fd, hidden):
                        os.unlink(name, dir_fd=fd)
                    gone += 1
                except FileNotFoundError:
                    continue
            if hidden:
                REAPER.put_held(held, hidden)  # which keeps ``held``, and so its descriptor, open
        except OSError as exc:
            where = directory if name is None else directory / name
            raise Unwritable(
                f"cannot remove {where}: {describe(exc)}", path=where, run_id=run_id, errno=exc.errno
            ) from exc
        return gone

    def held(self, directory: Path) -> OpenDir | None:
        """``directory`` held open, opened one component at a time with no link on the way
        (``Folder.open``; None when it is missing), and kept: later calls return it while the path
        still names that folder (one ``lstat``: the same device and inode, a folder), where a walk
        opens five folders. A folder replaced since, by a link or another folder, or a link put on
        the way to it, names another inode: it is walked again (and refused when a link is there).
        A folder let go stays open for the stages and removals still using it.

        Raises:
            OSError: as ``Folder.open`` (``ELOOP`` for a link on the way).
        """
        with self._holding:
            held = self._held.get(directory)
        if held is not None:
            try:
                st = os.lstat(directory)
            except OSError:
                st = None
            if st is not None and stat.S_ISDIR(st.st_mode) and (st.st_dev, st.st_ino) == held.ident:
                return held
        try:
            folder = Folder.open(self.db_path.parent, directory)
        except FileNotFoundError:  # removed as it was walked
            folder = None
        if folder is None:
            with self._holding:
                self._held.pop(directory, None)
            return None
        try:
            held = OpenDir(folder.fd)
        except OSError:
            folder.close()
            raise
        folder.fd = -1  # the descriptor is ``held``'s now
        with self._holding:
            if len(self._held) >= _HELD_DIRS:
                self._held.clear()
            self._held[directory] = held
        return held

    def held_or_missing(self, directory: Path) -> OpenDir:
        """``held``, with a missing folder raised as ``FileNotFoundError``.

        Raises:
            FileNotFoundError: the folder (or one on the way) is missing.
            OSError: as ``held``.
        """
        at = self.held(directory)
        if at is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(directory))
        return at

    def close(self) -> None:
        """Let go of the folders kept open (each closes once no stage or removal uses it; opened
        again by the next write; safe twice)."""
        with self._holding:
            self._held.clear()

    def shares_filesystem(self, backend: JournalBackend, directory: Path) -> bool:
        """Whether ``backend``'s append can make files staged in ``directory`` durable (asked once
        per backend and directory, after the directory exists)."""
        if directory not in self._ready_dirs:
            return False
        found = self._shared_fs.get((backend, directory))
        if found is None:
            found = self._shared_fs[(backend, directory)] = backend.shares_filesystem(str(directory))
        return found

    def ready(self, directory: Path) -> bool:
        """Whether ``directory`` was checked for links and created by this publisher."""
        return directory in self._ready_dirs

    def durable(self, final: Path) -> bool:
        """Whether this publisher published ``final``, or fsync'd its folder, durably."""
        return final in self._durable_names

    def mark_durable(self, finals: list[Path]) -> None:
        """Remember ``finals`` as durable (their folders were fsync'd since they were named)."""
        self._durable_names.update(finals)

    def ensure_folder(self, directory: Path, run_id: str | None) -> None:
        """Create ``directory`` (checked for links on the way) unless this publisher did already.

        Raises:
            Unwritable: a link in the path, or the folder could not be created.
        """
        if directory in self._ready_dirs:
            return
        refuse_links(self.db_path.parent, directory, run_id)
        try:
            ensure_dir(directory, folder_mode(db_mode(self.db_path)))
        except OSError as exc:
            raise Unwritable(
                f"cannot create {directory}: {describe(exc)}", path=directory, run_id=run_id, errno=exc.errno
            ) from exc
        self._ready_dirs.add(directory)

    def file_mode(self) -> int:
        """The mode learned and retired files take now: the history DB's (``db_mode``, a ``stat``).

        Raises:
            Unreachable: the DB's path cannot be looked at.
        """
        return db_mode(self.db_path)

    def stage(
        self, directory: Path, data: bytes, run_id: str | None, *, sync: bool = True, mode: int | None = None
    ) -> Any:
        """Stage ``data`` in ``directory`` (created, and checked for links, once per store).

        ``sync=False`` leaves the data unsynced for a caller whose next flush covers it. ``mode``:
        the file's mode as the caller's ``file_mode`` took it a moment ago for another file of the
        same operation (an update's two files), not looked up again.

        Raises:
            Unwritable: a link in the path, or the folder or stage could not be created or written.
        """
        ready = directory in self._ready_dirs
        if not ready:
            refuse_links(self.db_path.parent, directory, run_id)
        try:
            failpoint("memory.before_stage")
            if not ready:
                ensure_dir(directory, folder_mode(db_mode(self.db_path)))
                self._ready_dirs.add(directory)
            at = self.held_or_missing(directory)
            mode = db_mode(self.db_path) if mode is None else mode
            return stage(directory, data, mode, hint="finding", sync=sync, at=at)
        except (StagingError, OSError) as exc:
            if ready and getattr(exc, "errno", None) == errno.ENOENT:  # removed since: check again
                self._ready_dirs.discard(directory)
                return self.stage(directory, data, run_id)  # synced: the folder is new
            if isinstance(exc, StagingError):
                path, why = exc.path, str(exc)
            else:
                path = Path(exc.filename or directory)
                why = describe(exc) if path == directory else f"{path}: {describe(exc)}"
            raise Unwritable(
                f"cannot stage a learned file in {directory}: {why}",
                path=path,
                run_id=run_id,
                errno=getattr(exc, "errno", None),
            ) from exc

    @staticmethod
    def publish(staged: Any, final: Path, run_id: str | None, *, sync: bool = True) -> None:
        """Rename ``staged`` into place at ``final`` and fsync its folder (``sync=False``: the
        caller makes the name durable later, ``publish_lazily``).

        Raises:
            Unwritable: the rename or the fsync failed.
        """
        try:
            staged.publish(final, sync_dir=sync)
        except StagingError as exc:
            raise Unwritable(
                f"cannot publish {final}: {exc}", path=final, run_id=run_id, errno=exc.errno
            ) from exc

    def _turn_dir(self, scope: str, run_id: str | None) -> Path:
        """The folder whose lock is ``scope``'s turn: the parent of its learned and retired folders
        (created here when missing, the learned folder not: a learn's stage creates that, and a
        stage in a folder it created is synced, not left loose)."""
        directory = self._turn_dirs.get(scope)
        if directory is None:
            directory = self.scope_dir(scope).parent
            self.ensure_folder(directory, run_id)
            self._turn_dirs[scope] = directory
        return directory

    @contextlib.contextmanager
    def update_turn(self, scope: str, run_id: str | None) -> Iterator[None]:
        """Hold the turn of ``scope`` for updates: an exclusive lock on the scope's folder of folders
        (the parent of its learned and retired folders, a lock no publish takes), so processes and
        threads updating versions of the scope take turns, from the look at the version an update
        replaces to that version's retired file, and wait for the plain learns of the scope in
        flight (``take_share``). Re-entrant within a thread (an update holds it while it reads the
        memory's version and while its learn settles), through any store object of the process.
        On a journal that hosts share, the scope's turn among them is taken too (``hosts_turn``),
        inside.

        Raises:
            Unwritable: the folder cannot be opened or locked.
            JournalError: the turn among the hosts could not be taken.
        """
        self.ensure_folder(self.scope_dir(scope), run_id)  # a synced scope may have no folder left
        directory = self._turn_dir(scope, run_id)
        turn = self._turns.get(directory)
        if turn is None:
            with self._holding:
                turn = self._turns.setdefault(directory, _Turn())
        with turn.mutex:
            if turn.depth:
                turn.depth += 1
                try:
                    yield
                finally:
                    turn.depth -= 1
                return
            turn.owner = threading.get_ident()
            try:
                fd = self._hold(directory, run_id)
                try:
                    holder = self._mark_holder(fd, directory, run_id) if fd >= 0 else -1
                    try:
                        with self.hosts_turn(scope):
                            turn.depth = 1
                            try:
                                yield
                            finally:
                                turn.depth = 0
                    finally:
                        if holder >= 0:
                            _clear_holder(holder)
                finally:
                    self._let_go(directory, fd)
            finally:
                turn.owner = 0

    def _mark_holder(self, fd: int, directory: Path, run_id: str | None) -> int:
        """In a scope's turn just taken (``fd``, the turn folder's descriptor): finish what the
        turn's last holder left half done when it died holding it (its root run named in the
        folder's ``turn-holder`` file: ``recover``), then name this holder's root run there; the
        file's descriptor, to empty as the turn is let go (-1: no root run, nothing named).

        A retirement (a forget, a forget by filter, an update's supersede) is committed in the
        scope's turn and its retired file published after: a holder killed in between leaves a
        durable retirement that no retired file says, and a learn, which looks for retired files
        only, would take the retired key again, its acknowledged finding retired by the next sync.
        A plain learn's share looks at the file as it is taken (``take_share``).

        Raises:
            Unwritable: the file cannot be opened or written.
            JournalError: the dead holder's run could not be read (``recover``).
        """
        if run_id is None or self.recover is None:
            return -1
        holder = -1
        try:
            holder = _open_holder(fd, self.file_mode)
            dead = os.pread(holder, 256, 0)
            if dead:
                with contextlib.suppress(JournalNameInvalid):  # untrusted bytes: only a run id is looked up
                    self.recover(check_name("run id", dead.decode("ascii", "replace").strip()))
                os.ftruncate(holder, 0)
            os.pwrite(holder, run_id.encode(), 0)
        except OSError as exc:
            if holder >= 0:
                os.close(holder)
            raise Unwritable(
                f"cannot write {directory / HOLDER_FILE}: {describe(exc)}",
                path=directory,
                run_id=run_id,
                errno=exc.errno,
            ) from exc
        except BaseException:
            if holder >= 0:
                os.close(holder)
            raise
        return holder

    @contextlib.contextmanager
    def update_turns(self, scopes: set[str], run_id: str | None) -> Iterator[None]:
        """Hold the turn of each of ``scopes`` (``update_turn``), taken in the order of their names,
        so two callers holding several never wait on each other in a ring."""
        with contextlib.ExitStack() as turns:
            for scope in sorted(scopes):
                turns.enter_context(self.update_turn(scope, run_id))
            yield

    def take_share(self, scope: str, run_id: str | None) -> tuple[Path, int]:
        """Take a share of the turn of ``scope`` (a shared lock on the folder ``update_turn``
        locks), held by a plain learn from its look at its key to its publish, and let go with
        ``drop_share`` (what this returns). Learns share it and never wait for each other; an
        update, a forget or an erase of the scope waits for the learns in flight, and a learn
        waits for one of them in flight. So a learn never looks at a key while an update is between
        its own look and its publish: one key is never taken by two memories. (Two calls, not a
        context manager: a learn pays for neither a generator nor its frames.)

        Raises:
            Unwritable: the folder cannot be opened or locked.
        """
        directory = self._turn_dir(scope, run_id)
        depth = _THREAD.depth
        held = depth.get(directory)
        if held is not None:  # this thread holds the turn, or a share, already
            depth[directory] = held + 1
            return directory, -1
        share = _SHARES.get(directory)
        if share is None:
            share = _SHARES.setdefault(directory, _Share())
        with share.mutex:
            while True:
                if not share.count:
                    self._pass_gate(share, directory, run_id)
                    fd = self._lock_remade(directory, run_id, fcntl.LOCK_SH, owner=0)
                    if self.recover is not None and _holder_died(fd):
                        # a turn's holder died in it: its turn finishes what it left (in the turn:
                        # no learn is between a look and a publish then), and the share is taken again
                        _LOCKS.close(fd)
                        with self.update_turn(scope, run_id):
                            pass
                        continue
                    share.fd = fd
                    share.count, share.entries, share.closing = 1, 0, False
                    break
                if not share.closing:
                    share.entries += 1
                    if share.entries % PROBE_EVERY or not self._gate_shut(share):
                        share.count += 1
                        break
                    share.closing = True
                share.drained.wait()
        depth[directory] = 1
        return directory, _SHARED

    def _pass_gate(self, share: _Share, directory: Path, run_id: str | None) -> None:
        """Wait while an update holds the gate of the turn folder ``directory`` (``_Share``).

        Raises:
            Unwritable: the gate cannot be opened or locked.
        """
        gate = directory.parent
        if share.gate < 0:
            _GATES.make_room(share)
            share.gate = self._lock_remade(gate, run_id, fcntl.LOCK_SH, owner=0)
        else:
            _flock(share.gate, fcntl.LOCK_SH, gate, run_id)
        fcntl.flock(share.gate, fcntl.LOCK_UN)

    @staticmethod
    def _gate_shut(share: _Share) -> bool:
        """Whether an update holds the gate of ``share``'s scope now (a look that does not wait)."""
        try:
            fcntl.flock(share.gate, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(share.gate, fcntl.LOCK_UN)
        return False

    def drop_share(self, share: tuple[Path, int]) -> None:
        """Let go of a share ``take_share`` took (the process's lock with the last of its threads)."""
        directory, how = share
        if how != _SHARED:
            self._let_go(directory, how)
            return
        del _THREAD.depth[directory]
        held = _SHARES[directory]
        fd = -1
        with held.mutex:
            held.count -= 1
            if not held.count:
                fd, held.fd = held.fd, -1
                held.drained.notify_all()
        if fd >= 0:
            _LOCKS.close(fd)

    def _hold(self, directory: Path, run_id: str | None) -> int:
        """Take an exclusive ``flock`` of the turn folder ``directory`` through its gate (which keeps
        new learns out while it waits: ``_Share``) and return its descriptor, or -1 when this thread
        holds it already (through any store object of this process: the lock is per open, so a
        second open would wait for the first); made again when it was removed since it was made, as
        a stage would.

        Raises:
            Unwritable: the folder cannot be opened or locked.
        """
        depth = _THREAD.depth
        held = depth.get(directory)
        if held is not None:
            depth[directory] = held + 1
            return -1
        gate = self._lock_remade(directory.parent, run_id, fcntl.LOCK_EX)
        try:
            fd = self._lock_remade(directory, run_id, fcntl.LOCK_EX)
        finally:
            _LOCKS.close(gate)
        depth[directory] = 1
        return fd

    def _lock_remade(self, directory: Path, run_id: str | None, how: int, owner: int | None = None) -> int:
        """``_lock_fd`` on the turn folder ``directory``, made again first when it was removed since
        it was made (as a stage would). ``owner``: the thread the descriptor is registered to
        (``_OpenLocks``), this one unless given (0: none, the process's share).

        Raises:
            Unwritable: the folder cannot be opened or locked.
        """
        try:
            return self._lock_fd(directory, run_id, how, owner=owner)
        except Unwritable as exc:
            if exc.errno != errno.ENOENT:
                raise
            self._ready_dirs.discard(directory)
            self.ensure_folder(directory, run_id)
            return self._lock_fd(directory, run_id, how, owner=owner)

    @staticmethod
    def _let_go(directory: Path, fd: int) -> None:
        """Let go of what ``_hold`` returned."""
        depth = _THREAD.depth
        if fd < 0:
            depth[directory] -= 1
            return
        del depth[directory]
        _LOCKS.close(fd)

    def turns_after_fork(self, me: int) -> None:
        """In a forked child: forget the turns other threads of the parent held or were taking
        (their mutexes stay held by threads the child does not have); ``me``'s stay."""
        for directory, turn in list(self._turns.items()):
            if turn.owner != me:
                self._turns[directory] = _Turn()
        self._holding = threading.Lock()

    @contextlib.contextmanager
    def folder_lock(self, directory: Path, run_id: str | None, at: OpenDir | None = None) -> Iterator[None]:
        """Hold an exclusive lock on ``directory`` itself (``flock`` on its descriptor, no file added)
        while the caller compares what a name holds and renames over it, so two processes publishing
        commits of one finding cannot leave the older one in place. The lock is advisory and lives
        with the descriptor: a killed holder releases it, and a forked child closes its copy
        (``_OpenLocks``). ``at``: the folder held open (``held``), which a stage made in it names;
        the lock is taken on that folder, opened anew from its descriptor (a lock per open, so
        threads of this process exclude each other too).

        Raises:
            Unwritable: the folder cannot be opened or locked.
        """
        fd = self._lock_fd(directory, run_id, fcntl.LOCK_EX, at)
        try:
            yield
        finally:
            _LOCKS.close(fd)

    def lock_folder(self, directory: Path, run_id: str | None, at: OpenDir | None = None) -> int:
        """``folder_lock`` taken with one call, let go with ``unlock_folder`` (what this returns).

        Raises:
            Unwritable: the folder cannot be opened or locked.
        """
        return self._lock_fd(directory, run_id, fcntl.LOCK_EX, at)

    @staticmethod
    def unlock_folder(fd: int) -> None:
        """Let go of a lock ``lock_folder`` took."""
        _LOCKS.close(fd)

    def _lock_fd(
        self,
        directory: Path,
        run_id: str | None,
        how: int,
        at: OpenDir | None = None,
        owner: int | None = None,
    ) -> int:
        """A new open of ``directory`` (``at``, else held) holding ``flock(how)`` (see ``folder_lock``),
        registered to ``owner`` (``_OpenLocks.open``).

        Raises:
            Unwritable: the folder cannot be opened or locked.
        """
        try:
            if at is None:
                at = self.held_or_missing(directory)
            fd = _LOCKS.open(at, owner)
        except OSError as exc:
            raise _cannot("open", directory, run_id, exc) from exc
        try:
            _flock(fd, how, directory, run_id)
        except Unwritable:
            _LOCKS.close(fd)
            raise
        return fd

    def publish_lazily(self, staged: Any, final: Path, run_id: str | None, *, loose: bool = False) -> None:
        """Rename ``staged`` into place at ``final`` without fsyncing its folder: the name waits in
        ``pending`` until ``flush_names`` makes it durable. ``loose``: the stage was written without
        fsync, and its bytes wait too. When enough names wait, or the oldest has waited long enough,
        this call flushes them before returning.

        Raises:
            Unwritable: the rename failed, or the group's flush did (the name is in place).
        """
        self.publish(staged, final, run_id, sync=False)
        self.renamed_lazily(final, run_id, loose=loose)

    def renamed_lazily(
        self, final: Path, run_id: str | None, *, loose: bool = False, folder: Path | None = None
    ) -> None:
        """Note ``final`` as renamed and not yet durable (see ``publish_lazily``), flushing the names
        that wait when enough do. ``folder``: ``final``'s folder as ``scope_dir`` or ``retired_dir``
        returned it (one object per folder, so the waiting names' folders are told apart by
        identity, not by comparing paths part by part).

        Raises:
            Unwritable: the group's flush failed (the name is in place).
        """
        if self.pending.renamed(final.parent if folder is None else folder, loose):
            try:
                self.flush_names(run_id)
            finally:
                self.pending.group_flushed()

    def flush_names(self, run_id: str | None = None) -> None:
        """Make every name ``publish_lazily`` renamed so far durable, with its file's bytes: one
        ``syncfs`` of each file system holding a loose name (files and names alike), and one fsync
        of each other folder that has a name waiting (shared with threads fsyncing the same
        folder). A folder removed since holds no name to keep.

        Raises:
            Unwritable: a sync failed (its names keep waiting).
        """
        upto, folders, loose = self.pending.snapshot()
        synced: set[int] = set()  # devices a syncfs covered
        for directory in loose:
            try:
                failpoint("memory.before_flush_names")
                dev = os.stat(directory).st_dev
                if dev not in synced:
                    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                    try:
                        syncfs(fd)
                    finally:
                        os.close(fd)
                    synced.add(dev)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise self._unsynced(directory, run_id, exc) from exc
        for directory in folders:
            try:
                if synced and os.stat(directory).st_dev in synced:
                    continue
                failpoint("memory.before_flush_names")
                self._sync_held(directory)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise self._unsynced(directory, run_id, exc) from exc
        self.pending.settled(upto)

    @staticmethod
    def _unsynced(directory: Path, run_id: str | None, exc: OSError) -> Unwritable:
        return Unwritable(
            f"cannot sync {directory}: {describe(exc)}", path=directory, run_id=run_id, errno=exc.errno
        )

    def publish_batches(self, wanted: list[tuple[Path, bytes]]) -> None:
        """Publish each ``(final, data)``, ``SYNC_BATCH`` at a time: stage them all, one data sync,
        the renames, one fsync per folder.

        Raises:
            Unwritable: a link in a path, or a folder or file could not be created or published.
        """
        for i in range(0, len(wanted), SYNC_BATCH):
            batch = wanted[i : i + SYNC_BATCH]
            dirs: dict[Path, OpenDir] = {}
            for directory in dict.fromkeys(final.parent for final, _ in batch):
                refuse_links(self.db_path.parent, directory)
                try:
                    failpoint("memory.before_publish_batch")  # a materialize's look is older now
                    ensure_dir(directory, folder_mode(db_mode(self.db_path)))
                    at = self.held_or_missing(directory)
                except OSError as exc:
                    raise Unwritable(
                        f"cannot create {directory}: {describe(exc)}", path=directory, errno=exc.errno
                    ) from exc
                dirs[directory] = at
            try:
                publish_many(batch, db_mode(self.db_path), dirs=dirs)
                self._durable_names.update(final for final, _ in batch)
            except StagingError as exc:
                raise Unwritable(
                    f"cannot publish learned files: {exc}", path=exc.path, errno=exc.errno
                ) from exc

    def _sync_held(self, directory: Path) -> None:
        """Fsync ``directory`` through its descriptor (``held``), shared with concurrent callers.

        Raises:
            FileNotFoundError: the folder is gone (it holds no name to keep).
            OSError: a link on the way (``ELOOP``), or the fsync failed.
        """
        sync_dir_shared(directory, self.held_or_missing(directory))

    def sync_dir(self, directory: Path, run_id: str | None) -> None:
        """Fsync ``directory`` (shared with concurrent callers), making the names in it durable.

        Raises:
            Unwritable: the fsync failed, or a folder on the way is a link.
        """
        try:
            self._sync_held(directory)
        except OSError as exc:
            raise Unwritable(
                f"cannot fsync {directory}: {describe(exc)}",
                path=directory,
                run_id=run_id,
                errno=exc.errno,
            ) from exc

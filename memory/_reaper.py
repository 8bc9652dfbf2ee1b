"""Unlinking removed files off the caller's path.

A file the store removes (the learned file of a finding just forgotten or superseded, a learned
file ``sync`` has put in the history DB) has no role in any answer once its removal is decided: a
retired file, or the DB, already answers for it. Yet its unlink can cost far more than the rest of
the operation: on a file system mounted with online discard (``-o discard``, common on virtual and
cloud disks), unlinking a file whose blocks are allocated waits for the device to discard them,
about a millisecond each on the machine the benchmarks run on, where a journal append and its
fsync take less.

So a removal renames the file, within its folder, to a hidden stage name (``.stage-…``, which every
reader, the files' index and ``flows check`` already skip as a stage; an erase looks inside such
names for the keys it erases), and this module's thread unlinks those names in the background. The
rename is the removal as far as any reader can tell, as the unlink was. Neither is fsync'd: a power
loss that undoes the rename brings back a file a retired file or the DB already answers for, as a
power loss undoing the unlink did, and a hidden name a crash leaves is a stale stage, which ``flows
check --repair`` sweeps. At interpreter exit the thread is given a bounded time to finish.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
from typing import Protocol


class HeldFolder(Protocol):
    """A folder held open by its owner (``staging.OpenDir``), closed when the last reference goes."""

    @property
    def fd(self) -> int: ...


DRAIN_AT_EXIT_S = 10.0
"""How long the interpreter's exit waits for the unlinks still queued (the rest stay as stale
stages)."""

BATCH = 128
"""Names queued before the thread wakes to unlink them."""

LINGER_S = 1.0
"""The longest a queued removal waits for a batch to fill before it is unlinked anyway."""


class Reaper:
    """A queue of (folder descriptor, hidden names) and one daemon thread that unlinks them.

    The thread wakes once per ``BATCH`` names queued, or ``LINGER_S`` after the oldest one queued, or
    when ``drain`` asks: a thread woken for every removal costs its process more than the unlink
    it spares the caller (each wake hands the interpreter's lock back and forth several times),
    where a batch is unlinked in one stretch while the caller goes on.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        # (folder descriptor, names, the object that owns the descriptor: None when the queue does)
        self._queue: list[tuple[int, list[str], HeldFolder | None]] = []
        self._names = 0  # names in the queue
        self._oldest = 0.0  # when the oldest queued removal was queued (monotonic)
        self._busy = False  # the thread is unlinking a batch taken off the queue
        self._draining = 0  # callers waiting in ``drain``
        self._now = False  # a caller asked for the queue to be unlinked without waiting (``put``'s ``now``)
        self._thread: threading.Thread | None = None

    def put(self, folder_fd: int, names: list[str], *, now: bool = False) -> None:
        """Unlink ``names`` in the folder ``folder_fd`` (a descriptor this call now owns and
        closes) in the background. ``now``: the names are a batch of their own (a ``sync``'s drop
        of a folder's synced files, all at once), unlinked without waiting for ``BATCH`` names or
        ``LINGER_S``: one wake for the lot, and the folder, which its store keeps writing and
        listing, does not carry them as hidden names until a batch fills."""
        self._put(folder_fd, names, None, now=now)

    def put_held(self, folder: HeldFolder, names: list[str]) -> None:
        """Unlink ``names`` in ``folder`` (held open: its descriptor stays open while the queue
        keeps a reference to it, and is neither duplicated nor closed here) in the background."""
        self._put(folder.fd, names, folder)

    def _put(self, folder_fd: int, names: list[str], owner: HeldFolder | None, *, now: bool = False) -> None:
        with self._lock:
            first = not self._queue
            if first:
                self._oldest = time.monotonic()
            self._queue.append((folder_fd, names, owner))
            self._names += len(names)
            self._now = self._now or now
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="flows-memory-reaper", daemon=True)
                self._thread.start()
            elif first or now or self._names >= BATCH:  # the thread sets its linger, or takes the batch
                self._wake.notify_all()

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every queued unlink is done (at most ``timeout`` seconds); whether it was."""
        with self._wake:
            self._draining += 1
            self._wake.notify_all()
            try:
                return self._wake.wait_for(lambda: not self._queue and not self._busy, timeout)
            finally:
                self._draining -= 1

    def _due(self) -> float | None:
        """0 when the queue is to be unlinked now; else how long to wait (None: until told)."""
        if not self._queue:
            return None
        if self._names >= BATCH or self._draining or self._now:
            return 0
        return max(0.0, self._oldest + LINGER_S - time.monotonic())

    def _run(self) -> None:
        while True:
            with self._wake:
                while (due := self._due()) != 0:
                    self._wake.wait(due)
                batch, self._queue, self._names = self._queue, [], 0
                self._busy, self._now = True, False
            try:
                for queued_fd, names, owner in batch:
                    # a held folder's descriptor as it is now (-1 if it was closed since: none unlinked)
                    fd = queued_fd if owner is None else owner.fd
                    try:
                        for name in names:
                            try:
                                os.unlink(name, dir_fd=fd)
                            except OSError:  # gone already (an erase, a sweep), or not removable: a stage
                                continue
                    finally:
                        if owner is None:
                            with contextlib.suppress(OSError):  # the thread outlives any bad descriptor
                                os.close(fd)
                del batch  # the held folders' references go (the last one closes its descriptor)
            finally:
                with self._wake:
                    self._busy = False
                    self._wake.notify_all()

    def _forget_in_child(self) -> None:
        """After a fork: the child has no thread; the parent's queue is the parent's to finish."""
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        old, self._queue, self._names = self._queue, [], 0
        for fd, _, owner in old:
            if owner is None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._busy = False
        self._draining = 0
        self._now = False
        self._thread = None


REAPER = Reaper()
os.register_at_fork(after_in_child=REAPER._forget_in_child)
atexit.register(REAPER.drain, DRAIN_AT_EXIT_S)

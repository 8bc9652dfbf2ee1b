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
import os
import queue
import threading

DRAIN_AT_EXIT_S = 10.0
"""How long the interpreter's exit waits for the unlinks still queued (the rest stay as stale
stages)."""


class Reaper:
    """A queue of (folder descriptor, hidden names) and one daemon thread that unlinks them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._queue: queue.SimpleQueue[tuple[int, list[str]]] = queue.SimpleQueue()
        self._pending = 0
        self._thread: threading.Thread | None = None

    def put(self, folder_fd: int, names: list[str]) -> None:
        """Unlink ``names`` in the folder ``folder_fd`` (a descriptor this call now owns and
        closes) in the background."""
        with self._lock:
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="flows-memory-reaper", daemon=True)
                self._thread.start()
        self._queue.put((folder_fd, names))

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every queued unlink is done (at most ``timeout`` seconds); whether it was."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def _run(self) -> None:
        while True:
            fd, names = self._queue.get()
            try:
                for name in names:
                    try:
                        os.unlink(name, dir_fd=fd)
                    except OSError:  # gone already (an erase, a sweep), or not removable: a stage
                        continue
            finally:
                os.close(fd)
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def _forget_in_child(self) -> None:
        """After a fork: the child has no thread; the parent's queue is the parent's to finish."""
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        old, self._queue = self._queue, queue.SimpleQueue()
        while True:
            try:
                fd, _ = old.get_nowait()
            except queue.Empty:
                break
            os.close(fd)
        self._pending = 0
        self._thread = None


REAPER = Reaper()
os.register_at_fork(after_in_child=REAPER._forget_in_child)
atexit.register(REAPER.drain, DRAIN_AT_EXIT_S)

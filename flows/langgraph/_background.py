"""The store's sync every ``sync_every`` writes, run by a thread of the store's own.

A sync moves the learned files of the store's writes into the history DB (``MemoryStore.sync``
without ``materialize``), so reads and a write's look-up stop listing and weighing an ever longer
folder. It is no durability step: a put's record is durable when its learn returns. Run on the
caller's thread it cost every ``sync_every``-th put a few milliseconds; run here it overlaps the
caller's next puts, whose flushes and SQLite calls let the GIL go (the memory is built for a sync
running beside its reads and learns: other processes' syncs do).

What it keeps of the inline sync's promises:

* a failure is never lost: it is logged at once (a warning of ``flows.langgraph._background``)
  and kept, and raised by the store's next call (or by ``close``), the memory's error itself with
  its code, a note added saying where it came from; until then no other sync starts (it would
  most likely fail the same way);
* ``close`` waits for the sync under way and runs one asked for and not yet begun, then stops the
  thread, which closes its own DB connections (the writer) on its way out: no sync runs after
  ``close``;
* at most one sync runs at a time; writes asked meanwhile make one more, after it;
* in a child process made by ``fork`` the thread is not there: the child starts its own when it
  first needs one (its state is made fresh, never a lock the parent's thread held).
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable

log = logging.getLogger(__name__)

_LIVE: weakref.WeakSet[BackgroundSync] = weakref.WeakSet()


class BackgroundSync:
    """Runs ``sync`` on a thread of its own when asked (``ask``); ``release`` runs on that thread
    when it stops (the thread's DB connections closed there)."""

    def __init__(self, sync: Callable[[], object], release: Callable[[], None], name: str) -> None:
        self._sync = sync
        self._release = release
        self._name = name
        self._fresh()
        _LIVE.add(self)

    def _fresh(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        self._asked = False
        self._running = False
        self._stopping = False  # close: no sync is begun any more
        self._ended = False  # the thread may close its connections and end
        self._failed: BaseException | None = None

    def ask(self) -> None:
        """Have a sync run soon on the thread (started now if need be); nothing while a failure
        waits to be reported, or once stopped."""
        with self._cond:
            if self._stopping or self._failed is not None:
                return
            self._asked = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            elif not self._running:
                self._cond.notify_all()

    def raise_failure(self) -> None:
        """Raise the failure of a sync run on the thread, once (the memory's own error, its code
        kept); nothing when none failed."""
        with self._cond:
            failed, self._failed = self._failed, None
        if failed is not None:
            raise failed

    def wait(self) -> None:
        """Wait until no sync is under way or asked for."""
        with self._cond:
            self._idle()

    def stop(self) -> None:
        """Wait for the sync under way and one asked for, then begin no other."""
        with self._cond:
            self._idle()
            self._stopping = True

    def _idle(self) -> None:
        while self._thread is not None and (self._asked or self._running):
            self._cond.wait()

    def end(self) -> None:
        """Let the thread end, its DB connections closed on it (``release``), and wait for it; a
        sync still asked for runs first (``stop`` first, so that none is)."""
        with self._cond:
            self._stopping = self._ended = True
            thread = self._thread
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        cond = self._cond
        try:
            while True:
                with cond:
                    while not (self._asked or self._ended):
                        cond.wait()
                    if not self._asked:
                        return
                    self._asked = False
                    self._running = True
                try:
                    self._sync()
                except BaseException as exc:  # kept for the caller: never lost, never raised here
                    exc.add_note("raised by the store's sync run in the background after its writes")
                    # said at once too, for a process that never calls the store again nor closes it
                    log.warning(
                        "the store's background sync failed (%s): %s; the store's next call or its "
                        "close raises it",
                        getattr(exc, "code", type(exc).__name__),
                        exc,
                    )
                    with cond:
                        self._failed = exc
                finally:
                    with cond:
                        self._running = False
                        cond.notify_all()
        finally:
            self._release()

    def _forget_in_child(self) -> None:
        self._fresh()


def _after_fork_in_child() -> None:
    for each in list(_LIVE):
        each._forget_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)

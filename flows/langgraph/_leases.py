"""Leases on thread runs: taken to write, held while the thread is busy, let go when it is idle.

A process that writes to a thread holds the lease of the thread's run (``acquire``, a new fencing
epoch) and keeps it while it keeps writing; a background thread lets go of a lease unused for
``idle_s``. Another process that wants to write the thread meanwhile waits (up to ``wait_s``,
polling) for the holder to let go or die: a dead holder frees it at once (file journal: the lock
dies with the process; PostgreSQL: with the session). Because each acquisition raises the epoch,
a holder that stalled while someone else took the thread is refused its next append
(``journal_lease_lost``) and never writes over the newer holder's records.

What this does not promise: that two processes never interleave whole graph runs on one thread
(LangGraph does not ask its checkpointer for that; a holder that was idle for ``idle_s`` lets go
even in the middle of a long node).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from journal import JournalBackend, JournalClosed, JournalLeaseHeld, JournalNotResumable, Lease, RunState


@dataclass
class _Held:
    lease: Lease
    busy: int
    last_used: float


class ThreadLeases:
    """The leases this saver holds on thread runs (thread-safe).

    Args:
        backend: the journal.
        idle_s: let go of a lease unused for this long.
        wait_s: how long ``using`` waits for another live holder before raising JournalLeaseHeld.
        clock, sleep: monotonic seconds and a sleep, injectable for tests.
    """

    def __init__(
        self,
        backend: JournalBackend,
        *,
        idle_s: float,
        wait_s: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._backend = backend
        self._idle_s = idle_s
        self._wait_s = wait_s
        self._clock = clock
        self._sleep = sleep
        self._held: dict[str, _Held] = {}
        self._cond = threading.Condition()
        self._acquiring = threading.Lock()
        self._reaper: threading.Thread | None = None
        self._closed = False

    def holds(self, run_id: str) -> Lease | None:
        """The lease held on ``run_id``, or None (no lock: one read of a dict whose entries are
        replaced whole)."""
        held = self._held.get(run_id)
        return held.lease if held else None

    def adopt(self, lease: Lease) -> None:
        """Keep ``lease`` (from ``begin``) as if it had been acquired here."""
        with self._cond:
            self._held[lease.run_id] = _Held(lease, 0, self._clock())
            self._start_reaper()

    @contextlib.contextmanager
    def using(self, run_id: str) -> Iterator[tuple[Lease, bool]]:
        """Hold ``run_id``'s lease for the block: ``(lease, fresh)``, ``fresh`` when it was acquired
        just now (so the caller's view of the run may be stale and must be re-read).

        Raises JournalLeaseHeld after ``wait_s`` of a live holder elsewhere, JournalNotResumable when
        the run was retired (finished), and the journal's other errors.
        """
        lease, fresh = self._take(run_id)
        try:
            yield lease, fresh
        finally:
            with self._cond:
                held = self._held.get(run_id)
                if held is not None and held.lease == lease:
                    held.busy -= 1
                    held.last_used = self._clock()
                    # No notify: waking the reaper on every write costs a context switch; it looks
                    # again at the latest ``idle_s`` after it last found every lease busy.

    def _take(self, run_id: str) -> tuple[Lease, bool]:
        deadline = self._clock() + self._wait_s
        pause = 0.01
        while True:
            with self._acquiring:  # one acquisition at a time, so two of our threads never race
                with self._cond:
                    if self._closed:
                        raise JournalClosed("this saver is closed; make a new one to go on")
                    held = self._held.get(run_id)
                    if held is not None:
                        held.busy += 1
                        return held.lease, False
                try:
                    lease = self._backend.acquire(run_id)
                except JournalLeaseHeld:
                    if self._clock() >= deadline:
                        raise
                else:
                    with self._cond:
                        self._held[run_id] = _Held(lease, 1, self._clock())
                        self._start_reaper()
                    return lease, True
            self._sleep(pause)
            pause = min(pause * 2, 0.25)

    def drop(self, run_id: str) -> None:
        """Forget the lease on ``run_id`` (it was lost: another process took the run)."""
        with self._cond:
            held = self._held.pop(run_id, None)
        if held is not None:
            self._backend.release(held.lease)

    def retire(self, lease: Lease, error: dict[str, str] | None = None) -> None:
        """Finish the run (``done``: nothing will be written to it again) and forget its lease."""
        with self._cond:
            self._held.pop(lease.run_id, None)
        with contextlib.suppress(JournalNotResumable):  # already finished
            self._backend.finish(lease, RunState.FAILED if error else RunState.DONE, error)

    def release_idle(self) -> None:
        """Let go of every lease unused for ``idle_s`` and not in use now."""
        now = self._clock()
        with self._cond:
            idle = [
                run_id
                for run_id, h in self._held.items()
                if h.busy == 0 and now - h.last_used >= self._idle_s
            ]
            leases = [self._held.pop(run_id).lease for run_id in idle]
        for lease in leases:
            self._backend.release(lease)

    def _start_reaper(self) -> None:
        if self._reaper is None or not self._reaper.is_alive():
            self._reaper = threading.Thread(target=self._reap, name="langgraph-leases", daemon=True)
            self._reaper.start()

    def _reap(self) -> None:
        while True:
            with self._cond:
                if self._closed or not self._held:
                    self._reaper = None
                    return
                idle = [h.last_used for h in self._held.values() if h.busy == 0]
                if not idle:  # every lease is in use: look again when one is put down
                    self._cond.wait(timeout=max(self._idle_s, 0.01))
                    continue
                wait = min(idle) + self._idle_s - self._clock()
                if wait > 0:
                    self._cond.wait(timeout=min(wait, 60.0))
                    continue
            self.release_idle()

    def close(self) -> None:
        """Let go of every lease; safe twice."""
        with self._cond:
            self._closed = True
            leases = [h.lease for h in self._held.values()]
            self._held.clear()
            self._cond.notify_all()
            reaper = self._reaper
        for lease in leases:
            with contextlib.suppress(Exception):
                self._backend.release(lease)
        if reaper is not None and reaper is not threading.current_thread():
            reaper.join(timeout=5)

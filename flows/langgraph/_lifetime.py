"""The open/closed state of a saver or store and the executor its async methods run on."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from journal import JournalClosed


class Lifetime:
    """Whether a ``JournalSaver`` or ``JournalStore`` is closed, and the executor its async methods
    run on, made at the first async call under a lock (two threads' first calls make one executor).
    One object is shared by a saver and its ``with_allowlist`` views, so a view's async call never
    makes an executor that the saver's ``close`` does not shut down, and closing either closes both."""

    def __init__(self, owner: str, max_workers: int, thread_prefix: str) -> None:
        self._owner = owner
        self._thread_prefix = thread_prefix
        self._max_workers = max_workers
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self.closed = False

    def check_open(self) -> None:
        """Raises JournalClosed once closed."""
        if self.closed:
            raise JournalClosed(f"this {self._owner} is closed; make a new one to go on")

    def executor(self) -> ThreadPoolExecutor:
        """The executor, made now if need be; raises JournalClosed once closed."""
        with self._lock:
            self.check_open()
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self._max_workers, thread_name_prefix=self._thread_prefix)
            return self._executor

    def close(self) -> bool:
        """Mark closed and shut the executor down, waiting for its calls; False if already closed."""
        with self._lock:
            if self.closed:
                return False
            self.closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        return True

"""Every ``sail tick`` leaves a trace: ``tick_started`` and ``tick_finished`` in the activity log.

A quiet agent and a broken one look alike from the ledger alone (a failing tick writes no entry), so
the command records when each tick began and how it ended — ``skipped`` (with the reason),
``submitted`` (with the tx hash) or ``failed`` with the error's code — whatever the failure: config,
key, node, chain, a damaged file, the ledger's lock. ``sail status`` reads them back.

Recording is best effort: a tick whose activity log cannot be written fails on its own account
(the write-ahead dispatch needs the same file), and its error is what the command reports.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

from journal import JournalError
from memory.cli import InternalError, Interrupted
from memory.ledger import ActivityLog, LedgerError, TickFinished, TickStarted, fit_text


class TickRecorder:
    """Records one tick's start and outcome in ``<sail_dir>/activity.jsonl``.

    Args:
        sail_dir: the agent's ``.sail`` directory (nothing is recorded while it does not exist).
        clock: unix seconds.
    """

    def __init__(self, sail_dir: Path, clock: Callable[[], float]) -> None:
        self.sail_dir = sail_dir
        self.clock = clock
        self.pid = os.getpid()

    def started(self) -> None:
        """Record ``tick_started``."""
        self._write(TickStarted(ts=self._now(), pid=self.pid))

    def skipped(self, reason: str) -> None:
        """Record a tick that ledgered a skip."""
        self._write(TickFinished(ts=self._now(), pid=self.pid, outcome="skipped", reason=reason))

    def submitted(self, tx_hash: str) -> None:
        """Record a tick that submitted a swap."""
        self._write(TickFinished(ts=self._now(), pid=self.pid, outcome="submitted", tx_hash=tx_hash))

    def failed(self, exc: BaseException) -> None:
        """Record a tick that ended with ``exc`` (its code; an interrupt or a bug gets one too)."""
        code = getattr(exc, "code", None)
        if not isinstance(code, str):
            code = Interrupted.code if not isinstance(exc, Exception) else InternalError.code
        message = fit_text(" ".join((str(exc) or type(exc).__name__).split()))
        self._write(TickFinished(ts=self._now(), pid=self.pid, outcome="failed", code=code, message=message))

    def _now(self) -> int:
        return int(self.clock())

    def _write(self, record: TickStarted | TickFinished) -> None:
        if not self.sail_dir.is_dir():
            return  # no agent here (no `sail init` yet): nothing to record into
        # best effort: the tick's own error, if any, is what gets reported
        with contextlib.suppress(JournalError, LedgerError, OSError, ValueError):
            ActivityLog(self.sail_dir).append(record)

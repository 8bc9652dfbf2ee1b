"""The agent's ticks, read back from its activity log: the last one and how it ended.

Every ``sail tick`` records ``tick_started`` and ``tick_finished`` (``skipped`` with the reason,
``submitted`` with the tx hash, or ``failed`` with the error's code) in the activity log. A quiet
agent and a broken one look alike from the ledger alone (a failing tick writes no entry), so the
owner's views (``sail status``, the dashboard) read these back, newest first, only as far as the
last tick that did not fail.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from memory.ledger._activity import ActivityRecord, TickFinished, TickStarted

#: how many tick records ``tick_history`` reads back before it says "at least"
MAX_TICKS_SCANNED = 100_000
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class TickHistory:
    """The last tick and how many ticks failed since the last one that did not.

    ``last`` is a ``TickStarted`` for a tick that began and has not finished (still running, or
    killed); ``counted_all`` is False when the count stopped at the bound.
    """

    last: TickFinished | TickStarted | None
    failed_since_success: int
    counted_all: bool

    def as_json(self) -> dict[str, Any]:
        """``{"lastTick", "failedTicksSinceSuccess", "failedTicksCountedAll"}`` as ``sail status
        --json`` prints them (``lastTick.tsMs`` is null for a time beyond 64-bit milliseconds)."""
        return {
            "lastTick": tick_json(self.last),
            "failedTicksSinceSuccess": self.failed_since_success,
            "failedTicksCountedAll": self.counted_all,
        }


def tick_history(records: Iterable[ActivityRecord], limit: int = MAX_TICKS_SCANNED) -> TickHistory:
    """Read ``records`` (the activity log, newest first) until the last tick that did not fail, or
    ``limit`` tick records.

    A ``tick_started`` with no ``tick_finished`` of its process after it is a tick still running
    when it is the newest, and one that was killed otherwise (counted as failed).
    """
    last: TickFinished | TickStarted | None = None
    failed = seen = 0
    awaiting_start: set[int] = set()  # processes whose finish was read and whose start was not yet
    for record in records:
        if not isinstance(record, TickFinished | TickStarted):
            continue
        seen += 1
        if seen > limit:
            return TickHistory(last, failed, False)
        if isinstance(record, TickStarted):
            if record.pid in awaiting_start:
                awaiting_start.discard(record.pid)
            elif last is None:
                last = record  # began, and has not finished: still running, or killed
            else:
                failed += 1  # began, and never finished: killed
            continue
        awaiting_start.add(record.pid)
        last = last or record
        if record.ok:
            return TickHistory(last, failed, True)
        failed += 1
    return TickHistory(last, failed, True)


def tick_json(tick: TickFinished | TickStarted | None) -> dict[str, Any] | None:
    """A tick as ``{"tsMs", "outcome", "code", "message", "reason", "txHash"}``; ``outcome`` is
    ``running`` for a tick that began and has not finished."""
    if tick is None:
        return None
    ts_ms = tick.ts * 1000 if 0 <= tick.ts * 1000 <= _INT64_MAX else None
    if isinstance(tick, TickStarted):
        return {
            "tsMs": ts_ms,
            "outcome": "running",
            "code": None,
            "message": None,
            "reason": None,
            "txHash": None,
        }
    return {
        "tsMs": ts_ms,
        "outcome": tick.outcome,
        "code": tick.code,
        "message": tick.message,
        "reason": tick.reason,
        "txHash": tick.tx_hash,
    }

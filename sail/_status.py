"""What the reading commands show: ``sail status``, ``sail why`` and ``sail ledger`` (no web3 here).

``status`` and ``why`` read the verified snapshot and the last lines of the two logs, so they cost
the same on a ten-line ledger and on a million-line one. ``ledger`` lists everything, so it reads
everything: one row per trade (an ``unverified`` entry and its later resolution together, linked by
tx hash), with the revert reason or the never-sent resolution the activity log keeps beside it.

Times follow the command line's convention (``memory.cli``): local time with its UTC offset, and in
JSON epoch milliseconds in keys ending in ``Ms`` (a ledger entry keeps its own ``ts``). The ledger's
table shows every time in one zone, named in its header. A timestamp no calendar can show is
printed as its number, and is null in a ``…Ms`` key.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memory.cli import format_ms, local_moment
from memory.ledger import (
    BACKING_EVENTS,
    CLAIM_NOTE,
    Acted,
    ActivityRecord,
    Backing,
    DispatchDropped,
    DispatchMismatch,
    DispatchSettled,
    DispatchUnsent,
    Entry,
    Outcome,
    ReorgAcknowledged,
    ReorgDetected,
    Skipped,
    TokenBook,
    agent_state,
    reason_text,
)
from memory.ledger import CLOCK_SLACK_S as LEDGER_CLOCK_SLACK_S
from sail._config import SailConfig, sail_dir

#: how far the chain's clock may run ahead of this machine's before ``tick`` says so (as ``status``)
CLOCK_SLACK_S = LEDGER_CLOCK_SLACK_S


def span(seconds: int) -> str:
    """A length of time for people: ``2h 3m 5s``, ``45s``."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else "", f"{secs}s" if secs else ""]
    return " ".join(p for p in parts if p) or "0s"


def ahead(seconds: int | None) -> int | None:
    """``seconds`` when the chain's clock runs ahead by more than ``CLOCK_SLACK_S``, else None."""
    return seconds if seconds is not None and seconds > CLOCK_SLACK_S else None


def chain_ahead_line(seconds: int, of: str) -> str:
    """The line ``status`` and ``tick`` print when the chain's clock runs ahead of ``of``."""
    return (
        f"clock: the chain's clock is {span(seconds)} ({seconds}s) ahead of {of}, as on a dev chain "
        "whose time was moved forward (evm_increaseTime); acts are stamped by the chain's clock, so "
        "cadence counts from a time still to come here (pass --now with the chain's time to tick by it)"
    )


def when(ts: int) -> str:
    """``ts`` for people: local time with its UTC offset, or ``ts <n>`` when no calendar can show it."""
    return format_ms(ts * 1000) if local_moment(ts * 1000) is not None else f"ts {ts}"


def short(tx_hash: str) -> str:
    """A hash shortened for a table: ``0x1234…abcd``."""
    return f"{tx_hash[:6]}…{tx_hash[-4:]}" if len(tx_hash) > 12 else tx_hash


# -- figures for people ----------------------------------------------------------------------------

Render = Callable[[str], str]


def renderer(token: str | None, tokens: TokenBook) -> Render:
    """How a display shows a skip reason: its figures in ``token``'s units beside the raw ones
    (``balance 10.0 USDC (10000000) < min 25.0 USDC``); the ledger keeps the reason as it is."""

    def render(reason: str) -> str:
        return reason_text(reason, token, tokens)

    return render


def as_stored(reason: str) -> str:
    """A reason shown as the ledger stores it."""
    return reason


# -- status ----------------------------------------------------------------------------------------


def agent_status(home: Path, config: SailConfig, *, clock: Callable[[], float] = time.time) -> dict[str, Any]:
    """The status of the agent at ``home`` as a JSON-ready object: ``memory.ledger.agent_state``,
    the one reader the dashboard's agent page and API use too (see ``format_status``).

    Raises:
        journal.JournalCorrupt: the ledger or activity log is damaged where it is read.
        LedgerNotAFile: a file of the agent is not a regular file.
    """
    return agent_state(sail_dir(home), interval_s=config.interval_s, clock=clock)


def format_status(status: dict[str, Any], render: Render = as_stored) -> list[str]:
    """The status as lines of text (local times with their offset; reasons through ``render``)."""
    lines = [f"last tick: {_describe_tick(status['lastTick'], render)}"]
    failed = status["failedTicksSinceSuccess"]
    more = "" if status["failedTicksCountedAll"] else " or more"
    lines.append(f"failed ticks since the last successful one: {failed}{more}")
    last = status["lastConfirmed"]
    if last is None:
        lines.append("last confirmed act: none")
    else:
        lines.append(f"last confirmed act: {_at(last['tsMs'])}, block {last['block']}, tx {last['txHash']}")
        if last["claim"]:
            lines[-1] += (
                f" — {CLAIM_NOTE}: no dispatch_included of that block and status, nor a receipt line of "
                "its dispatch; the tick counts its cadence from it all the same (`sail ledger` shows "
                "every line, `flows check --sail` lists the claims)"
            )
    lines.append(f"next trade: {_describe_next(status, last, render)}")
    lines.append(f"dispatches awaiting reconcile: {_describe_dispatches(status['dispatches'])}")
    lines.append(f"ledger: {status['ledger']}")
    if status["clockAheadS"] is not None:
        lines.append(chain_ahead_line(status["clockAheadS"], "this machine's (the newest time above)"))
    return lines


def _describe_dispatches(dispatches: list[dict[str, Any]]) -> str:
    holding = [d for d in dispatches if d["holdsTrade"]]
    text = str(len(holding))
    if holding:
        text += " (" + ", ".join(f"{short(d['txHash'])} {d['state']}" for d in holding) + ")"
    unsent = len(dispatches) - len(holding)
    if unsent:
        text += f"; {unsent} resolved as never sent, nonce still free (not holding the next trade)"
    return text


def _describe_tick(tick: dict[str, Any] | None, render: Render) -> str:
    if tick is None:
        return "none recorded"
    head = f"{_at(tick['tsMs'])}, {tick['outcome']}"
    if tick["outcome"] == "running":
        return f"{head} (started and not finished: still running, or killed)"
    if tick["outcome"] == "failed":
        return f"{head} [{tick['code']}] {tick['message']}"
    if tick["outcome"] == "skipped":
        return f"{head} ({render(tick['reason'])})"
    return f"{head} (tx {tick['txHash']})"


def _describe_next(status: dict[str, Any], last: dict[str, Any] | None, render: Render) -> str:
    blocked = status["blockedBy"]
    if blocked is not None:
        if blocked["kind"] == "reorg":
            since = _at(blocked["sinceMs"])
            return f"held, every tick fails with chain_reorged: {blocked['reason']} (since {since})"
        if blocked["kind"] == "dispatch":
            return f"blocked until it is resolved: {blocked['reason']} (signed at {_at(blocked['sinceMs'])})"
        return (
            f"blocked: {render(blocked['reason'])} (as of the tick at {_at(blocked['sinceMs'])}; "
            "the owner must act)"
        )
    if last is None:
        return "eligible now (subject to balance, allowance and quote)"
    if status["nextEligibleMs"] is None:
        return f"not within any calendar (last act {_at(last['tsMs'])}, interval {status['intervalS']}s)"
    counted = ", counted from the claimed act above" if last["claim"] else ""
    return f"eligible at {_at(status['nextEligibleMs'])} (interval {status['intervalS']}s{counted})"


def _at(epoch_ms: int | None) -> str:
    return "a time beyond the calendar" if epoch_ms is None else when(epoch_ms // 1000)


# -- why ------------------------------------------------------------------------------------------


# -- ledger ---------------------------------------------------------------------------------------


@dataclass
class _Row:
    time: str
    block: str
    outcome: str
    what: str
    tx: str
    note: str


@dataclass(frozen=True)
class _Notes:
    """What the activity log says about each tx hash beyond the ledger."""

    reverts: dict[str, str]
    resolved: dict[str, str]
    mismatches: dict[str, list[str]]
    backing: Backing


#: the activity events ``sail ledger`` shows beside the entries
NOTE_EVENTS = frozenset(
    {
        "dispatch_reverted",
        "dispatch_unsent",
        "dispatch_dropped",
        "dispatch_mismatch",
        "chain_reorged",
        "reorg_acknowledged",
        *BACKING_EVENTS,
    }
)


def _notes(records: Iterable[ActivityRecord]) -> _Notes:
    notes = _Notes({}, {}, {}, Backing())
    for r in records:
        notes.backing.add(r)
        if isinstance(r, DispatchSettled) and r.event == "dispatch_reverted" and r.reason:
            notes.reverts[r.tx_hash.lower()] = r.reason
        elif isinstance(r, DispatchUnsent | DispatchDropped):
            notes.resolved[r.tx_hash.lower()] = f"{r.event.removeprefix('dispatch_')}: {r.reason}"
        elif isinstance(r, DispatchMismatch):
            notes.mismatches.setdefault(r.tx_hash.lower(), []).append(
                f"chain's {r.field} differs from the local log's"
            )
        elif isinstance(r, ReorgDetected):  # said beside the trade; the ledger line stays as written
            notes.mismatches.setdefault(r.tx_hash.lower(), []).append(
                f"chain_reorged: no longer in block {r.block} as ledgered"
            )
        elif isinstance(r, ReorgAcknowledged):
            notes.mismatches.setdefault(r.tx_hash.lower(), []).append("reorganisation acknowledged")
    return notes


def ledger_rows(
    entries: Sequence[Entry], records: Iterable[ActivityRecord], render: Render = as_stored
) -> list[str]:
    """The ledger as an aligned table, one row per skip and per trade, every time in one zone (the
    local zone's offset now, named in the header); skip reasons through ``render``."""
    zone = datetime.now().astimezone().tzinfo or UTC
    stamp = _stamper(zone)
    notes = _notes(records)
    rows: list[_Row] = []
    by_hash: dict[str, _Row] = {}
    for entry in entries:
        if isinstance(entry, Skipped):
            rows.append(_Row(stamp(entry.ts), _block(entry.block), "skipped", render(entry.reason), "", ""))
            continue
        key = entry.tx_hash.lower()
        row = by_hash.get(key)
        claim = not notes.backing.backs(entry)
        if row is not None and (claim or row.outcome in _FINAL):
            # a second final line, or a claim, never takes the place of what the row shows: both
            # are shown, each as the ledger holds it
            note = CLAIM_NOTE if claim else "another final line for this transaction (see above)"
            second = _Row("", "", "", "", short(entry.tx_hash), note)
            _fill(second, entry, notes, stamp)
            rows.append(second)
            continue
        if row is None:
            row = by_hash[key] = _Row("", "", "", "", short(entry.tx_hash), "")
            rows.append(row)
            if entry.outcome is Outcome.UNVERIFIED:
                row.note = f"unverified at {stamp(entry.ts)}"
            elif claim:
                row.note = CLAIM_NOTE
        elif row.note:
            row.note += f"; resolved {entry.outcome}"
        _fill(row, entry, notes, stamp)
    for key, row in by_hash.items():
        extra = [*notes.mismatches.get(key, [])]
        if row.outcome == str(Outcome.UNVERIFIED) and key in notes.resolved:
            extra.append(notes.resolved[key])
        if extra:
            row.note = "; ".join(filter(None, [row.note, *extra]))
    return _table(rows, _zone_name(zone))


_FINAL = (str(Outcome.CONFIRMED), str(Outcome.REVERTED))


def _stamper(zone: Any) -> Any:
    def stamp(ts: int) -> str:
        try:
            return datetime.fromtimestamp(ts, zone).strftime("%Y-%m-%d %H:%M:%S")
        except (OverflowError, OSError, ValueError):
            return f"ts {ts}"

    return stamp


def _zone_name(zone: Any) -> str:
    offset = datetime.now(zone).utcoffset() or timedelta(0)
    minutes = int(offset.total_seconds()) // 60
    sign = "-" if minutes < 0 else "+"
    return f"UTC{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _fill(row: _Row, entry: Acted, notes: _Notes, stamp: Any) -> None:
    row.time = stamp(entry.ts)
    row.block = _block(entry.block)
    row.outcome = str(entry.outcome)
    amount_in = entry.amount_in.human if entry.amount_in else "?"
    amount_out = entry.amount_out.human if entry.amount_out else "-"
    row.what = f"{entry.action} {amount_in} -> {amount_out}"
    if entry.outcome is Outcome.REVERTED:
        reason = notes.reverts.get(entry.tx_hash.lower())
        row.what += f" (reverted: {reason})" if reason else " (reverted, no reason given)"


def _block(block: int | None) -> str:
    return "-" if block is None else str(block)


def _table(rows: list[_Row], zone: str) -> list[str]:
    header = _Row(f"time ({zone})", "block", "outcome", "what", "tx", "note")
    cells = [[r.time, r.block, r.outcome, r.what, r.tx, r.note] for r in [header, *rows]]
    widths = [max(len(c[i]) for c in cells) for i in range(5)]
    return ["  ".join([*(c[i].ljust(widths[i]) for i in range(5)), c[5]]).rstrip() for c in cells]

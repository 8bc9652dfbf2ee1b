"""The agent's state as its owner reads it: one reader, for ``sail status``, ``sail why`` and the
dashboard's agent page and API alike.

``agent_state`` answers from the verified snapshot (the last confirmed act, every dispatch not yet
resolved and those resolved as never sent, token metadata), the ledger's newest line and the
activity log's last ticks, so it costs the same on a ten-line ledger and on a million-line one while
the snapshot holds (a missing or disagreeing one is rebuilt from both files, as every reader does).
With ``save=False`` it writes nothing, not even a rebuilt snapshot (the dashboard is read-only).

A dispatch is in one of these states, by the last thing the activity log and the ledger say of it:

============  ===================================================================  ===========
state         what is known                                                        holds trade
============  ===================================================================  ===========
signed        written ahead (``dispatch_signed``); no node is known to have it      yes
submitted     a node accepted it (``dispatch_submitted``); no receipt read yet      yes
settled       its receipt was read (``dispatch_executed``/``_reverted``); no line   yes
unverified    the ledger holds it ``unverified`` (the chain could not be read)      yes
unsent        resolved as never sent (``dispatch_unsent``); its nonce still free    no
dropped       logged ``dispatch_dropped``, its nonce consumed, its receipt unread   yes
claimed       a final ledger line resolved it, yet the chain has not used its nonce  yes
============  ===================================================================  ===========

A dispatch ledgered with a final outcome is no longer listed; nor is one logged ``dispatch_dropped``
(still watched: the line is a claim the chain must bear out) unless it holds the next trade; nor
one a final ledger line resolved unless the newest tick found that line a claim (``claimed``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memory.ledger._activity import ActivityLog, ReorgDetected
from memory.ledger._entries import DROPPED_UNBORNE, RESOLUTION_UNBORNE, UNSENT_BUT_CONSUMED, Skipped
from memory.ledger._ledger import Ledger
from memory.ledger._reorg import held_reorg
from memory.ledger._snapshot import OpenDispatch, Snapshot
from memory.ledger._ticks import tick_history

#: how far the newest time recorded may run ahead of the machine's clock before the state says so
CLOCK_SLACK_S = 60
#: how many ledger lines ``recent_skips`` reads back at most
MAX_SKIP_SCAN = 100_000
_INT64_MAX = 2**63 - 1
#: the reasons, among the standard forms, that say the next trade waits on the owner, not the clock
_OWNER_REASONS = ("balance", "allowance", "quote")
_PHRASES = {
    "signed": "signed, not known to have reached a node; the next tick resolves it from the chain",
    "submitted": "accepted by a node, no receipt read yet",
    "settled": "its receipt was read; the next tick ledgers it",
    "unverified": "ledgered unverified, the chain could not be read; the next tick resolves it",
    "dropped": "logged as dropped, yet the node cannot say another transaction took its nonce (its "
    "receipt unreadable, or not deep enough); the next tick ledgers it once its receipt can be read",
    "claimed": "a final ledger line resolves it, yet the chain has not used its nonce: no receipt backs "
    "that line (a claim); the next trade waits until the chain settles it",
    "unsent": "resolved as never sent, yet its nonce has been consumed since; the next tick ledgers "
    "it once its receipt can be read",
}


def ms(ts: int) -> int | None:
    """``ts`` (unix seconds) in epoch milliseconds, or None beyond what a JSON time carries."""
    value = ts * 1000
    return value if 0 <= value <= _INT64_MAX else None


def dispatch_state(dispatch: OpenDispatch) -> str:
    """``signed``, ``submitted``, ``settled`` or ``unverified`` for a dispatch still open."""
    if dispatch.unverified:
        return "unverified"
    if dispatch.settled:
        return "settled"
    return "submitted" if dispatch.broadcast else "signed"


def _dispatch_json(dispatch: OpenDispatch, state: str, holding: str | None) -> dict[str, Any]:
    return {
        "txHash": dispatch.tx_hash,
        "state": state,
        "nonce": dispatch.nonce,
        "sinceMs": ms(dispatch.ts),
        "holdsTrade": state not in ("unsent", "dropped", "claimed") or dispatch.tx_hash.lower() == holding,
    }


def dispatches_json(snap: Snapshot, newest: object = None) -> list[dict[str, Any]]:
    """Every dispatch the snapshot knows not finally resolved, oldest first, with its state (an
    unsent one holds the trade when the newest ledger entry is a skip it held; ``newest``)."""
    listed = [(d, dispatch_state(d)) for d in snap.open] + [(d, "unsent") for d in snap.unsent]
    held = _holding_unsent(snap, newest)
    holding = None if held is None else held.tx_hash.lower()
    listed += [(d, "dropped") for d in snap.dropped if d.tx_hash.lower() == holding]  # else: not listed
    listed += [(d, "claimed") for d in snap.resolved if d.tx_hash.lower() == holding]
    listed.sort(key=lambda pair: (pair[0].ts, pair[0].line.offset))
    return [_dispatch_json(d, state, holding) for d, state in listed]


def _holding_unsent(snap: Snapshot, newest: object) -> OpenDispatch | None:
    """The dispatch resolved as unsent that held the newest tick's trade: its nonce was consumed
    since and reconcile could not ledger it yet (the tick skipped ``unresolved dispatch <it>``)."""
    if not isinstance(newest, Skipped) or not newest.reason.startswith("unresolved dispatch "):
        return None
    if not newest.reason.endswith((UNSENT_BUT_CONSUMED, DROPPED_UNBORNE, RESOLUTION_UNBORNE)):
        return None  # an open one's, resolved since
    named = newest.reason.removeprefix("unresolved dispatch ").split(",", 1)[0].lower()
    claimed = snap.resolved if newest.reason.endswith(RESOLUTION_UNBORNE) else ()
    watched = (*snap.unsent, *snap.dropped, *claimed)
    return next((d for d in watched if d.tx_hash.lower() == named), None)


def agent_state(
    sail_dir: str | Path,
    *,
    interval_s: int | None,
    interval_problem: str | None = None,
    clock: Callable[[], float] = time.time,
    save: bool = True,
) -> dict[str, Any]:
    """The agent's state as a JSON-ready object: what ``sail status --json`` prints and the
    dashboard's ``/api/agents/N/status`` serves, field by field.

    * ``lastConfirmed``: ``{"tsMs", "block", "txHash", "signedMs", "claim"}`` of the last confirmed
      act (its block's time; ``signedMs``: the latest time a tick signed a confirmed act, null when
      no line says; ``claim``: true when the activity log does not back its line, ``Backing``: the
      tick counts its cadence from it all the same), or null;
    * ``intervalS``, ``intervalProblem`` (why the interval is unknown, else null);
    * ``nextEligibleMs``: the later of the last act's block time and ``signedMs``, plus the interval;
      null while something else holds the next trade, with no act yet, or with the interval unknown;
    * ``blockedBy``: ``{"kind", "reason", "sinceMs"}`` — ``dispatch`` (the oldest dispatch that
      holds the trade), or ``balance``/``allowance``/``quote`` when the newest ledger entry is such
      a skip (its reason as stored) — or null;
    * ``openDispatches``: the tx hashes that hold the trade; ``dispatches``: every dispatch listed
      above with its ``state``, ``nonce``, ``sinceMs`` and ``holdsTrade``;
    * ``lastTick``, ``failedTicksSinceSuccess``, ``failedTicksCountedAll`` (``tick_history``);
    * ``tokens``: ``{address: {"decimals", "symbol"}}`` the activity log recorded;
    * ``ledger``: the ledger's path; ``clockAheadS``: seconds the newest time recorded (the last
      act, the newest entry, the last tick) runs ahead of ``clock`` past ``CLOCK_SLACK_S``, else null;
    * ``chainReorged``: the ``chain_reorged`` line that holds trading until it is acknowledged
      (``reorg_json``), else null; while it is there ``blockedBy`` is of kind ``reorg``.

    Raises:
        journal.JournalCorrupt: the ledger or the activity log is damaged where it is read.
        LedgerNotAFile: a file of the agent is not a regular file.
    """
    directory = Path(sail_dir)
    ledger = Ledger(directory)
    snap = ledger.state(save=save)
    newest = next(ledger.iter_reverse(), None)
    history = tick_history(ActivityLog(directory).iter_reverse())
    last = snap.last_confirmed
    reorged = held_reorg(ledger, snap)
    blocked = _reorg_block(reorged) if reorged is not None else blocked_by(snap, newest)
    next_ms = None
    if blocked is None and last is not None and interval_s is not None:
        next_ms = ms(last.since + interval_s)
    stamps = [t.ts for t in (last, newest, history.last) if t is not None]
    ahead = max(stamps) - int(clock()) if stamps else None
    return {
        "lastConfirmed": None
        if last is None
        else {
            "tsMs": ms(last.ts),
            "block": last.block,
            "txHash": last.tx_hash,
            "signedMs": None if last.signed_ts is None else ms(last.signed_ts),
            "claim": not snap.last_backed,
        },
        "intervalS": interval_s,
        "intervalProblem": interval_problem,
        "nextEligibleMs": next_ms,
        "blockedBy": blocked,
        "openDispatches": [d["txHash"] for d in dispatches_json(snap, newest) if d["holdsTrade"]],
        "dispatches": dispatches_json(snap, newest),
        **history.as_json(),
        "tokens": {t: {"decimals": d, "symbol": s} for t, (d, s) in sorted(snap.tokens.items())},
        "ledger": str(ledger.path),
        "clockAheadS": ahead if ahead is not None and ahead > CLOCK_SLACK_S else None,
        "chainReorged": None if reorged is None else reorg_json(reorged),
    }


def reorg_json(record: ReorgDetected) -> dict[str, Any]:
    """A held ``chain_reorged`` line as ``status`` shows it (``sinceMs``: when it was found)."""
    return {
        "txHash": record.tx_hash,
        "block": record.block,
        "blockHash": record.block_hash,
        "chainBlock": record.chain_block,
        "chainBlockHash": record.chain_block_hash,
        "chainStatus": record.chain_status,
        "reason": record.reason,
        "sinceMs": ms(record.ts),
        "acknowledge": f"sail ack-reorg {record.tx_hash}",
    }


def _reorg_block(record: ReorgDetected) -> dict[str, Any]:
    return {
        "kind": "reorg",
        "reason": f"chain reorganised: the ledgered swap {record.tx_hash} (block {record.block}) is no "
        f"longer there: {record.reason}; review, then `sail ack-reorg {record.tx_hash}`",
        "sinceMs": ms(record.ts),
    }


def blocked_by(snap: Snapshot, newest: object) -> dict[str, Any] | None:
    """What holds the next trade other than the clock: the oldest dispatch not yet resolved, or the
    newest ledger entry being a skip that waits on the owner."""
    if snap.open:
        oldest = min(snap.open, key=lambda d: (d.ts, d.line.offset))
        state = dispatch_state(oldest)
        return {
            "kind": "dispatch",
            "reason": f"unresolved dispatch {oldest.tx_hash} ({state}: {_PHRASES[state]})",
            "sinceMs": ms(oldest.ts),
        }
    held = _holding_unsent(snap, newest)
    if held is not None:
        return {
            "kind": "dispatch",
            "reason": f"unresolved dispatch {held.tx_hash} ({_unsent_or_dropped(snap, held)})",
            "sinceMs": ms(held.ts),
        }
    if isinstance(newest, Skipped):
        kind = newest.reason.split(" ", 1)[0]
        if kind in _OWNER_REASONS:
            return {"kind": kind, "reason": newest.reason, "sinceMs": ms(newest.ts)}
    return None


def _unsent_or_dropped(snap: Snapshot, held: OpenDispatch) -> str:
    state = "unsent" if held in snap.unsent else "dropped" if held in snap.dropped else "claimed"
    return f"{state}: {_PHRASES[state]}"


def recent_skips(ledger: Ledger, limit: int, *, max_lines: int = MAX_SKIP_SCAN) -> list[Skipped]:
    """The ``limit`` most recent skips, newest first, among the ledger's last ``max_lines`` lines
    (what ``sail why`` and the dashboard show; read backwards, failing closed like every read)."""
    skips: list[Skipped] = []
    if limit <= 0:
        return skips
    for n, entry in enumerate(ledger.iter_reverse()):
        if n >= max_lines:
            break
        if isinstance(entry, Skipped):
            skips.append(entry)
            if len(skips) >= limit:
                break
    return skips

"""Reorganisations deeper than ``confirmations``: seen by every tick, held until a person acknowledges.

A receipt is ledgered once its block is ``confirmations`` deep, and a ledger line is never taken
back. A reorganisation deeper than that after ledgering leaves the ledger claiming a swap the chain
no longer holds, and the agent trading from a wrong position. So reconcile logs, just before each
``acted`` line it writes from a receipt, where the chain held it (``dispatch_included``: block number
and hash), and every tick, before anything else, asks the chain for the receipt of each recent
ledgered act (one request each, no ledger read: the snapshot names them), oldest first:

* still in the same block (number and hash) with the status ledgered (1 confirmed, 0 reverted) →
  nothing to say;
* no receipt, while the block at that number still has that hash → the node keeps no index of old
  transactions (a node may drop it after a year or so): the block, and so the swap, is still there;
* otherwise (no receipt and another block there, or none; a receipt in another block, or with
  another status) → ``chain_reorged`` in the activity log (where it was ledgered, what the chain
  says now) and ``ChainReorged``: nothing is reconciled, decided or sent.

The recent acts are the newest confirmed act, whatever its depth, and those of the last
``RECENT_ACTS`` confirmed or reverted acts (a revert holds nothing, so a reverted swap mined again
where it does not revert would make the agent's next swap a second one) whose block is fewer than
``REORG_WINDOW_BLOCKS`` below the chain's head. The newest alone would not do: an older act can be
gone while the newest stands (mined again in another block, which a person may find harmless and
acknowledge; or acknowledged earlier, and no longer checked), and the ledger would count a swap the
chain no longer holds.

A node that cannot be read is ``ChainUnavailable``, as ever: never taken for a reorganisation.
Until a ``reorg_acknowledged`` line names the transaction (``acknowledge_reorg``, ``sail
ack-reorg``), every tick fails the same way without asking the chain. The acknowledgement is a new
line, the ledger is not edited: the act stays in it as written, and its place on the chain is not
checked again (the other recent acts still are).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from memory.ledger._activity import ActivityLog, ReorgAcknowledged, ReorgDetected
from memory.ledger._errors import ChainReorged, ChainUnavailable, ReorgNotHeld
from memory.ledger._ledger import Ledger, LedgerWriter
from memory.ledger._reconcile import Receipt
from memory.ledger._snapshot import Included, Snapshot


class ReceiptReader(Protocol):
    """What the check reads from the chain; each method raises ``ChainUnavailable`` on failure."""

    def receipt(self, tx_hash: str, timeout: float) -> Receipt | None:
        """The receipt of ``tx_hash`` (``timeout`` 0: as the node has it now); None without one."""
        ...

    def block_hash(self, block: int) -> str | None:
        """The hash of the block at number ``block`` (0x-hex), or None when the chain has none."""
        ...

    def chain_id(self) -> int:
        """The chain id the node serves."""
        ...

    def head(self) -> int:
        """The number of the chain's latest block."""
        ...


#: how near the chain's head (in blocks) an act other than the newest must be for each tick to check
#: it: 256 blocks is about 51 minutes of Ethereum mainnet, four times the depth past which its blocks
#: are final (two epochs, 64 blocks); an older act's place is taken as settled
REORG_WINDOW_BLOCKS = 256


def check_ledgered_acts(
    writer: LedgerWriter,
    activity: ActivityLog,
    reader: ReceiptReader,
    *,
    clock: Callable[[], int],
    window_blocks: int = REORG_WINDOW_BLOCKS,
) -> None:
    """Check that the chain still holds the recent ledgered acts where they were ledgered.

    The acts checked: the newest confirmed act (whatever its depth), and each of the snapshot's
    ``anchors`` (the last ``RECENT_ACTS`` confirmed or reverted acts) whose block is fewer than
    ``window_blocks`` below the chain's head; none whose reorganisation was acknowledged, nor any
    ledgered without its block hash or on another chain than the node serves. Oldest first: the
    first found moved or gone is the one logged and held (its acknowledgement lets the next tick
    check the others).

    Costs one receipt request per act checked (and a block request for each the node has no
    receipt of), at most ``RECENT_ACTS`` + 1, whatever the ledger's length; the chain id, which
    the tick reads anyway; and the head's number when there is an act besides the newest to check.
    Nothing is asked when no act is to be checked.

    Raises:
        ChainReorged: one does not (``chain_reorged`` was logged now), or an earlier tick found so
            and no one has acknowledged it yet (nothing is asked of the chain).
        ChainUnavailable: the node could not be read (not a reorganisation).
    """
    state = writer.refresh()
    if state.reorged is not None:
        raise _held(writer.ledger, state)
    acked = {m.tx_hash.lower() for m in state.acked}
    if state.acknowledged is not None:
        acked.add(state.acknowledged.tx_hash.lower())
    newest = None if state.last_confirmed is None else state.anchor
    candidates = {a.tx_hash.lower(): a for a in (*state.anchors, *([] if newest is None else [newest]))}
    for key in acked:
        candidates.pop(key, None)
    if not candidates:
        return
    serving = reader.chain_id()  # another chain's node knows nothing of them (rpc_url moved on)
    due = [a for a in candidates.values() if a.chain_id == serving]
    if any(a is not newest for a in due):
        head = reader.head()
        due = [a for a in due if a is newest or head - a.block < window_blocks]
    for anchor in sorted(due, key=lambda a: a.block):
        record = _moved(anchor, reader, clock)
        if record is not None:
            activity.append(record)
            writer.refresh()
            raise _error(record, writer.ledger.activity_path, found_now=True, newest=anchor is newest)


#: the former name, from when only the newest act was checked
check_newest_act = check_ledgered_acts


def _moved(anchor: Included, reader: ReceiptReader, clock: Callable[[], int]) -> ReorgDetected | None:
    """The ``chain_reorged`` record of an act the chain no longer holds where it was ledgered, or None."""
    receipt = reader.receipt(anchor.tx_hash, 0)
    if receipt is not None and receipt.block_hash is None:
        raise ChainUnavailable(
            f"the node's receipt of {anchor.tx_hash} names no block hash; check that the configured "
            "rpc_url is an Ethereum JSON-RPC node"
        )
    if receipt is not None and _same_place(receipt, anchor):
        return None
    if receipt is None and reader.block_hash(anchor.block) == anchor.block_hash:
        return None  # the node has no index of the transaction, but its block is still there
    return ReorgDetected(
        ts=clock(),
        tx_hash=anchor.tx_hash,
        block=anchor.block,
        block_hash=anchor.block_hash,
        chain_block=None if receipt is None else receipt.block,
        chain_block_hash=None if receipt is None else receipt.block_hash,
        chain_status=None if receipt is None else receipt.status,
        reason=_what_changed(anchor, receipt),
    )


def _same_place(receipt: Receipt, anchor: Included) -> bool:
    return (
        receipt.status == anchor.status
        and receipt.block == anchor.block
        and (receipt.block_hash or "").lower() == anchor.block_hash.lower()
    )


def _what_changed(anchor: Included, receipt: Receipt | None) -> str:
    if receipt is None:
        return (
            f"the chain has no receipt for it, and block {anchor.block} is no longer {anchor.block_hash}: "
            "the swap is gone from the chain (it may be pending again, or never be mined)"
        )
    if receipt.status != anchor.status:
        now = "reverted" if receipt.status != 1 else "was taken, not reverted as ledgered,"
        return f"the chain's receipt now says it {now} (status {receipt.status}) in block {receipt.block}"
    return f"the chain now holds it in block {receipt.block} ({receipt.block_hash}), not where ledgered"


def _held(ledger: Ledger, state: Snapshot) -> ChainReorged:
    """The error of a tick while a ``chain_reorged`` line is not acknowledged."""
    assert state.reorged is not None
    record = ledger.activity_at(state.reorged.line)
    if not isinstance(record, ReorgDetected):  # the verified snapshot named it a moment ago
        raise ChainUnavailable(f"{ledger.activity_path} changed while the ledger was locked; tick again")
    last = state.last_confirmed
    newest = last is not None and last.tx_hash.lower() == record.tx_hash.lower()
    return _error(record, ledger.activity_path, found_now=False, newest=newest)


def _error(record: ReorgDetected, path: Path, *, found_now: bool, newest: bool) -> ChainReorged:
    when = "" if found_now else " (found by an earlier tick; trading is held until it is acknowledged)"
    which = "the newest ledgered swap" if newest else "an earlier ledgered swap"
    return ChainReorged(
        f"the chain no longer holds {which} {record.tx_hash} where it was ledgered "
        f"(block {record.block}, {record.block_hash}): {record.reason}{when}. The ledger still counts "
        "it, so nothing was reconciled, decided or sent. Inspect the chain and the agent's balances "
        f"against `sail ledger` and `sail status`; once reviewed, run `sail ack-reorg {record.tx_hash}` "
        "to let it trade again (the ledger keeps its line as written)",
        tx_hash=record.tx_hash,
        block=record.block,
        block_hash=record.block_hash,
        path=path,
    )


def held_reorg(ledger: Ledger, state: Snapshot) -> ReorgDetected | None:
    """The ``chain_reorged`` record that holds trading, or None (one small read)."""
    if state.reorged is None:
        return None
    record = ledger.activity_at(state.reorged.line)
    return record if isinstance(record, ReorgDetected) else None


def acknowledge_reorg(
    sail_dir: str | Path, tx_hash: str, *, clock: Callable[[], int], lock_timeout: float = 120.0
) -> ReorgDetected:
    """Append ``reorg_acknowledged`` for the held reorganisation of ``tx_hash``, under the ledger's
    lock (a tick never runs beside it); return the ``chain_reorged`` record it answers.

    Raises:
        ReorgNotHeld: no unacknowledged ``chain_reorged`` line names ``tx_hash`` (nothing written).
        LedgerBusy: a tick held the ledger's lock for ``lock_timeout`` seconds.
        journal.JournalCorrupt: the ledger or activity log is damaged.
    """
    ledger = Ledger(sail_dir)
    if ledger.state(save=False).reorged is None:  # checked before the lock, which makes the files
        raise _not_held(ledger, tx_hash, None)
    with ledger.writer(lock_timeout) as writer:
        held = held_reorg(ledger, writer.state)
        if held is None or held.tx_hash.lower() != tx_hash.lower():
            raise _not_held(ledger, tx_hash, held)
        ActivityLog(sail_dir).append(ReorgAcknowledged(ts=clock(), tx_hash=held.tx_hash))
        writer.refresh()
    return held


def _not_held(ledger: Ledger, tx_hash: str, held: ReorgDetected | None) -> ReorgNotHeld:
    now = "no reorganisation is held" if held is None else f"the held one is {held.tx_hash}"
    return ReorgNotHeld(
        f"no unacknowledged chain_reorged line names {tx_hash} ({now}); nothing was written: "
        "`sail status` shows what holds the agent",
        tx_hash=tx_hash,
        path=ledger.activity_path,
    )

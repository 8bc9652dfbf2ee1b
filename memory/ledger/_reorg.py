"""Reorganisations deeper than ``confirmations``: seen by every tick, held until a person acknowledges.

A receipt is ledgered once its block is ``confirmations`` deep, and a ledger line is never taken
back. A reorganisation deeper than that after ledgering leaves the ledger claiming a swap the chain
no longer holds, and the agent trading from a wrong position. So reconcile logs, just before each
``acted`` line it writes from a receipt, where the chain held it (``dispatch_included``: block number
and hash), and every tick, before anything else, asks the chain for the receipt of the newest
ledgered act (the snapshot's last confirmed act: one request, no ledger read):

* still in the same block (number and hash) with status 1 → nothing to say;
* no receipt, while the block at that number still has that hash → the node keeps no index of old
  transactions (a node may drop it after a year or so): the block, and so the swap, is still there;
* otherwise (no receipt and another block there, or none; a receipt in another block, or with
  another status) → ``chain_reorged`` in the activity log (where it was ledgered, what the chain
  says now) and ``ChainReorged``: nothing is reconciled, decided or sent.

A node that cannot be read is ``ChainUnavailable``, as ever: never taken for a reorganisation.
Until a ``reorg_acknowledged`` line names the transaction (``acknowledge_reorg``, ``sail
ack-reorg``), every tick fails the same way without asking the chain. The acknowledgement is a new
line, the ledger is not edited: the act stays in it as written, and its place on the chain is not
checked again (the next act ledgered is).
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


def check_newest_act(
    writer: LedgerWriter, activity: ActivityLog, reader: ReceiptReader, *, clock: Callable[[], int]
) -> None:
    """Check that the chain still holds the newest ledgered act where it was ledgered.

    Costs one receipt request (and a block request when the node has no receipt), whatever the
    ledger's length (and the chain id, which the tick reads anyway); nothing when no act is ledgered
    with its block hash, when its reorganisation was acknowledged, or when the node serves another
    chain than the act's.

    Raises:
        ChainReorged: it does not (``chain_reorged`` was logged now), or an earlier tick found so
            and no one has acknowledged it yet (nothing is asked of the chain).
        ChainUnavailable: the node could not be read (not a reorganisation).
    """
    state = writer.refresh()
    if state.reorged is not None:
        raise _held(writer.ledger, state)
    last, anchor, acked = state.last_confirmed, state.anchor, state.acknowledged
    if last is None or anchor is None:
        return
    if acked is not None and acked.tx_hash.lower() == last.tx_hash.lower():
        return
    if reader.chain_id() != anchor.chain_id:
        return  # another chain's node knows nothing of the act (rpc_url moved on): nothing to say
    receipt = reader.receipt(anchor.tx_hash, 0)
    if receipt is not None and receipt.block_hash is None:
        raise ChainUnavailable(
            f"the node's receipt of {anchor.tx_hash} names no block hash; check that the configured "
            "rpc_url is an Ethereum JSON-RPC node"
        )
    if receipt is not None and _same_place(receipt, anchor):
        return
    if receipt is None and reader.block_hash(anchor.block) == anchor.block_hash:
        return  # the node has no index of the transaction, but its block is still there
    record = ReorgDetected(
        ts=clock(),
        tx_hash=anchor.tx_hash,
        block=anchor.block,
        block_hash=anchor.block_hash,
        chain_block=None if receipt is None else receipt.block,
        chain_block_hash=None if receipt is None else receipt.block_hash,
        chain_status=None if receipt is None else receipt.status,
        reason=_what_changed(anchor, receipt),
    )
    activity.append(record)
    writer.refresh()
    raise _error(record, writer.ledger.activity_path, found_now=True)


def _same_place(receipt: Receipt, anchor: Included) -> bool:
    return (
        receipt.status == 1
        and receipt.block == anchor.block
        and (receipt.block_hash or "").lower() == anchor.block_hash.lower()
    )


def _what_changed(anchor: Included, receipt: Receipt | None) -> str:
    if receipt is None:
        return (
            f"the chain has no receipt for it, and block {anchor.block} is no longer {anchor.block_hash}: "
            "the swap is gone from the chain (it may be pending again, or never be mined)"
        )
    if receipt.status != 1:
        return f"the chain's receipt now says it reverted (status {receipt.status}) in block {receipt.block}"
    return f"the chain now holds it in block {receipt.block} ({receipt.block_hash}), not where ledgered"


def _held(ledger: Ledger, state: Snapshot) -> ChainReorged:
    """The error of a tick while a ``chain_reorged`` line is not acknowledged."""
    assert state.reorged is not None
    record = ledger.activity_at(state.reorged.line)
    if not isinstance(record, ReorgDetected):  # the verified snapshot named it a moment ago
        raise ChainUnavailable(f"{ledger.activity_path} changed while the ledger was locked; tick again")
    return _error(record, ledger.activity_path, found_now=False)


def _error(record: ReorgDetected, path: Path, *, found_now: bool) -> ChainReorged:
    when = "" if found_now else " (found by an earlier tick; trading is held until it is acknowledged)"
    return ChainReorged(
        f"the chain no longer holds the newest ledgered swap {record.tx_hash} where it was ledgered "
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

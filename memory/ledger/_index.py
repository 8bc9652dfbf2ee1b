"""Folding the activity log and the ledger into the snapshot's state, line by line.

The state is a pure function of the two files' lines, folded in order: every line of the activity log
up to some offset, then every line of the ledger up to some offset. So it can be rebuilt from scratch
(fold both files whole) or caught up (fold only the lines past the covered prefixes), with the same
result. The order matters in one way: a ledger line that resolves a dispatch is always written after
that dispatch's activity line (a later tick reconciles it), so the ledger's end is measured before
the activity log's, and a resolution is never folded before the dispatch it resolves.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from memory.ledger._activity import (
    ActivityRecord,
    DispatchDropped,
    DispatchIncluded,
    DispatchSettled,
    DispatchSigned,
    DispatchSubmitted,
    DispatchUnsent,
    ReorgAcknowledged,
    ReorgDetected,
    TokenMetadata,
)
from memory.ledger._entries import Acted, Entry, Outcome
from memory.ledger._lines import Line, line_sha256
from memory.ledger._snapshot import (
    RECENT_ACTS,
    RESOLVED_KEPT,
    Coverage,
    Included,
    LastAct,
    LineRef,
    Marked,
    OpenDispatch,
    Snapshot,
)

# The acts whose place on the chain each tick checks (``anchors``), by the receipt status their
# ``dispatch_included`` line recorded
_CHECKED = {Outcome.CONFIRMED: 1, Outcome.REVERTED: 0}


class StateBuilder:
    """The snapshot's state, being folded; start empty or from a verified snapshot."""

    def __init__(self, start: Snapshot | None = None) -> None:
        self.last: LastAct | None = None if start is None else start.last_confirmed
        self.last_line: LineRef | None = None if start is None else start.last_line
        # the latest signing of any confirmed act folded (its ``dispatch_signed`` line's time and
        # place): what the cadence counts from when it is later than the last act's block time
        self.last_signed: LineRef | None = None if start is None else start.last_signed
        self.last_backed: bool = True if start is None else start.last_backed
        self.signed_ts: int | None = (
            None if start is None or start.last_confirmed is None else start.last_confirmed.signed_ts
        )
        self.open: dict[str, OpenDispatch] = (
            {} if start is None else {d.tx_hash.lower(): d for d in start.open}
        )
        self.unsent: dict[str, OpenDispatch] = (
            {} if start is None else {d.tx_hash.lower(): d for d in start.unsent}
        )
        self.tokens: dict[str, tuple[int, str]] = {} if start is None else dict(start.tokens)
        self.dropped: dict[str, OpenDispatch] = (
            {} if start is None else {d.tx_hash.lower(): d for d in start.dropped}
        )
        self.anchor: Included | None = None if start is None else start.anchor
        self.included: dict[str, Included] = (
            {} if start is None else {i.tx_hash.lower(): i for i in start.included}
        )
        self.reorged: Marked | None = None if start is None else start.reorged
        self.acknowledged: Marked | None = None if start is None else start.acknowledged
        self.anchors: list[Included] = [] if start is None else list(start.anchors)
        # every acknowledgement folded (a rebuild folds them before the acts they name), kept in
        # the snapshot only for the acts still checked
        self.acks: dict[str, Marked] = {} if start is None else {m.tx_hash.lower(): m for m in start.acked}
        # the dispatches a final line resolved, by the highest nonces (``RESOLVED_KEPT``): the tick
        # holds its next trade while the chain has not used one's nonce (the line is then a claim)
        self.resolved: dict[str, OpenDispatch] = (
            {} if start is None else {d.tx_hash.lower(): d for d in start.resolved}
        )

    def fold_activity(self, line: Line[ActivityRecord]) -> None:
        """Fold one activity record: dispatches open, are accepted, or resolve as unsent/dropped."""
        record = line.record
        if isinstance(record, DispatchSigned | DispatchSubmitted):
            if record.action != "swap":
                return  # only swaps are the agent's trades; nothing else is ledgered or awaited
            key = record.tx_hash.lower()
            known = self.open.get(key)
            if known is not None:
                if isinstance(record, DispatchSubmitted):
                    self.open[key] = replace(known, broadcast=True)
                return
            nonce = record.nonce if isinstance(record, DispatchSigned) else None
            ref = LineRef(line.offset, line_sha256(line.raw))
            broadcast = isinstance(record, DispatchSubmitted)
            self.open[key] = OpenDispatch(record.tx_hash, nonce, record.ts, ref, broadcast=broadcast)
        elif isinstance(record, DispatchSettled):
            self._settled(record.tx_hash.lower())
        elif isinstance(record, DispatchUnsent):
            key = record.tx_hash.lower()
            dispatch = self.open.pop(key, None) or self.dropped.pop(key, None)
            if dispatch is not None and dispatch.nonce is not None:
                self.unsent[key] = dispatch
        elif isinstance(record, DispatchDropped):
            # a claim, never a resolution: the dispatch stays watched (``dropped``) and is ledgered
            # from the chain should its transaction be mined after all (a forged line, a reorg)
            key = record.tx_hash.lower()
            known = self.open.get(key) or self.unsent.get(key)
            if known is not None and known.nonce is not None:
                self.open.pop(key, None)
                self.unsent.pop(key, None)
                self.dropped[key] = known
        elif isinstance(record, TokenMetadata):
            self.tokens[record.token.lower()] = (record.decimals, record.symbol)
        else:
            self._fold_reorg(line)

    def _settled(self, key: str) -> None:
        """A receipt of the dispatch ``key`` was read: a final line beside it resolves the dispatch
        (an open one is accepted too; an unsent or dropped one was mined after all)."""
        known = self.open.get(key)
        if known is not None:
            self.open[key] = replace(known, broadcast=True, settled=True)
        for table in (self.unsent, self.dropped):
            if key in table:
                table[key] = replace(table[key], settled=True)

    def _fold_reorg(self, line: Line[ActivityRecord]) -> None:
        """Fold the lines of the reorganisation check: where a dispatch was ledgered, a detected
        reorganisation (held until acknowledged), an acknowledgement (which also ends the checks of
        the act it names: a person accepted the chain as it now is)."""
        record = line.record
        ref = LineRef(line.offset, line_sha256(line.raw))
        if isinstance(record, DispatchIncluded):
            self.included[record.tx_hash.lower()] = Included(
                record.tx_hash, record.block, record.block_hash, ref, record.chain_id, record.status
            )
        elif isinstance(record, ReorgDetected):
            self.reorged = Marked(record.tx_hash, ref)
        elif isinstance(record, ReorgAcknowledged):
            key = record.tx_hash.lower()
            self.acknowledged = Marked(record.tx_hash, ref)
            self.acks[key] = self.acknowledged
            if self.reorged is not None and self.reorged.tx_hash.lower() == key:
                self.reorged = None

    def fold_ledger(self, line: Line[Entry]) -> None:
        """Fold one ledger entry: a final outcome resolves its dispatch; confirmed may be the last act.

        "Last" is by ``ts`` (the block's time), the newest line winning a tie: an unverified
        dispatch resolved after a newer one was confirmed is appended later but happened earlier.
        """
        entry = line.record
        if not isinstance(entry, Acted):
            return
        key = entry.tx_hash.lower()
        if entry.outcome is Outcome.UNVERIFIED:
            for table in (self.open, self.dropped):
                known = table.get(key)
                if known is not None:
                    table[key] = replace(known, unverified=True)
            return
        included = self.included.get(key)
        watched = self.open.get(key) or self.unsent.get(key) or self.dropped.get(key)
        receipt = None if included is None else (included.block, included.status)
        from_receipt = receipt == (entry.block, _CHECKED[entry.outcome]) or (
            watched is not None and watched.settled
        )
        if watched is None or from_receipt:
            self.open.pop(key, None)
            self.unsent.pop(key, None)
            self.dropped.pop(key, None)
            self.included.pop(key, None)
            if watched is not None and watched.nonce is not None:
                self._resolved(key, watched)
        # else: a dispatch this agent signed leaves the watch only through a line reconcile wrote
        # from its receipt: just after the ``dispatch_included`` line of that block and status (an
        # older agent's ``dispatch_executed``/``dispatch_reverted``, ``settled``). Without one, a
        # final line is a claim (a line added by hand, a forged one): the dispatch stays watched and
        # the trade held, and reconcile ledgers it from the chain. Before, a crafted ``reverted``
        # line for a pending swap let the next tick swap beside it: on a node both were mined for
        # one decision, and the ledger said the first reverted. (The inclusion stays for the line
        # reconcile writes from the receipt: a rebuild folds every activity line first.)
        # a reverted act too: a reorganisation may mine it again where it does not revert, and the
        # agent, which swaps again after a revert, would then have swapped twice
        if (
            entry.outcome in _CHECKED
            and included is not None
            and included.block == entry.block
            and included.status == _CHECKED[entry.outcome]
        ):
            self.anchors = [*self.anchors[1 - RECENT_ACTS :], included]  # the newest RECENT_ACTS
        if (
            entry.outcome is Outcome.CONFIRMED
            and watched is not None
            and (self.signed_ts is None or watched.ts >= self.signed_ts)
        ):
            # when its tick signed it, by the agent's clock: the latest of every confirmed act's,
            # not the last act's alone (an act mined with an earlier block time than the last one,
            # on a chain whose clock went back, was signed later; a second final line of one
            # dispatch, no longer watched, knows no signing and must not take it away)
            self.signed_ts, self.last_signed = watched.ts, watched.line
        if entry.outcome is Outcome.CONFIRMED and (self.last is None or entry.ts >= self.last.ts):
            assert entry.block is not None  # a confirmed entry always has its block (schema)
            self.last = LastAct(ts=entry.ts, block=entry.block, tx_hash=entry.tx_hash)
            self.last_line = LineRef(line.offset, line_sha256(line.raw))
            # backed: a ``dispatch_included`` of its block and status, or its dispatch's receipt line
            # (the readers' rule, ``memory.ledger.Backing``); else the line is a claim, and said so
            self.last_backed = receipt == (entry.block, 1) or (watched is not None and watched.settled)
            # the block the chain held it in when it was ledgered (an older act has no such line)
            self.anchor = included if included is not None and included.block == entry.block else None

    def _resolved(self, key: str, dispatch: OpenDispatch) -> None:
        """Keep ``dispatch`` among the resolved ones with the highest nonces (the newest signed)."""
        self.resolved[key] = dispatch
        if len(self.resolved) > 2 * RESOLVED_KEPT:
            self.resolved = {d.tx_hash.lower(): d for d in _highest_nonces(self.resolved.values())}

    def freeze(self, ledger: Coverage, activity: Coverage) -> Snapshot:
        """The snapshot of the folded state over these prefixes (``included`` lines are kept only
        for dispatches still watched: one whose ledger line never came is forgotten)."""
        watched = {*self.open, *self.unsent, *self.dropped}
        anchors = [*self.anchors, *([] if self.anchor is None else [self.anchor])]
        checked = {i.tx_hash.lower() for i in anchors}
        return Snapshot(
            ledger=ledger,
            activity=activity,
            last_confirmed=None if self.last is None else replace(self.last, signed_ts=self.signed_ts),
            last_line=self.last_line,
            last_backed=self.last_backed,
            last_signed=None if self.last is None else self.last_signed,
            open=tuple(self.open.values()),
            unsent=tuple(self.unsent.values()),
            tokens=dict(self.tokens),
            dropped=tuple(self.dropped.values()),
            anchor=self.anchor,
            included=tuple(i for key, i in self.included.items() if key in watched),
            reorged=self.reorged,
            acknowledged=self.acknowledged,
            anchors=tuple(self.anchors),
            acked=tuple(m for key, m in self.acks.items() if key in checked),
            resolved=_highest_nonces(self.resolved.values()),
        )


def _highest_nonces(dispatches: Iterable[OpenDispatch]) -> tuple[OpenDispatch, ...]:
    """The ``RESOLVED_KEPT`` dispatches of the highest nonces, in nonce order (ties: in signing order)."""
    ranked = sorted(dispatches, key=lambda d: (d.nonce or 0, d.ts, d.line.offset))
    return tuple(ranked[-RESOLVED_KEPT:])

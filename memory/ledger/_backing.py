"""Which final ledger lines the activity log backs, and which are claims.

Reconcile writes a ``confirmed`` or ``reverted`` line only from a receipt, and logs just before it
where the chain held the dispatch: ``dispatch_included`` (its block and the receipt's status), or,
from a node that gives no block hash, the receipt's ``dispatch_executed``/``dispatch_reverted`` of
that block (as the runner logs it when it reads the receipt itself). A final line with neither of
that transaction, block and status is a claim: a line added by hand, forged, restored, or copied
from elsewhere. The readers show it as the ledger holds it, and say it is a claim.
"""

from __future__ import annotations

from collections.abc import Iterable

from memory.ledger._activity import ActivityRecord, DispatchIncluded, DispatchSettled
from memory.ledger._entries import Acted, Outcome

#: the activity events that back a final ledger line
BACKING_EVENTS = frozenset({"dispatch_included", "dispatch_executed", "dispatch_reverted"})
#: what the readers say of a final line nothing backs
CLAIM_NOTE = "not backed by the activity log: a claim"
_STATUS = {Outcome.CONFIRMED: 1, Outcome.REVERTED: 0}


class Backing:
    """The places the activity log says the chain held each transaction (fold records with ``add``)."""

    def __init__(self, records: Iterable[ActivityRecord] = ()) -> None:
        self._seen: set[tuple[str, int, int]] = set()
        for record in records:
            self.add(record)

    def add(self, record: ActivityRecord) -> None:
        """Note a ``dispatch_included`` or a receipt's ``dispatch_executed``/``dispatch_reverted``."""
        if isinstance(record, DispatchIncluded):
            self._seen.add((record.tx_hash.lower(), record.block, record.status))
        elif isinstance(record, DispatchSettled):
            status = 1 if record.event == "dispatch_executed" else 0
            self._seen.add((record.tx_hash.lower(), record.block, status))

    def backs(self, entry: Acted) -> bool:
        """Whether ``entry`` is backed: an unverified one always (it resolves nothing); a final one
        when a line of that transaction, block and status was noted."""
        status = _STATUS.get(entry.outcome)
        if status is None or entry.block is None:
            return status is None
        return (entry.tx_hash.lower(), entry.block, status) in self._seen


def is_claim(entry: object, backing: Backing) -> bool:
    """Whether ``entry`` is a final ``acted`` line the activity log does not back."""
    return isinstance(entry, Acted) and not backing.backs(entry)

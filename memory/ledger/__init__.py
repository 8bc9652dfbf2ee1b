"""The agent ledger (SPEC R-A1 to R-A8; seed ``000_7d0316fd5aa6f8e8``).

``.sail/memory/ledger.jsonl`` is the agent's own history: append-only, one line per tick's decision
(``acted``, reconciled from the chain, or ``skipped``, with why). ``.sail/activity.jsonl`` is the
runner's account of its dispatches, which reconcile turns into ``acted`` entries from receipts and
balance reads. ``.sail/memory/state.json`` is a derived snapshot for the cadence guard.

This package imports no web3: chain reads come through ``ChainReader``, which ``sail`` implements.
"""

from memory.ledger._activity import (
    ActivityCodec,
    ActivityLog,
    ActivityRecord,
    DispatchSettled,
    DispatchSubmitted,
    OtherActivity,
)
from memory.ledger._codec import LedgerCodec
from memory.ledger._entries import (
    ACTED_KEYS,
    QUOTE_RETURNED_ZERO,
    SKIPPED_KEYS,
    Acted,
    Amount,
    Entry,
    Outcome,
    Skipped,
    allowance_reason,
    balance_reason,
    cadence_reason,
    entry_from_wire,
    format_human,
    quote_unavailable_reason,
)
from memory.ledger._errors import (
    ActivityInvalidRecord,
    ChainUnavailable,
    DispatchUndecodable,
    LedgerBusy,
    LedgerError,
    LedgerInvalidEntry,
)
from memory.ledger._ledger import Ledger, LedgerWriter
from memory.ledger._reconcile import (
    TRANSFER_TOPIC,
    ChainReader,
    LogRecord,
    Receipt,
    SwapCall,
    TokenInfo,
    reconcile,
    resolve,
    transferred_to,
)
from memory.ledger._snapshot import LastAct

__all__ = [
    "ACTED_KEYS",
    "QUOTE_RETURNED_ZERO",
    "SKIPPED_KEYS",
    "TRANSFER_TOPIC",
    "Acted",
    "ActivityCodec",
    "ActivityInvalidRecord",
    "ActivityLog",
    "ActivityRecord",
    "Amount",
    "ChainReader",
    "ChainUnavailable",
    "DispatchSettled",
    "DispatchSubmitted",
    "DispatchUndecodable",
    "Entry",
    "LastAct",
    "Ledger",
    "LedgerBusy",
    "LedgerCodec",
    "LedgerError",
    "LedgerInvalidEntry",
    "LedgerWriter",
    "LogRecord",
    "OtherActivity",
    "Outcome",
    "Receipt",
    "Skipped",
    "SwapCall",
    "TokenInfo",
    "allowance_reason",
    "balance_reason",
    "cadence_reason",
    "entry_from_wire",
    "format_human",
    "quote_unavailable_reason",
    "reconcile",
    "resolve",
    "transferred_to",
]

"""The agent ledger.

``.sail/memory/ledger.jsonl`` is the agent's own history: append-only, one line per tick's decision
(``acted``, reconciled from the chain, or ``skipped``, with why). ``.sail/activity.jsonl`` is the
runner's account of its dispatches (written ahead of sending) and of every tick, which reconcile
resolves from the chain; ``tick_history`` reads its ticks back (the last one and its outcome).
``.sail/memory/state.json`` is a derived snapshot, verified against both on every use: the last
confirmed act, the dispatches not yet resolved, token metadata.

This package imports no web3: chain reads come through ``ChainReader``, which ``sail`` implements.
"""

from memory.ledger._activity import (
    ActivityCodec,
    ActivityLog,
    ActivityRecord,
    DispatchDropped,
    DispatchMismatch,
    DispatchSettled,
    DispatchSigned,
    DispatchSubmitted,
    DispatchUnsent,
    OtherActivity,
    TickFinished,
    TickOutcome,
    TickStarted,
    TokenMetadata,
)
from memory.ledger._codec import LedgerCodec
from memory.ledger._display import TokenBook, amount_text, learned_tokens, reason_text, solve_decimals
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
    unresolved_reason,
)
from memory.ledger._errors import (
    ActivityInvalidRecord,
    ChainUnavailable,
    DispatchNotOurs,
    DispatchUndecodable,
    LedgerBusy,
    LedgerError,
    LedgerInvalidEntry,
    LedgerNotAFile,
)
from memory.ledger._ledger import Ledger, LedgerWriter
from memory.ledger._lines import require_regular
from memory.ledger._narrative import (
    DEFAULT_GAP_S,
    MAX_DAYS,
    Cite,
    Day,
    Narrative,
    Sentence,
    last_days,
    narrate,
    narrate_days,
)
from memory.ledger._reconcile import (
    DEFAULT_UNSENT_AFTER_S,
    TRANSFER_TOPIC,
    ChainReader,
    ChainTransaction,
    LogRecord,
    Receipt,
    SwapCall,
    TokenInfo,
    reconcile,
    transferred_to,
)
from memory.ledger._snapshot import LastAct, OpenDispatch, Snapshot
from memory.ledger._status import CLOCK_SLACK_S, agent_state, dispatch_state, recent_skips
from memory.ledger._ticks import MAX_TICKS_SCANNED, TickHistory, tick_history, tick_json

__all__ = [
    "ACTED_KEYS",
    "CLOCK_SLACK_S",
    "DEFAULT_GAP_S",
    "DEFAULT_UNSENT_AFTER_S",
    "MAX_DAYS",
    "MAX_TICKS_SCANNED",
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
    "ChainTransaction",
    "ChainUnavailable",
    "Cite",
    "Day",
    "DispatchDropped",
    "DispatchMismatch",
    "DispatchNotOurs",
    "DispatchSettled",
    "DispatchSigned",
    "DispatchSubmitted",
    "DispatchUndecodable",
    "DispatchUnsent",
    "Entry",
    "LastAct",
    "Ledger",
    "LedgerBusy",
    "LedgerCodec",
    "LedgerError",
    "LedgerInvalidEntry",
    "LedgerNotAFile",
    "LedgerWriter",
    "LogRecord",
    "Narrative",
    "OpenDispatch",
    "OtherActivity",
    "Outcome",
    "Receipt",
    "Sentence",
    "Skipped",
    "Snapshot",
    "SwapCall",
    "TickFinished",
    "TickHistory",
    "TickOutcome",
    "TickStarted",
    "TokenBook",
    "TokenInfo",
    "TokenMetadata",
    "agent_state",
    "allowance_reason",
    "amount_text",
    "balance_reason",
    "cadence_reason",
    "dispatch_state",
    "entry_from_wire",
    "format_human",
    "last_days",
    "learned_tokens",
    "narrate",
    "narrate_days",
    "quote_unavailable_reason",
    "reason_text",
    "recent_skips",
    "reconcile",
    "require_regular",
    "solve_decimals",
    "tick_history",
    "tick_json",
    "transferred_to",
    "unresolved_reason",
]

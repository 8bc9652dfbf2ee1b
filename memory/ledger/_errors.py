"""Errors of the agent ledger.

Every error carries a stable ``code`` (listed in docs/SURFACE.md) and its context. The tree::

    LedgerError                   base (a staging.CodedError): path, line
    ├── LedgerInvalidEntry        ledger_invalid_entry: the caller built an entry the schema refuses
    ├── LedgerBusy                ledger_busy: another tick held the ledger's lock past the timeout
    ├── LedgerNotAFile            ledger_not_a_file: a ledger, activity log, lock or snapshot path
    │                             is a directory, FIFO, socket, device or symbolic link
    ├── ActivityInvalidRecord     activity_invalid_record: the caller built a runner record the
    │                             activity log's schema refuses
    ├── ChainUnavailable          chain_unavailable: the chain could not be read (node down, timeout)
    ├── DispatchUndecodable       dispatch_undecodable: a swap dispatch whose calldata is not a swap
    ├── DispatchNotOurs           dispatch_not_ours: the chain's transaction under a logged hash was
    │                             sent by another account (the activity log was altered)
    ├── ChainReorged              chain_reorged: the chain no longer holds a recent ledgered act
    │                             where it was ledgered; no tick trades until a person acknowledges
    └── ReorgNotHeld              reorg_not_held: an acknowledgement names no reorganisation held

A damaged line in the middle of ``ledger.jsonl`` or ``activity.jsonl`` is the line log's business:
it raises ``journal.JournalCorrupt`` (code ``journal_corrupt``, with ``path`` and ``line``), which
propagates unchanged, like every journal error. A torn last line is not an error: the
next locked open cuts it.
"""

from __future__ import annotations

from pathlib import Path

from staging import CodedError


class LedgerError(CodedError):
    """Base of every ledger error; ``code`` is stable and documented."""

    code = "ledger_error"

    def __init__(self, message: str, *, path: str | Path | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.path = None if path is None else Path(path)
        self.line = line


class LedgerInvalidEntry(LedgerError, ValueError):
    """An entry does not fit the entry schema; nothing was written.

    ``field`` names the offending key (camelCase, as in the file) and ``reason`` says what is wrong.
    """

    code = "ledger_invalid_entry"

    def __init__(self, field: str, reason: str, *, path: str | Path | None = None) -> None:
        super().__init__(
            f"ledger entry field {field!r}: {reason}; build entries with Acted/Skipped "
            "(the schema is fixed and admits nothing else)",
            path=path,
        )
        self.field = field
        self.reason = reason


class ActivityInvalidRecord(LedgerError, ValueError):
    """A runner record does not fit the activity log's schema; nothing was written."""

    code = "activity_invalid_record"

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"activity record field {field!r}: {reason}")
        self.field = field
        self.reason = reason


class LedgerBusy(LedgerError):
    """Another tick held the ledger's lock for longer than the timeout; nothing was written."""

    code = "ledger_busy"


class LedgerNotAFile(LedgerError):
    """A path the agent keeps a file at holds something else; nothing was read or written.

    The ledger, the activity log, their lock files and the snapshot are opened without following a
    link and without blocking, and must be regular files: a FIFO would hang a reader forever, a
    link could point anywhere. ``what`` says what was found.
    """

    code = "ledger_not_a_file"

    def __init__(self, path: str | Path, what: str) -> None:
        super().__init__(
            f"{path} is {what}, not a regular file; the agent will not read or write through it: "
            "move it aside (and restore the file from a backup if it was replaced)",
            path=path,
        )
        self.what = what


class ChainUnavailable(LedgerError):
    """The chain could not be read (node down, timeout, bad answer); nothing was written for it.

    Raised by ``ChainReader`` implementations; ``sail`` maps its web3 and transport errors to it.
    """

    code = "chain_unavailable"


class DispatchUndecodable(LedgerError):
    """A dispatched ``swap`` whose calldata is not the router's swap call: it cannot be ledgered."""

    code = "dispatch_undecodable"


class DispatchNotOurs(LedgerError):
    """The transaction the activity log names was sent by another account: the log was altered."""

    code = "dispatch_not_ours"


class ChainReorged(LedgerError):
    """The chain no longer holds a recent ledgered act where it was ledgered (gone, moved to
    another block, or another status): a reorganisation deeper than ``confirmations``. The ledger
    still counts the act, so the agent does not trade until a person has reviewed it and
    acknowledged it (``sail ack-reorg``). ``tx_hash``, ``block`` and ``block_hash`` say where it
    was ledgered."""

    code = "chain_reorged"

    def __init__(
        self, message: str, *, tx_hash: str, block: int, block_hash: str, path: str | Path | None = None
    ) -> None:
        super().__init__(message, path=path)
        self.tx_hash = tx_hash
        self.block = block
        self.block_hash = block_hash


class ReorgNotHeld(LedgerError):
    """An acknowledgement names a transaction no unacknowledged ``chain_reorged`` line names:
    nothing was written (``tx_hash``)."""

    code = "reorg_not_held"

    def __init__(self, message: str, *, tx_hash: str, path: str | Path | None = None) -> None:
        super().__init__(message, path=path)
        self.tx_hash = tx_hash

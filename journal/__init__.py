"""The journal kernel: durable root runs, leases with fencing, append-only streams (SPEC R-J)."""

from journal._backend import JournalBackend
from journal._errors import (
    JournalContention,
    JournalCorrupt,
    JournalError,
    JournalLeaseHeld,
    JournalLeaseLost,
    JournalLocationInvalid,
    JournalNameInvalid,
    JournalNotResumable,
    JournalPayloadInvalid,
    JournalReadInterrupted,
    JournalRunNotFound,
    JournalStorageError,
    JournalUnavailable,
    JournalUnwritable,
    JournalUsageError,
)
from journal._file import FileJournal, RecordCodec
from journal._linelog import LineCodec, LineDamaged, LineLog
from journal._model import Lease, Record, RunInfo, RunState, check_key, check_name, payload_json, record_id
from journal._open import open_journal

__all__ = [
    "FileJournal",
    "JournalBackend",
    "JournalContention",
    "JournalCorrupt",
    "JournalError",
    "JournalLeaseHeld",
    "JournalLeaseLost",
    "JournalLocationInvalid",
    "JournalNameInvalid",
    "JournalNotResumable",
    "JournalPayloadInvalid",
    "JournalReadInterrupted",
    "JournalRunNotFound",
    "JournalStorageError",
    "JournalUnavailable",
    "JournalUnwritable",
    "JournalUsageError",
    "Lease",
    "LineCodec",
    "LineDamaged",
    "LineLog",
    "Record",
    "RecordCodec",
    "RunInfo",
    "RunState",
    "check_key",
    "check_name",
    "open_journal",
    "payload_json",
    "record_id",
]

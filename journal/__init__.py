"""The journal kernel: durable root runs, leases with fencing, append-only streams (SPEC R-J)."""

import importlib.metadata as _metadata

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
from journal._file import FileJournal, RecordCodec, now_ms
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
    "now_ms",
    "open_journal",
    "payload_json",
    "record_id",
]

try:  # the installed distribution's version (one for every package of flows-memory)
    __version__: str = _metadata.version("flows-memory")
except _metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

"""The journal kernel: durable root runs, leases with fencing, append-only streams."""

from journal._backend import JournalBackend
from journal._dsn import is_keyword_dsn, scrubbed, shown_location
from journal._errors import (
    JournalClockInvalid,
    JournalClosed,
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
    JournalStateInvalid,
    JournalStorageError,
    JournalSyncUnsupported,
    JournalUnavailable,
    JournalUnwritable,
    JournalUsageError,
)
from journal._file import FileJournal, KeptCut, RecordCodec
from journal._linelog import LineCodec, LineDamaged, LineLog, LineMarks, LineOldFormat
from journal._model import (
    MAX_PAYLOAD_BYTES,
    MAX_RUN_BYTES,
    Lease,
    Record,
    RunInfo,
    RunState,
    check_key,
    check_label,
    check_name,
    now_ms,
    payload_json,
    record_id,
)
from journal._open import file_location, hosts_share, open_journal
from journal._recordable import CODE_MAX, MESSAGE_MAX, error_record, error_text, is_code, recordable_text

__all__ = [
    "CODE_MAX",
    "MAX_PAYLOAD_BYTES",
    "MAX_RUN_BYTES",
    "MESSAGE_MAX",
    "FileJournal",
    "JournalBackend",
    "JournalClockInvalid",
    "JournalClosed",
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
    "JournalStateInvalid",
    "JournalStorageError",
    "JournalSyncUnsupported",
    "JournalUnavailable",
    "JournalUnwritable",
    "JournalUsageError",
    "KeptCut",
    "Lease",
    "LineCodec",
    "LineDamaged",
    "LineLog",
    "LineMarks",
    "LineOldFormat",
    "Record",
    "RecordCodec",
    "RunInfo",
    "RunState",
    "check_key",
    "check_label",
    "check_name",
    "error_record",
    "error_text",
    "file_location",
    "hosts_share",
    "is_code",
    "is_keyword_dsn",
    "now_ms",
    "open_journal",
    "payload_json",
    "record_id",
    "recordable_text",
    "scrubbed",
    "shown_location",
]


def __getattr__(name: str) -> str:
    # the version is read from the installed distribution's metadata on first use: importing
    # importlib.metadata costs tens of milliseconds that a command which never asks should not pay
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib.metadata

    try:  # the installed distribution's version (one for every package of flows-memory)
        version = importlib.metadata.version("flows-memory")
    except importlib.metadata.PackageNotFoundError:  # a source tree that was never installed
        version = "0+unknown"
    globals()["__version__"] = version
    return version

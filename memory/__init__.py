"""Findings memory over the journal (SPEC R-L, R-R); the agent ledger lives in ``memory.ledger``."""

from memory._check import QUARANTINE_DIR, Problem, check_store, repair_store
from memory._db import SCHEMA_VERSION, HistoryDB
from memory._errors import (
    ArgumentInvalid,
    FindingInvalid,
    FindingRetired,
    FindingUnknown,
    FlowsMemoryError,
    SessionClosed,
    Unjournaled,
    Unreachable,
    UnsupportedHeader,
    Unwritable,
)
from memory._files import parse_learned, read_learned
from memory._finding import (
    RETIRE_STREAM,
    STREAM,
    Finding,
    canonical,
    check_key,
    finding_id,
    render,
    render_retirement,
    scope_hash,
    validate,
)
from memory._paths import learned_dir, learned_root, resolve_db, resolve_journal, retired_dir, scope_dirs
from memory._results import Citation, Explained, Forgotten, HistoryEvent, Learned, Recalled, SyncReport
from memory._root import Root, RootRun
from memory._session import MemorySession, SessionState
from memory._store import MemoryStore

__all__ = [
    "QUARANTINE_DIR",
    "RETIRE_STREAM",
    "SCHEMA_VERSION",
    "STREAM",
    "ArgumentInvalid",
    "Citation",
    "Explained",
    "Finding",
    "FindingInvalid",
    "FindingRetired",
    "FindingUnknown",
    "FlowsMemoryError",
    "Forgotten",
    "HistoryDB",
    "HistoryEvent",
    "Learned",
    "MemorySession",
    "MemoryStore",
    "Problem",
    "Recalled",
    "Root",
    "RootRun",
    "SessionClosed",
    "SessionState",
    "SyncReport",
    "Unjournaled",
    "Unreachable",
    "UnsupportedHeader",
    "Unwritable",
    "canonical",
    "check_key",
    "check_store",
    "finding_id",
    "learned_dir",
    "learned_root",
    "parse_learned",
    "read_learned",
    "render",
    "render_retirement",
    "repair_store",
    "resolve_db",
    "resolve_journal",
    "retired_dir",
    "scope_dirs",
    "scope_hash",
    "validate",
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

"""Findings memory over the journal (SPEC R-L, R-R); the agent ledger lives in ``memory.ledger``."""

import importlib.metadata as _metadata

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
    STREAM,
    Finding,
    canonical,
    check_key,
    finding_id,
    render,
    scope_hash,
    validate,
)
from memory._learn import Root, RootRun
from memory._paths import learned_dir, learned_root, resolve_db, resolve_journal, scope_dirs
from memory._results import Citation, Explained, Learned, Recalled, SyncReport
from memory._session import MemorySession, SessionState
from memory._store import MemoryStore

__all__ = [
    "QUARANTINE_DIR",
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
    "HistoryDB",
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
    "repair_store",
    "resolve_db",
    "resolve_journal",
    "scope_dirs",
    "scope_hash",
    "validate",
]

try:  # the installed distribution's version (one for every package of flows-memory)
    __version__: str = _metadata.version("flows-memory")
except _metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

"""Findings memory over the journal; the agent ledger lives in ``memory.ledger``.

Every public name is imported on first use, so a command that needs only the reads (``flows recall``,
``flows why``) never loads ``check``, ``sync`` or the journal backends it does not open.
"""

import importlib as _importlib
import typing

if typing.TYPE_CHECKING:
    from memory._check import Problem, check_store, repair_store
    from memory._db import SCHEMA_VERSION, HistoryDB
    from memory._embed import Embedder, FunctionEmbedder, default_embedder, embedder_named, embedder_of
    from memory._erase import Erased
    from memory._errors import (
        ArgumentInvalid,
        EmbedderFailed,
        EmbedderUnavailable,
        ErasePending,
        FindingInvalid,
        FindingRetired,
        FindingUnknown,
        FlowsMemoryError,
        SessionClosed,
        StoreClosed,
        StoreMissing,
        Unjournaled,
        Unreachable,
        UnsupportedHeader,
        Unwritable,
        WrongJournal,
    )
    from memory._files import parse_learned, read_learned
    from memory._finding import (
        ERASE_STREAM,
        FORGET_MANY_MAX,
        META_FILTER_MAX,
        METADATA_MAX_BYTES,
        REASON_MAX,
        RETIRE_STREAM,
        SOURCE_MAX_BYTES,
        STREAM,
        TAG_MAX_BYTES,
        TAGS_MAX,
        TEXT_MAX_BYTES,
        Finding,
        canonical,
        check_key,
        checked_commit,
        finding_id,
        is_erased,
        meta_value_key,
        render,
        render_retirement,
        retirements_in,
        scope_hash,
        validate,
    )
    from memory._outcomes import (
        Explained,
        Forgotten,
        ForgottenMany,
        HistoryEvent,
        HistoryPage,
        Learned,
        SyncReport,
    )
    from memory._paths import (
        QUARANTINE_DIR,
        check_store_location,
        learned_dir,
        learned_root,
        refuse_odd_db,
        resolve_db,
        resolve_journal,
        retired_dir,
        scope_dirs,
    )
    from memory._results import HISTORY_KINDS, HISTORY_PAGE, Citation, Recalled
    from memory._root import Root, RootRun
    from memory._session import MemorySession, SessionState
    from memory._store import MemoryStore
    from memory._vectors import discard_vectors


__all__ = [
    "ERASE_STREAM",
    "FORGET_MANY_MAX",
    "HISTORY_KINDS",
    "HISTORY_PAGE",
    "METADATA_MAX_BYTES",
    "META_FILTER_MAX",
    "QUARANTINE_DIR",
    "REASON_MAX",
    "RETIRE_STREAM",
    "SCHEMA_VERSION",
    "SOURCE_MAX_BYTES",
    "STREAM",
    "TAGS_MAX",
    "TAG_MAX_BYTES",
    "TEXT_MAX_BYTES",
    "ArgumentInvalid",
    "Citation",
    "Embedder",
    "EmbedderFailed",
    "EmbedderUnavailable",
    "ErasePending",
    "Erased",
    "Explained",
    "Finding",
    "FindingInvalid",
    "FindingRetired",
    "FindingUnknown",
    "FlowsMemoryError",
    "Forgotten",
    "ForgottenMany",
    "FunctionEmbedder",
    "HistoryDB",
    "HistoryEvent",
    "HistoryPage",
    "Learned",
    "MemorySession",
    "MemoryStore",
    "Problem",
    "Recalled",
    "Root",
    "RootRun",
    "SessionClosed",
    "SessionState",
    "StoreClosed",
    "StoreMissing",
    "SyncReport",
    "Unjournaled",
    "Unreachable",
    "UnsupportedHeader",
    "Unwritable",
    "WrongJournal",
    "canonical",
    "check_key",
    "check_store",
    "check_store_location",
    "checked_commit",
    "default_embedder",
    "discard_vectors",
    "embedder_named",
    "embedder_of",
    "finding_id",
    "is_erased",
    "learned_dir",
    "learned_root",
    "meta_value_key",
    "parse_learned",
    "read_learned",
    "refuse_odd_db",
    "render",
    "render_retirement",
    "repair_store",
    "resolve_db",
    "resolve_journal",
    "retired_dir",
    "retirements_in",
    "scope_dirs",
    "scope_hash",
    "validate",
]


_LAZY: dict[str, str] = {
    "ArgumentInvalid": "memory._errors",
    "Citation": "memory._results",
    "Embedder": "memory._embed",
    "EmbedderFailed": "memory._errors",
    "EmbedderUnavailable": "memory._errors",
    "FunctionEmbedder": "memory._embed",
    "default_embedder": "memory._embed",
    "discard_vectors": "memory._vectors",
    "embedder_named": "memory._embed",
    "embedder_of": "memory._embed",
    "Explained": "memory._outcomes",
    "ERASE_STREAM": "memory._finding",
    "Erased": "memory._erase",
    "is_erased": "memory._finding",
    "Finding": "memory._finding",
    "FindingInvalid": "memory._errors",
    "FindingRetired": "memory._errors",
    "FindingUnknown": "memory._errors",
    "FlowsMemoryError": "memory._errors",
    "Forgotten": "memory._outcomes",
    "ForgottenMany": "memory._outcomes",
    "FORGET_MANY_MAX": "memory._finding",
    "HistoryDB": "memory._db",
    "HistoryEvent": "memory._outcomes",
    "HistoryPage": "memory._outcomes",
    "HISTORY_KINDS": "memory._results",
    "HISTORY_PAGE": "memory._results",
    "METADATA_MAX_BYTES": "memory._finding",
    "Learned": "memory._outcomes",
    "MemorySession": "memory._session",
    "MemoryStore": "memory._store",
    "Problem": "memory._check",
    "QUARANTINE_DIR": "memory._paths",
    "REASON_MAX": "memory._finding",
    "RETIRE_STREAM": "memory._finding",
    "Recalled": "memory._results",
    "Root": "memory._root",
    "RootRun": "memory._root",
    "SCHEMA_VERSION": "memory._db",
    "SOURCE_MAX_BYTES": "memory._finding",
    "META_FILTER_MAX": "memory._finding",
    "STREAM": "memory._finding",
    "SessionClosed": "memory._errors",
    "SessionState": "memory._session",
    "StoreClosed": "memory._errors",
    "SyncReport": "memory._outcomes",
    "TAGS_MAX": "memory._finding",
    "TAG_MAX_BYTES": "memory._finding",
    "TEXT_MAX_BYTES": "memory._finding",
    "Unjournaled": "memory._errors",
    "StoreMissing": "memory._errors",
    "Unreachable": "memory._errors",
    "check_store_location": "memory._paths",
    "refuse_odd_db": "memory._paths",
    "UnsupportedHeader": "memory._errors",
    "Unwritable": "memory._errors",
    "WrongJournal": "memory._errors",
    "ErasePending": "memory._errors",
    "canonical": "memory._finding",
    "check_key": "memory._finding",
    "check_store": "memory._check",
    "checked_commit": "memory._finding",
    "finding_id": "memory._finding",
    "learned_dir": "memory._paths",
    "learned_root": "memory._paths",
    "meta_value_key": "memory._finding",
    "parse_learned": "memory._files",
    "read_learned": "memory._files",
    "render": "memory._finding",
    "render_retirement": "memory._finding",
    "repair_store": "memory._check",
    "retirements_in": "memory._finding",
    "resolve_db": "memory._paths",
    "resolve_journal": "memory._paths",
    "retired_dir": "memory._paths",
    "scope_dirs": "memory._paths",
    "scope_hash": "memory._finding",
    "validate": "memory._finding",
}


def __getattr__(name: str) -> typing.Any:
    """Import a public name (or read the version) on first use."""
    if name == "__version__":  # importlib.metadata costs tens of milliseconds: only when asked
        import importlib.metadata

        try:  # the installed distribution's version (one for every package of flows-memory)
            value: typing.Any = importlib.metadata.version("flows-memory")
        except importlib.metadata.PackageNotFoundError:  # a source tree that was never installed
            value = "0+unknown"
    elif name in _LAZY:
        value = getattr(_importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module 'memory' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

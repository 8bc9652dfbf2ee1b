"""Errors of the findings memory.

Every error has a stable ``code``. Journal errors are never wrapped: they pass through this layer
unchanged. The tree::

    FlowsMemoryError              base (a staging.CodedError): path, run_id, errno
    ├── FindingInvalid            memory_finding_invalid: the caller's finding is malformed
    ├── ArgumentInvalid           memory_argument_invalid: another argument (a key, a filter, a reason,
    │                             a session's scope or flow) is malformed
    ├── FindingUnknown            memory_finding_unknown: no finding has that key
    ├── FindingRetired            memory_finding_retired: the finding was retired at every revision
    ├── SessionClosed             memory_session_closed: a session was used after ``close()``
    ├── StoreClosed               memory_store_closed: a store was used after ``close()``
    ├── Unjournaled               memory_unjournaled: learn was called with no root run
    ├── UnsupportedHeader         unsupported_header: the flow's header turns script memory off
    ├── Unwritable                memory_unwritable: staging or publishing the learned file failed
    ├── Unreachable               memory_unreachable: a learned file or the history DB cannot be read
    ├── EmbedderUnavailable       memory_embedder_unavailable: a search by meaning was asked for and no
    │                             embedder can be loaded (the ``semantic`` extra is not installed)
    ├── EmbedderFailed            memory_embedder_failed: the embedder raised, or returned what is not
    │                             one finite vector of its ``dims`` per text
    ├── WrongJournal              memory_wrong_journal: repair refused: the journal holds none of the
    │                             runs the store cites
    └── ErasePending              memory_erase_pending: an erase did all it could, but a reader still
                                  keeps old copies of the erased pages or rows (erase again later)
"""

from __future__ import annotations

import errno as _errno
from pathlib import Path

from staging import CodedError


class FlowsMemoryError(CodedError):
    """Base of the memory layer's errors; ``code`` is stable and listed in docs/SURFACE.md."""

    code = "memory_error"

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        run_id: str | None = None,
        errno: int | None = None,
    ) -> None:
        super().__init__(message)
        self.path = None if path is None else Path(path)
        self.run_id = run_id
        self.errno = errno


class FindingInvalid(FlowsMemoryError):
    """The finding is not a JSON object of ``text`` (required), ``source``, ``tags``, ``metadata``
    and ``expiresMs``; ``field`` names the path of the bad part (``metadata.price``) when known."""

    code = "memory_finding_invalid"
    field: str | None = None


class ArgumentInvalid(FlowsMemoryError):
    """An argument of the memory API other than the finding is malformed (the message names it):
    a key that is not 32 lowercase hex digits, a read filter, a forget's reason, a session's scope,
    flow or source. Nothing is journaled or written."""

    code = "memory_argument_invalid"


class FindingUnknown(FlowsMemoryError):
    """No finding has this key: neither the history DB, the learned files nor the journal know it.
    ``key`` names it. Nothing is journaled or written."""

    code = "memory_finding_unknown"

    def __init__(self, message: str, *, key: str, run_id: str | None = None) -> None:
        super().__init__(message, run_id=run_id)
        self.key = key


class FindingRetired(FlowsMemoryError):
    """The finding was forgotten or superseded at every revision its key can take (``REVISION_MAX``;
    a finding learned again after a forget is otherwise a new memory under its next revision).
    ``key`` names the last one. Nothing is journaled or written. Also: a supersede of a version
    retired meanwhile, and a learn whose key an erase retired while it was written (its commit is
    then a tombstone: docs/MEMORY.md, "Erasure")."""

    code = "memory_finding_retired"

    def __init__(self, message: str, *, key: str, path: str | Path | None = None) -> None:
        super().__init__(message, path=path)
        self.key = key


class SessionClosed(FlowsMemoryError):
    """A ``MemorySession`` was used after ``close()``; open a new session."""

    code = "memory_session_closed"


class StoreClosed(FlowsMemoryError):
    """A ``MemoryStore`` was used after ``close()``; open a new store."""

    code = "memory_store_closed"


class Unjournaled(FlowsMemoryError):
    """``learn`` needs a root run to journal into; without one nothing is written."""

    code = "memory_unjournaled"


class UnsupportedHeader(FlowsMemoryError):
    """The flow's header says ``memory.script: false``, so learning is refused."""

    code = "unsupported_header"


_WHAT_TO_DO = {
    _errno.ENOSPC: "free space on that disk, then try again",
    _errno.EDQUOT: "this user's disk quota is full: free some of it, then try again",
    _errno.EROFS: "that file system is mounted read-only: remount it read-write, or use a store on a "
    "writable disk",
    _errno.EACCES: "this user may not write there: give it write access to the store's folders, or run "
    "as their owner",
    _errno.EPERM: "this user may not write there: give it write access to the store's folders, or run "
    "as their owner",
    _errno.EIO: "the disk reported an I/O error: check it (the kernel log says more) before trying again",
}
"""What to do about a write the OS refused, by its ``errno`` (``Unwritable`` adds it to its message)."""


class Unwritable(FlowsMemoryError):
    """The learned file could not be staged or published (space, permission, I/O). When the OS
    refused it with an ``errno`` it knows (no space, a read-only disk, no permission, an I/O error),
    the message ends by saying what to do about it; a flow run that failed so resumes."""

    code = "memory_unwritable"

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        run_id: str | None = None,
        errno: int | None = None,
    ) -> None:
        advice = _WHAT_TO_DO.get(errno) if errno is not None else None
        if advice is not None and advice not in message:
            message = f"{message}; {advice}"
        super().__init__(message, path=path, run_id=run_id, errno=errno)


class Unreachable(FlowsMemoryError):
    """A learned file (or the history DB) could not be read or has the wrong shape."""

    code = "memory_unreachable"


class EmbedderUnavailable(FlowsMemoryError):
    """A search by meaning (``mode="semantic"`` or ``"hybrid"``, ``--mode``, an embedder named in
    ``FLOWS_EMBEDDER``) needs an embedder that cannot be loaded: the ``semantic`` extra is not
    installed, or a named embedder cannot be imported. Nothing was read."""

    code = "memory_embedder_unavailable"


class EmbedderFailed(FlowsMemoryError):
    """The embedder raised, or returned something other than one finite vector of its ``dims`` per
    text (the message says which). The question was not answered; no vector was stored."""

    code = "memory_embedder_failed"


class StoreMissing(FlowsMemoryError):
    """The store a command names is not there, or not where it says: no store at the path a reading
    command was given (nothing beside it: no history DB, learned files or file journal), a write to a
    folder that does not exist, or a history DB named beside another store's DB (a mistyped name).
    ``path`` names what was asked for; nothing is created, read or moved."""

    code = "memory_store_missing"


class WrongJournal(FlowsMemoryError):
    """``flows check --repair`` refused: the journal it was pointed at holds none of the root runs the
    store's files and rows cite, so it is not this store's journal; nothing was changed."""

    code = "memory_wrong_journal"


class ErasePending(FlowsMemoryError):
    """An erase did everything it can, but old copies of the erased content are still kept by
    someone else: a process with a read of the history DB open (its old pages stay until that read
    ends, and SQLite then overwrites them) or, on PostgreSQL, a session, prepared transaction or
    replication slot whose snapshot began before the rewrite (the table's old row versions stay
    until it ends). The memory is forgotten, its journal commits are tombstones and every file is
    gone; a marker in ``<db-dir>/flows-erase-pending/`` keeps the duty: ``flows check`` reports it
    (``erase_pending``) and ``--repair``, or erasing again (idempotent), finishes it once the reader
    has ended. ``held`` says what keeps them."""

    code = "memory_erase_pending"

    def __init__(self, message: str, *, path: str | Path | None = None, held: tuple[str, ...] = ()) -> None:
        super().__init__(message, path=path)
        self.held = held

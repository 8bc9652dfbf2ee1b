"""Errors of the journal kernel.

Every error carries a stable ``code`` and the context it happened in. The tree::

    JournalError                      base (a staging.CodedError): run_id, stream, path, line
    ├── JournalUsageError             the caller's misuse
    │   ├── JournalNameInvalid        journal_name_invalid: a run id, stream name, key, flow or scope
    │   │                             that is unsafe (in a path, or on either backend)
    │   ├── JournalPayloadInvalid     journal_payload_invalid: a payload or run metadata that is not JSON
    │   ├── JournalLocationInvalid    journal_location_invalid: a journal location (DSN) that is malformed
    │   ├── JournalRunNotFound        journal_run_not_found: no such root run
    │   ├── JournalNotResumable       journal_not_resumable: the run is done (or running)
    │   ├── JournalStateInvalid       journal_state_invalid: a run finished in a state but done or failed
    │   ├── JournalClockInvalid       journal_clock_invalid: the clock read no time a run can be stamped with
    │   ├── JournalSyncUnsupported    journal_sync_unsupported: a file-system sync this backend cannot make
    │   └── JournalClosed             journal_closed: a call on a journal object already closed
    ├── JournalContention             someone else holds or took the run
    │   ├── JournalLeaseHeld          journal_lease_held: a live holder already drives the run
    │   └── JournalLeaseLost          journal_lease_lost: an append carried a stale fencing epoch
    └── JournalStorageError           the disk's or the server's failure
        ├── JournalCorrupt            journal_corrupt: a damaged line that is not a torn tail
        ├── JournalReadInterrupted    journal_read_interrupted: a read failed part-way (I/O error)
        ├── JournalUnwritable         journal_unwritable: an append could not be made durable
        └── JournalUnavailable        journal_unavailable: the backend cannot be reached

Errors propagate through the memory layer unchanged.
"""

from __future__ import annotations

from pathlib import Path

from staging import CodedError


class JournalError(CodedError):
    """Base of every journal error; ``code`` is stable and documented in docs/SURFACE.md."""

    code = "journal_error"

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        stream: str | None = None,
        path: str | Path | None = None,
        line: int | None = None,
    ) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.stream = stream
        self.path = None if path is None else Path(path)
        self.line = line


class JournalUsageError(JournalError):
    """The caller asked for something the journal cannot do."""

    code = "journal_usage"


class JournalNameInvalid(JournalUsageError):
    """A run id, stream name or key is not safe to use."""

    code = "journal_name_invalid"


class JournalPayloadInvalid(JournalUsageError, TypeError):
    """A payload (or a run's metadata) is not a JSON object both backends can store.

    Not a mapping; a value JSON cannot hold (an arbitrary object, a non-string key, an integer
    beyond 64 bits, a string with a lone surrogate); a payload over ``MAX_PAYLOAD_BYTES`` or a run
    record over ``MAX_RUN_BYTES`` as JSON. It is also a ``TypeError``, as before.
    """

    code = "journal_payload_invalid"


class JournalLocationInvalid(JournalUsageError):
    """The journal's location cannot be used as given (a malformed PostgreSQL DSN)."""

    code = "journal_location_invalid"


class JournalRunNotFound(JournalUsageError):
    """No root run with that id exists in this journal."""

    code = "journal_run_not_found"


class JournalNotResumable(JournalUsageError):
    """The root run is done, so there is nothing to resume."""

    code = "journal_not_resumable"


class JournalStateInvalid(JournalUsageError, ValueError):
    """``finish`` was asked for a state other than ``done`` or ``failed``; nothing changed.

    It is also a ``ValueError``, as before.
    """

    code = "journal_state_invalid"


class JournalClockInvalid(JournalUsageError, ValueError):
    """The journal's clock read something that is not a time it can stamp a run or record with.

    A whole number of milliseconds from 1970 to the end of year 9999 is one; anything else (a
    negative reading, one past year 9999, a float or a bool from an injected clock) is refused before
    anything is written. It is also a ``ValueError``, as before.
    """

    code = "journal_clock_invalid"


class JournalSyncUnsupported(JournalUsageError, ValueError):
    """``append(..., sync_filesystem=True)`` on a backend that cannot sync a local file system.

    The PostgreSQL backend shares no file system with the caller; the file backend needs ``syncfs``.
    ``shares_filesystem`` says False in both cases: ask it first. Nothing is appended. It is also a
    ``ValueError``, as before.
    """

    code = "journal_sync_unsupported"


class JournalClosed(JournalUsageError, RuntimeError):
    """A call on a journal object after its ``close``; open the journal again to go on.

    It is also a ``RuntimeError``, as before.
    """

    code = "journal_closed"


class JournalContention(JournalError):
    """Another holder has, or took over, the run."""

    code = "journal_contention"


class JournalLeaseHeld(JournalContention):
    """A live holder already has the run's lease."""

    code = "journal_lease_held"


class JournalLeaseLost(JournalContention):
    """The caller's fencing epoch is stale: the run was taken over since it was leased."""

    code = "journal_lease_lost"

    def __init__(self, message: str, *, expected: int, got: int, **context: object) -> None:
        super().__init__(message, **context)  # type: ignore[arg-type]
        self.expected = expected
        self.got = got


class JournalStorageError(JournalError):
    """The storage under the journal failed."""

    code = "journal_storage"


class JournalCorrupt(JournalStorageError):
    """A line that is not a torn tail fails its checks: the journal is damaged."""

    code = "journal_corrupt"

    def __init__(self, message: str, *, path: str | Path, line: int, reason: str, **context: object) -> None:
        super().__init__(message, path=path, line=line, **context)  # type: ignore[arg-type]
        self.reason = reason


class JournalReadInterrupted(JournalStorageError):
    """A read failed part-way; nothing is cached, the next read goes to storage again."""

    code = "journal_read_interrupted"


class JournalUnwritable(JournalStorageError):
    """An append or a state change could not be made durable (space, permission, I/O)."""

    code = "journal_unwritable"


class JournalUnavailable(JournalStorageError):
    """The journal's backend cannot be reached (connection refused, server restarting)."""

    code = "journal_unavailable"

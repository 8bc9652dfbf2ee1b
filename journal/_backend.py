"""The one interface every journal backend implements (file now, PostgreSQL next)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from journal._model import Lease, Record, RunInfo, RunState


@runtime_checkable
class JournalBackend(Protocol):
    """Durable root runs, their leases, and append-only named streams.

    Every method raises only ``JournalError`` subclasses for journal failures. Nothing above this
    interface knows which backend it talks to.

    The rules every backend keeps alike (run ids, the clock, the lease fence, the states a run may
    finish in, which runs resume, when a release lets go, a closed journal) are the functions of
    ``journal._model``, which each backend calls; each backend module checks, for mypy, that its class
    implements this interface.

    After ``close``, every method raises ``JournalClosed`` (``journal_closed``), but ``location``
    (still the journal's), ``release`` (a no-op: closing let go of every lease) and ``close`` (safe
    to call again).
    """

    @property
    def location(self) -> str:
        """Where the journal lives, for messages (a directory, or a DSN without its password)."""
        ...

    def begin(self, flow: str, scope: str, meta: Mapping[str, Any]) -> tuple[RunInfo, Lease]:
        """Create a root run in state ``running`` and return it with its first lease (epoch 1)."""
        ...

    def acquire(self, run_id: str) -> Lease:
        """Take the lease of a failed or interrupted run with a higher epoch; state becomes running.

        Raises JournalRunNotFound, JournalNotResumable (done), JournalLeaseHeld (a live holder).
        """
        ...

    def finish(self, lease: Lease, state: RunState, error: Mapping[str, Any] | None = None) -> RunInfo:
        """Record the run's end (``done`` or ``failed``, with the error) and release the lease.

        Raises JournalStateInvalid (``journal_state_invalid``) for any other state, before anything
        is read or changed; JournalLeaseLost when ``lease`` is stale (another holder acquired the run
        since, or it has ended).
        """
        ...

    def release(self, lease: Lease) -> None:
        """Let go of the lease without changing the state (the run then reads ``interrupted``).

        Only the lease this object holds at that epoch is let go. Releasing a lease again (or after
        ``finish``, or one this object never held, or an older epoch) is a no-op, never an error.
        """
        ...

    def append(
        self,
        lease: Lease,
        stream: str,
        payload: Mapping[str, Any],
        *,
        key: str | None = None,
        sync_filesystem: bool = False,
    ) -> Record:
        """Append under the run lock, durably; if ``key`` is already in the stream, return that record.

        A keyed record's id is ``record_id(run_id, stream, key)``; an unkeyed one gets a random id.

        ``sync_filesystem`` (only where ``shares_filesystem`` said True): when this returns, every
        write made before the call to files on the journal's file system is durable too, by the
        same sync that makes the record durable (a caller's unsynced staged file, say).

        Raises JournalLeaseLost (stale epoch, or the run has ended), JournalNameInvalid, and the
        storage errors; JournalSyncUnsupported (also a ValueError) for ``sync_filesystem`` on a
        backend that cannot; JournalClockInvalid (also a ValueError) when the clock reads no time.
        """
        ...

    def rewrite_payloads(
        self,
        run_id: str,
        stream: str,
        payloads: Mapping[int, Mapping[str, Any]],
        *,
        pad: str,
        lease: Lease | None = None,
    ) -> int:
        """Replace the payloads of the stream's records numbered in ``payloads`` (an erasure); each
        record keeps its id, number, key and time. Files keep each line's length (the payload is
        padded with spaces under ``pad``) and replace the file whole (the old one or the new one
        after any crash); PostgreSQL updates the rows in one transaction. Returns how many records
        were rewritten. ``lease``: the current lease of the run, whose holder may rewrite its own
        records while it runs (a learn that committed a finding erased meanwhile).

        Raises JournalLeaseHeld (the run is running, and ``lease`` is not its current one),
        JournalLeaseLost (``lease`` is stale), JournalCorrupt (a line is damaged: nothing is
        rewritten), ValueError (a payload longer than its line), and the storage errors.
        """
        ...

    def shares_filesystem(self, path: str) -> bool:
        """Whether ``append(..., sync_filesystem=True)`` makes writes to files under ``path``
        durable: the journal is on ``path``'s file system and can sync all of it at once."""
        ...

    def read(self, run_id: str, stream: str) -> Sequence[Record]:
        """Return the stream's records in order; a stream never written reads as empty.

        A failed read raises and is never cached.
        """
        ...

    def find(self, run_id: str, stream: str, key: str) -> Record | None:
        """Return the record appended with ``key`` (the first and only one), or None."""
        ...

    def stamp(self, run_id: str, stream: str) -> object | None:
        """A token for the stream as this object last read it, cheaper than a ``read``: two equal
        tokens (never None) mean the stream did not change between the two calls, so a caller that
        took a token before it read knows, from an equal one later, that its read is still
        current. None when the backend cannot tell cheaply (the stream not read yet, changed
        since, kept open by a writer here; PostgreSQL always): then read.
        """
        ...

    def lookup(self, run_id: str, stream: str, record_id: str, *, hint: int | None = None) -> Record | None:
        """Return the record with id ``record_id`` in the stream, or None when the stream does not
        hold it; the same answer as searching ``read`` for it, at the cost of one record.

        ``hint`` is what ``hints`` gave for that record earlier (in any process); it is only ever a
        hint. The file backend reads the one line at that offset and takes it only when it begins
        a line, ends within what was acknowledged (the log's watermark), decodes with a valid
        checksum and is the record asked for; otherwise, or without a hint, it reads the stream as
        ``read`` does. A wrong, stale or forged hint costs time, never a different answer.
        PostgreSQL needs no hint (one query on the unique index of record ids).

        Raises JournalRunNotFound, JournalNameInvalid (a run id or stream name not allowed, a
        record id that is not a string), and the storage errors a ``read`` raises.
        """
        ...

    def hints(self, run_id: str, stream: str) -> dict[str, int]:
        """Return, by record id, a hint ``lookup`` can use for each record of the stream (the file
        backend: where its line begins); empty where a backend needs none. Derived data: keep it
        anywhere, trust it nowhere (``lookup`` checks it)."""
        ...

    def streams(self, run_id: str) -> list[str]:
        """Return the names of the run's streams that hold at least one record, sorted."""
        ...

    def run(self, run_id: str) -> RunInfo:
        """Return the run; ``interrupted`` when stored as running but no live holder has its lease."""
        ...

    def runs(self) -> list[RunInfo]:
        """Return every run, newest first."""
        ...

    def close(self) -> None:
        """Release held leases and resources; safe to call twice."""
        ...

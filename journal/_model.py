"""The journal's records: frozen values that pass through the backend interface unchanged."""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from journal._errors import JournalNameInvalid

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def check_name(kind: str, value: str) -> str:
    """Return ``value`` when it is safe as one path component; raise ``JournalNameInvalid``.

    Allowed: 1-128 characters of ``A-Z a-z 0-9 . _ -``, not starting with ``.``, ``_`` or ``-``.
    So ``..``, ``/``, NUL and hidden names can never reach the file system.
    """
    if not isinstance(value, str) or not _NAME.match(value) or ".." in value:
        raise JournalNameInvalid(
            f"invalid {kind} {value!r}: use 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return value


def record_id(run_id: str, stream: str, key: str) -> str:
    """The id of the record appended to ``stream`` of ``run_id`` with ``key`` (16 hex characters).

    Every backend derives a keyed record's id this way, so a caller can render what a record will
    look like before appending it, and the same record has the same id on every host.
    """
    return hashlib.blake2b(f"{run_id}\0{stream}\0{key}".encode(), digest_size=8).hexdigest()


class RunState(enum.StrEnum):
    """The state of a root run, as stored (``interrupted`` is derived: running with no live holder)."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    INTERRUPTED = "interrupted"

    @property
    def resumable(self) -> bool:
        """True for the states ``resume`` accepts: failed and interrupted."""
        return self in (RunState.FAILED, RunState.INTERRUPTED)


@dataclass(frozen=True)
class RunInfo:
    """A root run as the journal knows it.

    ``meta`` holds what a resume needs (the flow's source path and header); ``error`` is the code
    and message that failed it, if it failed; ``epoch`` counts the leases granted so far.
    """

    run_id: str
    flow: str
    scope: str
    state: RunState
    epoch: int
    created_ms: int
    updated_ms: int
    meta: Mapping[str, Any] = field(default_factory=dict)
    error: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Lease:
    """The right to append to a run, fenced by ``epoch``.

    A lease is a token, not a lock: a process that was handed it (a worker of the holder) may append
    with it. The journal refuses an append whose epoch is not the run's current one
    (``journal_lease_lost``). What it does not promise: that the holder is still alive when you
    look, or that a stalled holder notices it lost the run before its next append.
    """

    run_id: str
    epoch: int


@dataclass(frozen=True)
class Record:
    """One record of a stream: ``seq`` counts from 1 without gaps; ``id`` is unique in the run."""

    run_id: str
    stream: str
    seq: int
    id: str
    key: str | None
    ts_ms: int
    payload: Mapping[str, Any]

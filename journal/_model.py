"""The journal's records, and the rules every backend follows the same way.

The records are frozen values that pass through the backend interface unchanged. The rules (how a
run id is minted, the clock, the lease fence, which states a run may finish in, which runs may be
resumed, when a release lets go, what a closed journal answers) live here once; each backend calls
them rather than restating them.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from journal._errors import (
    JournalClockInvalid,
    JournalClosed,
    JournalLeaseHeld,
    JournalLeaseLost,
    JournalNameInvalid,
    JournalNotResumable,
    JournalPayloadInvalid,
    JournalStateInvalid,
    JournalSyncUnsupported,
)

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@functools.cache
def _unsafe_text() -> re.Pattern[str]:
    """C0 controls (NUL, newline …), DEL, C1 controls, and lone surrogates (no UTF-8 form: neither
    backend can store them). Compiled on first need (the surrogate class takes most of a millisecond):
    text that is printable ASCII, as keys and names mostly are, never needs it."""
    return re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


MAX_MS = 253_402_300_799_999
"""The last millisecond of year 9999: the latest time a run or record may be stamped with."""
MAX_KEY_BYTES = 1024
"""The longest key, in UTF-8 bytes (PostgreSQL indexes a key with its run id and stream)."""
MAX_LABEL_BYTES = 64 * 1024
"""The longest flow name or scope of a run, in UTF-8 bytes."""
MAX_PAYLOAD_BYTES = 16 * 1024 * 1024
"""The largest payload of a record, as canonical JSON. Both backends refuse a larger one on append
(``journal_payload_invalid``) and fail closed on one read back (``journal_corrupt``): on files, a
stream line longer than this and ``MAX_LINE_FRAME`` together; on PostgreSQL, a ``payload`` longer than
this, measured by the server, which then never sends it."""
MAX_LINE_FRAME = 8 * 1024
"""What a stream line holds besides its payload, at most: its id, key (escaped), numbers, checksum."""
MAX_RUN_BYTES = 16 * 1024 * 1024
"""The largest run record (its flow, scope, metadata and error with the other fields), as canonical
JSON: the size of ``run.json``. Both backends refuse to write a larger one (``journal_payload_invalid``)
and fail closed on one read back (``journal_corrupt``): a ``run.json`` larger than this, or a run row
whose flow, scope, meta and error hold more bytes than this together, measured by the server."""


def check_name(kind: str, value: str) -> str:
    """Return ``value`` when it is safe as one path component; raise ``JournalNameInvalid``.

    Allowed: 1-128 characters of ``A-Z a-z 0-9 . _ -``, not starting with ``.``, ``_`` or ``-``,
    matched in full (a trailing newline is refused too). So ``..``, ``/``, NUL, control characters
    and hidden names can never reach the file system.
    """
    if not isinstance(value, str) or not _NAME.fullmatch(value) or ".." in value:
        shown = f"{value[:130]!r}…" if isinstance(value, str) and len(value) > 130 else f"{value!r:.200}"
        raise JournalNameInvalid(
            f"invalid {kind} {shown}: use 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return value


def valid_name(value: object) -> bool:
    """Whether ``value`` (read back) is a name ``check_name`` takes: a run id or a stream name."""
    return isinstance(value, str) and _NAME.fullmatch(value) is not None and ".." not in value


def check_record_id(value: object) -> str:
    """Return ``value`` when it can be a record id (a string); raise ``JournalNameInvalid``."""
    if not isinstance(value, str):
        raise JournalNameInvalid(f"invalid record id {value!r:.80}: a record id is a string")
    return value


def _check_text(kind: str, value: object, max_bytes: int) -> str:
    if not isinstance(value, str):
        raise JournalNameInvalid(f"invalid {kind} {value!r:.80}: it must be a string")
    # printable ASCII holds none of them (its only unsafe characters are C0 controls and DEL)
    bad = None if value.isascii() and value.isprintable() else _unsafe_text().search(value)
    if bad is not None:
        raise JournalNameInvalid(
            f"invalid {kind} {value[:80]!r}: it holds {bad.group()!r} at {bad.start()}; "
            "use text without NUL, control characters or lone surrogates"
        )
    if len(value) > max_bytes // 4 and len(value.encode()) > max_bytes:
        raise JournalNameInvalid(f"invalid {kind} {value[:80]!r}…: longer than {max_bytes} UTF-8 bytes")
    return value


def check_key(key: str) -> str:
    """Return ``key`` when every backend can store it; raise ``JournalNameInvalid``.

    A key is any string of at most ``MAX_KEY_BYTES`` UTF-8 bytes without NUL, control characters
    (C0, DEL, C1) or lone surrogates.
    """
    return _check_text("key", key, MAX_KEY_BYTES)


def check_label(kind: str, value: object) -> str:
    """Return a run's ``flow`` or ``scope`` when every backend can store it; raise ``JournalNameInvalid``.

    Any string without NUL, control characters or lone surrogates, of at most ``MAX_LABEL_BYTES``
    UTF-8 bytes.
    """
    return _check_text(kind, value, MAX_LABEL_BYTES)


_MAX_DEPTH = MAX_DEPTH = 254  # orjson writes no deeper nesting than this (it reads up to 1024)


def payload_json(
    payload: Mapping[str, Any], *, what: str = "payload", limit: int | None = MAX_PAYLOAD_BYTES
) -> bytes:
    """Return ``payload`` as canonical JSON (sorted keys); raise ``JournalPayloadInvalid``, also for
    JSON of more than ``limit`` bytes (``MAX_PAYLOAD_BYTES`` by default; None: no limit here).

    Both backends call this before anything is queued or sent, so a payload that cannot be stored
    fails its own call and no other.
    """
    if not isinstance(payload, Mapping):
        raise JournalPayloadInvalid(
            f"a {what} must be a JSON object (a mapping), not {type(payload).__name__}"
        )
    try:
        data = orjson.dumps(
            payload if isinstance(payload, dict) else dict(payload), option=orjson.OPT_SORT_KEYS
        )
    except TypeError as exc:  # orjson.JSONEncodeError: a value JSON cannot hold
        raise JournalPayloadInvalid(
            f"the {what} is not JSON both backends can store ({exc}); pass strings, numbers within "
            "64 bits, booleans, null, lists and objects with string keys"
        ) from None
    # A record (or run) holds the payload one level down: nested as deep as orjson writes at all,
    # it fits alone and not in its record (an uncoded ``TypeError`` at the encode, after the checks).
    if data.count(b"[") + data.count(b"{") >= _MAX_DEPTH:
        try:
            orjson.dumps([payload if isinstance(payload, dict) else dict(payload)])
        except TypeError as exc:
            raise JournalPayloadInvalid(
                f"the {what} is nested too deep for the record that holds it ({exc}); "
                f"nest it at most {_MAX_DEPTH - 1} levels deep (the {what} itself is the first)"
            ) from None
    # orjson writes integers up to 2**64 - 1; every reader (and PostgreSQL's bigint) holds signed
    # 64 bits. Only output with 19 digits in a row can hold one out of range: look only then.
    # (``find``, not ``in``: a bytes ``in`` first tries its operand as an int, and formats the error)
    if data.translate(_DIGIT_MAP).find(_LONG_DIGITS) >= 0:
        wide = _wide_integer(payload)
        if wide is not None:
            raise JournalPayloadInvalid(
                f"the {what} holds the integer {wide}, outside the signed 64-bit range "
                f"[{INT64_MIN}, {INT64_MAX}] every journal reader holds"
            )
    if limit is not None and len(data) > limit:
        raise JournalPayloadInvalid(
            f"the {what} is {len(data):,} bytes as JSON, over the {limit:,} bytes a journal stores "
            "in one record; keep large values elsewhere (a file, a blob store) and store a reference"
        )
    return data


def run_record_size(fields: Mapping[str, Any], meta_bytes: int, error: bytes | None) -> int:
    """The bytes of a run record, as canonical JSON (what ``run.json`` holds): ``fields`` are its
    fields but ``meta`` and ``error`` (named as in ``run.json``), ``meta_bytes`` the length of its
    metadata as canonical JSON, ``error`` its error so encoded (None: null). Both backends measure a
    run record they write with this, so they refuse the same ones."""
    skeleton = orjson.dumps({**fields, "meta": None, "error": None}, option=orjson.OPT_SORT_KEYS)
    return len(skeleton) - 2 * len(b"null") + meta_bytes + (4 if error is None else len(error))


def check_run_size(size: int, *, run_id: str | None = None) -> None:
    """Refuse to write a run record of ``size`` bytes (``run_record_size``) over ``MAX_RUN_BYTES``.

    Raises:
        JournalPayloadInvalid: it is larger; nothing is written.
    """
    if size > MAX_RUN_BYTES:
        raise JournalPayloadInvalid(
            f"the run record (its flow, scope, metadata and error) would be {size:,} bytes as JSON, "
            f"over the {MAX_RUN_BYTES:,} bytes a journal stores for one run; keep large values "
            "elsewhere (a file, a blob store) and store a reference",
            run_id=run_id,
        )


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Each ASCII digit as ``1``, any other byte as ``0``: 19 digits in a row are then a plain substring,
# found in C at once, where the regex ``\d{19}`` took several microseconds on every append's payload.
_DIGIT_MAP = bytes(0x31 if 0x30 <= b <= 0x39 else 0x30 for b in range(256))
_LONG_DIGITS = LONG_DIGITS = b"1" * 19
# The same, with an opening bracket as ``2``: one pass over a line read back tells whether it may
# hold JSON no journal writes (19 digits in a row: an integer beyond signed 64 bits, or one orjson
# reads back as a float; more opening brackets than orjson nests deep), for ``json_problem`` to judge.
SHAPE_MAP = bytes(0x31 if 0x30 <= b <= 0x39 else 0x32 if b in b"[{" else 0x30 for b in range(256))


def _wide_integer(value: object) -> int | None:
    """The first integer in ``value`` (a JSON-shaped tree) outside signed 64 bits, or None."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, bool):
            continue
        if isinstance(item, int):
            if not INT64_MIN <= item <= INT64_MAX:
                return item
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return None


def json_problem(body: bytes, obj: dict[str, Any]) -> str | None:
    """What is wrong with ``obj``, parsed from ``body`` (a record or run as read back), or None:
    JSON the journal never writes (nesting orjson refuses to write, any form but the canonical one
    it writes: an integer past 64 bits read back as a float, a repeated key), or an integer outside
    signed 64 bits."""
    try:
        again = orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
    except TypeError as exc:
        return f"JSON no journal writes ({exc})"
    if again != body:
        return "JSON not in the canonical form the journal writes (an integer beyond 64 bits, a repeated key)"
    wide = _wide_integer(obj)
    if wide is not None:
        return f"the integer {wide}, outside the signed 64-bit range"
    return None


def record_id(run_id: str, stream: str, key: str) -> str:
    """The id of the record appended to ``stream`` of ``run_id`` with ``key`` (16 hex characters).

    Every backend derives a keyed record's id this way, so a caller can render what a record will
    look like before appending it, and the same record has the same id on every host.
    """
    return hashlib.blake2b(f"{run_id}\0{stream}\0{key}".encode(), digest_size=8).hexdigest()


def new_record_id(run_id: str, stream: str, key: str | None) -> str:
    """The id a new record gets: ``record_id`` of its key, or for an unkeyed one 16 random hex."""
    return secrets.token_hex(8) if key is None else record_id(run_id, stream, key)


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


def padded_payload(
    encode: Callable[[Mapping[str, Any]], bytes], payload: Mapping[str, Any], pad: str, size: int
) -> dict[str, Any]:
    """``payload`` with ``pad`` set to the spaces that make ``encode`` of it exactly ``size`` bytes
    (a record rewritten in place keeps its line's length, so no offset, watermark or hint moves).

    Raises:
        ValueError: even with an empty pad the payload encodes longer than ``size``.
    """
    out = {**payload, pad: ""}
    need = size - len(encode(out))
    if need < 0:
        raise ValueError(f"the new payload is {-need} bytes longer than the line it replaces")
    out[pad] = " " * need
    return out


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


_new_object = object.__new__


def new_record(  # noqa: PLR0917 - every field of the dataclass, in its order
    run_id: str, stream: str, seq: int, rid: str, key: str | None, ts_ms: int, payload: Mapping[str, Any]
) -> Record:
    """``Record(run_id, stream, seq, rid, key, ts_ms, payload)``, an equal record, made without the
    frozen dataclass's ``__init__`` (keyword handling and one ``object.__setattr__`` per field: about
    as much as the rest of a fence and a key lookup together, on every append). Checks nothing: the
    caller made or checked each field."""
    record: Record = _new_object(Record)
    fields = record.__dict__
    fields["run_id"], fields["stream"], fields["seq"], fields["id"] = run_id, stream, seq, rid
    fields["key"], fields["ts_ms"], fields["payload"] = key, ts_ms, payload
    return record


# -- the rules both backends share ------------------------------------------------------------


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch: every backend's default clock."""
    return time.time_ns() // 1_000_000


def read_clock(clock: Callable[[], int], *, run_id: str | None = None) -> int:
    """Read ``clock`` for a stamp: a whole number of milliseconds in ``[0, MAX_MS]``.

    Every backend reads its clock through this before it writes a stamp (begin, acquire, finish,
    append), so a clock gone wrong fails the call alike everywhere and nothing is written.

    Raises:
        JournalClockInvalid: a negative reading, one past year 9999, or not an ``int`` at all.
    """
    now = clock()
    if type(now) is not int or not 0 <= now <= MAX_MS:
        raise JournalClockInvalid(
            f"the journal's clock read {now!r:.40}, which is no time in whole milliseconds from 1970 "
            "to the end of year 9999; set this machine's clock right (or fix the clock given to the "
            "journal) and try again",
            run_id=run_id,
        )
    return now


def new_run_id(now: int) -> str:
    """A fresh root run id for a run begun at ``now`` (epoch ms): its UTC time, then 10 random hex.

    Sorting ids sorts runs by the second they began; the random tail keeps ids begun in the same
    second apart. Every id is a valid name (``check_name``), safe as one path component.
    """
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now / 1000))
    return f"{stamp}-{secrets.token_hex(5)}"


def finish_state(state: object) -> RunState:
    """Return ``state`` as the ``RunState`` a run may finish in (done or failed).

    Raises:
        JournalStateInvalid: any other state, or a value that is not a state; nothing is changed.
    """
    if isinstance(state, str) and state in (RunState.DONE.value, RunState.FAILED.value):
        return RunState(state)  # a RunState is a str too
    raise JournalStateInvalid(
        f"a run finishes {RunState.DONE.value} or {RunState.FAILED.value}, not {state!r:.80}; pass "
        "RunState.DONE or RunState.FAILED (or release the lease to leave the run resumable)"
    )


def check_fence(lease: Lease, epoch: int, state: str) -> None:
    """The lease fence: ``lease`` may write only while the run is running at the lease's epoch.

    ``epoch`` and ``state`` are the run's as stored, read under the run lock.

    Raises:
        JournalLeaseLost: another holder took the run over since (a higher epoch), or it ended.
    """
    if epoch != lease.epoch or state != RunState.RUNNING.value:
        raise lease_lost(lease, epoch, state)


def lease_lost(lease: Lease, epoch: int, state: str) -> JournalLeaseLost:
    """The fence's error for ``lease``, given the run's stored ``epoch`` and ``state``.

    A backend whose storage fenced an append itself raises this as it is, so the storage's verdict
    stands (fails closed) with the fence's code and words even should the two ever disagree.
    """
    lost = f"the lease on root run {lease.run_id} (epoch {lease.epoch}) was lost"
    if state == RunState.DONE.value:
        what = f"another holder finished it (it is done at epoch {epoch}): nothing is left to resume"
    elif state == RunState.FAILED.value:
        what = f"another holder ended it failed at epoch {epoch}: resume it to run it again"
    elif state == RunState.RUNNING.value and epoch != lease.epoch:
        what = (
            f"another holder took it over (it runs at epoch {epoch}); this holder must not write to "
            "it again: wait for that holder to end it (should that holder have died, resume it)"
        )
    else:  # the storage fenced it at the lease's own epoch: its verdict stands
        what = f"the run is now {state} at epoch {epoch}; resume it to continue"
    return JournalLeaseLost(
        f"{lost}: {what}",
        expected=epoch,
        got=lease.epoch,
        run_id=lease.run_id,
    )


def check_not_held(run_id: str, held_here: bool) -> None:
    """``acquire`` of a run whose lease this very journal object holds is refused, the same everywhere.

    Raises:
        JournalLeaseHeld: ``held_here``; the lease held is untouched.
    """
    if held_here:
        raise JournalLeaseHeld(
            f"root run {run_id} is already driven by this journal object; append with the lease it "
            "holds, or release that lease before acquiring the run again",
            run_id=run_id,
        )


def check_sync(supported: bool, why: str, location: str) -> None:
    """Refuse ``append(..., sync_filesystem=True)`` where the backend cannot sync a file system.

    Raises:
        JournalSyncUnsupported: not ``supported`` (``why`` says why); nothing is appended.
    """
    if not supported:
        raise JournalSyncUnsupported(
            f"the journal at {location} cannot sync a file system: {why}; fsync the files you wrote "
            "yourself and append without sync_filesystem (shares_filesystem says when it can)"
        )


def check_resumable(run_id: str, state: str) -> None:
    """Whether a run stored in ``state`` may be acquired: any state but done.

    Raises:
        JournalNotResumable: the run is done.
    """
    if state == RunState.DONE.value:
        raise JournalNotResumable(f"root run {run_id} is done; there is nothing to resume", run_id=run_id)


def releases(held_epoch: int | None, lease: Lease) -> bool:
    """Whether ``release(lease)`` lets go of the lease this object holds at ``held_epoch``.

    Only the very lease held does; an older lease of the run, or one this object no longer holds
    (released already, finished, or never its own), is a no-op: releasing twice is harmless.
    """
    return held_epoch is not None and held_epoch == lease.epoch


def check_open(closed: bool, location: str) -> None:
    """Raise ``JournalClosed`` when the journal object at ``location`` was closed."""
    if closed:
        raise JournalClosed(
            f"the journal at {location} is closed; open it again (journal.open_journal) to go on"
        )


# -- fields read back ------------------------------------------------------------------------------
# Every byte a backend reads back is untrusted: a line of a stream file, a row of a table. These are
# the checks both backends make of a record's and a run's fields before anything uses them.

RECORD_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""What a record id looks like (``new_record_id`` and ``record_id`` make nothing else)."""
MAX_INT = 2**63 - 1


def whole(value: object, low: int, high: int = MAX_INT) -> bool:
    """Whether ``value`` is an int (not a bool) in ``[low, high]``."""
    return type(value) is int and low <= value <= high


def shown(value: object) -> str:
    """A short, quoted rendering of a value read back, for a message."""
    return repr(str(value)[:40])


def record_problem(seq: object, rid: object, key: object, ts: object, payload: object) -> str | None:
    """What is wrong with a record's fields, or None (the common case, checked first and fast)."""
    if (
        whole(seq, 1)
        and isinstance(rid, str)
        and RECORD_ID.fullmatch(rid) is not None
        and (key is None or valid_key(key))
        and whole(ts, 0)
        and isinstance(payload, dict)
    ):
        return None
    checks = (
        (whole(seq, 1), f"a bad seq {shown(seq)}"),
        (isinstance(rid, str) and RECORD_ID.fullmatch(rid) is not None, f"a bad id {shown(rid)}"),
        (key is None or valid_key(key), "a key that is not a string without control characters"),
        (whole(ts, 0), f"a bad ts {shown(ts)}"),
        (isinstance(payload, dict), f"a payload that is not an object ({type(payload).__name__})"),
    )
    return next((why for ok, why in checks if not ok), None)


def valid_key(key: object) -> bool:
    """Whether ``key`` (read back) is a key ``check_key`` takes."""
    if not isinstance(key, str):
        return False
    try:
        check_key(key)
    except JournalNameInvalid:
        return False
    return True


def valid_label(value: object) -> bool:
    """Whether ``value`` (read back) is a flow name or scope ``check_label`` takes."""
    if type(value) is str and len(value) <= MAX_LABEL_BYTES // 4 and value.isascii() and value.isprintable():
        return True  # the common case: short printable ASCII, told without the regex
    try:
        check_label("label", value)
    except JournalNameInvalid:
        return False
    return True

"""Findings: validation, canonical form, identity, and the learned file's bytes."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from journal import JournalCorrupt, Record, record_id
from memory._errors import ArgumentInvalid, FindingInvalid

STREAM = "memory-learn"
"""The root run's stream that every learn commits to."""

RETIRE_STREAM = "memory-forget"
"""The root run's stream that every forget, and every supersede, commits to (keyed by the key of the
finding it retires)."""

REASON_MAX = 1024
"""The longest reason a forget takes (characters)."""

_FIELDS = {"text", "source", "tags", "metadata", "expiresMs"}
_KEY = re.compile(r"[0-9a-f]{32}")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CONTROL = re.compile("[\x00-\x1f\x7f]")
"""A control character, which no metadata key holds."""

TEXT_MAX_BYTES = 1024 * 1024
"""The longest ``text`` a finding takes, as UTF-8 (bytes): 1 MiB."""
SOURCE_MAX_BYTES = 4 * 1024
"""The longest ``source`` a finding takes, as UTF-8 (bytes)."""
TAG_MAX_BYTES = 256
"""The longest tag a finding takes, as UTF-8 (bytes)."""
TAGS_MAX = 64
"""The most tags one finding carries (and so the most a read filter may ask for)."""
META_FILTER_MAX = 256
"""The most metadata pairs a read filter may ask for (each is one test of the history DB's query,
which SQLite bounds)."""
METADATA_MAX_BYTES = 16 * 1024
"""The largest ``metadata`` a finding takes, as canonical JSON (bytes)."""
METADATA_MAX_DEPTH = 16
"""How deep lists and objects may nest inside ``metadata``."""
METADATA_KEY_MAX = 128
"""The longest key of a ``metadata`` object (characters)."""
EXPIRES_MAX = 2**53 - 1
"""The largest ``expiresMs`` (the largest integer every JSON reader keeps exact)."""
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
TIME_MAX_MS = 253_402_300_799_999
"""The latest time a record may carry (9999-12-31 23:59:59.999 UTC, the last a date can show): a
record read back with a later ``learnedMs`` or ``forgottenMs`` is not one this store wrote."""
_PAYLOAD = frozenset({"id", "scope", "flow", "finding", "learnedMs"})


@dataclass(frozen=True)
class Finding:
    """What a flow learned: ``text``, where it came from (``source``), ``tags``, and optionally
    ``metadata`` (a JSON object) and ``expires_ms`` (when it stops being returned, epoch ms).

    All of it is the finding: its id hashes every field, so the same text with other metadata is
    another finding.
    """

    text: str
    source: str
    tags: tuple[str, ...] = ()
    metadata: Mapping[str, Any] | None = field(default=None, hash=False)
    expires_ms: int | None = None

    def as_json(self) -> dict[str, Any]:
        """The finding as a JSON object (tags as a list; ``metadata`` and ``expiresMs`` only when set)."""
        out: dict[str, Any] = {"text": self.text, "source": self.source, "tags": list(self.tags)}
        if self.metadata:
            out["metadata"] = dict(self.metadata)
        if self.expires_ms is not None:
            out["expiresMs"] = self.expires_ms
        return out


def _invalid(path: str, what: str) -> FindingInvalid:
    error = FindingInvalid(f"a finding's `{path}` {what}")
    error.field = path
    return error


def _member(parent: str, key: str) -> str:
    return f"{parent}.{key}" if _IDENTIFIER.fullmatch(key) else f"{parent}[{key!r}]"


def _encodable(value: str, path: str) -> str:
    try:
        value.encode()
    except UnicodeEncodeError:
        raise _invalid(path, "holds a lone surrogate, which is not valid UTF-8") from None
    return value


def _bounded(value: str, path: str, limit: int, name: str) -> None:
    """Check that ``value`` is valid UTF-8 of at most ``limit`` bytes; the message names the limit.

    Raises:
        FindingInvalid: a lone surrogate, or more than ``limit`` bytes.
    """
    size = len(_encodable(value, path).encode()) if not value.isascii() else len(value)
    if size > limit:
        raise _invalid(path, f"is {size} bytes as UTF-8; at most {limit} ({name})")


def _json_value(value: object, path: str, depth: int) -> Any:
    """``value`` as plain JSON (tuples as lists, mappings as dicts), or ``FindingInvalid`` naming
    the path of the first bad part."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _encodable(value, path)
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise _invalid(path, "is an integer outside the signed 64-bit range")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _invalid(path, "is not a finite number (JSON has no NaN or infinity)")
        return float.__float__(value)  # a subclass's (``numpy.float64``) as a plain float
    if isinstance(value, list | tuple | Mapping):
        if depth >= METADATA_MAX_DEPTH:
            raise _invalid(path, f"nests deeper than {METADATA_MAX_DEPTH} levels")
        if isinstance(value, Mapping):
            return _json_object(value, path, depth + 1)
        return [
            v if type(v) is str and v.isascii() else _json_value(v, f"{path}[{i}]", depth + 1)
            for i, v in enumerate(value)
        ]
    kind = type(value).__name__
    raise _invalid(path, f"must be a JSON value (string, number, boolean, null, list or object), not {kind}")


def _json_object(obj: Mapping[Any, Any], path: str, depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in obj.items():
        if not isinstance(key, str) or not key or len(key) > METADATA_KEY_MAX:
            raise _invalid(
                f"{path}[{key!r:.40}]",
                f"is not a key: keys are non-empty strings of at most {METADATA_KEY_MAX} characters",
            )
        if _CONTROL.search(key) is not None:
            raise _invalid(f"{path}[{key!r:.40}]", "is not a key: keys hold no control characters")
        if not key.isascii():
            _encodable(key, f"{path}[{key!r:.40}]")
        # the common leaves (exact types) are taken as ``_json_value`` takes them, without
        # building the path it would name only in an error
        kind = type(value)
        if (
            (kind is str and value.isascii())
            or kind is bool
            or value is None
            or (kind is int and _INT_MIN <= value <= _INT_MAX)
        ):
            out[key] = value
        else:
            out[key] = _json_value(value, _member(path, key), depth)
    return out


def check_metadata(value: object) -> dict[str, Any] | None:
    """A finding's ``metadata`` as plain JSON, None when empty.

    Raises:
        FindingInvalid: not an object of string keys and JSON values, too deep, or over
            ``METADATA_MAX_BYTES`` as canonical JSON; the message (and ``field``) names the path
            of the bad part, e.g. ``metadata.price`` or ``metadata.levels[2]``.
    """
    if not isinstance(value, Mapping):
        raise _invalid("metadata", f"must be a JSON object, not {type(value).__name__}")
    plain = _json_object(value, "metadata", 0)
    size = len(orjson.dumps(plain, option=orjson.OPT_SORT_KEYS))
    if size > METADATA_MAX_BYTES:
        raise _invalid("metadata", f"is {size} bytes as JSON; at most {METADATA_MAX_BYTES}")
    return plain or None


def check_expires(value: object) -> int:
    """A finding's ``expiresMs``, or ``FindingInvalid``: an integer of epoch milliseconds, from 1
    to ``EXPIRES_MAX``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= EXPIRES_MAX:
        raise _invalid(
            "expiresMs", f"must be an integer of epoch milliseconds, 1 to {EXPIRES_MAX}, not {value!r:.40}"
        )
    return value


def validate(obj: object, default_source: str) -> Finding:
    """Return the finding ``obj`` describes, with ``source`` defaulting to ``default_source``.

    Raises:
        FindingInvalid: ``obj`` is not a mapping; ``text`` is missing or not a non-empty string;
            ``source`` is not a non-empty string; ``tags`` is not a list of non-empty strings;
            ``text``, ``source`` or a tag is longer than ``TEXT_MAX_BYTES``, ``SOURCE_MAX_BYTES``
            or ``TAG_MAX_BYTES`` as UTF-8, or there are more than ``TAGS_MAX`` tags;
            ``metadata`` or ``expiresMs`` is malformed (see ``check_metadata``, ``check_expires``);
            or there is any other key. The message says which (``field`` names the path).
    """
    if isinstance(obj, Finding):
        obj = obj.as_json()
    if not isinstance(obj, Mapping):
        raise FindingInvalid(f"a finding must be a JSON object, not {type(obj).__name__}")
    extra = [] if _FIELDS.issuperset(obj) else sorted(str(k) for k in obj if k not in _FIELDS)
    if extra:
        error = FindingInvalid(
            "a finding has only text, source, tags, metadata and expiresMs; unexpected: " + ", ".join(extra)
        )
        error.field = extra[0]
        raise error
    text = obj.get("text")
    if not isinstance(text, str) or not text.strip():
        raise _invalid("text", "must be a non-empty string (a finding needs `text`)")
    _bounded(text, "text", TEXT_MAX_BYTES, "TEXT_MAX_BYTES")
    source = obj.get("source", default_source)
    if not isinstance(source, str) or not source.strip():
        raise _invalid("source", "must be a non-empty string")
    _bounded(source, "source", SOURCE_MAX_BYTES, "SOURCE_MAX_BYTES")
    tags = obj.get("tags", [])
    if not isinstance(tags, list | tuple):
        raise _invalid("tags", "must be a list of non-empty strings")
    if len(tags) > TAGS_MAX:
        raise _invalid("tags", f"holds {len(tags)} tags; at most {TAGS_MAX} (TAGS_MAX)")
    for t in tags:
        if not isinstance(t, str) or not t.strip():
            raise _invalid("tags", "must be a list of non-empty strings")
    for i, t in enumerate(tags):
        if not t.isascii() or len(t) > TAG_MAX_BYTES:  # an ASCII tag within the limit passes as is
            _bounded(t, f"tags[{i}]", TAG_MAX_BYTES, "TAG_MAX_BYTES")
    metadata = check_metadata(obj["metadata"]) if "metadata" in obj else None
    expires = check_expires(obj["expiresMs"]) if "expiresMs" in obj else None
    # ``Finding(text=..., ...)``, without the frozen dataclass's ``__init__`` (keywords and one
    # ``object.__setattr__`` per field): every field is checked above
    finding: Finding = _new_object(Finding)
    fields = finding.__dict__
    fields["text"], fields["source"], fields["tags"] = text, source, tuple(tags)
    fields["metadata"], fields["expires_ms"] = metadata, expires
    return finding


_new_object = object.__new__


def canonical(finding: Finding) -> bytes:
    """The finding's canonical bytes (sorted keys, orjson): equal findings encode equal."""
    return orjson.dumps(finding.as_json(), option=orjson.OPT_SORT_KEYS)


REVISION_MAX = 2**31 - 1
"""The largest revision a finding's key takes."""


def finding_id(scope: str, finding: Finding, revision: int = 0) -> str:
    """The finding's id in ``scope``: a hash of the scope and the canonical finding (32 hex).

    ``revision`` is 0 for a finding as first learned. A finding learned again after its key was
    forgotten or superseded is a new memory: it takes the first revision (1, 2, ...) whose key is not
    retired, and the hash covers that number too, so the forgotten key stays forgotten.
    """
    head = scope.encode() + b"\0" + canonical(finding)
    if revision:
        head += b"\0r" + str(revision).encode()
    return hashlib.sha256(head).hexdigest()[:32]


def check_revision(value: object) -> int:
    """A finding's ``revision`` as read back: an integer from 1 to ``REVISION_MAX`` (0 is written as
    no field at all). Raises ``ValueError`` otherwise."""
    if type(value) is not int or not 0 < value <= REVISION_MAX:
        raise ValueError(f"a finding's revision must be an integer, 1 to {REVISION_MAX}, not {value!r:.40}")
    return value


def is_key(value: str) -> bool:
    """Whether ``value`` is a finding key's shape: 32 lowercase hex digits."""
    return _KEY.fullmatch(value) is not None


def check_key(key: object, what: str = "key") -> str:
    """Return ``key`` if it is a finding's key (32 lowercase hex digits); raise ``ArgumentInvalid``
    naming ``what`` otherwise."""
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise ArgumentInvalid(
            f"{what} must be a finding's key, 32 lowercase hex digits (as `flows recall` shows), "
            f"not {key!r:.80}"
        )
    return key


def scope_hash(scope: str) -> str:
    """The directory name of a scope's learned files (16 hex characters)."""
    return hashlib.sha256(scope.encode()).hexdigest()[:16]


def learn_payload(
    fid: str,
    scope: str,
    flow: str,
    finding: Finding,
    learned_ms: int,
    *,
    revision: int = 0,
    memory: str | None = None,
    supersedes: str | None = None,
    supersedes_scope: str | None = None,
) -> dict[str, Any]:
    """The payload a learn commits to the ``memory-learn`` stream (``revision`` only when not 0, and
    ``memory``, the id of the memory a new version belongs to, only when it is not the finding's
    own key, so a first learn's payload is exactly what it always was). ``supersedes_scope``, the
    scope of the version ``supersedes`` names, makes the commit that version's retirement too
    (``supersede_in``): one record, one flush, for an update."""
    payload: dict[str, Any] = {
        "id": fid,
        "scope": scope,
        "flow": flow,
        "finding": finding.as_json(),
        "learnedMs": learned_ms,
    }
    if revision:
        payload["revision"] = revision
    if memory is not None and memory != fid:
        payload["memory"] = memory
    if supersedes is not None:  # the version this one replaces
        payload["supersedes"] = supersedes
        if supersedes_scope is not None:  # and this record retires it (else a record of its own)
            payload["supersedesScope"] = supersedes_scope
    return payload


PAD = "pad"
ERASE_STREAM = "memory-erase"
"""The stream of erase records: what was erased, when, by whom, why, and digests; no content."""
_HEX16 = re.compile(r"[0-9a-f]{16}")
_TOMBSTONE = frozenset({"id", "scope", "flow", "learnedMs", "erased", PAD})
TOMBSTONE_OPTIONAL = frozenset({"memory", "revision", "supersedes", "supersedesScope"})
"""What an erased commit keeps besides who and when, when it had them: its memory and revision, and
the version it superseded with that version's scope (its retirement stays: ``supersede_in``)."""


def is_erased(record: Record) -> bool:
    """Whether ``record`` is an erased ``memory-learn`` commit (a tombstone of exactly that shape:
    anything else with an ``erased`` field is not one, and is checked as a commit, which fails)."""
    p = record.payload
    if not isinstance(p, Mapping) or "erased" not in p:
        return False
    keys = set(p)
    return (
        _TOMBSTONE - {PAD} <= keys <= _TOMBSTONE | TOMBSTONE_OPTIONAL
        and isinstance(p["id"], str)
        and _KEY.fullmatch(p["id"]) is not None
        and isinstance(p["flow"], str)
        and type(p["learnedMs"]) is int
        and 0 <= p["learnedMs"] <= TIME_MAX_MS
        and _version_problem(p) is None
        and isinstance(p["erased"], str)
        and _HEX16.fullmatch(p["erased"]) is not None
        and (PAD not in p or (isinstance(p[PAD], str) and not p[PAD].strip(" ")))
        and record.key == p["id"]
    )


def _not_a(what: str, record: Record, location: str, why: str) -> JournalCorrupt:
    """The ``JournalCorrupt`` for a record read back that is not ``what`` it should be (``why``),
    naming its run, stream and line: nothing is built from it."""
    return JournalCorrupt(
        f"record {record.id!r} (line {record.seq}) of stream {record.stream} of root run {record.run_id} "
        f"in the journal {location} is not {what}: {why}; nothing is built from it. Restore the journal "
        "from a backup; `flows check` lists every such record",
        path=location,
        line=record.seq,
        reason=why,
        run_id=record.run_id,
        stream=record.stream,
    )


def checked_commit(record: Record, location: str) -> Record:
    """Return ``record`` when it is a ``memory-learn`` commit of exactly the shape ``learn`` writes.

    Every record read back from a journal is untrusted input: before a path or a file is built from
    one, its payload must be ``{id, scope, flow, finding, learnedMs}`` with a valid finding in its
    canonical form (and, for a finding learned again after a retirement, a ``revision``), its id 32
    lowercase hex digits equal to ``finding_id(scope, finding, revision)``, its key
    that id and its record id the one the journal derives from the key. ``location`` names the
    journal, for the message.

    Raises:
        JournalCorrupt: the record is anything else; names the run, the stream and the line.
    """
    why = _commit_problem(record)
    if why is None:
        return record
    raise _not_a("a finding's commit", record, location, why)


def _version_problem(p: Mapping[str, Any]) -> str | None:
    """What is wrong with a commit's ``memory``, ``supersedes`` and ``supersedesScope``, if any."""
    if "memory" in p and (
        not isinstance(p["memory"], str) or not _KEY.fullmatch(p["memory"]) or p["memory"] == p["id"]
    ):
        return "its memory is not 32 lowercase hex digits other than its id"
    if "supersedes" in p and (
        not isinstance(p["supersedes"], str)
        or not _KEY.fullmatch(p["supersedes"])
        or p["supersedes"] == p["id"]
    ):
        return "its supersedes is not 32 lowercase hex digits other than its id"
    if "supersedesScope" in p and ("supersedes" not in p or not isinstance(p["supersedesScope"], str)):
        return "its supersedesScope is not a string beside a supersedes"
    return None


def _commit_problem(record: Record) -> str | None:  # noqa: PLR0911 - one return per rule broken
    p = record.payload
    if not isinstance(p, Mapping) or not _PAYLOAD <= set(p) <= _PAYLOAD | {
        "revision",
        "memory",
        "supersedes",
        "supersedesScope",
    }:
        return "its payload is not {id, scope, flow, finding, learnedMs} and an optional revision and memory"
    try:
        revision = check_revision(p["revision"]) if "revision" in p else 0
    except ValueError as exc:
        return str(exc)
    why = _version_problem(p)
    if why is not None:
        return why
    fid, scope, flow, ms, finding = p["id"], p["scope"], p["flow"], p["learnedMs"], p["finding"]
    if not isinstance(fid, str) or not _KEY.fullmatch(fid):
        return "its id is not 32 lowercase hex digits"
    if not isinstance(scope, str) or not isinstance(flow, str):
        return "its scope or flow is not a string"
    if type(ms) is not int or not 0 <= ms <= TIME_MAX_MS:
        return "its learnedMs is not a time in milliseconds"
    if not isinstance(finding, Mapping) or not {"text", "source", "tags"} <= set(finding) <= _FIELDS:
        return "its finding is not {text, source, tags} with optional metadata and expiresMs"
    try:
        item = validate(finding, default_source="")
    except FindingInvalid as exc:
        return f"its finding is invalid ({exc})"
    if item.as_json() != finding:
        return "its finding is not in its canonical form"
    if finding_id(scope, item, revision) != fid:
        return "its id is not the hash of its scope, finding and revision"
    if record.key != fid or record.id != record_id(record.run_id, record.stream, fid):
        return "its key or record id is not the one the finding's id gives"
    return None


_RETIREMENT = frozenset({"id", "scope", "flow", "reason", "by", "forgottenMs"})


def checked_retirement(record: Record, location: str) -> Record:
    """Return ``record`` when it is a ``memory-forget`` record of exactly the shape a forget or a
    supersede writes (``retire_payload``): an id and a ``by`` (when set) of 32 lowercase hex digits,
    a reason (a forget) or a ``by`` (a supersede) but not both, a time the DB can hold, the key and
    record id that id gives. Checked before a retired file's path is built from it.

    Raises:
        JournalCorrupt: the record is anything else; names the run, the stream and the line.
    """
    why = _retirement_problem(record)
    if why is None:
        return record
    raise _not_a("a finding's retirement", record, location, why)


def _retirement_problem(record: Record) -> str | None:  # noqa: PLR0911 - one return per rule broken
    p = record.payload
    if not isinstance(p, Mapping) or set(p) != _RETIREMENT:
        return "its payload is not exactly {id, scope, flow, reason, by, forgottenMs}"
    key, reason, by, ms = p["id"], p["reason"], p["by"], p["forgottenMs"]
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        return "its id is not 32 lowercase hex digits"
    if not isinstance(p["scope"], str) or not isinstance(p["flow"], str):
        return "its scope or flow is not a string"
    forget = isinstance(reason, str) and by is None
    supersede = reason is None and isinstance(by, str) and _KEY.fullmatch(by) is not None
    if not (forget or supersede):
        return "it has neither a reason alone nor a `by` key alone"
    if type(ms) is not int or not 0 <= ms <= TIME_MAX_MS:
        return "its forgottenMs is not a time in milliseconds"
    if record.key != key or record.id != record_id(record.run_id, record.stream, key):
        return "its key or record id is not the one its id gives"
    return None


def render(record: Record) -> bytes:
    """The learned file's bytes: a pure function of its journal record, which it cites.

    Raises:
        ValueError: the record is not a ``memory-learn`` record of the expected shape.
    """
    p = record.payload
    try:
        finding = p["finding"]
        obj = {
            "id": p["id"],
            "scope": p["scope"],
            "flow": p["flow"],
            "text": finding["text"],
            "source": finding["source"],
            "tags": list(finding["tags"]),
            "learnedMs": p["learnedMs"],
            "journal": {"runId": record.run_id, "stream": record.stream, "id": record.id},
        }
        # Only when set, so a finding without them renders exactly as it always has.
        if "metadata" in finding:
            obj["metadata"] = finding["metadata"]
        if "expiresMs" in finding:
            obj["expiresMs"] = finding["expiresMs"]
        if "revision" in p:
            obj["revision"] = p["revision"]
        if "memory" in p:
            obj["memory"] = p["memory"]
    except (KeyError, TypeError) as exc:
        raise ValueError(
            f"record {record.id} of {record.run_id} is not a memory-learn record: {exc}"
        ) from None
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS) + b"\n"


def commit_to_publish(chosen: Record | None, candidate: Record) -> Record:
    """Of two ``memory-learn`` commits of one finding, the one whose rendering is published.

    Within one root run the first commit wins: a keyed append of a finding already committed
    returns that first commit, so racing and resumed attempts publish the same bytes. Across runs
    the newest commit wins (the later ``learnedMs``, equal times going to the larger run id), so a
    finding learned again elsewhere cites its latest commit. ``chosen`` is the commit kept so far
    (None when there is none yet); ``candidate`` one read after it.
    """
    if chosen is None:
        return candidate
    if candidate.run_id == chosen.run_id:
        return chosen
    if (candidate.payload["learnedMs"], candidate.run_id) > (chosen.payload["learnedMs"], chosen.run_id):
        return candidate
    return chosen


def check_reason(reason: object) -> str:
    """Return ``reason`` if it is a usable forget reason; raise ``ArgumentInvalid`` otherwise."""
    if not isinstance(reason, str) or not reason.strip() or len(reason) > REASON_MAX:
        raise ArgumentInvalid(
            f"a forget's reason must be a non-empty string of at most {REASON_MAX} characters, "
            f"not {reason!r:.80}"
        )
    try:
        reason.encode()
    except UnicodeEncodeError:
        raise ArgumentInvalid("a forget's reason holds a lone surrogate, which is not valid UTF-8") from None
    return reason


def retire_payload(
    key: str, scope: str, flow: str, *, reason: str | None, by: str | None, forgotten_ms: int
) -> dict[str, Any]:
    """The payload a forget (``by`` None) or a supersede (``by`` the new key) commits to
    ``RETIRE_STREAM``: which finding is retired (``id``, ``scope``), by which flow, why, and when."""
    return {"id": key, "scope": scope, "flow": flow, "reason": reason, "by": by, "forgottenMs": forgotten_ms}


FORGET_MANY_MAX = 100_000
"""The most findings one forget by filter retires (one record names them all)."""

_BATCH = frozenset({"ids", "flow", "reason", "filter", "forgottenMs"})

FILTER_CONTENT = ("source", "tags", "meta")
"""The parts of a forget by filter's ``filter`` that hold findings' content (the scope and the time
bound do not): an erase of a finding the forget retired rewrites the record without them."""


def filter_holds_content(record: Record) -> bool:
    """Whether ``record``, a forget by filter's, still names content in its filter."""
    f = record.payload.get("filter")
    return isinstance(f, Mapping) and any(name in f for name in FILTER_CONTENT)


def filter_erased(payload: Mapping[str, Any]) -> dict[str, Any]:
    """A forget by filter's payload once a finding it retired is erased: the filter keeps its scope
    and time bound, not its tags, metadata or source (which the erased finding held); the ids, the
    flow, the reason and the time stay. (A rewrite in place pads it, ``PAD``, which marks it.)"""
    out = {k: v for k, v in payload.items() if k != PAD}
    out["filter"] = {k: v for k, v in payload["filter"].items() if k not in FILTER_CONTENT}
    return out


def batch_key(ids: Sequence[tuple[str, str]]) -> str:
    """The key of a forget by filter's record: a digest of the keys it retires (so the same
    deletion in one root run is one record, as a keyed append makes it)."""
    return hashlib.sha256("\n".join(sorted(k for k, _ in ids)).encode()).hexdigest()[:32]


def retire_many_payload(
    ids: Sequence[tuple[str, str]], flow: str, *, reason: str, filter: Mapping[str, Any], forgotten_ms: int
) -> dict[str, Any]:
    """The payload a forget by filter commits to ``RETIRE_STREAM``: every (key, scope) it retires,
    sorted by key, the filter that chose them, by which flow, why, and when. One record: the whole
    deletion commits at once or not at all."""
    return {
        "ids": [[k, s] for k, s in sorted(ids)],
        "flow": flow,
        "reason": reason,
        "filter": dict(filter),
        "forgottenMs": forgotten_ms,
    }


def _batch_problem(record: Record) -> str | None:  # noqa: PLR0911 - one return per rule broken
    p = record.payload
    if set(p) - {PAD} != _BATCH or (PAD in p and not (isinstance(p[PAD], str) and not p[PAD].strip(" "))):
        return "its payload is not exactly {ids, flow, reason, filter, forgottenMs} (and a pad of spaces)"
    ids, reason, ms = p["ids"], p["reason"], p["forgottenMs"]
    if not isinstance(ids, list) or not 1 <= len(ids) <= FORGET_MANY_MAX:
        return f"its ids are not a list of 1 to {FORGET_MANY_MAX} (key, scope) pairs"
    for pair in ids:
        if not (
            isinstance(pair, list)
            and len(pair) == 2
            and isinstance(pair[0], str)
            and _KEY.fullmatch(pair[0]) is not None
            and isinstance(pair[1], str)
        ):
            return "an entry of its ids is not a (32 lowercase hex key, scope) pair"
    keys = [pair[0] for pair in ids]
    if keys != sorted(set(keys)):
        return "its ids are not sorted by key without repeats"
    if not isinstance(p["flow"], str) or not isinstance(reason, str) or not reason:
        return "its flow or reason is not a string"
    if not isinstance(p["filter"], Mapping):
        return "its filter is not an object"
    if type(ms) is not int or not 0 <= ms <= TIME_MAX_MS:
        return "its forgottenMs is not a time in milliseconds"
    want = batch_key([(k, "") for k in keys])
    if record.key != want or record.id != record_id(record.run_id, record.stream, want):
        return "its key or record id is not the one its ids give"
    return None


def supersede_in(record: Record) -> Record | None:
    """The retirement a ``memory-learn`` commit makes of the version it supersedes, when the commit
    is that retirement too (it names the version's scope, ``supersedesScope``): a view citing the
    commit (its run, stream and id) with the payload a supersede's own record would have
    (``{id, scope, flow, reason: null, by, forgottenMs}``, ``by`` the commit's key, ``forgottenMs``
    its ``learnedMs``). None for any other commit. The commit must have been checked
    (``checked_commit``), or be an erased one (``is_erased``: its tombstone keeps both names, so
    the retirement outlives the content)."""
    p = record.payload
    if "supersedesScope" not in p:
        return None
    old = p["supersedes"]
    return Record(  # built directly: ``dataclasses.replace`` costs an update several times as much
        record.run_id,
        record.stream,
        record.seq,
        record.id,
        old,
        record.ts_ms,
        {
            "id": old,
            "scope": p["supersedesScope"],
            "flow": p["flow"],
            "reason": None,
            "by": p["id"],
            "forgottenMs": p["learnedMs"],
        },
    )


def retirements_in(record: Record, location: str) -> list[Record]:
    """The retirements a ``RETIRE_STREAM`` record makes, each as a record of one key: the record
    itself for a forget or a supersede (``checked_retirement``); for a forget by filter, one view
    per key it retires, citing the same record (its run, stream and id) with that key's payload
    (``{id, scope, flow, reason, by: null, forgottenMs}``), so everything that renders, publishes or
    reads a retirement handles it as it handles a forget. A ``STREAM`` record (a commit) makes the
    one retirement ``supersede_in`` gives, or none. Checked before any path is built.

    Raises:
        JournalCorrupt: the record is none of these shapes; names the run, the stream and the line.
    """
    if record.stream == STREAM:
        view = supersede_in(record if is_erased(record) else checked_commit(record, location))
        return [] if view is None else [view]
    p = record.payload
    if not (isinstance(p, Mapping) and "ids" in p):
        return [checked_retirement(record, location)]
    why = _batch_problem(record)
    if why is not None:
        raise _not_a("a forget by filter", record, location, why)
    return [
        replace(
            record,
            key=key,
            payload={
                "id": key,
                "scope": scope,
                "flow": p["flow"],
                "reason": p["reason"],
                "by": None,
                "forgottenMs": p["forgottenMs"],
            },
        )
        for key, scope in p["ids"]
    ]


def render_retirement(record: Record) -> bytes:
    """The retired file's bytes (the marker that keeps a finding out of every read): a pure
    function of its ``RETIRE_STREAM`` record, which it cites.

    Raises:
        ValueError: the record is not a retirement record of the expected shape.
    """
    p = record.payload
    try:
        obj = {
            "id": p["id"],
            "scope": p["scope"],
            "flow": p["flow"],
            "reason": p["reason"],
            "by": p["by"],
            "forgottenMs": p["forgottenMs"],
            "journal": {"runId": record.run_id, "stream": record.stream, "id": record.id},
        }
    except (KeyError, TypeError) as exc:
        raise ValueError(
            f"record {record.id} of {record.run_id} is not a {RETIRE_STREAM} record: {exc}"
        ) from None
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS) + b"\n"


def retirement_to_publish(chosen: Record | None, candidate: Record) -> Record:
    """Of two retirement records of one finding, the one whose retired file is published: the first.

    Within a run the keyed append keeps one; across runs the oldest (the earlier ``forgottenMs``,
    equal times going to the smaller run id), so forgetting twice keeps answering with the first.
    """
    if chosen is None:
        return candidate
    if (candidate.payload["forgottenMs"], candidate.run_id) < (chosen.payload["forgottenMs"], chosen.run_id):
        return candidate
    return chosen


_EXACT = 2**53


def _comparable(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer() and abs(value) < _EXACT:
        return int(value)
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    return value


def meta_value_key(value: Any) -> str:
    """How a metadata value is compared by a ``meta=`` filter, on the DB and the files alike: its
    canonical JSON, with a number that is a whole float written as the integer (so ``2500.0``
    matches ``2500``; ``true`` never matches ``1``; objects compare whatever their key order)."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:  # a scalar is its own comparable
        return orjson.dumps(value).decode()
    return orjson.dumps(_comparable(value), option=orjson.OPT_SORT_KEYS).decode()


def check_filters(tags: object, meta: object) -> tuple[tuple[str, ...], dict[str, str]]:
    """A read's ``tags`` (every one must match) and ``meta`` (top-level metadata keys, each equal to
    its value), as tags and ``{key: meta_value_key(value)}``.

    Raises:
        ArgumentInvalid: ``tags`` is not a list of non-empty strings (a lone string is refused:
            it would be read as its letters) or holds more than ``TAGS_MAX``; ``meta`` is not an
            object of metadata keys and JSON values (see ``check_metadata``) or holds more than
            ``META_FILTER_MAX`` pairs.
    """
    if not tags and meta is None and isinstance(tags, list | tuple):
        return (), {}  # the usual read: no filter
    if isinstance(tags, str) or not isinstance(tags, list | tuple | set | frozenset):
        raise ArgumentInvalid(f"tags must be a list of non-empty strings, not {tags!r:.80}")
    if not all(isinstance(t, str) and t.strip() for t in tags):
        raise ArgumentInvalid(f"tags must be a list of non-empty strings, not {list(tags)!r:.80}")
    every_tag = tuple(dict.fromkeys(tags))
    if len(every_tag) > TAGS_MAX:
        raise ArgumentInvalid(
            f"a read filter has {len(every_tag)} tags; at most {TAGS_MAX} (TAGS_MAX), the most one "
            "finding carries: no finding could match more"
        )
    if meta is None:
        return every_tag, {}
    if not isinstance(meta, Mapping):
        raise ArgumentInvalid(f"meta must be an object of metadata keys and values, not {meta!r:.80}")
    if len(meta) > META_FILTER_MAX:
        raise ArgumentInvalid(
            f"a read filter has {len(meta)} metadata pairs; at most {META_FILTER_MAX} (META_FILTER_MAX): "
            "filter on fewer keys"
        )
    try:
        plain = _json_object(meta, "meta", 0)
    except FindingInvalid as exc:
        raise ArgumentInvalid(exc.message.replace("a finding's", "a read filter's", 1)) from None
    return every_tag, {k: meta_value_key(v) for k, v in plain.items()}

"""Findings: validation, canonical form, identity, and the learned file's bytes."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from journal import JournalCorrupt, Record, record_id
from memory._errors import FindingInvalid

STREAM = "memory-learn"
"""The root run's stream that every learn commits to."""

_FIELDS = {"text", "source", "tags"}
_PAYLOAD = frozenset({"id", "scope", "flow", "finding", "learnedMs"})
_FINDING_ID = re.compile(r"[0-9a-f]{32}")
_MAX_MS = 2**63 - 1  # what the history DB can hold


@dataclass(frozen=True)
class Finding:
    """What a flow learned: ``text``, where it came from (``source``), and ``tags``."""

    text: str
    source: str
    tags: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        """The finding as a JSON object (tags as a list)."""
        return {"text": self.text, "source": self.source, "tags": list(self.tags)}


def validate(obj: object, default_source: str) -> Finding:
    """Return the finding ``obj`` describes, with ``source`` defaulting to ``default_source``.

    Raises:
        FindingInvalid: ``obj`` is not a mapping; ``text`` is missing or not a non-empty string;
            ``source`` is not a non-empty string; ``tags`` is not a list of non-empty strings; a
            string holds a lone surrogate (it could not be journaled or stored); or there is any
            other key. The message says which.
    """
    if isinstance(obj, Finding):
        obj = obj.as_json()
    if not isinstance(obj, Mapping):
        raise FindingInvalid(f"a finding must be a JSON object, not {type(obj).__name__}")
    extra = sorted(str(k) for k in obj if k not in _FIELDS)
    if extra:
        raise FindingInvalid(f"a finding has only text, source and tags; unexpected: {', '.join(extra)}")
    text = obj.get("text")
    if not isinstance(text, str) or not text.strip():
        raise FindingInvalid("a finding needs `text`: a non-empty string")
    source = obj.get("source", default_source)
    if not isinstance(source, str) or not source.strip():
        raise FindingInvalid("a finding's `source` must be a non-empty string")
    tags = obj.get("tags", [])
    if not isinstance(tags, list | tuple) or not all(isinstance(t, str) and t.strip() for t in tags):
        raise FindingInvalid("a finding's `tags` must be a list of non-empty strings")
    for name, value in (("text", text), ("source", source), *(("tags", t) for t in tags)):
        if not _is_unicode(value):
            raise FindingInvalid(
                f"a finding's `{name}` holds a lone surrogate (U+D800-U+DFFF), which is not text: "
                "decode it properly, or replace the character"
            )
    return Finding(text=text, source=source, tags=tuple(tags))


def _is_unicode(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (no lone surrogates), so it can be journaled and stored."""
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def canonical(finding: Finding) -> bytes:
    """The finding's canonical bytes (sorted keys, orjson): equal findings encode equal."""
    return orjson.dumps(finding.as_json(), option=orjson.OPT_SORT_KEYS)


def finding_id(scope: str, finding: Finding) -> str:
    """The finding's id in ``scope``: a hash of the scope and the canonical finding (32 hex)."""
    return hashlib.sha256(scope.encode() + b"\0" + canonical(finding)).hexdigest()[:32]


def scope_hash(scope: str) -> str:
    """The directory name of a scope's learned files (16 hex characters)."""
    return hashlib.sha256(scope.encode()).hexdigest()[:16]


def learn_payload(fid: str, scope: str, flow: str, finding: Finding, learned_ms: int) -> dict[str, Any]:
    """The payload a learn commits to the ``memory-learn`` stream."""
    return {"id": fid, "scope": scope, "flow": flow, "finding": finding.as_json(), "learnedMs": learned_ms}


def checked_commit(record: Record, location: str) -> Record:
    """Return ``record`` when it is a ``memory-learn`` commit of exactly the shape ``learn`` writes.

    Every record read back from a journal is untrusted input: before a path or a file is built from
    one, its payload must be ``{id, scope, flow, finding, learnedMs}`` with a valid finding, its id
    32 lowercase hex digits equal to ``finding_id(scope, finding)``, its key that id and its record
    id the one the journal derives from the key. ``location`` names the journal, for the message.

    Raises:
        JournalCorrupt: the record is anything else; names the run, the stream and the line.
    """
    why = _commit_problem(record)
    if why is None:
        return record
    raise JournalCorrupt(
        f"record {record.id!r} (line {record.seq}) of stream {record.stream} of root run {record.run_id} "
        f"in the journal {location} is not a finding's commit: {why}; nothing is built from it. Restore "
        "the journal from a backup; `flows check` lists every such record",
        path=location,
        line=record.seq,
        reason=why,
        run_id=record.run_id,
        stream=record.stream,
    )


def _commit_problem(record: Record) -> str | None:  # noqa: PLR0911 - one return per rule broken
    p = record.payload
    if not isinstance(p, Mapping) or set(p) != _PAYLOAD:
        return "its payload is not exactly {id, scope, flow, finding, learnedMs}"
    fid, scope, flow, ms, finding = p["id"], p["scope"], p["flow"], p["learnedMs"], p["finding"]
    if not isinstance(fid, str) or not _FINDING_ID.fullmatch(fid):
        return "its id is not 32 lowercase hex digits"
    if not isinstance(scope, str) or not isinstance(flow, str):
        return "its scope or flow is not a string"
    if type(ms) is not int or not 0 <= ms <= _MAX_MS:
        return "its learnedMs is not a time in milliseconds"
    if not isinstance(finding, Mapping) or set(finding) != _FIELDS or not isinstance(finding["tags"], list):
        return "its finding is not exactly {text, source, tags}"
    try:
        item = validate(finding, default_source="")
    except FindingInvalid as exc:
        return f"its finding is invalid ({exc})"
    if finding_id(scope, item) != fid:
        return "its id is not the hash of its scope and finding"
    if record.key != fid or record.id != record_id(record.run_id, record.stream, fid):
        return "its key or record id is not the one the finding's id gives"
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

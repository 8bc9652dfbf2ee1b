"""Findings: validation, canonical form, identity, and the learned file's bytes."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from journal import Record
from memory._errors import FindingInvalid

STREAM = "memory-learn"
"""The root run's stream that every learn commits to."""

_FIELDS = {"text", "source", "tags"}


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
            ``source`` is not a non-empty string; ``tags`` is not a list of non-empty strings; or
            there is any other key. The message says which.
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
    return Finding(text=text, source=source, tags=tuple(tags))


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

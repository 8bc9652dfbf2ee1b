"""What learns, forgets, sync, ``why`` and history return: frozen, typed results.

Kept apart from ``memory._results`` (what a recall returns) because making a frozen dataclass costs
about half a millisecond at import: a ``flows recall`` returns none of these, so it makes none of them.
The modules on the recall path import this one inside the functions that build these results.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memory._results import Citation, Recalled


@dataclass(frozen=True)
class Learned:
    """What ``learn`` returns: the finding's id, its citation and the published file."""

    id: str
    citation: Citation
    path: Path
    learned_ms: int
    memory: str | None = None

    @property
    def key(self) -> str:
        """The finding's key: its content id (32 lowercase hex), the name of its learned file."""
        return self.id

    @property
    def memory_id(self) -> str:
        """The memory this finding is a version of: the key of its first version."""
        return self.memory or self.id


@dataclass(frozen=True)
class Explained:
    """An answer of ``why``: a finding, how well it matched, which words matched, and why it matched:
    ``matched_by`` is ``words`` (the question's words), ``meaning`` (its vector's similarity) or
    ``both``; ``similarity`` is the cosine similarity when meaning was asked (None otherwise).
    ``score`` orders answers within one call only: a count of weighted words (keyword), the
    similarity (semantic) or the similarity plus the words' score and their alignment by meaning
    (hybrid: docs/MEMORY.md, "Ranking")."""

    finding: Recalled
    score: float
    matched: tuple[str, ...]
    matched_by: str = "words"
    similarity: float | None = None

    # One shape for recall and why: an answer reads like the finding it holds (``answer.text`` as
    # ``recalled.text``), with ``score`` and ``matched`` besides; ``finding`` stays for old callers.

    @property
    def id(self) -> int:
        """The finding's row id (see ``Recalled``)."""
        return self.finding.id

    @property
    def key(self) -> str:
        """The finding's key."""
        return self.finding.key

    @property
    def memory_id(self) -> str:
        """The id of the memory the finding is a version of."""
        return self.finding.memory_id

    @property
    def text(self) -> str:
        """The finding's text."""
        return self.finding.text

    @property
    def source(self) -> str:
        """Where the finding came from."""
        return self.finding.source

    @property
    def tags(self) -> tuple[str, ...]:
        """The finding's tags."""
        return self.finding.tags

    @property
    def scope(self) -> str:
        """The finding's scope."""
        return self.finding.scope

    @property
    def flow(self) -> str:
        """The flow of the root run that committed the finding."""
        return self.finding.flow

    @property
    def learned_ms(self) -> int:
        """When the finding was committed."""
        return self.finding.learned_ms

    @property
    def citation(self) -> Citation:
        """The journal record the finding came from."""
        return self.finding.citation

    @property
    def metadata(self) -> Mapping[str, Any]:
        """The finding's metadata (read-only)."""
        return self.finding.metadata

    @property
    def expires_ms(self) -> int | None:
        """When the finding stops being returned (None: never)."""
        return self.finding.expires_ms

    @property
    def revision(self) -> int:
        """The finding's revision (see ``Recalled``)."""
        return self.finding.revision

    @property
    def synced(self) -> bool:
        """True when the finding was read from the history DB."""
        return self.finding.synced

    def as_json(self) -> dict[str, Any]:
        """The finding's JSON (``recall``'s shape, the same top-level fields) with ``score`` and
        ``matched`` added."""
        return {
            **self.finding.as_json(),
            "score": self.score,
            "matched": list(self.matched),
            "matchedBy": self.matched_by,
            "similarity": self.similarity,
        }


@dataclass(frozen=True)
class SyncReport:
    """What ``sync`` did: files materialised from the journal, ingested, and dropped."""

    materialized: int
    ingested: int
    dropped: int


@dataclass(frozen=True)
class Forgotten:
    """What ``forget`` returns: the key forgotten, why, the retirement record that says so, and when.

    A finding that was superseded rather than forgotten answers a later ``forget`` with its
    supersede: ``by`` is then the key that replaced it and ``reason`` says so.
    """

    key: str
    reason: str
    citation: Citation
    forgotten_ms: int
    by: str | None = None

    def as_json(self) -> dict[str, Any]:
        """``{"key", "reason", "by", "forgottenMs", "citation"}``."""
        return {
            "key": self.key,
            "reason": self.reason,
            "by": self.by,
            "forgottenMs": self.forgotten_ms,
            "citation": self.citation.as_json(),
        }


@dataclass(frozen=True)
class ForgottenMany:
    """What a forget by filter returns: the keys it retired (sorted), the filter, why, and the one
    record that retired them all (None, with no time, when nothing matched or it was a dry run)."""

    keys: tuple[str, ...]
    reason: str
    filter: Mapping[str, Any] = field(hash=False)
    citation: Citation | None = None
    forgotten_ms: int | None = None
    dry_run: bool = False

    def as_json(self) -> dict[str, Any]:
        """``{"count", "keys", "reason", "filter", "forgottenMs", "citation", "dryRun"}``."""
        return {
            "count": len(self.keys),
            "keys": list(self.keys),
            "reason": self.reason,
            "filter": dict(self.filter),
            "forgottenMs": self.forgotten_ms,
            "citation": None if self.citation is None else self.citation.as_json(),
            "dryRun": self.dry_run,
        }


@dataclass(frozen=True)
class HistoryEvent:
    """One event in a finding's history: ``learned`` (a commit of it), ``lost`` (the commit of an
    update that lost its race: the version it would replace was retired first by another, which its
    ``reason`` names with that retirement's record; the version was never published and never
    lived), ``superseded`` (``by`` the key that replaced it), ``forgotten`` (with its ``reason``),
    ``expired`` (its ``expiresMs`` has passed) or ``erased``; ``at_ms`` is when, ``citation`` the
    journal record that says so (for ``expired``, the commit that carries the expiry). ``memory`` is
    the memory the key is a version of (a history lists every version of one memory). ``flow`` names
    who made the change (the flow of the root run that committed it; None when only a DB row or file
    without it is left), and ``content`` is what a ``learned`` or ``lost`` event committed (the
    finding as JSON: ``text``, ``source``, ``tags``, and ``metadata``, ``expiresMs`` when set; None
    for the other kinds)."""

    kind: str
    key: str
    at_ms: int
    citation: Citation
    reason: str | None = None
    by: str | None = None
    flow: str | None = None
    content: Mapping[str, Any] | None = field(default=None, hash=False)
    memory: str | None = None

    def as_json(self) -> dict[str, Any]:
        """``{"kind", "memoryId", "key", "atMs", "citation", "reason", "by", "flow", "content"}``."""
        return {
            "kind": self.kind,
            "memoryId": self.memory or self.key,
            "key": self.key,
            "atMs": self.at_ms,
            "citation": self.citation.as_json(),
            "reason": self.reason,
            "by": self.by,
            "flow": self.flow,
            "content": None if self.content is None else dict(self.content),
        }


@dataclass(frozen=True)
class HistoryPage:
    """A page of a memory's history (``MemoryStore.history_page``): ``events``, oldest first, from
    ``offset`` (counted from the oldest event); ``total`` is how many events the memory has, and
    ``versions`` how many versions (keys) they are of. ``next_offset`` is the ``offset`` of the
    next page while more events follow this one, else None."""

    key: str
    events: tuple[HistoryEvent, ...]
    offset: int
    total: int
    versions: int

    @property
    def next_offset(self) -> int | None:
        end = self.offset + len(self.events)
        return end if end < self.total else None

    def as_json(self) -> dict[str, Any]:
        """``{"key", "events", "total"}``, and ``"truncated": true`` with ``nextOffset`` while more
        events follow (the shape of the MCP ``history`` tool's result)."""
        out: dict[str, Any] = {
            "key": self.key,
            "events": [e.as_json() for e in self.events],
            "total": self.total,
        }
        if self.next_offset is not None:
            out["truncated"] = True
            out["nextOffset"] = self.next_offset
        return out

"""Reading findings: ``recall`` and ``why`` over the history DB and the unsynced learned files.

The two sources are merged: a finding the DB holds is read from its row, and its disk copy is left
out. ``why`` ranks by how many of the question's words a finding shares, then by where they match
(a tag or the source weighs more than the text), then by age (newest first).
"""

from __future__ import annotations

import heapq
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from memory._db import HistoryDB
from memory._files import DiskIndex, Listing, Terms, newest_first, terms_of, words
from memory._paths import learned_root, scope_dirs
from memory._publisher import Publisher
from memory._results import Explained, Recalled

E = TypeVar("E")

_STOPWORDS = frozenset(
    {
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "did",
        "do",
        "does",
        "for",
        "from",
        "has",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "so",
        "that",
        "the",
        "their",
        "there",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
    }
)


def subject_words(subject: str) -> list[str]:
    """The words of a question worth matching: lower-cased, de-duplicated, without stop words."""
    return [w for w in dict.fromkeys(words(subject)) if w not in _STOPWORDS]


def _key(e: Recalled) -> str:
    return e.key


def _best_first(x: Explained) -> tuple[float, int, int]:
    return (x.score, x.finding.learned_ms, x.finding.id)


def _score_terms(terms: Terms, wanted: set[str]) -> tuple[float, tuple[str, ...]]:
    text, tags, source = terms.text, terms.tags, terms.source
    weight = 0.0
    matched = []
    for w in sorted(wanted):
        s = (1.0 if w in text else 0.0) + (1.5 if w in tags else 0.0) + (1.0 if w in source else 0.0)
        if s:
            matched.append(w)
            weight += s
    # More of the question's words matched ranks first; where they match (tags, source) breaks ties.
    return (len(matched) + weight / 10 if matched else 0.0), tuple(matched)


class Search:
    """``recall`` and ``why`` over ``db`` and the learned files ``publisher`` places.

    Remembers the list of scope folders until ``<db-dir>/flows-memory`` changes, and which finding
    keys the DB holds until the DB changes; the unsynced files' index lives in a ``DiskIndex``.
    """

    def __init__(self, db: HistoryDB, publisher: Publisher, clock: Callable[[], int]) -> None:
        self._db = db
        self._publisher = publisher
        self._clock = clock
        self._disk = DiskIndex()
        self._learned_root = learned_root(publisher.db_path)
        self._scope_listing: tuple[tuple[int, int], list[Path], int] | None = None
        self._held_cache: dict[str, bool] = {}
        self._held_version: tuple[int, int] | None = None
        self._held_mutex = threading.Lock()

    def _listings(self, scope: str | None) -> list[Listing]:
        """The scope's (or every scope's) unsynced listings, each parsed whole so damage fails closed."""
        dirs = [self._publisher.scope_dir(scope)] if scope is not None else self._every_scope_dir()
        return [self._disk.listing(d) for d in dirs]

    def _every_scope_dir(self) -> list[Path]:
        """``scope_dirs``, remembered until ``<db-dir>/flows-memory`` changes (a scope comes or goes).

        A listing taken while the folder is fresh (mtimes are coarse) is not remembered, and a
        scope whose folders exist but not yet its learned-file folder is looked for again each time.
        """
        root = self._learned_root
        try:
            st = os.stat(root)
        except FileNotFoundError:
            return []
        stamp = (st.st_mtime_ns, st.st_ino)
        cached = self._scope_listing
        if cached is not None and cached[0] == stamp and cached[2] == len(cached[1]):
            return cached[1]
        found = scope_dirs(self._publisher.db_path)
        names = len(os.listdir(root))
        if time.time_ns() - st.st_mtime_ns > 50_000_000:
            self._scope_listing = (stamp, found, names)
        return found

    def _held_keys(self, keys: list[str]) -> set[str]:
        """Which of ``keys`` the DB holds, remembered until the DB changes (``HistoryDB.version``)."""
        with self._held_mutex:
            version = self._db.version()
            if version != self._held_version:
                self._held_cache.clear()
                self._held_version = version
            unknown = [k for k in keys if k not in self._held_cache]
            if unknown:
                found = self._db.held(unknown)
                for k in unknown:
                    self._held_cache[k] = k in found
            return {k for k in keys if self._held_cache[k]}

    def _not_held(self, candidates: Iterable[E], want: int | None, key: Callable[[E], str]) -> list[E]:
        """The candidates (in their order) whose key the DB does not hold, stopping at ``want``.

        ``candidates`` is consumed lazily, a chunk per DB query, so a small ``want`` reads little.
        """
        kept: list[E] = []
        if want is not None and want <= 0:
            return kept
        it = iter(candidates)
        step = 500 if want is None else max(16, 2 * want)
        while chunk := list(itertools.islice(it, step)):
            held = self._held_keys([key(e) for e in chunk])
            kept.extend(e for e in chunk if key(e) not in held)
            if want is not None and len(kept) >= want:
                break
        return kept

    def recall(
        self,
        *,
        source: str | None = None,
        tag: str | None = None,
        before_ms: int | None = None,
        limit: int | None = 20,
        scope: str | None = None,
    ) -> list[Recalled]:
        """See ``MemoryStore.recall``."""
        now = self._clock()
        listings = self._listings(scope)
        ordered = [listing.with_tag(tag) if tag is not None else listing.entries for listing in listings]
        newest = ordered[0] if len(ordered) == 1 else heapq.merge(*ordered, key=newest_first, reverse=True)
        disk: Iterable[Recalled] = (
            e
            for e in newest
            if (scope is None or e.scope == scope)
            and (source is None or e.source == source)
            and (tag is None or tag in e.tags)
            and (before_ms is None or e.learned_ms < before_ms)
            and (e.expires_ms is None or e.expires_ms > now)
        )
        rows = self._db.recall(
            scope=scope, source=source, tag=tag, before_ms=before_ms, limit=limit, now_ms=now
        )
        if limit and len(rows) >= limit:  # older entries than the last row cannot make the cut
            last = rows[-1].learned_ms
            disk = itertools.takewhile(lambda e: e.learned_ms >= last, disk)
        kept = self._not_held(disk, limit, key=_key)
        merged = sorted([*rows, *kept], key=lambda e: (e.learned_ms, e.id), reverse=True)
        return merged if limit is None else merged[:limit]

    def get(self, key: str) -> Recalled | None:
        """See ``MemoryStore.get``."""
        now = self._clock()
        found = self._db.get(key)
        if found is None:
            for listing in self._listings(None):
                found = listing.by_key(key)
                if found is not None:
                    break
        if found is None or (found.expires_ms is not None and found.expires_ms <= now):
            return None
        return found

    def scopes(self) -> list[str]:
        """See ``MemoryStore.scopes``."""
        candidates = set(self._db.scopes())
        for listing in self._listings(None):
            candidates.update(e.scope for e in listing.entries)
        return sorted(s for s in candidates if self.recall(scope=s, limit=1))

    def why(self, subject: str, *, limit: int = 10, scope: str | None = None) -> list[Explained]:
        """See ``MemoryStore.why``."""
        asked = subject_words(subject)
        if not asked:
            return []
        now = self._clock()
        wanted = set(asked)
        disk: list[Explained] = []
        for listing in self._listings(scope):
            for e, terms in listing.sharing(wanted, best=max(50, 4 * limit)):
                score, matched = _score_terms(terms, wanted)
                if (
                    score > 0
                    and (scope is None or e.scope == scope)
                    and (e.expires_ms is None or e.expires_ms > now)
                ):
                    disk.append(Explained(finding=e, score=score, matched=matched))
        disk.sort(key=_best_first, reverse=True)
        scored = self._not_held(disk, limit, key=lambda x: x.finding.key)
        for e in self._db.search(asked, scope=scope, limit=max(50, limit * 5), now_ms=now):
            score, matched = _score_terms(terms_of(e), wanted)
            if score > 0:
                scored.append(Explained(finding=e, score=score, matched=matched))
        scored.sort(key=_best_first, reverse=True)
        return scored[:limit]

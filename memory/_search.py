"""Reading findings: ``recall`` and ``why`` over the history DB and the unsynced learned files.

The two sources are merged: a finding the DB holds is read from its row, and its disk copy is left
out. ``why`` ranks by how many of the question's words a finding shares, then by where they match
(a tag or the source weighs more than the text), then by age (newest first).
"""

from __future__ import annotations

import heapq
import itertools
import math
import operator
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from memory._citations import Citations
from memory._db import HistoryDB
from memory._errors import ArgumentInvalid, EmbedderUnavailable, Unreachable
from memory._filecache import CACHE_DIR, FileCache, IndexedListing, LeftMeanwhile, StaleIndex
from memory._files import (
    RACY_S,
    DiskIndex,
    Listing,
    Retired,
    RetiredListing,
    Terms,
    newest_first,
    own_entry,
    read_learned,
    terms_of,
    words,
)
from memory._finding import TEXT_MAX_BYTES, check_filters, is_erased, meta_value_key
from memory._held import MAX_SCOPES, HeldTree, hold
from memory._paths import LEARNED_ROOT, scope_tree
from memory._publisher import Publisher, holds
from memory._results import Recalled
from memory._stem import terms

if TYPE_CHECKING:
    from journal import Record
    from memory._embed import Embedder
    from memory._outcomes import Explained
    from memory._vectors import VectorDiscards, VectorIndex

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
        "us",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
    }
)


QUESTION_WORDS_MAX = 256
"""Distinct words of a question matched at most (its first ones, stop words aside), as the word
alignment reads at most 256 of a text's: each is stemmed, looked up in the DB and compared with every
candidate's terms, so a question of a megabyte (125,000 distinct words) took seconds of CPU per
hundred candidates, and minutes at a large ``limit``."""


def subject_words(subject: str) -> list[str]:
    """The words of a question worth matching: lower-cased, de-duplicated, without stop words; its
    first ``QUESTION_WORDS_MAX``."""
    kept = (w for w in dict.fromkeys(words(subject)) if w not in _STOPWORDS)
    return list(itertools.islice(kept, QUESTION_WORDS_MAX))


def _storable(*values: str | None) -> bool:
    """Whether each of ``values`` could be stored (no lone surrogate); one that could not matches nothing."""
    for v in values:
        if v is not None and not v.isascii():
            try:
                v.encode()
            except UnicodeEncodeError:
                return False
    return True


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _meant(subject: str) -> str:
    """``subject`` as an embedder is given it: without lone surrogates (no Unicode text holds one;
    an undecodable byte of a CLI argument is read as one), which no finding's text holds either, so
    they mean nothing; an embedder that encodes its input (a tokenizer, a request) would fail on them."""
    return subject if subject.isascii() else _LONE_SURROGATE.sub("", subject)


def _key(e: Recalled) -> str:
    return e.key


_by_time_and_id = operator.attrgetter("learned_ms", "id")  # a merge's order, newest first when reversed


def meta_matches(entry: Recalled, wanted: Mapping[str, str]) -> bool:
    """Whether ``entry``'s metadata has every key of ``wanted`` with that comparable value."""
    got = entry.metadata
    return all(k in got and meta_value_key(got[k]) == v for k, v in wanted.items())


def _optional(name: str, value: object, kind: type) -> None:
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
        raise ArgumentInvalid(f"{name} must be {kind.__name__} or None, not {value!r:.80}")


SCOPES_BATCH = 64
"""The fewest scopes a page of ``scopes`` asks the DB for at a time (more when the page is larger)."""


READ_INT_MIN, READ_INT_MAX = -(2**63), 2**63 - 1
"""The range of a read's ``before_ms`` and ``limit`` (``limit`` from 0): a signed 64-bit integer, what
the history DB can compare with, so a read answers the same before and after a sync."""


def check_read(*, scope: object, source: object, tag: object, before_ms: object, limit: object) -> None:
    """Refuse a read whose filters have the wrong types or are out of range (``ArgumentInvalid``
    naming the filter and its bound); the one check of the filters every read, forget by filter and
    erase by filter takes."""
    if (
        (scope is None or type(scope) is str)
        and (source is None or type(source) is str)
        and (tag is None or type(tag) is str)
        and (before_ms is None or (type(before_ms) is int and READ_INT_MIN <= before_ms <= READ_INT_MAX))
        and (limit is None or (type(limit) is int and 0 <= limit <= READ_INT_MAX))
    ):
        return  # the usual call, checked without a function call per filter
    for name, value in (("scope", scope), ("source", source), ("tag", tag)):
        _optional(name, value, str)
    _optional("before_ms", before_ms, int)
    _optional("limit", limit, int)
    if isinstance(limit, int) and limit < 0:
        raise ArgumentInvalid(f"limit must be 0 or more (None for no limit), not {limit}")
    if isinstance(limit, int) and limit > READ_INT_MAX:
        raise ArgumentInvalid(f"limit must be at most 2**63 - 1 (None for no limit), not {_big(limit)}")
    if isinstance(before_ms, int) and not READ_INT_MIN <= before_ms <= READ_INT_MAX:
        raise ArgumentInvalid(
            f"before_ms must be a signed 64-bit integer (-2**63 to 2**63 - 1 ms), not {_big(before_ms)}"
        )


def _big(value: int) -> str:
    """An out-of-range integer for a message: itself, or its size when it is too long to show."""
    return str(value) if abs(value) < 10**30 else f"an integer of {value.bit_length()} bits"


def _best_first(x: Explained) -> tuple[float, int, int]:
    return (x.score, x.finding.learned_ms, x.finding.id)


WHY_LIMIT_MAX = 2**55
"""The most answers a ``why`` looks for (a larger ``limit`` asks for as many: no store holds that many
findings). A search looks further than its limit (a hybrid's words up to 25 times it, for candidates
that may be retired meanwhile), which must stay a count SQLite and ``islice`` take: a ``limit`` near
2**63, which ``check_read`` allows, failed with a bare ``OverflowError`` or ``ValueError``."""

WHY_MODES = ("hybrid", "keyword", "semantic")
"""How ``why`` matches: by the question's words, by meaning (vectors), or both fused."""

WORDS_WEIGHT = 0.1
"""How much the words add to the meaning in ``hybrid``: a finding's score is its similarity plus
WORDS_WEIGHT times its keyword score over the best keyword score of the question (so at most 0.1).
Measured on the retrieval benchmark, this blend put the right finding in the top 5 for 81% of the
questions where reciprocal-rank fusion (k=60) reached 72-74% (on the held-out set, 89% against 83%): the
words only break near ties. The embedder's ``word_alignment`` adds the words' alignment by meaning
(``memory._align``) on top."""


def subject_terms(subject: str) -> dict[str, frozenset[str]]:
    """The words of a question worth matching (``subject_words``), in order, each with its index terms."""
    return {w: frozenset(terms(w)) for w in sorted(subject_words(subject))}


def _score_terms(found: Terms, wanted: Mapping[str, frozenset[str]]) -> tuple[float, tuple[str, ...]]:
    text, tags, source = found.text, found.tags, found.source
    weight = 0.0
    matched = []
    for w, ts in wanted.items():  # in word order (``subject_terms``)
        s = (
            (0.0 if text.isdisjoint(ts) else 1.0)
            + (0.0 if tags.isdisjoint(ts) else 1.5)
            + (0.0 if source.isdisjoint(ts) else 1.0)
        )
        if s:
            matched.append(w)
            weight += s
    # More of the question's words matched ranks first; where they match (tags, source) breaks ties.
    return (len(matched) + weight / 10 if matched else 0.0), tuple(matched)


def _keeps(
    *,
    scope: str | None,
    source: str | None,
    before_ms: int | None,
    now: int,
    retired: Mapping[str, Retired],
    hides: Callable[[Mapping[str, Retired], str], bool],
    every_tag: Sequence[str],
    wanted_meta: Mapping[str, str],
) -> Callable[[Recalled], bool]:
    """Whether an unsynced entry is live and passes a read's filters (``recall``'s own walk keeps
    these tests inline, on its hot path); ``hides`` checks a retirement before it counts."""

    def keep(e: Recalled) -> bool:
        return (
            (scope is None or e.scope == scope)
            and (e.expires_ms is None or e.expires_ms > now)
            and (e.key not in retired or not hides(retired, e.key))
            and (source is None or e.source == source)
            and (before_ms is None or e.learned_ms < before_ms)
            and (not every_tag or all(t in e.tags for t in every_tag))
            and (not wanted_meta or meta_matches(e, wanted_meta))
        )

    return keep


def _no_shared() -> Mapping[str, Retired]:
    return {}


def _published_none(retired: Retired) -> bool:
    return False


def _no_entry(retired: Retired) -> Recalled | None:
    return None


class _Union(Mapping[str, Retired]):
    """This store's retired files and the journal's other retirements, as one mapping by key
    (this store's file first), without copying either."""

    def __init__(self, local: Mapping[str, Retired], shared: Mapping[str, Retired]) -> None:
        self._local = local
        self._shared = shared

    def __getitem__(self, key: str) -> Retired:
        found = self._local.get(key)
        return self._shared[key] if found is None else found

    def __contains__(self, key: object) -> bool:
        return key in self._local or key in self._shared

    def __iter__(self) -> Iterator[str]:
        yield from self._local
        yield from (k for k in self._shared if k not in self._local)

    def __len__(self) -> int:
        return len(self._local) + sum(1 for k in self._shared if k not in self._local)


class Search:
    """``recall`` and ``why`` over ``db`` and the learned files ``publisher`` places.

    Remembers the list of scope folders until ``<db-dir>/flows-memory`` changes, and which finding
    keys the DB holds until the DB changes; the unsynced files' index lives in a ``DiskIndex``.
    """

    def __init__(
        self,
        db: HistoryDB,
        publisher: Publisher,
        clock: Callable[[], int],
        citations: Citations,
        *,
        file_index: bool = True,
        embedder: Embedder | None = None,
        shared: Callable[[], Mapping[str, Retired]] | None = None,
        read_only: bool = False,
    ) -> None:
        self._db = db
        self._read_only = read_only
        self._publisher = publisher
        self._clock = clock
        base = publisher.db_path.parent
        self._learned_root = base / LEARNED_ROOT  # ``learned_root``
        files = FileCache(base / CACHE_DIR, self._learned_root) if file_index else None  # ``cache_dir``
        self._disk = DiskIndex(base, files)
        self._citations = citations
        citations.use_hints(files)
        self._checked_retired: dict[str, Retired] = {}  # what ``_hides`` checked, by key
        self._reading = threading.local()  # per thread: what its read listed, and where (``_sources``)
        # publishes the version that superseded a retired one when this host lacks it (an update
        # killed before its rename; the store's ``Syncer.publish_successor``; never when read-only)
        self.publish_successor: Callable[[Retired], bool] = _published_none
        # on a journal hosts share, where a read writes nothing: the entry of the version that
        # superseded a retired one, read from its commit (the store's ``successor_entry``)
        self.successor_entry: Callable[[Retired], Recalled | None] = _no_entry
        # versions another host committed that this host has neither as a file nor as a row yet,
        # served from their commits until it has (``_serve_successor``), by key
        self._from_commits: dict[str, Recalled] = {}
        # a superseded key -> the last successor seen of it, the retirement that names that one, and
        # whether this host had that one as a file or a row (``_serve_successor``)
        self._chain_ends: dict[str, tuple[str, Retired, bool]] = {}
        self._scope_listing: tuple[tuple[int, int], list[Path], list[Path], int] | None = None
        self._held: HeldTree | None = None  # the folders of a read of every scope, held open
        self._hold_after_ns = 0  # no try to hold them before then
        self._scope_reused = False  # whether the last read found the scope folders' list remembered
        self._held_cache: dict[str, bool] = {}
        self._live_cache: dict[str, bool] = {}
        self._row_terms: dict[str, Terms] = {}
        self._held_version: tuple[int, int] | None = None
        self._held_mutex = threading.Lock()
        self._embedder = embedder
        self._vectors: VectorIndex | None = None
        self._discards: VectorDiscards | None = None  # the vectors of retired keys, when none is open
        self._shared = shared or _no_shared
        self._latest: dict[str, tuple[str, str]] = {}  # memory id -> (key, scope) of its last version
        self._version_of: dict[str, str] = {}  # a noted version's key -> its memory id
        # memory id -> the commit of its last version, when this process's update made it: its file
        # is read as that commit's entry while it holds exactly that commit's bytes (no parse)
        self._own: dict[str, Record] = {}
        self._folders: dict[str, tuple[str, str]] = {}  # scope -> its learned and retired folders

    def _sources(
        self, scope: str | None, *, whole: bool = False
    ) -> tuple[list[Listing | IndexedListing], Mapping[str, Retired]]:
        """The scope's (or every scope's) unsynced listings, and its retired files by key (what no
        read may return), from one look at ``<db-dir>/flows-memory``. A listing comes from the
        files' index while it lists the folder as it is (the files of the entries a read returns
        checked before it returns them), unless ``whole`` asks for every entry parsed."""
        listings, retired, dirs = self._sources_now(scope, whole=whole)
        if self._from_commits and isinstance(retired, _Union):
            listings = self._with_commits(scope, listings, retired)
        # for ``_hides``: what this read listed (and where: None for held folders, unchanged since
        # they were listed and read as one look), and whether those folders are as it listed them
        # (found once, when first asked: ``_quiet``)
        reading = self._reading
        reading.listings, reading.dirs, reading.quiet = listings, dirs, None
        return listings, retired

    def _with_commits(
        self, scope: str | None, listings: list[Listing | IndexedListing], retired: Mapping[str, Retired]
    ) -> list[Listing | IndexedListing]:
        """``listings`` and one more: of the versions served from their commits
        (``_serve_successor``) of ``scope`` (or every scope) that are still live and that this host
        still lacks; those it has now (a catch up or a sync published them) or that are retired
        now are let go."""
        served: list[Recalled] = []
        for key, entry in list(self._from_commits.items()):
            if key in retired or any(listing.by_key(key) is not None for listing in listings):
                self._from_commits.pop(key, None)
            elif scope is None or entry.scope == scope:
                served.append(entry)
        if not served:
            return listings
        held = self._held_keys([e.key for e in served])
        for key in held:
            self._from_commits.pop(key, None)
        return [*listings, Listing(0, 0, tuple(e for e in served if e.key not in held))]

    def _sources_now(
        self, scope: str | None, *, whole: bool
    ) -> tuple[list[Listing | IndexedListing], Mapping[str, Retired], list[Path] | None]:
        shared = self._shared()  # other hosts' forgets, on a journal they share (see SharedRetirements)
        if scope is not None:
            directory = self._publisher.scope_dir(scope)
            listing = self._disk.listing(directory, whole=whole)
            mine = self._disk.retired(self._publisher.retired_dir(scope)).by_key
            return [listing], _Union(mine, shared) if shared else mine, [directory]
        held = None if whole else self._held
        if held is not None:
            if held.unchanged():  # every folder as it was: what was read there still holds
                return held.listings, _Union(held.retired, shared) if shared else held.retired, None
            self._held = None
        learned, retired_dirs, stats = self._scope_tree()
        if stats is None:
            listings = [self._disk.listing(d, whole=whole) for d in learned]
        else:  # each folder's lstat from the scan that found no link on its way (``scope_tree``)
            listings = [
                self._disk.listing(d, whole=whole, scanned=st) for d, st in zip(learned, stats, strict=True)
            ]
        retired_listings = [self._disk.retired(d) for d in retired_dirs]
        parts = [r.by_key for r in retired_listings if r.by_key]
        local: Mapping[str, Retired]
        if len(parts) == 1:
            local = parts[0]
        else:
            local = {}
            for by_key in parts:
                local.update(by_key)
        if not whole and learned:
            self._hold(learned, retired_dirs, listings, retired_listings, local)
        return listings, _Union(local, shared) if shared else local, learned

    def _hold(
        self,
        learned: list[Path],
        retired_dirs: list[Path],
        listings: list[Listing | IndexedListing],
        retired_listings: list[RetiredListing],
        local: Mapping[str, Retired],
    ) -> None:
        """Hold the folders of a read of every scope open (``memory._held``) when what it found
        there could be remembered: the scope folders' list, each listing and each retired folder
        older than ``RACY_S``. Later reads then check them with one ``fstat`` each."""
        cached = self._scope_listing
        if (
            not self._scope_reused  # a read that follows another, not a process's one read
            or cached is None
            or cached[1] is not learned
            or cached[3] != len(learned)
            or len(learned) > MAX_SCOPES
        ):
            return
        now = time.time_ns()
        settled = now - int(RACY_S * 1e9)
        scopes: list[tuple[str, tuple[int, int], tuple[int, int] | None]] = []
        for directory, listing, retired, retired_listing in zip(
            learned, listings, retired_dirs, retired_listings, strict=True
        ):
            folder = directory.parent.parent
            if (
                listing.mtime_ns > settled
                or retired_listing.mtime_ns > settled
                or folder.parent != self._learned_root
                or retired != folder / ".trajectories" / "retired"
                or directory != folder / ".trajectories" / "compacted"
            ):
                return
            there = retired_listing.ino != 0  # a retired folder that was not there has no inode
            stamp = (retired_listing.mtime_ns, retired_listing.ino) if there else None
            scopes.append((folder.name, (listing.mtime_ns, listing.ino), stamp))
        if now < self._hold_after_ns:
            return  # a try failed just now (a folder changed too recently): not on every read
        root = (cached[0][0], cached[0][1])
        self._held = hold(self._publisher.db_path.parent, root, scopes, listings, local)
        if self._held is None:
            self._hold_after_ns = now + int(RACY_S * 1e9)

    def _terms_of_row(self, row: Recalled) -> Terms:
        """``terms_of`` a DB row, remembered by key (a key's text, tags and source never change)."""
        found = self._row_terms.get(row.key)
        if found is None:
            if len(self._row_terms) > 100_000:
                self._row_terms.clear()
            found = self._row_terms[row.key] = terms_of(row)
        return found

    def _retired(self, scope: str | None) -> Mapping[str, Retired]:
        """The retired files of the scope (or of every scope), by key: what no read may return."""
        return self._sources(scope)[1]

    def _live_held(self, keys: Iterable[str]) -> set[str]:
        """Which of ``keys`` the DB holds as rows not marked retired (remembered like ``_held_keys``)."""
        with self._held_mutex:
            self._check_version()
            unknown = [k for k in keys if k not in self._live_cache]
            if unknown:
                found = self._db.live_held(unknown)
                for k in unknown:
                    self._live_cache[k] = k in found
            return {k for k in keys if self._live_cache[k]}

    def _check_version(self) -> tuple[int, int]:
        version = self._db.version()
        if version != self._held_version:
            self._held_cache.clear()
            self._live_cache.clear()
            self._held_version = version
        return version

    def _scope_tree(self) -> tuple[list[Path], list[Path], list[os.stat_result] | None]:
        """Every scope's learned-file folder that exists, and every scope folder's retired-file
        folder (there or not), remembered until ``<db-dir>/flows-memory`` changes: one stat a read;
        and, when they were looked at just now (not remembered), each learned-file folder's
        ``lstat`` from that scan (``scope_tree``), else None.

        A listing taken while the folder is fresh (mtimes are coarse) is not remembered, and a
        scope whose folders exist but not yet its learned-file folder is looked for again each time.
        """
        root = self._learned_root
        try:
            st = os.stat(root, follow_symlinks=False)
        except FileNotFoundError:
            return [], [], None
        except OSError as exc:
            raise Unreachable(f"cannot read {root}: {exc.strerror or exc}", path=root) from exc
        stamp = (st.st_mtime_ns, st.st_ino)
        cached = self._scope_listing
        if cached is not None and cached[0] == stamp and cached[3] == len(cached[1]):
            self._scope_reused = True
            return cached[1], cached[2], None
        self._scope_reused = False
        found, retired, names, stats = scope_tree(self._publisher.db_path, st)
        if time.time_ns() - st.st_mtime_ns > 50_000_000:
            self._scope_listing = (stamp, found, retired, names)
        return found, retired, stats

    def _held_keys(self, keys: list[str]) -> set[str]:
        """Which of ``keys`` the DB holds, remembered until the DB changes (``HistoryDB.version``)."""
        with self._held_mutex:
            no_db = self._check_version()[0] == -1
            unknown = [k for k in keys if k not in self._held_cache]
            if unknown:
                # a version of (-1, …) is a look that found no DB: it holds none of them, and a DB
                # made since is a new version, which clears what is remembered here
                found = () if no_db else self._db.held(unknown)
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
        tags: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
    ) -> list[Recalled]:
        """See ``MemoryStore.recall``."""
        check_read(scope=scope, source=source, tag=tag, before_ms=before_ms, limit=limit)
        reading = self._reading
        while True:  # ``_again_if_stale``, without a closure per read
            served = getattr(reading, "served", 0)
            try:
                found = self._recall(
                    source=source,
                    tag=tag,
                    before_ms=before_ms,
                    limit=limit,
                    scope=scope,
                    tags=tags,
                    meta=meta,
                )
            except StaleIndex as exc:
                self._stale(exc)
                continue
            if getattr(reading, "served", 0) == served:
                return found

    def _again_if_stale(self, read: Callable[[], E]) -> E:
        """``read()``, made again while a files' index turns out to list a file that changed or
        went away (that folder is then read from every file, which sees the change or fails on
        the damage); a folder distrusted once is never read from its index again. Made again too,
        once, when it met versions another host wrote that this host lacks (``_serve_successor``):
        the read again serves them, all gathered by the first."""
        reading = self._reading
        while True:
            served = getattr(reading, "served", 0)
            try:
                found = read()
            except StaleIndex as exc:
                self._stale(exc)
                continue
            if getattr(reading, "served", 0) == served:
                return found

    def _stale(self, exc: StaleIndex) -> None:
        """What a read that found a files' index stale does before it reads again: let go of the
        held folders and distrust that folder's index (not for a finding that left while the read
        ran, ``LeftMeanwhile``: the index was right)."""
        self._held = None
        if not isinstance(exc, LeftMeanwhile):
            self._disk.distrust(exc.directory)

    def _recall(
        self,
        *,
        source: str | None,
        tag: str | None,
        before_ms: int | None,
        limit: int | None,
        scope: str | None,
        tags: Sequence[str],
        meta: Mapping[str, Any] | None,
    ) -> list[Recalled]:
        if meta is None and tags == ():  # the usual read: at most one tag (the types are checked)
            every_tag: tuple[str, ...] = () if tag is None else (tag,)
            wanted_meta: dict[str, str] = {}
        else:
            every_tag, wanted_meta = check_filters(tags, meta)
            if tag is not None:
                every_tag = (tag, *(t for t in every_tag if t != tag)) if every_tag else (tag,)
        if not _storable(source, scope, *every_tag):
            return []  # a filter no stored finding can equal
        now = self._clock()
        # Files first, then the DB in one snapshot: sync commits rows before it drops their files,
        # so a file gone from the listing is a row in the snapshot, and a file still listed whose
        # row the snapshot also holds is read once, from the row.
        listings, retired = self._sources(scope)
        first = every_tag[0] if every_tag else None
        ordered = [listing.with_tag(first) if first is not None else listing.entries for listing in listings]
        newest = ordered[0] if len(ordered) == 1 else heapq.merge(*ordered, key=newest_first, reverse=True)
        rest = every_tag[1:]  # the listing's tag index already holds the first
        disk: Iterable[Recalled] = (
            e
            for e in newest
            if (scope is None or e.scope == scope)
            and (source is None or e.source == source)
            and (before_ms is None or e.learned_ms < before_ms)
            and (e.expires_ms is None or e.expires_ms > now)
            and (e.key not in retired or not self._hides(retired, e.key))
            and (not rest or all(t in e.tags for t in rest))
            and (not wanted_meta or meta_matches(e, wanted_meta))
        )
        with self._db.snapshot():
            # Rows a retired file names that the DB has not marked yet (no sync since) are left out
            # here: ask for that many more, so the limit still holds after they go.
            extra = len(self._live_held(retired)) if retired and limit is not None else 0
            rows = self._db.recall(
                scope=scope,
                source=source,
                tags=every_tag,
                meta=wanted_meta,
                before_ms=before_ms,
                limit=None if limit is None else limit + extra,
                now_ms=now,
            )
            if retired:
                rows = [r for r in rows if r.key not in retired or not self._hides(retired, r.key)]
            if limit is not None:
                rows = rows[:limit]
            if limit and len(rows) >= limit:  # older entries than the last row cannot make the cut
                last = rows[-1].learned_ms
                disk = itertools.takewhile(lambda e: e.learned_ms >= last, disk)
            kept = self._not_held(disk, limit, key=_key)
        merged = sorted([*rows, *kept], key=_by_time_and_id, reverse=True) if kept else rows
        found = merged if limit is None else merged[:limit]
        unsynced = [e for e in found if e.id < 0] if kept else ()
        if unsynced:
            for listing in listings:
                listing.check(unsynced)  # the files of what the read returns, unchanged since indexed
            self._served(unsynced)
        return found

    def get(self, key: str) -> Recalled | None:
        """See ``MemoryStore.get``."""
        return self._again_if_stale(lambda: self._get(key))

    def _get(self, key: str) -> Recalled | None:
        now = self._clock()
        listings, retired = self._sources(None)  # files first, then the DB (see recall)
        if self._hides(retired, key):
            return None
        with self._db.snapshot():
            found = self._db.get(key, now)
            if found is not None or self._held_keys([key]):
                return found  # the DB holds it: its row decides (None when retired or expired)
        for listing in listings:
            found = listing.by_key(key)
            if found is not None:
                break
        if found is None or (found.expires_ms is not None and found.expires_ms <= now):
            return None
        listing.check([found])
        self._served([found])
        return found

    def current(self, memory_id: str) -> Recalled | None:
        """The newest live version of the memory ``memory_id`` (from the DB, else an unsynced file),
        or None when it has none."""
        fast = self._latest_version(memory_id)
        if fast is not None:
            return fast
        found = self._again_if_stale(lambda: self._current(memory_id))
        if found is not None:
            self.noted_version(found)
        return found

    def noted_version(self, entry: Recalled | tuple[str, str, str]) -> None:
        """Remember the newest version of a memory this process wrote or read: (memory id, key,
        scope), so the next ``current`` of it looks at that one file first."""
        memory, key, scope = (
            (entry.memory_id, entry.key, entry.scope) if isinstance(entry, Recalled) else entry
        )
        if len(self._latest) > 10_000:
            self._latest.clear()
            self._version_of.clear()
            self._own.clear()
        self._latest[memory] = (key, scope)
        self._version_of[key] = memory

    def noted_update(self, record: Record) -> None:
        """Remember ``record``, the commit of a new version an update of this process just made and
        published, so the next look at its memory's live version compares the file's bytes with the
        commit's rendering instead of parsing and checking them (``_latest_version``)."""
        p = record.payload
        memory = p.get("memory")
        if isinstance(memory, str):
            self._own[memory] = record

    def noted_scope(self, key: str) -> str | None:
        """The scope of the version of the memory ``key`` names that this process last noted (a
        hint, read nowhere: an update takes that scope's turn, then reads the version in it)."""
        memory = key if key in self._latest else self._version_of.get(key)
        noted = None if memory is None else self._latest.get(memory)
        return None if noted is None else noted[1]

    def noted_current(self, key: str) -> Recalled | None:
        """The live version of the memory ``key`` names (as its memory id, or as the key of a version
        this process noted), when the version this process last noted of it is still live
        (``_latest_version``); None otherwise (then only a full ``current`` can tell)."""
        memory = key if key in self._latest else self._version_of.get(key)
        return None if memory is None else self._latest_version(memory)

    def _latest_version(self, memory_id: str) -> Recalled | None:
        """The version of ``memory_id`` this process last wrote or read, when it is still an unsynced,
        live, unretired learned file of that memory (its file read and checked, and its citation):
        two stats and one small read, where a full ``current`` lists the folders. None otherwise."""
        noted = self._latest.get(memory_id)
        if noted is None:
            return None
        key, scope = noted
        folders = self._folders.get(scope)
        if folders is None:
            pub = self._publisher
            if len(self._folders) > 10_000:
                self._folders.clear()
            folders = self._folders[scope] = (str(pub.scope_dir(scope)), str(pub.retired_dir(scope)))
        path = f"{folders[0]}/{key}.json"
        if os.path.lexists(f"{folders[1]}/{key}.json") or key in self._shared():
            return None
        own = self._own.get(memory_id)
        data, mine = own_entry(own, path) if own is not None and own.payload["id"] == key else (b"", None)
        if mine is not None and holds(path, data):
            entry = mine  # the bytes of this process's own commit: journaled, and parsed to ``mine``
        else:
            try:
                entry = read_learned(Path(path))
            except Unreachable:  # gone (or damaged): only a full ``current`` can tell
                return None
        now = self._clock()
        if entry.memory_id != memory_id or (entry.expires_ms is not None and entry.expires_ms <= now):
            return None
        # synced (the DB decides: the full walk), or erased since it was read (only a full
        # ``current`` can tell)
        if self._held_keys([key]) or (entry is not mine and not self._still_served(entry)):
            return None
        return entry

    def _still_served(self, entry: Recalled) -> bool:
        """``_served([entry])``, False when it left meanwhile (``LeftMeanwhile``)."""
        try:
            self._served([entry])
        except LeftMeanwhile:
            return False
        return True

    def _current(self, memory_id: str) -> Recalled | None:
        now = self._clock()
        listings, retired = self._sources(None)  # files first, then the DB (see recall)
        disk = [
            e
            for listing in listings
            for e in listing.entries
            if (e.memory or e.key) == memory_id  # ``memory_id``, inline: every unsynced file is looked at
            and (e.key not in retired or not self._hides(retired, e.key))
            and (e.expires_ms is None or e.expires_ms > now)
        ]
        with self._db.snapshot():
            rows = [
                r
                for r in self._db.live_versions(memory_id, now)
                if r.key not in retired or not self._hides(retired, r.key)
            ]
            kept = self._not_held(disk, None, key=_key)
        found = sorted([*rows, *kept], key=lambda e: (e.learned_ms, e.id), reverse=True)
        if not found:
            return None
        best = found[0]
        if best.id < 0:
            for listing in listings:
                listing.check([best])
            self._served([best])
        return best

    def scopes(self, after: str | None = None, limit: int | None = None) -> list[str]:
        """See ``MemoryStore.scopes``."""
        _optional("after", after, str)
        check_read(scope=None, source=None, tag=None, before_ms=None, limit=limit)
        if limit == 0:
            return []
        found: list[str] = []
        for _ in range(3):  # (more is another host moving memories as fast as this reads)
            on_disk: set[str] = set()
            for listing in self._again_if_stale(lambda: self._sources(None)[0]):
                on_disk.update(listing.scopes())  # with the versions served from commits
            found = []
            for scope in self._scope_candidates(after, on_disk, limit):
                if self.recall(scope=scope, limit=1):  # a live finding, not only retired or expired ones
                    found.append(scope)
                    if limit is not None and len(found) == limit:
                        break
            # a version another host moved to a scope this look did not list, met by the recalls
            # (``_serve_successor``): looked at again with it, or the memory would be in no scope
            if {e.scope for e in list(self._from_commits.values())} <= on_disk:
                break
        return found

    def _scope_candidates(self, after: str | None, on_disk: set[str], limit: int | None) -> Iterator[str]:
        """Each scope that may hold a live finding (the DB's with a row not retired, and those with an
        unsynced file), sorted after ``after``, each once: the DB's read a batch at a time, so a
        page of scopes asks the DB for about a page, not for every scope."""
        disk = sorted(s for s in on_disk if after is None or s > after)
        batch = None if limit is None else max(limit + 1, SCOPES_BATCH)
        i, last = 0, after
        now = self._clock()
        while True:
            rows = self._db.scopes(after=last, limit=batch, now_ms=now)
            for scope in rows:
                while i < len(disk) and disk[i] < scope:
                    yield disk[i]
                    i += 1
                if i < len(disk) and disk[i] == scope:
                    i += 1
                yield scope
            if batch is None or len(rows) < batch:
                break
            last = rows[-1]
        yield from disk[i:]

    def why(
        self,
        subject: str,
        *,
        limit: int | None = 10,
        scope: str | None = None,
        tags: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
        source: str | None = None,
        before_ms: int | None = None,
        mode: str | None = None,
    ) -> list[Explained]:
        """See ``MemoryStore.why``."""
        if not isinstance(subject, str):
            raise ArgumentInvalid(f"why takes a subject string, not {subject!r:.80}")
        size = len(subject)
        if size > TEXT_MAX_BYTES // 4:  # it may be longer than any finding's text: count its bytes
            size = len(subject.encode("utf-8", "surrogatepass"))
        if size > TEXT_MAX_BYTES:
            raise ArgumentInvalid(
                f"why's subject is {size} bytes; at most "
                f"{TEXT_MAX_BYTES} (TEXT_MAX_BYTES, a finding's longest text): ask with fewer words"
            )
        check_read(scope=scope, source=source, tag=None, before_ms=before_ms, limit=limit)
        # as many answers: no store holds more findings (None: every match, as ``recall``'s None)
        limit = WHY_LIMIT_MAX if limit is None else min(limit, WHY_LIMIT_MAX)
        mode = self._mode(mode)
        every_tag, wanted_meta = check_filters(tags, meta)
        if not _storable(scope, source, *every_tag):
            return []
        wanted = subject_terms(subject)
        if mode == "keyword":
            if not wanted:
                return []
            return self._again_if_stale(
                lambda: self._by_words(
                    wanted,
                    limit,
                    scope=scope,
                    every_tag=every_tag,
                    wanted_meta=wanted_meta,
                    source=source,
                    before_ms=before_ms,
                )
            )[:limit]
        meant = _meant(subject)
        if not meant.strip() or limit == 0:
            return []
        return self._again_if_stale(
            lambda: self._by_meaning(
                meant,
                wanted,
                limit,
                mode=mode,
                scope=scope,
                every_tag=every_tag,
                wanted_meta=wanted_meta,
                source=source,
                before_ms=before_ms,
            )
        )

    def _by_meaning(
        self,
        subject: str,
        wanted: Mapping[str, frozenset[str]],
        limit: int,
        *,
        mode: str,
        scope: str | None,
        every_tag: Sequence[str],
        wanted_meta: Mapping[str, str],
        source: str | None,
        before_ms: int | None,
    ) -> list[Explained]:
        """``why`` by meaning (``semantic``) or by meaning and words (``hybrid``): the live findings
        the filters keep are listed by key, ranked by their vectors' similarity, and only the best
        are read in full (and, unsynced, checked against their files and records)."""
        from memory._embed import similarity_floor  # not at import: only meaning reads use it
        from memory._outcomes import Explained  # not at import: a recall makes none of them
        from memory._vectors import top_indexes

        pool = max(50, 5 * limit)
        index = self._vector_index()
        floor = similarity_floor(index.embedder)
        now = self._clock()
        keys, unsynced, listings = self._candidates(
            scope=scope,
            source=source,
            before_ms=before_ms,
            every_tag=every_tag,
            wanted_meta=wanted_meta,
            now=now,
        )
        asked = index.question_vector(subject)
        sims = index.similarities(asked, keys, self._texts_of(unsynced), self._held_of(unsynced))
        top = pool if mode == "hybrid" else 2 * limit + 8  # more than asked: one may be retired meanwhile
        near = {keys[i]: float(sims[i]) for i in top_indexes(sims, top) if sims[i] > floor}
        by_words: dict[str, Explained] = {}
        if mode == "hybrid" and wanted:
            found = self._by_words(
                wanted,
                pool,
                scope=scope,
                every_tag=every_tag,
                wanted_meta=wanted_meta,
                source=source,
                before_ms=before_ms,
            )
            by_words = {x.finding.key: x for x in found[:pool]}
        sim_of = dict(near)
        if by_words:
            at = {k: i for i, k in enumerate(keys)}
            # a finding found by its words whose vector has no direction (-inf) is 0 similar
            found_sims = ((k, float(sims[at[k]])) for k in by_words if k in at and k not in near)
            sim_of.update((k, s if math.isfinite(s) else 0.0) for k, s in found_sims)
        # retired since the candidates were listed (embedding may take seconds): the retired files
        # are looked at again before the rows are (a sync marks a row, then drops its file)
        _, retired = self._sources(scope)
        ranked = [k for k in near if k not in by_words and (k not in retired or not self._hides(retired, k))]
        findings = self._resolve(ranked, unsynced, now)
        findings.update({k: x.finding for k, x in by_words.items()})
        best = max((x.score for x in by_words.values()), default=0.0) or 1.0
        aligned = self._aligned(subject, asked, findings) if mode == "hybrid" else {}
        out = []
        for key, e in findings.items():
            w = by_words.get(key)
            sim = sim_of.get(key, 0.0)
            if mode == "semantic":
                matched = _score_terms(self._terms(e), wanted)[1] if wanted else ()
                out.append(
                    Explained(finding=e, score=sim, matched=matched, matched_by="meaning", similarity=sim)
                )
                continue
            out.append(
                Explained(
                    finding=e,
                    score=sim
                    + (WORDS_WEIGHT * w.score / best if w is not None else 0.0)
                    + aligned.get(key, 0.0),
                    matched=w.matched if w is not None else (),
                    matched_by="meaning" if w is None else "both" if key in near else "words",
                    similarity=sim,
                )
            )
        out.sort(key=_best_first, reverse=True)
        checked = set() if aligned else set(by_words)  # what the words' read checked, before any embedding
        if aligned:  # its words were embedded meanwhile, which may take seconds: look again
            out = self._still_live(out, scope, now)
        answers = out[:limit]
        fresh = [x.finding for x in answers if x.finding.id < 0 and x.finding.key not in checked]
        if fresh:
            for listing in listings:
                listing.check(fresh)  # the files of what the read returns, unchanged since indexed
            self._served(fresh)
        return answers

    def _still_live(self, answers: list[Explained], scope: str | None, now: int) -> list[Explained]:
        """The ``answers`` still live: none retired since (its retired file looked at again), an
        unsynced one's file still there or its row synced since, a row read again and not retired
        or expired. A hybrid ``why`` embeds the answers' words after reading them; a forget, an
        update or an erase that returned meanwhile was still answered before."""
        _, retired = self._sources(scope)
        keys = [x.finding.key for x in answers]
        kept = {k for k in keys if k not in retired or not self._hides(retired, k)}
        files = {
            x.finding.key
            for x in answers
            if x.finding.id < 0 and x.finding.key in kept and self._still_there(x.finding)
        }
        rows = {r.key for r in self._db.live_rows([k for k in keys if k in kept and k not in files], now)}
        return [x for x in answers if x.finding.key in files or x.finding.key in rows]

    def _aligned(self, subject: str, asked: Any, findings: Mapping[str, Recalled]) -> dict[str, float]:
        """Each finding's word alignment with ``subject`` (``memory._align``; ``asked``: the
        question's vector, which weighs its words) times the embedder's ``word_alignment``; nothing
        when that is 0 (no word is embedded)."""
        from memory._align import alignments, content_words
        from memory._embed import alignment_weight
        from memory._vectors import embed_text

        assert self._embedder is not None
        weight = alignment_weight(self._embedder)
        if not weight or not findings:
            return {}
        keys = list(findings)
        texts = [content_words(embed_text(findings[k]), _STOPWORDS) for k in keys]
        got = alignments(self._embedder, content_words(subject, _STOPWORDS), texts, asked)
        return {k: weight * a for k, a in zip(keys, got, strict=True)}

    def _candidates(
        self,
        *,
        scope: str | None,
        source: str | None,
        before_ms: int | None,
        every_tag: Sequence[str],
        wanted_meta: Mapping[str, str],
        now: int,
    ) -> tuple[list[str], dict[str, Recalled], list[Listing | IndexedListing]]:
        """The keys of every live finding the filters keep (what ``recall`` with no limit returns),
        without building the DB's rows; the unsynced ones among them, by key; the listings."""
        listings, retired = self._sources(scope)
        keep = _keeps(
            scope=scope,
            source=source,
            before_ms=before_ms,
            now=now,
            retired=retired,
            hides=self._hides,
            every_tag=every_tag,
            wanted_meta=wanted_meta,
        )
        disk = [e for listing in listings for e in listing.entries if keep(e)]
        with self._db.snapshot():  # files first, then the DB in one snapshot (see recall)
            rows = self._db.recall_keys(
                scope=scope, source=source, before_ms=before_ms, now_ms=now, tags=every_tag, meta=wanted_meta
            )
            kept = self._not_held(disk, None, key=_key)
        unsynced = {e.key: e for e in kept}
        live = [k for k in rows if k not in retired or not self._hides(retired, k)]
        return live + list(unsynced), unsynced, listings

    def _texts_of(self, unsynced: Mapping[str, Recalled]) -> Callable[[list[str]], Mapping[str, str]]:
        """What a finding's vector is derived from, for keys that have none: an unsynced finding's
        own, a row's read from the DB."""
        from memory._vectors import embed_text

        def texts(keys: list[str]) -> Mapping[str, str]:
            out = {k: embed_text(unsynced[k]) for k in keys if k in unsynced}
            rest = [k for k in keys if k not in unsynced]
            for i in range(0, len(rest), 500):
                out.update((r.key, embed_text(r)) for r in self._db.rows_of(rest[i : i + 500]))
            return out

        return texts

    def _held_of(self, unsynced: Mapping[str, Recalled]) -> Callable[[list[str]], set[str]]:
        """Which of some keys' findings the store still holds (an unsynced one's file, else a row
        not marked retired), looked at now: what a vector just stored is checked against, so one
        derived from a finding erased meanwhile is deleted again (an erase removes the row and
        file first). The file is looked at before the DB: a sync writes the row, then drops it."""

        def held(keys: list[str]) -> set[str]:
            out = {k for k in keys if k in unsynced and self._still_there(unsynced[k])}
            return out | self._db.live_held([k for k in keys if k not in out])

        return held

    def _resolve(
        self, keys: Sequence[str], unsynced: Mapping[str, Recalled], now: int
    ) -> dict[str, Recalled]:
        """The findings of ``keys`` that are still live, in order: unsynced ones as listed while
        their file is there (an erase since the listing removed it; the search may have taken
        seconds), rows read again (one retired or expired since it was listed is left out). A file
        is looked at before the DB: a sync writes the row, then drops the file."""
        listed = {k for k in keys if k in unsynced and self._still_there(unsynced[k])}
        rows = {r.key: r for r in self._db.live_rows([k for k in keys if k not in listed], now)}
        return {k: unsynced[k] if k in listed else rows[k] for k in keys if k in listed or k in rows}

    def _mode(self, mode: str | None) -> str:
        """The ``why`` mode asked for, or the default: hybrid with an embedder, keyword without."""
        if mode is None:
            return "keyword" if self._embedder is None else "hybrid"
        if mode not in WHY_MODES:
            raise ArgumentInvalid(f"why's mode is one of {', '.join(WHY_MODES)}, not {mode!r:.80}")
        if mode != "keyword" and self._embedder is None:
            raise EmbedderUnavailable(
                f"why mode {mode!r} finds findings by meaning, and this store has no embedder: open it "
                "with MemoryStore(db, embedder=memory.default_embedder()) (the semantic extra), or your own"
            )
        return mode

    def _vector_index(self) -> VectorIndex:
        with self._held_mutex:
            if self._vectors is None:
                from memory._vectors import VectorIndex

                assert self._embedder is not None
                self._vectors = VectorIndex(
                    self._publisher.db_path, self._embedder, read_only=self._read_only
                )
            return self._vectors

    def discard_vectors(self, keys: Iterable[str]) -> None:
        """Drop the vectors of retired ``keys`` (this process's and the vectors file's), if any."""
        keys = list(keys)
        if not keys:
            return
        if self._vectors is not None:
            self._vectors.discard(keys)
            return
        if self._discards is None:
            from memory._vectors import VectorDiscards

            self._discards = VectorDiscards(self._publisher.db_path)
        self._discards(keys)

    def erase_vectors(self, keys: Sequence[str]) -> None:
        """Drop the vectors of erased ``keys`` (this process's), and make sure the vectors file
        keeps none of them (``memory._vectors.erase_vectors``: it is removed whole otherwise).

        Raises:
            Unwritable: the vectors file had to be removed and could not be.
        """
        from memory._vectors import erase_vectors

        if self._vectors is not None:
            self._vectors.discard(keys)
        erase_vectors(self._publisher.db_path, keys)

    def close(self) -> None:
        """Close the vectors file, if one was opened (reopened on the next search by meaning), and
        the folders held open (opened again by a later read of every scope)."""
        self._held = None
        with self._held_mutex:
            vectors, self._vectors = self._vectors, None
        if vectors is not None:
            vectors.close()

    def forget_cached(self, keys: set[str]) -> None:
        """Drop what this process remembers of ``keys`` (row terms, held keys, last versions)."""
        with self._held_mutex:
            for k in keys:
                self._row_terms.pop(k, None)
                self._held_cache.pop(k, None)
                self._live_cache.pop(k, None)
            for memory, (key, _) in list(self._latest.items()):
                if key in keys:
                    del self._latest[memory]
                    self._own.pop(memory, None)

    def derive_vectors(self, scope: str | None = None, *, again: bool = False) -> int:
        """Derive (and keep) the vector of every live finding that has none yet; how many are live.
        ``again``: first forget the vectors this process remembers and reopen the vectors file."""
        if self._embedder is None:
            raise EmbedderUnavailable("this store has no embedder to derive vectors with")
        if again:
            self.close()
        live = self.recall(scope=scope, limit=None)
        self._vector_index().vectors(live, self._held_of({e.key: e for e in live if e.id < 0}))
        return len(live)

    def _terms(self, e: Recalled) -> Terms:
        return self._terms_of_row(e) if e.id > 0 else terms_of(e)

    def _by_words(
        self,
        wanted: Mapping[str, frozenset[str]],
        limit: int,
        *,
        scope: str | None,
        every_tag: Sequence[str],
        wanted_meta: Mapping[str, str],
        source: str | None,
        before_ms: int | None,
    ) -> list[Explained]:
        """Live findings sharing words with the question, best first (at least ``limit`` of them
        when there are that many)."""
        from memory._outcomes import Explained  # not at import: a recall makes none of them

        now = self._clock()
        listings, retired = self._sources(scope, whole=True)

        live = _keeps(
            scope=scope,
            source=source,
            before_ms=before_ms,
            now=now,
            retired=retired,
            hides=self._hides,
            every_tag=every_tag,
            wanted_meta=wanted_meta,
        )

        filtered = bool(
            scope is not None
            or retired
            or every_tag
            or wanted_meta
            or source is not None
            or before_ms is not None
        )
        disk: list[Explained] = []
        for listing in listings:
            assert isinstance(listing, Listing)  # asked ``whole``: every entry parsed
            keep = live if filtered or listing.expiring else None
            for e, found in listing.sharing(wanted, best=max(50, 4 * limit), keep=keep):
                score, matched = _score_terms(found, wanted)
                if score > 0:
                    disk.append(Explained(finding=e, score=score, matched=matched))
        disk.sort(key=_best_first, reverse=True)
        with self._db.snapshot():  # files first, then one DB snapshot (see recall)
            scored = self._not_held(disk, limit, key=lambda x: x.finding.key)
            rows = self._db.search(list(wanted.values()), scope=scope, limit=max(50, limit * 5), now_ms=now)
        for e in rows:
            score, matched = _score_terms(self._terms_of_row(e), wanted)
            if score > 0 and live(e):
                scored.append(Explained(finding=e, score=score, matched=matched))
        scored.sort(key=_best_first, reverse=True)
        self._served(x.finding for x in scored[:limit] if x.finding.id < 0)
        return scored

    def _hides(self, retired: Mapping[str, Retired], key: str) -> bool:
        """Whether ``retired`` keeps ``key`` out of a read: it names the key, and its retirement is
        what the record it cites says (checked once per process, ``Citations.check_retired``). A
        retired file no record backs fails the read (``Unreachable``, naming it) rather than hide a
        finding the journal holds as live."""
        found = retired.get(key)
        if found is None:
            return False
        if self._checked_retired.get(key) is not found:  # the very object checked last: a dict lookup
            self._citations.check_retired(found, self._publisher.retired_dir(found.scope) / f"{key}.json")
            if len(self._checked_retired) >= 200_000:
                self._checked_retired.clear()
            self._checked_retired[key] = found
            # Replaced by a version this host does not have (its update killed between the
            # retirement and the rename; on a journal hosts share, committed since the last catch
            # up): that version is published now, and the read starts again and finds it, rather
            # than answer with neither version.
            if found.by is not None and self.publish_successor(found):
                raise LeftMeanwhile(self._publisher.retired_dir(found.scope))
        if found.by is not None and isinstance(retired, _Union):
            self._serve_successor(key, found, retired)
        if found.by is not None:
            quiet = getattr(self._reading, "quiet", None)
            if quiet is None:
                quiet = self._reading.quiet = self._quiet()
            if not quiet and self._renamed_since_listed(found, retired):
                raise LeftMeanwhile(self._publisher.retired_dir(found.scope))
        return True

    def _serve_successor(self, key: str, found: Retired, retired: Mapping[str, Retired]) -> None:
        """On a journal hosts share, where a read writes nothing: when the version that superseded
        ``key`` (the end of its chain of supersedes, each retired in ``retired``) is live and this
        host has it neither as a file nor as a row (another host's update, committed since this
        host last caught up), it is served from its commit (checked like every record read back;
        an erased commit, or an update that lost its race, serves nothing) until this host has it:
        the read goes on, and once it has met every such version it is made again, once, with them
        (``_again_if_stale``). Before, such a read answered with
        neither version of a memory live at every instant until a catch up published the new one,
        and a LangGraph store's read, which catches up before and after, could lose that race to
        a busy writer on another host every time. The chain's end is remembered per key, so a
        read walks each chain once, not once per version it lists."""
        end, last, here = self._chain_ends.get(key, (found.by, found, False))
        if here and end not in retired:
            return  # this host had the line's last version when last asked, and it is still the last
        seen: set[str] = set()
        while end is not None and end in retired and end not in seen:
            seen.add(end)
            last = retired[end]
            end = last.by
        if end is None or end in retired:
            return  # forgotten at the end of the line (or a loop, which is damage): nothing to serve
        if len(self._chain_ends) >= 200_000:
            self._chain_ends.clear()
        listings = getattr(self._reading, "listings", None) or ()
        here = any(listing.by_key(end) is not None for listing in listings) or bool(self._held_keys([end]))
        self._chain_ends[key] = (end, last, here)
        if here or end in self._from_commits:
            return
        entry = self.successor_entry(last)
        if entry is None or entry.key != end:
            return
        self._from_commits[end] = entry
        # the read goes on, gathering every such version it meets, and is then made again once
        # (``_again_if_stale``): one restart per version made a read of N of them cost N² steps
        self._reading.served = getattr(self._reading, "served", 0) + 1

    def _renamed_since_listed(self, found: Retired, retired: Mapping[str, Retired]) -> bool:
        """Whether the version that superseded ``found`` (the end of its chain of supersedes, each
        retired in ``retired``) changed since this read looked: it has its learned file now, in
        its scope's folder, though this read's listing of that folder did not have it; or it has a
        retired file now, though ``retired`` did not have one (another update, or a forget, since).

        An update retires the version it replaces, then renames the new one into place: a read
        that listed the folder before the rename and read the retired files after the retirement
        (of one update, or of several in a row) would answer with none of the versions, though
        one of them was live at every instant. Such a read starts again, and finds the live
        version, or that none is: each time it does, another process has changed the memory.
        Asked only in a read whose listed folders changed since it listed them (``_quiet``), of
        each version a retirement hides there: a look at a listing, else two ``lstat``s."""
        listings = getattr(self._reading, "listings", None)
        successor, scope = found.by, found.scope
        seen: set[str] = set()
        while successor is not None and successor in retired and successor not in seen:
            seen.add(successor)
            later = retired[successor]
            successor, scope = later.by, later.scope
        if not listings or successor is None:
            return False
        if any(listing.by_key(successor) is not None for listing in listings):
            return False  # this read has it
        if os.path.lexists(self._publisher.retired_dir(scope) / f"{successor}.json"):
            return True  # retired since this read looked at the retired files
        if os.path.lexists(self._publisher.scope_dir(scope) / f"{successor}.json"):
            return True
        return self._moved_since_listed(successor, self._publisher.scope_dir(scope))

    def _moved_since_listed(self, successor: str, own: Path) -> bool:
        """Whether ``successor``, a version of another scope than the one it replaced (an update may
        move a memory: a retired file names its successor's key, not its scope), has its learned
        file now in another folder this read listed. Asked only when the history DB does not hold
        it (where a sync put it, and where the read finds it): then one ``lstat`` per other folder
        the read listed, for a read of several scopes whose folders changed while it ran."""
        dirs: list[Path] | None = getattr(self._reading, "dirs", None)
        others = [d for d in dirs or () if d != own]
        if not others or self._held_keys([successor]):
            return False
        return any(os.path.lexists(d / f"{successor}.json") for d in others)

    def _quiet(self) -> bool:
        """Whether every scope folder this read listed is as it listed it (so no update renamed a
        version into one since): held folders are (one look); else each folder's (mtime, inode) now
        is its listing's, and old enough to vouch for that (``RACY_S``: directory times are coarse).
        One ``stat`` per folder, once per read, and only for a read that meets a version a
        supersede hides."""
        reading = self._reading
        dirs: list[Path] | None = getattr(reading, "dirs", None)
        listings = getattr(reading, "listings", None)
        if dirs is None or listings is None:
            return listings is not None  # held: unchanged; no read: nothing to say
        settled = time.time_ns() - int(RACY_S * 1e9)
        for directory, listing in zip(dirs, listings, strict=False):
            try:
                st = os.stat(directory)
            except FileNotFoundError:
                if listing.mtime_ns or listing.ino:
                    return False
                continue  # not there when listed either
            except OSError:
                return False
            if (st.st_mtime_ns, st.st_ino) != (listing.mtime_ns, listing.ino) or st.st_mtime_ns > settled:
                return False
        return True

    def _served(self, unsynced: Iterable[Recalled]) -> None:
        """Check each unsynced entry about to be returned against the journal record it cites: a
        file nobody journaled is never served (``Unreachable`` naming it). An entry whose check
        fails left while the read ran when its file is gone now (an erase on this host removes the
        file, then makes the commit a tombstone), or when its commit is a tombstone and its key is
        retired now (an erase on another host forgets, then rewrites the commits, and leaves this
        host's file to its next sync): ``LeftMeanwhile``, and the read starts again without it (its
        retirements, read again, hide it). A tombstone whose key nothing retires is damage: said."""
        for e in unsynced:
            try:
                self._citations.check(e, self._path_of)
            except Unreachable:
                if self._from_commits.pop(e.key, None) is e:
                    raise LeftMeanwhile(self._publisher.scope_dir(e.scope)) from None  # its commit changed
                path = self._path_of(e)
                if not os.path.lexists(path):
                    raise LeftMeanwhile(path.parent) from None
                record = self._citations.cited(e)
                if record is None or not is_erased(record):
                    raise
                if e.key in self._shared():
                    raise LeftMeanwhile(path.parent) from None
                raise Citations.tombstoned(path, e, named=None) from None

    def _still_there(self, e: Recalled) -> bool:
        """Whether the unsynced entry ``e`` is still this host's to answer with: its file is there,
        or it is a version served from its commit (``_serve_successor``), which has none."""
        return self._from_commits.get(e.key) is e or os.path.lexists(self._path_of(e))

    def _path_of(self, e: Recalled) -> Path:
        return self._publisher.scope_dir(e.scope) / f"{e.key}.json"

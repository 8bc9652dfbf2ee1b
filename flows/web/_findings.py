"""The findings page's data: ``recall`` newest first (paged), or ``why`` ranked, with highlights.

Paging ``recall`` goes by time, not by position, so a page costs the same however deep it is: the
cursor ``<ms>.<skip>`` asks for the findings learned before ``ms`` and skips the first ``skip`` of
them (the ones at the page's last instant that were already shown). ``why`` is ranked: its pages
are a growing ``limit`` (up to ``MAX_WHY``).

Filters are the memory API's own: ``tag`` repeated (every one must be on the finding) and ``meta``
repeated as ``KEY=VALUE`` (the value is JSON when it parses as JSON, else the text itself, as
``flows recall --meta`` reads it), passed to ``recall(tags=, meta=)`` and ``why(tags=, meta=)``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from markupsafe import Markup, escape

from flows._bounded import LIST_MAX_BYTES, fitting
from flows.web._errors import ServeBadRequest
from journal import JournalBackend, RunInfo, RunState
from memory import (
    ERASE_STREAM,
    RETIRE_STREAM,
    STREAM,
    Explained,
    FindingUnknown,
    HistoryEvent,
    MemoryStore,
    Recalled,
    is_erased,
)
from memory.cli import meta_value

PAGE_SIZE = 25
MAX_WHY = 200
_WORD = re.compile(r"\w+")
_CURSOR = re.compile(r"(\d{1,19})\.(\d{1,9})\Z")
MAX_FILTERS = 32  # tags and metadata pairs, each
MAX_FILTER_CHARS = 1024
TEXT_SHOWN = 2000
"""The most characters of a finding's text a list shows (its full length said, its own page linked):
a text may be a million characters, and a page of 200 of them was hundreds of megabytes."""


@dataclass(frozen=True)
class Filters:
    """What the page was asked for: ``meta`` holds the ``KEY=VALUE`` items as they were given."""

    q: str | None
    tags: tuple[str, ...]
    meta: tuple[str, ...]
    scope: str | None
    source: str | None

    def meta_object(self) -> dict[str, Any] | None:
        """``meta`` as the object ``recall``/``why`` take (None without any)."""
        return parse_meta(self.meta)


def parse_filters(
    *, q: str | None, tags: list[str], meta: list[str], scope: str | None, source: str | None
) -> Filters:
    """The filters of a request; empty items (a form's blank box) are left out.

    Raises:
        ServeBadRequest: too many items, an item too long, or a ``meta`` item that is not
            ``KEY=VALUE`` (or names a key twice).
    """
    kept_tags = tuple(dict.fromkeys(t for t in tags if t))
    kept_meta = tuple(m for m in meta if m)
    for name, items in (("tag", kept_tags), ("meta", kept_meta)):
        if len(items) > MAX_FILTERS:
            raise ServeBadRequest(f"at most {MAX_FILTERS} {name} filters at once, got {len(items)}")
        for item in items:
            if len(item) > MAX_FILTER_CHARS:
                raise ServeBadRequest(f"a {name} filter is at most {MAX_FILTER_CHARS} characters")
    filters = Filters(q=q, tags=kept_tags, meta=kept_meta, scope=scope, source=source)
    parse_meta(kept_meta)  # refuse a malformed item now, before anything is read
    return filters


def parse_meta(items: Sequence[str]) -> dict[str, Any] | None:
    """``KEY=VALUE`` items as an object: the value is JSON when it parses (``990``, ``true``,
    ``"007"``), else the text itself (``EGLL``); None for no items.

    Raises:
        ServeBadRequest: an item without ``=`` or with an empty key, or a key given twice.
    """
    if not items:
        return None
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ServeBadRequest(f"meta takes KEY=VALUE (e.g. meta=station=EGLL), not {item!r:.80}")
        if key in out:
            raise ServeBadRequest(f"meta {key!r:.80} is given twice; give each key once")
        out[key] = meta_value(text)  # an integer past 64 bits exact, for the memory to refuse
    return out


@dataclass(frozen=True)
class FindingsPage:
    """A page of findings (or of ``why`` answers), in the CLI's ``--json`` shape, and how to go on:
    ``truncated`` when the page stopped at its bytes (``LIST_MAX_BYTES``) before its ``limit``."""

    found: list[Recalled]
    answers: list[Explained] | None
    next_cursor: str | None
    next_limit: int | None
    next_offset: int | None = None
    truncated: bool = False

    def as_json(self) -> list[dict[str, Any]]:
        """``flows why --json`` (with a question) or ``flows recall --json`` (without)."""
        if self.answers is not None:
            return [a.as_json() for a in self.answers]
        return [f.as_json() for f in self.found]


Size = Callable[[Recalled | Explained], int]
"""The bytes one finding (or ``why`` answer) takes on the page being built."""


def json_size(item: Recalled | Explained) -> int:
    """The bytes ``item`` takes in the CLI's ``--json`` shape."""
    return len(orjson.dumps(item.as_json()))


def parse_cursor(text: str | None) -> tuple[int, int] | None:
    """``<ms>.<skip>`` as two numbers; None for no cursor.

    Raises:
        ServeBadRequest: anything else.
    """
    if text is None:
        return None
    m = _CURSOR.match(text)
    if m is None:
        raise ServeBadRequest(f"cursor {text!r:.80} is not <ms>.<skip>; start from the first page")
    return int(m.group(1)), int(m.group(2))


def findings_page(
    store: MemoryStore,
    filters: Filters,
    *,
    cursor: str | None,
    limit: int,
    offset: int = 0,
    size: Size = json_size,
    max_bytes: int = LIST_MAX_BYTES,
) -> FindingsPage:
    """The findings that match ``filters``: ``why`` when there is a question (its answers from
    ``offset``), else ``recall``. The page stops before its items, each ``size`` bytes, would pass
    ``max_bytes`` (at least one is given): then it is ``truncated`` and says where to go on.

    Raises:
        ServeBadRequest: a malformed cursor.
        memory.ArgumentInvalid: a filter the memory API refuses (a blank tag, a bad metadata key).
        memory.Unreachable: a learned file or the DB cannot be read (unchanged).
    """
    if filters.q:
        return _why_page(store, filters, limit=limit, offset=offset, size=size, max_bytes=max_bytes)
    return _recall_page(store, filters, parse_cursor(cursor), limit=limit, size=size, max_bytes=max_bytes)


def _why_page(
    store: MemoryStore, filters: Filters, *, limit: int, offset: int, size: Size, max_bytes: int
) -> FindingsPage:
    assert filters.q is not None
    limit = min(limit, MAX_WHY)
    wanted = limit if filters.source is None else MAX_WHY
    answers = [
        a
        for a in store.why(
            filters.q, limit=wanted, scope=filters.scope, tags=filters.tags, meta=filters.meta_object()
        )
        if filters.source is None or a.finding.source == filters.source
    ][:limit]
    page = answers[offset:]
    cut = fitting(map(size, page), max_bytes)
    if cut is not None:
        kept = page[:cut]
        return FindingsPage([a.finding for a in kept], kept, None, None, offset + cut, True)
    more = len(answers) == limit and limit < MAX_WHY
    return FindingsPage([a.finding for a in page], page, None, min(MAX_WHY, limit * 2) if more else None)


def _recall_page(
    store: MemoryStore,
    filters: Filters,
    cursor: tuple[int, int] | None,
    *,
    limit: int,
    size: Size,
    max_bytes: int,
) -> FindingsPage:
    before, skip = cursor if cursor is not None else (None, 0)
    fetched = store.recall(
        tags=filters.tags,
        meta=filters.meta_object(),
        source=filters.source,
        scope=filters.scope,
        before_ms=before,
        limit=skip + limit + 1,
    )
    page = fetched[skip : skip + limit]
    cut = fitting(map(size, page), max_bytes)
    if cut is not None:
        return FindingsPage(page[:cut], None, _cursor_after(fetched, skip + cut), None, None, True)
    if len(fetched) <= skip + limit or not page:
        return FindingsPage(page, None, None, None)
    return FindingsPage(page, None, _cursor_after(fetched, skip + limit), None)


def _cursor_after(fetched: Sequence[Recalled], shown: int) -> str:
    """The cursor of the findings after the first ``shown`` of ``fetched``: those learned before
    the last one shown, past the ones at its instant already shown."""
    last = fetched[shown - 1].learned_ms
    same = sum(1 for f in fetched[:shown] if f.learned_ms == last)
    return f"{last + 1}.{same}"


def highlight(text: str, matched: Iterable[str]) -> Markup:
    """``text`` escaped, with the words ``why`` matched wrapped in ``<mark>``.

    A word is marked when, lower-cased, it is a matched word or starts with one of at least three
    characters (``why`` may match word forms: ``fee`` finds "fees"). Each word of the text is looked
    up in sets, one look per length a matched word has: a question of hundreds of words, each
    matched by every finding of a page, compared every word of 200 texts with every matched word
    (8 to 11 seconds for one page, under the lock every other request waits on).
    """
    words = {m.lower() for m in matched if m}
    if not words:
        return escape(text)
    stems = {w for w in words if len(w) >= 3}
    lengths = sorted({len(w) for w in stems})
    out: list[str] = []
    pos = 0
    for m in _WORD.finditer(text):
        token = m.group(0).lower()
        if token in words or any(token[:n] in stems for n in lengths if n <= len(token)):
            out.append(str(escape(text[pos : m.start()])))
            out.append(f"<mark>{escape(m.group(0))}</mark>")
            pos = m.end()
    out.append(str(escape(text[pos:])))
    return Markup("".join(out))  # noqa: S704 - built from escape()d pieces and <mark> only


_MEMORY_STREAMS = (STREAM, RETIRE_STREAM, ERASE_STREAM)


@dataclass(frozen=True)
class _Named:
    """What one run's memory streams name: every key and memory id (``names``), the memory id of
    each version it learned (``memories``), and the versions it learned of each memory
    (``versions``), so a lookup costs the same however many findings a run holds."""

    names: frozenset[str]
    memories: dict[str, str]
    versions: dict[str, frozenset[str]]


class KeyIndex:
    """Which finding keys and memory ids each root run's ``memory-learn``, ``memory-forget`` and
    ``memory-erase`` streams name, so a finding's history reads only the runs that hold a record of
    its memory, any version's (``MemoryStore.history(runs=)``).

    A done run never changes (it cannot be resumed), so what it names is read once; every other
    run (running, interrupted, failed: a resume may append) has each stream read again only when it
    changed since (``JournalBackend.stamp``; always where the journal cannot tell, as for a stream
    not there yet, which costs little). Not thread-safe: the app holds one lock around its reads.
    """

    def __init__(self) -> None:
        self._done: dict[str, _Named] = {}
        self._open: dict[str, _Held] = {}

    def runs_naming(self, backend: JournalBackend, runs: Sequence[RunInfo], key: str) -> list[str]:
        """The ids of the runs among ``runs`` that hold a record of the memory ``key`` is a version
        of: a commit of any of its versions, their retirements, its erasure.

        Raises:
            journal.JournalError: a stream cannot be read (unchanged).
        """
        named: dict[str, _Named] = {}
        for run in runs:
            found = self._done.get(run.run_id)
            if found is None:
                found = self._current(backend, run)
            named[run.run_id] = found
        if len(self._done) + len(self._open) > len(runs) + 1000:  # runs removed from the journal
            alive = {r.run_id for r in runs}
            self._done = {k: v for k, v in self._done.items() if k in alive}
            self._open = {k: v for k, v in self._open.items() if k in alive}
        memory = next((n.memories[key] for n in named.values() if key in n.memories), key)
        wanted = {key, memory}
        for n in named.values():  # every version of the memory: each commit names its memory id
            wanted.update(n.versions.get(memory, ()))
        return [run.run_id for run in runs if not named[run.run_id].names.isdisjoint(wanted)]

    def _current(self, backend: JournalBackend, run: RunInfo) -> _Named:
        """What ``run`` names now, its streams read again only where they changed since."""
        held = self._open.get(run.run_id)
        parts: list[_Part] = []
        stamps: list[object] = []
        for n, stream in enumerate(_MEMORY_STREAMS):
            stamp = backend.stamp(run.run_id, stream)
            if held is not None and stamp is not None and stamp == held.stamps[n]:
                parts.append(held.parts[n])
            else:
                parts.append(_stream_names(backend, run.run_id, stream))
            stamps.append(backend.stamp(run.run_id, stream))  # the stream as this read saw it
        found = held.named if held is not None and held.parts == tuple(parts) else _merged(parts)
        if run.state is RunState.DONE:
            self._done[run.run_id] = found
            self._open.pop(run.run_id, None)
        else:
            self._open[run.run_id] = _Held(tuple(stamps), tuple(parts), found)
        return found


_Part = tuple[frozenset[str], tuple[tuple[str, str], ...]]
"""What one stream names: its keys and memory ids, and (``memory-learn``) each version's memory."""


@dataclass(frozen=True)
class _Held:
    """A run that may still change: each stream's stamp when read, what it named, and the whole."""

    stamps: tuple[object, ...]
    parts: tuple[_Part, ...]
    named: _Named


def _stream_names(backend: JournalBackend, run_id: str, stream: str) -> _Part:
    names: set[str] = set()
    memories: list[tuple[str, str]] = []
    for rec in backend.read(run_id, stream):
        p = rec.payload
        key, memory = p.get("id"), p.get("memory")
        for name in (key, memory):
            if isinstance(name, str):
                names.add(name)
        if stream == STREAM and isinstance(key, str):
            # a first version is its own memory
            memories.append((key, memory if isinstance(memory, str) else key))
        old = p.get("supersedes")  # an update's commit retires the version it replaced
        if stream == STREAM and isinstance(old, str) and "supersedesScope" in p:
            names.add(old)
        ids = p.get("ids")  # a forget by filter names every key it retired
        if isinstance(ids, list):
            names.update(i[0] for i in ids if isinstance(i, list) and i and isinstance(i[0], str))
        keys = p.get("keys")  # an erasure names every version it erased
        if stream == ERASE_STREAM and isinstance(keys, list):
            names.update(k for k in keys if isinstance(k, str))
    return frozenset(names), tuple(memories)


def _merged(parts: Sequence[_Part]) -> _Named:
    memories = {key: memory for _, pairs in parts for key, memory in pairs}
    versions: dict[str, set[str]] = {}
    for version, memory in memories.items():
        versions.setdefault(memory, set()).add(version)
    return _Named(
        frozenset().union(*(names for names, _ in parts)),
        memories,
        {m: frozenset(v) for m, v in versions.items()},
    )


@dataclass(frozen=True)
class FindingDetail:
    """One finding's page: the live finding (None once it is forgotten, superseded or expired),
    what it said when it was learned, and its history (oldest first)."""

    key: str
    live: Recalled | None
    learned: dict[str, Any] | None
    history: list[HistoryEvent]

    @property
    def state(self) -> str:
        """``live``; ``erased`` once its memory was erased; or the event that ended it:
        ``forgotten``, ``superseded`` or ``expired``."""
        if self.live is not None:
            return "live"
        ended = self.ended
        return ended.kind if ended is not None else "gone"

    @property
    def ended(self) -> HistoryEvent | None:
        """The erasure of its memory, which took every version's content away; else the event
        that took this version out of every read, if one did (the history is its memory's, every
        version's: only this version's own events count)."""
        erased = next((e for e in self.history if e.kind == "erased"), None)
        if erased is not None:
            return erased
        return next((e for e in self.history if e.key == self.key and e.kind != "learned"), None)


def finding_detail(
    store: MemoryStore, backend: JournalBackend, key: str, runs: Sequence[str]
) -> FindingDetail | None:
    """The finding ``key`` with its history (looked for in ``runs``, the ids of the root runs that
    name it: ``KeyIndex``); None when nothing knows the key.

    A finding no longer live is shown from its own commit's record in the journal (its text, tags,
    source and metadata, as learned), never from another version's of its memory.

    Raises:
        memory.ArgumentInvalid: ``key`` is not a key.
        memory.Unreachable, journal.JournalError: the store or the journal cannot be read.
    """
    live = store.get(key)
    try:
        history = store.history(key, runs=runs)
    except FindingUnknown:
        if live is None:
            return None
        history = []
    learned = None
    # an erased memory shows no content, though an erase refused part-way (a commit in a run still
    # running) left some of its commits whole: the erase record is what says it is gone
    if live is None and not any(e.kind == "erased" for e in history):
        first = next((e for e in history if e.kind == "learned" and e.key == key), None)
        if first is not None:
            learned = _learned_record(backend, first)
    return FindingDetail(key, live, learned, history)


def _learned_record(backend: JournalBackend, event: HistoryEvent) -> dict[str, Any] | None:
    """The finding a ``learned`` event's record holds (``text``, ``tags``, ``source``, ``metadata``,
    ``expiresMs``, ``scope``, ``flow``), or None when the record is not there."""
    c = event.citation
    record = backend.find(c.run_id, STREAM, event.key) if c.stream == STREAM else None
    if record is None or record.id != c.id:
        record = next((r for r in backend.read(c.run_id, c.stream) if r.id == c.id), None)
    if record is None or is_erased(record):  # a tombstone: what it said is gone
        return None
    p = record.payload
    raw = p.get("finding")
    finding: dict[str, Any] = raw if isinstance(raw, dict) else {}
    fields = ("text", "tags", "source", "metadata", "expiresMs")
    return {**{k: finding.get(k) for k in fields}, "scope": p.get("scope"), "flow": p.get("flow")}

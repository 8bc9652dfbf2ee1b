"""The findings page's data: ``recall`` newest first (paged), or ``why`` ranked, with highlights.

Paging ``recall`` goes by time, not by position, so a page costs the same however deep it is: the
cursor ``<ms>.<skip>`` asks for the findings learned before ``ms`` and skips the first ``skip`` of
them (the ones at the page's last instant that were already shown). ``why`` is ranked: its pages
are a growing ``limit`` (up to ``MAX_WHY``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup, escape

from flows.web._errors import ServeBadRequest
from memory import Explained, MemoryStore, Recalled

PAGE_SIZE = 25
MAX_WHY = 200
_WORD = re.compile(r"\w+")
_CURSOR = re.compile(r"(\d{1,19})\.(\d{1,9})\Z")


@dataclass(frozen=True)
class Filters:
    """What the page was asked for."""

    q: str | None
    tag: str | None
    scope: str | None
    source: str | None


@dataclass(frozen=True)
class FindingsPage:
    """A page of findings (or of ``why`` answers), in the CLI's ``--json`` shape, and how to go on."""

    found: list[Recalled]
    answers: list[Explained] | None
    next_cursor: str | None
    next_limit: int | None

    def as_json(self) -> list[dict[str, Any]]:
        """``flows why --json`` (with a question) or ``flows recall --json`` (without)."""
        if self.answers is not None:
            return [a.as_json() for a in self.answers]
        return [f.as_json() for f in self.found]


def parse_cursor(text: str | None) -> tuple[int, int] | None:
    """``<ms>.<skip>`` as two numbers; None for no cursor.

    Raises:
        ServeBadRequest: anything else.
    """
    if text is None:
        return None
    m = _CURSOR.match(text)
    if m is None:
        raise ServeBadRequest(f"cursor {text!r} is not <ms>.<skip>; start from the first page")
    return int(m.group(1)), int(m.group(2))


def findings_page(store: MemoryStore, filters: Filters, *, cursor: str | None, limit: int) -> FindingsPage:
    """The findings that match ``filters``: ``why`` when there is a question, else ``recall``.

    Raises:
        ServeBadRequest: a malformed cursor.
        memory.Unreachable: a learned file or the DB cannot be read (unchanged).
    """
    if filters.q:
        return _why_page(store, filters, limit)
    return _recall_page(store, filters, parse_cursor(cursor), limit)


def _why_page(store: MemoryStore, filters: Filters, limit: int) -> FindingsPage:
    assert filters.q is not None
    limit = min(limit, MAX_WHY)
    wanted = limit if filters.tag is None and filters.source is None else MAX_WHY
    answers = [
        a
        for a in store.why(filters.q, limit=wanted, scope=filters.scope)
        if (filters.tag is None or filters.tag in a.finding.tags)
        and (filters.source is None or a.finding.source == filters.source)
    ][:limit]
    more = len(answers) == limit and limit < MAX_WHY
    return FindingsPage(
        [a.finding for a in answers], answers, None, min(MAX_WHY, limit * 2) if more else None
    )


def _recall_page(
    store: MemoryStore, filters: Filters, cursor: tuple[int, int] | None, limit: int
) -> FindingsPage:
    before, skip = cursor if cursor is not None else (None, 0)
    fetched = store.recall(
        tag=filters.tag,
        source=filters.source,
        scope=filters.scope,
        before_ms=before,
        limit=skip + limit + 1,
    )
    page = fetched[skip : skip + limit]
    if len(fetched) <= skip + limit or not page:
        return FindingsPage(page, None, None, None)
    last = page[-1].learned_ms
    same = sum(1 for f in fetched[: skip + limit] if f.learned_ms == last)
    return FindingsPage(page, None, f"{last + 1}.{same}", None)


def highlight(text: str, matched: Iterable[str]) -> Markup:
    """``text`` escaped, with the words ``why`` matched wrapped in ``<mark>``.

    A word is marked when, lower-cased, it is a matched word or starts with one (``why`` may match
    word forms: ``fee`` finds "fees").
    """
    words = sorted({m.lower() for m in matched if m}, key=len, reverse=True)
    if not words:
        return escape(text)
    out: list[str] = []
    pos = 0
    for m in _WORD.finditer(text):
        token = m.group(0).lower()
        if any(token == w or (len(w) >= 3 and token.startswith(w)) for w in words):
            out.append(str(escape(text[pos : m.start()])))
            out.append(f"<mark>{escape(m.group(0))}</mark>")
            pos = m.end()
    out.append(str(escape(text[pos:])))
    return Markup("".join(out))  # noqa: S704 - built from escape()d pieces and <mark> only


def matched_of(page: FindingsPage) -> dict[str, Sequence[str]]:
    """For each finding key on a ``why`` page, the words it matched."""
    return {a.finding.key: a.matched for a in page.answers or ()}

"""A finding's history on the dashboard comes a page at a time, however many events its memory has:
``/api/findings/KEY/history`` answers ``flows history KEY --json``'s page (``offset``, ``limit``,
``total``, ``truncated``, ``nextOffset``) with a ``Link: rel="next"`` header, and ``/findings/KEY``
shows a page of events with a link to the next. Following either lists every event once, in order;
a bad ``offset`` or ``limit`` is the API's coded 400. Against a real ``flows serve`` process."""

from __future__ import annotations

import html as html_text
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

pytest.importorskip("starlette", reason="the web extra is not installed")

import memory
from tests.flows.helpers import flows, json_of, many_versions
from tests.web.test_served import Answer, Served, request, serving

VERSIONS = 1500  # 2,999 events: learned and superseded for each update


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[dict[str, Any]]]:
    """A store whose one memory has ``VERSIONS`` versions: its DB, its id and every event."""
    return many_versions(tmp_path_factory.mktemp("many"), VERSIONS)


@pytest.fixture(scope="module")
def server(many: tuple[Path, str, list[dict[str, Any]]]) -> Iterator[Served]:
    with serving("--db", str(many[0])) as served:
        yield served
    assert "Traceback" not in served.stderr[0]


def _get(server: Served, target: str) -> Answer:
    return request(server.port, target, [f"127.0.0.1:{server.port}"])


def _next(answer: Answer) -> str | None:
    found = re.fullmatch(r'<([^>]+)>; rel="next"', answer.headers.get("link", ""))
    return None if found is None else found.group(1)


def test_the_api_gives_a_bounded_page_and_links_to_the_next_until_every_event_is_listed(
    many: tuple[Path, str, list[dict[str, Any]]], server: Served
) -> None:
    db, memory_id, everything = many
    total = len(everything)
    assert total > 10 * memory.HISTORY_PAGE
    first = _get(server, f"/api/findings/{memory_id}/history")
    assert first.status == 200
    body = first.json()
    assert body["events"] == everything[: memory.HISTORY_PAGE] and body["total"] == total
    assert body["truncated"] is True and body["nextOffset"] == memory.HISTORY_PAGE
    assert f"offset={memory.HISTORY_PAGE}" in (_next(first) or "")
    # the same page as `flows history --json`
    assert body == json_of(flows(db, "history", memory_id, "--json"))
    listed: list[dict[str, Any]] = []
    target: str | None = f"/api/findings/{memory_id}/history?limit=500"
    for _ in range(total):
        if target is None:
            break
        answer = _get(server, target)
        assert answer.status == 200, answer.body[:300]
        page = answer.json()
        assert len(page["events"]) <= 500 and page["total"] == total
        assert ("nextOffset" in page) == (_next(answer) is not None)
        listed += page["events"]
        target = _next(answer)
    assert listed == everything


def test_the_page_shows_a_page_of_events_and_links_to_the_next_until_every_event_is_shown(
    many: tuple[Path, str, list[dict[str, Any]]], server: Served
) -> None:
    _, memory_id, everything = many
    first = _get(server, f"/findings/{memory_id}")
    assert first.status == 200
    shown = first.body.decode()
    assert shown.count('<li class="event') == memory.HISTORY_PAGE
    assert f"events 1 to {memory.HISTORY_PAGE} of {len(everything)}" in shown
    records: list[str] = []
    target: str | None = f"/findings/{memory_id}?limit=500"
    for _ in range(len(everything)):
        if target is None:
            break
        answer = _get(server, target)
        assert answer.status == 200, answer.body[:300]
        page = answer.body.decode()
        events = re.findall(r'<li class="event kind-[a-z]+">.*?#rec-([0-9a-f]+)"', page)
        assert 1 <= len(events) <= 500
        records += events
        # the page's own events as JSON: the link names this page, not the first one
        (as_json,) = re.findall(r'as JSON: <a href="([^"]+)">history</a>', page)
        listed = orjson.loads(_get(server, html_text.unescape(as_json)).body)["events"]
        assert [e["citation"]["id"] for e in listed] == events
        found = re.search(r'<a href="([^"]+)" rel="next">', page)
        target = None if found is None else html_text.unescape(found.group(1))
    assert records == [e["citation"]["id"] for e in everything]


@pytest.mark.parametrize(
    "query", ["limit=0", "limit=-1", "limit=501", f"limit={2**64}", "limit=x", "offset=-1", "offset=ten"]
)
def test_a_bad_offset_or_limit_is_a_coded_400(
    many: tuple[Path, str, list[dict[str, Any]]], server: Served, query: str
) -> None:
    _, memory_id, _ = many
    api = _get(server, f"/api/findings/{memory_id}/history?{query}")
    assert api.status == 400 and api.json()["code"] == "serve_bad_request"
    assert query.partition("=")[0] in api.json()["message"]
    page = _get(server, f"/findings/{memory_id}?{query}")
    assert page.status == 400 and b"serve_bad_request" in page.body

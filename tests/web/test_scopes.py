"""The findings form's scope picker asks the store for one page of scopes, never every scope: with
more than ``MAX_SCOPE_CHOICES`` its box suggests the first of them and links to the next page of
``/scopes``, which (and ``/api/scopes``) goes on a page at a time by ``after``. Before, every
findings page read every scope (``MemoryStore.scopes()`` unpaged: each scope's rows and files looked
at), so a store of 100,000 scopes paid for all of them to show a text box."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from starlette.testclient import TestClient

import memory
from flows.web import ServeConfig
from flows.web._app import MAX_SCOPE_CHOICES, SCOPE_AFTER_MAX, SCOPES_MAX_PAGE
from tests.web.conftest import client_for

SCOPES = [f"user-{n:04d}" for n in range(MAX_SCOPE_CHOICES + 5)]  # a scope per user
LAST = "zz-last"  # sorts after every user's


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store whose findings are in the DB (synced), one per scope, and one more scope sorting last."""
    db = tmp_path_factory.mktemp("scopes") / "history.db"
    with memory.MemoryStore(db) as store:
        for scope in [*SCOPES, LAST]:
            with store.session(scope=scope, flow="notes") as s:
                s.learn({"text": f"{scope} prefers tea"})
        store.sync()
    return db


@pytest.fixture
def client(many: Path) -> Iterator[TestClient]:
    with client_for(ServeConfig(db=str(many))) as c:
        yield c
    c.app.state.reader.close()  # type: ignore[attr-defined]


def _next(headers: Mapping[str, str]) -> str | None:
    found = re.match(r'<([^>]+)>; rel="next"', headers.get("link") or "")
    return found.group(1) if found else None


def test_the_form_suggests_the_first_page_of_scopes_and_links_to_the_next(client: TestClient) -> None:
    html = client.get("/findings", params={"scope": "user-0042"}).text
    assert 'name="scope" value="user-0042" placeholder="scope" list="scope-choices"' in html
    suggested = re.findall(r'<option value="([^"]*)">', html)
    assert suggested == SCOPES[:MAX_SCOPE_CHOICES]  # a bounded first page, not every scope
    last_shown = SCOPES[MAX_SCOPE_CHOICES - 1]
    assert f'<a href="/scopes?after={last_shown}" id="scopes-more">more scopes →</a>' in html
    assert "user-0042 prefers tea" in html and "user-0043 prefers tea" not in html


def test_the_scopes_pages_go_through_every_scope_once_by_after(client: TestClient) -> None:
    seen: list[str] = []
    html = client.get("/findings").text
    more = re.search(r'href="(/scopes\?[^"]*)" id="scopes-more"', html)
    assert more is not None
    seen += SCOPES[:MAX_SCOPE_CHOICES]
    url: str | None = more.group(1) + "&limit=2"  # two a page, carried on by each page's link
    pages = 0
    while url is not None:
        page = client.get(url.replace("&amp;", "&"))
        assert page.status_code == 200
        names = re.findall(r'<li><a href="/findings\?scope=([^"]+)"><bdi>', page.text)
        assert 0 < len(names) <= 2
        seen += names
        on = re.search(r'href="([^"]+)" rel="next" id="scopes-next"', page.text)
        url = on.group(1) if on else None
        pages += 1
    assert seen == [*SCOPES, LAST] and pages == 3
    api: list[str] = []
    next_url: str | None = "/api/scopes?limit=40"
    while next_url is not None:
        answer = client.get(next_url)
        assert answer.status_code == 200 and len(answer.json()) <= 40
        api += answer.json()
        next_url = _next(answer.headers)
    assert api == [*SCOPES, LAST]
    assert client.get("/api/scopes", params={"after": LAST}).json() == []
    assert _next(client.get("/api/scopes", params={"limit": "1000"}).headers) is None


def test_the_picker_reads_only_its_page_of_scopes_not_every_one(many: Path, tmp_path: Path) -> None:
    # a row of the last scope damaged: reading it is an error, so a findings page of another scope
    # that reads every scope fails; one that reads its page of them never meets it
    copy = tmp_path / "history.db"
    with sqlite3.connect(many) as source, sqlite3.connect(copy) as target:
        source.backup(target)
    with sqlite3.connect(copy) as db:
        db.execute("UPDATE findings SET text = 'tampered' WHERE scope = ?", (LAST,))
    db.close()
    with client_for(ServeConfig(db=str(copy))) as c:
        page = c.get("/findings", params={"scope": "user-0001"})
        damaged = c.get("/findings", params={"scope": LAST})
        c.app.state.reader.close()  # type: ignore[attr-defined]
    assert page.status_code == 200, page.text[:500]
    assert "user-0001 prefers tea" in page.text
    assert damaged.status_code == 500 and "memory_unreachable" in damaged.text  # the row is damaged


@pytest.mark.parametrize(
    "query",
    [
        "limit=0",
        "limit=abc",
        f"limit={SCOPES_MAX_PAGE + 1}",
        "limit=-1",
        f"after={'x' * (SCOPE_AFTER_MAX + 1)}",
    ],
    ids=lambda query: query[:24],
)
def test_a_malformed_after_or_limit_is_a_coded_400(client: TestClient, query: str) -> None:
    api = client.get(f"/api/scopes?{query}")
    assert api.status_code == 400 and api.json()["code"] == "serve_bad_request"
    assert query.partition("=")[0] in api.json()["message"]
    page = client.get(f"/scopes?{query}")
    assert page.status_code == 400 and "serve_bad_request" in page.text


def test_a_store_of_few_scopes_keeps_its_menu_of_every_one(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    with memory.MemoryStore(db) as store:
        for scope in ("kitchen", "garden"):
            with store.session(scope=scope, flow="notes") as s:
                s.learn({"text": f"{scope} notes"})
    with client_for(ServeConfig(db=str(db))) as c:
        html = c.get("/findings").text
        scopes = c.get("/scopes").text
        c.app.state.reader.close()  # type: ignore[attr-defined]
    assert '<select name="scope">' in html and "scopes-more" not in html
    assert re.findall(r'<option value="([^"]*)"', html) == ["", "garden", "kitchen"]
    assert re.findall(r"<bdi>([^<]+)</bdi></a></li>", scopes) == ["garden", "kitchen"]
    assert "scopes-next" not in scopes

"""An agent's narrative journal is paged: the agent page shows at most ``JOURNAL_SHOWN`` sentences (the
newest of its window), says which of how many, and links to the earlier and later ones; the JSON
(``/api/agents/N/journal``) gives at most ``limit`` sentences (and ``LIST_MAX_BYTES`` of them) with the
next page in ``Link``. Both pin the window's first midnight (``jsince``, ``since``), so pages keep their
places while the agent appends. Before, the page and the JSON told every sentence of the window: a
ledger of 20,000 trades in two days made the agent page 21.9 MB."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the web extra is not installed")

from starlette.testclient import TestClient

import journal
from flows.web import ServeConfig
from flows.web._agent import JOURNAL_SHOWN, Agent, journal_page
from memory.ledger import Ledger, LedgerCodec, Outcome, Skipped, balance_reason
from sail._cli import main as sail_main
from tests.web.conftest import client_for
from tests.web.stores import CHAIN, T0, _swap, agent_home
from tests.web.test_http import cli_json

TRADES = 120  # each with a skip after it: 248 sentences over two UTC days


def _append(home: Path, count: int, start: int, first_tx: int) -> None:
    """``count`` confirmed trades 2 s apart from ``start``, each followed by a balance skip."""
    with journal.LineLog(Ledger(home / ".sail").path, LedgerCodec()).locked() as log:
        for i in range(count):
            ts = start + 2 * i
            log.append(_swap(ts, 100 + 2 * i, first_tx + i, Outcome.CONFIRMED, 35_000_000, 9_821_340_000_000))
            reason = balance_reason(10_000_000, 25_000_000)
            log.append(Skipped(ts=ts + 1, block=101 + 2 * i, chain_id=CHAIN, reason=reason))


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = agent_home(tmp_path / "agent")
    _append(home, TRADES, T0 + 5 * 3600, 1000)
    return home


@pytest.fixture
def client(home: Path) -> Iterator[TestClient]:
    with client_for(ServeConfig(sail_homes=(home,))) as c:
        yield c
    c.app.state.reader.close()  # type: ignore[attr-defined]


def _section(html: str) -> str:
    found = re.search(r'<section class="journal" id="journal">(.*?)</section>', html, re.S)
    assert found is not None
    return found.group(1)


def _sentences(section: str) -> list[str]:
    return re.findall(r'<li class="sentence[^"]*">(.*?)</li>', section, re.S)


def _earlier(section: str) -> str | None:
    found = re.search(r'<a href="([^"]+)" rel="prev">', section)
    return None if found is None else found.group(1).replace("&amp;", "&")


def _next(headers: Any) -> str | None:
    found = re.fullmatch(r'<([^>]+)>; rel="next"', headers.get("link", ""))
    return None if found is None else found.group(1)


def _short(cite: dict[str, Any]) -> str:
    return ("L" if cite["file"] == "ledger" else "A") + str(cite["line"])


def _api_sentences(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for day in body["days"] for s in day["sentences"]]


def test_the_agent_page_shows_the_newest_sentences_and_pages_back_to_every_one(
    client: TestClient, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    told = _told(capsys, home)
    total = len(_api_sentences(told))
    assert total > 2 * JOURNAL_SHOWN
    seen: list[str] = []
    url: str | None = "/agents/0"
    pages = 0
    while url is not None:
        answer = client.get(url)
        assert answer.status_code == 200, answer.text[:300]
        section = _section(answer.text)
        shown = _sentences(section)
        assert 0 < len(shown) <= JOURNAL_SHOWN  # every sentence of the window, before
        if pages == 0:
            assert f"of {total:,}" in section and 'id="journal-cut"' in section
        seen = shown + seen
        url = _earlier(section)
        pages += 1
    assert pages == -(-total // JOURNAL_SHOWN) and len(seen) == total
    # each one, in order, once: its citations are its lines
    told_s = _api_sentences(told)
    cited = [re.findall(r"<code class=\"cite\"[^>]*>([LA]\d+)</code>", s) for s in seen]
    expected = [[_short(c) for c in t["cites"]] for t in told_s]
    assert cited == expected


def _told(capsys: pytest.CaptureFixture[str], home: Path) -> dict[str, Any]:
    """``sail journal --days 2 --json``."""
    return dict(cli_json(capsys, sail_main, "journal", "--home", str(home), "--days", "2", "--json"))


def test_the_journal_api_pages_every_sentence_once_and_keeps_its_window_while_the_agent_appends(
    client: TestClient, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    told = _told(capsys, home)
    first = client.get("/api/agents/0/journal", params={"limit": "100"})
    assert first.status_code == 200 and "truncated" not in first.headers
    assert len(_api_sentences(first.json())) == 100
    url = _next(first.headers)
    assert url is not None and f"since={told['sinceMs'] // 1000}" in url
    # the agent goes on meanwhile, past midnight: the next pages keep the first one's window
    _append(home, 3, T0 + 86_400 + 60, 5000)
    listed = _api_sentences(first.json())
    while url is not None:
        answer = client.get(url)
        assert answer.status_code == 200, answer.text[:300]
        listed += _api_sentences(answer.json())
        url = _next(answer.headers)
    before = _api_sentences(told)
    # each sentence in its place; only the last may have grown (a span still open, now ended)
    assert listed[: len(before) - 1] == before[:-1] and listed[len(before) - 1]["tsMs"] == before[-1]["tsMs"]
    assert len(listed) > len(before)  # the appended ones at the end of the same window


def test_a_page_of_the_journal_stops_at_its_bytes(home: Path) -> None:
    told = Agent(0, home).journal(2)
    page = journal_page(told, 10, 1000, max_bytes=3000)
    assert page.truncated and page.start == 10 and 10 < page.end < 30
    assert page.as_json()["days"] and page.as_json()["sinceMs"] == told.since * 1000


@pytest.mark.parametrize(
    ("url", "what"),
    [
        ("/agents/0?jend=100000", "past the 248 sentences"),
        ("/agents/0?jend=-1", "jend must be a whole number"),
        ("/agents/0?jsince=1767225601", "since must be a UTC midnight"),
        ("/agents/0?jsince=86400", "since must be a UTC midnight"),
        ("/agents/0?jsince=abc", "jsince must be a UTC midnight"),
        ("/api/agents/0/journal?offset=100000", "past the 248 sentences"),
        ("/api/agents/0/journal?limit=0", "limit must be a whole number"),
        ("/api/agents/0/journal?since=" + "9" * 40, "since must be a UTC midnight"),
    ],
)
def test_a_bad_journal_page_parameter_is_a_coded_400(client: TestClient, url: str, what: str) -> None:
    answer = client.get(url)
    assert answer.status_code == 400 and "serve_bad_request" in answer.text, answer.text[:500]
    assert what in answer.text, answer.text[:500]

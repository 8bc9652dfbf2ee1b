"""Every list the dashboard answers is bounded in bytes, however large the findings or runs in it:
a finding's text may be a million characters (six million bytes as JSON when they are control
characters), and ``limit`` goes up to 200 findings or 500 runs. A JSON list stops before
``LIST_MAX_BYTES`` (the first item always given) with ``Truncated: true`` and the next page in its
``Link``; a page of HTML shows each text cut (its length said, its own page linked) and stops at the
same bound with a visible note and a link to the rest. Following the links lists everything once."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the web extra is not installed")

from starlette.testclient import TestClient

import memory
from flows._bounded import LIST_MAX_BYTES
from flows.web import ServeConfig
from tests.flows.helpers import flows, json_of, write_flow
from tests.web.conftest import client_for
from tests.web.stores import T0, agent_entries, agent_home, legacy_skips

MIB = 1024 * 1024
BIG = 3  # findings of a million control characters: 6 MiB each as JSON


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of ``BIG`` findings whose texts are 1 MiB of ``\\x01`` after a word."""
    db = tmp_path_factory.mktemp("big") / "store" / "history.db"
    with memory.MemoryStore(db) as store, store.session(scope="s", flow="f") as sess:
        for n in range(BIG):
            sess.learn({"text": f"storm{n} " + "\x01" * (memory.TEXT_MAX_BYTES - 8), "tags": ["big"]})
    return db


@pytest.fixture
def client(big: Path) -> Iterator[TestClient]:
    with client_for(ServeConfig(db=str(big))) as c:
        yield c
    c.app.state.reader.close()  # type: ignore[attr-defined]


def _next(headers: Any) -> str | None:
    found = re.fullmatch(r'<([^>]+)>; rel="next"', headers.get("link", ""))
    return None if found is None else found.group(1)


def _follow(client: TestClient, target: str) -> list[dict[str, Any]]:
    """Every item of a JSON list, its pages followed; each page bounded."""
    listed: list[dict[str, Any]] = []
    url: str | None = target
    while url is not None:
        answer = client.get(url)
        assert answer.status_code == 200, answer.text[:300]
        page = answer.json()
        assert len(answer.content) <= LIST_MAX_BYTES + 7 * MIB  # the bound, and the one item past it
        if len(page) > 1:
            assert len(answer.content) <= LIST_MAX_BYTES + 64
        url = _next(answer.headers)
        assert (answer.headers.get("truncated") == "true") == (url is not None), (url, answer.headers)
        listed += page
    return listed


def test_a_json_list_of_huge_findings_stops_at_its_bytes_and_goes_on_by_its_link(
    client: TestClient, big: Path
) -> None:
    first = client.get("/api/findings?limit=200")
    assert first.status_code == 200 and first.headers["truncated"] == "true"
    assert len(first.json()) == 1 and len(first.content) < 7 * MIB  # was 18,875,700 bytes
    listed = _follow(client, "/api/findings?limit=200")
    assert listed == json_of(flows(big, "recall", "--json", "--limit", "200"))
    assert len({f["key"] for f in listed}) == BIG


def test_a_json_page_of_why_answers_stops_at_its_bytes_and_goes_on_from_where_it_stopped(
    client: TestClient, big: Path
) -> None:
    question = "storm0 storm1 storm2"
    first = client.get("/api/findings", params={"q": question, "limit": 200})
    assert first.headers["truncated"] == "true" and len(first.json()) == 1
    assert "offset=1" in (_next(first.headers) or "")
    listed = _follow(client, f"/api/findings?q={question.replace(' ', '+')}&limit=200")
    expected = json_of(flows(big, "why", question, "--json", "--limit", "200"))
    assert [a["key"] for a in listed] == [a["key"] for a in expected] and len(listed) == BIG


def test_a_page_of_huge_findings_shows_each_text_cut_with_its_length_and_a_link(client: TestClient) -> None:
    for target in ("/findings?limit=200", "/findings?q=storm0+storm1+storm2&limit=200"):
        page = client.get(target)
        assert page.status_code == 200
        assert len(page.content) < 100_000, (target, len(page.content))  # was 3,149,115 bytes
        cut = re.findall(r'<a href="/findings/([0-9a-f]{32})" class="cut">\(([\d,]+) characters', page.text)
        assert len(cut) == BIG and {n for _, n in cut} == {f"{memory.TEXT_MAX_BYTES - 1:,}"}
        assert 'id="truncated"' not in page.text
    whole = client.get(f"/findings/{cut[0][0]}")  # the finding's own page has all of it
    assert whole.status_code == 200 and whole.text.count("\x01") == memory.TEXT_MAX_BYTES - 8


def test_a_page_of_html_stops_at_its_bytes_with_a_note_and_a_link_to_the_rest(tmp_path: Path) -> None:
    # items as large as a finding's limits let them be once its text is cut: every character an
    # ampersand (five bytes as HTML) in the text, the tags, the source and the metadata
    db = tmp_path / "store" / "history.db"
    count = 60
    with memory.MemoryStore(db) as store, store.session(scope="s", flow="f") as sess:
        for n in range(count):
            sess.learn(
                {
                    "text": f"n{n} " + "&" * 2000,  # a list shows 2,000 characters
                    "tags": [f"{n}{i}" + "&" * 200 for i in range(memory.TAGS_MAX)],
                    "source": "&" * 4000,
                    "metadata": {"k": "&" * 16000},
                }
            )
    with client_for(ServeConfig(db=str(db))) as client:
        seen: list[str] = []
        pages = 0
        url: str | None = "/findings?limit=200"
        while url is not None:
            pages += 1
            page = client.get(url.replace("&amp;", "&"))
            assert page.status_code == 200
            assert len(page.content) <= LIST_MAX_BYTES + 64 * 1024  # the bound and its frame
            keys = re.findall(r'<li class="finding" id="finding-([0-9a-f]{32})">', page.text)
            found = re.search(r'<a href="([^"]+)" rel="next">', page.text)
            url = None if found is None else found.group(1)
            assert ('id="truncated"' in page.text) == (url is not None)
            seen += keys
        client.app.state.reader.close()  # type: ignore[attr-defined]
    assert len(seen) == count == len(set(seen)) and pages > 1


def test_a_json_list_of_runs_stops_at_its_bytes(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    flow = write_flow(tmp_path / "big.py", 'return {"x": "\\x01" * 1_000_000}', 'name="big"')
    for _ in range(3):
        assert flows(db, "run", str(flow)).returncode == 0
    with client_for(ServeConfig(db=str(db))) as client:
        first = client.get("/api/runs?limit=500")
        assert first.headers.get("truncated") == "true" and len(first.json()) == 1
        listed = _follow(client, "/api/runs?limit=500")
        page = client.get("/runs?limit=500")
        client.app.state.reader.close()  # type: ignore[attr-defined]
    assert [r["runId"] for r in listed] == [r["runId"] for r in json_of(flows(db, "runs", "--json"))]
    assert 'id="truncated"' in page.text and 'rel="next"' in page.text


def test_the_agent_ledger_stops_at_its_bytes_in_json_and_html(tmp_path: Path) -> None:
    # an entry's size is not capped: a skip's reason of 3 MiB is one valid line, and a page of
    # 50 (or ``limit`` 1000) of them was answered whole
    # (a ledger written before the agent's texts were bounded: the writer now refuses such a reason)
    home = agent_home(tmp_path / "agent")
    reason = "r" * (3 * MIB)
    legacy_skips(home, [f"{n} {reason}" for n in range(BIG)], T0 + 9 * 3600)
    with client_for(ServeConfig(sail_homes=(home,))) as client:
        first = client.get("/api/agents/0/ledger?limit=1000")
        listed = _follow(client, "/api/agents/0/ledger?limit=1000")
        page = client.get("/agents/0")
        client.app.state.reader.close()  # type: ignore[attr-defined]
    assert first.status_code == 200 and first.headers.get("truncated") == "true"
    assert len(first.json()) == 2 and _next(first.headers) is not None
    assert len(listed) == BIG + len(agent_entries())  # each entry once, newest first
    assert [e["ts"] for e in listed] == sorted((e["ts"] for e in listed), reverse=True)
    ledger = page.text.split("<h2>Ledger", 1)[1].split("</section>", 1)[0]  # the skips above are their own
    assert 'id="truncated"' in ledger and 'rel="next"' in ledger
    # the two entries within the bound, each shown cut with its whole length
    assert ledger.count(f"{len(reason) + 2:,} characters in all") == 2 and reason not in ledger


def _session_run(client: TestClient) -> str:
    """The id of the one run of a store filled by one session."""
    runs = client.get("/api/runs").json()
    assert len(runs) == 1
    return str(runs[0]["runId"])


def test_a_runs_timeline_shows_each_learned_text_cut_with_its_length_and_a_link(client: TestClient) -> None:
    # a page of a run's timeline holds 200 records, each learn with its text: 200 texts of 1 MiB
    # made one page hundreds of megabytes (a text of '<' is four times that as HTML)
    run = _session_run(client)
    page = client.get(f"/runs/{run}")
    assert page.status_code == 200
    assert len(page.content) < 100_000, len(page.content)  # was 3,148,828 bytes for these three
    cut = re.findall(r'<a href="/findings/([0-9a-f]{32})" class="cut">\(([\d,]+) characters', page.text)
    assert len(cut) == BIG and {n for _, n in cut} == {f"{memory.TEXT_MAX_BYTES - 1:,}"}
    assert 'id="truncated"' not in page.text
    whole = client.get(f"/findings/{cut[0][0]}")  # the finding's own page has all of it
    assert whole.status_code == 200 and whole.text.count("\x01") == memory.TEXT_MAX_BYTES - 8


def test_a_runs_json_timeline_stops_at_its_bytes_and_goes_on_by_its_link(
    client: TestClient, big: Path
) -> None:
    # ``/api/runs/RUN`` was the whole timeline, however large: three texts of a million control
    # characters made one answer of 18 MiB, a run of 200 of them 1.2 GB
    run = _session_run(client)
    first = client.get(f"/api/runs/{run}")
    assert first.status_code == 200 and first.headers.get("truncated") == "true"
    assert len(first.json()["timeline"]) == 1 and len(first.content) < 7 * MIB
    timeline: list[dict[str, Any]] = []
    url: str | None = f"/api/runs/{run}"
    while url is not None:
        answer = client.get(url)
        assert answer.status_code == 200 and len(answer.content) <= LIST_MAX_BYTES + 7 * MIB
        body = answer.json()
        url = _next(answer.headers)
        assert (answer.headers.get("truncated") == "true") == (url is not None)
        timeline += body.pop("timeline")
        assert body == {k: v for k, v in first.json().items() if k != "timeline"}  # the run, each page
    shown = json_of(flows(big, "show", run, "--json"))
    assert timeline == shown["timeline"] and len(timeline) >= BIG


def test_a_page_of_a_runs_timeline_stops_at_its_bytes_with_a_note_and_a_link_to_the_rest(
    tmp_path: Path,
) -> None:
    # records as large as a finding's limits let them be once every text is cut: 64 tags of 256
    # ampersands (five bytes each as HTML) on each of 200 learns, 16 MiB for one page of 200
    db = tmp_path / "store" / "history.db"
    count = 200
    with memory.MemoryStore(db) as store, store.session(scope="s", flow="f") as sess:
        for n in range(count):
            sess.learn({"text": f"n{n}", "tags": [f"{n}.{i}" + "&" * 240 for i in range(memory.TAGS_MAX)]})
    with client_for(ServeConfig(db=str(db))) as client:
        run = _session_run(client)
        records = [e["citation"]["id"] for e in json_of(flows(db, "show", run, "--json"))["timeline"]]
        seen: list[str] = []
        parts: list[int] = []
        url: str | None = f"/runs/{run}"
        while url is not None:
            page = client.get(url.replace("&amp;", "&"))
            assert page.status_code == 200
            assert len(page.content) <= LIST_MAX_BYTES + 64 * 1024  # the bound and its frame
            rows = re.findall(r'<tr id="rec-([0-9a-f]{16})"', page.text)
            seen += rows
            parts.append(len(rows))
            found = re.search(r'<a href="([^"]+)" rel="next">', page.text)
            url = None if found is None else found.group(1)
            assert ('id="truncated"' in page.text) == (url is not None)
        last = records[parts[0] + 1]  # a record past the first part's cut opens a part holding it
        marked = client.get(f"/runs/{run}?record={last}")
        client.app.state.reader.close()  # type: ignore[attr-defined]
    assert seen == records[: len(seen)] and len(seen) == min(len(records), 200) and len(parts) > 1
    assert f'<tr id="rec-{last}" class="entry kind-learn selected">' in marked.text
    assert 'id="page-start"' in marked.text

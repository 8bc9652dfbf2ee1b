"""Every route of the dashboard over HTTP: pages, the JSON API in the CLI's shapes, paging, escaping."""

from __future__ import annotations

import re
import shutil
import urllib.parse
from html import escape as html_escape
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

import memory
from flows._cli import main as flows_main
from flows.web import ServeConfig
from flows.web._agent import CHART_SCAN
from flows.web._app import MAX_SCOPE_CHOICES
from memory.ledger import ActivityLog, Ledger, Skipped, TickFinished, TickStarted
from sail._cli import main as sail_main
from tests.web.conftest import client_for
from tests.web.stores import (
    FAILED_TICK_MESSAGE,
    FORGET_REASON,
    REVERT_REASON,
    SCRIPT_META_KEY,
    SCRIPT_TAG,
    SCRIPT_TEXT,
    T0,
    DemoStore,
    agent_entries,
    failed_ticks,
)


def cli_json(capsys: pytest.CaptureFixture[str], main: Any, *argv: str) -> Any:
    capsys.readouterr()
    assert main(list(argv)) == 0
    return orjson.loads(capsys.readouterr().out)


def follow(client: TestClient, url: str) -> list[Any]:
    """Every item of a paged JSON list, following ``Link: rel=next`` (bounded)."""
    items: list[Any] = []
    for _ in range(100):
        response = client.get(url)
        assert response.status_code == 200, response.text
        items.extend(response.json())
        link = response.headers.get("link")
        if link is None:
            return items
        url = re.fullmatch(r'<([^>]+)>; rel="next"', link).group(1)  # type: ignore[union-attr]
    raise AssertionError("paging did not end")


# -- runs -------------------------------------------------------------------------------------


def test_the_runs_api_is_what_flows_runs_json_prints(
    client: TestClient, demo: DemoStore, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = cli_json(capsys, flows_main, "runs", "--db", str(demo.db), "--json")
    assert client.get("/api/runs").json() == expected
    assert {r["state"] for r in expected} == {"done", "failed", "interrupted"}


def test_the_runs_page_shows_each_run_with_its_state_flow_and_error(
    client: TestClient, demo: DemoStore
) -> None:
    html = client.get("/runs").text
    for run_id in (demo.done_run, demo.later_run, demo.failed_run, demo.interrupted_run):
        assert f'href="/runs/{run_id}"' in html
    assert re.search(r'class="badge state-interrupted">interrupted<', html)
    assert "flaky-sensor" in html and "flow_failed" in html and "the sensor did not answer" in html
    assert 'failed <span class="count">1</span>' in html


def test_the_state_filter_keeps_only_that_state(client: TestClient, demo: DemoStore) -> None:
    rows = client.get("/api/runs", params={"state": "failed"}).json()
    assert [r["runId"] for r in rows] == [demo.failed_run]
    html = client.get("/runs", params={"state": "done"}).text
    assert demo.done_run in html and demo.failed_run not in html


def test_runs_page_by_cursor_through_every_run_once(client: TestClient) -> None:
    every = client.get("/api/runs").json()
    paged = follow(client, "/api/runs?limit=1")
    assert paged == every and len(paged) == 5
    html = client.get("/runs", params={"limit": 2}).text
    assert 'rel="next"' in html and "cursor=" in html


def test_a_query_parameter_the_listing_does_not_know_is_ignored_and_not_carried_on(
    client: TestClient,
) -> None:
    for base in ("/api/runs", "/runs"):
        response = client.get(base, params={"limit": "1", "state": "done", "path": "x", "base": "y"})
        assert response.status_code == 200, base
    link = client.get("/api/runs", params={"limit": "1", "state": "done", "path": "x"}).headers["link"]
    assert link.startswith("</api/runs?state=done&limit=1&cursor=") and "path" not in link


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"state": "sleeping"}, "serve_bad_request"),
        ({"limit": "0"}, "serve_bad_request"),
        ({"limit": "x"}, "serve_bad_request"),
        ({"cursor": "20990101T000000-0000000000"}, "serve_bad_request"),
    ],
)
def test_bad_runs_parameters_are_coded_400s(client: TestClient, params: dict[str, str], code: str) -> None:
    response = client.get("/api/runs", params=params)
    assert response.status_code == 400
    assert response.json()["code"] == code
    page = client.get("/runs", params=params)
    assert page.status_code == 400 and code in page.text


def test_a_runs_page_is_what_flows_show_json_prints(
    client: TestClient, demo: DemoStore, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = cli_json(capsys, flows_main, "show", demo.done_run, "--db", str(demo.db), "--json")
    assert client.get(f"/api/runs/{demo.done_run}").json() == expected
    html = client.get(f"/runs/{demo.done_run}").text
    kinds = [e["kind"] for e in expected["timeline"]]
    assert kinds.count("learn") == 6 and "step" in kinds and "output" in kinds
    for entry in expected["timeline"]:
        record = entry["citation"]["id"]
        assert f'id="rec-{record}"' in html  # every record is cited, and can be linked to
    assert "rain follows a falling barometer" in html and "barometer#1" in html


def test_a_record_picks_and_marks_its_row(client: TestClient, demo: DemoStore) -> None:
    record = client.get(f"/api/runs/{demo.done_run}").json()["timeline"][3]["citation"]["id"]
    html = client.get(f"/runs/{demo.done_run}", params={"record": record}).text
    assert f'id="rec-{record}" class="entry kind-learn selected"' in html


@pytest.mark.parametrize(
    ("run_id", "code"),
    [("20990101T000000-0000000000", "journal_run_not_found"), ("-not-a-run", "journal_name_invalid")],
)
def test_an_unknown_or_unsafe_run_id_is_a_coded_404(client: TestClient, run_id: str, code: str) -> None:
    response = client.get(f"/api/runs/{run_id}")
    assert response.status_code == 404 and response.json()["code"] == code
    page = client.get(f"/runs/{run_id}")
    assert page.status_code == 404 and code in page.text


# -- findings ---------------------------------------------------------------------------------


def test_the_findings_api_is_what_flows_recall_json_prints(
    client: TestClient, demo: DemoStore, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = cli_json(capsys, flows_main, "recall", "--db", str(demo.db), "--json", "--limit", "25")
    assert client.get("/api/findings").json() == expected
    assert len(expected) == 8  # eight learned, one superseded by a ninth, one forgotten, a tenth


def test_a_question_is_answered_by_why_ranked_as_flows_why_json(
    client: TestClient, demo: DemoStore, capsys: pytest.CaptureFixture[str]
) -> None:
    question = "why do storms follow falling pressure"
    expected = cli_json(capsys, flows_main, "why", question, "--db", str(demo.db), "--json", "--limit", "25")
    assert client.get("/api/findings", params={"q": question}).json() == expected
    assert "pressure drops fast before a storm" in [a["text"] for a in expected]
    html = client.get("/findings", params={"q": question}).text
    assert "<bdi>station</bdi>=<code><bdi>&#34;EGLL&#34;</bdi></code>" in html
    assert "<bdi>hPa</bdi>=<code><bdi>990</bdi></code>" in html


def test_matched_words_are_highlighted_and_each_finding_cites_its_record(client: TestClient) -> None:
    answers = client.get("/api/findings", params={"q": "barometer"}).json()
    html = client.get("/findings", params={"q": "barometer"}).text
    assert "rain follows a falling <mark>barometer</mark>" in html
    cite = answers[0]["journal"]
    href = f'href="/runs/{cite["runId"]}?record={cite["id"]}#rec-{cite["id"]}"'
    assert href in html
    assert client.get(f"/runs/{cite['runId']}", params={"record": cite["id"]}).status_code == 200


def test_a_finding_holding_a_script_shows_as_text(client: TestClient, demo: DemoStore) -> None:
    for url in ("/findings", "/findings?q=storms", f"/runs/{demo.later_run}"):
        html = client.get(url).text
        assert "<script" not in html and "<b>gales" not in html
        assert "&lt;script&gt;alert(&#34;owned&#34;)&lt;/script&gt;" in html, url
    assert SCRIPT_TEXT in [f["text"] for f in client.get("/api/findings").json()]


def test_tag_source_and_scope_filters_apply(client: TestClient) -> None:
    tagged = client.get("/api/findings", params={"tag": "fog"}).json()
    assert [f["text"] for f in tagged] == ["fog forms when the air cools to its dew point"]
    assert {f["source"] for f in client.get("/api/findings", params={"source": "storm-watch"}).json()} == {
        "storm-watch"
    }
    assert client.get("/api/findings", params={"scope": "nowhere"}).json() == []
    assert client.get("/api/findings", params={"q": "pressure", "tag": "wind"}).json()[0]["tags"] == [
        "wind",
        "pressure",
    ]


def test_findings_page_by_time_through_every_finding_once(client: TestClient) -> None:
    every = client.get("/api/findings", params={"limit": 200}).json()
    paged = follow(client, "/api/findings?limit=3")
    assert [f["key"] for f in paged] == [f["key"] for f in every]
    assert client.get("/api/findings", params={"cursor": "x.1"}).json()["code"] == "serve_bad_request"


def test_tag_and_metadata_filters_are_the_memory_apis_as_flows_recall_prints_them(
    client: TestClient, demo: DemoStore, capsys: pytest.CaptureFixture[str]
) -> None:
    db = ("--db", str(demo.db), "--json", "--limit", "25")
    for params, argv in [
        ([("tag", "storm"), ("tag", "pressure")], ["--tag", "storm", "--tag", "pressure"]),
        ([("meta", "station=EGLL")], ["--meta", "station=EGLL"]),
        ([("meta", "hPa=990"), ("tag", "storm")], ["--meta", "hPa=990", "--tag", "storm"]),
        ([("meta", "hPa=991")], ["--meta", "hPa=991"]),
        ([("meta", "hPa=990.0")], ["--meta", "hPa=990.0"]),
    ]:
        expected = cli_json(capsys, flows_main, "recall", *db, *argv)
        assert client.get("/api/findings", params=params).json() == expected, params
    both = client.get("/api/findings", params=[("tag", "storm"), ("tag", "pressure")]).json()
    assert [f["text"] for f in both] == ["pressure drops fast before a storm"]
    assert client.get("/api/findings", params={"meta": "hPa=991"}).json() == []
    question = "storm pressure"
    expected = cli_json(capsys, flows_main, "why", question, *db, "--meta", "station=EGLL")
    answers = client.get("/api/findings", params={"q": question, "meta": "station=EGLL"}).json()
    assert answers == expected and [a["text"] for a in answers] == ["pressure drops fast before a storm"]
    html = client.get("/findings", params=[("tag", "storm"), ("meta", "station=EGLL")]).text
    assert html.count('<li class="finding"') == 1
    assert 'name="tag" value="storm"' in html and 'name="meta" value="station=EGLL"' in html


def test_filtered_findings_page_through_every_match_once_keeping_every_filter(client: TestClient) -> None:
    every = client.get("/api/findings", params=[("tag", "weather"), ("limit", "200")]).json()
    paged = follow(client, "/api/findings?tag=weather&tag=&meta=&limit=2")
    assert [f["key"] for f in paged] == [f["key"] for f in every] and len(paged) == 3
    first = client.get("/api/findings?tag=weather&tag=pressure&meta=&limit=1&source=observation")
    assert len(first.json()) == 1 and "link" not in first.headers  # one finding has both tags
    link = client.get("/api/findings?tag=pressure&tag=weather&q=rain+wind&limit=1").headers["link"]
    assert "tag=pressure&tag=weather" in link and "q=rain+wind" in link and "limit=2" in link


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ([("meta", "station")], "serve_bad_request"),
        ([("meta", "=EGLL")], "serve_bad_request"),
        ([("meta", "hPa=1"), ("meta", "hPa=2")], "serve_bad_request"),
        ([("tag", "x" * 2000)], "serve_bad_request"),
        ([("tag", str(n)) for n in range(40)], "serve_bad_request"),
        ([("tag", "   ")], "memory_argument_invalid"),
        ([("q", "storm"), ("tag", "   ")], "memory_argument_invalid"),
        # read exact and refused, never filtered on as the float orjson reads it as
        ([("meta", "hPa=18446744073709551616")], "memory_argument_invalid"),
    ],
)
def test_bad_filters_are_coded_400s_on_the_page_and_in_the_json(
    client: TestClient, params: list[tuple[str, str]], code: str
) -> None:
    response = client.get("/api/findings", params=params)
    assert response.status_code == 400 and response.json()["code"] == code
    page = client.get("/findings", params=params)
    assert page.status_code == 400 and code in page.text and "Traceback" not in page.text


def test_markup_in_a_tag_metadata_or_filter_shows_as_text(client: TestClient) -> None:
    marked = client.get("/api/findings", params={"tag": SCRIPT_TAG}).json()
    assert [f["metadata"] for f in marked] == [{SCRIPT_META_KEY: SCRIPT_TEXT}]
    key = marked[0]["key"]
    urls = [
        "/findings",
        f"/findings/{key}",
        "/findings?" + urllib.parse.urlencode({"tag": SCRIPT_TAG}),
        "/findings?" + urllib.parse.urlencode({"meta": f"{SCRIPT_META_KEY}={SCRIPT_TEXT}", "q": "<script>x"}),
        "/findings?" + urllib.parse.urlencode({"meta": "<script>bad</script>"}),
    ]
    for url in urls:
        html = client.get(url).text
        assert "<script" not in html and "<b>key" not in html and "<b>gales" not in html, url
        assert "&lt;script&gt;" in html, url


# -- a finding's history ----------------------------------------------------------------------


def test_an_old_versions_history_is_its_whole_memorys_when_each_version_came_in_its_own_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "history.db"
    versions = []
    with memory.MemoryStore(db) as store:
        with store.session(scope="notes", flow="editor") as s:
            versions.append(s.learn({"text": "the library opens at eight"}))
        for hour in ("nine", "ten"):
            with store.session(scope="notes", flow="editor") as s:
                versions.append(s.update(versions[0].memory_id, {"text": f"the library opens at {hour}"}))
        with store.session(scope="notes", flow="closer") as s:
            s.forget(versions[-1].key, reason="the library closed for good")
    first = versions[0].key
    expected = cli_json(capsys, flows_main, "history", first, "--db", str(db), "--json")
    assert [e["kind"] for e in expected["events"]][-1] == "forgotten"
    with client_for(ServeConfig(db=str(db))) as c:
        assert c.get(f"/api/findings/{first}/history").json() == expected
        assert "the library closed for good" in c.get(f"/findings/{first}").text
        c.app.state.reader.close()  # type: ignore[attr-defined]


def test_an_erased_memory_shows_as_erased_and_nothing_of_what_it_said(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    with memory.MemoryStore(db) as store, store.session(scope="people", flow="crm") as s:
        first = s.learn({"text": "alice's phone is 555-0100", "tags": ["alice"]})
        second = s.update(first.memory_id, {"text": "alice's phone is 555-0199", "tags": ["alice"]})
    with memory.MemoryStore(db) as store, store.session(scope="people", flow="gdpr") as s:
        s.erase(second.key, reason="alice asked")
    with client_for(ServeConfig(db=str(db))) as c:
        pages = {v.key: c.get(f"/findings/{v.key}").text for v in (first, second)}
        run = c.get(f"/api/findings/{first.key}/history").json()["events"][0]["citation"]["runId"]
        timeline = c.get(f"/runs/{run}").text
        c.app.state.reader.close()  # type: ignore[attr-defined]
    for html in pages.values():
        assert 'id="finding-state">erased</span>' in html
        assert "Erased: <bdi>alice asked" in html and "the journal keeps what it said" not in html
        assert "555-01" not in html and "None" not in html
    assert timeline.count('<span class="muted erased">erased</span>') == 2
    assert "555-01" not in timeline and "None" not in timeline


def test_a_store_of_many_scopes_gets_a_scope_box_not_a_menu_of_every_scope(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    with memory.MemoryStore(db) as store:
        for n in range(MAX_SCOPE_CHOICES + 1):  # a scope per user
            with store.session(scope=f"user-{n:04d}", flow="notes") as s:
                s.learn({"text": f"user {n} prefers tea"})
    with client_for(ServeConfig(db=str(db))) as c:
        html = c.get("/findings", params={"scope": "user-0042"}).text
        assert "<select" not in html and 'name="scope" value="user-0042"' in html
        assert html.count("<option") == MAX_SCOPE_CHOICES  # the box's suggestions (tests/web/test_scopes.py)
        assert "user 42 prefers tea" in html and "user 43 prefers tea" not in html
        c.app.state.reader.close()  # type: ignore[attr-defined]


def test_a_superseded_finding_shows_its_history_and_links_each_event_to_its_record(
    client: TestClient, demo: DemoStore, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = cli_json(capsys, flows_main, "history", demo.superseded, "--db", str(demo.db), "--json")
    assert client.get(f"/api/findings/{demo.superseded}/history").json() == expected
    assert [(e["kind"], e["key"]) for e in expected["events"]] == [
        ("learned", demo.superseded),
        ("learned", demo.replacement),
        ("superseded", demo.superseded),
    ]
    html = client.get(f"/findings/{demo.superseded}").text
    assert '<span class="badge finding-superseded" id="finding-state">superseded</span>' in html
    assert f'Superseded by <a href="/findings/{demo.replacement}">' in html
    assert "a red sky at night often means fair weather next day" in html  # what it said
    for event in expected["events"]:
        cite = event["citation"]
        href = f'href="/runs/{cite["runId"]}?record={cite["id"]}#rec-{cite["id"]}"'
        assert href in html, event["kind"]
        run = client.get(f"/runs/{cite['runId']}", params={"record": cite["id"]}).text
        assert f'id="rec-{cite["id"]}" class="entry kind-' in run and " selected" in run
    assert expected["events"][2]["citation"]["runId"] == demo.revise_run
    assert client.get(f"/api/findings/{demo.superseded}").status_code == 404  # not live
    replacement = client.get(f"/findings/{demo.replacement}").text
    assert 'id="finding-state">live</span>' in replacement and 'class="badge kind-learned"' in replacement


def test_a_forgotten_finding_is_shown_as_such_on_its_page_and_nowhere_in_search(
    client: TestClient, demo: DemoStore
) -> None:
    html = client.get(f"/findings/{demo.forgotten}").text
    assert 'id="finding-state">forgotten</span>' in html
    reason = "&lt;script&gt;alert(&#39;gone&#39;)&lt;/script&gt; wrong in the tropics"
    assert f"Forgotten: <bdi>{reason}</bdi>" in html
    assert "<script" not in html
    history = client.get(f"/api/findings/{demo.forgotten}/history").json()["events"]
    assert [(e["kind"], e["reason"]) for e in history] == [("learned", None), ("forgotten", FORGET_REASON)]
    for params in ({}, {"q": "snow air ground"}, {"tag": "snow"}, {"limit": "200"}):
        keys = [f["key"] for f in client.get("/api/findings", params=params).json()]
        assert demo.forgotten not in keys and demo.superseded not in keys, params
    for url in ("/findings", "/findings?q=snow+ground", "/findings?q=red+sky"):
        page = client.get(url).text
        assert f'id="finding-{demo.forgotten}"' not in page and f'id="finding-{demo.superseded}"' not in page
    assert f'id="finding-{demo.replacement}"' in client.get("/findings?q=red+sky").text


def test_a_finding_forgotten_while_the_server_runs_shows_it_on_the_next_request(
    demo: DemoStore, tmp_path: Path
) -> None:
    """The runs each history reads are remembered per done run; a new run is read when it comes."""
    shutil.copytree(demo.db.parent, tmp_path / "store")
    db = tmp_path / "store" / "history.db"
    with client_for(ServeConfig(db=str(db))) as client:
        live = client.get("/api/findings", params={"tag": "fog", "limit": 1}).json()[0]["key"]
        with memory.MemoryStore(db) as store, store.session(scope="weather", flow="later-forget") as s:
            s.learn({"text": "mist lifts by noon", "tags": ["fog"]})  # its run is begun: running
            kinds = [e["kind"] for e in client.get(f"/api/findings/{live}/history").json()["events"]]
            assert kinds == ["learned"]  # read while that run names other keys only
            s.forget(live, reason="fog is not that simple")  # the same run, which the server has seen
            history = client.get(f"/api/findings/{live}/history").json()["events"]
            assert [(e["kind"], e["reason"]) for e in history] == [
                ("learned", None),
                ("forgotten", "fog is not that simple"),
            ]
        superseded = client.get("/api/findings", params={"tag": "fog", "limit": 1}).json()[0]["key"]
        superseded_events = client.get(f"/api/findings/{superseded}/history").json()["events"]
        assert [e["kind"] for e in superseded_events] == ["learned"]
        with memory.MemoryStore(db) as store, store.session(scope="weather", flow="later") as s:
            s.learn({"text": "mist lifts by noon, fog by one"}, supersedes=superseded)  # a run not seen
        assert 'id="finding-state">superseded</span>' in client.get(f"/findings/{superseded}").text
        client.app.state.reader.close()  # type: ignore[attr-defined]


def test_an_unknown_key_is_a_coded_404_and_a_malformed_one_a_coded_400(client: TestClient) -> None:
    page = client.get("/findings/" + "0" * 32)
    assert page.status_code == 404 and "serve_not_found" in page.text
    history = client.get("/api/findings/" + "0" * 32 + "/history")
    assert history.status_code == 404 and history.json()["code"] == "memory_finding_unknown"
    for url in ("/findings/not-a-key", "/api/findings/not-a-key/history"):
        response = client.get(url)
        assert response.status_code == 400 and "memory_argument_invalid" in response.text


# -- agents -----------------------------------------------------------------------------------


def test_the_agents_are_listed(client: TestClient, agent: Path) -> None:
    assert client.get("/api/agents").json() == [
        {"number": 0, "home": str(agent), "ledger": str(agent / ".sail" / "memory" / "ledger.jsonl")}
    ]
    assert 'href="/agents/0"' in client.get("/agents").text


def test_the_ledger_api_pages_backwards_through_the_whole_ledger(client: TestClient, agent: Path) -> None:
    wire = [e.to_wire() for e in Ledger(agent / ".sail").entries()]
    assert wire == [e.to_wire() for e in agent_entries()]
    assert follow(client, "/api/agents/0/ledger?limit=4") == list(reversed(wire))
    assert client.get("/api/agents/0/ledger", params={"before": "7"}).status_code == 400


def test_why_is_what_sail_why_json_prints(
    client: TestClient, agent: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = cli_json(capsys, sail_main, "why", "--home", str(agent), "--json")
    assert client.get("/api/agents/0/why").json() == expected
    assert len(expected) == 3


def test_status_agrees_with_sail_status_and_says_what_blocks(
    client: TestClient, agent: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = client.get("/api/agents/0/status").json()
    expected = cli_json(capsys, sail_main, "status", "--home", str(agent), "--json")
    for key in (
        "lastConfirmed",
        "intervalS",
        "openDispatches",
        "ledger",
        "lastTick",
        "failedTicksSinceSuccess",
        "failedTicksCountedAll",
    ):
        assert status[key] == expected[key], key
    assert status["lastConfirmed"]["txHash"] == f"0x{3:064x}"
    assert status["blockedBy"]["kind"] == "balance"
    assert status["nextEligibleMs"] is None
    last_ts, last_code = failed_ticks()[-1]
    assert status["lastTick"] == {
        "tsMs": (last_ts + 2) * 1000, "outcome": "failed", "code": last_code, "message": FAILED_TICK_MESSAGE,
        "reason": None, "txHash": None,
    }  # fmt: skip
    assert (status["failedTicksSinceSuccess"], status["failedTicksCountedAll"]) == (2, True)


def test_the_agent_page_shows_the_last_tick_its_outcome_and_the_failures_since(client: TestClient) -> None:
    html = client.get("/agents/0").text
    tick = re.search(r'<dd id="last-tick">(.*?)</dd>', html, re.S)
    assert tick is not None
    assert '<span class="badge outcome-failed">failed</span>' in tick.group(1)
    assert '<code class="code"><bdi>chain_unavailable</bdi></code>' in tick.group(1)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in tick.group(1) and "<script" not in html
    assert re.search(r'<dd id="failed-ticks">2</dd>', html)


def test_the_last_tick_is_read_back_only_to_the_last_good_one_and_says_what_it_did(
    agent: Path, tmp_path: Path
) -> None:
    home = tmp_path / "agent"
    shutil.copytree(agent, home)
    log = ActivityLog(home / ".sail")
    log.append(TickStarted(T0 + 9 * 3600, 300))
    log.append(TickFinished(T0 + 9 * 3600 + 1, 300, "submitted", tx_hash=f"0x{9:064x}"))
    with client_for(ServeConfig(sail_homes=(home,))) as c:
        status = c.get("/api/agents/0/status").json()
        assert status["lastTick"]["outcome"] == "submitted" and status["failedTicksSinceSuccess"] == 0
        assert f'acted: tx <code class="tx" title="0x{9:064x}">0x0000…0009</code>' in c.get("/agents/0").text
        log.append(TickStarted(T0 + 10 * 3600, 301))
        log.append(TickFinished(T0 + 10 * 3600 + 1, 301, "skipped", reason="cadence: last acted 1s ago"))
        log.append(TickStarted(T0 + 11 * 3600, 302))  # began, not finished: running (or killed)
        status = c.get("/api/agents/0/status").json()
        assert status["lastTick"]["outcome"] == "running" and status["failedTicksSinceSuccess"] == 0
        assert "still running, or killed" in c.get("/agents/0").text
        c.app.state.reader.close()  # type: ignore[attr-defined]
    empty = tmp_path / "fresh"
    (empty / ".sail").mkdir(parents=True)
    with client_for(ServeConfig(sail_homes=(empty,))) as c:
        assert c.get("/api/agents/0/status").json()["lastTick"] is None
        assert "none recorded" in c.get("/agents/0").text
        c.app.state.reader.close()  # type: ignore[attr-defined]


def test_the_agent_page_shows_the_ledger_cadence_skips_and_one_point_per_acted_entry(
    client: TestClient,
) -> None:
    html = client.get("/agents/0").text
    assert html.count('<tr class="entry acted') == 3 and html.count('<tr class="entry skipped"') == 3
    assert "<bdi>swap</bdi> <bdi>25.0 USDC</bdi> → <bdi>0.00982134 WETH</bdi>" in html
    assert f'<code class="tx" title="0x{1:064x}">0x0000…0001</code>' in html
    assert "balance 10.0 USDC (10000000) &lt; min 25.0 USDC" in html
    assert "balance 10000000 &lt; min 25000000" not in html  # shown converted, kept as stored
    assert f"(reverted: <bdi>{REVERT_REASON}</bdi>)" in html
    charts = re.findall(r"<svg class=\"chart\".*?</svg>", html, re.S)
    assert len(charts) == 2  # USDC and WETH
    for svg in charts:
        assert len(re.findall(r'<circle class="point', svg)) == 3
        assert len(re.findall(r'<circle class="point reverted hollow"', svg)) == 1
    assert "blocked" in html and "cadence: last acted 48s ago" in html


def test_the_chart_reads_only_the_newest_ledger_lines_however_few_of_them_acted(
    agent: Path, tmp_path: Path
) -> None:
    home = tmp_path / "agent"
    shutil.copytree(agent, home)
    with Ledger(home / ".sail").writer() as writer:  # a long run of skips after the demo's trades
        for n in range(CHART_SCAN):
            writer.append(Skipped(ts=T0 + 86_400 + n, block=100 + n, chain_id=31337, reason="cadence"))
    with client_for(ServeConfig(sail_homes=(home,))) as c:
        assert c.get("/api/agents/0/balances").json() == {}
        html = c.get("/agents/0").text
        assert f"no balances recorded in the last {CHART_SCAN} ledger lines" in html
        assert "<svg" not in html
        c.app.state.reader.close()  # type: ignore[attr-defined]


def test_the_balances_api_has_one_point_per_acted_entry(client: TestClient) -> None:
    balances = client.get("/api/agents/0/balances").json()
    assert [b["symbol"] for b in balances.values()] == ["USDC", "WETH"]
    usdc = next(iter(balances.values()))
    assert [p["balance"] for p in usdc["points"]] == ["35000000", None, "10000000"]
    assert [p["outcome"] for p in usdc["points"]] == ["confirmed", "reverted", "confirmed"]


def test_the_journal_api_is_what_sail_journal_days_json_prints(
    client: TestClient, agent: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    told = client.get("/api/agents/0/journal").json()
    assert told == cli_json(capsys, sail_main, "journal", "--home", str(agent), "--days", "2", "--json")
    assert told["sinceMs"] == (T0 - 86_400) * 1000
    assert [d["date"] for d in told["days"]] == ["2025-12-31", "2026-01-01"]
    assert [s["kind"] for s in told["days"][0]["sentences"]] == ["gap"]  # no tick the day before
    assert told == cli_json(
        capsys, sail_main, "journal", "--home", str(agent), "--since", "2025-12-31T00:00:00Z", "--json"
    )
    one = client.get("/api/agents/0/journal", params={"days": "1"}).json()
    assert one["sinceMs"] == T0 * 1000 and one["days"] == told["days"][1:]
    for bad in ("0", "367", "x"):
        response = client.get("/api/agents/0/journal", params={"days": bad})
        assert response.status_code == 400 and response.json()["code"] == "serve_bad_request"


def test_the_agent_page_tells_the_journal_each_sentence_citing_its_lines(
    client: TestClient, agent: Path
) -> None:
    html = client.get("/agents/0").text
    section = re.search(r'<section class="journal" id="journal">(.*?)</section>', html, re.S)
    assert section is not None
    told = client.get("/api/agents/0/journal").json()
    sentences = [s for d in told["days"] for s in d["sentences"]]
    assert len(re.findall(r'<li class="sentence kind-', section.group(1))) == len(sentences) > 0
    for s in sentences:
        assert html_escape(s["text"], quote=False) in section.group(1)
        for c in s["cites"]:
            mark = "L" if c["file"] == "ledger" else "A"
            title = f"{c['file']} line {c['line']} sha256 {c['sha256']}"
            assert f'title="{title}">{mark}{c["line"]}</code>' in html
    assert f"reason: {REVERT_REASON}" in section.group(1)
    assert "Blocked on balance" in section.group(1) and "10.0 USDC (10000000)" in section.group(1)


def test_an_empty_agent_page_says_its_journal_has_no_entries(tmp_path: Path) -> None:
    empty = tmp_path / "fresh"
    (empty / ".sail").mkdir(parents=True)
    with client_for(ServeConfig(sail_homes=(empty,))) as c:
        assert c.get("/api/agents/0/journal").json()["days"] == []
        assert "no entries yet" in c.get("/agents/0").text.split('id="journal"')[1]
        c.app.state.reader.close()  # type: ignore[attr-defined]


def test_an_unknown_agent_is_a_coded_404(client: TestClient) -> None:
    response = client.get("/api/agents/7/status")
    assert response.status_code == 404 and response.json()["code"] == "serve_not_found"
    assert client.get("/agents/7").status_code == 404


@pytest.mark.parametrize("path", ["/nowhere/" + "x" * 12_000, "/api/nowhere/" + "y" * 12_000])
def test_an_unknown_path_of_any_length_is_echoed_cut_short(client: TestClient, path: str) -> None:
    answer = client.get(path)
    assert answer.status_code == 404 and "serve_not_found" in answer.text
    assert "x" * 100 not in answer.text and "y" * 100 not in answer.text
    assert len(answer.text) < (400 if path.startswith("/api") else 20_000)


@pytest.mark.parametrize("number", ["9" * 5_000, "-1", "abc", "1e3"])
def test_an_agent_number_of_any_text_is_a_coded_404_never_a_crash(client: TestClient, number: str) -> None:
    api = client.get(f"/api/agents/{number}/ledger")
    assert api.status_code == 404 and api.json()["code"] == "serve_not_found"
    assert len(api.text) < 400
    page = client.get(f"/agents/{number}")
    assert page.status_code == 404 and "serve_not_found" in page.text


@pytest.mark.parametrize(
    "url",
    [
        "/api/agents/0/ledger?limit=" + "9" * 5_000,
        "/api/agents/0/why?limit=" + "9" * 5_000,
        "/api/agents/0/journal?days=" + "9" * 5_000,
        "/api/agents/0/ledger?before=" + "x" * 20_000,
        "/api/runs?state=" + "x" * 20_000,
        "/api/runs?cursor=" + "x" * 20_000,
        "/api/findings?cursor=" + "x" * 20_000,
    ],
    ids=lambda url: url[:32],
)
def test_a_pasted_page_as_a_parameter_is_a_short_coded_400(client: TestClient, url: str) -> None:
    response = client.get(url)
    assert response.status_code == 400 and response.json()["code"] == "serve_bad_request"
    assert len(response.text) < 600, response.text[:300]


# -- the rest ---------------------------------------------------------------------------------


def test_the_root_goes_to_runs_and_unknown_paths_are_coded_404s(client: TestClient) -> None:
    assert client.get("/").headers["location"] == "/runs"
    page = client.get("/nowhere")
    assert page.status_code == 404 and "serve_not_found" in page.text
    assert client.get("/api/nowhere").json()["code"] == "serve_not_found"


def test_only_get_is_served(client: TestClient) -> None:
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        response = client.request(method, "/api/runs")
        assert response.status_code == 405 and response.headers["allow"] == "GET, HEAD"


def test_every_answer_carries_the_security_headers_and_the_stylesheet_is_served(client: TestClient) -> None:
    css = client.get("/static/style.css")
    assert css.status_code == 200 and "svg.chart" in css.text
    for url in ("/runs", "/api/runs", "/static/style.css", "/nowhere"):
        headers = client.get(url).headers
        assert headers["content-security-policy"].startswith("default-src 'none'")
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["cache-control"] == "no-store"


def test_pages_load_nothing_from_elsewhere_and_run_no_script(client: TestClient, demo: DemoStore) -> None:
    for url in ("/runs", f"/runs/{demo.done_run}", "/findings?q=rain", "/agents/0"):
        html = client.get(url).text
        assert "<script" not in html
        assert not re.search(r'(src|href)="(https?:)?//', html), url


def test_a_finding_has_its_own_page_and_json_from_its_key(client: TestClient) -> None:
    every = client.get("/api/findings").json()
    first = every[0]
    assert client.get(f"/api/findings/{first['key']}").json() == first
    html = client.get(f"/findings/{first['key']}").text
    cite = first["citation"]
    assert f'href="/runs/{cite["runId"]}?record={cite["id"]}#rec-{cite["id"]}"' in html
    assert f'href="/findings/{first["key"]}"' in client.get("/findings").text
    missing = client.get("/api/findings/" + "0" * 32)
    assert missing.status_code == 404 and missing.json()["code"] == "serve_not_found"
    bad = client.get("/api/findings/not-a-key")
    assert bad.status_code == 400 and bad.json()["code"] == "memory_argument_invalid"


def test_a_failed_runs_page_shows_its_recorded_traceback(client: TestClient, demo: DemoStore) -> None:
    api = client.get(f"/api/runs/{demo.failed_run}").json()
    recorded = api["error"]["traceback"]
    assert recorded.startswith("Traceback (most recent call last)")
    html = client.get(f"/runs/{demo.failed_run}").text
    assert '<details class="traceback"><summary>traceback</summary><pre>' in html
    last = recorded.strip().splitlines()[-1]
    assert html_escape(last) in html


def test_each_version_of_a_memory_has_its_own_page_with_its_own_text_and_end(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    with memory.MemoryStore(db) as store, store.session(scope="notes", flow="editor") as s:
        first = s.learn({"text": "the library opens at eight"})
        second = s.update(first.memory_id, {"text": "the library opens at nine"})
        third = s.update(first.memory_id, {"text": "the library opens at ten"})
        s.forget(third.key, reason="the library closed for good")
    with client_for(ServeConfig(db=str(db))) as client:
        pages = {v.key: client.get(f"/findings/{v.key}").text for v in (first, second, third)}
        client.app.state.reader.close()  # type: ignore[attr-defined]
    said = {first.key: "eight", second.key: "nine", third.key: "ten"}
    for key, html in pages.items():
        shown = re.search(r'<p class="text big was"><bdi>([^<]*)</bdi></p>', html)
        assert shown is not None and shown.group(1) == f"the library opens at {said[key]}", key
    assert 'id="finding-state">superseded</span>' in pages[second.key]
    assert f'Superseded by <a href="/findings/{third.key}">' in pages[second.key]
    assert f'Superseded by <a href="/findings/{second.key}">' in pages[first.key]
    assert 'id="finding-state">forgotten</span>' in pages[third.key]
    assert "Forgotten: <bdi>the library closed for good" in pages[third.key]

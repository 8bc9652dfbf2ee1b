"""The dashboard in a real browser: headless Chromium (Debian's) against a real ``flows serve`` on a
free loopback port, over the demo store and agent home. Each page's DOM, as the browser built it, is
checked for what a person must see, and its screenshot is kept in ``test-artifacts/web/``."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import orjson
import pytest

from tests.conftest import ROOT
from tests.web.stores import DemoStore

ARTIFACTS = ROOT / "test-artifacts" / "web"
TOKEN = "browser-test-token-0123456789"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

if CHROMIUM is None and not os.environ.get("CI"):
    pytest.skip("Debian's chromium is not installed (.ci/run installs it)", allow_module_level=True)


def start_server(demo: DemoStore, agent: Path, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    """``flows serve --port 0`` in a process of its own; returns it and the URL it printed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "flows", "serve", "--db", str(demo.db), "--sail-home", str(agent),
         "--port", "0", "--json", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()  # printed once the socket listens
    if not line:
        proc.kill()
        raise AssertionError(f"flows serve did not start: {proc.communicate()[1].decode()}")
    return proc, str(orjson.loads(line)["url"])


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGINT)  # Ctrl-C: shut down cleanly, exit 130 as every flows command
    try:
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err.decode()
    assert b"Traceback" not in err


@pytest.fixture(scope="module")
def server(demo: DemoStore, agent: Path) -> Iterator[str]:
    proc, url = start_server(demo, agent)
    yield url
    stop_server(proc)


def browse(url: str, name: str, tmp_path: Path) -> str:
    """Load ``url`` in headless Chromium; return the DOM it built, and keep its screenshot.

    Chromium's virtual-time runner now and then never ends on a busy machine (seen once in a full
    run: 90 s on a page it loads in 2 s alone); such a hang is given one more try in a fresh profile,
    and a second hang fails the test. Every other outcome counts at once."""
    assert CHROMIUM is not None, "chromium is missing: apt-get install -y chromium"
    shot = tmp_path / f"{name}.png"
    for attempt in (1, 2):
        profile = tmp_path / f"profile-{attempt}"
        with subprocess.Popen(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--no-first-run", f"--user-data-dir={profile}", "--window-size=1280,1100",
             "--virtual-time-budget=5000", f"--screenshot={shot}", "--dump-dom", url],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        ) as proc:  # fmt: skip
            try:
                dom, _ = proc.communicate(timeout=90)
            except subprocess.TimeoutExpired:
                if attempt == 2:
                    raise
                continue
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        break
    assert proc.returncode == 0, f"chromium exited {proc.returncode} on {url}"
    assert shot.stat().st_size > 0
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, ARTIFACTS / shot.name)
    return dom.decode()


def test_the_runs_page_shows_each_runs_state(server: str, demo: DemoStore, tmp_path: Path) -> None:
    dom = browse(f"{server}runs", "runs", tmp_path)
    row = re.search(rf'<tr class="run state-failed">.*?{demo.failed_run}.*?</tr>', dom, re.S)
    assert row is not None and "flow_failed" in row.group(0) and "flaky-sensor" in row.group(0)
    assert re.search(rf"{demo.interrupted_run}.*?>interrupted</span>", dom, re.S)


def test_a_runs_timeline_cites_each_record(server: str, demo: DemoStore, tmp_path: Path) -> None:
    dom = browse(f"{server}runs/{demo.done_run}", "run", tmp_path)
    learns = re.findall(r'<tr id="rec-([0-9a-f]{16})" class="entry kind-learn', dom)
    assert len(learns) == 6
    assert "barometer#1" in dom and "rain follows a falling barometer" in dom


def test_a_finding_shows_its_citation_and_links_to_its_record(
    server: str, demo: DemoStore, tmp_path: Path
) -> None:
    dom = browse(f"{server}findings?q=barometer", "findings", tmp_path)
    assert "rain follows a falling <mark>barometer</mark>" in dom
    cite = re.search(r'href="/runs/([^"?]+)\?record=([0-9a-f]{16})#rec-\2">root run', dom)
    assert cite is not None and cite.group(1) == demo.done_run
    assert f"stream memory-learn · record <code>{cite.group(2)}</code>" in dom
    target = browse(f"{server}runs/{cite.group(1)}?record={cite.group(2)}", "finding-record", tmp_path)
    assert f'<tr id="rec-{cite.group(2)}" class="entry kind-learn selected">' in target


def test_a_finding_holding_a_script_is_text_in_the_browser(server: str, tmp_path: Path) -> None:
    dom = browse(f"{server}findings?q=storms", "escaped", tmp_path)
    assert "<script" not in dom and "<b>gales" not in dom
    assert '&lt;script&gt;alert("owned")&lt;/script&gt;' in dom


def test_a_finding_page_shows_its_history_each_event_linked_to_its_record(
    server: str, demo: DemoStore, tmp_path: Path
) -> None:
    dom = browse(f"{server}findings/{demo.superseded}", "finding-history", tmp_path)
    assert '<span class="badge finding-superseded" id="finding-state">superseded</span>' in dom
    assert f'Superseded by <a href="/findings/{demo.replacement}">' in dom
    events = re.findall(
        r'<li class="event kind-(\w+)">.*?href="/runs/([^"?]+)\?record=(\w+)#rec-\3"', dom, re.S
    )
    # the memory's every version: the first learned, its replacement learned, the first superseded
    assert [kind for kind, _, _ in events] == ["learned", "learned", "superseded"]
    _, run, record = events[2]
    assert run == demo.revise_run
    target = browse(f"{server}runs/{run}?record={record}", "finding-history-record", tmp_path)
    # on a file journal the replacement's commit is the retirement: its row says what it replaces
    row = re.search(rf'<tr id="rec-{record}" class="entry kind-learn selected">.*?</tr>', target, re.S)
    assert row is not None and f'replaces <a href="/findings/{demo.superseded}">' in row.group(0)
    forgotten = browse(f"{server}findings/{demo.forgotten}", "finding-forgotten", tmp_path)
    assert 'id="finding-state">forgotten</span>' in forgotten and "<script" not in forgotten
    reason = "&lt;script&gt;alert('gone')&lt;/script&gt; wrong in the tropics"
    assert f"Forgotten: <bdi>{reason}</bdi>" in forgotten


def test_the_agent_page_shows_the_last_tick_and_its_outcome(server: str, tmp_path: Path) -> None:
    dom = browse(f"{server}agents/0", "agent-last-tick", tmp_path)
    tick = re.search(r'<dd id="last-tick">(.*?)</dd>', dom, re.S)
    assert tick is not None
    assert '<span class="badge outcome-failed">failed</span>' in tick.group(1)
    assert '<code class="code"><bdi>chain_unavailable</bdi></code>' in tick.group(1)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in tick.group(1) and "<script" not in dom
    assert re.search(r'<dd id="failed-ticks">2</dd>', dom)


def test_the_agent_page_shows_the_ledger_and_a_point_per_acted_entry(server: str, tmp_path: Path) -> None:
    dom = browse(f"{server}agents/0", "agent", tmp_path)
    row = re.search(r'<tr class="entry acted outcome-reverted".*?</tr>', dom, re.S)
    assert row is not None and "(reverted: <bdi>INSUFFICIENT_BALANCE</bdi>)" in row.group(0)
    assert re.search(r'<code class="tx" title="0x0{63}2">0x0000…0002</code>', row.group(0))
    assert "balance 10.0 USDC (10000000) &lt; min 25.0 USDC" in dom
    charts = re.findall(r'<svg class="chart".*?</svg>', dom, re.S)
    assert len(charts) == 2
    assert all(len(re.findall(r'<circle class="point', svg)) == 3 for svg in charts)
    assert "eligible at" not in dom and "blocked" in dom


def test_a_token_in_the_address_logs_the_browser_in(demo: DemoStore, agent: Path, tmp_path: Path) -> None:
    proc, url = start_server(demo, agent, "--token", TOKEN)
    try:
        refused = browse(f"{url}agents/0", "token-refused", tmp_path)
        # the refusal names nothing of the store: no agent in the menu, no DB or journal in the footer
        assert "serve_unauthorized" in refused
        assert f"<bdi>{agent.name}</bdi>" not in refused and str(demo.db) not in refused
        assert "history DB" not in refused and str(agent) not in refused
        assert 'name="token"' in refused and "<table" not in refused
        dom = browse(f"{url}agents/0?token={TOKEN}", "token-login", tmp_path)
        assert '<tr class="entry acted outcome-confirmed"' in dom
    finally:
        stop_server(proc)


def test_a_token_link_followed_from_another_site_logs_the_browser_in(
    demo: DemoStore, agent: Path, tmp_path: Path
) -> None:
    # a login link in a chat, a wiki or a mail read on another site: the cookie (SameSite=Strict) was
    # set by a redirect whose chain began on that site, so the browser withheld it from the page the
    # redirect led to, and the login landed on the refusal; now a page of the dashboard moves on
    proc, url = start_server(demo, agent, "--token", TOKEN)
    login = f"{url}agents/0?token={TOKEN}"
    page = f'<!doctype html><meta http-equiv="refresh" content="0; url={login}"><a href="{login}">open</a>'

    class Elsewhere(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.end_headers()
            self.wfile.write(page.encode())

        def log_message(self, *args: object) -> None:
            pass

    other = ThreadingHTTPServer(("127.0.0.1", 0), Elsewhere)  # "localhost": another site than 127.0.0.1
    thread = threading.Thread(target=other.serve_forever, daemon=True)
    thread.start()
    try:
        dom = browse(f"http://localhost:{other.server_address[1]}/", "token-login-elsewhere", tmp_path)
        assert "serve_unauthorized" not in dom
        assert '<tr class="entry acted outcome-confirmed"' in dom
    finally:
        other.shutdown()
        other.server_close()
        stop_server(proc)

"""A stored value cannot reorder what the page shows around it: a right-to-left override (or any
bidirectional control) in a finding's text, tags, source, scope or metadata, a forget's reason or a
run's scope stays inside the ``<bdi>`` that holds that one value (an isolate: the browser lays it
out apart from its neighbours), and JSON shown on a page writes each control as its escape. Checked
on the served HTML, parsed: every raw control is inside a ``<bdi>`` (or an ``<option>``, which is a
box of its own) whose whole text is one stored value."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import orjson
import pytest

pytest.importorskip("starlette", reason="the web extra is not installed")

import memory
from flows.web import ServeConfig
from tests.conftest import ROOT
from tests.web.conftest import client_for
from tests.web.stores import agent_home

BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
VOID = {"meta", "link", "input", "br", "hr", "img", "source", "wbr", "area", "col", "embed", "track"}
HOLDERS = {"bdi", "option"}


class _Isolation(HTMLParser):
    """Each text a holder (``<bdi>``, ``<option>``) held that has a bidi control, and each control
    found outside any holder."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[tuple[str, list[str]]] = []
        self.held: list[str] = []
        self.loose: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in VOID:
            self.open.append((tag, []))

    def handle_endtag(self, tag: str) -> None:
        while self.open:
            name, parts = self.open.pop()
            text = "".join(parts)
            if name in HOLDERS and any(c in text for c in BIDI):
                self.held.append(text)
            if name == tag:
                break

    def handle_data(self, data: str) -> None:
        holders = [parts for name, parts in self.open if name in HOLDERS]
        for parts in holders:
            parts.append(data)
        if not holders and any(c in data for c in BIDI):
            self.loose.append(data)


def _held(html: str) -> list[str]:
    """The texts of the holders with a bidi control (asserting none is outside one)."""
    parser = _Isolation()
    parser.feed(html)
    parser.close()
    assert parser.loose == []
    return parser.held


VALUES = {
    "text": f"pressure falls \u202e{BIDI} before rain",
    "tag": f"t\u202e{BIDI}",
    "source": f"src\u2067{BIDI}",
    "scope": f"s\u202e{BIDI}",
    "meta": f"v\u202e{BIDI}",
    "reason": f"because \u202e{BIDI}",
}
FORGOTTEN = f"forgotten fact about pressure {BIDI}"


def _store(db: Path) -> tuple[memory.Learned, memory.Learned]:
    """A store of a finding with a control in each of its values, and one forgotten for a reason
    that holds them too."""
    values = VALUES
    with memory.MemoryStore(db) as store, store.session(scope=values["scope"], flow="f") as sess:
        live = sess.learn(
            {
                "text": values["text"],
                "tags": [values["tag"]],
                "source": values["source"],
                "metadata": {"k": values["meta"]},
            }
        )
        gone = sess.learn({"text": FORGOTTEN})
        sess.forget(gone.key, reason=values["reason"])
    return live, gone


def test_every_stored_value_on_the_pages_is_isolated(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    values = VALUES
    live, gone = _store(db)
    stored = {*values.values(), FORGOTTEN}
    run_id = live.citation.run_id
    with client_for(ServeConfig(db=str(db))) as client:
        pages = {
            target: client.get(target)
            for target in (
                "/findings",
                "/findings?q=pressure",
                f"/findings/{live.key}",
                f"/findings/{gone.key}",
                "/runs",
                f"/runs/{run_id}",
            )
        }
        client.app.state.reader.close()  # type: ignore[attr-defined]
    for target, page in pages.items():
        assert page.status_code == 200, (target, page.text[:300])
        held = _held(page.text)
        assert held, target  # the values are there, each isolated
        assert set(held) <= stored, (target, set(held) - stored)
    found = pages["/findings"].text
    for value in (values["tag"], values["source"], values["text"]):
        assert f"<bdi>{value}</bdi>" in found
    # JSON on a page (a finding's metadata) writes the controls as escapes: the same value
    assert "\\u202e" in pages[f"/findings/{live.key}"].text


def test_the_browser_keeps_each_value_in_its_isolate(tmp_path: Path) -> None:
    """The DOM headless Chromium builds from the page (not only the served text) holds each control
    inside its value's ``<bdi>``."""
    from tests.web.test_browser import browse  # skips without Chromium

    db = tmp_path / "store" / "history.db"
    live, _ = _store(db)
    proc = subprocess.Popen(
        [sys.executable, "-m", "flows", "serve", "--db", str(db), "--port", "0", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None
        url = str(orjson.loads(proc.stdout.readline())["url"])
        for target in ("findings", f"findings/{live.key}"):
            held = _held(browse(f"{url}{target}", f"bidi-{target.replace('/', '-')}", tmp_path))
            assert held and set(held) <= {*VALUES.values(), FORGOTTEN}, held
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


def test_a_page_title_writes_each_bidi_control_of_a_stored_value_as_its_escape(tmp_path: Path) -> None:
    # a <title> holds no markup, so no <bdi> can isolate the agent's folder name in it: the override
    # reordered the tab's title (the name and " · flows" after it); it is written as the CLI writes it
    name = f"desk\u202e{BIDI}\x1b[31m"
    home = agent_home(tmp_path / name)
    with client_for(ServeConfig(db=str(tmp_path / "store" / "h.db"), sail_homes=(home,))) as client:
        page = client.get("/agents/0")
        client.app.state.reader.close()  # type: ignore[attr-defined]
    assert page.status_code == 200
    title = page.text.split("<title>", 1)[1].split("</title>", 1)[0]
    assert not any(c in title for c in BIDI) and "\x1b" not in title
    assert title == "Agent desk\\u202e" + "".join(f"\\u{ord(c):04x}" for c in BIDI) + "\\x1b[31m · flows"
    assert _held(page.text.split("</title>", 1)[1])  # the name in the page's body: in its isolates

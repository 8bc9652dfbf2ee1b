"""An agent's ledger written before its texts were bounded still shows within the dashboard's bounds.

Four skips whose reasons were 3 MiB each made the agent page 18.9 MB (the "why" list, the ledger,
the last tick and the journal each carried them whole) and ``/api/agents/N/why?limit=1000`` answered
them all in one body. The page now shows each text cut (``TEXT_SHOWN``) with its whole length, and
the why API stops at ``LIST_MAX_BYTES`` with ``Truncated: true`` and a ``Link`` to the rest.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from flows._bounded import LIST_MAX_BYTES
from flows.web import ServeConfig
from flows.web._findings import TEXT_SHOWN
from journal import LineLog
from memory.ledger import Acted, Amount, Ledger, LedgerCodec, Outcome, recent_skips
from tests.web.conftest import client_for
from tests.web.stores import CHAIN, T0, agent_home, legacy_skips

MIB = 1024 * 1024
REASONS = [f"{n} quote unavailable: " + chr(ord("a") + n) * (3 * MIB) for n in range(4)]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = agent_home(tmp_path_factory.mktemp("legacy") / "agent")
    legacy_skips(home, REASONS, T0 + 9 * 3600)
    return home


@pytest.fixture
def client(home: Path) -> Iterator[TestClient]:
    with client_for(ServeConfig(sail_homes=(home,))) as c:
        yield c
    c.app.state.reader.close()  # type: ignore[attr-defined]


def _next(headers: Any) -> str | None:
    found = re.fullmatch(r'<([^>]+)>; rel="next"', headers.get("link", ""))
    return None if found is None else found.group(1)


def test_the_agent_page_shows_each_huge_reason_cut_with_its_length_and_stays_small(
    client: TestClient,
) -> None:
    page = client.get("/agents/0")
    assert page.status_code == 200
    assert len(page.content) < MIB, len(page.content)  # 18.9 MB before
    newest = REASONS[-1]
    shown = f"<bdi>{newest[:TEXT_SHOWN]}</bdi>… "
    why = page.text.split('id="why"', 1)[1].split("</section>", 1)[0]
    assert shown in why and f"{len(newest):,} characters in all" in why
    last_tick = page.text.split('id="last-tick"', 1)[1].split("</dd>", 1)[0]
    assert shown in last_tick
    for reason in REASONS:
        assert reason[: TEXT_SHOWN + 1] not in page.text


def test_the_why_api_stops_at_its_bytes_and_its_links_give_every_skip_once_newest_first(
    client: TestClient, home: Path
) -> None:
    url: str | None = "/api/agents/0/why?limit=1000"
    pages: list[list[dict[str, Any]]] = []
    while url is not None:
        answer = client.get(url)
        assert answer.status_code == 200, answer.text[:300]
        body = answer.json()
        assert len(answer.content) <= LIST_MAX_BYTES or len(body) == 1
        url = _next(answer.headers)
        assert (answer.headers.get("truncated") == "true") == (url is not None)
        pages.append(body)
    assert [len(p) for p in pages] == [2, 5]  # 3 MiB each: two fit in 8 MiB; then two and the demo's three
    listed = [s for p in pages for s in p]
    assert listed == [s.to_wire() for s in recent_skips(Ledger(home / ".sail"), 1000)]


def test_the_why_api_without_huge_reasons_is_what_sail_why_gives_and_before_must_be_a_line(
    client: TestClient, home: Path
) -> None:
    answer = client.get("/api/agents/0/why?limit=2&before=1")
    assert answer.status_code == 400 and answer.json()["code"] == "serve_bad_request"
    first = client.get("/api/agents/0/why?limit=1")
    assert first.status_code == 200 and "link" not in first.headers and "truncated" not in first.headers
    assert first.json() == [s.to_wire() for s in recent_skips(Ledger(home / ".sail"), 1)]


def test_the_journal_quotes_a_huge_reason_cut(client: TestClient) -> None:
    answer = client.get("/api/agents/0/journal?days=2")
    assert answer.status_code == 200
    assert len(answer.content) < MIB, len(answer.content)
    assert f"[cut: {len(REASONS[-1])} characters in all]" in answer.text


def test_a_huge_token_symbol_in_an_older_ledger_keeps_the_chart_and_the_journal_small(tmp_path: Path) -> None:
    # each of the chart's points (up to 200) had the symbol in its tooltip and both axis labels had
    # it too: 20 swaps of a 1 MiB symbol made the chart alone 40 MB; it is cut and escaped as text is
    symbol = "\u202e" + "S" * MIB
    token_in, token_out = "0x" + "3c" * 20, "0x" + "4d" * 20
    sail = tmp_path / "agent" / ".sail"
    (sail / "memory").mkdir(parents=True)
    swaps = [
        Acted(
            ts=T0 + n,
            block=n + 1,
            chain_id=CHAIN,
            action="swap",
            permission=None,
            outcome=Outcome.CONFIRMED,
            tx_hash=f"0x{n + 1:064x}",
            gas_used=21_000,
            token_in=token_in,
            token_out=token_out,
            amount_in=Amount(1_000_000, f"1.0 {symbol}"),
            amount_out=Amount(2_000_000, f"2.0 {symbol}"),
            balances_after={token_in: 10_000_000 - n, token_out: 2_000_000 * (n + 1)},
        )
        for n in range(20)
    ]
    with LineLog(Ledger(sail).path, LedgerCodec()).locked() as log:  # written before the bound
        for swap in swaps:
            log.append(swap)
    with client_for(ServeConfig(sail_homes=(sail.parent,))) as client:
        page = client.get("/agents/0")
        journal = client.get("/api/agents/0/journal?days=2")
        client.app.state.reader.close()  # type: ignore[attr-defined]
    assert page.status_code == 200 and journal.status_code == 200
    # the journal's sentences quote both amounts of each swap: 40 MB, now each sentence cut
    assert len(journal.content) < 20 * 7000 and "characters in all]" in journal.text, len(journal.content)
    balances = page.text.split('id="balances"', 1)[1].split("</section>", 1)[0]
    assert balances.count("<svg") == 2 and len(balances) < 200_000, len(balances)
    charts = re.findall(r"<svg.*?</svg>", balances, re.S)
    assert len(charts) == 2 and not any("\u202e" in svg for svg in charts)  # escaped, as the CLI does
    assert "\\u202eSSSS" in balances

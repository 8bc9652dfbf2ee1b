"""A slow agent page holds up no other client: an agent's pages read only its home's files and take
no lock, and every page is rendered after the store's lock is let go. Before, every request waited
on one lock held for the whole read and render, so an agent page on a busy ledger (its journal
narrates every line of two days: 7.5 s of CPU at 40,000 lines) stopped every other client's page.

The agent page is held in the middle of its read (its journal) until the other clients have their
answers: the order is asserted with events, never with times."""

from __future__ import annotations

import threading
from pathlib import Path

import journal
from flows.web import ServeConfig, create_app
from memory.ledger import Ledger, LedgerCodec, Skipped
from tests.web.stores import CHAIN, DemoStore, agent_entries, agent_home
from tests.web.test_served import request, uvicorn_serving

#: how long the held page waits for the others at most: a bound on a failing run, not an assertion
HOLD_BOUND_S = 20.0
BUSY_LINES = 5_000


def _busy_agent(home: Path) -> Path:
    """The demo agent with ``BUSY_LINES`` more skips after its last entry, a second apart."""
    agent_home(home)
    last = agent_entries()[-1].ts
    skips = [
        Skipped(ts=last + 1 + n, block=1_000 + n, chain_id=CHAIN, reason="gas too high")
        for n in range(BUSY_LINES)
    ]
    with journal.LineLog(Ledger(home / ".sail").path, LedgerCodec()).locked() as log:
        log.sync_to(log.write(skips))  # the ledger's own line log, one write and one sync
    return home


def test_other_clients_are_answered_while_an_agent_page_is_being_produced(
    demo: DemoStore, tmp_path: Path
) -> None:
    agent = _busy_agent(tmp_path / "agent")
    app = create_app(ServeConfig(db=str(demo.db), sail_homes=(agent,)))
    held = app.state.reader.agents[0]
    narrate = held.journal
    order: list[str] = []
    reading, release = threading.Event(), threading.Event()

    def journal_held(*args: object, **kwargs: object) -> object:
        order.append("agent page reading")
        reading.set()
        order.append("agent page released" if release.wait(HOLD_BOUND_S) else "agent page gave up waiting")
        return narrate(*args, **kwargs)  # type: ignore[arg-type]

    held.journal = journal_held  # type: ignore[method-assign]
    answers: dict[str, int] = {}
    try:
        with uvicorn_serving(app) as port:

            def agent_page() -> None:
                answers["agent"] = request(port, "/agents/0", ["127.0.0.1"]).status

            slow = threading.Thread(target=agent_page)
            slow.start()
            assert reading.wait(HOLD_BOUND_S), "the agent page never started its read"
            for path in ("/runs", f"/findings/{demo.replacement}", "/api/agents/0/status", "/agents"):
                answers[path] = request(port, path, ["127.0.0.1"]).status
                order.append(f"{path} answered")
            release.set()
            slow.join(HOLD_BOUND_S * 2)
    finally:
        app.state.reader.close()
    assert order == [
        "agent page reading",
        "/runs answered",
        f"/findings/{demo.replacement} answered",
        "/api/agents/0/status answered",
        "/agents answered",
        "agent page released",
    ]
    assert set(answers.values()) == {200}, answers

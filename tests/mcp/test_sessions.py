"""The server's sessions in process, over a real store: what a session holds, and for how long."""

from __future__ import annotations

from pathlib import Path

import anyio

import memory
from flows.mcp._sessions import Sessions
from journal import RunState
from tests.mcp.harness import mcp_runs


def test_a_request_naming_no_session_of_the_server_holds_nothing_once_answered(tmp_path: Path) -> None:
    """Any string is a session id to the gate; each used to be kept (with its id, up to a header's
    size) until the idle timeout, so a client sending made-up ids grew the server's memory without
    bound. Only a session that began a root run is kept, and it ends as before."""
    db = tmp_path / "history.db"

    async def main(store: memory.MemoryStore) -> None:
        sessions = Sessions(store, None)
        for n in range(50):
            async with sessions.active(f"{n:04d}" + "x" * 4096):
                pass
        async with sessions.active("reads"), sessions.call("reads") as reader:
            found = await reader.recall(scope=None, tags=[], meta=None, source=None, before_ms=None, limit=5)
            assert found == []
        async with sessions.active("writes"), sessions.call("writes") as writer:
            await writer.learn("s", {"text": "a session that wrote is kept"}, None)
        assert sessions.idle(0) == ["writes"]
        await sessions.end("writes")
        assert sessions.idle(0) == []

    with memory.MemoryStore(db) as store:
        anyio.run(main, store)
    assert [r.state for r in mcp_runs(db)] == [RunState.DONE]

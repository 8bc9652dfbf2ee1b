"""A server killed mid-session loses no acknowledged learn; one stopped by SIGTERM ends its session."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession

from journal import RunState
from memory import MemoryStore, check_store
from tests.mcp.harness import (
    CALL_TIMEOUT_S,
    assert_resume_explains_a_session_root,
    call,
    http_server,
    http_session,
    learn_records,
    mcp_runs,
    run,
    server_pids,
    stdio_session,
)


async def _learn_until_killed(
    connect: Callable[[], AbstractAsyncContextManager[ClientSession]], kill: Callable[[], None], after: int
) -> list[dict[str, Any]]:
    """Learn findings one after another, several in flight at once; SIGKILL the server once ``after``
    were acknowledged. Returns the acknowledged results."""
    acked: list[dict[str, Any]] = []

    async def learner(n: int, session: ClientSession) -> None:
        for i in range(1000):
            try:
                with anyio.fail_after(CALL_TIMEOUT_S):
                    result = await session.call_tool("learn", {"text": f"finding {n}-{i}", "tags": ["crash"]})
            except BaseException:  # the server died under this call: it was never acknowledged
                return
            if result.is_error:
                return
            assert isinstance(result.structured_content, dict)
            acked.append(result.structured_content)
            if len(acked) == after:
                kill()

    async def main(session: ClientSession) -> None:
        async with anyio.create_task_group() as tg:
            for n in range(4):
                tg.start_soon(learner, n, session)

    with contextlib.suppress(BaseException):  # the transport reports the dead server on the way out
        async with connect() as session:
            await main(session)
    return acked


def _assert_acknowledged_learns_survive(db: Path, acked: list[dict[str, Any]]) -> None:
    assert len(acked) >= 10
    [root] = mcp_runs(db)
    assert root.state is RunState.INTERRUPTED  # like any run whose process died
    assert_resume_explains_a_session_root(db, root.run_id)  # but a session has no body to re-run
    records = {r.key: r for r in learn_records(db, root.run_id)}
    for result in acked:  # every acknowledged learn is in the journal, as acknowledged
        assert result["citation"]["runId"] == root.run_id
        assert records[result["key"]].id == result["citation"]["id"]
    with MemoryStore(db) as store:  # ... and readable
        recalled = {f.key: f for f in store.recall(tag="crash", limit=None)}
    for result in acked:
        assert recalled[result["key"]].citation.id == result["citation"]["id"]


def test_a_stdio_server_killed_mid_session_loses_no_acknowledged_learn(tmp_path: Path) -> None:
    db = tmp_path / "history.db"

    def kill() -> None:
        for pid in server_pids(db):
            os.kill(pid, signal.SIGKILL)

    acked = run(lambda: _learn_until_killed(lambda: stdio_session(db), kill, after=12))
    _assert_acknowledged_learns_survive(db, acked)


def test_an_http_server_killed_mid_session_loses_no_acknowledged_learn(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    with http_server(db) as server:
        acked = run(lambda: _learn_until_killed(lambda: http_session(server.url), server.proc.kill, after=12))
    _assert_acknowledged_learns_survive(db, acked)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stdio_server_stopped_by_a_signal_ends_its_session_done(tmp_path: Path, sig: int) -> None:
    db = tmp_path / "history.db"
    gone_while_connected: list[bool] = []

    async def main() -> None:
        async with stdio_session(db) as session:
            await call(session, "learn", text="stopped politely")
            [pid] = server_pids(db)
            os.kill(pid, sig)  # the client still holds the server's stdin open
            with anyio.move_on_after(CALL_TIMEOUT_S):
                while server_pids(db):
                    await anyio.sleep(0.05)
            gone_while_connected.append(not server_pids(db))

    with contextlib.suppress(BaseException):  # the client may see its server go
        run(main)
    assert gone_while_connected == [True]
    [root] = mcp_runs(db)
    assert root.state is RunState.DONE
    stderr = (tmp_path / "server-0.err").read_text()
    assert stderr == (
        "flows: error[interrupted]: interrupted (Ctrl-C); what was acknowledged is on record, and "
        "`flows check --repair` finishes a change it stopped midway\n"
        if sig == signal.SIGINT
        else ""
    )


def test_a_learn_in_flight_when_the_client_leaves_is_finished_before_its_root_run(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    slow = {"FLOWS_FAILPOINTS": "memory.before_stage=sleep1500"}  # widen the learn after its root began

    async def main() -> None:
        async with stdio_session(db, env=slow) as session, anyio.create_task_group() as tg:
            tg.start_soon(session.call_tool, "learn", {"text": "left in flight"})  # never answered
            with anyio.fail_after(CALL_TIMEOUT_S):
                while not mcp_runs(db):
                    await anyio.sleep(0.02)
            tg.cancel_scope.cancel()  # the client leaves: the server's stdin closes mid-learn

    with contextlib.suppress(BaseException):
        run(main)
    deadline = time.monotonic() + CALL_TIMEOUT_S
    while server_pids(db) and time.monotonic() < deadline:
        time.sleep(0.05)
    [root] = mcp_runs(db)
    assert root.state is RunState.DONE
    [record] = learn_records(db, root.run_id)  # the learn committed before the root was finished
    with MemoryStore(db) as store:
        [found] = store.recall(limit=None)
        assert check_store(store, sail_dirs=[], sweep_age_s=3600.0) == []
    assert found.key == record.key and found.citation.id == record.id

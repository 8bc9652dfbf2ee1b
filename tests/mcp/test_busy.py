"""MCP over HTTP runs at most ``MAX_CALLS`` calls at once: a call past the bound is answered at once
with ``mcp_busy`` (HTTP 503, ``Retry-After``), never held; the calls within it are answered when
they can be, and the server serves normally after. Calls are made slow by a locked history DB."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx2
import orjson
import pytest
from mcp.shared.exceptions import MCPError

from flows.mcp._calls import BUSY_CODE, MAX_CALLS
from tests.mcp.harness import START_TIMEOUT_S, call, http_server, http_session, run
from tests.mcp.test_wire import ACCEPT, INITIALIZE, _messages

EXTRA = 8


def _recall(n: int) -> bytes:
    return orjson.dumps(
        {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": "recall", "arguments": {}}}
    )


@asynccontextmanager
async def _client(url: str) -> AsyncIterator[tuple[httpx2.AsyncClient, dict[str, str]]]:
    """A raw HTTP client with an MCP session of its own (the headers that name it)."""
    async with httpx2.AsyncClient(timeout=START_TIMEOUT_S) as client:
        opened = await client.post(url, content=orjson.dumps(INITIALIZE), headers=ACCEPT)
        assert opened.status_code == 200, opened.text
        ids = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
        note = orjson.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert (await client.post(url, content=note, headers={**ACCEPT, **ids})).status_code == 202
        yield client, ids


class _Lock:
    """The history DB locked: every call that reads it waits, until ``release``."""

    def __init__(self, db: Path) -> None:
        self._conn: sqlite3.Connection | None = sqlite3.connect(db, isolation_level=None)
        self._conn.execute("BEGIN EXCLUSIVE")

    def release(self) -> None:
        if self._conn is not None:
            self._conn.execute("ROLLBACK")
            self._conn.close()
            self._conn = None


def _assert_busy(response: httpx2.Response, request_id: int) -> None:
    assert response.status_code == 503, response.text
    assert int(response.headers["retry-after"]) >= 1
    [answer] = _messages(response)
    assert answer["id"] == request_id
    assert answer["error"]["code"] == BUSY_CODE
    data = answer["error"]["data"]
    assert data["code"] == "mcp_busy" and data["limit"] == MAX_CALLS
    assert f"{MAX_CALLS} calls in progress" in answer["error"]["message"]


def test_http_calls_past_the_bound_are_refused_at_once_and_the_rest_are_answered(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    with http_server(db) as server:

        async def main() -> tuple[Any, ...]:
            async with http_session(server.url) as sdk:
                learned = await call(sdk, "learn", text="slow calls are bounded")
                async with (
                    _client(server.url) as a,
                    _client(server.url) as b,
                    _client(server.url) as c,
                    _client(server.url) as d,
                ):
                    clients = [a, b, c, d]
                    answers: dict[int, tuple[float, httpx2.Response]] = {}
                    sent = MAX_CALLS + EXTRA

                    async def post(n: int) -> None:
                        client, ids = clients[n % len(clients)]
                        headers = {**ACCEPT, **ids}
                        response = await client.post(server.url, content=_recall(n), headers=headers)
                        answers[n] = (time.monotonic(), response)

                    lock = _Lock(db)
                    try:
                        async with anyio.create_task_group() as tg:
                            for n in range(1, sent + 1):
                                tg.start_soon(post, n)
                            with anyio.fail_after(15):  # the refusals come at once, not after the lock
                                while len(answers) < EXTRA:
                                    await anyio.sleep(0.05)
                            await anyio.sleep(0.5)
                            early = dict(answers)  # every call within the bound still waits
                            with pytest.raises(MCPError) as refused:  # the SDK's client sees the refusal
                                await sdk.call_tool("recall", {})
                            lock.release()
                    finally:
                        lock.release()
                    return learned, early, answers, refused.value, await call(sdk, "recall")

        learned, early, answers, refused, after = run(main)
    # ... exactly the calls past the bound were refused, at once ...
    assert len(early) == EXTRA, sorted(early)
    for n, (_, response) in early.items():
        _assert_busy(response, n)
    assert refused.error.code == BUSY_CODE and refused.error.data["code"] == "mcp_busy"
    # ... every other call got its answer, once it could run ...
    assert len(answers) == MAX_CALLS + EXTRA
    for n, (_, response) in answers.items():
        if n in early:
            continue
        assert response.status_code == 200
        [answer] = _messages(response)
        assert answer["id"] == n
        assert answer["result"]["structuredContent"]["findings"][0]["key"] == learned["key"]
    # ... and the server serves normally afterwards
    assert [f["key"] for f in after["findings"]] == [learned["key"]]


def test_a_call_whose_client_hung_up_keeps_its_place_until_it_ends(tmp_path: Path) -> None:
    """A client that hangs up leaves its call running in the server: such calls count too, so
    clients that send slow calls and hang up at once cannot pile them up either."""
    db = tmp_path / "history.db"
    with http_server(db) as server:

        async def main() -> tuple[httpx2.Response, dict[str, Any]]:
            async with http_session(server.url) as sdk, _client(server.url) as (client, ids):
                learned = await call(sdk, "learn", text="hung up")
                headers = {**ACCEPT, **ids}
                lock = _Lock(db)
                try:
                    async with (
                        httpx2.AsyncClient(timeout=START_TIMEOUT_S) as hasty,
                        anyio.create_task_group() as tg,
                    ):
                        for n in range(1, MAX_CALLS + 1):
                            post = partial(hasty.post, server.url, content=_recall(n), headers=headers)
                            tg.start_soon(post)
                        await anyio.sleep(1.0)
                        tg.cancel_scope.cancel()  # every one of those clients hangs up
                    await anyio.sleep(1.0)
                    with anyio.fail_after(15):
                        refused = await client.post(
                            server.url, content=_recall(MAX_CALLS + 1), headers=headers
                        )
                finally:
                    lock.release()
                with anyio.fail_after(START_TIMEOUT_S):  # the calls end once they can read; room again
                    while True:
                        try:
                            after = await call(sdk, "recall")
                            break
                        except MCPError as exc:
                            assert exc.error.data["code"] == "mcp_busy"
                            await anyio.sleep(0.2)
                assert after["findings"][0]["key"] == learned["key"]
                return refused, after

        refused, after = run(main)
    _assert_busy(refused, MAX_CALLS + 1)
    assert after["findings"]

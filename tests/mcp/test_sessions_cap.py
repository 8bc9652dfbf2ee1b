"""An HTTP server holds at most ``--max-sessions`` sessions open: an ``initialize`` past them is
answered ``503`` with ``Retry-After`` and ``mcp_sessions_full`` (before, the SDK's own bound of
10,000 answered a bare ``503`` with no code of ours, nothing to wait and nothing to do), sessions
already open go on, and a session ended (a ``DELETE``, the SDK client's close, its idle timeout)
gives its place back. Over real HTTP, against the real server."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import orjson
import pytest

from flows.mcp._admission import MAX_SESSIONS_CEILING, RETRY_AFTER_MAX_S, SESSIONS_FULL_CODE
from tests.mcp.harness import START_TIMEOUT_S, call, http_server, http_session, run
from tests.mcp.test_http import _start
from tests.mcp.test_wire import ACCEPT, INITIALIZE

VERSION = {"mcp-protocol-version": "2025-06-18"}


def _initialize(url: str, request_id: int = 7) -> httpx2.Response:
    body = orjson.dumps({**INITIALIZE, "id": request_id})
    return httpx2.post(url, content=body, headers=ACCEPT, timeout=START_TIMEOUT_S)


def _named(session_id: str) -> dict[str, str]:
    return {**ACCEPT, **VERSION, "mcp-session-id": session_id}


def _open(url: str) -> str:
    """A new session (its id), opened by an ``initialize`` and its ``initialized`` notification."""
    opened = _initialize(url)
    assert opened.status_code == 200, opened.text
    session_id = opened.headers["mcp-session-id"]
    note = orjson.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
    noted = httpx2.post(url, content=note, headers=_named(session_id), timeout=START_TIMEOUT_S)
    assert noted.status_code == 202
    return session_id


def _assert_full(response: httpx2.Response, request_id: int, limit: int, idle_timeout_s: float) -> None:
    assert response.status_code == 503, response.text
    assert "mcp-session-id" not in response.headers
    retry_after = int(response.headers["retry-after"])
    assert 1 <= retry_after <= RETRY_AFTER_MAX_S
    answer = response.json()
    assert answer["id"] == request_id
    assert answer["error"]["code"] == SESSIONS_FULL_CODE
    data = answer["error"]["data"]
    assert data["code"] == "mcp_sessions_full"
    assert (data["limit"], data["retryAfterS"], data["idleTimeoutS"]) == (limit, retry_after, idle_timeout_s)
    for hint in ("DELETE", "--idle-timeout", "--max-sessions", f"again in {retry_after} s"):
        assert hint in data["message"], data["message"]


def _tools_listed(url: str, session_id: str) -> int:
    request = orjson.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
    return httpx2.post(url, content=request, headers=_named(session_id), timeout=START_TIMEOUT_S).status_code


def test_past_max_sessions_an_initialize_is_refused_with_its_code_until_a_session_is_deleted(
    tmp_path: Path,
) -> None:
    with http_server(tmp_path / "history.db", "--max-sessions", "3") as server:
        first, *others = [_open(server.url) for _ in range(3)]
        _assert_full(_initialize(server.url, 41), 41, 3, 1800.0)
        assert [_tools_listed(server.url, s) for s in (first, *others)] == [200, 200, 200]  # they go on
        ended = httpx2.delete(server.url, headers=_named(first), timeout=START_TIMEOUT_S)
        assert ended.status_code == 200
        assert _tools_listed(server.url, first) == 404
        replacing = _open(server.url)  # the deleted session's place
        _assert_full(_initialize(server.url, 42), 42, 3, 1800.0)
        assert _tools_listed(server.url, replacing) == 200


def test_a_delete_the_endpoint_refuses_gives_no_place_back(tmp_path: Path) -> None:
    with http_server(tmp_path / "history.db", "--max-sessions", "1") as server:
        _open(server.url)
        made_up = httpx2.delete(server.url, headers=_named("0" * 32), timeout=START_TIMEOUT_S)
        assert made_up.status_code == 404
        _assert_full(_initialize(server.url, 5), 5, 1, 1800.0)


def test_the_sdk_client_closing_its_session_gives_its_place_back(tmp_path: Path) -> None:
    with http_server(tmp_path / "history.db", "--max-sessions", "1") as server:

        async def twice() -> list[Any]:
            learned = []
            for n in range(2):
                async with http_session(server.url) as session:
                    refused = await anyio.to_thread.run_sync(_initialize, server.url, 9)
                    _assert_full(refused, 9, 1, 1800.0)
                    learned.append(await call(session, "learn", text=f"session {n} writes"))
            return learned

        learned = run(twice)
        assert len({f["key"] for f in learned}) == 2
        assert _initialize(server.url).status_code == 200


@contextlib.asynccontextmanager
async def _event_stream(url: str, session_id: str) -> AsyncIterator[None]:
    """A ``GET`` event stream of the session held open (a request in flight) inside the block."""
    async with (
        httpx2.AsyncClient(timeout=START_TIMEOUT_S) as client,
        client.stream("GET", url, headers={**_named(session_id), "accept": "text/event-stream"}) as stream,
    ):
        assert stream.status_code == 200
        yield


def test_a_session_with_a_request_in_flight_keeps_its_place_and_one_idle_past_the_timeout_frees_it(
    tmp_path: Path,
) -> None:
    with http_server(tmp_path / "history.db", "--max-sessions", "1", "--idle-timeout", "1") as server:
        held = _open(server.url)

        async def while_streaming() -> httpx2.Response:
            async with _event_stream(server.url, held):
                await anyio.sleep(1.5)  # past the idle timeout: the stream keeps the session live
                return await anyio.to_thread.run_sync(_initialize, server.url, 11)

        _assert_full(run(while_streaming), 11, 1, 1.0)
        deadline = time.monotonic() + START_TIMEOUT_S
        while (admitted := _initialize(server.url, 12)).status_code != 200 and time.monotonic() < deadline:
            _assert_full(admitted, 12, 1, 1.0)
            time.sleep(0.2)
        assert admitted.status_code == 200  # once idle past the timeout, the session's place is free
        assert _tools_listed(server.url, held) == 404  # the SDK ended it too


def test_initializes_racing_for_the_last_place_let_exactly_one_in(tmp_path: Path) -> None:
    racers = 8
    with http_server(tmp_path / "history.db", "--max-sessions", "2") as server:
        _open(server.url)

        async def race() -> list[httpx2.Response]:
            answers: list[httpx2.Response] = []

            async def one(n: int) -> None:
                async with httpx2.AsyncClient(timeout=START_TIMEOUT_S) as client:  # a connection each
                    body = orjson.dumps({**INITIALIZE, "id": 100 + n})
                    answers.append(await client.post(server.url, content=body, headers=ACCEPT))

            async with anyio.create_task_group() as tg:
                for n in range(racers):
                    tg.start_soon(one, n)
            return answers

        answers = run(race)
        admitted = [a for a in answers if a.status_code == 200]
        assert len(admitted) == 1, [a.status_code for a in answers]
        for refused in (a for a in answers if a.status_code != 200):
            _assert_full(refused, refused.json()["id"], 2, 1800.0)
        _assert_full(_initialize(server.url, 13), 13, 2, 1800.0)
        assert _tools_listed(server.url, admitted[0].headers["mcp-session-id"]) == 200


@pytest.mark.parametrize("value", ["0", "-1", "x", "1.5", str(MAX_SESSIONS_CEILING + 1)])
def test_a_max_sessions_that_is_not_a_whole_number_within_bounds_is_a_usage_error(
    tmp_path: Path, value: str
) -> None:
    result = _start(tmp_path / "history.db", "--http", "127.0.0.1:0", "--max-sessions", value)
    assert result.returncode == 2
    assert "flows: error[usage]: argument --max-sessions: must be a whole number from 1 to 10,000" in (
        result.stderr
    )

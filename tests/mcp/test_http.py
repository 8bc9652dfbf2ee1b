"""Streamable HTTP: the bearer token beyond loopback, and how an HTTP session ends (DELETE, idle
timeout, the server stopping)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest

from journal import RunState
from tests.mcp.harness import (
    START_TIMEOUT_S,
    TOKEN,
    assert_resume_explains_a_session_root,
    call,
    http_server,
    http_session,
    mcp_argv,
    mcp_runs,
    run,
    server_env,
    stop,
)

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream"}


def _post(url: str, headers: dict[str, str]) -> httpx2.Response:
    return httpx2.post(url, json=INITIALIZE, headers={**ACCEPT, **headers}, timeout=START_TIMEOUT_S)


def _start(db: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        mcp_argv(db, *args),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=server_env(env),
        timeout=START_TIMEOUT_S,
        check=False,
    )


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.1", "example.com"])
def test_a_host_beyond_loopback_without_a_token_refuses_to_start(tmp_path: Path, host: str) -> None:
    result = _start(tmp_path / "history.db", "--http", f"{host}:0")
    assert result.returncode == 1
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("flows: error[mcp_token_required]: serving on ")
    assert "$FLOWS_MCP_TOKEN" in line


def test_a_short_token_is_refused_and_the_refusal_prints_json_with_json(tmp_path: Path) -> None:
    result = _start(
        tmp_path / "history.db", "--http", "0.0.0.0:0", "--json", env={"FLOWS_MCP_TOKEN": "short"}
    )
    assert result.returncode == 1
    error = orjson.loads(result.stderr)
    assert error["code"] == "mcp_token_required"
    assert "at least 16" in error["message"]


@pytest.mark.parametrize("value", ["8765", "host:port", "[::1:80", "::1:80", "127.0.0.1:70000"])
def test_a_malformed_http_address_is_a_usage_error(tmp_path: Path, value: str) -> None:
    result = _start(tmp_path / "history.db", "--http", value)
    assert result.returncode == 2
    assert "flows: error[usage]:" in result.stderr


def test_with_a_token_a_request_without_it_or_with_a_wrong_one_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    with http_server(db, host="0.0.0.0", env={"FLOWS_MCP_TOKEN": TOKEN}) as server:
        refused = [
            _post(server.url, {}),
            _post(server.url, {"Authorization": "Bearer wrong-token-0123456789"}),
            _post(server.url, {"Authorization": f"Bearer {TOKEN}x"}),
            _post(server.url, {"Authorization": f"Basic {TOKEN}"}),
            _post(server.url, {"Authorization": TOKEN}),
        ]
        accepted = _post(server.url, {"Authorization": f"Bearer {TOKEN}"})

        async def client_without_token() -> Any:
            async with http_session(server.url) as session:
                return await call(session, "learn", text="never written")

        with pytest.raises(BaseException):  # the SDK client fails its handshake
            run(client_without_token)

        async def client_with_token() -> Any:
            async with http_session(server.url, token=TOKEN) as session:
                learned = await call(session, "learn", text="written with the token")
                return learned, await call(session, "recall")

        learned, recalled = run(client_with_token)
    for response in refused:
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert response.json()["error"]["code"] == "mcp_unauthorized"
    assert accepted.status_code == 200
    assert [f["key"] for f in recalled["findings"]] == [learned["key"]]
    [root] = mcp_runs(db)  # the refused client began nothing
    assert root.state is RunState.DONE


def test_a_token_set_for_a_loopback_server_is_required_too(tmp_path: Path) -> None:
    with http_server(tmp_path / "history.db", env={"FLOWS_MCP_TOKEN": TOKEN}) as server:
        assert _post(server.url, {}).status_code == 401
        assert _post(server.url, {"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_a_loopback_server_refuses_a_request_whose_host_header_names_another_host(tmp_path: Path) -> None:
    with http_server(tmp_path / "history.db") as server:
        assert _post(server.url, {}).status_code == 200
        assert _post(server.url, {"Host": "attacker.example"}).status_code in (403, 421)


def _wait_for_state(db: Path, state: RunState) -> list[Any]:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        roots = mcp_runs(db)
        if roots and all(r.state is state for r in roots):
            return roots
        time.sleep(0.1)
    raise AssertionError(f"roots did not all become {state}: {mcp_runs(db)}")


def test_an_http_session_idle_past_the_timeout_leaves_its_root_interrupted_and_resume_explains(
    tmp_path: Path,
) -> None:
    db = tmp_path / "history.db"
    with http_server(db, "--idle-timeout", "1") as server:

        async def vanish() -> Any:  # the client goes away without ending its session
            async with http_session(server.url, terminate_on_close=False) as session:
                return await call(session, "learn", text="left behind")

        learned = run(vanish)
        [root] = _wait_for_state(db, RunState.INTERRUPTED)
        assert server.proc.poll() is None  # the server itself goes on
    assert learned["citation"]["runId"] == root.run_id
    assert_resume_explains_a_session_root(db, root.run_id)


def test_stopping_the_http_server_ends_its_open_sessions_done(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    with http_server(db) as server:

        async def learn_and_stop() -> int:
            async with http_session(server.url) as session:
                await call(session, "learn", text="the server stops under me")
                assert [r.state for r in mcp_runs(db)] == [RunState.RUNNING]
                return stop(server.proc, signal.SIGTERM)

        returncode = run(learn_and_stop)
    assert returncode in (0, -signal.SIGTERM)  # it stopped on its own, it was not killed
    [root] = mcp_runs(db)
    assert root.state is RunState.DONE

"""A store that turns against a running server: what the server cannot do is said, never swallowed."""

from __future__ import annotations

import os
import resource
import subprocess
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from flows.mcp._sessions import MAX_OPEN_ROOTS, MAX_SERVER_ROOTS
from journal import RunState
from tests.adversarial.memory_support import without_dac_override
from tests.mcp.harness import (
    START_TIMEOUT_S,
    call,
    call_error,
    http_server,
    mcp_argv,
    mcp_runs,
    run,
    server_env,
    stdio_session,
    stop,
)
from tests.mcp.test_wire import INITIALIZE, INITIALIZED, RawStdio, _messages, _post


def _read_only(root: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            os.chmod(Path(dirpath) / name, 0o444)
        for name in dirnames:
            os.chmod(Path(dirpath) / name, 0o555)


def _writable(root: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            os.chmod(Path(dirpath) / name, 0o755)
        for name in filenames:
            os.chmod(Path(dirpath) / name, 0o644)


def test_a_root_run_the_server_cannot_end_is_reported_on_stderr(tmp_path: Path) -> None:
    # The journal turns read-only under a stdio session: its end cannot record the root run `done`.
    # The server says so on stderr (one line, the code, the run) rather than exiting in silence.
    db = tmp_path / "store" / "history.db"
    db.parent.mkdir()
    errpath = tmp_path / "server.err"
    with errpath.open("wb") as err:
        proc = subprocess.Popen(
            mcp_argv(db),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            env=server_env(),
            preexec_fn=without_dac_override,  # noqa: PLW1509 - the modes must bind the server (root here)
        )
    assert proc.stdin is not None and proc.stdout is not None
    wire = RawStdio(proc)
    journal_dir = db.parent / "flows-journal"
    try:
        wire.send_json(INITIALIZE)
        assert wire.answer(START_TIMEOUT_S)["id"] == 0
        wire.send_json(INITIALIZED)
        call = {"name": "learn", "arguments": {"text": "kept before the disk turned"}}
        wire.send_json({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call})
        assert wire.answer()["result"]["isError"] is False
        [run] = mcp_runs(db)
        _read_only(journal_dir)
        proc.stdin.close()
        assert proc.wait(timeout=START_TIMEOUT_S) == 0
    finally:
        stop(proc)
        proc.stdout.close()
        _writable(journal_dir)
    err_text = errpath.read_text()
    assert "error[journal_unwritable]" in err_text and run.run_id in err_text, err_text
    assert "Traceback" not in err_text, err_text
    assert [r.state for r in mcp_runs(db)] == [RunState.INTERRUPTED]  # nothing claims it ended


def test_a_damaged_store_is_a_coded_error_for_every_read_and_a_resource_speaks_to_the_client(
    tmp_path: Path,
) -> None:
    # A learned file replaced by a folder under a running server: tools and resources alike answer
    # with the memory's code, and the resource's message, like a tool's, sends the client to run the
    # repair on the server's machine (it named the bare command, as if the client had a shell there).
    db = tmp_path / "history.db"

    async def main() -> tuple[dict[str, Any], MCPError, MCPError]:
        async with stdio_session(db) as session:
            await call(session, "learn", text="a finding about to be damaged")
            [learned] = (db.parent / "flows-memory").glob("*/.trajectories/compacted/*.json")
            learned.unlink()
            learned.mkdir()
            error = await call_error(session, "recall")
            with pytest.raises(MCPError) as listed:
                await session.list_resources()
            with pytest.raises(MCPError) as read:
                await session.read_resource("flows-memory://scope/mcp")
            return error, listed.value, read.value

    error, listed, read = run(main)
    assert error["code"] == "memory_unreachable"
    assert "on the server's machine" in error["message"], error
    for refused in (listed, read):
        assert isinstance(refused.error.data, dict) and refused.error.data["code"] == "memory_unreachable"
        assert "`flows check --repair` on the server's machine" in refused.error.message, refused.error


def _low_descriptor_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTORS, DESCRIPTORS))


DESCRIPTORS = 128


def test_a_session_writing_to_many_scopes_keeps_few_root_runs_open(tmp_path: Path) -> None:
    # Each open root run holds its lease, run lock and streams: a client writing to a new scope each
    # time ran a server out of descriptors (here within 40 scopes), and then every call failed. A
    # session keeps at most MAX_OPEN_ROOTS open, ending the least recently used one `done`.
    db = tmp_path / "history.db"
    errpath = tmp_path / "server.err"
    scopes = 3 * DESCRIPTORS // 4
    with errpath.open("wb") as err:
        proc = subprocess.Popen(
            mcp_argv(db),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            env=server_env(),
            preexec_fn=_low_descriptor_limit,  # noqa: PLW1509 - the limit binds the server alone
        )
    assert proc.stdin is not None and proc.stdout is not None
    wire = RawStdio(proc)
    try:
        wire.send_json(INITIALIZE)
        assert wire.answer(START_TIMEOUT_S)["id"] == 0
        wire.send_json(INITIALIZED)
        for n in range(scopes):
            call = {"name": "learn", "arguments": {"text": "one finding a scope", "scope": f"user-{n}"}}
            wire.send_json({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": call})
            answer = wire.answer()
            assert answer["result"]["isError"] is False, (n, answer)
        # a scope written to before, and ended since, begins a new root run
        call = {"name": "learn", "arguments": {"text": "back again", "scope": "user-0"}}
        wire.send_json({"jsonrpc": "2.0", "id": "again", "method": "tools/call", "params": call})
        assert wire.answer()["result"]["isError"] is False
        runs = mcp_runs(db)
        assert len([r for r in runs if r.state is RunState.RUNNING]) == MAX_OPEN_ROOTS
        assert len(runs) == scopes + 1
        proc.stdin.close()
        assert proc.wait(timeout=START_TIMEOUT_S) == 0
    finally:
        stop(proc)
        proc.stdout.close()
    assert {r.state for r in mcp_runs(db)} == {RunState.DONE}
    assert errpath.read_text() == ""


def test_http_sessions_whose_clients_vanished_keep_few_root_runs_open_between_them(tmp_path: Path) -> None:
    # Clients that write once and vanish without ending their session (no DELETE) leave it to the
    # idle timeout: their root runs, each with its lease, run lock and streams, stayed open until then,
    # a few hundred such sessions ran the server out of descriptors. The server keeps MAX_SERVER_ROOTS.
    db = tmp_path / "history.db"
    sessions = MAX_SERVER_ROOTS + 6
    with http_server(db) as server, httpx2.Client(timeout=START_TIMEOUT_S) as client:
        for n in range(sessions):
            opened = _post(client, server.url, INITIALIZE)
            ids = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
            assert _post(client, server.url, INITIALIZED, **ids).status_code == 202
            call = {"name": "learn", "arguments": {"text": f"written by client {n}, who then vanished"}}
            request = {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": call}
            learned = _post(client, server.url, request, **ids)
            [answer] = _messages(learned)
            assert answer["result"]["isError"] is False, answer
        runs = mcp_runs(db)
        assert len(runs) == sessions
        assert len([r for r in runs if r.state is RunState.RUNNING]) == MAX_SERVER_ROOTS
        assert len([r for r in runs if r.state is RunState.DONE]) == sessions - MAX_SERVER_ROOTS
    assert "Traceback" not in server.stderr()

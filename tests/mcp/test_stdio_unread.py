"""``flows mcp`` over stdio ends after stdin closes even when the client reads no answer.

A client that fills the server's stdout pipe (answers it never reads) and then closes stdin held
the server for good: its session's root run had ended, but the SDK's writer waited on the blocked
write, and the process never exited. Once stdin has ended, a write that has not finished after
``END_WAIT_S`` seconds in which no write finished is given up, and the server exits.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from journal import RunState
from tests.conftest import ROOT
from tests.mcp.harness import mcp_runs, server_env

WAIT_S = 2  # the server's END_WAIT_S, set for this test (30 s as shipped)
_SERVER = (
    "import sys, flows.mcp._stdio as stdio; stdio.END_WAIT_S = float(sys.argv.pop(1)); "
    "from flows._entry import main; sys.exit(main(sys.argv[1:]))"
)


def _line(obj: object) -> bytes:
    return (json.dumps(obj) + "\n").encode()


def _requests() -> bytes:
    init = {
        "jsonrpc": "2.0",
        "id": "init",
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    learn = {"name": "learn", "arguments": {"text": "the client reads nothing"}}
    lines = [_line(init), _line({"jsonrpc": "2.0", "method": "notifications/initialized"})]
    lines.append(_line({"jsonrpc": "2.0", "id": "learn", "method": "tools/call", "params": learn}))
    lines += [
        _line({"jsonrpc": "2.0", "id": i, "method": "tools/list"}) for i in range(20)
    ]  # ~280 KB of answers
    return b"".join(lines)


def test_a_client_that_reads_no_answer_and_closes_stdin_lets_the_server_exit(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    argv = [sys.executable, "-c", _SERVER, str(WAIT_S), "mcp", "--db", str(db)]
    with subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=server_env(),
        cwd=ROOT,
    ) as server:
        assert server.stdin is not None and server.stderr is not None
        try:
            server.stdin.write(_requests())
            server.stdin.close()  # stdout never read: its pipe (64 KiB) fills
            began = time.monotonic()
            rc = server.wait(timeout=60)
            waited = time.monotonic() - began
        finally:
            if server.poll() is None:
                server.kill()
                server.wait(30)
        stderr = server.stderr.read().decode()
    assert rc == 0, stderr[-2000:]
    assert waited < 30  # bounded by the wait, not by the client
    [run] = mcp_runs(db)
    assert run.state is RunState.DONE

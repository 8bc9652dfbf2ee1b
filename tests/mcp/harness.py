"""Driving ``flows mcp`` with the MCP SDK's own client, over stdio and over HTTP.

Every wait is bounded: a client call by ``CALL_TIMEOUT_S``, a server's start and stop by
``START_TIMEOUT_S``.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

import journal
from tests.conftest import ROOT

CALL_TIMEOUT_S = 60.0
START_TIMEOUT_S = 60.0
TOKEN = "test-token-0123456789abcdef"

_SERVING = re.compile(r"flows mcp: serving http://(\S+):(\d+)/mcp")


def server_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a server process: this one's, with the repo importable and no token or
    journal location leaking in from outside."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("FLOWS_JOURNAL", "FLOWS_MCP_TOKEN", "FLOWS_DB"):
        env.pop(name, None)
    env.update(extra or {})
    return env


def mcp_argv(db: Path, *args: str) -> list[str]:
    """The command line of ``flows mcp --db DB ARGS``."""
    return [sys.executable, "-m", "flows", "mcp", "--db", str(db), *args]


async def init(session: ClientSession) -> ClientSession:
    with anyio.fail_after(CALL_TIMEOUT_S):
        await session.initialize()
    return session


@contextlib.asynccontextmanager
async def stdio_session(
    db: Path, *args: str, env: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    """A client session with a ``flows mcp`` subprocess over stdio; its stderr goes to
    ``<db-dir>/server-<n>.err``. Leaving the block closes stdin, which ends the server."""
    params = StdioServerParameters(command=sys.executable, args=mcp_argv(db, *args)[1:], env=server_env(env))
    errpath = _fresh(db.parent / "server.err")
    with errpath.open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            yield await init(session)


@contextlib.asynccontextmanager
async def http_session(
    url: str, *, token: str | None = None, terminate_on_close: bool = True
) -> AsyncIterator[ClientSession]:
    """A client session with the HTTP server at ``url`` (with ``token`` as its bearer token)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    timeout = httpx2.Timeout(CALL_TIMEOUT_S, read=CALL_TIMEOUT_S)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as client,
        streamable_http_client(url, http_client=client, terminate_on_close=terminate_on_close) as streams,
        ClientSession(*streams) as session,
    ):
        yield await init(session)


def _fresh(path: Path) -> Path:
    n = 0
    while True:
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
        if not candidate.exists():
            return candidate
        n += 1


@dataclass
class HttpServer:
    """A running ``flows mcp --http`` process."""

    proc: subprocess.Popen[bytes]
    port: int
    errpath: Path

    @property
    def url(self) -> str:
        """The endpoint, reached over loopback whatever host the server bound."""
        return f"http://127.0.0.1:{self.port}/mcp"

    def stderr(self) -> str:
        return self.errpath.read_text()


@contextlib.contextmanager
def http_server(
    db: Path, *args: str, host: str = "127.0.0.1", env: dict[str, str] | None = None
) -> Iterator[HttpServer]:
    """Start ``flows mcp --http HOST:0`` and wait (bounded) for the line naming its port; on leaving,
    SIGTERM it and wait (bounded) for it to exit, SIGKILL if it does not."""
    errpath = _fresh(db.parent / "http.err")
    with errpath.open("wb") as err:
        proc = subprocess.Popen(
            mcp_argv(db, "--http", f"{host}:0", *args),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=server_env(env),
        )
    try:
        port = _wait_for_port(proc, errpath)
        yield HttpServer(proc, port, errpath)
    finally:
        stop(proc)


def _wait_for_port(proc: subprocess.Popen[bytes], errpath: Path) -> int:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        m = _SERVING.search(errpath.read_text())
        if m:
            return int(m.group(2))
        if proc.poll() is not None:
            raise AssertionError(f"flows mcp exited {proc.returncode}: {errpath.read_text()}")
        time.sleep(0.05)
    raise AssertionError(f"flows mcp did not start within {START_TIMEOUT_S}s: {errpath.read_text()}")


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> int:
    """Send ``sig`` and wait (bounded) for the exit; SIGKILL a process that outlives the wait."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=START_TIMEOUT_S)
    return proc.returncode


# -- calls --------------------------------------------------------------------------------------


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """Call ``tool``; its structured result (asserting it is not an error)."""
    with anyio.fail_after(CALL_TIMEOUT_S):
        result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def call_error(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """Call ``tool`` expecting a tool error; its ``error`` object (code, message, context)."""
    with anyio.fail_after(CALL_TIMEOUT_S):
        result = await session.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    assert isinstance(result.structured_content, dict)
    error = result.structured_content["error"]
    assert isinstance(error, dict)
    return error


def run(main: Callable[[], Any]) -> Any:
    """Run an async test body, bounded."""

    async def bounded() -> Any:
        with anyio.fail_after(4 * START_TIMEOUT_S):
            return await main()

    return anyio.run(bounded)


# -- the store ----------------------------------------------------------------------------------


def journal_of(db: Path) -> journal.JournalBackend:
    """The file journal beside ``db``."""
    return journal.open_journal(str(db.parent / "flows-journal"))


def mcp_runs(db: Path) -> list[journal.RunInfo]:
    """The root runs the server began, oldest first."""
    backend = journal_of(db)
    try:
        return sorted((r for r in backend.runs() if r.flow == "mcp"), key=lambda r: r.created_ms)
    finally:
        backend.close()


def learn_records(db: Path, run_id: str) -> Sequence[journal.Record]:
    """The ``memory-learn`` records of ``run_id``."""
    backend = journal_of(db)
    try:
        return backend.read(run_id, "memory-learn")
    finally:
        backend.close()


def assert_resume_explains_a_session_root(db: Path, run_id: str) -> None:
    """The real ``flows resume RUN`` refuses a session's root run with its code, and leaves it as it was."""
    before = [r for r in mcp_runs(db) if r.run_id == run_id]
    result = subprocess.run(
        [sys.executable, "-m", "flows", "--db", str(db), "resume", run_id],
        capture_output=True,
        text=True,
        env=server_env(),
        timeout=START_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 1, result
    assert "error[flow_session_not_resumable]" in result.stderr and run_id in result.stderr
    assert "Traceback" not in result.stderr
    assert [r for r in mcp_runs(db) if r.run_id == run_id] == before  # nothing was written


def server_pids(db: Path) -> list[int]:
    """The live ``flows mcp`` processes serving ``db`` (found by their command line)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"mcp" in argv and str(db).encode() in argv and state != "Z":
            pids.append(int(entry.name))
    return pids

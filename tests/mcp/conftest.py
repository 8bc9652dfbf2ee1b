"""Fixtures: a way to open client sessions with a fresh store, over each transport."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path

import pytest
from mcp import ClientSession

from tests.mcp.harness import HttpServer, http_server, http_session, stdio_session


@dataclass
class Transport:
    """How a test reaches a server over one transport: ``connect()`` opens a new client session."""

    name: str
    db: Path
    connect: Callable[[], AbstractAsyncContextManager[ClientSession]]
    server: HttpServer | None = None


@contextlib.contextmanager
def open_transport(name: str, db: Path, *args: str) -> Iterator[Transport]:
    """A server for ``db`` (``flows mcp ARGS``) over transport ``name``."""
    if name == "stdio":
        yield Transport(name, db, lambda: stdio_session(db, *args))
        return
    with http_server(db, *args) as server:
        yield Transport(name, db, lambda: http_session(server.url), server)


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Transport]:
    """A fresh store served over stdio, then over streamable HTTP."""
    with open_transport(str(request.param), tmp_path / "history.db") as t:
        yield t

"""`resources/list` gives the scopes a page at a time, with an opaque `nextCursor`; a cursor the
server did not give is an invalid-params error, over both transports."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, PaginatedRequestParams

import memory
from flows.mcp._server import RESOURCES_PAGE, MemoryServer
from flows.mcp._sessions import Sessions
from tests.mcp.conftest import open_transport
from tests.mcp.harness import CALL_TIMEOUT_S, run

SCOPES = [f"user-{i:03d}" for i in range(RESOURCES_PAGE + 1)]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A store with one finding in each of one page of scopes and one more."""
    db = tmp_path_factory.mktemp("paging") / "history.db"
    with memory.MemoryStore(db) as opened:
        for scope in SCOPES:
            with opened.session(scope=scope, flow="test") as session:
                session.learn({"text": f"a finding of {scope}"})
    yield db


def _forged(cursor: str) -> list[str]:
    raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    flipped = bytearray(raw)
    flipped[0] ^= 1  # the signature altered
    body = b"\0" * 16 + b"user-000"  # a signature made up
    return [
        "",
        "not a cursor!",
        "A" * 2000,
        cursor[:-2],
        base64.urlsafe_b64encode(bytes(flipped)).decode().rstrip("="),
        base64.urlsafe_b64encode(body).decode().rstrip("="),
        base64.urlsafe_b64encode(raw[:16] + b"user-050").decode().rstrip("="),  # its signature, another body
    ]


@pytest.mark.parametrize("name", ["stdio", "http"])
def test_resources_list_pages_every_scope_once_and_refuses_a_cursor_it_did_not_give(
    store: Path, name: str
) -> None:
    async def main(connect: Any) -> tuple[Any, ...]:
        async with connect() as session:
            with anyio.fail_after(CALL_TIMEOUT_S):
                first = await session.list_resources()
                assert first.next_cursor is not None
                second = await session.list_resources(params=PaginatedRequestParams(cursor=first.next_cursor))
                refused = []
                for bad in _forged(first.next_cursor):
                    with pytest.raises(MCPError) as caught:
                        await session.list_resources(params=PaginatedRequestParams(cursor=bad))
                    refused.append(caught.value.error)
                served = await session.list_resources()  # the server serves on
            return first, second, refused, served

    with open_transport(name, store) as t:
        first, second, refused, served = run(lambda: main(t.connect))
    assert len(first.resources) == RESOURCES_PAGE
    assert second.next_cursor is None
    names = [str(r.uri).rsplit("/", 1)[1] for r in [*first.resources, *second.resources]]
    assert names == SCOPES  # every scope once, in order, over two pages
    assert len(refused) == 7
    for error in refused:
        assert error.code == INVALID_PARAMS, error
        assert error.data["code"] == "mcp_arguments_invalid" and error.data["argument"] == "cursor"
        assert "not one this server gave" in error.message and len(error.message) < 500
    assert [r.uri for r in served.resources] == [r.uri for r in first.resources]


def test_a_cursor_of_another_server_process_is_refused(store: Path) -> None:
    async def cursor_of(connect: Any) -> str:
        async with connect() as session:
            with anyio.fail_after(CALL_TIMEOUT_S):
                cursor = (await session.list_resources()).next_cursor
        assert cursor is not None
        return cursor

    async def refused(connect: Any, cursor: str) -> Any:
        async with connect() as session:
            with anyio.fail_after(CALL_TIMEOUT_S), pytest.raises(MCPError) as caught:
                await session.list_resources(params=PaginatedRequestParams(cursor=cursor))
        return caught.value.error

    with open_transport("stdio", store) as t:
        cursor = run(lambda: cursor_of(t.connect))
        error = run(lambda: refused(t.connect, cursor))  # a new stdio session is a new server process
    assert error.code == INVALID_PARAMS and error.data["argument"] == "cursor"


def test_a_page_after_a_cursor_reads_only_the_scopes_it_lists(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each scope a page lists is checked for a live finding by a read of that scope; the page after
    the first used to read all 101 scopes again before it was cut to its one."""
    read: list[object] = []

    async def pages(opened: memory.MemoryStore) -> tuple[Any, Any]:
        handlers = MemoryServer(Sessions(opened, None), None)
        first = await handlers.list_resources(None, None)
        read.clear()
        second = await handlers.list_resources(None, PaginatedRequestParams(cursor=first.next_cursor))
        return first, second

    with memory.MemoryStore(store) as opened:
        search = opened._search
        recall = search.recall

        def counted(**kwargs: Any) -> Any:
            read.append(kwargs.get("scope"))
            return recall(**kwargs)

        monkeypatch.setattr(search, "recall", counted)
        first, second = anyio.run(pages, opened)
    assert len(first.resources) == RESOURCES_PAGE and second.next_cursor is None
    assert [str(r.uri).rsplit("/", 1)[1] for r in second.resources] == SCOPES[RESOURCES_PAGE:]
    assert read == SCOPES[RESOURCES_PAGE:]

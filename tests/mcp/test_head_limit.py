"""A request head over ``MAX_HEAD_BYTES`` (16 KiB) is refused by a real ``flows mcp --http`` however it
arrives: whole in one read, or a piece at a time, both ``431`` with ``mcp_head_too_large`` as a
JSON-RPC error without an id (no request was read). h11 bounds only a head still incomplete after a
read: the same head sent whole reached the MCP app, and trickled was uvicorn's plain-text 400. A
15 KiB head is served."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from flows._uvicorn import MAX_HEAD_BYTES
from tests.http_heads import OVER, UNDER, head_of, send_head
from tests.mcp.harness import http_server
from tests.mcp.test_wire import INITIALIZE


def _initialize(port: int, size: int) -> bytes:
    body = orjson.dumps(INITIALIZE)
    headers = (
        f"Host: 127.0.0.1:{port}",
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
        f"Content-Length: {len(body)}",
        "Connection: close",
    )
    return head_of("POST /mcp HTTP/1.1", size, headers=headers) + body


@pytest.mark.parametrize("trickle", [False, True], ids=["one-sendall", "trickled"])
def test_a_head_over_the_limit_is_a_431_and_one_under_it_is_served(tmp_path: Path, trickle: bool) -> None:
    with http_server(tmp_path / "history.db") as server:
        refused = send_head(server.port, _initialize(server.port, OVER), trickle=trickle)
        served = send_head(server.port, _initialize(server.port, UNDER), trickle=trickle)
    assert refused.status == 431
    assert refused.headers["content-type"] == "application/json"
    answer = orjson.loads(refused.body)
    assert answer["id"] is None and answer["error"]["code"] == -32600
    assert answer["error"]["data"]["code"] == "mcp_head_too_large"
    assert answer["error"]["data"]["limit"] == MAX_HEAD_BYTES
    assert served.status == 200, served
    assert b'"serverInfo"' in served.body

"""A request head over ``MAX_HEAD_BYTES`` (16 KiB) is refused by a real ``flows serve`` however it
arrives: whole in one read, or a piece at a time. h11 bounds only a head still incomplete after a
read, so a 20 KiB head sent in one ``sendall`` was served (200) and the same head trickled was
uvicorn's plain-text 400; both are now ``431`` with ``serve_head_too_large``, the API's JSON error
object and the security headers every answer carries. A 15 KiB head is served."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import orjson
import pytest

from flows._uvicorn import MAX_HEAD_BYTES
from tests.http_heads import OVER, UNDER, head_of, send_head
from tests.web.stores import DemoStore
from tests.web.test_served import Served, serving


@pytest.fixture(scope="module")
def server(demo: DemoStore) -> Iterator[Served]:
    with serving("--db", str(demo.db)) as served:
        yield served
    assert "Traceback" not in served.stderr[0]


def _runs_head(port: int, size: int) -> bytes:
    return head_of("GET /api/runs HTTP/1.1", size, headers=(f"Host: 127.0.0.1:{port}", "Connection: close"))


@pytest.mark.parametrize("trickle", [False, True], ids=["one-sendall", "trickled"])
def test_a_head_over_the_limit_is_a_431_with_the_coded_error(server: Served, trickle: bool) -> None:
    answer = send_head(server.port, _runs_head(server.port, OVER), trickle=trickle)
    assert answer.status == 431
    assert answer.headers["content-type"] == "application/json"
    assert answer.headers["connection"] == "close"
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert "default-src 'none'" in answer.headers["content-security-policy"]
    error = orjson.loads(answer.body)
    assert error["code"] == "serve_head_too_large"
    assert error["limit"] == MAX_HEAD_BYTES
    assert str(MAX_HEAD_BYTES) in error["message"]


@pytest.mark.parametrize("trickle", [False, True], ids=["one-sendall", "trickled"])
def test_a_head_under_the_limit_is_served(server: Served, demo: DemoStore, trickle: bool) -> None:
    answer = send_head(server.port, _runs_head(server.port, UNDER), trickle=trickle)
    assert answer.status == 200
    assert [run["runId"] for run in orjson.loads(answer.body)][-1] == demo.done_run  # the oldest


def test_a_head_of_exactly_the_limit_is_served_and_one_byte_more_is_not(server: Served) -> None:
    at = send_head(server.port, _runs_head(server.port, MAX_HEAD_BYTES), trickle=False)
    past = send_head(server.port, _runs_head(server.port, MAX_HEAD_BYTES + 1), trickle=False)
    assert (at.status, past.status) == (200, 431)


def test_the_server_serves_on_after_a_refused_head(server: Served) -> None:
    assert send_head(server.port, _runs_head(server.port, OVER), trickle=False).status == 431
    assert send_head(server.port, _runs_head(server.port, 100), trickle=False).status == 200


def test_a_head_over_the_limit_after_a_served_request_on_the_same_connection_is_refused(
    server: Served,
) -> None:
    # the second head waits in the buffer while the first is answered: it is judged when its turn comes
    first = head_of("GET /api/agents HTTP/1.1", 200, headers=(f"Host: 127.0.0.1:{server.port}",))
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
        sock.sendall(first + _runs_head(server.port, OVER))
        got = b""
        while chunk := sock.recv(65536):
            got += chunk
    assert got.startswith(b"HTTP/1.1 200 OK\r\n")
    second = got.index(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
    assert b"serve_head_too_large" in got[second:]

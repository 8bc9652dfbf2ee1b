"""A request head over ``MAX_HEAD_BYTES`` (16 KiB) is refused by a real ``flows serve`` however it
arrives: whole in one read, or a piece at a time. h11 bounds only a head still incomplete after a
read, so a 20 KiB head sent in one ``sendall`` was served (200) and the same head trickled was
uvicorn's plain-text 400; both are now ``431`` with ``serve_head_too_large``, the API's JSON error
object and the security headers every answer carries. A 15 KiB head is served."""

from __future__ import annotations

import logging
import math
import socket
import time
from collections.abc import Iterator

import orjson
import pytest

from flows._uvicorn import MAX_HEAD_BYTES, REFUSALS_LOG_S, RefusalLog
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


def _refused_once(port: int) -> bytes:
    """One oversized head on a new connection; its answer read whole, then the connection closed at
    once (not waited on while the server lingers)."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(_runs_head(port, OVER))
        got = b""
        while b"\r\n\r\n" not in got or not got.endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += chunk
    return got


def test_refused_heads_are_logged_one_line_a_window_with_a_count_not_a_line_each(demo: DemoStore) -> None:
    refusals = 25
    with serving("--db", str(demo.db)) as served:
        started = time.monotonic()
        for _ in range(refusals):
            assert _refused_once(served.port).startswith(b"HTTP/1.1 431 ")
        elapsed = time.monotonic() - started
        assert send_head(served.port, _runs_head(served.port, 100), trickle=False).status == 200
    log = served.stderr[0]
    assert "Invalid HTTP request received" not in log, log  # uvicorn's own line, once per refusal
    lines = [line for line in log.splitlines() if "431" in line]
    assert lines[0].endswith(
        f"answered 431 to a request head over {MAX_HEAD_BYTES} bytes and closed the connection; further "
        f"refusals are counted, one line every {REFUSALS_LOG_S:g} s at most"
    ), lines
    # a line for the first, then at most one a window (however slow this host ran them)
    assert len(lines) <= 1 + math.ceil(elapsed / REFUSALS_LOG_S) < refusals, lines
    assert "Traceback" not in log


def test_the_refusal_log_counts_what_it_did_not_log_and_says_it_once_the_window_passed() -> None:
    now = [100.0]
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("tests.refusal_log")
    logger.propagate = False
    logger.addHandler(Keep())
    log = RefusalLog(logger, every_s=60.0, clock=lambda: now[0])
    log.refused(16384)  # the first: at once
    for _ in range(9):  # nine more within the minute: counted
        now[0] += 5.0
        log.refused(16384)
    assert len(records) == 1
    now[0] = 100.0 + 61.0  # the window passed: the next one logs the count since the last line
    log.refused(16384)
    assert [r.getMessage() for r in records[1:]] == [
        "answered 431 to 10 request head(s) over 16384 bytes in the 61 s since the last such line"
    ]
    log.refused(16384)
    assert len(records) == 2 and log.unlogged == 1

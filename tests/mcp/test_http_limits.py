"""What an HTTP client can hold of a ``flows mcp --http`` server, over real sockets: a connection
that sends no whole request head (silent, or a header a byte at a time) is closed after
``HEAD_TIMEOUT_S``; a body that does not arrive within ``BODY_TIMEOUT_S`` of its head is answered
``408``; a silent connection after an answer is closed after ``KEEP_ALIVE_S``; a head over
``MAX_HEAD_BYTES`` is answered ``431`` (``mcp_head_too_large``); and past ``MAX_CONNECTIONS``
connections a request is answered ``503`` at once, until the silent ones are closed. Before, a
silent or trickling connection was held for ever, and nothing bounded how many."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from flows._uvicorn import HEAD_TIMEOUT_S, KEEP_ALIVE_S, MAX_HEAD_BYTES
from flows.mcp._server import BODY_TIMEOUT_S, MAX_CONNECTIONS
from tests.mcp.harness import http_server
from tests.mcp.test_wire import INITIALIZE

WAIT_S = HEAD_TIMEOUT_S + 20  # a generous bound: each deadline is asserted as passed, not to the second


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
    sock.settimeout(WAIT_S)
    return sock


def _head(port: int, body: bytes, *, length: int | None = None, extra: bytes = b"") -> bytes:
    return (
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
        b"Accept: application/json, text/event-stream\r\nContent-Length: %d\r\n%s\r\n"
        % (port, len(body) if length is None else length, extra)
    )


def _read_until_closed(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection (b"" if it closes at once)."""
    got = b""
    while chunk := sock.recv(65536):
        got += chunk
    return got


def _initialize(port: int, *, whole: bool = False) -> bytes:
    """The status line (``whole``: the whole answer) the server answers an ``initialize`` on a new
    connection with."""
    body = orjson.dumps(INITIALIZE)
    with _connect(port) as sock:
        sock.sendall(_head(port, body, extra=b"Connection: close\r\n") + body)
        answer = _read_until_closed(sock)
        return answer if whole else answer.split(b"\r\n", 1)[0]


def _timed(fn: Callable[[], object], out: dict[str, object], name: str) -> threading.Thread:
    def run() -> None:
        started = time.monotonic()
        try:
            out[name] = (fn(), time.monotonic() - started)
        except OSError as exc:  # a timeout: the server held the connection
            out[name] = (exc, time.monotonic() - started)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_silent_trickling_and_slow_clients_are_cut_off_and_connections_are_bounded(tmp_path: Path) -> None:
    with http_server(tmp_path / "history.db") as server:
        port = server.port
        assert _initialize(port) == b"HTTP/1.1 200 OK"
        out: dict[str, object] = {}

        def silent() -> bytes:
            with _connect(port) as sock:
                return _read_until_closed(sock)

        def trickling() -> bytes:
            with _connect(port) as sock:
                sock.sendall(b"POST /mcp HTTP/1.1\r\n")
                for _ in range(int(WAIT_S)):  # a header byte a second: each one came too late
                    try:
                        sock.sendall(b"X")
                    except OSError:
                        break
                    time.sleep(1)
                return _read_until_closed(sock)

        def slow_body() -> bytes:
            body = orjson.dumps(INITIALIZE)
            with _connect(port) as sock:
                sock.sendall(_head(port, body) + body[:10])
                return _read_until_closed(sock)

        def kept_alive() -> bytes:
            body = orjson.dumps(INITIALIZE)
            with _connect(port) as sock:
                sock.sendall(_head(port, body) + body)
                return _read_until_closed(sock)  # the answer, then nothing until it is closed

        threads = [_timed(f, out, f.__name__) for f in (silent, trickling, slow_body, kept_alive)]
        # the connections past the bound: silent ones fill it beside the four above (each sent its
        # head first: a head arriving past the bound would be answered busy), and a request on one
        # more is refused
        time.sleep(2.0)
        held = [_connect(port) for _ in range(MAX_CONNECTIONS - len(threads))]
        time.sleep(0.5)  # every one accepted by the server
        refused = _initialize(port, whole=True)
        for t in threads:
            t.join(WAIT_S + 5)
        for sock in held:  # each was closed by the server: recv sees the end at once
            assert sock.recv(1) == b""
            sock.close()
        assert _initialize(port) == b"HTTP/1.1 200 OK"  # the server serves again
        big = _connect(port)
        big.sendall(_head(port, b"{}", extra=b"X-Big: " + b"a" * MAX_HEAD_BYTES + b"\r\n") + b"{}")
        too_big = _read_until_closed(big)
        big.close()

    # refused as a call past the calls' bound is: mcp_busy under the request's id, Retry-After
    head, _, body = refused.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1" in head.lower(), head
    answer = orjson.loads(body)
    assert answer["id"] == INITIALIZE["id"] and answer["error"]["data"]["code"] == "mcp_busy", answer
    assert answer["error"]["data"]["limit"] == MAX_CONNECTIONS
    for name in ("silent", "trickling"):
        got, took = out[name]  # type: ignore[misc]
        assert got == b"", (name, got)
        assert HEAD_TIMEOUT_S - 1 <= took < HEAD_TIMEOUT_S + 10, (name, took)
    got, took = out["slow_body"]  # type: ignore[misc]
    assert isinstance(got, bytes) and got.startswith(b"HTTP/1.1 408 "), got
    assert b'"timeoutS":10.0' in got and BODY_TIMEOUT_S - 1 <= took < BODY_TIMEOUT_S + 10, took
    got, took = out["kept_alive"]  # type: ignore[misc]
    assert isinstance(got, bytes) and got.startswith(b"HTTP/1.1 200 OK"), got
    assert KEEP_ALIVE_S - 1 <= took < KEEP_ALIVE_S + 10, took
    assert too_big.startswith(b"HTTP/1.1 431 ") and b"mcp_head_too_large" in too_big, too_big[:200]

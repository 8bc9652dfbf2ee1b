"""A server command says where to connect only once it serves: a Ctrl-C the moment that line
appears is the server's to handle, and stops it. (``tests/test_cli_conventions.py`` sends that
Ctrl-C to ``flows serve`` and ``flows mcp --http`` and expects exit 130.)"""

from __future__ import annotations

import signal
import socket
from typing import Any

import pytest


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def test_the_announce_comes_once_the_server_handles_ctrl_c_and_accepts_connections() -> None:
    import uvicorn

    from flows._uvicorn import announcing_server

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    seen: dict[str, Any] = {}

    def announce() -> None:
        seen["handler"] = signal.getsignal(signal.SIGINT)
        with socket.create_connection(sock.getsockname()[:2], timeout=5):
            seen["accepted"] = True
        signal.raise_signal(signal.SIGINT)  # Ctrl-C the moment the line would appear

    server = announcing_server(uvicorn.Config(_app, lifespan="off", log_level="warning"), announce)
    with sock, pytest.raises(KeyboardInterrupt):  # uvicorn raises the signal again once stopped
        server.run(sockets=[sock])
    assert seen["accepted"] is True
    assert seen["handler"] not in (signal.default_int_handler, signal.SIG_DFL, signal.SIG_IGN)
    assert server.started and server.should_exit  # it stopped because of that Ctrl-C, cleanly

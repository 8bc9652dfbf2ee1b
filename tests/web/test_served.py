"""Against a real ``flows serve`` process on a free loopback port, with requests written byte for byte
on a socket (no client fixes up a header): the Host check parses the header whole."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest

pytest.importorskip("starlette", reason="the web extra is not installed")


from flows.web import ServeConfig, create_app
from tests.conftest import ROOT
from tests.web.stores import DemoStore


@dataclass
class Served:
    """A running ``flows serve``: its port, and its stderr once it stopped."""

    port: int
    stderr: list[str] = field(default_factory=list)


@contextmanager
def serving(*args: str) -> Iterator[Served]:
    """``flows serve ARGS --port 0 --json`` until the block ends (then Ctrl-C, as a user stops it)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "flows", "serve", *args, "--port", "0", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    served = None
    try:
        if not line:
            raise AssertionError(f"flows serve did not start: {proc.communicate(timeout=30)[1].decode()}")
        port = urlsplit(str(orjson.loads(line)["url"])).port
        assert port is not None
        served = Served(port)
        yield served
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        if served is not None:
            served.stderr.append(err.decode(errors="replace"))


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        assert self.headers.get("content-type", "").startswith("application/json"), self.headers
        return orjson.loads(self.body)


def request(port: int, target: str, hosts: list[str], version: str = "1.1") -> Answer:
    """``GET target`` with exactly these ``Host`` lines (none, one, several), as written."""
    head = f"GET {target} HTTP/{version}\r\n" + "".join(f"Host: {h}\r\n" for h in hosts)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall((head + "Connection: close\r\n\r\n").encode("latin-1"))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data, f"the server dropped the connection on {hosts!r}"
    top, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = top.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines)}
    return Answer(int(status_line.split()[1]), headers, body)


@pytest.fixture(scope="module")
def server(demo: DemoStore, agent: Path) -> Iterator[Served]:
    """The dashboard over the demo store and agent, without a token (the Host check is on)."""
    with serving("--db", str(demo.db), "--sail-home", str(agent)) as served:
        yield served
    assert "Traceback" not in served.stderr[0]


# -- the Host check -----------------------------------------------------------------------------

#: every form a browser or a tool uses for this server (``{port}``: the server's port)
LOOPBACK = [
    "127.0.0.1",
    "127.0.0.1:{port}",
    "localhost",
    "localhost:{port}",
    "LocalHost:{port}",
    "[::1]",
    "[::1]:{port}",
    "[0:0:0:0:0:0:0:1]:{port}",
]

#: Host values that are not a loopback host and port, though a prefix, a suffix or a lenient parse
#: of them is
MALFORMED = [
    "evil.example@127.0.0.1",
    "evil.example@127.0.0.1:{port}",
    "127.0.0.1@evil.example",
    "127.0.0.1:99999",
    "127.0.0.1:18446744073709551617",
    "127.0.0.1:80x",
    "127.0.0.1:{port}x",
    "127.0.0.1:{port}:{port}",
    "127.0.0.1:-1",
    "127.0.0.1 evil.example",
    "127.0.0.1/evil.example",
    "127.0.0.1#evil.example",
    "localhost.evil.example",
    "evil.example:99999",
    "[evil.example]",
    "[127.0.0.1]",
    "[::1%25lo]:{port}",
    "[v1.loopback]",
    "[::1",
    "::1",
    "[::1]evil",
    "[::1]:{port}x",
    "",
    ":{port}",
    "local%68ost",
    "127.0.0.1%3a{port}",
    "evil.example.",
    "EVIL.EXAMPLE",
    "EVIL.EXAMPLE:{port}",
    "127.1",
    "2130706433",
    "0x7f.0.0.1",
    "127.000.0.1",
    "127.0.0.1.",
]


def _refused_as_foreign(answer: Answer) -> None:
    assert answer.status == 400, answer
    body = answer.json()
    assert body["code"] == "serve_bad_request" and "loopback" in body["message"]


@pytest.mark.parametrize("host", LOOPBACK)
def test_every_loopback_host_form_is_served(server: Served, host: str) -> None:
    answer = request(server.port, "/api/runs", [host.format(port=server.port)])
    assert answer.status == 200 and isinstance(answer.json(), list) and answer.json()


@pytest.mark.parametrize("host", MALFORMED)
def test_a_malformed_host_is_refused_as_a_foreign_one_is(server: Served, host: str) -> None:
    _refused_as_foreign(request(server.port, "/api/runs", [host.format(port=server.port)]))


def test_a_foreign_host_and_a_malformed_one_get_the_same_refusal_page(
    server: Served, demo: DemoStore
) -> None:
    foreign = request(server.port, "/runs", ["evil.example"])
    malformed = request(server.port, "/runs", ["evil.example@127.0.0.1"])
    for answer in (foreign, malformed):
        assert answer.status == 400 and b"serve_bad_request" in answer.body
        assert str(demo.db).encode() not in answer.body  # the refusal names nothing of the store


def test_a_request_without_a_host_is_refused(server: Served) -> None:
    # HTTP/1.0 may leave Host out; the guard cannot tell which name the client used
    _refused_as_foreign(request(server.port, "/api/runs", [], version="1.0"))


@pytest.mark.parametrize("version", ["1.0", "1.1"])
def test_several_host_headers_are_never_served(server: Served, version: str) -> None:
    # the HTTP layer refuses them before the app (a 400 of its own); the guard would too (below)
    answer = request(server.port, "/api/runs", ["127.0.0.1", "evil.example"], version=version)
    assert answer.status == 400 and b"runId" not in answer.body


def test_the_guard_itself_refuses_several_host_headers(demo: DemoStore) -> None:
    """The app under an HTTP layer that passes several Host headers on (the one `flows serve` runs
    refuses them first): its own refusal, the foreign host's."""
    app = create_app(ServeConfig(db=str(demo.db)))
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/api/runs",
        "raw_path": b"/api/runs",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1"), (b"host", b"evil.example")],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8765),
    }
    try:
        asyncio.run(app(scope, receive, send))
    finally:
        app.state.reader.close()
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = orjson.loads(b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"))
    assert start["status"] == 400 and body["code"] == "serve_bad_request" and "loopback" in body["message"]

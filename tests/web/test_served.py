"""Against a real ``flows serve`` process on a free loopback port, with requests written byte for byte
on a socket (no client fixes up a header): the Host check parses the header whole, and an answer the
API cannot encode as JSON is its coded error, logged once, never a traceback or a dropped connection."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest

pytest.importorskip("starlette", reason="the web extra is not installed")

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

from flows.web import Dashboard, Reader, ServeConfig, ServeNotFound, create_app
from memory.ledger import Ledger
from tests.conftest import ROOT
from tests.web.stores import ROUTER, USDC, WETH, DemoStore, agent_entries, agent_home


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


# -- answers JSON cannot carry --------------------------------------------------------------------


@contextmanager
def uvicorn_serving(app: Starlette) -> Iterator[int]:
    """``app`` under uvicorn, as ``flows serve`` runs it, on a free loopback port (yielded)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", log_config=None, access_log=False, lifespan="off")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]})
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


class _Refused(ServeNotFound):
    """A coded error whose context holds a number JSON cannot carry."""

    def __init__(self) -> None:
        super().__init__("nothing here")
        self.expected = 2**64


def _refuse(request: Request) -> tuple[object, str | None]:
    raise _Refused()


#: what no JSON encoder here writes: integers past 64 bits either way, a key that is not text, bytes
UNENCODABLE: dict[str, object] = {
    "past-u64": 2**64,
    "below-i64": [{"deep": -(2**63) - 1}],
    "int-key": {1: "one"},
    "bytes": b"\x00",
}


def test_an_answer_json_cannot_carry_is_the_apis_coded_error_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every ``/api`` route answers through ``Dashboard.api``; the stores it reads give only what
    JSON carries (the memory layer bounds its times, the journal's records are JSON, an agent's
    ``interval_s`` is bounded below), so the values are handed to that wrapper directly, under the
    server ``flows serve`` runs."""
    reader = Reader(ServeConfig(db=str(tmp_path / "h.db")))
    d = Dashboard(reader)
    routes = [
        Route(f"/api/{name}", d.api(lambda request, v=value: ({"value": v}, None)))
        for name, value in UNENCODABLE.items()
    ]
    routes.append(Route("/api/refused", d.api(_refuse)))
    caplog.set_level(logging.ERROR, logger="flows.serve")
    try:
        with uvicorn_serving(Starlette(routes=routes)) as port:
            answers = {name: request(port, f"/api/{name}", ["127.0.0.1"]) for name in UNENCODABLE}
            refused = request(port, "/api/refused", ["127.0.0.1"])
            again = request(port, "/api/past-u64", ["127.0.0.1"])  # the server goes on serving
    finally:
        reader.close()
    for name, answer in {**answers, "refused": refused, "again": again}.items():
        assert answer.status == 500, name
        body = answer.json()
        assert body["code"] == "serve_internal" and "JSON cannot carry" in body["message"], name
        assert b"Traceback" not in answer.body
    logged = [r for r in caplog.records if r.name == "flows.serve"]
    assert len(logged) == len(UNENCODABLE) + 2  # once per failed answer, with its traceback
    assert all(r.exc_info is not None for r in logged)


def _agent_home(home: Path, interval_s: int) -> Path:
    """An agent that confirmed one swap, nothing holding its next, with ``interval_s`` in its config
    (a file of the agent home: any bytes in it are the store's to give)."""
    sail = home / ".sail"
    (sail / "memory").mkdir(parents=True)
    (sail / "config.toml").write_text(
        f'rpc_url = "http://127.0.0.1:8545"\nrouter = "{ROUTER}"\ntoken_in = "{USDC}"\n'
        f'token_out = "{WETH}"\namount_in = "25000000"\ninterval_s = {interval_s}\nmin_balance = "1"\n'
    )
    with Ledger(sail).writer() as writer:
        writer.append(agent_entries()[0])  # a confirmed swap
    return home


@pytest.mark.parametrize("interval_s", [2**64, 10**30])
def test_an_interval_past_what_sails_config_takes_is_an_interval_problem(
    tmp_path: Path, interval_s: int
) -> None:
    # TOML carries integers of any size; sail's config takes 0 to 2**63-1, and a larger one reached
    # the status answer as a number JSON cannot carry
    home = _agent_home(tmp_path / "agent", interval_s)
    with serving("--db", str(tmp_path / "h.db"), "--sail-home", str(home)) as served:
        status = request(served.port, "/api/agents/0/status", ["127.0.0.1"])
        journal = request(served.port, "/api/agents/0/journal", ["127.0.0.1"])
    assert status.status == 200 and journal.status == 200
    assert status.json()["intervalS"] is None and "interval_s" in status.json()["intervalProblem"]
    assert "Traceback" not in served.stderr[0]


def test_the_largest_interval_sails_config_takes_is_served(tmp_path: Path) -> None:
    home = _agent_home(tmp_path / "agent", 2**63 - 1)
    with serving("--db", str(tmp_path / "h.db"), "--sail-home", str(home)) as served:
        status = request(served.port, "/api/agents/0/status", ["127.0.0.1"])
        journal = request(served.port, "/api/agents/0/journal", ["127.0.0.1"])
        page = request(served.port, "/agents/0", ["127.0.0.1"])
    assert status.status == 200 and status.json()["intervalS"] == 2**63 - 1
    assert status.json()["nextEligibleMs"] is None  # past what a JSON time carries: the memory layer's rule
    assert journal.status == 200 and page.status == 200
    assert "Traceback" not in served.stderr[0]


# -- a long line in the ledger ----------------------------------------------------------------------


def test_a_long_ledger_line_costs_its_length_not_its_length_squared(tmp_path: Path) -> None:
    """The ledger is read backwards in blocks; a line spanning many blocks was joined again on every
    block (a 40 MB line held the server, and every request queued behind it, for 16 s)."""
    home = agent_home(tmp_path / "agent")
    ledger = Ledger(home / ".sail").path
    first, rest = ledger.read_bytes().split(b"\n", 1)
    long_line = b'{"kind":"skipped","reason":"' + b"x" * (48 << 20) + b'"}'  # damaged: no ts
    ledger.write_bytes(first + b"\n" + long_line + b"\n" + rest)
    with serving("--db", str(tmp_path / "h.db"), "--sail-home", str(home)) as served:
        started = time.monotonic()
        # both decode it (the chart passed over lines of other kinds undecoded, and so over damage)
        balances = request(served.port, "/api/agents/0/balances", ["127.0.0.1"])
        entries = request(served.port, "/api/agents/0/ledger", ["127.0.0.1"])
        elapsed = time.monotonic() - started
    for answer in (balances, entries):
        assert answer.status == 500 and answer.json()["code"] == "journal_corrupt"
        assert answer.json()["line"] == 2
    assert elapsed < 10, f"two reads across a 48 MB line took {elapsed:.1f} s"


def test_a_silent_or_trickling_connection_is_closed_at_the_head_deadline(server: Served) -> None:
    # uvicorn times a connection out only once it has answered, and any byte stops that timer: a
    # connection left silent, or sent a header a byte at a time, was held for ever
    from flows._uvicorn import HEAD_TIMEOUT_S

    def held_for(trickle: bool) -> float:
        with socket.create_connection(("127.0.0.1", server.port), timeout=HEAD_TIMEOUT_S + 20) as sock:
            started = time.monotonic()
            sock.settimeout(1.0)
            sent = 0
            while time.monotonic() - started < HEAD_TIMEOUT_S + 15:
                if trickle:
                    with contextlib.suppress(OSError):
                        sock.sendall(b"GET / HTTP/1.1\r\nX-Slow: "[sent : sent + 1] or b"a")
                    sent += 1
                try:
                    if sock.recv(1) == b"":
                        return time.monotonic() - started
                except TimeoutError:
                    continue
                except OSError:
                    return time.monotonic() - started
            return time.monotonic() - started

    for trickle in (False, True):
        took = held_for(trickle)
        assert HEAD_TIMEOUT_S - 1 <= took < HEAD_TIMEOUT_S + 10, (trickle, took)
    assert request(server.port, "/runs", ["127.0.0.1"]).status == 200  # and it serves on

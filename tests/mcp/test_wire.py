"""The wire, driven by hand: every request with an id is answered (bytes that are not JSON, messages of
the wrong shape, strings that are not Unicode, requests over the size limit), a huge line is read in
linear time, and the HTTP gates check before they act."""

from __future__ import annotations

import contextlib
import json
import os
import select
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import orjson

import memory
from flows.mcp._stdio import MAX_IN_FLIGHT
from flows.mcp._wire import MAX_REQUEST_BYTES
from journal import RunState
from tests.mcp.harness import START_TIMEOUT_S, http_server, mcp_argv, mcp_runs, server_env, stop

ANSWER_TIMEOUT_S = 10.0
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602


class RawStdio:
    """A ``flows mcp`` process over stdio, written and read line by line."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self._buffer = b""

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def send_json(self, message: dict[str, Any]) -> None:
        self.send(orjson.dumps(message))

    def answer(self, timeout: float = ANSWER_TIMEOUT_S) -> dict[str, Any]:
        """The next line the server writes, within ``timeout`` seconds."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(left, 0))
            if not ready:
                raise AssertionError(f"no answer within {timeout}s")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError("the server closed its stdout")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        answer: dict[str, Any] = json.loads(line)  # not orjson: it reads an integer past 64 bits as a float
        return answer

    def ping(self, request_id: int) -> None:
        """The server still serves: a ping is answered under its id."""
        self.send_json({"jsonrpc": "2.0", "id": request_id, "method": "ping"})
        assert self.answer() == {"jsonrpc": "2.0", "id": request_id, "result": {}}


@contextlib.contextmanager
def raw_stdio(db: Path) -> Iterator[RawStdio]:
    """An initialized stdio server for ``db``; closing stdin on leaving, it must exit 0."""
    errpath = db.parent / "stdio.err"
    with errpath.open("wb") as err:
        proc = subprocess.Popen(
            mcp_argv(db), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=server_env()
        )
    assert proc.stdin is not None and proc.stdout is not None
    wire = RawStdio(proc)
    try:
        wire.send_json(INITIALIZE)
        assert wire.answer(START_TIMEOUT_S)["id"] == 0
        wire.send_json(INITIALIZED)
        yield wire
        proc.stdin.close()
        assert proc.wait(timeout=START_TIMEOUT_S) == 0
    finally:
        stop(proc)
        proc.stdin.close()
        proc.stdout.close()
    assert b"Traceback" not in errpath.read_bytes()


def _call(request_id: object, text: str) -> bytes:
    arguments = {"name": "learn", "arguments": {"text": text}}
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": arguments})


UNANSWERED_BY_THE_SDK: list[tuple[bytes, object, int]] = [
    (b"not json at all", None, PARSE_ERROR),
    (b'{"jsonrpc": "2.0", "id": 5, "method": "tools/list"', None, PARSE_ERROR),  # cut short
    (_call(6, "X").replace(b"X", b"\\ud800"), 6, INVALID_PARAMS),  # a lone surrogate: not Unicode
    (_call("s7", "X").replace(b"X", b"a\\udfffb"), "s7", INVALID_PARAMS),
    (b'{"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": 5}', 8, INVALID_PARAMS),
    (b'{"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": "learn"}', 9, INVALID_PARAMS),
    (b'{"jsonrpc": "2.0", "id": 10, "method": 7}', 10, INVALID_REQUEST),
    (b'{"id": 11}', 11, INVALID_REQUEST),
    # a request whose `jsonrpc` is wrong or missing is an invalid request: its params are not to blame
    (b'{"jsonrpc": "1.0", "id": 19, "method": "ping"}', 19, INVALID_REQUEST),
    (b'{"id": 20, "method": "tools/list", "params": {}}', 20, INVALID_REQUEST),
    # a request that also holds an answer's member: the SDK read it as an answer to nothing, and
    # dropped it (the end of stdin then waited 30 s for its answer)
    (_call(21, "never learned")[:-1] + b', "error": {"code": 1, "message": "x"}}', 21, INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "id": 22, "method": "ping", "params": 5, "result": {}}', 22, INVALID_PARAMS),
    (b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}', None, INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "id": [12], "method": "ping"}', None, INVALID_REQUEST),
    (b"[1, 2]", None, INVALID_REQUEST),
    (b"7", None, INVALID_REQUEST),
    (_call(14, "X").replace(b'"X"', b"[" * 199 + b"]" * 199), 14, INVALID_PARAMS),  # past the SDK's depth
    (b"[" * 5000 + b"]" * 5000, None, PARSE_ERROR),
    # a line of characters Python counts as space but JSON does not is no blank line: it is not JSON
    *(
        (text.encode(), None, PARSE_ERROR)
        for text in ("\x0c", "\x0b", "\x1c", "\x1f", "\x85", "\u2028", "\xa0")
    ),
    (" \u3000 ".encode(), None, PARSE_ERROR),
    # a number JSON has not, where the SDK cannot read the message either: under its id, named
    (b'{"jsonrpc": "2.0", "id": 15, "method": "tools/call", "params": NaN}', 15, INVALID_PARAMS),
    (b'{"jsonrpc": "2.0", "id": 16, "method": "ping", "params": ' + b"9" * 5000 + b"}", 16, INVALID_PARAMS),
    # an integer id past 64 bits is an id all the same (orjson alone would read it as a float)
    (b'{"jsonrpc": "2.0", "id": 100000000000000000000000001, "method": 7}', 10**26 + 1, INVALID_REQUEST),
    (
        _call(1, "X").replace(b'"id":1', b'"id":18446744073709551616').replace(b"X", b"\\ud800"),
        2**64,
        INVALID_PARAMS,
    ),
]


MISSHAPEN_ASKING_NOTHING: list[bytes] = [
    b'{"jsonrpc": "2.0", "method": "notifications/initialized", "params": 5}',
    b'{"jsonrpc": "2.0", "method": 7}',
    b'{"method": "notifications/initialized"}',
    b'{"jsonrpc": "1.0", "method": "ping"}',
    b"{}",
    b'{"jsonrpc": "2.0", "id": 5, "result": 5}',  # an answer to nothing, of the wrong shape
    b'{"jsonrpc": "2.0", "id": 6, "error": "no"}',
]


def test_every_stdio_request_with_an_id_is_answered_and_the_server_goes_on(tmp_path: Path) -> None:
    with raw_stdio(tmp_path / "history.db") as wire:
        for n, (line, request_id, code) in enumerate(UNANSWERED_BY_THE_SDK):
            wire.send(line)
            answer = wire.answer()
            assert (answer["id"], answer["error"]["code"]) == (request_id, code), line
            assert answer["jsonrpc"] == "2.0" and answer["error"]["message"], line
            if b"NaN" in line or b"9" * 5000 in line:
                assert "number is NaN, infinite" in answer["error"]["message"], line
            elif b"\\ud800" in line or b"\\udfff" in line:
                assert "lone surrogate" in answer["error"]["message"], line
            elif b'"jsonrpc": "1.0"' in line:  # what is wrong, and nothing a response would lack
                assert answer["error"]["message"] == "Invalid request: `jsonrpc`: Input should be '2.0'"
            elif b'"error": {' in line:
                assert "holds no `error`" in answer["error"]["message"], answer
            wire.ping(1000 + n)
        # a notification (or an answer) of the wrong shape and a blank line ask nothing, and get nothing
        for line in MISSHAPEN_ASKING_NOTHING:
            wire.send(line)
        wire.send(b"")
        wire.send(b" \t\r")  # JSON's whitespace only: blank too
        wire.ping(2000)
        # U+2028, U+0085 and U+001C end a line for Python's `splitlines`, not for the wire: a request
        # holding them (raw within a string, or escaped) is one request, its text kept whole
        for n, text in enumerate(["a\u2028b\x85c", "d\x1ce"]):
            wire.send(_call(2100 + n, text))
            learned = wire.answer()
            assert learned["id"] == 2100 + n, learned
            key = learned["result"]["structuredContent"]["key"]
            arguments = {"name": "get", "arguments": {"key": key}}
            wire.send_json({"jsonrpc": "2.0", "id": 2200 + n, "method": "tools/call", "params": arguments})
            got = wire.answer()
            assert got["id"] == 2200 + n and got["result"]["structuredContent"]["finding"]["text"] == text, (
                got
            )
        # numbers JSON has not, in a message the SDK reads: the tool's own checks answer, as over HTTP
        for n, number in enumerate([b"NaN", b"-Infinity", b"1e400", b"9" * 400]):
            wire.send(_call(3000 + n, "X").replace(b'"X"', number))
            answer = wire.answer()
            assert answer["id"] == 3000 + n and answer["result"]["isError"] is True, number[:20]
            assert answer["result"]["structuredContent"]["error"]["code"] == "mcp_arguments_invalid"
        # bytes that are not UTF-8 are read as the SDK reads them (replaced), and answered
        wire.send(_call(13, "caf\xe9").replace(b"caf\\u00e9", b"caf\xe9"))
        answer = wire.answer()
        assert answer["id"] == 13 and "result" in answer
    assert len(mcp_runs(tmp_path / "history.db")) == 1  # only well-formed calls learned, in one root run


def test_a_stdio_request_over_the_limit_is_answered_under_its_id_without_being_read_whole(
    tmp_path: Path,
) -> None:
    big = _call(21, "y" * (MAX_REQUEST_BYTES + 1))
    with raw_stdio(tmp_path / "history.db") as wire:
        wire.send(big)
        answer = wire.answer()
        assert answer["id"] == 21 and answer["error"]["code"] == INVALID_REQUEST
        assert answer["error"]["data"] == {"limit": MAX_REQUEST_BYTES}
        assert str(MAX_REQUEST_BYTES) in answer["error"]["message"]
        wire.ping(22)
        # an id longer than twenty digits is answered whole, never cut to its first twenty
        wire.send(big.replace(b'"id":21', b'"id":123456789012345678901234'))
        assert wire.answer()["id"] == 123456789012345678901234
        # a form feed is no JSON whitespace: the line's start is not JSON, and names no id
        wire.send(big.replace(b'"id":21', b'"id"\x0c:24'))
        assert wire.answer()["id"] is None
        # one byte under the limit is read and answered by the tool (here: a text over its own limit)
        wire.send(_call(23, "y" * (MAX_REQUEST_BYTES - len(_call(23, "")) - 1)))
        assert wire.answer()["id"] == 23
    assert mcp_runs(tmp_path / "history.db") == []


def test_a_huge_stdio_line_is_read_in_linear_time(tmp_path: Path) -> None:
    # 48 MiB took 30-45 s when each chunk was appended to the growing line and the whole line split
    big = _call(31, "y" * (48 * 1024 * 1024))
    with raw_stdio(tmp_path / "history.db") as wire:
        started = time.monotonic()
        wire.send(big)
        answer = wire.answer(timeout=30)
        elapsed = time.monotonic() - started
        assert answer["id"] == 31 and answer["error"]["code"] == INVALID_REQUEST
        wire.ping(32)
    assert elapsed < 10, f"a 48 MiB line took {elapsed:.1f}s"


def test_stdin_is_not_read_while_too_many_requests_await_their_answers(tmp_path: Path) -> None:
    """The SDK runs every request it reads at once: while calls were slow, a client writing without
    pause had the server read (and hold) every line it sent. Past ``MAX_IN_FLIGHT`` unanswered
    requests the server stops reading, and the pipe pushes back; every request is answered after."""
    db = tmp_path / "history.db"
    big = "s" * 1_000_000
    recall = {"name": "recall", "arguments": {"source": big}}
    lines = [
        orjson.dumps({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": recall}) + b"\n"
        for n in range(MAX_IN_FLIGHT + 30)
    ]
    data = memoryview(b"".join(lines))
    with raw_stdio(db) as wire:
        lock = sqlite3.connect(db, isolation_level=None)  # every recall now waits for the history DB
        lock.execute("BEGIN EXCLUSIVE")
        assert wire.proc.stdin is not None
        fd = wire.proc.stdin.fileno()
        os.set_blocking(fd, False)
        written = 0
        try:
            while written < len(data):
                try:
                    written += os.write(fd, data[written:])
                except BlockingIOError:
                    if not select.select([], [fd], [], 5)[1]:
                        break  # the server reads no more
        finally:
            lock.execute("ROLLBACK")
            lock.close()
            os.set_blocking(fd, True)
        assert written < len(lines[0]) * (MAX_IN_FLIGHT + 4), f"the server read {written} bytes"
        while written < len(data):
            written += os.write(fd, data[written:])
        answered = sorted(wire.answer(START_TIMEOUT_S)["id"] for _ in lines)
        assert answered == list(range(len(lines)))
        wire.ping(1000)


# -- HTTP ---------------------------------------------------------------------------------------

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _messages(response: httpx2.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an answer, whether plain JSON or an event stream."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return [
            orjson.loads(line[5:])
            for line in response.text.splitlines()
            if line.startswith("data:") and line[5:].strip()
        ]
    return [response.json()]


def _post(client: httpx2.Client, url: str, message: Any, **headers: str) -> httpx2.Response:
    return client.post(url, content=orjson.dumps(message), headers={**ACCEPT, **headers})


@contextlib.contextmanager
def _session(url: str) -> Iterator[tuple[httpx2.Client, dict[str, str]]]:
    with httpx2.Client(timeout=START_TIMEOUT_S) as client:
        opened = _post(client, url, INITIALIZE)
        assert opened.status_code == 200, opened.text
        ids = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
        assert _post(client, url, INITIALIZED, **ids).status_code == 202
        yield client, ids


def test_an_http_request_over_the_limit_is_a_json_rpc_error_and_the_server_goes_on(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    with http_server(db) as server, _session(server.url) as (client, ids):
        big = orjson.loads(_call(41, "y" * (MAX_REQUEST_BYTES + 1)))
        refused = _post(client, server.url, big, **ids)
        assert refused.status_code == 413
        assert refused.json()["error"]["code"] == INVALID_REQUEST
        assert refused.json()["error"]["data"] == {"limit": MAX_REQUEST_BYTES}

        def chunks() -> Iterator[bytes]:  # no Content-Length: the body is counted as it comes
            body = _call(42, "y" * (MAX_REQUEST_BYTES + 1))
            for i in range(0, len(body), 65536):
                yield body[i : i + 65536]

        streamed = client.post(server.url, content=chunks(), headers={**ACCEPT, **ids})
        assert streamed.status_code == 413 and streamed.json()["error"]["code"] == INVALID_REQUEST
        ping = _post(client, server.url, {"jsonrpc": "2.0", "id": 43, "method": "ping"}, **ids)
        assert _messages(ping) == [{"jsonrpc": "2.0", "id": 43, "result": {}}]
    assert mcp_runs(db) == []


MISSHAPEN_OVER_HTTP: list[tuple[bytes, object, int]] = [
    # ids that are not a string or an integer: the SDK took these for notifications and answered none
    (b'{"jsonrpc": "2.0", "id": null, "method": "ping"}', None, INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}', None, INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools/list"}', None, INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "id": true, "method": "ping"}', None, INVALID_REQUEST),
    # the wrong shape: answered under the request's id, with the code the stdio transport gives
    (b"[1, 2]", None, INVALID_REQUEST),
    (b"7", None, INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "id": 61, "method": 7}', 61, INVALID_REQUEST),
    (b'{"jsonrpc": "1.0", "id": 62, "method": "ping"}', 62, INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "id": "s63", "method": "tools/list", "params": 5}', "s63", INVALID_PARAMS),
    # a request that also holds an answer's member: the SDK took it for an answer, and said 202
    (_call(64, "never learned")[:-1] + b', "error": {"code": 1, "message": "x"}}', 64, INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "id": 65, "method": "ping", "params": 5, "result": {}}', 65, INVALID_PARAMS),
]


def test_every_http_request_with_an_id_is_answered_as_over_stdio(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    with http_server(db) as server, _session(server.url) as (client, ids):
        for n, (body, request_id, code) in enumerate(MISSHAPEN_OVER_HTTP):
            answered = client.post(server.url, content=body, headers={**ACCEPT, **ids})
            assert answered.status_code == 400, body
            [answer] = _messages(answered)
            assert (answer["id"], answer["error"]["code"]) == (request_id, code), body
            assert answer["jsonrpc"] == "2.0" and answer["error"]["message"], body
            ping = _post(client, server.url, {"jsonrpc": "2.0", "id": 70 + n, "method": "ping"}, **ids)
            assert _messages(ping) == [{"jsonrpc": "2.0", "id": 70 + n, "result": {}}]
        # a notification asks nothing: accepted, as before
        notification = b'{"jsonrpc": "2.0", "method": "notifications/initialized"}'
        assert client.post(server.url, content=notification, headers={**ACCEPT, **ids}).status_code == 202
        # of the wrong shape, it asks nothing all the same: accepted with no answer, as over stdio
        for n, body in enumerate(MISSHAPEN_ASKING_NOTHING):
            accepted = client.post(server.url, content=body, headers={**ACCEPT, **ids})
            assert (accepted.status_code, accepted.content) == (202, b""), (body, accepted.text)
            ping = _post(client, server.url, {"jsonrpc": "2.0", "id": 90 + n, "method": "ping"}, **ids)
            assert _messages(ping) == [{"jsonrpc": "2.0", "id": 90 + n, "result": {}}]
    assert "Traceback" not in server.stderr()
    assert mcp_runs(db) == []  # no call was run


def test_a_delete_with_a_foreign_host_is_refused_before_it_ends_anything(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    with http_server(db) as server, _session(server.url) as (client, ids):
        learn = orjson.loads(_call(51, "the gate checks first"))
        assert "result" in _messages(_post(client, server.url, learn, **ids))[0]
        [root] = mcp_runs(db)
        for refused_by in ({"Host": "evil.example"}, {"Origin": "http://evil.example"}):
            refused = client.delete(server.url, headers={**ids, **refused_by})
            assert refused.status_code in (421, 403), refused.text
            assert [r.state for r in mcp_runs(db)] == [RunState.RUNNING]  # nothing ended
        again = orjson.loads(_call(52, "the session is still open"))
        assert "result" in _messages(_post(client, server.url, again, **ids))[0]
        assert [r.run_id for r in mcp_runs(db)] == [root.run_id]  # no second root run
        unknown = client.delete(server.url, headers={**ids, "mcp-session-id": "not-a-session"})
        assert unknown.status_code >= 400
        assert [r.state for r in mcp_runs(db)] == [RunState.RUNNING]
        assert client.delete(server.url, headers=ids).status_code == 200
        assert [r.state for r in mcp_runs(db)] == [RunState.DONE]  # ended before the answer came


def test_a_request_naming_a_header_the_gate_reads_twice_is_refused_before_it_ends_anything(
    tmp_path: Path,
) -> None:
    """A DELETE naming session A then session B: the SDK would delete A (the first header) while the
    gate ended B's root run (the last) and gave back B's place; refused, it ends nothing."""
    db = tmp_path / "history.db"
    with (
        http_server(db, "--max-sessions", "2") as server,
        _session(server.url) as (client, a),
        _session(server.url) as (_, b),
    ):
        for n, ids in enumerate((a, b)):
            learn = orjson.loads(_call(81 + n, f"a finding of session {n}"))
            assert "result" in _messages(_post(client, server.url, learn, **ids))[0]
        runs = {r.run_id: r.state for r in mcp_runs(db)}
        assert list(runs.values()) == [RunState.RUNNING, RunState.RUNNING]
        both = [("mcp-session-id", a["mcp-session-id"]), ("mcp-session-id", b["mcp-session-id"])]
        version = ("mcp-protocol-version", "2025-06-18")
        twice: list[tuple[list[tuple[str, str]], str]] = [
            ([*both, version], "mcp-session-id"),
            ([*both[::-1], version], "mcp-session-id"),
            (
                [both[0], version, ("authorization", "Bearer x"), ("Authorization", "Bearer y")],
                "authorization",
            ),
            ([both[0], version, ("origin", "http://127.0.0.1"), ("origin", "http://localhost")], "origin"),
        ]
        for headers, name in twice:
            refused = client.delete(server.url, headers=headers)
            assert refused.status_code == 400, refused.text
            error = refused.json()["error"]
            assert error["code"] == INVALID_REQUEST and error["data"]["code"] == "mcp_header_repeated"
            assert (error["data"]["header"], error["data"]["count"]) == (name, 2)
            assert "send it once" in error["message"]
            assert {r.run_id: r.state for r in mcp_runs(db)} == runs  # nothing ended
        learn = orjson.loads(_call(83, "named twice"))
        posted = client.post(
            server.url, content=orjson.dumps(learn), headers=[*ACCEPT.items(), *both, version]
        )
        assert posted.status_code == 400 and posted.json()["error"]["data"]["code"] == "mcp_header_repeated"
        # both sessions still open and served; no place was given back
        for n, ids in enumerate((a, b)):
            ping = _post(client, server.url, {"jsonrpc": "2.0", "id": 84 + n, "method": "ping"}, **ids)
            assert _messages(ping) == [{"jsonrpc": "2.0", "id": 84 + n, "result": {}}]
        full = _post(client, server.url, INITIALIZE)
        assert full.status_code == 503 and full.json()["error"]["data"]["code"] == "mcp_sessions_full"
        # sent again with the header once: A's session, and only A's, ends
        assert client.delete(server.url, headers=a).status_code == 200
        [run_a, run_b] = mcp_runs(db)
        assert (run_a.state, run_b.state) == (RunState.DONE, RunState.RUNNING)
        ping = _post(client, server.url, {"jsonrpc": "2.0", "id": 86, "method": "ping"}, **b)
        assert _messages(ping) == [{"jsonrpc": "2.0", "id": 86, "result": {}}]
        assert _post(client, server.url, INITIALIZE).status_code == 200  # A's place, given back
    assert len(mcp_runs(db)) == 2  # the call naming two sessions ran in neither
    assert "Traceback" not in server.stderr()


def _piped(
    db: Path, lines: list[bytes], *, close_stdout: bool = False
) -> tuple[int, list[dict[str, Any]], float]:
    """Run ``flows mcp`` with ``lines`` (after the handshake) written at once and stdin then closed,
    as ``flows mcp < requests`` does; its exit code, every answer it wrote, and how long it took."""
    started = time.monotonic()
    proc = subprocess.Popen(
        mcp_argv(db), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=server_env()
    )
    wire = b"".join(orjson.dumps(m) + b"\n" for m in (INITIALIZE, INITIALIZED)) + b"".join(
        x + b"\n" for x in lines
    )
    if close_stdout:
        assert proc.stdout is not None
        proc.stdout.close()
        proc.stdout = None
    out, err = proc.communicate(wire, timeout=120)
    assert b"Traceback" not in err, err.decode()[-2000:]
    answers = [json.loads(line) for line in (out or b"").splitlines()]
    return proc.returncode, answers, time.monotonic() - started


def test_stdio_answers_every_request_read_before_stdin_closes(tmp_path: Path) -> None:
    """A client may write its requests, close stdin and then read: each one is answered, the learns
    among them are on record, and the server then exits 0 (the SDK alone cancels what is running)."""
    db = tmp_path / "history.db"
    learns = [_call(n, f"finding {n} about piped requests") for n in range(1, 121)]
    others = [
        orjson.dumps(
            {
                "jsonrpc": "2.0",
                "id": f"r{n}",
                "method": "tools/call",
                "params": {"name": "recall", "arguments": {"limit": 3}},
            }
        )
        for n in range(40)
    ]
    lines = [*learns[:40], *others, *learns[40:]]  # reads among the learns, all in flight at once
    lines.append(orjson.dumps({"jsonrpc": "2.0", "id": "7", "method": "ping"}))  # "7" and 7 are one id
    code, answers, _ = _piped(db, lines)
    assert code == 0
    by_id: dict[object, int] = {}
    for answer in answers:
        by_id[answer["id"]] = by_id.get(answer["id"], 0) + 1
    expected = [0, *range(1, 121), *(f"r{n}" for n in range(40)), "7"]
    assert sorted(map(str, by_id)) == sorted(map(str, expected)) and set(by_id.values()) == {1}
    keys = {a["result"]["structuredContent"]["key"] for a in answers if isinstance(a["id"], int) and a["id"]}
    with memory.MemoryStore(db) as store:
        assert {e.key for e in store.recall(limit=None)} == keys and len(keys) == 120


def test_stdio_with_both_ends_closed_stops_without_waiting_for_answers(tmp_path: Path) -> None:
    """A client gone for good (stdin and stdout closed) is not waited for: the server exits at once,
    and what it acknowledged nowhere is still either on record or not written at all."""
    db = tmp_path / "history.db"
    code, answers, took = _piped(
        db, [_call(n, f"finding {n} nobody reads") for n in range(1, 61)], close_stdout=True
    )
    assert answers == [] and took < 20
    assert code in (0, 1)
    with memory.MemoryStore(db) as store:
        assert len(store.recall(limit=None)) <= 60
        assert memory.check_store(store) == []


def test_a_refused_argument_is_not_echoed_whole(tmp_path: Path) -> None:
    """A schema error quotes the value it refused: a text of 150,000 control characters (under the
    request limit, over the tool's) came back escaped twice over, in both copies of the answer
    (4 MB); an unknown argument's name came back whole, in the message and in its context."""
    hostile: list[tuple[dict[str, Any], str]] = [
        ({"text": "\x01" * 150_000}, "text"),
        ({"text": "x", "tags": ["\u202e" * 100] * 3000}, "tags"),
        ({"text": "x", **{f"bogus{n}" + "k" * 100_000: 1 for n in range(8)}}, "bogus0" + "k" * 74),
    ]
    with raw_stdio(tmp_path / "history.db") as wire:
        for n, (arguments, argument) in enumerate(hostile):
            params = {"name": "learn", "arguments": arguments}
            request = orjson.dumps({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params})
            assert len(request) < MAX_REQUEST_BYTES
            wire.send(request)
            answer = wire.answer(START_TIMEOUT_S)
            error = answer["result"]["structuredContent"]["error"]
            assert error["code"] == "mcp_arguments_invalid" and answer["id"] == n
            assert error["argument"].startswith(argument) and len(error["argument"]) < 200
            assert len(orjson.dumps(answer)) < 8192, argument[:10]
            wire.ping(100 + n)
    assert mcp_runs(tmp_path / "history.db") == []

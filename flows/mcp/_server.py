"""The MCP face of the memory, on the official SDK's low-level server: the tools and resources,
the stdio and streamable-HTTP transports, the bearer-token gate, and each session's lifecycle."""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import importlib.metadata
import logging
import re
import secrets
import signal
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from functools import partial
from typing import Any, TypeVar, cast
from urllib.parse import quote, unquote_to_bytes

import anyio
import anyio.to_thread
import mcp_types as types
import orjson
import uvicorn
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from starlette.requests import Request

from flows._uvicorn import MAX_HEAD_BYTES, Refusal, announcing_server, bounded_http
from flows.mcp._admission import DEFAULT_MAX_SESSIONS, SESSIONS_FULL_CODE, Admission
from flows.mcp._calls import BUSY_CODE, COUNTED, RETRY_AFTER_S, SCOPE_KEY, Calls, Slot
from flows.mcp._errors import (
    McpArgumentsInvalid,
    McpBusy,
    McpHeaderRepeated,
    McpHeadTooLarge,
    McpListenFailed,
    McpResourceUnknown,
    McpSessionsFull,
    McpToolFailed,
    McpUnauthorized,
)
from flows.mcp._sessions import Sessions, finding_json
from flows.mcp._stdio import StdinLines, StdoutWire
from flows.mcp._tools import TOOLS, bounded, call_tool, name_tools, shown
from flows.mcp._wire import MAX_REQUEST_BYTES, body_answer, error_line, oversized_message, request_of
from journal import JournalNameInvalid, check_label
from staging import CodedError

log = logging.getLogger("flows.mcp")

T = TypeVar("T")

MAX_CONNECTIONS = 64
"""The most connections an HTTP server serves at once: a request on a connection past them is
answered as a call past the calls' bound is (``503``, ``Retry-After``, ``mcp_busy``) and the
connection closed."""

BODY_TIMEOUT_S = 10.0
"""How long a request may take to send its body once its head is in; past it, ``408``."""

RESOURCE_PREFIX = "flows-memory://scope/"
"""A scope's resource URI is this prefix and the scope, percent-encoded."""

RESOURCE_RECENT = 20
"""How many of a scope's newest findings its resource holds."""

RESOURCES_PAGE = 100
"""The most resources (scopes) one ``resources/list`` answer holds; ``nextCursor`` asks for the next."""

CURSOR_MAX = 1024
"""The longest cursor the server reads (characters): its own are far shorter."""

INSTRUCTIONS = (
    "Journal-first memory. `learn` remembers a finding durably; `recall` lists findings by tag, "
    "metadata, source, time and scope; `why` finds the findings that answer a question; `get`, "
    "`forget` and `history` read, retire and trace a finding by its key; `forget_where` and "
    "`erase_where` forget or erase what a filter matches in one scope, in two steps (a dry run, then "
    "its `confirm`); `erase` removes a memory's content for good. Every finding carries its "
    "key and the citation of the journal record it came from: cite it when you answer from memory."
)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _version() -> str:
    try:
        return importlib.metadata.version("flows-memory")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - always installed here
        return "0"


def _dumps(obj: Any) -> str:
    return orjson.dumps(obj).decode()


def error_json(exc: BaseException) -> dict[str, Any]:
    """``exc`` as a tool error's payload: its code, message and the context it carries (an error
    without a code is a bug, reported as ``mcp_tool_failed``)."""
    if not isinstance(exc, CodedError):
        exc = McpToolFailed(f"{type(exc).__name__}: {exc}")
    payload = exc.as_json()
    payload["message"] = name_tools(str(payload.get("message", "")))
    return payload


def _tool_result(payload: dict[str, Any], *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=_dumps(payload))],
        structured_content=payload,
        is_error=error,
    )


def _session_key(ctx: Any) -> str | None:
    """The HTTP session a request belongs to (its ``Mcp-Session-Id``); None on stdio and for
    sessionless requests."""
    request = getattr(ctx, "request", None)
    if isinstance(request, Request):
        return request.headers.get("mcp-session-id") or None
    return None


_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
"""A ``%`` that does not begin an escape of two hex digits."""


def _scope_of(uri: str) -> str:
    """The scope a resource URI names, its escapes decoded strictly.

    Raises:
        McpResourceUnknown: the URI is not ``flows-memory://scope/<scope>``; a ``%`` in it begins no
            escape of two hex digits; its escapes decode to bytes that are not UTF-8; or the scope
            holds what no scope can (NUL or another control character, more than the journal takes).
    """
    if not uri.startswith(RESOURCE_PREFIX) or len(uri) == len(RESOURCE_PREFIX):
        raise McpResourceUnknown(
            f"{shown(uri)} is not a resource of this server; list them with resources/list"
        )
    encoded = uri[len(RESOURCE_PREFIX) :]
    where = f"resource URI {shown(uri)}"
    bad = _BAD_ESCAPE.search(encoded)
    if bad is not None:
        at = bad.start()
        raise McpResourceUnknown(
            f"{where} is not percent-encoded: {shown(encoded[at : at + 3])} at character "
            f"{len(RESOURCE_PREFIX) + at} is not `%` and two hex digits; a scope's `%` is written %25"
        )
    try:
        scope = unquote_to_bytes(encoded).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise McpResourceUnknown(
            f"{where} does not name a scope: its escapes decode to bytes that are not UTF-8 (byte "
            f"0x{exc.object[exc.start]:02X} at byte {exc.start} of the scope: {exc.reason}); "
            "percent-encode the scope's UTF-8 bytes"
        ) from None
    except UnicodeEncodeError:  # a lone surrogate, which is not text
        raise McpResourceUnknown(f"{where} holds a lone surrogate, which is not Unicode text") from None
    try:
        return check_label("scope", scope)
    except JournalNameInvalid as exc:
        raise McpResourceUnknown(f"{where} names no scope a finding can have: {exc}") from None


def _tools() -> list[types.Tool]:
    return [
        types.Tool(
            name=t.name,
            title=t.title,
            description=t.description,
            input_schema=t.input_schema,
            output_schema=t.output_schema,
            annotations=types.ToolAnnotations(
                title=t.title,
                read_only_hint=t.read_only,
                destructive_hint=t.destructive,
                idempotent_hint=t.idempotent,
                open_world_hint=False,
            ),
        )
        for t in TOOLS
    ]


def _protocol_error(exc: CodedError, code: int = types.INTERNAL_ERROR) -> MCPError:
    """A coded error as the JSON-RPC error of a request that is not a tool call."""
    return MCPError(code=code, message=name_tools(str(exc)), data=error_json(exc))


class Cursors:
    """The server's ``resources/list`` cursors: the last scope of a page, signed with a key of this
    process (HMAC-SHA256), so a cursor is opaque to a client and one it did not get from this server
    (crafted, altered, cut, or a restarted server's) is refused rather than read."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)

    def _mac(self, body: bytes) -> bytes:
        return hmac.new(self._key, body, hashlib.sha256).digest()[:16]

    def make(self, after: str) -> str:
        """The cursor of the page that begins after scope ``after``."""
        body = after.encode("utf-8")
        return base64.urlsafe_b64encode(self._mac(body) + body).decode("ascii").rstrip("=")

    def after(self, cursor: object) -> str:
        """The scope a cursor this server made names.

        Raises:
            McpArgumentsInvalid: anything else (``argument`` ``cursor``).
        """
        text = cursor if isinstance(cursor, str) else ""
        if not text or len(text) > CURSOR_MAX or not _CURSOR_CHARS.fullmatch(text):
            raise _cursor_refusal(cursor)
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (ValueError, binascii.Error):
            raise _cursor_refusal(cursor) from None
        mac, body = raw[:16], raw[16:]
        if len(mac) < 16 or not hmac.compare_digest(mac, self._mac(body)):
            raise _cursor_refusal(cursor)
        return body.decode("utf-8")  # the server's own bytes: UTF-8 it encoded


_CURSOR_CHARS = re.compile(r"[A-Za-z0-9_-]+")


def _cursor_refusal(cursor: object) -> McpArgumentsInvalid:
    given = shown(cursor) if isinstance(cursor, str) else type(cursor).__name__
    return McpArgumentsInvalid(
        f"resources/list: cursor {given} is not one this server gave (a cursor is the `nextCursor` of "
        "a resources/list answer of this server process, passed back unchanged): list again without "
        "a cursor",
        tool="resources/list",
        argument="cursor",
    )


class MemoryServer:
    """The request handlers of the low-level server, over ``sessions``; with ``calls`` (over HTTP),
    each call that reads or writes the store holds a slot of them while it runs."""

    def __init__(self, sessions: Sessions, idle_timeout_s: float | None, calls: Calls | None = None) -> None:
        self._sessions = sessions
        self._cursors = Cursors()
        self._idle_timeout_s = idle_timeout_s
        self._calls = calls

    def _slot(self, ctx: Any) -> Slot | None:
        """The slot this call holds while it runs (None on stdio): the one the HTTP gate took for its
        request, or a new one when the gate's was given back (its client hung up first).

        Raises:
            MCPError: the server has its most calls in progress (``mcp_busy``).
        """
        if self._calls is None:
            return None
        request = getattr(ctx, "request", None)
        taken = request.scope.get(SCOPE_KEY) if isinstance(request, Request) else None
        try:
            return self._calls.hold(taken)
        except McpBusy as exc:
            raise _protocol_error(exc, BUSY_CODE) from exc

    async def list_tools(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=_tools())

    async def call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        slot = self._slot(ctx)
        try:
            async with self._sessions.call(_session_key(ctx)) as memory:
                return _tool_result(await call_tool(memory, params.name, params.arguments))
        except Exception as exc:  # every failure is the caller's answer, never the server's end
            if not isinstance(exc, CodedError):
                log.exception("tool %r failed", params.name)
                exc = McpToolFailed(f"{params.name} failed: {type(exc).__name__}: {exc}")
            return _tool_result({"error": error_json(exc)}, error=True)
        finally:
            if slot is not None:
                slot.release()

    async def list_resources(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        cursor = None if params is None else params.cursor
        try:
            after = None if cursor is None else self._cursors.after(cursor)
        except McpArgumentsInvalid as exc:
            raise _protocol_error(exc, types.INVALID_PARAMS) from exc
        slot = self._slot(ctx)
        # a page of the scopes in order, from the first after the cursor's (and one more, to know
        # whether another page follows): a scope learned or forgotten between pages moves no other
        # scope to another page, and a page reads about a page of scopes, not every one
        read = partial(self._sessions.store.scopes, after=after, limit=RESOURCES_PAGE + 1)
        try:
            found = await anyio.to_thread.run_sync(read)
        except CodedError as exc:
            raise _protocol_error(exc) from exc
        finally:
            if slot is not None:
                slot.release()
        scopes, more = found[:RESOURCES_PAGE], len(found) > RESOURCES_PAGE
        return types.ListResourcesResult(
            next_cursor=self._cursors.make(scopes[-1]) if more else None,
            resources=[
                types.Resource(
                    name=f"{scope}: recent findings",
                    uri=RESOURCE_PREFIX + quote(scope, safe=""),
                    description=f"The {RESOURCE_RECENT} newest findings of scope {scope!r}, "
                    "with keys and citations.",
                    mime_type="application/json",
                )
                for scope in scopes
            ],
        )

    async def list_templates(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        template = types.ResourceTemplate(
            name="recent findings of a scope",
            uri_template=RESOURCE_PREFIX + "{scope}",
            description=f"The {RESOURCE_RECENT} newest findings of a scope (percent-encoded).",
            mime_type="application/json",
        )
        return types.ListResourceTemplatesResult(resource_templates=[template])

    async def read_resource(
        self, ctx: Any, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        try:
            scope = _scope_of(params.uri)
        except McpResourceUnknown as exc:
            raise _protocol_error(exc, types.INVALID_PARAMS) from exc
        slot = self._slot(ctx)
        try:
            found = await self._sessions.store.arecall(scope=scope, limit=RESOURCE_RECENT)
        except CodedError as exc:
            raise _protocol_error(exc) from exc
        finally:
            if slot is not None:
                slot.release()
        kept, truncated = bounded([finding_json(f) for f in found])
        body: dict[str, Any] = {"scope": scope, "findings": kept}
        if truncated:
            body["truncated"] = True
        contents = types.TextResourceContents(uri=params.uri, mime_type="application/json", text=_dumps(body))
        return types.ReadResourceResult(contents=[contents])

    @contextlib.asynccontextmanager
    async def lifespan(self, _: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        """While the server runs: reap idle HTTP sessions; when it stops: end every session."""
        async with anyio.create_task_group() as tg:
            if self._idle_timeout_s is not None:
                tg.start_soon(_reap_idle, self._sessions, self._idle_timeout_s)
            try:
                yield {}
            finally:
                tg.cancel_scope.cancel()
                with anyio.CancelScope(shield=True):
                    await self._sessions.end_all()


def build_server(
    sessions: Sessions, *, idle_timeout_s: float | None = None, calls: Calls | None = None
) -> Server[Any]:
    """The low-level MCP server over ``sessions``: the tools, the scopes as resources, and a
    lifespan that ends every session when the server stops (and, with ``idle_timeout_s``, reaps
    idle HTTP sessions). With ``calls``, a call past their bound is refused (``mcp_busy``)."""
    handlers = MemoryServer(sessions, idle_timeout_s, calls)
    return Server(
        "flows-memory",
        version=_version(),
        title="flows-memory",
        instructions=INSTRUCTIONS,
        lifespan=handlers.lifespan,
        on_list_tools=handlers.list_tools,
        on_call_tool=handlers.call_tool,
        on_list_resources=handlers.list_resources,
        on_list_resource_templates=handlers.list_templates,
        on_read_resource=handlers.read_resource,
    )


async def _reap_idle(sessions: Sessions, timeout_s: float) -> None:
    while True:
        await anyio.sleep(min(timeout_s / 4, 30.0))
        for key in sessions.idle(timeout_s):
            log.info("session %s idle for %ss: its root runs are left interrupted", key, timeout_s)
            await sessions.end(key, abandoned=True)


# -- stdio ----------------------------------------------------------------------------------------


async def serve_stdio(sessions: Sessions) -> int | None:
    """Serve one client over stdin/stdout until stdin closes, or SIGINT/SIGTERM; its session then
    ends. Returns the signal that stopped the server, if one did."""
    server = build_server(sessions)
    stopped_by: list[int] = []
    async with anyio.create_task_group() as tg:

        async def stop_on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for sig in signals:
                    stopped_by.append(int(sig))
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(stop_on_signal)
        # The SDK takes any async iterator of lines and any object with async write and flush.
        wire = StdoutWire()
        wire_in, wire_out = cast(Any, StdinLines(wire)), cast(Any, wire)
        async with stdio_server(stdin=wire_in, stdout=wire_out) as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
        tg.cancel_scope.cancel()
    return stopped_by[0] if stopped_by else None


# -- streamable HTTP ------------------------------------------------------------------------------


def _loopback_security(host: str) -> TransportSecuritySettings:
    hosts = [f"{host}:*", "127.0.0.1:*", "localhost:*", "[::1]:*"]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[f"http://{h}" for h in hosts],
    )


class BearerGate:
    """ASGI middleware in front of the MCP endpoint: every check comes before anything acts.

    In order: no header it reads given twice (``SINGLE_HEADERS``; else ``400``,
    ``mcp_header_repeated``), the bearer token (when one is set), the ``Host`` and ``Origin`` headers
    (on a loopback server, against DNS rebinding), the size of a request's body (at most
    ``MAX_REQUEST_BYTES``), its shape (a request the SDK would answer under no id, or not at all; a
    notification of the wrong shape, which it would answer though it asks nothing, is accepted
    ``202`` and goes no further), for a call that reads or writes the store a slot of ``calls``
    (none free: ``503`` with ``Retry-After``, ``mcp_busy``), and for an ``initialize`` that opens a
    session a place among the sessions of ``admission`` (none free: ``503`` with ``Retry-After``,
    ``mcp_sessions_full``); a request refused by any of them
    changes nothing. Only then is the session told of the request; a ``DELETE`` of a session ends its
    root runs once the endpoint has accepted it, before the answer goes back, and gives back its place.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None,
        sessions: Sessions,
        security: TransportSecuritySettings | None = None,
        max_body: int = MAX_REQUEST_BYTES,
        calls: Calls | None = None,
        body_timeout_s: float = BODY_TIMEOUT_S,
        admission: Admission | None = None,
    ) -> None:
        self._app = app
        self._admission = admission
        self._body_timeout_s = body_timeout_s
        self._calls = calls
        self._token = None if token is None else token.encode()
        self._sessions = sessions
        self._security = None if security is None else TransportSecurityMiddleware(security)
        self._max_body = max_body

    def _authorized(self, header: bytes | None) -> bool:
        if self._token is None:
            return True
        if header is None or header[:7].lower() != b"bearer ":
            return False
        return hmac.compare_digest(header[7:].strip(), self._token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        repeated = _repeated(scope["headers"])
        if repeated is not None:  # which one counts would be ambiguous: this gate and the SDK differ
            await _header_repeated(send, repeated)
            return
        headers = {k.lower(): v for k, v in scope["headers"]}
        if not self._authorized(headers.get(b"authorization")):
            await _refuse(send)
            return
        if self._security is not None:
            # the endpoint checks these too, but only after this gate would have acted
            refused = await self._security.validate_request(Request(scope), is_post=False)
            if refused is not None:
                await refused(scope, receive, send)
                return
        raw = headers.get(b"mcp-session-id")
        key = raw.decode("latin-1") if raw else None
        slot: Slot | None = None
        opening = False
        if scope["method"] == "POST":
            admitted = await self._admit(scope, receive, send, headers.get(b"content-length"), key is None)
            if admitted is None:
                return
            receive, slot, opening = admitted
        try:
            if key is not None and scope["method"] == "DELETE":
                await self._app(scope, receive, self._ending(key, send))
                return
            async with self._sessions.active(key):
                await self._counted(scope, receive, send, key, opening)
        finally:
            if slot is not None:
                slot.release()

    async def _admit(
        self, scope: Scope, receive: Receive, send: Send, length: bytes | None, sessionless: bool
    ) -> tuple[Receive, Slot | None, bool] | None:
        """A POST's body checked (its size, its shape, a slot for a call, a place for the session
        an ``initialize`` naming none opens): what the endpoint reads it from, the slot the call
        holds, and whether a session's place is reserved; None when it was refused (and answered)."""
        with anyio.move_on_after(self._body_timeout_s) as waited:
            body = await _bounded_body(receive, self._max_body, length)
        if waited.cancelled_caught:
            await _too_slow(send, self._body_timeout_s)
            return None
        if body is None:
            await _too_large(send, self._max_body)
            return None
        answer = body_answer(body)
        if (
            answer is not None
        ):  # the SDK would answer it under no id or not at all, or answer what asks nothing
            status, error = answer
            if error:
                await _send_json(send, status, error.encode(), [])
            else:  # it asks nothing: accepted, and nothing else is done with it
                await send(
                    {"type": "http.response.start", "status": status, "headers": [(b"content-length", b"0")]}
                )
                await send({"type": "http.response.body", "body": b""})
            return None
        slot = None
        request = request_of(body)
        if self._calls is not None and request is not None and request[1] in COUNTED:
            slot = self._calls.take()
            if slot is None:
                await _busy(send, request[0], self._calls.busy())
                return None
            scope[SCOPE_KEY] = slot  # the handler holds it too, while the call runs
        opening = False
        if self._admission is not None and sessionless and request is not None and request[1] == "initialize":
            if not self._admission.reserve():
                await _sessions_full(send, request[0], self._admission.full())
                return None
            opening = True
        return _replay(body, receive), slot, opening

    async def _counted(
        self, scope: Scope, receive: Receive, send: Send, key: str | None, opening: bool
    ) -> None:
        """The endpoint's answer to a request, with the session's place kept: the place reserved for
        an ``initialize`` (``opening``) becomes the session its answer names, or is given back; a
        request of an open session keeps it from counting as idle while it is in flight."""
        admission = self._admission
        if admission is None or (key is None and not opening):
            await self._app(scope, receive, send)
            return
        status: int | None = None
        if key is not None:
            admission.begin(key)

        async def watching(message: MutableMapping[str, Any]) -> None:
            nonlocal status, key, opening
            if message["type"] == "http.response.start":
                status = int(message["status"])
                if opening:  # settled as the answer starts: the session is open from here
                    opening = False
                    key = _session_named(message) if status < 400 else None
                    admission.opened(key)
                    if key is not None:
                        admission.begin(key)
            await send(message)

        try:
            await self._app(scope, receive, watching)
        finally:
            if opening:  # no answer began
                admission.opened(None)
            elif key is not None:
                admission.end(key, status)

    def _ending(self, key: str, send: Send) -> Send:
        """``send``, ending session ``key`` (its root runs finish, its place is given back) before an
        accepting answer starts."""

        async def send_after_ending(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start" and 200 <= int(message["status"]) < 300:
                if self._admission is not None:
                    self._admission.closed(key)
                await self._sessions.end(key)
            await send(message)

        return send_after_ending


SINGLE_HEADERS = (b"authorization", b"mcp-session-id", b"host", b"origin", b"content-length")
"""The headers the gate reads, each of which a request may carry once. Given twice, the gate (a
dictionary of the headers: the last counts) and the SDK (the first counts) would read two different
values: a ``DELETE`` naming session A then B was accepted by the SDK for A while the gate ended B's
root runs."""


def _repeated(headers: Any) -> McpHeaderRepeated | None:
    """The refusal of a request whose ``headers`` name one of ``SINGLE_HEADERS`` more than once."""
    names = [bytes(name).lower() for name, _ in headers]
    for single in SINGLE_HEADERS:
        count = names.count(single)
        if count > 1:
            name = single.decode("ascii")
            return McpHeaderRepeated(
                f"the request carries the `{name}` header {count} times; this server reads it once, so "
                "which one counts would be ambiguous: nothing was done; send it once",
                header=name,
                count=count,
            )
    return None


async def _header_repeated(send: Send, err: McpHeaderRepeated) -> None:
    """``400``: ``err`` (``mcp_header_repeated``) as a JSON-RPC error without an id (none was read)."""
    answer = error_line(None, types.INVALID_REQUEST, str(err), error_json(err))
    await _send_json(send, 400, answer.encode(), [])


def _session_named(start: MutableMapping[str, Any]) -> str | None:
    """The session an answer's start names (its ``Mcp-Session-Id`` header), if it names one."""
    for name, value in start.get("headers", ()):
        if bytes(name).lower() == b"mcp-session-id" and value:
            return bytes(value).decode("latin-1")
    return None


async def _bounded_body(receive: Receive, limit: int, length: bytes | None) -> bytes | None:
    """The whole body of a request, or None when it is longer than ``limit`` bytes (read no further)."""
    if length is not None and length.isdigit() and int(length) > limit:
        return None
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return bytes(body)  # the client went away; the endpoint sees an empty request
        body += message.get("body", b"")
        if len(body) > limit:
            return None
        if not message.get("more_body", False):
            return bytes(body)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> MutableMapping[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _too_large(send: Send, limit: int) -> None:
    answer = error_line(None, types.INVALID_REQUEST, oversized_message(limit), {"limit": limit})
    await _send_json(send, 413, answer.encode(), [])


async def _too_slow(send: Send, timeout_s: float) -> None:
    message = f"the request's body did not arrive within {timeout_s:g} seconds of its headers"
    answer = error_line(None, types.INVALID_REQUEST, message, {"timeoutS": timeout_s})
    await _send_json(send, 408, answer.encode(), [(b"connection", b"close")])


async def _busy(send: Send, request_id: str | int | None, err: McpBusy, *, close: bool = False) -> None:
    """``503`` with ``Retry-After``: ``err`` (``mcp_busy``) as a JSON-RPC error under ``request_id``."""
    answer = error_line(request_id, BUSY_CODE, str(err), error_json(err))
    headers = [(b"retry-after", str(RETRY_AFTER_S).encode())] + ([(b"connection", b"close")] if close else [])
    await _send_json(send, 503, answer.encode(), headers)


async def _sessions_full(send: Send, request_id: str | int | None, err: McpSessionsFull) -> None:
    """``503`` with ``Retry-After``: ``err`` (``mcp_sessions_full``) as a JSON-RPC error under
    ``request_id``."""
    answer = error_line(request_id, SESSIONS_FULL_CODE, str(err), error_json(err))
    await _send_json(send, 503, answer.encode(), [(b"retry-after", str(err.retry_after_s).encode())])


async def _connections_busy(scope: Scope, receive: Receive, send: Send) -> None:
    """The answer to a request on a connection past ``MAX_CONNECTIONS``: what a call past the
    calls' bound gets (``503``, ``Retry-After``, ``mcp_busy`` under the request's id when its body
    names one), and the connection closed, so a client has one rule for both."""
    if scope["type"] != "http":
        return
    request_id: str | int | None = None
    if scope["method"] == "POST":
        with anyio.move_on_after(BODY_TIMEOUT_S):
            body = await _bounded_body(receive, MAX_REQUEST_BYTES, None)
            request = request_of(body) if body is not None else None
            request_id = request[0] if request is not None else None
    err = McpBusy(
        f"the server already has {MAX_CONNECTIONS} connections open, the most it serves at once; this "
        f"request was not run: send it again in {RETRY_AFTER_S} s or more",
        limit=MAX_CONNECTIONS,
        retry_after_s=RETRY_AFTER_S,
    )
    await _busy(send, request_id, err, close=True)


def _head_refusal() -> Refusal:
    """The answer to a request head over ``MAX_HEAD_BYTES``, written by the HTTP layer before any
    request is parsed: ``mcp_head_too_large`` as a JSON-RPC error without an id (none was read), as
    a body over its bound is answered."""
    err = McpHeadTooLarge(
        f"the request's head (its request line and headers) is over {MAX_HEAD_BYTES} bytes, the most "
        "this server reads: send shorter headers",
        limit=MAX_HEAD_BYTES,
    )
    return Refusal(error_line(None, types.INVALID_REQUEST, str(err), error_json(err)).encode())


async def _refuse(send: Send) -> None:
    err = McpUnauthorized(
        "this server needs `Authorization: Bearer <token>` with the token in its $FLOWS_MCP_TOKEN"
    )
    body = orjson.dumps({"error": error_json(err)})
    await _send_json(send, 401, body, [(b"www-authenticate", b'Bearer realm="flows-memory"')])


async def _send_json(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (port 0: any free port), for the HTTP server.

    Raises:
        McpListenFailed: the address cannot be bound (in use, not local, not permitted).
    """
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise McpListenFailed(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(128)  # from here clients queue, even before the server's loop accepts
    except OSError as exc:
        sock.close()
        raise McpListenFailed(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; choose another port or host"
        ) from exc
    return sock


def url_of(sock: socket.socket) -> str:
    """The MCP endpoint's URL for a bound socket."""
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/mcp"


async def serve_http(
    sessions: Sessions,
    sock: socket.socket,
    *,
    loopback: bool,
    token: str | None,
    idle_timeout_s: float,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    announce: Callable[[], None] = lambda: None,
) -> None:
    """Serve streamable HTTP at ``/mcp`` on ``sock`` until SIGINT/SIGTERM; every session ends then.
    At most ``max_sessions`` sessions are open at once (past them: ``mcp_sessions_full``).
    ``announce`` is called once the server serves (``announcing_server``)."""
    calls = Calls()
    server = build_server(sessions, idle_timeout_s=idle_timeout_s, calls=calls)
    host = sock.getsockname()[0]
    security = _loopback_security(host) if loopback else None
    app = server.streamable_http_app(
        host=host,
        session_idle_timeout=idle_timeout_s,
        transport_security=security,
        max_request_body_size=MAX_REQUEST_BYTES,
    )
    admission = Admission(max_sessions, idle_timeout_s)
    gate = BearerGate(
        app, token=token, sessions=sessions, security=security, calls=calls, admission=admission
    )
    config = uvicorn.Config(
        gate,
        log_level="warning",
        access_log=False,
        lifespan="on",
        # past the connections: mcp_busy; a head past its bound: mcp_head_too_large
        **bounded_http(
            max_connections=MAX_CONNECTIONS, busy=_connections_busy, head_too_large=_head_refusal()
        ),
    )

    def serving() -> None:
        announce()
        sys.stderr.write(f"flows mcp: serving {url_of(sock)}\n")
        sys.stderr.flush()

    await announcing_server(config, serving).serve(sockets=[sock])


def run(main: Callable[[], Awaitable[T]]) -> T:
    """Run ``main`` on an asyncio event loop; what it returns."""
    return anyio.run(main)


__all__ = [
    "BearerGate",
    "MemoryServer",
    "build_server",
    "listen",
    "run",
    "serve_http",
    "serve_stdio",
    "url_of",
]

"""The dashboard's ASGI app: pages rendered on the server, the same data as JSON under ``/api``.

Routes (all ``GET``; anything else is 405):

=====================================  ===========================================================
``/runs``, ``/api/runs``               root runs newest first; ``state``, ``flow``, ``cursor``, ``limit``
``/runs/{id}``, ``/api/runs/{id}``     a run and its timeline (``flows show --json``); ``record``, ``page``,
                                       ``skip`` (the page); ``offset`` (the API's timeline), ``full``
                                       (``1``: its input, output, traceback whole, not cut)
``/runs/{id}/input``, ``…/output``,    the whole of what the run page shows cut at ``PART_SHOWN``, as
``/runs/{id}/traceback``               plain text (the value's JSON; the traceback's text)
``/findings``, ``/api/findings``       ``q`` (``why``; ``offset``) or newest first (``recall``); ``tag`` and
                                       ``meta`` (``KEY=VALUE``) repeated, ``scope``, ``source``, ``cursor``,
                                       ``limit``
``/findings/{key}``                    one finding, live or not, and a page of its history; ``offset``,
                                       ``limit``
``/api/findings/{key}``                one live finding (``MemoryStore.get``)
``/api/findings/{key}/history``        ``flows history KEY --json`` (``MemoryStore.history_page``);
                                       ``offset``, ``limit``
``/scopes``, ``/api/scopes``           the scopes holding a live finding, sorted, a page at a time
                                       (``MemoryStore.scopes``); ``after``, ``limit``
``/agents``, ``/api/agents``           the agent homes
``/agents/{n}``                        the ledger newest first (``before``), cadence, chart, skips
``/api/agents/{n}/ledger``             the ledger's entries, newest first; ``before``, ``limit``
``/api/agents/{n}/status``             ``sail status --json``
``/api/agents/{n}/why``                ``sail why --json``; ``limit``, ``before``
``/api/agents/{n}/balances``           the chart's points per token
``/api/agents/{n}/journal``            ``sail journal --days N --json``; ``days`` (default 2)
=====================================  ===========================================================

A JSON list that goes on has a ``Link: <…>; rel="next"`` header, so each body keeps the CLI's shape;
one that stopped at its bytes (``LIST_MAX_BYTES``) before its ``limit`` also says ``Truncated: true``.
A page of findings shows each text cut (``TEXT_SHOWN``) and stops at the same bound, with a note; so
do the runs and an agent's ledger (its entries measured as JSON).
Every stored value a page shows as text is a ``<bdi>`` of its own, so none reorders its neighbours.
A failure is its coded error: on a page, rendered (never a traceback); under ``/api``, the CLI's
JSON error object with an HTTP status (400 bad parameter, 401 no token, 404 unknown, 500 damaged
store, 503 unavailable).
"""

from __future__ import annotations

import contextlib
import hmac
import importlib.resources
import logging
import re
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePath
from typing import Any

import orjson
from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Match, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import journal
import memory
import memory.ledger
from flows import _langgraph_view as langgraph_view
from flows._bounded import LIST_MAX_BYTES, fitting
from flows._runtime import error_fields
from flows._uvicorn import MAX_HEAD_BYTES, Refusal
from flows.web import _chart
from flows.web import _runs as runs_data
from flows.web._agent import (
    CHART_SCAN,
    JOURNAL_DAYS,
    JOURNAL_MAX_PAGE,
    JOURNAL_PAGE,
    JOURNAL_SHOWN,
    LEDGER_PAGE,
    Agent,
    Token,
    journal_page,
    short_hash,
    tokens_of,
)
from flows.web._errors import (
    ServeBadRequest,
    ServeError,
    ServeHeadTooLarge,
    ServeInternal,
    ServeNotFound,
    ServeUnauthorized,
)
from flows.web._findings import (
    MAX_WHY,
    TEXT_SHOWN,
    Filters,
    FindingsPage,
    Size,
    finding_detail,
    findings_page,
    highlight,
    json_size,
    parse_filters,
)
from flows.web._findings import PAGE_SIZE as FINDINGS_PAGE
from flows.web._net import is_loopback_authority
from flows.web._reader import Reader, ServeConfig
from memory import Explained, Recalled, check_key
from memory.cli import BIDI_CONTROLS, format_ms, json_text, shown, shown_surrogates
from staging import CodedError

log = logging.getLogger("flows.serve")

COOKIE = "flows_token"
HEADERS = {
    "content-security-policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}
#: the most scopes the findings form lists in a menu; with more it has a text box for the scope,
#: offers these first ones as its suggestions and links to the rest (``/scopes``); also the default
#: page of ``/scopes``
MAX_SCOPE_CHOICES = 100
#: the most scopes a page of ``/scopes`` and ``/api/scopes`` lists (``limit``)
SCOPES_MAX_PAGE = 1000
#: the longest ``after`` of a scopes page (no scope is longer: a session's scope is at most 256)
SCOPE_AFTER_MAX = 1024
#: the most events a page of a finding's history holds (``limit``), as the MCP ``history`` tool
HISTORY_MAX_PAGE = 500
#: the most bytes of events, as JSON, a page of ``/api/findings/{key}/history`` holds (the first is
#: always given), as the MCP ``history`` tool: a memory of many large versions stays a bounded answer
HISTORY_MAX_BYTES = 8 * 1024 * 1024


# -- errors -----------------------------------------------------------------------------------


def error_status(exc: BaseException) -> int:
    """The HTTP status a coded error answers with."""
    if isinstance(exc, ServeError):
        return exc.status
    if isinstance(exc, journal.JournalRunNotFound | journal.JournalNameInvalid | memory.FindingUnknown):
        return 404
    if isinstance(exc, memory.ArgumentInvalid):
        return 400
    if isinstance(exc, journal.JournalUnavailable):
        return 503
    return 500


def error_json(exc: BaseException) -> dict[str, Any]:
    """The CLI's JSON error object: ``code``, ``message``, ``runId`` and the error's context
    (``path``, ``line``, ``stream`` … in camelCase)."""
    if isinstance(exc, CodedError):
        fields = exc.as_json()
        return {**fields, "runId": fields.get("runId")}
    return {**error_fields(exc), "runId": None}


class _Unencodable(Exception):
    """An API answer that JSON cannot carry (an integer past 64 bits, a key that is not text, a
    value of no JSON type); its cause is orjson's refusal."""


def _coded(exc: Exception) -> Exception:
    """``exc`` when it is one the user can act on; else a ``serve_internal`` (the cause is logged,
    once, with its traceback)."""
    if isinstance(exc, CodedError):
        return exc
    log.error("unexpected error serving a request", exc_info=exc)
    if isinstance(exc, _Unencodable):
        return ServeInternal(
            f"the answer holds a value JSON cannot carry ({exc}), read from the store or an agent "
            "home: look for a number out of range in their files; the server's log has the traceback"
        )
    return ServeInternal(
        f"the dashboard failed unexpectedly ({type(exc).__name__}); the server's log has the details"
    )


def encode_json(body: object) -> bytes:
    """``body`` as JSON bytes (read-only mappings as objects).

    Raises:
        _Unencodable: it holds a value JSON cannot carry (then a ``serve_internal`` answer).
    """
    try:
        return orjson.dumps(body, default=_plain)
    except orjson.JSONEncodeError as exc:
        try:  # a name in bytes that are not UTF-8 (an agent's folder): as the CLI's --json writes it
            return json_text(body).encode()
        except (TypeError, ValueError):
            raise _Unencodable(str(exc)) from exc


def head_refusal() -> Refusal:
    """The answer to a request head over ``MAX_HEAD_BYTES``, written by the HTTP layer (no request
    reaches the app): ``serve_head_too_large`` as the API's JSON error object, with the headers every
    answer carries."""
    err = ServeHeadTooLarge(
        f"the request's head (its request line and headers) is over {MAX_HEAD_BYTES} bytes, the most "
        "this dashboard reads: send shorter headers (a browser sends every cookie it holds for this "
        "host, whatever the port: clear the ones other local servers set)",
        limit=MAX_HEAD_BYTES,
    )
    return Refusal(encode_json(error_json(err)), tuple(HEADERS.items()))


# -- formatting -------------------------------------------------------------------------------


def when_ms(ms: object) -> str:
    """Epoch milliseconds as local time with its UTC offset (the CLIs' one rule, ``format_ms``)."""
    if not isinstance(ms, int) or isinstance(ms, bool):
        return "-"
    try:
        return format_ms(ms)
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"


def when_s(ts: object) -> str:
    """Unix seconds (the ledger's ``ts``) as local time with its offset."""
    return when_ms(ts * 1000) if isinstance(ts, int) and not isinstance(ts, bool) else "-"


def iso_ms(ms: object) -> str:
    """Epoch milliseconds as ISO 8601 (for ``<time datetime>``), empty when not a time."""
    if not isinstance(ms, int) or isinstance(ms, bool):
        return ""
    try:
        return datetime.fromtimestamp(ms / 1000).astimezone().isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return ""


def as_json_text(value: object, head: int | None = None) -> str:
    """A JSON value as indented text (escaped by the template like any other text), each
    bidirectional control written as its JSON escape (``\\u202e``, the same value): raw, an override
    in one string would reorder the rest of the JSON shown after it. With ``head``, only its first
    ``head`` bytes (on a character), for a cell that shows the start of a value of any size."""
    data = orjson.dumps(value, default=_plain, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    text = data.decode() if head is None else data[:head].decode("utf-8", errors="ignore")
    return _bidi_escaped(text)


#: the bidirectional controls (embeddings, overrides, isolates, marks) as JSON escapes
_BIDI = re.compile("[" + "".join(chr(c) for c in BIDI_CONTROLS) + "]")


def _bidi_escaped(text: str) -> str:
    """``text`` with each bidirectional control as its JSON escape: found by one scan in C, the
    callback paid per control only (``str.translate`` looks each character up: about half a second
    for a 6 MB value)."""
    return text if text.isascii() else _BIDI.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


@dataclass(frozen=True)
class ShownPart:
    """A run's input, output or traceback as its page shows it: ``text``, at most
    ``runs_data.PART_SHOWN`` bytes of it; ``cut`` when that is not the whole, which is ``size`` bytes
    (as JSON for a value) and served whole at ``whole_url``."""

    text: str
    size: int
    cut: bool
    whole_url: str


def json_part(value: object, whole_url: str, limit: int = runs_data.PART_SHOWN) -> ShownPart:
    """A run's input or output as indented JSON text (``as_json_text``), cut at ``limit`` bytes: a
    run's output is as large as its flow made it, and the page showed it whole."""
    text = orjson.dumps(value, default=_plain, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    if len(text) <= limit:
        return ShownPart(as_json_text(value), len(orjson.dumps(value, default=_plain)), False, whole_url)
    head = text[:limit].decode("utf-8", errors="ignore")  # no half of a character at the cut
    head = _bidi_escaped(head)
    return ShownPart(head, len(orjson.dumps(value, default=_plain)), True, whole_url)


def text_part(value: str, whole_url: str, limit: int = runs_data.PART_SHOWN) -> ShownPart:
    """A run's traceback, cut at ``limit`` bytes of UTF-8."""
    data = value.encode("utf-8", errors="replace")
    if len(data) <= limit:
        return ShownPart(value, len(data), False, whole_url)
    return ShownPart(data[:limit].decode("utf-8", errors="ignore"), len(data), True, whole_url)


def shown_text(value: object, limit: int = TEXT_SHOWN) -> Markup:
    """A stored text as its own ``<bdi>`` isolate, escaped, cut at ``limit`` characters with a note of
    its whole length: an agent's ledger written before its texts were bounded may hold a reason of
    megabytes, which the JSON API gives whole."""
    text = "" if value is None else str(value)
    if len(text) <= limit:
        return Markup("<bdi>{}</bdi>").format(text)
    return Markup(
        '<bdi>{}</bdi>… <span class="cut">({:,} characters in all: the whole is in the JSON API)</span>'
    ).format(text[:limit], len(text))


def title_text(value: object) -> str:
    """A page's ``<title>`` as the CLI writes a line of text: a title holds no markup, so no ``<bdi>``
    can isolate a stored value in it (an agent's folder name, a run id); each bidirectional control
    and control character is written as its escape (``\\u202e``, ``\\x1b``), a byte of a name that is
    not UTF-8 as ``\\xff`` (``memory.cli.shown``). The template escapes the rest."""
    return shown(str(value), one_line=True)


class Fields(dict[str, Any]):
    """A record read from the journal, as a template reads it: a field it lacks is None. What the
    journal holds is untrusted (a record of another shape, an event with fields left out): a page
    shows what is there and leaves the rest out, as ``flows show`` does, never fails on it."""

    def __missing__(self, key: str) -> None:
        return None


def error_of(value: object) -> dict[str, str | None]:
    """A recorded error of any shape as a page shows it: its ``code`` and ``message`` as text (empty
    when it has none; a message that is not text as JSON), and its ``traceback`` when it is text. A
    run's or a step's error is read from the journal, untrusted: an object without a ``code`` or a
    message that was a number failed the whole runs listing with ``serve_internal``."""
    fields: Mapping[str, Any] = value if isinstance(value, Mapping) else {"message": value}
    code, message, traceback = fields.get("code"), fields.get("message"), fields.get("traceback")
    return {
        "code": code if isinstance(code, str) else "" if code is None else _as_text(code),
        "message": message if isinstance(message, str) else "" if message is None else _as_text(message),
        "traceback": traceback if isinstance(traceback, str) else None,
    }


def _as_text(value: object) -> str:
    """A value that should have been text, as JSON text (``str`` for what JSON cannot carry)."""
    try:
        return orjson.dumps(value, default=_plain).decode()
    except (TypeError, orjson.JSONEncodeError):
        return str(value)


def short_key(value: object) -> str:
    """A key (a finding's, a version's) shortened for a timeline's column: its first 12 characters."""
    return "" if value is None else str(value)[:12]


def as_list(value: object) -> list[Any]:
    """A list read from the journal (tags, a checkpoint's nodes, a namespace) as a list to show: a
    list as it is, nothing for None, any other value alone."""
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


def langgraph_item(found: Recalled) -> dict[str, Any] | None:
    """A LangGraph store item (namespace, key, value, created) when ``found`` holds one, else None."""
    if found.source != langgraph_view.STORE_SOURCE:
        return None
    return langgraph_view.store_item({"metadata": found.metadata}, found.scope)


def visible_metadata(metadata: Mapping[str, Any], item: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """A finding's metadata as shown: a store item's without the store's own bookkeeping."""
    return langgraph_view.store_metadata(metadata) if item else metadata


def _plain(value: object) -> object:
    """Read-only mappings (a finding's metadata) as dicts for orjson."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def _printable(value: object) -> object:
    """What a template writes, with each lone surrogate (a byte of a name that is not UTF-8, as Python
    reads it: an agent's folder, a store path) as the CLI writes it (``\\xff``): no UTF-8 page can
    hold one, and the page failed to encode (a 500 on every page, the menu naming every agent)."""
    if isinstance(value, PurePath):
        value = str(value)
    if not isinstance(value, str) or value.isascii():
        return value
    escaped = shown_surrogates(value)  # ASCII escapes: nothing that markup reads
    return Markup(escaped) if isinstance(value, Markup) else escaped  # noqa: S704 - markup already


def _environment() -> Environment:
    env = Environment(
        finalize=_printable,
        loader=PackageLoader("flows.web", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        when_ms=when_ms,
        when_s=when_s,
        iso_ms=iso_ms,
        json=as_json_text,
        langgraph_item=langgraph_item,
        visible_metadata=visible_metadata,
        short_hash=short_hash,
        shown=shown_text,
        title_text=title_text,
        error_of=error_of,
        short_key=short_key,
        as_list=as_list,
    )
    return env


def same_site_path(path: str) -> str:
    """``path`` as a path of this site only, for a redirect's target or a form's action.

    A browser reads ``//host/x`` (and ``/\\host/x``, a backslash counting as a slash) as another
    site's address, so the path is rebuilt from its segments: backslashes become slashes, empty
    segments and ``.`` go, ``..`` climbs (never above the root), and what is left is percent-encoded,
    so no byte of it can start another URL. The result starts with exactly one slash.
    """
    kept: list[str] = []
    for segment in path.replace("\\", "/").split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if kept:
                kept.pop()
            continue
        kept.append(segment)
    return "/" + "/".join(urllib.parse.quote(s, safe="!$&'()*+,;=:@-._~") for s in kept)


def _index_of(entries: list[dict[str, Any]], record: str | None) -> int | None:
    """Where the entry citing ``record`` is among ``entries`` (None when none does)."""
    if record is None:
        return None
    return next((i for i, e in enumerate(entries) if e["citation"]["id"] == record), None)


def link(path: str, **params: object) -> str:
    """``path`` with the query ``params`` that are not None, URL-encoded."""
    query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None and v != ""})
    return f"{path}?{query}" if query else path


# -- query parameters -------------------------------------------------------------------------


def _param(request: Request, name: str) -> str | None:
    value = request.query_params.get(name)
    return value if value else None


def _int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    given = _given_int(request, name, low, high)
    return default if given is None else given


def _given_int(request: Request, name: str, low: int, high: int) -> int | None:
    """The query parameter ``name`` as a whole number from ``low`` to ``high``; None when absent.

    Raises:
        ServeBadRequest: it is not such a number.
    """
    text = request.query_params.get(name)
    if not text:
        return None
    # int() refuses a string of thousands of digits: a number is checked short first
    if not (text.isascii() and text.isdigit()) or len(text.lstrip("0")) > 18 or not low <= int(text) <= high:
        raise ServeBadRequest(f"{name} must be a whole number from {low} to {high}, got {text!r:.80}")
    return int(text)


# -- the guard --------------------------------------------------------------------------------


def static_paths() -> frozenset[str]:
    """The paths of the files the package's ``static`` folder holds (``/static/style.css``): the
    only paths the guard lets through unchecked."""
    folder = importlib.resources.files("flows.web") / "static"
    return frozenset(f"/static/{entry.name}" for entry in folder.iterdir() if entry.is_file())


class Guard:
    """Every request: only ``GET``/``HEAD``; the token when the server has one (the
    ``Authorization: Bearer`` header, or the cookie a ``?token=`` visit sets); without a token, a
    loopback ``Host`` only (a page elsewhere cannot reach the dashboard through a DNS name it
    points at 127.0.0.1); and the security headers on every answer.

    ``public`` are the paths answered without the token or host check: the package's static files
    (the stylesheet, which the refusal page itself links to), each by its exact path. Any other path
    under ``/static/`` is checked like a page: a file that is not there is answered by the full
    ``not_found`` page, whose menu and footer name the agents, the DB and the journal, so it may
    only be rendered for a request that passed the guard.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None,
        render: Callable[[Request, Exception], Response],
        moving: Callable[[Request, str], Response] | None = None,
        public: frozenset[str] = frozenset(),
    ) -> None:
        self.app = app
        self.token = token
        self.render = render
        self.moving = moving
        self.public = public

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                for key, value in HEADERS.items():
                    if key.encode() not in present:
                        headers.append((key.encode(), value.encode()))
                message["headers"] = headers
            await send(message)

        request = Request(scope)
        response = self._refusal(request)
        if response is None:
            await self.app(scope, receive, send_with_headers)
        else:
            await response(scope, receive, send_with_headers)

    def _refusal(self, request: Request) -> Response | None:
        if request.method not in ("GET", "HEAD"):
            refused = ServeBadRequest(f"the dashboard is read-only: {request.method} is not served")
            response = self.render(request, refused)
            response.status_code = 405
            response.headers["allow"] = "GET, HEAD"
            return response
        if request.url.path in self.public:
            return None  # the stylesheet holds nothing of the store; the refusal page needs it
        if self.token is None:
            # the raw header, parsed whole: the URL Starlette builds falls back to the server's own
            # address when the header does not parse, which would pass any malformed Host
            hosts = request.headers.getlist("host")
            if len(hosts) == 1 and is_loopback_authority(hosts[0]):
                return None
            if not hosts:
                given = "no Host header"
            elif len(hosts) > 1:
                given = "several Host headers"
            else:
                given = f"{hosts[0]!r:.80}"
            return self.render(
                request,
                ServeBadRequest(
                    f"this dashboard answers only to a loopback Host (localhost, 127.0.0.1 or [::1], with "
                    f"an optional port), not {given}: open it as http://127.0.0.1:<port>/ (serving another "
                    "address needs --token)"
                ),
            )
        return self._token_refusal(request, self.token)

    def _token_refusal(self, request: Request, token: str) -> Response | None:
        offered = request.query_params.get("token")
        if offered is not None:  # a login: set the cookie and come back without the token in the URL
            if not hmac.compare_digest(offered.encode(), token.encode()):
                return self.render(request, ServeUnauthorized("that token is not this server's token"))
            kept = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            query = urllib.parse.urlencode(kept)
            target = same_site_path(request.scope["path"]) + (f"?{query}" if query else "")
            response: Response
            if self.moving is not None and request.headers.get("sec-fetch-site") == "cross-site":
                # a link on another site: a browser withholds a SameSite=Strict cookie from every
                # request of a redirect chain that began there, so the redirect landed on the
                # refusal; a page of this site that moves on makes a navigation of this site
                response = self.moving(request, target)
            else:
                response = RedirectResponse(target, status_code=303)
            response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/")
            return response
        auth = request.headers.get("authorization", "")
        carried = auth[7:] if auth[:7].lower() == "bearer " else request.cookies.get(COOKIE, "")
        if carried and hmac.compare_digest(carried.encode(), token.encode()):
            return None
        return self.render(
            request,
            ServeUnauthorized(
                "this dashboard needs its token: send `Authorization: Bearer <token>`, or open any page "
                "once with ?token=<token> to get a cookie"
            ),
        )


# -- the app ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Truncated:
    """A JSON list that stopped at its bytes (``LIST_MAX_BYTES``) before its ``limit``: the body
    keeps the CLI's shape; the answer carries ``Truncated: true`` and the next page in ``Link``."""

    body: object
    next_url: str


class Dashboard:
    """The pages and the API over one ``Reader``."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader
        self.env = _environment()

    # -- plumbing --------------------------------------------------------------------------------

    def render(self, request: Request, name: str, context: Mapping[str, Any], status: int = 200) -> Response:
        """Render template ``name`` with the page's common context."""
        common = {
            "agents": self.reader.agents,
            "db_path": str(self.reader.store.db_path),
            "journal_label": self.reader.journal_label(),
            "path": same_site_path(request.scope["path"]),  # a form's action: never another site's
            "link": link,
            "bare": False,
            "section": "",
        }
        html = self.env.get_template(name).render({**common, **context})
        return HTMLResponse(html, status_code=status)

    def error_page(self, request: Request, exc: Exception, *, bare: bool = False) -> Response:
        """The coded error as a page, or as JSON under ``/api``. A ``bare`` page (for a request the
        guard refused) names nothing of the store: no agents, no paths."""
        body = error_json(exc)
        if request.url.path.startswith("/api/") or request.url.path == "/api":
            try:
                content = encode_json(body)
            except _Unencodable as failed:  # the error's own context held a value JSON cannot carry
                exc = _coded(failed)
                body = error_json(exc)
                content = encode_json(body)
            return Response(content, status_code=error_status(exc), media_type="application/json")
        status = error_status(exc)
        context = {"title": f"error {body['code']}", "error": body, "status": status, "bare": bare}
        if bare:
            context.update(agents=[], db_path="", journal_label="")
        return self.render(request, "error.html", context, status)

    def moving_on_page(self, request: Request, target: str) -> Response:
        """The answer to a login (``?token=``) followed from a link on another site: a page of this
        site, naming nothing of the store, that goes on to ``target`` (a path of this site) at once
        (``<meta http-equiv="refresh">``, no script) and links to it."""
        bare = {"bare": True, "agents": [], "db_path": "", "journal_label": ""}
        return self.render(request, "login.html", {"title": "signing in", "target": target, **bare})

    def bare_error_page(self, request: Request, exc: Exception) -> Response:
        """``error_page`` for the guard: nothing of the store is shown."""
        return self.error_page(request, exc, bare=True)

    def _reading(self, store: bool) -> AbstractContextManager[object]:
        """The store's lock for an endpoint that reads the store; nothing for one that does not (an
        agent's pages read only its home's files, each read opening its own descriptor)."""
        return self.reader.lock if store else contextlib.nullcontext()

    def page(
        self, fn: Callable[[Request], tuple[str, dict[str, Any]]], *, store: bool = True
    ) -> Callable[[Request], Response]:
        """An HTML endpoint: ``fn`` returns the template and its context, read under the store's lock
        when ``store`` (else under no lock); the page is rendered once the lock is let go, so a large
        page's rendering never holds up another client's read."""

        def endpoint(request: Request) -> Response:
            try:
                with self._reading(store):
                    name, context = fn(request)
                return self.render(request, name, context)
            except Exception as exc:  # every failure becomes its coded error page
                return self.error_page(request, _coded(exc))

        return endpoint

    def plain(self, fn: Callable[[Request], bytes]) -> Callable[[Request], Response]:
        """A plain-text endpoint over the store: ``fn`` returns the bytes, read under the store's
        lock (the answer holds the value read and one encoding of it, never a page of it). A failure
        is its coded error page."""

        def endpoint(request: Request) -> Response:
            try:
                with self.reader.lock:
                    data = fn(request)
            except Exception as exc:
                return self.error_page(request, _coded(exc))
            return Response(data, media_type="text/plain; charset=utf-8")

        return endpoint

    def api(
        self, fn: Callable[[Request], tuple[object, str | None] | Truncated], *, store: bool = True
    ) -> Callable[[Request], Response]:
        """A JSON endpoint: ``fn`` returns the body and the next page's URL (or None), or a
        ``Truncated`` list (then the answer says ``Truncated: true``); read under the store's lock
        when ``store``, encoded once it is let go."""

        def endpoint(request: Request) -> Response:
            try:  # encoding too: a value JSON cannot carry is answered like any other failure
                with self._reading(store):
                    answer = fn(request)
                body, next_url = (answer.body, answer.next_url) if isinstance(answer, Truncated) else answer
                content = encode_json(body)
            except Exception as exc:
                return self.error_page(request, _coded(exc))
            response = Response(content, media_type="application/json")
            if next_url is not None:
                response.headers["link"] = f'<{next_url}>; rel="next"'
            if isinstance(answer, Truncated):
                response.headers["truncated"] = "true"
            return response

        return endpoint

    # -- runs ----------------------------------------------------------------------------------

    def _runs(self, request: Request) -> runs_data.RunsPage:
        limit = _int_param(request, "limit", runs_data.PAGE_SIZE, 1, runs_data.MAX_PAGE_SIZE)
        return runs_data.runs_page(
            self.reader.runs,
            self.reader.backend,
            state=_param(request, "state"),
            flow=_param(request, "flow"),
            cursor=_param(request, "cursor"),
            limit=limit,
        )

    def _runs_next(self, request: Request, base: str, cursor: str | None) -> str | None:
        if cursor is None:
            return None
        # the listing's own parameters only: any other name (``path``) is no argument of link()
        params = {k: request.query_params.get(k) for k in ("state", "flow", "limit")}
        return link(base, **params, cursor=cursor)

    def runs_page(self, request: Request) -> tuple[str, dict[str, Any]]:
        started = time.perf_counter()
        page = self._runs(request)
        return "runs.html", {
            "title": "Runs",
            "section": "runs",
            "page": page,
            "state": _param(request, "state"),
            "flow": _param(request, "flow"),
            "next_url": self._runs_next(request, "/runs", page.next_cursor),
            "max_mib": LIST_MAX_BYTES // (1024 * 1024),
            "text_shown": TEXT_SHOWN,
            "elapsed_ms": (time.perf_counter() - started) * 1000,
        }

    def runs_api(self, request: Request) -> tuple[object, str | None] | Truncated:
        page = self._runs(request)
        next_url = self._runs_next(request, "/api/runs", page.next_cursor)
        return Truncated(page.rows, next_url) if page.truncated and next_url else (page.rows, next_url)

    def run_page(self, request: Request) -> tuple[str, dict[str, Any]]:
        size = runs_data.TIMELINE_PAGE
        # the parameters first: a malformed one is the same 400 whatever the run
        record = _param(request, "record")
        asked_page = _int_param(request, "page", 1, 1, 10**9) - 1
        asked_skip = _int_param(request, "skip", 0, 0, size - 1)
        run = runs_data.run_timeline(self.reader.backend, request.path_params["run_id"])
        number, pages = runs_data.timeline_window(run["timeline"], page=asked_page, record=record)
        window = run["timeline"][number * size : (number + 1) * size]
        # the rows of the window before this part of it (the link of a part cut at its bytes)
        skip = min(asked_skip, max(len(window) - 1, 0))
        rows, shown = self._timeline_rows(window, skip, record)
        rest = shown[1] if shown[1] < len(window) else None
        base = f"/runs/{run['runId']}"
        traceback = error_of(run["error"])["traceback"] if run["error"] else None
        return "run.html", {
            "title": f"Run {run['runId']}",
            "section": "runs",
            "run": run,
            "input": json_part(run["input"], f"{base}/input"),
            "output": json_part(run["output"], f"{base}/output"),
            "traceback": None if traceback is None else text_part(traceback, f"{base}/traceback"),
            "part_shown": runs_data.PART_SHOWN,
            "rows": rows,
            "page_number": number + 1,
            "pages": pages,
            "record": record,
            "truncated": rest is not None,
            "rest_url": None if rest is None else link(f"/runs/{run['runId']}", page=number + 1, skip=rest),
            "page_start_url": link(f"/runs/{run['runId']}", page=number + 1) if shown[0] else None,
            "max_mib": LIST_MAX_BYTES // (1024 * 1024),
        }

    def _timeline_rows(
        self, window: list[dict[str, Any]], skip: int, record: str | None
    ) -> tuple[list[Markup], tuple[int, int]]:
        """The rows of ``window`` (a page of a run's timeline) from ``skip`` on, each rendered on its
        own, that fit in ``LIST_MAX_BYTES`` (the first always given), and which of the window they
        are (``[start, end)``). A ``record`` asked for past that cut starts the rows at its own."""
        entry = self.env.get_template("timeline_entry.html")
        rows: list[Markup] = []

        def sizes(start: int) -> Iterator[int]:
            for e in window[start:]:
                rows.append(Markup(entry.render(e=Fields(e), record=record, text_shown=TEXT_SHOWN)))  # noqa: S704
                yield len(rows[-1].encode())

        cut = fitting(sizes(skip))
        end = len(window) if cut is None else skip + cut
        at = _index_of(window, record)
        if at is not None and not skip <= at < end:  # the record asked for is past the cut: from it
            rows.clear()
            cut = fitting(sizes(at))
            skip, end = at, len(window) if cut is None else at + cut
        return rows[: end - skip], (skip, end)

    def run_part(self, part: str) -> Callable[[Request], bytes]:
        """The reader of the whole of a run's ``part``: its ``input`` or ``output`` (JSON, as ``flows
        show --json`` holds it) or its ``traceback`` (text), for the run page's link when the page
        shows it cut."""
        return lambda request: self._run_part(request.path_params["run_id"], part)

    def _run_part(self, run_id: str, part: str) -> bytes:
        """``run_part``'s bytes.

        Raises:
            ServeNotFound: the run recorded no traceback.
            journal.JournalRunNotFound: no such run.
        """
        summary = runs_data.run_summary(self.reader.backend, run_id)
        if part != "traceback":
            return orjson.dumps(summary[part], default=_plain)
        traceback = error_of(summary["error"])["traceback"] if summary["error"] else None
        if traceback is None:
            raise ServeNotFound(f"run {run_id} recorded no traceback: its page shows its error, if any")
        return traceback.encode("utf-8", errors="replace")

    def run_api(self, request: Request) -> tuple[object, str | None] | Truncated:
        offset = _int_param(request, "offset", 0, 0, 10**18)
        full = _given_int(request, "full", 0, 1) == 1
        run = runs_data.run_timeline(self.reader.backend, request.path_params["run_id"])
        entries = run["timeline"][offset:]
        if not full:  # the input, output and traceback cut at PART_SHOWN, each marked (``cut``)
            run, entries = runs_data.cut_parts(run, entries)
        cut = fitting(len(encode_json(e)) for e in entries)
        more = {"full": 1} if full else {}
        if cut is None:
            return {**run, "timeline": entries}, None
        return Truncated(
            {**run, "timeline": entries[:cut]}, link(f"/api/runs/{run['runId']}", offset=offset + cut, **more)
        )

    # -- findings --------------------------------------------------------------------------------

    def _findings(self, request: Request, size: Size = json_size) -> tuple[Filters, FindingsPage]:
        filters = parse_filters(
            q=_param(request, "q"),
            tags=request.query_params.getlist("tag"),
            meta=request.query_params.getlist("meta"),
            scope=_param(request, "scope"),
            source=_param(request, "source"),
        )
        limit = _int_param(request, "limit", FINDINGS_PAGE, 1, MAX_WHY)
        offset = _int_param(request, "offset", 0, 0, MAX_WHY)
        cursor = _param(request, "cursor")
        store = self.reader.memory()
        page = findings_page(store, filters, cursor=cursor, limit=limit, offset=offset, size=size)
        return filters, page

    def _findings_next(self, request: Request, base: str, page: FindingsPage) -> str | None:
        paging = ("cursor", "limit", "offset")
        kept = [(k, v) for k, v in request.query_params.multi_items() if k not in paging and v]
        limit = request.query_params.get("limit")
        if page.next_cursor is not None:
            more = [("cursor", page.next_cursor), ("limit", limit)]
        elif page.next_offset is not None:  # a page of answers cut at its bytes: the rest of it
            more = [("limit", limit), ("offset", str(page.next_offset))]
        elif page.next_limit is not None:
            more = [("limit", str(page.next_limit)), ("offset", request.query_params.get("offset"))]
        else:
            return None
        query = urllib.parse.urlencode([*kept, *((k, v) for k, v in more if v)])
        return f"{base}?{query}"

    def findings_page(self, request: Request) -> tuple[str, dict[str, Any]]:
        started = time.perf_counter()
        item = self.env.get_template("finding_item.html")
        rendered: dict[str, str] = {}

        def size(found: Recalled | Explained) -> int:
            """The bytes of a finding's item, rendered once: the page holds the renders that fit."""
            f, answer = (found.finding, found) if isinstance(found, Explained) else (found, None)
            rendered[f.key] = item.render(
                f=f,
                shown=highlight(f.text[:TEXT_SHOWN], answer.matched if answer else ()),
                answer=answer,
                text_shown=TEXT_SHOWN,
                link=link,
            )
            return len(rendered[f.key].encode())

        filters, page = self._findings(request, size)
        return "findings.html", {
            "title": "Findings",
            "section": "findings",
            "filters": filters,
            "found": page.found,
            "items": [Markup(rendered[f.key]) for f in page.found],  # noqa: S704 - rendered, escaped
            "truncated": page.truncated,
            "max_mib": LIST_MAX_BYTES // (1024 * 1024),
            "next_url": self._findings_next(request, "/findings", page),
            **self._scope_choices(),
            "elapsed_ms": (time.perf_counter() - started) * 1000,
        }

    def _scope_choices(self) -> dict[str, Any]:
        """The scopes the search form offers: every one in a menu when there are at most
        ``MAX_SCOPE_CHOICES``; else the first of them as a text box's suggestions and a link to the
        next page of ``/scopes`` (``scopes_more``). Only that page is asked of the store
        (``MemoryStore.scopes(limit=)``), never every scope: a store of a scope per user looked at
        each of them, its DB rows and its files, on every findings page."""
        scopes = self.reader.memory().scopes(limit=MAX_SCOPE_CHOICES + 1)
        if len(scopes) <= MAX_SCOPE_CHOICES:
            return {"scopes": scopes, "scopes_more": None}
        shown = scopes[:MAX_SCOPE_CHOICES]
        return {"scopes": shown, "scopes_more": link("/scopes", after=shown[-1])}

    def _scopes(self, request: Request) -> tuple[list[str], str | None, int, str | None]:
        """A page of scope names sorting after ``after`` (at most ``limit``), whether more follow (the
        last one shown, else None), the limit and ``after``.

        Raises:
            ServeBadRequest: ``limit`` is not 1 to ``SCOPES_MAX_PAGE``, or ``after`` is longer than
                ``SCOPE_AFTER_MAX`` characters.
        """
        limit = _int_param(request, "limit", MAX_SCOPE_CHOICES, 1, SCOPES_MAX_PAGE)
        after = _param(request, "after")
        if after is not None and len(after) > SCOPE_AFTER_MAX:
            raise ServeBadRequest(
                f"after must be a scope's name (at most {SCOPE_AFTER_MAX} characters), got "
                f"{len(after):,} characters; start from the first page of scopes"
            )
        found = self.reader.memory().scopes(after=after, limit=limit + 1)
        page = found[:limit]
        return page, page[-1] if len(found) > limit else None, limit, after

    def scopes_page(self, request: Request) -> tuple[str, dict[str, Any]]:
        page, last, limit, after = self._scopes(request)
        given = request.query_params.get("limit")  # carried on as asked, the default left out
        return "scopes.html", {
            "title": "Scopes",
            "section": "findings",
            "scopes": page,
            "after": after,
            "next_url": None if last is None else link("/scopes", after=last, limit=given),
            "first_url": link("/scopes", limit=given) if after is not None else None,
            "json_url": link("/api/scopes", after=after, limit=limit),
        }

    def scopes_api(self, request: Request) -> tuple[object, str | None]:
        page, last, limit, _ = self._scopes(request)
        return page, None if last is None else link("/api/scopes", after=last, limit=limit)

    def findings_api(self, request: Request) -> tuple[object, str | None] | Truncated:
        _, page = self._findings(request)
        next_url = self._findings_next(request, "/api/findings", page)
        body = page.as_json()
        return Truncated(body, next_url) if page.truncated and next_url else (body, next_url)

    def _finding(self, request: Request) -> Recalled:
        key = request.path_params["key"]
        found = self.reader.memory().get(key)
        if found is None:
            raise ServeNotFound(f"no live finding has key {key} (it may never have been learned, or expired)")
        return found

    def finding_page(self, request: Request) -> tuple[str, dict[str, Any]]:
        key = request.path_params["key"]
        check_key(key)  # a malformed key or parameter is a 400 before anything is read
        offset, limit = self._history_window(request)
        store = self.reader.memory()
        detail = finding_detail(store, self.reader.backend, key, self.reader.runs_naming(key))
        if detail is None:
            raise ServeNotFound(f"no finding has key {key}: neither the store nor the journal knows it")
        total = len(detail.history)
        shown = detail.history[offset : offset + limit]
        after = offset + len(shown)
        return "finding.html", {
            "title": f"Finding {key}",
            "section": "findings",
            "d": detail,
            "f": detail.live,
            "history": [e.as_json() for e in shown],
            "history_total": total,
            "history_first": offset + 1,
            "history_last": after,
            "history_next": link(f"/findings/{key}", offset=after, limit=request.query_params.get("limit"))
            if after < total
            else None,
            "history_oldest": link(f"/findings/{key}", limit=request.query_params.get("limit"))
            if offset
            else None,
            # the page shown, as JSON (not the first page)
            "history_json": link(
                f"/api/findings/{key}/history", offset=offset or None, limit=request.query_params.get("limit")
            ),
        }

    def _history_window(self, request: Request) -> tuple[int, int]:
        """A history page's ``offset`` (from 0, counted from the oldest event) and ``limit`` (1 to
        ``HISTORY_MAX_PAGE``, default ``memory.HISTORY_PAGE``)."""
        offset = _int_param(request, "offset", 0, 0, 10**18)
        return offset, _int_param(request, "limit", memory.HISTORY_PAGE, 1, HISTORY_MAX_PAGE)

    def finding_api(self, request: Request) -> tuple[object, str | None]:
        return self._finding(request).as_json(), None

    def history_api(self, request: Request) -> tuple[object, str | None]:
        key = check_key(request.path_params["key"])
        offset, limit = self._history_window(request)
        page = self.reader.memory().history_page(
            key, offset=offset, limit=limit, runs=self.reader.runs_naming(key), max_bytes=HISTORY_MAX_BYTES
        )
        after = page.next_offset
        next_url = None if after is None else link(f"/api/findings/{key}/history", offset=after, limit=limit)
        return page.as_json(), next_url

    # -- agents ----------------------------------------------------------------------------------

    def _agent(self, request: Request) -> Agent:
        text = str(request.path_params["number"])  # route takes any text: int() refuses thousands of digits
        if not (text.isascii() and text.isdigit()) or len(text) > 9:
            raise ServeNotFound(f"no agent {text!r:.80}: agents are numbered from 0 (see /agents)")
        return self.reader.agent(int(text))

    def agents_page(self, request: Request) -> tuple[str, dict[str, Any]]:
        return "agents.html", {"title": "Agents", "section": "agents"}

    def agents_api(self, request: Request) -> tuple[object, str | None]:
        return [
            {"number": a.number, "home": str(a.home), "ledger": str(a.ledger_path)}
            for a in self.reader.agents
        ], None

    def _before(self, request: Request) -> int | None:
        text = _param(request, "before")
        if text is None:
            return None
        if not (text.isascii() and text.isdigit()) or len(text) > 19:
            raise ServeBadRequest(
                f"before must be a byte offset, got {text!r:.80}; start from the newest page"
            )
        return int(text)

    def _balances(
        self, agent: Agent
    ) -> tuple[list[memory.ledger.Acted], dict[str, Token], dict[str, list[_chart.Point]]]:
        acted = agent.acted_window()
        return acted, tokens_of(acted), _chart.series(acted)

    def _since(self, request: Request, name: str) -> int | None:
        text = _param(request, name)
        if text is None:
            return None
        if not (text.isascii() and text.isdigit()) or len(text) > 12:
            raise ServeBadRequest(
                f"{name} must be a UTC midnight in unix seconds, got {text!r:.80}; start from the journal's "
                "first page"
            )
        return int(text)

    def _journal_shown(self, request: Request, agent: Agent) -> dict[str, Any]:
        """The agent page's journal: at most ``JOURNAL_SHOWN`` sentences, the newest of the window
        before ``jend`` (a sentence's place in the window ``jsince`` starts), and the links on."""
        since = self._since(request, "jsince")
        asked_end = _given_int(request, "jend", 0, 10**9)
        told = agent.journal(JOURNAL_DAYS, since)
        total = sum(len(day.sentences) for day in told.days)
        end = total if asked_end is None else asked_end
        if end > total:
            raise ServeBadRequest(
                f"jend {end} is past the {total} sentences of this journal; start from its newest page"
            )
        start = max(0, end - JOURNAL_SHOWN)
        page = journal_page(told, start, end - start)
        base = f"/agents/{agent.number}"
        return {
            "journal": page,
            "journal_earlier": link(base, jsince=told.since, jend=start) + "#journal" if start else None,
            "journal_later": None
            if end == total
            else link(base, jsince=told.since, jend=min(total, end + JOURNAL_SHOWN)) + "#journal",
            "journal_json": link(
                f"/api/agents/{agent.number}/journal", since=told.since, offset=start or None
            ),
        }

    def agent_page(self, request: Request) -> tuple[str, dict[str, Any]]:
        started = time.perf_counter()
        before = self._before(request)
        self._since(request, "jsince")
        _given_int(request, "jend", 0, 10**9)  # every parameter checked before the agent is looked up
        agent = self._agent(request)
        rows, older, truncated = agent.page(before)  # (a ledger that cannot be read fails here first)
        shown_journal = self._journal_shown(request, agent)
        acted, tokens, series = self._balances(agent)
        charts = [
            (address, tokens.get(address), _chart.chart(address, points, tokens))
            for address, points in series.items()
        ]
        reverted = [
            e.tx_hash
            for _, e in rows
            if isinstance(e, memory.ledger.Acted) and e.outcome is memory.ledger.Outcome.REVERTED
        ]
        return "agent.html", {
            "title": f"Agent {agent.name}",
            "section": f"agent-{agent.number}",
            "agent": agent,
            "rows": rows,
            "newest": before is None,
            "older_url": None if older is None else link(f"/agents/{agent.number}", before=older),
            "truncated": truncated,
            "max_mib": LIST_MAX_BYTES // (1024 * 1024),
            "status": agent.status(),
            "skips": agent.recent_skips(),
            "say": agent.renderer(acted),
            "reverts": agent.revert_reasons(reverted),
            **shown_journal,
            "journal_days": JOURNAL_DAYS,
            "journal_shown": JOURNAL_SHOWN,
            "acted_count": len(acted),
            "charts": charts,
            "chart_scan": CHART_SCAN,
            "elapsed_ms": (time.perf_counter() - started) * 1000,
        }

    def ledger_api(self, request: Request) -> tuple[object, str | None] | Truncated:
        limit = _int_param(request, "limit", LEDGER_PAGE, 1, 1000)
        before = self._before(request)
        agent = self._agent(request)
        rows, older, truncated = agent.page(before, limit)
        next_url = (
            None if older is None else link(f"/api/agents/{agent.number}/ledger", before=older, limit=limit)
        )
        body = [e.to_wire() for _, e in rows]
        return Truncated(body, next_url) if truncated and next_url else (body, next_url)

    def status_api(self, request: Request) -> tuple[object, str | None]:
        return self._agent(request).status(), None

    def why_api(self, request: Request) -> tuple[object, str | None] | Truncated:
        limit = _int_param(request, "limit", 10, 1, 1000)
        before = self._before(request)
        agent = self._agent(request)
        rows, older, truncated = agent.skips(before, limit)
        body = [s.to_wire() for _, s in rows]
        if truncated and older is not None:  # the rest of the ``limit``, from where this one stopped
            rest = limit - len(rows)
            return Truncated(body, link(f"/api/agents/{agent.number}/why", before=older, limit=rest))
        return body, None

    def journal_api(self, request: Request) -> tuple[object, str | None] | Truncated:
        days = _int_param(request, "days", JOURNAL_DAYS, 1, memory.ledger.MAX_DAYS)
        offset = _int_param(request, "offset", 0, 0, 10**9)
        limit = _int_param(request, "limit", JOURNAL_PAGE, 1, JOURNAL_MAX_PAGE)
        since = self._since(request, "since")
        agent = self._agent(request)
        told = agent.journal(days, since)
        page = journal_page(told, offset, limit)
        if page.end == page.total:
            return page.as_json(), None
        # the same window (its first midnight pinned) from the first sentence not given
        base = f"/api/agents/{agent.number}/journal"
        next_url = link(base, since=told.since, offset=page.end, limit=limit)
        return Truncated(page.as_json(), next_url) if page.truncated else (page.as_json(), next_url)

    def balances_api(self, request: Request) -> tuple[object, str | None]:
        _, tokens, series = self._balances(self._agent(request))
        return {
            address: {
                "symbol": tokens[address].symbol if address in tokens else None,
                "decimals": tokens[address].decimals if address in tokens else None,
                "points": [p.as_json() for p in points],
            }
            for address, points in series.items()
        }, None

    # -- not found -------------------------------------------------------------------------------

    async def not_found(self, request: Request, exc: Exception) -> Response:
        path = request.url.path  # any length the HTTP layer takes (16 KiB): echoed cut, as every echo is
        if path.endswith("/") and path.strip("/"):
            # ``/runs/`` is ``/runs``: sent there by a path of this site, never an absolute address
            # (Starlette's own redirect builds one from the request's Host header)
            target = same_site_path(path)
            scope = {**request.scope, "path": target}
            if any(route.matches(scope)[0] is Match.FULL for route in request.app.routes):
                query = request.url.query
                return RedirectResponse(target + (f"?{query}" if query else ""), status_code=308)
        return self.error_page(request, ServeNotFound(f"nothing is served at {path!r:.80}"))


def create_app(config: ServeConfig) -> Starlette:
    """The dashboard over the store ``config`` names (``app.state.reader`` holds what it reads;
    close it when the server stops)."""
    reader = Reader(config)
    d = Dashboard(reader)
    routes = [
        Route("/", lambda request: RedirectResponse("/runs", status_code=303)),
        Route("/runs", d.page(d.runs_page)),
        Route("/runs/{run_id}", d.page(d.run_page)),
        *(Route(f"/runs/{{run_id}}/{part}", d.plain(d.run_part(part))) for part in runs_data.RUN_PARTS),
        Route("/findings", d.page(d.findings_page)),
        Route("/findings/{key}", d.page(d.finding_page)),
        Route("/scopes", d.page(d.scopes_page)),
        # an agent's pages read its home's files only: no store lock (a slow one holds up nobody)
        Route("/agents", d.page(d.agents_page, store=False)),
        Route("/agents/{number}", d.page(d.agent_page, store=False)),
        Route("/api/runs", d.api(d.runs_api)),
        Route("/api/runs/{run_id}", d.api(d.run_api)),
        Route("/api/findings", d.api(d.findings_api)),
        Route("/api/findings/{key}", d.api(d.finding_api)),
        Route("/api/findings/{key}/history", d.api(d.history_api)),
        Route("/api/scopes", d.api(d.scopes_api)),
        Route("/api/agents", d.api(d.agents_api, store=False)),
        Route("/api/agents/{number}/ledger", d.api(d.ledger_api, store=False)),
        Route("/api/agents/{number}/status", d.api(d.status_api, store=False)),
        Route("/api/agents/{number}/why", d.api(d.why_api, store=False)),
        Route("/api/agents/{number}/balances", d.api(d.balances_api, store=False)),
        Route("/api/agents/{number}/journal", d.api(d.journal_api, store=False)),
        Mount("/static", StaticFiles(packages=[("flows.web", "static")]), name="static"),
    ]
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(
                Guard,
                token=config.token,
                render=d.bare_error_page,
                moving=d.moving_on_page,
                public=static_paths(),
            )
        ],
        exception_handlers={404: d.not_found},
    )
    app.router.redirect_slashes = False  # ``not_found`` sends ``/runs/`` to ``/runs`` by a relative address
    app.state.reader = reader
    return app

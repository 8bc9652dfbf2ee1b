"""What the server answers to a message the SDK would not answer: a line that is not JSON, a message of
the wrong shape, a request over the size limit. Shared by the stdio and HTTP transports, so both bound
a request the same way and name it with the same JSON-RPC codes.

The JSON-RPC rules applied: a request's answer carries its id; when the id cannot be read (the bytes
are not JSON, the id is not a string or an integer) the answer's id is null. Notifications (no
``id`` member) get no answer.
"""

from __future__ import annotations

import json
import math
from typing import Any

import mcp_types as types
import orjson
import pydantic_core
from pydantic import ValidationError

MAX_REQUEST_BYTES = 1024 * 1024
"""The largest request the server reads, in bytes (one line on stdio, one body over HTTP). A larger
one is answered with an invalid-request error and the server goes on; the largest finding (its text,
tags, source and metadata, at their own limits) fits well within it."""

_ID_SCAN = 4096
"""How many bytes at the start of an oversized request are searched for its id."""

_MAX_DIGITS = 4000
"""The longest integer literal read from a line the strict parser refused (Python converts longer
ones only on request, and in time quadratic in their length)."""


JSON_WHITESPACE = " \t\r\n"
"""The only characters JSON allows around a value (RFC 8259): ``str.strip()`` with no argument strips
many more."""
_JSON_SPACE = JSON_WHITESPACE.encode()


def _valid_id(value: object) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def error_line(request_id: str | int | None, code: int, message: str, data: Any = None) -> str:
    """One JSON-RPC error, as the line the stdio transport writes."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    answer = {"jsonrpc": "2.0", "id": request_id, "error": error}
    if isinstance(request_id, int) and not -(2**63) <= request_id < 2**64:
        return json.dumps(answer, separators=(",", ":")) + "\n"  # past orjson's range
    return orjson.dumps(answer).decode() + "\n"


def unreadable_answer(text: str) -> str | None:
    """The error line that answers ``text`` when the SDK would drop it; None when the SDK takes it
    (a well-formed message, or a blank line, which asks nothing). A line is blank when it holds only
    JSON's whitespace (space, tab, CR, LF): any other character, even one Python counts as space (a
    form feed, U+001C, U+2028, a no-break space), is not JSON and gets a parse error."""
    if not text.strip(JSON_WHITESPACE):
        return None
    try:  # exactly as the SDK reads the line (its JSON reader also bounds nesting)
        read: Any = types.jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValidationError:
        read = None
    try:
        raw = orjson.loads(text)
        if isinstance(raw, dict) and isinstance(raw.get("id"), float):
            raw = _lenient(text)[0]  # orjson reads an integer past 64 bits as a float: read it whole
    except orjson.JSONDecodeError:
        # NaN, an infinity, a number past a double's range or past 4,000 digits (which the SDK reads,
        # as it does over HTTP, so the tool's own checks answer), or a lone surrogate (which it drops)
        raw, odd = _lenient(text)
        if raw is None:
            return error_line(None, types.PARSE_ERROR, "Parse error: the line is not JSON")
        if read is None:
            return _not_strict_json(raw, odd)
    if not isinstance(raw, dict):
        return error_line(None, types.INVALID_REQUEST, "Invalid request: a message is one JSON object")
    if read is not None and not _dropped_request(raw, read):
        return None
    return _shape_answer(raw)


def _dropped_request(raw: dict[str, Any], read: Any) -> bool:
    """Whether the SDK, reading the object ``raw`` as ``read``, answers nothing though ``raw`` asks
    for an answer: a request whose id it cannot use (read as a notification), or a request that also
    holds a ``result`` or an ``error`` (read as the answer to a request of ours, and dropped)."""
    if "id" not in raw:
        return False
    if isinstance(read, types.JSONRPCNotification):
        return True
    return "method" in raw and isinstance(read, (types.JSONRPCResponse, types.JSONRPCError))


def body_answer(body: bytes) -> tuple[int, str] | None:
    """The HTTP status and the error that answer an HTTP request's ``body`` when the SDK would answer
    it wrongly or not at all: JSON that is not one object, a request whose id is not a string or an
    integer (which the SDK accepts as a notification, answering nothing), a request of the wrong shape
    (which it answers with no id): ``400``. A message of the wrong shape that asks for no answer (a
    notification, which has no id, or a response) is ``202`` with no error, as the SDK accepts a
    notification: it asks nothing and gets nothing, as over stdio (the SDK would answer it ``400``
    with its validation error). None when the SDK answers the body rightly, parse errors included."""
    try:
        raw = pydantic_core.from_json(body)  # as the SDK's HTTP transport reads the body
    except ValueError:
        return None
    if not isinstance(raw, dict):
        return 400, error_line(None, types.INVALID_REQUEST, "Invalid request: a message is one JSON object")
    try:
        read: Any = types.jsonrpc_message_adapter.validate_python(raw, by_name=False)
    except ValidationError:
        read = None
    if read is not None and not _dropped_request(raw, read):
        return None
    answer = _shape_answer(raw)
    return (202, "") if answer is None else (400, answer)


def request_of(body: bytes) -> tuple[str | int, str] | None:
    """The id and method of the request an HTTP ``body`` holds (read as the SDK reads it); None for
    anything else: a notification, a response, JSON that is not one object, bytes that are not JSON."""
    try:
        raw = pydantic_core.from_json(body)
    except ValueError:
        return None
    if isinstance(raw, dict) and _valid_id(raw.get("id")) and isinstance(raw.get("method"), str):
        return raw["id"], raw["method"]
    return None


def _shape_answer(raw: dict[str, Any]) -> str | None:
    """The error line that answers the JSON object ``raw`` when it is a request of the wrong shape."""
    if "id" not in raw or ("method" not in raw and ("result" in raw or "error" in raw)):
        return None  # a notification or a response: nobody waits for an answer (the SDK logs a bad one)
    if not _valid_id(raw["id"]):
        # the SDK would read a request whose id is not a string or an integer as a notification
        return error_line(
            None, types.INVALID_REQUEST, "Invalid request: the id must be a string or an integer"
        )
    answers = [k for k in ("result", "error") if k in raw]
    asked = {k: v for k, v in raw.items() if k not in answers}  # with a `method`, it is meant as a request
    try:
        types.jsonrpc_message_adapter.validate_python(asked, by_name=False)
    except ValidationError as exc:
        # a message with an id and no result or error is meant as a request: say what is wrong with it
        # as one (not what it lacks to be a response), and blame the params only when only they are wrong
        errors = [e for e in exc.errors() if e["loc"][:1] == ("JSONRPCRequest",)] or exc.errors()
        where = "; ".join(dict.fromkeys(_where(e) for e in errors))
        if all(e["loc"][1:2] == ("params",) for e in errors):
            return error_line(raw["id"], types.INVALID_PARAMS, f"Invalid params: {where}")
        return error_line(raw["id"], types.INVALID_REQUEST, f"Invalid request: {where}")
    if answers:
        return error_line(
            raw["id"],
            types.INVALID_REQUEST,
            f"Invalid request: a request (a message with a `method`) holds no `{answers[0]}`; "
            "only an answer does",
        )
    # well-formed, yet the SDK's JSON reader refused it: values nested deeper than it reads
    return error_line(raw["id"], types.INVALID_PARAMS, "Invalid params: values nested too deeply to read")


def _where(error: Any) -> str:
    """Where a validation error is (without the name of the union branch it was met in) and what."""
    return f"`{'.'.join(str(p) for p in error['loc'][1:]) or 'message'}`: {error['msg']}"


def _lenient(text: str) -> tuple[Any, bool]:
    """``text`` read by a lenient parser (None when even it cannot read it), and whether it holds a
    number JSON does not allow: ``NaN``, ``Infinity``, one too large for a double, or an integer too
    long to convert (read as None, never converted: converting is quadratic in its length)."""
    odd = False

    def constant(_: str) -> float:
        nonlocal odd
        odd = True
        return 0.0

    def floating(literal: str) -> float:
        nonlocal odd
        value = float(literal)
        if not math.isfinite(value):
            odd = True
        return value

    def integer(literal: str) -> int | None:
        nonlocal odd
        if len(literal) > _MAX_DIGITS:
            odd = True
            return None
        return int(literal)

    try:
        return json.loads(text, parse_constant=constant, parse_float=floating, parse_int=integer), odd
    except (ValueError, RecursionError):
        return None, odd


def _not_strict_json(raw: Any, odd: bool) -> str:
    """The answer to JSON that neither a strict parser nor the SDK reads (``raw``, as a lenient parser
    read it; ``odd``: it holds a number JSON has not), under the request's id when it has one: its
    strings hold lone surrogates, which are not Unicode, or its numbers are not finite or too long."""
    request_id = raw.get("id") if isinstance(raw, dict) else None
    if odd:
        message = (
            "Parse error: a number is NaN, infinite, too large for a double or longer than "
            f"{_MAX_DIGITS:,} digits, which is not JSON: send finite numbers"
        )
    else:
        message = "Parse error: a string holds a lone surrogate (\\ud800-\\udfff), which is not Unicode text"
    if _valid_id(request_id):
        return error_line(request_id, types.INVALID_PARAMS, message.replace("Parse error", "Invalid params"))
    return error_line(None, types.PARSE_ERROR, message)


def oversized_answer(start: bytes, limit: int = MAX_REQUEST_BYTES) -> str:
    """The error line that answers a request longer than ``limit`` bytes, whose first bytes are
    ``start``: under its id when the start names one at the top level."""
    return error_line(
        top_level_id(start[:_ID_SCAN]), types.INVALID_REQUEST, oversized_message(limit), {"limit": limit}
    )


def oversized_message(limit: int) -> str:
    """The message of the error that answers a request longer than ``limit`` bytes."""
    return f"Invalid request: a request is at most {limit} bytes; this one is longer"


def top_level_id(start: bytes) -> str | int | None:
    """The ``id`` member of the JSON object that ``start`` begins, if it appears whole in ``start``
    (members nested deeper are not mistaken for it); None otherwise. Linear in ``len(start)``."""
    depth, i, n = 0, 0, len(start)
    while i < n:
        c = start[i : i + 1]
        if c == b'"':
            end = _string_end(start, i)
            if end is None:
                return None
            if depth == 1 and start[i:end] == b'"id"':
                rest = start[end:].lstrip(_JSON_SPACE)
                if rest[:1] == b":":
                    return _scalar(rest[1:].lstrip(_JSON_SPACE))
            i = end
            continue
        if c in (b"{", b"["):
            depth += 1
        elif c in (b"}", b"]"):
            depth -= 1
        i += 1
    return None


def _string_end(data: bytes, start: int) -> int | None:
    """The index just past the JSON string that opens at ``start``; None when it does not end."""
    i = start + 1
    while i < len(data):
        c = data[i]
        if c == 0x5C:  # backslash: skip the escaped character
            i += 2
            continue
        if c == 0x22:
            return i + 1
        i += 1
    return None


def _scalar(data: bytes) -> str | int | None:
    if data[:1] == b'"':
        end = _string_end(data, 0)
        if end is None:
            return None
        try:
            value = orjson.loads(data[:end])
        except orjson.JSONDecodeError:
            return None
        return value if isinstance(value, str) else None
    n = 1 if data[:1] == b"-" else 0
    while n < len(data) and 48 <= data[n] <= 57:
        n += 1
    if n == len(data) or data[n : n + 1] in (b".", b"e", b"E") or not data[:n].strip(b"-"):
        return None  # cut off where it may go on, not an integer (a fraction is no id), or no number
    return int(data[:n])

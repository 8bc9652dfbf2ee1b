"""Fuzzing every MCP tool's arguments against a real ``flows mcp`` process over stdio.

Each example is one ``tools/call`` line: arguments shaped like the tool's schema (with hostile
values: huge and negative numbers, odd Unicode, lone surrogates escaped in the JSON, deep nesting,
keys of real and unknown findings) or any JSON value at all. Every call must be answered under its
id within ``BOUND_S``: a result, a tool error with a documented code other than ``mcp_tool_failed``
(a tool error without a code of its own is a bug), or a JSON-RPC error; the server never writes a
traceback. The fixed-seed profile keeps the examples the same on every run and machine.
"""

from __future__ import annotations

import collections
import itertools
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from flows.mcp._tools import TEXT_MAX, TOOLS
from tests.conftest import ROOT
from tests.mcp.test_wire import RawStdio, raw_stdio

BOUND_S = 10.0
DOCUMENTED = set(re.findall(r"`([a-z]+_[a-z_]+)`", (ROOT / "docs" / "SURFACE.md").read_text()))
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,  # the fixed-seed profile: the same examples on every run and machine
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
_ids = itertools.count(1)
BIG = "<a text past the limit>"
"""Stands for a text one character past ``learn``'s limit (written as such only on the wire, so a
failing example's report stays short)."""

# -- strategies ---------------------------------------------------------------------------------

_text = st.text(max_size=40) | st.sampled_from(["", " ", "\n", "\x00", BIG, "é" * 5, "\U0001f600"])
_surrogate = st.integers(0xD800, 0xDFFF).map(chr)  # JSON may escape one; it is not Unicode
_hostile_text = _text | st.builds(lambda a, s, b: a + s + b, _text, _surrogate, _text)
_int = st.integers() | st.sampled_from([0, -1, 2**53, 2**63, 2**64, -(2**63) - 1, 10**30])
_json: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | _int | st.floats(allow_nan=False, allow_infinity=False) | _hostile_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_hostile_text, inner, max_size=3),
    max_leaves=8,
)
_deep = st.integers(1, 400).map(lambda n: json.loads("[" * n + "]" * n))
LEARNED: list[str] = []  # the newest version's key of each memory the examples made, in order
_MEMORY_AT: dict[str, int] = {}  # a memory id -> where its newest key is in LEARNED
"""Keys of the findings the examples learned (the tools that take a key get real ones too)."""
_known = st.integers(0, 10**6).map(lambda i: LEARNED[i % len(LEARNED)] if LEARNED else "0" * 32)
_key = _known | st.sampled_from(["0" * 32, "f" * 32]) | st.text("0123456789abcdef", min_size=31, max_size=33)
_when = (
    _int
    | _hostile_text
    | st.sampled_from(["2026-01-31", "2026-01-31T08:00:00+00:00", "9999-12-31", "0001-01-01"])
)

_PROPERTY: dict[str, st.SearchStrategy[Any]] = {
    "text": _hostile_text,
    "subject": _hostile_text,
    "reason": _hostile_text,
    "source": _hostile_text,
    "scope": _hostile_text,
    "tags": st.lists(_hostile_text, max_size=4) | _json,
    "metadata": st.dictionaries(_hostile_text, _json, max_size=4) | _deep | _json,
    "key": _key,
    "supersedes": _key,
    "limit": _int,
    "offset": _int,
    "before": _when,
}


def _shaped(tool: str) -> st.SearchStrategy[Any]:
    """Arguments with the tool's own property names (and sometimes one it does not take)."""
    names = list(next(t for t in TOOLS if t.name == tool).input_schema["properties"])
    optional = {n: _PROPERTY.get(n, _json) for n in names}
    shaped = st.fixed_dictionaries({}, optional=optional)
    extra = st.dictionaries(_hostile_text, _json, max_size=2)
    return shaped | st.builds(lambda a, b: {**a, **b}, shaped, extra)


_word = st.text(min_size=1, max_size=30)
_PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    "text": _word,
    "subject": _word,
    "reason": _word,
    "source": _word,
    "scope": st.sampled_from(["a", "b", "mcp"]) | _word,
    "tags": st.lists(_word, max_size=3),
    "metadata": st.dictionaries(st.text(min_size=1, max_size=8), st.integers(-5, 5) | _word, max_size=3),
    "key": _known,
    "memoryId": _known,
    "supersedes": _known,
    "mode": st.sampled_from(["hybrid", "keyword", "semantic"]),
    "limit": st.integers(1, 500),
    "offset": st.integers(0, 50),
    "before": st.integers(0, 2**45) | st.sampled_from(["2026-01-31", "2999-01-01T00:00:00+00:00"]),
    "dry_run": st.booleans(),
    "confirm": st.text(alphabet="0123456789abcdef", min_size=16, max_size=16),  # a schema-breaking one
    # is the hostile strategies' to draw: here it made a dry run refused for its confirm
}


def _plausible(tool: str) -> st.SearchStrategy[Any]:
    """Arguments that keep to the tool's schema, so that the memory itself is reached."""
    schema = next(t for t in TOOLS if t.name == tool).input_schema
    required = {n: _PLAUSIBLE[n] for n in schema["required"]}
    if "confirm" in schema["properties"]:  # a filter's tool acts on a scope, after its dry run
        required |= {"scope": _PLAUSIBLE["scope"], "dry_run": _PLAUSIBLE["dry_run"]}
    optional = {n: _PLAUSIBLE[n] for n in schema["properties"] if n not in required}
    return st.fixed_dictionaries(required, optional=optional)


def _arguments(tool: str) -> st.SearchStrategy[Any]:
    return _plausible(tool) | _shaped(tool) | _json


# Explicit examples, run before the drawn ones: a call that reaches the memory, one with an argument
# the tool does not take, one whose arguments are not an object. What the strategies draw depends on
# more than the fixed seed: Hypothesis also draws the literal strings and numbers of every module of
# the project loaded in the process, so the same test draws other examples after other tests have
# loaded other modules. The filter tools' drawn calls reached the memory in only a few of 40 (a
# plausible dry run, with every filter well formed) and after tests/mcp none did; whether the
# examples reach the memory must not rest on that.
_EXPLICIT: dict[str, dict[str, Any]] = {
    "learn": {"text": "an explicit example", "scope": "mcp"},
    "recall": {"scope": "mcp"},
    "why": {"subject": "the fuzz's first memory"},
    "forget_where": {"scope": "explicit", "reason": "an explicit example", "dry_run": True},
    "erase_where": {"scope": "explicit", "reason": "an explicit example", "dry_run": True},
}


def _explicit(wire: RawStdio, tool: str) -> dict[str, Any]:
    """A call of ``tool`` that keeps to its schema and reaches the memory; for a tool that takes a
    key, on a memory learned for it just now (the drawn examples may have forgotten the others)."""
    if tool in _EXPLICIT:
        return _EXPLICIT[tool]
    answer = _call(wire, "learn", {"text": f"learned for an explicit example of {tool}", "scope": "mcp"})
    assert _check(answer) == "result"
    made = answer["result"]["structuredContent"]
    reason = {"reason": "an explicit example"} if tool in ("forget", "erase") else {}
    if tool == "update":
        return {"memoryId": made["memoryId"], "text": "an explicit correction"}
    return {"key": made["key"], **reason}


# -- the server ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wire(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawStdio]:
    """One stdio server for the module's examples (its store grows with the learns they make),
    with two memories learned first: the tools that take a key reach real ones whichever of the
    module's tests runs, alone or first."""
    db = tmp_path_factory.mktemp("mcp-fuzz") / "history.db"
    with raw_stdio(db) as w:
        for text in ("the fuzz's first memory", "the fuzz's second memory"):
            assert _check(_call(w, "learn", {"text": text, "scope": "mcp"})) == "result"
        yield w


def _call(wire: RawStdio, tool: str, arguments: Any) -> dict[str, Any]:
    request_id = next(_ids)
    params = {"name": tool, "arguments": arguments}
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    line = json.dumps(message, ensure_ascii=True)  # escapes lone surrogates, as a client may
    wire.send(line.replace(json.dumps(BIG), json.dumps("y" * (TEXT_MAX + 1))).encode())
    answer = wire.answer(BOUND_S)
    assert answer["id"] == request_id, answer
    return answer


def _check(answer: dict[str, Any]) -> str:
    """What the answer was: ``result``, a tool error's code, or ``rpc`` (a JSON-RPC error)."""
    if "error" in answer:  # a JSON-RPC error: the request itself was refused
        assert answer["error"]["code"] in (-32700, -32600, -32602), answer
        return "rpc"
    result = answer["result"]
    if not result.get("isError"):
        key, memory = result["structuredContent"].get("key"), result["structuredContent"].get("memoryId")
        if isinstance(key, str) and isinstance(memory, str):
            # an update's new version takes its memory's place: the superseded key is no longer
            # one ``get`` finds, and examples that drew only such keys would never reach a result
            if memory in _MEMORY_AT:
                LEARNED[_MEMORY_AT[memory]] = key
            elif key not in LEARNED:
                _MEMORY_AT[memory] = len(LEARNED)
                LEARNED.append(key)
        return "result"
    error = result["structuredContent"]["error"]
    assert error["code"] != "mcp_tool_failed", error
    assert error["code"] in DOCUMENTED, error
    assert "Traceback" not in error["message"]
    return str(error["code"])


@pytest.mark.parametrize("tool", [t.name for t in TOOLS])
def test_every_tool_answers_any_arguments_with_a_result_or_a_documented_error(
    wire: RawStdio, tool: str
) -> None:
    seen: collections.Counter[str] = collections.Counter()

    @SETTINGS
    @example(arguments=_explicit(wire, tool))
    @example(arguments={"not an argument of any tool": 1})
    @example(arguments=7)
    @given(arguments=_arguments(tool))
    def check(arguments: Any) -> None:
        seen[_check(_call(wire, tool, arguments))] += 1

    check()
    wire.ping(next(_ids))
    assert wire.proc.poll() is None
    assert seen["result"] > 0 and len(seen) > 2, seen  # the examples reached the memory, not only the schema


_uri = st.builds(lambda s: "flows-memory://scope/" + s, _hostile_text) | _hostile_text | _json


def test_reading_any_resource_uri_is_a_result_or_an_invalid_params_error(wire: RawStdio) -> None:
    seen: collections.Counter[str] = collections.Counter()

    @SETTINGS
    @example(uri="flows-memory://scope/mcp")  # explicit, as the tools' (above)
    @example(uri="flows-memory://scope/%zz")
    @given(uri=_uri)
    def check(uri: Any) -> None:
        request_id = next(_ids)
        message = {"jsonrpc": "2.0", "id": request_id, "method": "resources/read", "params": {"uri": uri}}
        wire.send(json.dumps(message, ensure_ascii=True).encode())
        answer = wire.answer(BOUND_S)
        assert answer["id"] == request_id, answer
        if "result" in answer:
            seen["result"] += 1
            return
        error = answer["error"]
        data = error.get("data")
        assert error["code"] in (-32700, -32600, -32602), answer  # the caller's fault, never internal
        if isinstance(data, dict):
            assert data["code"] in DOCUMENTED and data["code"] != "mcp_tool_failed", answer
        seen[str(error["code"])] += 1

    check()
    wire.ping(next(_ids))
    assert seen["result"] > 0 and len(seen) > 1, seen

"""The server's tools: their schemas and descriptions (written for a model), argument checks, and
what each does with the memory. Nothing here knows the MCP SDK; ``_server`` adapts it."""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from flows._bounded import LIST_MAX_BYTES, fitting
from flows.mcp._errors import McpArgumentsInvalid, McpToolUnknown
from flows.mcp._sessions import DEFAULT_SCOPE
from memory import (
    HISTORY_KINDS,
    METADATA_MAX_BYTES,
    REASON_MAX,
    SOURCE_MAX_BYTES,
    TAG_MAX_BYTES,
    TAGS_MAX,
    ArgumentInvalid,
)
from memory.cli import instant_ms

KEY_PATTERN = "^[0-9a-f]{32}$"
"""A finding's key: the 32 lowercase hex characters of its content id."""

CONFIRM_PATTERN = "^[0-9a-f]{16}$"
"""A filter forget's or erase's confirmation: 16 hex digits of a digest of what its dry run listed."""

LISTED_MAX = 1000
"""The most keys (or memory ids) one ``forget_where`` or ``erase_where`` call reaches. Its dry run
lists every one, and its confirmation is a digest of exactly what was listed, so it acts only on what
the caller was shown: a filter that matches more is refused, dry run or not, to be narrowed."""

ERASE_MANY_MAX = 1000
"""The most memories one ``erase_where`` call erases (each erasure rewrites the journal streams that
hold its commits): a filter that matches more is refused, to be narrowed."""

RECALL_LIMIT = 20
WHY_LIMIT = 10
HISTORY_LIMIT = 100
MAX_LIMIT = 500

RESULT_MAX_BYTES = LIST_MAX_BYTES
"""The most findings a result (of ``recall``, ``why``, a scope's resource) holds, in bytes of their
JSON: past it the rest are left out and the result says ``truncated``. The first finding is always
kept, however large. Without it 500 findings of 65,536 control characters (each escaped to six
bytes, then again in the result's text copy) made one 250 MB answer and a 1 GB server."""


def bounded(
    items: list[dict[str, Any]], max_bytes: int = RESULT_MAX_BYTES
) -> tuple[list[dict[str, Any]], bool]:
    """The first of ``items`` whose JSON fits in ``max_bytes`` (at least one), and whether any were
    left out."""
    n = fitting((len(orjson.dumps(item)) for item in items), max_bytes)
    return (items, False) if n is None else (items[:n], True)


TEXT_MAX = 65536
"""The longest text a finding takes through ``learn`` (characters), stated as the schema's
``maxLength``. It is within the memory layer's own limit on a finding's text,
``memory.TEXT_MAX_BYTES`` (at 4 bytes a character at most, 256 KiB as UTF-8), so a text the schema
takes is never refused below for its size; and a text this long, however a client escapes it, fits
in one ``MAX_REQUEST_BYTES`` request."""


SHOWN = 80
"""How much of a client's text (a URI, an argument's name) a message echoes, as a Python literal:
escaped, one line."""

MESSAGE_MAX = 400
"""The most characters of a schema error's own message a tool error gives (it quotes the value it
refused: a 1 MB request's text, echoed whole, made a 3 MB answer of a refusal)."""


def shown(text: str, limit: int = SHOWN) -> str:
    """``text`` for a message: escaped, and cut to ``limit`` characters with its length said."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}… ({len(text):,} characters)"


def _cut(text: str, limit: int) -> str:
    """``text`` (already fit to show) cut to ``limit`` characters, with its length said."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


class Memory(Protocol):
    """What the tools need from the server: the store's reads, and the calling session's writes."""

    default_scope: str | None

    async def learn(
        self, scope: str, finding: Mapping[str, Any], supersedes: str | None
    ) -> dict[str, Any]: ...
    async def forget(self, key: str, reason: str) -> dict[str, Any]: ...
    async def update(self, memory_id: str, finding: Mapping[str, Any]) -> dict[str, Any]: ...
    async def recall(
        self,
        *,
        scope: str | None,
        tags: list[str],
        meta: Mapping[str, Any] | None,
        source: str | None,
        before_ms: int | None,
        limit: int,
    ) -> list[dict[str, Any]]: ...
    async def why(
        self,
        subject: str,
        *,
        scope: str | None,
        tags: list[str],
        meta: Mapping[str, Any] | None,
        limit: int,
        mode: str | None = None,
    ) -> list[dict[str, Any]]: ...
    async def get(self, key: str) -> dict[str, Any]: ...
    async def history(self, key: str, *, offset: int, limit: int, max_bytes: int) -> dict[str, Any]: ...
    async def forget_where(
        self,
        *,
        scope: str,
        reason: str,
        tags: list[str],
        meta: Mapping[str, Any] | None,
        source: str | None,
        before_ms: int | None,
        dry_run: bool,
        only: list[str] | None = None,
    ) -> dict[str, Any]: ...
    async def erase_plan(
        self,
        *,
        scope: str,
        reason: str,
        tags: list[str],
        meta: Mapping[str, Any] | None,
        source: str | None,
        before_ms: int | None,
    ) -> list[str]: ...
    async def erase(self, keys: list[str], reason: str) -> list[dict[str, Any]]: ...


Run = Callable[[Memory, dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name, what a model reads about it, its schemas, hints and what it does."""

    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    run: Run
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False
    validator: Draft202012Validator = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        Draft202012Validator.check_schema(self.input_schema)
        object.__setattr__(self, "validator", Draft202012Validator(self.input_schema))

    def check(self, arguments: object) -> dict[str, Any]:
        """``arguments`` when they match the input schema.

        Raises:
            McpArgumentsInvalid: they do not; the message names the argument and what is wrong.
        """
        args = {} if arguments is None else arguments
        error = best_match(self.validator.iter_errors(args))
        if error is None:
            assert isinstance(args, dict)
            return args
        where = ".".join(str(p) for p in error.absolute_path)
        if error.validator == "additionalProperties" and isinstance(args, dict):
            allowed = set(self.input_schema["properties"])
            extra = sorted(str(k) for k in args if k not in allowed)
            where = extra[0] if extra else where
            takes = ", ".join(sorted(allowed))
            named = ", ".join(shown(k) for k in extra[:5])
            named += f" and {len(extra) - 5} more" if extra[5:] else ""
            message = f"unknown argument(s) {named}; {self.name} takes {takes}"
        elif where:
            message = f"argument `{_cut(where, SHOWN)}`: {_cut(error.message, MESSAGE_MAX)}"
        else:
            message = _cut(error.message, MESSAGE_MAX)
        raise McpArgumentsInvalid(
            f"{self.name}: {message} (see the tool's input schema)",
            tool=self.name,
            argument=_cut(where, SHOWN) or None,
        )


# -- schemas ------------------------------------------------------------------------------------

_KEY = {"type": "string", "pattern": KEY_PATTERN}
_SCOPE = {
    "type": "string",
    "minLength": 1,
    "description": "The memory scope (a namespace such as a project or a user). Default: the server's "
    "--scope; without one, learn writes to scope `mcp` and reads cover every scope.",
}
_TAGS = {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": TAGS_MAX}
_CITATION = {
    "type": "object",
    "description": "The durable journal record the finding came from.",
    "properties": {
        "runId": {"type": "string", "description": "the root run that committed it"},
        "stream": {"type": "string", "description": "the journal stream of that run"},
        "id": {"type": "string", "description": "the record's id in that stream"},
        "committedMs": {"type": "integer", "description": "commit time, epoch milliseconds"},
    },
    "required": ["runId", "stream", "id"],
}
_FINDING: dict[str, Any] = {
    "type": "object",
    "properties": {
        "memoryId": {**_KEY, "description": "the memory's id: the same for every version; pass it to update"},
        "key": {**_KEY, "description": "the finding's key: pass it to forget, history or supersedes"},
        "text": {"type": "string"},
        "source": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "metadata": {"type": "object"},
        "scope": {"type": "string"},
        "flow": {"type": "string"},
        "learnedMs": {"type": "integer"},
        "citation": _CITATION,
    },
    "required": ["key", "text", "source", "tags", "scope", "citation"],
}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


# -- the tools ----------------------------------------------------------------------------------


async def _learn(memory: Memory, args: dict[str, Any]) -> dict[str, Any]:
    finding: dict[str, Any] = {k: args[k] for k in ("text", "source", "tags", "metadata") if k in args}
    scope = args.get("scope") or memory.default_scope or DEFAULT_SCOPE
    return await memory.learn(scope, finding, args.get("supersedes"))


async def _update(memory: Memory, args: dict[str, Any]) -> dict[str, Any]:
    finding: dict[str, Any] = {k: args[k] for k in ("text", "source", "tags", "metadata") if k in args}
    return await memory.update(args["memoryId"], finding)


def _before_ms(tool: str, value: object) -> int | None:
    """``before`` as epoch milliseconds: an integer as it is, a string as the CLI reads ``--before``."""
    if value is None or isinstance(value, int):
        return value
    try:
        return instant_ms(str(value))
    except argparse.ArgumentTypeError as exc:
        raise McpArgumentsInvalid(f"{tool}: argument `before` {exc}", tool=tool, argument="before") from None


async def _recall(memory: Memory, args: dict[str, Any]) -> dict[str, Any]:
    found = await memory.recall(
        scope=args.get("scope") or memory.default_scope,
        tags=list(args.get("tags", [])),
        meta=args.get("metadata"),
        source=args.get("source"),
        before_ms=_before_ms("recall", args.get("before")),
        limit=int(args.get("limit", RECALL_LIMIT)),
    )
    kept, truncated = bounded(found)
    return {"findings": kept, "truncated": True} if truncated else {"findings": kept}


async def _why(memory: Memory, args: dict[str, Any]) -> dict[str, Any]:
    answers = await memory.why(
        args["subject"],
        scope=args.get("scope") or memory.default_scope,
        tags=list(args.get("tags", [])),
        meta=args.get("metadata"),
        limit=int(args.get("limit", WHY_LIMIT)),
        mode=args.get("mode"),
    )
    kept, truncated = bounded(answers)
    return {"answers": kept, "truncated": True} if truncated else {"answers": kept}


async def _get(memory: Memory, args: dict[str, Any]) -> dict[str, Any]:
    return {"finding": await memory.get(args["key"])}


async def _forget(memory: Memory, args: dict[str, Any]) -> dict[str, Any]:
    return await memory.forget(args["key"], args["reason"])


async def _history(memory: Memory, args: dict[str, Any]) -> dict[str, Any]:
    return await memory.history(
        args["key"],
        offset=int(args.get("offset", 0)),
        limit=int(args.get("limit", HISTORY_LIMIT)),
        max_bytes=RESULT_MAX_BYTES,
    )


def _one_scope(tool: str, memory: Memory, args: dict[str, Any]) -> str:
    """The one scope a filter forget or erase reaches: the call's ``scope``, else the server's.

    Raises:
        McpArgumentsInvalid: neither names one (a filter never reaches every scope at once).
    """
    scope = args.get("scope") or memory.default_scope
    if scope is None:
        raise McpArgumentsInvalid(
            f"{tool}: argument `scope` is required on this server (it was started without --scope): "
            f"{tool} reaches one scope at a time, never every scope",
            tool=tool,
            argument="scope",
        )
    return str(scope)


def _where(tool: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "tags": list(args.get("tags", [])),
        "meta": args.get("metadata"),
        "source": args.get("source"),
        "before_ms": _before_ms(tool, args.get("before")),
    }


def confirmation(tool: str, scope: str, where: Mapping[str, Any], ids: list[str]) -> str:
    """What a filter forget or erase must be given as ``confirm``: a digest of the tool, its scope
    and filter, and every key (or memory id) its dry run listed."""
    body = {"tool": tool, "scope": scope, "where": dict(where), "ids": sorted(ids)}
    # the standard library's JSON: metadata values past 64 bits, which orjson refuses, are written too
    text = json.dumps(body, sort_keys=True, ensure_ascii=True, allow_nan=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _confirmed(tool: str, args: dict[str, Any], ids: list[str], expected: str) -> None:
    """Refuse a filter forget or erase whose ``confirm`` is missing or is not ``expected`` (what its
    filter matches now).

    Raises:
        McpArgumentsInvalid: naming ``confirm`` and saying what to do.
    """
    given = args.get("confirm")
    if given is None:
        raise McpArgumentsInvalid(
            f"{tool}: argument `confirm` is required: call {tool} first with `dry_run: true`, check "
            "what it lists, then call it again with the same arguments and `confirm` set to the "
            "dry run's `confirm`",
            tool=tool,
            argument="confirm",
        )
    if given != expected:
        raise McpArgumentsInvalid(
            f"{tool}: argument `confirm` {given} is not the confirmation of what the filter matches now "
            f"({len(ids)} in all): the matches changed since the dry run, or it was made for another "
            f"scope or filter; nothing was written: call {tool} with `dry_run: true` again",
            tool=tool,
            argument="confirm",
        )


def _listed(name: str, ids: list[str]) -> dict[str, Any]:
    return {"count": len(ids), name: ids}


def _at_most(limit: int, ids: list[str], what: str, tool: str, scope: str) -> None:
    """Refuse a filter forget or erase whose filter matches more than ``limit`` of ``what`` (``ids``):
    more than one call reaches, or than its dry run lists for the caller to confirm.

    Raises:
        ArgumentInvalid: saying how many it matches and to narrow the filter; nothing is written.
    """
    if len(ids) > limit:
        raise ArgumentInvalid(
            f"the filter matches {len(ids)} {what} in scope {scope!r}, more than one {tool} call "
            f"reaches ({limit}, every one listed by its dry run for you to confirm): narrow it (a tag, "
            "metadata, a source, `before`); nothing was written"
        )


async def _forget_where(memory: Memory, args: dict[str, Any]) -> dict[str, Any]:
    scope = _one_scope("forget_where", memory, args)
    where = _where("forget_where", args)
    reason = str(args["reason"])
    plan = await memory.forget_where(scope=scope, reason=reason, dry_run=True, **where)
    keys = list(plan["keys"])
    _at_most(LISTED_MAX, keys, "findings", "forget_where", scope)  # a key never listed is never forgotten
    expected = confirmation("forget_where", scope, where, keys)
    head = {"scope": scope, "filter": plan["filter"], "reason": reason}
    if args.get("dry_run"):
        return {"dryRun": True, **_listed("keys", keys), **head, "confirm": expected}
    _confirmed("forget_where", args, keys, expected)
    if not keys:
        return {"dryRun": False, **_listed("keys", keys), **head}
    # what the dry run listed and the caller confirmed, no more: a match learned since stays
    done = await memory.forget_where(scope=scope, reason=reason, dry_run=False, only=keys, **where)
    out = {"dryRun": False, **_listed("keys", list(done["keys"])), **head}
    for name in ("forgottenMs", "citation"):
        if done.get(name) is not None:
            out[name] = done[name]
    return out


async def _erase(memory: Memory, args: dict[str, Any]) -> dict[str, Any]:
    [erased] = await memory.erase([args["key"]], args["reason"])
    return erased


async def _erase_where(memory: Memory, args: dict[str, Any]) -> dict[str, Any]:
    scope = _one_scope("erase_where", memory, args)
    where = _where("erase_where", args)
    reason = str(args["reason"])
    memories = await memory.erase_plan(scope=scope, reason=reason, **where)
    _at_most(min(ERASE_MANY_MAX, LISTED_MAX), memories, "memories", "erase_where", scope)
    expected = confirmation("erase_where", scope, where, memories)
    head = {"scope": scope, "reason": reason}
    if args.get("dry_run"):
        return {"dryRun": True, **_listed("memoryIds", memories), **head, "confirm": expected}
    _confirmed("erase_where", args, memories, expected)
    # what the dry run listed, each erased whole, one record each
    rewritten = sum(int(erased["rewritten"]) for erased in await memory.erase(memories, reason))
    return {"dryRun": False, **_listed("memoryIds", memories), **head, "rewritten": rewritten}


_ARGUMENT_ERRORS = (
    "Arguments that break the input schema are refused with `mcp_arguments_invalid` (naming the argument)"
)
_FINDING_ERRORS = (
    "a finding the memory refuses is `memory_finding_invalid`, naming the `field` (a blank text, a "
    f"`source` over {SOURCE_MAX_BYTES} bytes or a tag over {TAG_MAX_BYTES} bytes as UTF-8, `metadata` "
    f"over {METADATA_MAX_BYTES} bytes as JSON, with a key holding a control character, or nested deeper "
    "than 16 levels)"
)
_FILTERS = {
    "tags": {**_TAGS, "description": "Only findings carrying every one of these tags."},
    "metadata": {
        "type": "object",
        "description": "Only findings whose metadata has each of these top-level keys with this value "
        "(JSON equality).",
    },
}


def _limit(default: int, what: str) -> dict[str, Any]:
    return {
        "type": "integer",
        "minimum": 1,
        "maximum": MAX_LIMIT,
        "description": f"At most this many {what} (default {default}).",
    }


_BEFORE = {
    "type": ["string", "integer"],
    "minimum": 0,
    "minLength": 1,
    "description": "Only findings learned before this time: an ISO 8601 date or "
    "date-time (2026-01-31, 2026-01-31T08:00:00+00:00; without an offset, the "
    "server's local time), or epoch milliseconds.",
}


def _reason(what: str) -> dict[str, Any]:
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": REASON_MAX,
        "description": f"Why {what}, for the record (at most {REASON_MAX} characters).",
    }


def _guarded(what: str, reason: str) -> dict[str, Any]:
    """The input schema of a filter forget or erase: one scope, the filter, a reason, and the two steps."""
    return _object(
        {
            "scope": {
                "type": "string",
                "minLength": 1,
                "description": f"The one scope whose {what} it reaches. Default: the server's --scope; "
                "required on a server started without one.",
            },
            "tags": {**_TAGS, "description": f"Only {what} carrying every one of these tags."},
            "metadata": {
                "type": "object",
                "description": f"Only {what} whose metadata has each of these top-level keys with this "
                "value (JSON equality).",
            },
            "source": {"type": "string", "minLength": 1, "description": f"Only {what} from this source."},
            "before": {**_BEFORE, "description": str(_BEFORE["description"]).replace("findings", what)},
            "reason": _reason(reason),
            "dry_run": {
                "type": "boolean",
                "description": "true: write nothing; list what it would reach, with `count` and the "
                "`confirm` to pass next. Call it so first.",
            },
            "confirm": {
                "type": "string",
                "pattern": CONFIRM_PATTERN,
                "description": "Required unless `dry_run` is true: the `confirm` the dry run returned "
                "(16 hex digits), with the same scope and filter.",
            },
        },
        ["reason"],
    )


def _plan_output(name: str, item: str, extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "dryRun": {"type": "boolean", "description": "true when nothing was written"},
            "count": {"type": "integer", "description": f"how many {item} it reached (or would reach)"},
            name: {
                "type": "array",
                "items": _KEY,
                "description": f"the {item}, sorted: every one (at most {LISTED_MAX})",
            },
            "scope": {"type": "string"},
            "reason": {"type": "string"},
            "confirm": {
                "type": "string",
                "pattern": CONFIRM_PATTERN,
                "description": "A dry run's: pass it as `confirm` to do what it listed.",
            },
            **extra,
        },
        "required": ["dryRun", "count", name, "scope", "reason"],
    }


_ERASED = {
    "type": "object",
    "properties": {
        "memoryId": _KEY,
        "keys": {"type": "array", "items": _KEY, "description": "every version's key, erased"},
        "citation": {
            **_CITATION,
            "type": ["object", "null"],
            "description": "The erase record (null when an earlier erase had recorded it and this one "
            "only finished it).",
        },
        "rewritten": {"type": "integer", "description": "journal records rewritten as tombstones"},
    },
    "required": ["memoryId", "keys", "citation", "rewritten"],
}

_ANSWER = {
    **_FINDING,
    "properties": {
        **_FINDING["properties"],
        "score": {"type": "number"},
        "matched": {"type": "array", "items": {"type": "string"}},
        "matchedBy": {"type": "string", "enum": ["words", "meaning", "both"]},
        "similarity": {"type": ["number", "null"]},
    },
}

_TRUNCATED = {
    "type": "boolean",
    "description": f"Present (true) when more matched than fit in {RESULT_MAX_BYTES // (1024 * 1024)} MiB: "
    "the best or newest are given; narrow the filters or lower `limit` to see the rest.",
}
_BOUNDED = (
    f" A result holds at most {RESULT_MAX_BYTES // (1024 * 1024)} MiB of findings (as JSON): when more "
    "match, the rest are left out and `truncated` is true."
)

_LEARNED = {
    "type": "object",
    "properties": {
        "memoryId": _KEY,
        "key": _KEY,
        "scope": {"type": "string"},
        "supersedes": {"type": ["string", "null"]},
        "learnedMs": {"type": "integer"},
        "citation": _CITATION,
    },
    "required": ["memoryId", "key", "scope", "citation"],
}

_READ_AND_WRITE: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="learn",
        title="Remember a finding",
        description=(
            "Remember a finding durably, so that later conversations and other agents can recall it. "
            "Use it for facts worth keeping: a user's preference, a decision and its reason, a result "
            "you verified. The finding is committed to an append-only journal before it becomes "
            "visible; the result gives its `key` and `citation` (the journal record). Repeats: learning "
            "the same text, tags (in the same order), source and metadata in the same scope again "
            "returns the same key and adds no second finding (tags in another order make another). "
            "Corrections: learn the corrected finding with `supersedes` set to the old key; the old "
            "one stops being recalled but stays in the journal (see the `history` "
            "tool). Forgotten findings: a forgotten or superseded key stays retired for good; learning "
            "the same finding again remembers it anew as a new memory under a new key, with a record of "
            "its own (the old key is not brought back). Errors: "
            + _ARGUMENT_ERRORS
            + f" (text is at most {TEXT_MAX} characters); "
            + _FINDING_ERRORS
            + "; a `scope` no finding can have is `memory_argument_invalid` (blank, over 256 "
            "characters, with NUL) or `journal_name_invalid` (another control character); a "
            "`supersedes` key no finding has is `memory_finding_unknown`; a retirement the learn cannot "
            "go past is `memory_finding_retired`, its message saying what to do (the `supersedes` key "
            "was already forgotten or superseded, or was retired while this learn was written: supersede "
            "the memory's live version, which the `history` tool names; the same finding was erased "
            "while this learn was written: learn it again). A refused learn writes nothing."
        ),
        input_schema=_object(
            {
                "text": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": TEXT_MAX,
                    "description": f"The finding, in one or a few sentences (at most {TEXT_MAX} characters).",
                },
                "tags": {**_TAGS, "description": "Short labels to find it by, e.g. ['billing', 'prefs']."},
                "source": {
                    "type": "string",
                    "minLength": 1,
                    "description": "Where it came from (a document, a URL, a person). Default: `mcp`.",
                },
                "metadata": {
                    "type": "object",
                    "description": "Structured facts to filter by later: a JSON object of string keys "
                    f"(at most {METADATA_MAX_BYTES} bytes as JSON).",
                },
                "supersedes": {**_KEY, "description": "The key of a finding this one replaces."},
                "scope": _SCOPE,
            },
            ["text"],
        ),
        output_schema=_LEARNED,
        run=_learn,
        idempotent=True,
    ),
    ToolSpec(
        name="update",
        title="Correct a memory",
        description=(
            "Correct a remembered finding under its one identity: the new text (with its tags, source "
            "and metadata) becomes the memory's live version, the old version stops being recalled, "
            "and both stay in the journal (the `history` tool lists every version with its content). "
            "`memoryId` is the `memoryId` that learn, recall and why return (any version's `key` "
            "names its memory too). The result's `key` is the new version's; its `memoryId` is "
            "unchanged. Repeats: updating to the content the memory already holds returns that version "
            "and writes nothing. Errors: " + _ARGUMENT_ERRORS + "; a memory with no live version "
            "(never learned, or forgotten: learn it again to start a new memory) is "
            "`memory_finding_unknown`; " + _FINDING_ERRORS + "; a memory that other writers changed "
            "under every attempt is `memory_finding_retired` (update it again). A refused update writes "
            "nothing."
        ),
        input_schema=_object(
            {
                "memoryId": {
                    **_KEY,
                    "description": "The memory to correct (its memoryId, or a version's key).",
                },
                "text": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": TEXT_MAX,
                    "description": f"The corrected finding (at most {TEXT_MAX} characters).",
                },
                "tags": {**_TAGS, "description": "The new version's tags."},
                "source": {
                    "type": "string",
                    "minLength": 1,
                    "description": "Where the correction came from.",
                },
                "metadata": {"type": "object", "description": "The new version's metadata."},
            },
            ["memoryId", "text"],
        ),
        output_schema=_LEARNED,
        run=_update,
        idempotent=True,
    ),
    ToolSpec(
        name="recall",
        title="List remembered findings",
        description=(
            "List remembered findings, newest first. Filter by `tags` (a finding must carry every "
            "tag), by `metadata` (equality on each given key), by `source`, by `before` (learned "
            "before a time) and by `scope`. Use it to look up what is known under a label; to search "
            "by words or a question, use the `why` tool; to fetch one finding by its key, the `get` "
            "tool. Each finding carries its `key` and `citation`. Repeats: it only reads, so the same "
            "call returns the same findings until something is learned or forgotten. Forgotten, "
            "superseded and expired findings are never listed (the `history` tool shows them). "
            "Errors: "
            + _ARGUMENT_ERRORS
            + "; a filter the memory refuses is `memory_argument_invalid`."
            + _BOUNDED
        ),
        input_schema=_object(
            {
                **_FILTERS,
                "source": {
                    "type": "string",
                    "minLength": 1,
                    "description": "Only findings from this source.",
                },
                "before": _BEFORE,
                "limit": _limit(RECALL_LIMIT, "findings"),
                "scope": _SCOPE,
            },
            [],
        ),
        output_schema={
            "type": "object",
            "properties": {"findings": {"type": "array", "items": _FINDING}, "truncated": _TRUNCATED},
            "required": ["findings"],
        },
        run=_recall,
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="why",
        title="Explain from memory",
        description=(
            "Find the remembered findings that best answer a subject or question, best match first. "
            "Words are matched in their different forms ('fee' finds 'fees') against each finding's "
            "text, tags and source; when the server has an embedder, findings are also found by "
            "meaning ('nuts' finds a peanut allergy) and `mode` picks `keyword`, `semantic` or "
            "`hybrid` (the default then; `keyword` without one). `tags`, `metadata` and `scope` narrow "
            "the search first, as in the `recall` tool. Each answer carries its `key`, its `citation` "
            "(the root run, stream, record and commit time it came from), a `score`, the `matched` "
            "words, `matchedBy` (`words`, `meaning` or `both`) and its `similarity`. Use it before "
            "answering from memory, and cite what it returns. Repeats: it only reads, so the same call "
            "returns the same answers until something is learned or forgotten. Forgotten, superseded "
            "and expired findings are never answers. Errors: " + _ARGUMENT_ERRORS + "; a filter the "
            "memory refuses is `memory_argument_invalid`; a `mode` by meaning on a server without an "
            "embedder is `memory_embedder_unavailable`." + _BOUNDED
        ),
        input_schema=_object(
            {
                "subject": {"type": "string", "minLength": 1, "description": "A question or a few words."},
                **_FILTERS,
                "limit": _limit(WHY_LIMIT, "answers"),
                "scope": _SCOPE,
                "mode": {
                    "type": "string",
                    "enum": ["hybrid", "keyword", "semantic"],
                    "description": "Match by words, by meaning, or both (default: hybrid when the server "
                    "has an embedder, else keyword).",
                },
            },
            ["subject"],
        ),
        output_schema={
            "type": "object",
            "properties": {"answers": {"type": "array", "items": _ANSWER}, "truncated": _TRUNCATED},
            "required": ["answers"],
        },
        run=_why,
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="get",
        title="One finding by its key",
        description=(
            "The live finding whose key is `key` (from the `learn`, `recall` or `why` tool), with its "
            "text, tags, source, metadata, scope and `citation`. Repeats: it only reads. Forgotten, "
            "superseded and expired findings are not live: for them, and for a key no finding has, the "
            "call fails with `memory_finding_unknown`, and the `history` tool tells what became of the "
            "finding. Errors: " + _ARGUMENT_ERRORS + " (a key is 32 lowercase hex digits)."
        ),
        input_schema=_object({"key": {**_KEY, "description": "The finding's key."}}, ["key"]),
        output_schema={"type": "object", "properties": {"finding": _FINDING}, "required": ["finding"]},
        run=_get,
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="forget",
        title="Forget a finding",
        description=(
            "Forget a finding by its key: it no longer appears in the `recall`, `why` and `get` tools "
            "or the resources. The forgetting is committed to the journal with your reason; the "
            "finding's own record stays there for audit (see the `history` tool). Repeats: forgetting "
            "a forgotten finding again returns the first forget and writes nothing; forgetting a "
            "superseded finding returns its retirement, with `by` naming the key that replaced it. "
            "Errors: " + _ARGUMENT_ERRORS + f" (a reason is at most {REASON_MAX} characters); a blank "
            "reason is `memory_argument_invalid`; a key no finding has is `memory_finding_unknown`."
        ),
        input_schema=_object(
            {
                "key": {**_KEY, "description": "The key of the finding to forget (from learn, recall, why)."},
                "reason": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": REASON_MAX,
                    "description": f"Why it is forgotten, for the record (at most {REASON_MAX} characters).",
                },
            },
            ["key", "reason"],
        ),
        output_schema={
            "type": "object",
            "properties": {
                "key": _KEY,
                "reason": {"type": "string"},
                "by": {"type": ["string", "null"], "description": "the key that superseded it, if one did"},
                "forgottenMs": {"type": "integer"},
                "citation": _CITATION,
            },
            "required": ["key", "reason", "citation"],
        },
        run=_forget,
        destructive=True,
        idempotent=True,
    ),
    ToolSpec(
        name="history",
        title="A memory's history",
        description=(
            "The life of a memory, oldest first, across every version of it (`key` may be its "
            "`memoryId` or any version's key): when each version was learned (with the `content` that "
            "was committed: text, source, tags, metadata), superseded (and by which key), forgotten "
            "(and why), expired or erased, and each update that lost its race (`lost`: the version it "
            "would replace was retired first, as its `reason` says; it never lived), each event with "
            "its version's `key`, the `flow` that made it and "
            "the `citation` of its journal record. It "
            "answers for forgotten and superseded findings too. Pages: a result holds at most "
            f"`limit` events (default {HISTORY_LIMIT}, at most {MAX_LIMIT}), from `offset` (default 0, "
            "counted from the oldest), and fewer when they would pass "
            f"{RESULT_MAX_BYTES // (1024 * 1024)} MiB as JSON (at least one is always given); "
            "`total` is how many events the memory has. When more events follow the page, "
            "`truncated` is true and `nextOffset` is the `offset` of the next page: call again with "
            "it until `truncated` is absent. Repeats: it only reads. Errors: "
            + _ARGUMENT_ERRORS
            + "; a key no finding has is `memory_finding_unknown`."
        ),
        input_schema=_object(
            {
                "key": {**_KEY, "description": "The finding's key."},
                "limit": _limit(HISTORY_LIMIT, "events"),
                "offset": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "Skip this many of the oldest events (default 0): a result's "
                    "`nextOffset`, for the next page.",
                },
            },
            ["key"],
        ),
        output_schema={
            "type": "object",
            "properties": {
                "key": _KEY,
                "events": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "kind": {"enum": list(HISTORY_KINDS)},
                            "key": _KEY,
                            "atMs": {"type": "integer"},
                            "citation": _CITATION,
                            "reason": {"type": ["string", "null"]},
                            "by": {"type": ["string", "null"]},
                            "flow": {"type": ["string", "null"]},
                            "content": {"type": ["object", "null"]},
                        },
                        "required": ["kind", "key", "atMs", "citation"],
                    },
                },
                "total": {"type": "integer", "description": "how many events the memory has"},
                "truncated": {
                    "type": "boolean",
                    "description": "Present (true) when more events follow this page: call again "
                    "with `offset` set to `nextOffset`.",
                },
                "nextOffset": {
                    "type": "integer",
                    "description": "Present with `truncated`: the `offset` of the next page.",
                },
            },
            "required": ["key", "events", "total"],
        },
        run=_history,
        read_only=True,
        idempotent=True,
    ),
)

_TWO_STEPS = (
    "Two steps, so that nothing goes by accident: call it first with `dry_run: true`, which writes "
    "nothing and returns the `count`, the {ids} (sorted, every one) and `confirm` (16 hex digits: a "
    "digest of the scope, the filter and every one it lists); then call it again with the same scope "
    "and filter, your reason and that `confirm`. It acts only when the filter still matches exactly "
    "what the dry run listed. A filter matching more than " + str(LISTED_MAX) + " is refused, dry "
    "run or not, so that nothing goes unlisted: narrow it. It "
    "reaches one scope: `scope`, else the server's --scope (a server started without one needs "
    "`scope`); `tags` (every one), `metadata` (equality on each key), `source` and `before` narrow "
    "it, and `scope` alone reaches {whole}. "
)
_CONFIRM_ERRORS = (
    "a call with neither `dry_run: true` nor `confirm`, a `confirm` that is not the confirmation of "
    "what the filter matches now (the matches changed, or it was made for another scope or filter: "
    "nothing is written; dry-run again), and a missing `scope` on a server without --scope are "
    "`mcp_arguments_invalid` too"
)
_LEASE_HELD = (
    "a record of the memory in a root run another process still runs (a flow, a session of another "
    "server) is `journal_lease_held`: the memory is forgotten, its erase recorded and its copies "
    "outside the journal removed, but that record keeps its content until the run ends; erase it "
    "again then (the message names the run)"
)

TOOLS: tuple[ToolSpec, ...] = (
    *_READ_AND_WRITE,
    ToolSpec(
        name="forget_where",
        title="Forget what a filter matches",
        description=(
            "Forget every live finding of one scope that a filter matches, with one journal record "
            "that names the filter, your reason and every key: they leave the `recall`, `why` and "
            "`get` tools and the resources at once; their own records stay in the journal for audit "
            "(see the `history` tool). "
            + _TWO_STEPS.format(ids="`keys`", whole="every live finding of the scope")
            + "The result names the `citation` of the record and the `keys` it forgot: only keys the "
            "dry run listed (a finding another client learned after the check of `confirm` stays; one "
            "it forgot meanwhile is not named). Repeats: forgotten findings are not matched again, "
            "so the same call again is refused for its `confirm` (a dry run then lists none). Errors: "
            + _ARGUMENT_ERRORS
            + f" (a reason is at most {REASON_MAX} characters); "
            + _CONFIRM_ERRORS
            + f"; a filter the memory refuses, one matching more than {LISTED_MAX} findings, and a "
            "blank reason are `memory_argument_invalid`; a `scope` no finding can have is "
            "`memory_argument_invalid` or `journal_name_invalid`."
        ),
        input_schema=_guarded("findings", "they are forgotten"),
        output_schema=_plan_output(
            "keys",
            "findings",
            {
                "filter": {"type": "object", "description": "the filter as recorded"},
                "forgottenMs": {"type": "integer"},
                "citation": _CITATION,
            },
        ),
        run=_forget_where,
        destructive=True,
    ),
    ToolSpec(
        name="erase",
        title="Erase a memory for good",
        description=(
            "Erase a memory for good, every version of it (`key` may be its `memoryId` or any "
            "version's key), live, forgotten or superseded. Where the `forget` tool only takes a "
            "finding out of reads, erase also removes its content (text, tags, source, metadata) from "
            "the journal, each of its records rewritten as a tombstone, and from every copy the store "
            "keeps (the history DB and its index, files, vectors). It cannot be undone. What stays, "
            "for audit, is one `memory-erase` record: the memory id, its keys, your `reason`, the "
            "flow `mcp`, the time and a digest of each erased record, in a root run of flow `mcp` "
            "begun for the call and ended `done` (the result's `citation`); the `history` tool ends "
            "the memory's events with `erased`. The root runs of this server's sessions that hold a "
            "record of the memory are ended `done` first (the journal rewrites no record of a running "
            "run; a session begins a new one at its next write). Repeats: erasing an erased memory "
            "writes no second record (`citation` is null) and finishes anything a failure left. "
            "Errors: " + _ARGUMENT_ERRORS + f" (a reason is at most {REASON_MAX} characters); a blank "
            "reason is `memory_argument_invalid`; a key no finding has is `memory_finding_unknown`; "
            "a memory that kept gaining versions in new scopes while it was erased is "
            "`memory_finding_retired` (erase it again); " + _LEASE_HELD + "."
        ),
        input_schema=_object(
            {
                "key": {**_KEY, "description": "The memory to erase: its memoryId, or any version's key."},
                "reason": _reason("it is erased"),
            },
            ["key", "reason"],
        ),
        output_schema=_ERASED,
        run=_erase,
        destructive=True,
        idempotent=True,
    ),
    ToolSpec(
        name="erase_where",
        title="Erase what a filter matches, for good",
        description=(
            "Erase for good every memory with a record in one scope that a filter matches, "
            "forgotten and superseded versions included (everything about a user, whatever became of "
            "it): each as the `erase` tool erases one, every version of it (in any scope), with an "
            "erase record of its own naming your reason. "
            + _TWO_STEPS.format(ids="`memoryIds`", whole="every memory with a record in it")
            + "The filter is matched against every record the journal still holds of a finding. "
            f"At most {ERASE_MANY_MAX} memories a call. A failure stops it: the memories before it "
            "are erased, the rest not; a dry run then lists what is left. Repeats: erased memories "
            "are not matched again, so the same call again is refused for its `confirm` (a dry run "
            "then lists none). Errors: " + _ARGUMENT_ERRORS + f" (a reason is at most {REASON_MAX} "
            "characters); " + _CONFIRM_ERRORS + "; a filter the memory refuses, one matching more "
            f"than {ERASE_MANY_MAX} memories, and a blank reason are `memory_argument_invalid`; a "
            "`scope` no finding can have is `memory_argument_invalid` or `journal_name_invalid`; "
            + _LEASE_HELD
            + "; `memory_finding_retired` as for the `erase` tool."
        ),
        input_schema=_guarded("memories", "they are erased"),
        output_schema=_plan_output(
            "memoryIds",
            "memories",
            {"rewritten": {"type": "integer", "description": "journal records rewritten as tombstones"}},
        ),
        run=_erase_where,
        destructive=True,
    ),
)

BY_NAME: dict[str, ToolSpec] = {t.name: t for t in TOOLS}

_COMMAND = re.compile(r"(?:\brun )?`flows ([a-z]+)((?: [^`]*)?)`")


def name_tools(message: str) -> str:
    """``message`` as a tool's client should read it: a ``flows`` command that has a tool of the
    same name becomes that tool ("`flows history KEY`" → "the `history` tool"); any other (a
    maintenance command such as ``flows sync``) is said to be run on the server's machine."""

    def replace(m: re.Match[str]) -> str:
        command = m.group(1)
        if command in BY_NAME:
            return f"the `{command}` tool"
        return f"{m.group(0)} on the server's machine"

    return _COMMAND.sub(replace, message)


async def call_tool(memory: Memory, name: str, arguments: object) -> dict[str, Any]:
    """Run tool ``name`` with ``arguments`` against ``memory``; its structured result.

    Raises:
        McpToolUnknown: no tool has that name.
        McpArgumentsInvalid: the arguments break the tool's input schema.
        FlowsMemoryError, JournalError: what the memory raised, unchanged.
    """
    spec = BY_NAME.get(name)
    if spec is None:
        raise McpToolUnknown(f"no tool named {name!r}; this server has {', '.join(BY_NAME)}")
    return await spec.run(memory, spec.check(arguments))

"""The tools over both transports, with the SDK's own client: schemas, results that cite the journal,
errors that carry our codes, the session's root run, and the resources."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import anyio
import orjson
import pytest
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, TextResourceContents

from flows.mcp._tools import TEXT_MAX
from journal import RunState
from tests.mcp.conftest import Transport, open_transport
from tests.mcp.harness import (
    CALL_TIMEOUT_S,
    call,
    call_error,
    journal_of,
    learn_records,
    mcp_runs,
    run,
    stdio_session,
)

TOOLS = {"learn", "update", "recall", "why", "get", "forget", "history", "forget_where", "erase"} | {
    "erase_where"
}


def test_the_server_lists_its_tools_each_with_a_schema_and_a_description(transport: Transport) -> None:
    async def main() -> Any:
        async with transport.connect() as session:
            with anyio.fail_after(CALL_TIMEOUT_S):
                return (await session.list_tools()).tools

    tools = {t.name: t for t in run(main)}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.description is not None and len(tool.description) > 80
        assert tool.input_schema["type"] == "object"
        assert tool.input_schema["additionalProperties"] is False
        for prop in tool.input_schema["properties"].values():
            assert prop.get("description"), (tool.name, prop)
        assert tool.output_schema is not None
    assert tools["learn"].input_schema["required"] == ["text"]
    assert set(tools["learn"].input_schema["properties"]) == {
        "text",
        "tags",
        "source",
        "metadata",
        "supersedes",
        "scope",
    }
    assert set(tools["recall"].input_schema["properties"]) == {
        "tags",
        "metadata",
        "source",
        "before",
        "limit",
        "scope",
    }
    assert set(tools["why"].input_schema["properties"]) == {
        "subject",
        "tags",
        "metadata",
        "limit",
        "scope",
        "mode",
    }
    assert tools["get"].input_schema["required"] == ["key"]
    assert set(tools["forget"].input_schema["required"]) == {"key", "reason"}
    assert tools["history"].input_schema["required"] == ["key"]
    assert tools["recall"].annotations is not None and tools["recall"].annotations.read_only_hint is True
    assert tools["forget"].annotations is not None and tools["forget"].annotations.destructive_hint is True
    for name in ("forget_where", "erase", "erase_where"):
        annotations = tools[name].annotations
        assert annotations is not None and annotations.destructive_hint is True, name
    for name in ("forget_where", "erase_where"):
        assert tools[name].input_schema["required"] == ["reason"]
        assert {"scope", "tags", "metadata", "source", "before", "dry_run", "confirm"} <= set(
            tools[name].input_schema["properties"]
        )
    assert set(tools["erase"].input_schema["required"]) == {"key", "reason"}


def test_learned_findings_are_recalled_and_explained_with_the_key_and_citation_of_their_record(
    transport: Transport,
) -> None:
    async def main() -> tuple[Any, ...]:
        async with transport.connect() as session:
            learned = await call(
                session, "learn", text="rain follows a falling barometer", tags=["weather"], scope="s"
            )
            other = await call(
                session, "learn", text="fees are charged monthly", tags=["bill"], metadata={"d": 1}, scope="s"
            )
            again = await call(
                session, "learn", text="rain follows a falling barometer", tags=["weather"], scope="s"
            )
            recalled = await call(session, "recall", tags=["weather"])
            answers = await call(session, "why", subject="when are fees charged")
            return learned, other, again, recalled, answers

    learned, other, again, recalled, answers = run(main)
    assert again["key"] == learned["key"]  # the same finding, the same key, no second record
    [root] = mcp_runs(transport.db)
    assert root.scope == "s" and root.state is RunState.DONE  # the session ended with the client
    records = {r.key: r for r in learn_records(transport.db, root.run_id)}
    assert set(records) == {learned["key"], other["key"]}
    for result in (learned, other):
        rec = records[result["key"]]
        assert result["citation"] == {
            "runId": root.run_id,
            "stream": "memory-learn",
            "id": rec.id,
            "committedMs": rec.payload["learnedMs"],
        }
    [found] = recalled["findings"]
    assert found["key"] == learned["key"]
    assert found["text"] == "rain follows a falling barometer"
    assert found["citation"] == learned["citation"]
    [answer] = answers["answers"]
    assert answer["key"] == other["key"] and answer["citation"] == other["citation"]
    assert answer["metadata"] == {"d": 1} and found["metadata"] == {}
    assert "fees" in answer["matched"]


def test_each_session_learns_under_a_root_run_of_its_own_finished_when_it_ends(transport: Transport) -> None:
    async def main() -> list[str]:
        keys = []
        for n in range(2):
            async with transport.connect() as session:
                keys.append((await call(session, "learn", text=f"session {n} was here"))["key"])
                assert [r.state for r in mcp_runs(transport.db)][n] is RunState.RUNNING
        return keys

    keys = run(main)
    roots = mcp_runs(transport.db)
    assert [r.state for r in roots] == [RunState.DONE, RunState.DONE]
    assert [r.flow for r in roots] == ["mcp", "mcp"]
    assert [r.scope for r in roots] == ["mcp", "mcp"]  # the default scope without --scope
    assert [[rec.key for rec in learn_records(transport.db, r.run_id)] for r in roots] == [[k] for k in keys]


def test_a_session_that_only_reads_begins_no_root_run(transport: Transport) -> None:
    async def main() -> None:
        async with transport.connect() as session:
            assert (await call(session, "recall"))["findings"] == []
            assert (await call(session, "why", subject="anything"))["answers"] == []

    run(main)
    assert mcp_runs(transport.db) == []


BAD_ARGUMENTS: list[tuple[str, dict[str, Any], str | None]] = [
    ("learn", {}, None),
    ("learn", {"text": ""}, "text"),
    ("learn", {"text": 7}, "text"),
    ("learn", {"text": "t", "tags": "weather"}, "tags"),
    ("learn", {"text": "t", "tags": [""]}, "tags.0"),
    ("learn", {"text": "t", "supersedes": "not-a-key"}, "supersedes"),
    ("learn", {"text": "t", "colour": "red"}, "colour"),
    ("recall", {"limit": 0}, "limit"),
    ("recall", {"limit": "ten"}, "limit"),
    ("recall", {"metadata": ["a"]}, "metadata"),
    ("why", {}, None),
    ("why", {"subject": "x", "limit": 10_000}, "limit"),
    ("forget", {"key": "0" * 32}, None),
    ("forget", {"key": "ABC", "reason": "r"}, "key"),
    ("history", {"key": None}, "key"),
    ("learn", {"text": "y" * (TEXT_MAX + 1)}, "text"),
    ("recall", {"before": "last tuesday"}, "before"),
    ("recall", {"before": -1}, "before"),
    ("recall", {"source": ""}, "source"),
    ("why", {"subject": "x", "tags": "weather"}, "tags"),
    ("why", {"subject": "x", "metadata": [1]}, "metadata"),
    ("get", {"key": "ABC"}, "key"),
    ("get", {}, None),
]


def test_bad_arguments_are_tool_errors_with_our_code_and_the_server_keeps_serving(
    transport: Transport,
) -> None:
    async def main() -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
        async with transport.connect() as session:
            errors = [await call_error(session, tool, **args) for tool, args, _ in BAD_ARGUMENTS]
            unknown = await call_error(session, "remember", text="x")
            # what only the memory layer refuses keeps the memory's code and names the bad part
            memory_errors = [
                await call_error(session, "learn", text="   "),
                await call_error(session, "learn", text="t", metadata={"": 1}),
                await call_error(session, "learn", text="t", metadata={"big": "x" * 20_000}),
                await call_error(session, "learn", text="t", scope="s" * 300),
            ]
            after = await call(session, "learn", text="still serving")
            return errors, unknown, memory_errors, after

    errors, unknown, memory_errors, after = run(main)
    for (tool, _, argument), error in zip(BAD_ARGUMENTS, errors, strict=True):
        assert error["code"] == "mcp_arguments_invalid", error
        assert error["tool"] == tool
        assert error["message"].startswith(f"{tool}: ")
        assert error.get("argument") == argument, error
    assert unknown["code"] == "mcp_tool_unknown"
    assert "learn, update, recall, why, get, forget, history" in unknown["message"]
    blank, bad_key, too_big, long_scope = memory_errors
    assert blank["code"] == "memory_finding_invalid" and "text" in blank["message"]
    assert bad_key["code"] == "memory_finding_invalid" and bad_key["field"] == "metadata['']"
    assert too_big["code"] == "memory_finding_invalid" and "16384" in too_big["message"]
    assert long_scope["code"] == "memory_argument_invalid"
    assert len(after["key"]) == 32
    assert len(mcp_runs(transport.db)) == 1  # the refused calls began nothing


def test_a_server_with_a_scope_learns_there_and_reads_only_there(tmp_path: Any) -> None:
    async def main(t: Transport) -> tuple[Any, ...]:
        async with t.connect() as session:
            here = await call(session, "learn", text="tides follow the moon")
            elsewhere = await call(session, "learn", text="tides follow the moon", scope="other")
            mine = await call(session, "recall")
            theirs = await call(session, "recall", scope="other")
            return here, elsewhere, mine, theirs

    with open_transport("stdio", tmp_path / "history.db", "--scope", "sea") as t:
        here, elsewhere, mine, theirs = run(lambda: main(t))
    assert here["scope"] == "sea" and elsewhere["scope"] == "other"
    assert here["key"] != elsewhere["key"]  # a finding's key covers its scope
    assert [f["key"] for f in mine["findings"]] == [here["key"]]
    assert [f["key"] for f in theirs["findings"]] == [elsewhere["key"]]
    assert sorted(r.scope for r in mcp_runs(t.db)) == ["other", "sea"]  # a root run per scope written


def test_resources_list_each_scope_and_read_its_recent_findings(transport: Transport) -> None:
    async def main() -> tuple[Any, ...]:
        async with transport.connect() as session:
            a = await call(session, "learn", text="the build needs python 3.11", scope="proj a")
            b = await call(session, "learn", text="deploys happen on tuesdays", scope="ops")
            with anyio.fail_after(CALL_TIMEOUT_S):
                listed = (await session.list_resources()).resources
                templates = (await session.list_resource_templates()).resource_templates
                read = await session.read_resource(f"flows-memory://scope/{quote('proj a', safe='')}")
                with_error = None
                try:
                    await session.read_resource("flows-memory://elsewhere/x")
                except Exception as exc:
                    with_error = exc
            return a, b, listed, templates, read, with_error

    a, b, listed, templates, read, with_error = run(main)
    assert sorted(str(r.uri) for r in listed) == ["flows-memory://scope/ops", "flows-memory://scope/proj%20a"]
    assert all(r.mime_type == "application/json" for r in listed)
    assert [t.uri_template for t in templates] == ["flows-memory://scope/{scope}"]
    [content] = read.contents
    assert isinstance(content, TextResourceContents)
    body = orjson.loads(content.text)
    assert body["scope"] == "proj a"
    assert [(f["key"], f["citation"]) for f in body["findings"]] == [(a["key"], a["citation"])]
    assert b["key"] not in {f["key"] for f in body["findings"]}
    assert with_error is not None and "mcp_resource_unknown" in repr(getattr(with_error, "error", with_error))


def test_supersede_forget_and_history_cite_their_records(transport: Transport) -> None:
    async def main() -> dict[str, Any]:
        async with transport.connect() as session:
            out: dict[str, Any] = {}
            out["old"] = await call(session, "learn", text="the fee is 5 EUR", tags=["fee"])
            out["new"] = await call(
                session, "learn", text="the fee is 6 EUR", tags=["fee"], supersedes=out["old"]["key"]
            )
            out["recall_after_supersede"] = await call(session, "recall", tags=["fee"])
            out["why_after_supersede"] = await call(session, "why", subject="what is the fee")
            out["forgot"] = await call(session, "forget", key=out["new"]["key"], reason="the user asked")
            out["forgot_again"] = await call(session, "forget", key=out["new"]["key"], reason="twice")
            out["recall_after_forget"] = await call(session, "recall", tags=["fee"])
            out["history_old"] = await call(session, "history", key=out["old"]["key"])
            out["history_new"] = await call(session, "history", key=out["new"]["key"])
            unknown = "0" * 32
            out["forget_unknown"] = await call_error(session, "forget", key=unknown, reason="r")
            out["history_unknown"] = await call_error(session, "history", key=unknown)
            out["supersede_unknown"] = await call_error(session, "learn", text="x", supersedes=unknown)
        async with transport.connect() as session:  # another session, so another root run
            again = {"text": "the fee is 6 EUR", "tags": ["fee"]}
            out["relearn_forgotten"] = await call(session, "learn", **again)
            out["recall_after_relearn"] = await call(session, "recall", tags=["fee"])
        return out

    out = run(main)
    old, new = out["old"]["key"], out["new"]["key"]
    assert out["new"]["supersedes"] == old
    assert [f["key"] for f in out["recall_after_supersede"]["findings"]] == [new]
    assert [a["key"] for a in out["why_after_supersede"]["answers"]] == [new]
    forgot = out["forgot"]
    assert (forgot["key"], forgot["reason"]) == (new, "the user asked")
    assert out["forgot_again"] == forgot  # forgetting twice returns the first, writes nothing
    assert out["recall_after_forget"]["findings"] == []

    root, second = mcp_runs(transport.db)  # the second session's learn began a root run of its own
    assert root.state is second.state is RunState.DONE
    backend = journal_of(transport.db)
    try:
        streams = {s: {r.id: r for r in backend.read(root.run_id, s)} for s in backend.streams(root.run_id)}
    finally:
        backend.close()

    def record_of(citation: dict[str, Any]) -> Any:
        assert citation["runId"] == root.run_id
        return streams[citation["stream"]][citation["id"]]

    assert record_of(forgot["citation"]).ts_ms <= forgot["forgottenMs"] + 1000
    assert forgot["citation"]["committedMs"] == forgot["forgottenMs"]
    # either key answers with the whole memory: every version, oldest first
    assert out["history_old"] == {**out["history_new"], "key": out["old"]["key"]}
    kinds = [(e["kind"], e["key"], e.get("by"), e.get("reason")) for e in out["history_new"]["events"]]
    assert kinds == [
        ("learned", out["old"]["key"], None, None),
        ("learned", new, None, None),
        ("superseded", out["old"]["key"], new, None),
        ("forgotten", new, None, "the user asked"),
    ]
    assert out["history_new"]["events"][1]["content"]["text"] == "the fee is 6 EUR"
    assert {e["memoryId"] for e in out["history_new"]["events"]} == {out["old"]["key"]}
    assert [e["flow"] for e in out["history_new"]["events"]] == ["mcp"] * 4
    for event in [*out["history_old"]["events"], *out["history_new"]["events"]]:
        record_of(event["citation"])  # every event cites a record that is in the journal
    assert out["history_new"]["events"][1]["citation"] == {
        k: v for k, v in out["new"]["citation"].items() if k != "committedMs"
    }
    for error in (out["forget_unknown"], out["history_unknown"], out["supersede_unknown"]):
        assert error["code"] == "memory_finding_unknown", error
    relearned = out["relearn_forgotten"]["key"]
    assert relearned not in (out["old"]["key"], new)  # a new memory: the forgotten key stays forgotten
    assert [f["key"] for f in out["recall_after_relearn"]["findings"]] == [relearned]


def test_recall_filters_by_every_tag_and_by_metadata_and_scope(transport: Transport) -> None:
    async def main() -> tuple[Any, ...]:
        async with transport.connect() as session:
            g, s = {"tier": "gold"}, {"tier": "silver"}
            gold = await call(session, "learn", text="gold plan", tags=["plan", "paid"], metadata=g)
            silver = await call(session, "learn", text="silver plan", tags=["plan"], metadata=s)
            other = await call(session, "learn", text="gold elsewhere", metadata={"tier": "gold"}, scope="b")
            return (
                gold,
                silver,
                other,
                await call(session, "recall", tags=["plan", "paid"]),
                await call(session, "recall", metadata={"tier": "gold"}),
                await call(session, "recall", metadata={"tier": "gold"}, scope="mcp"),
                await call(session, "recall", limit=1),
            )

    gold, silver, other, both_tags, gold_meta, gold_here, newest = run(main)
    assert [f["key"] for f in both_tags["findings"]] == [gold["key"]]
    assert sorted(f["key"] for f in gold_meta["findings"]) == sorted([gold["key"], other["key"]])
    assert [f["key"] for f in gold_here["findings"]] == [gold["key"]]
    assert [f["key"] for f in newest["findings"]] == [other["key"]]
    assert silver["key"] not in {f["key"] for f in gold_meta["findings"]}


def test_learning_again_is_one_finding_only_with_the_tags_in_the_same_order_as_the_description_says(
    transport: Transport,
) -> None:
    async def main() -> tuple[Any, ...]:
        async with transport.connect() as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            first = await call(session, "learn", text="tea at five", tags=["habit", "tea"])
            again = await call(session, "learn", text="tea at five", tags=["habit", "tea"])
            turned = await call(session, "learn", text="tea at five", tags=["tea", "habit"])
            return tools["learn"].description, first, again, turned

    described, first, again, turned = run(main)
    assert again["key"] == first["key"] and turned["key"] != first["key"]
    assert "tags (in the same order)" in described and "tags in another order make another" in described


def test_why_and_recall_take_the_clis_filters(transport: Transport) -> None:
    async def main() -> dict[str, Any]:
        async with transport.connect() as session:
            out: dict[str, Any] = {}
            out["gold"] = await call(
                session,
                "learn",
                text="gold fees rise",
                tags=["fee", "gold"],
                metadata={"tier": 1},
                source="ops",
            )
            out["silver"] = await call(
                session, "learn", text="silver fees fall", tags=["fee"], metadata={"tier": 2}, source="web"
            )
            out["why_tag"] = await call(session, "why", subject="fees", tags=["gold"])
            out["why_meta"] = await call(session, "why", subject="fees", metadata={"tier": 2})
            out["why_both"] = await call(session, "why", subject="fees", tags=["fee"], metadata={"tier": 3})
            out["recall_source"] = await call(session, "recall", source="web")
            out["recall_before_now"] = await call(session, "recall", before=out["silver"]["learnedMs"] + 1)
            out["recall_before_gold"] = await call(session, "recall", before=out["gold"]["learnedMs"])
            out["recall_before_1999"] = await call(session, "recall", before="1999-01-01")
            out["recall_before_iso"] = await call(session, "recall", before="2999-01-01T00:00:00+00:00")
            return out

    out = run(main)
    gold, silver = out["gold"]["key"], out["silver"]["key"]
    assert [a["key"] for a in out["why_tag"]["answers"]] == [gold]
    assert [a["key"] for a in out["why_meta"]["answers"]] == [silver]
    assert out["why_both"]["answers"] == []
    assert [f["key"] for f in out["recall_source"]["findings"]] == [silver]
    assert [f["key"] for f in out["recall_before_now"]["findings"]] == [silver, gold]
    assert out["recall_before_gold"]["findings"] == []  # strictly before
    assert out["recall_before_1999"]["findings"] == []
    assert [f["key"] for f in out["recall_before_iso"]["findings"]] == [silver, gold]


def test_get_returns_one_live_finding_and_sends_to_the_history_tool_for_a_retired_one(
    transport: Transport,
) -> None:
    async def main() -> dict[str, Any]:
        async with transport.connect() as session:
            out: dict[str, Any] = {}
            out["learned"] = await call(session, "learn", text="the office opens at nine", tags=["office"])
            out["got"] = await call(session, "get", key=out["learned"]["key"])
            await call(session, "forget", key=out["learned"]["key"], reason="it moved")
            out["forgotten"] = await call_error(session, "get", key=out["learned"]["key"])
            out["unknown"] = await call_error(session, "get", key="0" * 32)
        async with transport.connect() as session:
            out["relearned"] = await call(session, "learn", text="the office opens at nine", tags=["office"])
            out["old_after_relearn"] = await call_error(session, "get", key=out["learned"]["key"])
        return out

    out = run(main)
    found = out["got"]["finding"]
    assert found["key"] == out["learned"]["key"] and found["text"] == "the office opens at nine"
    assert found["tags"] == ["office"] and found["citation"] == out["learned"]["citation"]
    for error in (out["forgotten"], out["unknown"]):
        assert error["code"] == "memory_finding_unknown"
        assert "the `history` tool" in error["message"]
        assert "flows history" not in error["message"]  # the tools a client has, never the CLI's
    # learning it again is a new memory; the forgotten key stays forgotten
    assert out["relearned"]["key"] != out["learned"]["key"]
    assert out["old_after_relearn"]["code"] == "memory_finding_unknown"


def test_every_description_says_what_repeats_retired_findings_and_errors_do() -> None:
    from flows.mcp._tools import TOOLS as SPECS

    for tool in SPECS:
        text = tool.description
        assert "Repeats:" in text and "Errors:" in text, tool.name
        assert "forgotten" in text.lower() or "forget" in text.lower(), tool.name
        assert "mcp_arguments_invalid" in text, tool.name
        assert "`flows " not in text, tool.name


def test_messages_that_name_a_command_name_the_tool_or_the_servers_machine() -> None:
    from flows.mcp._tools import name_tools

    assert name_tools("learned; `flows history` shows why") == "learned; the `history` tool shows why"
    assert name_tools("a key (as `flows recall` shows)") == "a key (as the `recall` tool shows)"
    assert name_tools("run `flows check --repair` to fix it") == (
        "run `flows check --repair` on the server's machine to fix it"
    )


def test_the_schemas_limits_sit_within_the_memorys_and_the_requests() -> None:
    import memory
    from flows.mcp._tools import BY_NAME
    from flows.mcp._wire import MAX_REQUEST_BYTES

    text = BY_NAME["learn"].input_schema["properties"]["text"]
    assert text["maxLength"] == TEXT_MAX
    assert 4 * TEXT_MAX <= memory.TEXT_MAX_BYTES  # any text the schema takes, the memory takes
    # the largest finding, every character escaped at its longest (12 bytes for one outside the BMP,
    # 6 for any other), still fits in one request
    tags = memory.TAGS_MAX * memory.TAG_MAX_BYTES
    assert 12 * TEXT_MAX + 6 * (memory.METADATA_MAX_BYTES + tags) < MAX_REQUEST_BYTES
    for tool in ("learn", "recall", "why"):
        assert BY_NAME[tool].input_schema["properties"]["tags"]["maxItems"] == memory.TAGS_MAX


BAD_URIS = {
    "%ff": "not UTF-8",  # a byte that begins no UTF-8 character
    "%e2%82": "not UTF-8",  # a character cut short
    "%ED%A0%80": "not UTF-8",  # a surrogate, encoded
    "%zz": "`%` and two hex digits",
    "%": "`%` and two hex digits",
    "ab%4": "`%` and two hex digits",
    "%00": "NUL",
    "a%0Ab": "control character",
}


def test_a_resource_uri_with_bad_percent_encoding_is_refused_naming_what_is_wrong(
    transport: Transport,
) -> None:
    """Escapes are decoded strictly: before, `%ff` read as scope U+FFFD (and `%zz` as itself), and
    was answered as if it named a scope."""
    long_bad = "%ff" * 50_000

    async def main() -> tuple[Any, ...]:
        async with transport.connect() as session:
            learned = await call(session, "learn", text="a café scope", scope="café")
            refused: dict[str, Any] = {}
            with anyio.fail_after(CALL_TIMEOUT_S):
                for encoded in [*BAD_URIS, long_bad]:
                    with pytest.raises(MCPError) as caught:
                        await session.read_resource(f"flows-memory://scope/{encoded}")
                    refused[encoded] = caught.value.error
                good = await session.read_resource(f"flows-memory://scope/{quote('café', safe='')}")
            return learned, refused, good

    learned, refused, good = run(main)
    for encoded, what in BAD_URIS.items():
        error = refused[encoded]
        assert error.code == INVALID_PARAMS, (encoded, error)
        assert error.data["code"] == "mcp_resource_unknown"
        assert what in error.message, (encoded, error.message)
        assert repr(f"flows-memory://scope/{encoded}") in error.message  # the URI, escaped
    long_error = refused[long_bad]
    assert long_error.code == INVALID_PARAMS and "not UTF-8" in long_error.message
    assert len(long_error.message) < 500 and "150,021 characters" in long_error.message  # echoed cut short
    [content] = good.contents  # a well-encoded URI still reads its scope
    assert isinstance(content, TextResourceContents)
    assert [f["key"] for f in orjson.loads(content.text)["findings"]] == [learned["key"]]


def test_every_error_a_tool_returns_is_named_in_its_description(tmp_path: Any) -> None:
    # A model reads the description to know what can go wrong: each code a hostile call meets is there.
    from flows.mcp._tools import BY_NAME

    async def main() -> list[tuple[str, dict[str, Any]]]:
        async with stdio_session(tmp_path / "history.db") as session:
            old = (await call(session, "learn", text="the first version"))["key"]
            await call(session, "forget", key=old, reason="wrong")
            live = (await call(session, "learn", text="a live one"))["key"]
            calls: list[tuple[str, dict[str, Any]]] = [
                ("learn", {"text": "t", "supersedes": old}),  # retired
                ("learn", {"text": "t", "supersedes": "0" * 32}),
                ("learn", {"text": "t", "source": "s" * 5000}),
                ("learn", {"text": "t", "tags": ["t" * 300]}),
                ("learn", {"text": "t", "metadata": {"k": 2**64}}),
                ("learn", {"text": "t", "scope": " "}),
                ("learn", {"text": "t", "scope": "a\nb"}),
                ("update", {"memoryId": old, "text": "t"}),
                ("update", {"memoryId": live, "text": "t", "source": "s" * 5000}),
                ("forget", {"key": live, "reason": "r" * 1025}),
                ("forget", {"key": live, "reason": "   "}),
                ("forget", {"key": "0" * 32, "reason": "r"}),
                ("recall", {"before": "not a time"}),
                ("recall", {"metadata": {"": 1}}),
                ("recall", {"before": 2**63}),
                ("why", {"subject": "x", "mode": "semantic"}),
                ("get", {"key": old}),
                ("history", {"key": "0" * 32}),
                ("forget_where", {"tags": ["t"], "reason": "r"}),  # no scope on this server
                ("forget_where", {"scope": "s", "reason": "r"}),  # no confirm
                ("forget_where", {"scope": "s", "reason": "r", "confirm": "0" * 16}),
                ("forget_where", {"scope": "s", "reason": " ", "dry_run": True}),
                ("forget_where", {"scope": "s", "before": 2**63, "reason": "r", "dry_run": True}),
                ("forget_where", {"scope": "a\nb", "reason": "r", "dry_run": True}),
                ("forget_where", {"scope": "s", "reason": "r", "confirm": "X"}),
                ("erase", {"key": live, "reason": "r" * 1025}),
                ("erase", {"key": live, "reason": "  "}),
                ("erase", {"key": "0" * 32, "reason": "r"}),
                ("erase_where", {"tags": ["t"], "reason": "r"}),
                ("erase_where", {"scope": "s", "reason": "r", "confirm": "0" * 16}),
                ("erase_where", {"scope": "s", "reason": " ", "dry_run": True}),
                ("erase_where", {"scope": "s", "metadata": {"": 1}, "reason": "r", "dry_run": True}),
                ("erase_where", {"scope": "a\tb", "reason": "r", "dry_run": True}),
            ]
            return [(tool, await call_error(session, tool, **args)) for tool, args in calls]

    for tool, error in run(main):
        assert f"`{error['code']}`" in BY_NAME[tool].description, (tool, error)

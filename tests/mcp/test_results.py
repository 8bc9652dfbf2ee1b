"""A result's size is bounded, whatever the store holds: the findings of `recall`, `why` and a scope's
resource stop at ``RESULT_MAX_BYTES`` of JSON, and the result says so; `history` gives a memory's
events a page at a time, and says where the next page starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import orjson
from mcp.types import TextResourceContents

import memory
from flows.mcp._tools import HISTORY_LIMIT, MAX_LIMIT, RESULT_MAX_BYTES, TOOLS
from tests.mcp.conftest import Transport, open_transport
from tests.mcp.harness import CALL_TIMEOUT_S, call, call_error, run

# Each text escapes to six bytes a character in JSON (and again in the result's text copy): 600 KB a
# finding, so even a resource's 20 newest pass the bound.
FINDINGS = 30
TEXT = "\x01" * 100_000


def test_recall_why_and_a_resource_hold_at_most_the_bound_and_say_they_were_cut(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    with memory.MemoryStore(db) as store, store.session(scope="big", flow="seed") as session:
        for n in range(FINDINGS):
            session.learn({"text": f"ticket {n:03d} {TEXT}", "tags": ["big"]})
        session.learn({"text": "the small one", "tags": ["small"]})

    async def main(transport: Transport) -> tuple[Any, ...]:
        async with transport.connect() as client:
            recalled = await call(client, "recall", limit=500)
            answered = await call(client, "why", subject="ticket", limit=500)
            small = await call(client, "recall", tags=["small"])
            with anyio.fail_after(CALL_TIMEOUT_S):
                read = await client.read_resource("flows-memory://scope/big")
            return recalled, answered, small, read

    with open_transport("stdio", db) as transport:
        recalled, answered, small, read = run(lambda: main(transport))
    [content] = read.contents
    assert isinstance(content, TextResourceContents)
    resource = orjson.loads(content.text)
    one = len(orjson.dumps(recalled["findings"][0]))
    for result, items in ((recalled, "findings"), (answered, "answers"), (resource, "findings")):
        assert result["truncated"] is True
        assert 1 <= len(result[items]) < 20
        assert len(orjson.dumps(result[items])) <= RESULT_MAX_BYTES + one
    assert [f["text"] for f in small["findings"]] == ["the small one"] and "truncated" not in small


def test_history_gives_a_page_of_events_and_says_how_to_get_the_next(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    with memory.MemoryStore(db) as store, store.session(scope="long", flow="seed") as session:
        first = session.learn({"text": "version 0"})
        for n in range(1, HISTORY_LIMIT):  # each update is a learn and a supersede: past one page
            session.update(first.memory_id, {"text": f"version {n}"})
        big = session.learn({"text": f"big 0 {TEXT}"})
        for n in range(1, 20):  # 20 learned events, each with a text of 600 KB as JSON: past the bound
            session.update(big.memory_id, {"text": f"big {n} {TEXT}"})
        everything = [e.as_json() for e in store.history(first.key)]
        big_events = [e.as_json() for e in store.history(big.key)]
    assert len(everything) > HISTORY_LIMIT

    async def main(transport: Transport) -> tuple[Any, ...]:
        async with transport.connect() as client:
            default = await call(client, "history", key=first.key)
            pages = [await call(client, "history", key=first.key, limit=7)]
            while pages[-1].get("truncated"):
                after = pages[-1]["nextOffset"]
                pages.append(await call(client, "history", key=first.key, limit=7, offset=after))
            whole = await call(client, "history", key=first.key, limit=MAX_LIMIT)
            past = await call(client, "history", key=first.key, offset=len(everything))
            over = await call_error(client, "history", key=first.key, limit=MAX_LIMIT + 1)
            cut = await call(client, "history", key=big.key)
            return default, pages, whole, past, over, cut

    with open_transport("stdio", db) as transport:
        default, pages, whole, past, over, cut = run(lambda: main(transport))
    total = len(everything)
    # the default page is the oldest HISTORY_LIMIT events, and says more follow, and from where
    assert default["events"] == everything[:HISTORY_LIMIT]
    assert default["total"] == total
    assert default["truncated"] is True and default["nextOffset"] == HISTORY_LIMIT
    # following nextOffset gives every event once, in order; the last page says nothing follows
    assert [e for page in pages for e in page["events"]] == everything
    assert all(len(page["events"]) <= 7 and page["total"] == total for page in pages)
    assert "truncated" not in pages[-1] and "nextOffset" not in pages[-1]
    assert whole["events"] == everything and "truncated" not in whole
    assert past["events"] == [] and past["total"] == total and "truncated" not in past
    assert over["code"] == "mcp_arguments_invalid" and over["argument"] == "limit"
    # a page also ends at the bound on a result's size, and says where the next one starts
    assert 1 <= len(cut["events"]) < len(big_events) <= HISTORY_LIMIT
    assert cut["events"] == big_events[: len(cut["events"])]
    assert cut["truncated"] is True and cut["nextOffset"] == len(cut["events"])
    assert len(orjson.dumps(cut["events"])) <= RESULT_MAX_BYTES + len(orjson.dumps(cut["events"][0]))
    [spec] = [t for t in TOOLS if t.name == "history"]
    assert spec.input_schema["properties"]["limit"]["maximum"] == MAX_LIMIT
    assert f"default {HISTORY_LIMIT}" in spec.description and "`nextOffset`" in spec.description

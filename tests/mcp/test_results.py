"""A result's size is bounded, whatever the store holds: the findings of `recall`, `why` and a scope's
resource stop at ``RESULT_MAX_BYTES`` of JSON, and the result says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import orjson
from mcp.types import TextResourceContents

import memory
from flows.mcp._tools import RESULT_MAX_BYTES
from tests.mcp.conftest import Transport, open_transport
from tests.mcp.harness import CALL_TIMEOUT_S, call, run

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

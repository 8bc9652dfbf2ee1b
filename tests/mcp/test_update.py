"""The `update` tool: a correction keeps the memory's id, the old version leaves the reads, the
`history` tool lists both versions with their content, and an update of nothing is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.mcp.harness import call, call_error, run, stdio_session


def test_the_update_tool_keeps_one_identity(tmp_path: Path) -> None:
    db = tmp_path / "history.db"

    async def main() -> tuple[Any, ...]:
        async with stdio_session(db) as session:
            first = await call(session, "learn", text="the fee is 5 EUR", scope="billing")
            updated = await call(session, "update", memoryId=first["memoryId"], text="the fee is 6 EUR")
            same = await call(session, "update", memoryId=updated["key"], text="the fee is 6 EUR")
            recalled = await call(session, "recall", scope="billing")
            history = await call(session, "history", key=first["key"])
            unknown = await call_error(session, "update", memoryId="f" * 32, text="x")
        return first, updated, same, recalled, history, unknown

    first, updated, same, recalled, history, unknown = run(main)
    assert first["memoryId"] == first["key"]
    assert (updated["memoryId"], updated["supersedes"], updated["scope"]) == (
        first["key"],
        first["key"],
        "billing",
    )
    assert (same["key"], same["supersedes"]) == (updated["key"], None)
    (row,) = recalled["findings"]
    assert (row["memoryId"], row["key"], row["text"]) == (first["key"], updated["key"], "the fee is 6 EUR")
    texts = [e["content"]["text"] for e in history["events"] if e["content"]]
    assert texts == ["the fee is 5 EUR", "the fee is 6 EUR"]
    assert unknown["code"] == "memory_finding_unknown"

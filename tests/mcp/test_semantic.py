"""The `why` tool by meaning: a server started with an embedder answers a paraphrase, says how each
answer matched and cites it; a server without one refuses a mode by meaning with a code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.mcp.harness import call, call_error, run, stdio_session

ALLERGY = "The user is allergic to peanuts"


def test_the_why_tool_finds_by_meaning_with_an_embedder_and_refuses_without(tmp_path: Path) -> None:
    db = tmp_path / "history.db"

    async def main() -> tuple[Any, ...]:
        async with stdio_session(db, "--embedder", "default") as session:
            await call(session, "learn", text=ALLERGY, scope="u")
            await call(session, "learn", text="Deploys happen on Fridays", scope="u")
            by_meaning = await call(session, "why", subject="nuts")
            by_words = await call(session, "why", subject="nuts", mode="keyword")
        async with stdio_session(db) as session:
            refused = await call_error(session, "why", subject="nuts", mode="semantic")
            plain = await call(session, "why", subject="peanuts")
        return by_meaning, by_words, refused, plain

    by_meaning, by_words, refused, plain = run(main)
    (answer,) = by_meaning["answers"]
    assert (answer["text"], answer["matchedBy"]) == (ALLERGY, "meaning")
    assert answer["similarity"] > 0.1 and answer["citation"]["stream"] == "memory-learn"
    assert by_words["answers"] == []
    assert refused["code"] == "memory_embedder_unavailable"
    (word,) = plain["answers"]
    assert (word["matchedBy"], word["similarity"], word["matched"]) == ("words", None, ["peanuts"])

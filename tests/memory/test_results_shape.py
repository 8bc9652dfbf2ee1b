"""recall and why answer in one shape: the same top-level fields in Python and in JSON."""

from __future__ import annotations

from pathlib import Path

import memory


def test_a_why_answer_reads_like_the_recalled_finding_it_holds(tmp_path: Path) -> None:
    with memory.MemoryStore(tmp_path / "h.db") as store, store.session(scope="s") as s:
        s.learn({"text": "the swap fee is 0.3 percent", "tags": ["fees"], "metadata": {"pool": "a"}})
        (recalled,) = store.recall(scope="s")
        (answer,) = store.why("swap fee", scope="s")
    for name in (
        "id",
        "key",
        "text",
        "source",
        "tags",
        "scope",
        "flow",
        "learned_ms",
        "citation",
        "metadata",
        "expires_ms",
        "revision",
        "synced",
    ):
        assert getattr(answer, name) == getattr(recalled, name), name
    assert answer.finding == recalled  # the older spelling still reads
    shown, listed = answer.as_json(), recalled.as_json()
    assert {
        k: v for k, v in shown.items() if k not in ("score", "matched", "matchedBy", "similarity")
    } == listed
    assert shown["matched"] and shown["score"] > 0

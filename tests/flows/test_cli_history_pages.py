"""`flows history` prints a page of a memory's events, oldest first, however many it has: `--limit`
(default ``memory.HISTORY_PAGE``) from `--offset`, the last line saying how to see the next page;
`--json` carries `total`, `truncated` and `nextOffset` as the MCP `history` tool does. Following the
offsets lists every event once, in order. Through the real command, on a real store."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest

import memory
from tests.flows.helpers import flows, json_of, many_versions

VERSIONS = 1500  # 2,999 events: learned and superseded for each update


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[dict[str, Any]]]:
    """A store whose one memory has ``VERSIONS`` versions: its DB, its id and every event."""
    return many_versions(tmp_path_factory.mktemp("many"), VERSIONS)


def test_the_default_page_is_bounded_and_says_how_to_see_the_next(
    many: tuple[Path, str, list[dict[str, Any]]],
) -> None:
    db, memory_id, everything = many
    total = len(everything)
    assert total > 10 * memory.HISTORY_PAGE
    shown = json_of(flows(db, "history", memory_id, "--json"))
    assert shown["events"] == everything[: memory.HISTORY_PAGE]
    assert (shown["key"], shown["total"]) == (memory_id, total)
    assert shown["truncated"] is True and shown["nextOffset"] == memory.HISTORY_PAGE
    text = flows(db, "history", memory_id)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == f"memory {memory_id}: {VERSIONS} version(s)"
    rows = [line for line in lines if line.startswith(("learned ", "superseded "))]
    assert len(rows) == memory.HISTORY_PAGE and len(lines) < memory.HISTORY_PAGE + 5
    assert f"1 to {memory.HISTORY_PAGE} of {total}" in lines[-1]
    assert f"--offset {memory.HISTORY_PAGE}" in lines[-1]


def test_following_the_offsets_lists_every_event_once_in_order(
    many: tuple[Path, str, list[dict[str, Any]]],
) -> None:
    db, memory_id, everything = many
    pages = [json_of(flows(db, "history", memory_id, "--json", "--limit", "700"))]
    while pages[-1].get("truncated"):
        after = str(pages[-1]["nextOffset"])
        pages.append(json_of(flows(db, "history", memory_id, "--json", "--limit", "700", "--offset", after)))
    assert [e for page in pages for e in page["events"]] == everything
    assert all(len(page["events"]) <= 700 and page["total"] == len(everything) for page in pages)
    assert "nextOffset" not in pages[-1]
    # the text pages, each started where the one before says, show each event's record once
    records: list[str] = []
    offset = "0"
    for _ in range(len(everything)):
        text = flows(db, "history", memory_id, "--limit", "1000", "--offset", offset)
        assert text.returncode == 0, text.stderr
        lines = text.stdout.splitlines()
        rows = [line.split() for line in lines if line.startswith(("learned ", "superseded "))]
        records += [cells[cells.index(memory.STREAM) + 1] for cells in rows]
        found = re.search(r"--offset (\d+)", text.stdout.splitlines()[-1])
        if found is None:
            break
        offset = found.group(1)
    assert records == [e["citation"]["id"] for e in everything]
    past = json_of(flows(db, "history", memory_id, "--json", "--offset", str(len(everything))))
    assert past["events"] == [] and past["total"] == len(everything) and "truncated" not in past


@pytest.mark.parametrize(
    ("option", "bad"),
    [
        *[("--limit", bad) for bad in ("0", "-3", "100001", str(2**64), "x")],
        *[("--offset", bad) for bad in ("-1", "ten", "9" * 25)],
    ],
)
def test_a_bad_limit_or_offset_is_a_usage_error(
    option: str, bad: str, many: tuple[Path, str, list[dict[str, Any]]]
) -> None:
    db, memory_id, _ = many
    text = flows(db, "history", memory_id, f"{option}={bad}")
    assert (text.returncode, text.stdout) == (2, "")
    assert f"flows: error[usage]: argument {option}: must be a whole number from " in text.stderr
    assert text.stderr.rstrip().endswith("see `flows history --help`") and len(text.stderr) < 600
    as_json = flows(db, "history", memory_id, f"{option}={bad}", "--json")
    assert (as_json.returncode, as_json.stdout) == (2, "")
    assert orjson.loads(as_json.stderr)["code"] == "usage"

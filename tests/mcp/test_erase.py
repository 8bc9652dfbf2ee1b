"""Forget and erase by filter, and erase by key, over both transports: two steps (a dry run, then
its `confirm`), one scope at a time, and an erasure that leaves no byte of the content in the store,
even of what the erasing session itself learned; and `flows erase` while a session holds the run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import memory
from flows.mcp._tools import LISTED_MAX, confirmation
from journal import RunState
from tests.mcp.conftest import Transport, open_transport
from tests.mcp.harness import (
    START_TIMEOUT_S,
    call,
    call_error,
    mcp_runs,
    run,
    server_env,
    stdio_session,
)

_NO_FILTER = {"tags": [], "meta": None, "source": None, "before_ms": None}


def _bytes_anywhere(root: Path, needle: bytes) -> list[Path]:
    """Every regular file under ``root`` that holds ``needle``."""
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and needle in p.read_bytes()]


def test_forget_where_forgets_one_scope_only_after_a_dry_run_whose_confirm_still_holds(
    transport: Transport,
) -> None:
    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with transport.connect() as s:
            a1 = await call(s, "learn", text="alice likes tea", tags=["alice"], scope="users")
            a2 = await call(s, "learn", text="alice likes jazz", tags=["alice"], scope="users")
            await call(s, "learn", text="bob likes tea", tags=["bob"], scope="users")
            await call(s, "learn", text="alice elsewhere", tags=["alice"], scope="other")
            out["a"] = sorted([a1["key"], a2["key"]])
            out["no_scope"] = await call_error(s, "forget_where", tags=["alice"], reason="asked")
            where = {"tags": ["alice"], "reason": "she asked", "scope": "users"}
            out["no_confirm"] = await call_error(s, "forget_where", **where)
            out["plan"] = await call(s, "forget_where", **where, dry_run=True)
            other = await call(s, "forget_where", **{**where, "scope": "other"}, dry_run=True)
            out["other_confirm"] = await call_error(s, "forget_where", **where, confirm=other["confirm"])
            a3 = await call(s, "learn", text="alice likes chess", tags=["alice"], scope="users")
            out["stale"] = await call_error(s, "forget_where", **where, confirm=out["plan"]["confirm"])
            out["kept"] = await call(s, "recall", tags=["alice"], scope="users")
            plan = await call(s, "forget_where", **where, dry_run=True)
            out["a3"] = a3["key"]
            out["done"] = await call(s, "forget_where", **where, confirm=plan["confirm"])
            out["again"] = await call_error(s, "forget_where", **where, confirm=plan["confirm"])
            out["users"] = await call(s, "recall", scope="users")
            out["other"] = await call(s, "recall", scope="other")
            out["history"] = await call(s, "history", key=a1["key"])
        return out

    out = run(main)
    assert out["no_scope"]["code"] == "mcp_arguments_invalid" and out["no_scope"]["argument"] == "scope"
    assert out["no_confirm"]["code"] == "mcp_arguments_invalid" and out["no_confirm"]["argument"] == "confirm"
    assert "dry_run" in out["no_confirm"]["message"]
    plan = out["plan"]
    assert (plan["dryRun"], plan["count"], plan["keys"], plan["scope"]) == (True, 2, out["a"], "users")
    assert len(plan["confirm"]) == 16
    # another scope's confirmation, and one the matches outgrew, forget nothing
    for refused in (out["other_confirm"], out["stale"]):
        assert refused["code"] == "mcp_arguments_invalid" and refused["argument"] == "confirm"
        assert "nothing was written" in refused["message"]
    assert len(out["kept"]["findings"]) == 3
    done = out["done"]
    assert (done["dryRun"], done["count"]) == (False, 3)
    assert done["keys"] == sorted([*out["a"], out["a3"]])
    assert done["citation"]["stream"] == "memory-forget"
    assert out["again"]["argument"] == "confirm"  # the same call again: nothing matches now
    assert [f["text"] for f in out["users"]["findings"]] == ["bob likes tea"]
    assert [f["text"] for f in out["other"]["findings"]] == ["alice elsewhere"]  # another scope: untouched
    forgotten = [e for e in out["history"]["events"] if e["kind"] == "forgotten"]
    assert [e["reason"] for e in forgotten] == ["she asked"]


def test_forget_where_past_what_a_dry_run_lists_is_refused_and_forgets_no_key_the_caller_was_not_shown(
    tmp_path: Path,
) -> None:
    """A dry run over more matches than it lists had a confirmation that forgot them all, keys never
    shown among them: a filter matching more than one call lists is refused, the dry run too."""
    db = tmp_path / "history.db"
    with memory.MemoryStore(db) as store, store.session(scope="bulk", flow="test") as seeding:
        keys = sorted(seeding.learn({"text": f"bulk finding {i}", "tags": ["bulk"]}).id for i in range(1001))
    where = {"scope": "bulk", "tags": ["bulk"], "reason": "cleanup"}
    # a confirmation of the first 1,000 alone, all a truncated dry run could show
    shown = confirmation("forget_where", "bulk", {**_NO_FILTER, "tags": ["bulk"]}, keys[:LISTED_MAX])

    async def main(t: Transport) -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with t.connect() as s:
            out["dry"] = await call_error(s, "forget_where", **where, dry_run=True)
            out["shown"] = await call_error(s, "forget_where", **where, confirm=shown)
            out["live"] = [(await call(s, "get", key=key))["finding"]["key"] for key in keys[-2:]]
            await call(s, "forget", key=keys[-1], reason="one fewer")  # narrowed to what a dry run lists
            out["plan"] = await call(s, "forget_where", **where, dry_run=True)
            out["done"] = await call(s, "forget_where", **where, confirm=out["plan"]["confirm"])
        return out

    with open_transport("stdio", db) as t:
        out = run(lambda: main(t))
    for refused in (out["dry"], out["shown"]):
        assert refused["code"] == "memory_argument_invalid", refused
        assert "matches 1001 findings" in refused["message"] and "narrow it" in refused["message"]
        assert "nothing was written" in refused["message"]
    assert out["live"] == keys[-2:]  # the keys past the first 1,000 were not forgotten
    plan = out["plan"]
    assert (plan["count"], plan["keys"], "truncated" in plan) == (LISTED_MAX, keys[:LISTED_MAX], False)
    assert (out["done"]["count"], out["done"]["keys"]) == (LISTED_MAX, keys[:LISTED_MAX])


def test_a_server_with_a_scope_forgets_by_filter_in_it_without_naming_it(tmp_path: Path) -> None:
    async def main(t: Transport) -> tuple[Any, ...]:
        async with t.connect() as s:
            await call(s, "learn", text="a note of the sea", tags=["n"])
            await call(s, "learn", text="a note of the land", tags=["n"], scope="land")
            plan = await call(s, "forget_where", tags=["n"], reason="tidy", dry_run=True)
            done = await call(s, "forget_where", tags=["n"], reason="tidy", confirm=plan["confirm"])
            return plan, done, await call(s, "recall", scope="land")

    with open_transport("stdio", tmp_path / "history.db", "--scope", "sea") as t:
        plan, done, land = run(lambda: main(t))
    assert (plan["scope"], plan["count"], done["count"]) == ("sea", 1, 1)
    assert [f["text"] for f in land["findings"]] == ["a note of the land"]


def test_erase_of_what_the_session_itself_learned_leaves_no_byte_of_it_in_the_store(
    transport: Transport,
) -> None:
    """The session's root run holds the learn's record, and the journal rewrites no record of a
    running run: the server ends that run first. Before, no erase tool existed."""
    secret = "the vault code is 7-ZEBRA-41"

    async def main() -> tuple[Any, ...]:
        async with transport.connect() as s:
            first = await call(s, "learn", text=secret, tags=["vault"], scope="ops")
            second = await call(s, "update", memoryId=first["memoryId"], text=secret + " (rotated)")
            erased = await call(s, "erase", key=second["key"], reason="a secret, learned by mistake")
            again = await call(s, "erase", key=first["key"], reason="once more")
            gone = await call_error(s, "get", key=second["key"])
            history = await call(s, "history", key=first["key"])
            after = await call(s, "learn", text="the session writes on", scope="ops")
            blank = await call_error(s, "erase", key=after["key"], reason="   ")
            unknown = await call_error(s, "erase", key="0" * 32, reason="r")
            return first, second, erased, again, gone, history, after, blank, unknown

    first, second, erased, again, gone, history, after, blank, unknown = run(main)
    assert erased["memoryId"] == first["memoryId"]
    assert sorted(erased["keys"]) == sorted([first["key"], second["key"]])
    assert erased["citation"]["stream"] == "memory-erase" and erased["rewritten"] >= 2
    assert (again["citation"], again["memoryId"]) == (None, first["memoryId"])  # no second record
    assert gone["code"] == "memory_finding_unknown"
    [event] = [e for e in history["events"] if e["kind"] == "erased"]
    assert (event["reason"], event["flow"]) == ("a secret, learned by mistake", "mcp")
    assert blank["code"] == "memory_argument_invalid" and unknown["code"] == "memory_finding_unknown"
    runs = {r.run_id: r for r in mcp_runs(transport.db)}
    assert runs[erased["citation"]["runId"]].state is RunState.DONE  # the erase's own root run
    assert runs[first["citation"]["runId"]].state is RunState.DONE  # ended before the erase
    assert after["citation"]["runId"] not in {first["citation"]["runId"], erased["citation"]["runId"]}
    assert _bytes_anywhere(transport.db.parent, b"7-ZEBRA-41") == []


def test_erase_where_erases_every_memory_its_dry_run_listed_forgotten_ones_too(transport: Transport) -> None:
    async def main() -> tuple[Any, ...]:
        async with transport.connect() as s:
            carol = {"metadata": {"user": "carol"}, "scope": "crm"}
            a = await call(s, "learn", text="carol lives at 12 Elm St", **carol)
            b = await call(s, "learn", text="carol pays by card", **carol)
            await call(s, "forget", key=b["key"], reason="stale")
            dave = await call(s, "learn", text="dave pays by cash", metadata={"user": "dave"}, scope="crm")
            where = {"metadata": {"user": "carol"}, "reason": "erasure request twelve", "scope": "crm"}
            no_confirm = await call_error(s, "erase_where", **where)
            plan = await call(s, "erase_where", **where, dry_run=True)
            done = await call(s, "erase_where", **where, confirm=plan["confirm"])
            again = await call_error(s, "erase_where", **where, confirm=plan["confirm"])
            left = await call(s, "recall", scope="crm")
            return a, b, dave, no_confirm, plan, done, again, left

    a, b, dave, no_confirm, plan, done, again, left = run(main)
    assert no_confirm["code"] == "mcp_arguments_invalid" and no_confirm["argument"] == "confirm"
    assert (plan["dryRun"], plan["count"]) == (True, 2)
    assert plan["memoryIds"] == sorted([a["memoryId"], b["memoryId"]])
    assert (done["dryRun"], done["memoryIds"]) == (False, plan["memoryIds"])
    assert done["reason"] == "erasure request twelve"
    assert again["argument"] == "confirm"
    assert [f["key"] for f in left["findings"]] == [dave["key"]]
    for needle in (b"12 Elm St", b"carol pays"):
        assert _bytes_anywhere(transport.db.parent, needle) == [], needle
    assert _bytes_anywhere(transport.db.parent, b"dave pays by cash")  # the filter's alone


def _flows(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flows", "--db", str(db), *args],
        capture_output=True,
        text=True,
        env=server_env(),
        timeout=START_TIMEOUT_S,
        check=False,
    )


def test_flows_erase_while_a_session_holds_the_run_says_what_was_done_and_what_to_do(tmp_path: Path) -> None:
    """`flows erase` in another process while the MCP session that learned the finding is open: the
    journal cannot rewrite the session's running root run. It fails with `journal_lease_held`,
    saying the memory is forgotten and its copies gone, who holds the run and what to do; the same
    command once the session has ended finishes the erasure."""
    db = tmp_path / "history.db"
    seen: dict[str, Any] = {}

    async def main() -> None:
        async with stdio_session(db) as s:
            learned = await call(s, "learn", text="the door code is 55-OSPREY-9", scope="ops")
            seen["learned"] = learned
            seen["held"] = _flows(db, "erase", learned["key"], "--yes")
            seen["get"] = await call_error(s, "get", key=learned["key"])

    run(main)
    learned, held = seen["learned"], seen["held"]
    run_id = learned["citation"]["runId"]
    assert held.returncode == 1, held
    assert held.stderr.startswith("flows: error[journal_lease_held]: "), held.stderr
    message = held.stderr
    assert f"memory {learned['memoryId']} is forgotten" in message
    assert f"root run {run_id} (flow 'mcp', scope 'ops')" in message
    assert "MCP server whose client has not ended its session" in message
    assert f"`flows erase {learned['memoryId']} --yes`" in message and "`flows check --repair`" in message
    assert seen["get"]["code"] == "memory_finding_unknown"  # forgotten at once, in the live session too
    done = _flows(db, "erase", learned["key"], "--yes")  # the session has ended: its run is done
    assert done.returncode == 0, done.stderr
    assert _bytes_anywhere(tmp_path, b"55-OSPREY-9") == []


def test_an_erase_ends_the_root_run_of_another_open_session_of_the_server_that_holds_the_memory(
    tmp_path: Path,
) -> None:
    db = tmp_path / "history.db"

    async def main(t: Transport) -> tuple[Any, ...]:
        async with t.connect() as holder, t.connect() as eraser:
            learned = await call(holder, "learn", text="the alarm pin is 31-HERON-77", scope="ops")
            erased = await call(eraser, "erase", key=learned["key"], reason="a pin, learned by mistake")
            later = await call(holder, "learn", text="the holder writes on", scope="ops")
            return learned, erased, later

    with open_transport("http", db) as t:
        learned, erased, later = run(lambda: main(t))
    states = {r.run_id: r.state for r in mcp_runs(db)}
    assert states[learned["citation"]["runId"]] is RunState.DONE
    assert later["citation"]["runId"] != learned["citation"]["runId"]  # a new root run for the holder
    assert erased["rewritten"] >= 1
    assert _bytes_anywhere(tmp_path, b"31-HERON-77") == []

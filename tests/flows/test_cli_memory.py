"""`flows learn`, `flows forget`, `flows history`, and the key, tag and metadata filters of `flows recall`
and `flows why`, through the real command on both journal backends; bad input exits 2 and writes nothing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

import memory
from tests.conftest import ROOT
from tests.flows.helpers import flows, flows_cmd, json_of


def _cli(db: Path, location: str, *args: str) -> subprocess.CompletedProcess[str]:
    return flows(db, *args, "--journal", location)


def _learn(db: Path, location: str, text: str, *args: str) -> dict[str, Any]:
    out: dict[str, Any] = json_of(_cli(db, location, "learn", text, "--scope", "desk", "--json", *args))
    return out


def test_learn_recall_why_forget_and_history_through_the_cli(tmp_path: Path, journal_location: str) -> None:
    db = tmp_path / "store" / "history.db"
    loc = journal_location
    old = _learn(
        db, loc, "ETH gas is cheapest at night", "--tag", "gas", "--tag", "eth", "--meta", "symbol=ETH"
    )
    assert set(old) == {"memoryId", "key", "scope", "supersedes", "learnedMs", "citation", "path"}
    assert old["citation"]["stream"] == memory.STREAM
    (run,) = json_of(_cli(db, loc, "runs", "--json"))
    assert (run["runId"], run["flow"], run["scope"], run["state"]) == (
        old["citation"]["runId"],
        "cli",
        "desk",
        "done",
    )
    other = _learn(db, loc, "BTC fees are flat", "--tag", "fees", "--meta", "symbol=BTC", "--meta", "size=2")

    rows = json_of(_cli(db, loc, "recall", "--json"))
    assert [r["key"] for r in rows] == [other["key"], old["key"]]
    assert rows[1]["metadata"] == {"symbol": "ETH"}
    assert rows[1]["citation"] == old["citation"]
    assert [r["key"] for r in json_of(_cli(db, loc, "recall", "--tag", "gas", "--tag", "eth", "--json"))] == [
        old["key"]
    ]
    assert json_of(_cli(db, loc, "recall", "--tag", "gas", "--tag", "fees", "--json")) == []
    assert [r["key"] for r in json_of(_cli(db, loc, "recall", "--meta", "size=2.0", "--json"))] == [
        other["key"]
    ]
    table = _cli(db, loc, "recall")
    assert table.stdout.splitlines()[0].split()[:2] == ["MEMORY", "KEY"] and old["key"] in table.stdout
    why = _cli(db, loc, "why", "cheap gas", "--meta", "symbol=ETH")
    assert f"key: {old['key']}" in why.stdout and other["key"] not in why.stdout

    new = _learn(db, loc, "ETH gas is cheaper after the upgrade", "--tag", "gas", "--supersedes", old["key"])
    assert new["supersedes"] == old["key"]
    assert [r["key"] for r in json_of(_cli(db, loc, "recall", "--tag", "gas", "--json"))] == [new["key"]]
    gone = json_of(_cli(db, loc, "forget", other["key"], "--reason", "flat no more", "--json"))
    assert (gone["key"], gone["reason"], gone["citation"]["stream"]) == (
        other["key"],
        "flat no more",
        memory.RETIRE_STREAM,
    )
    assert json_of(_cli(db, loc, "forget", other["key"], "--json")) == gone  # idempotent
    assert json_of(_cli(db, loc, "recall", "--tag", "fees", "--json")) == []

    history = json_of(_cli(db, loc, "history", old["key"], "--json"))["events"]
    # every version of the memory, oldest first, each learn with its content
    assert [(e["kind"], e["key"], e["by"]) for e in history] == [
        ("learned", old["key"], None),
        ("learned", new["key"], None),
        ("superseded", old["key"], new["key"]),
    ]
    assert {e["memoryId"] for e in history} == {old["key"]} and new["memoryId"] == old["key"]
    assert history[0]["content"]["text"] == "ETH gas is cheapest at night" and history[2]["content"] is None
    assert history[1]["content"]["text"] == "ETH gas is cheaper after the upgrade"
    human = _cli(db, loc, "history", other["key"])
    assert human.returncode == 0 and "forgotten" in human.stdout and "flat no more" in human.stdout
    assert (
        human.stdout.startswith(f"memory {other['key']}: 1 version(s)\n")
        and "FLOW" in human.stdout.splitlines()[1]
    )
    assert "BTC fees are flat" in human.stdout  # the learned event shows what was learned
    assert _cli(db, loc, "sync").returncode == 0
    assert [r["key"] for r in json_of(_cli(db, loc, "recall", "--json"))] == [new["key"]]
    assert json_of(_cli(db, loc, "check", "--json"))["clean"] is True


def test_learning_a_forgotten_finding_is_a_new_memory_and_forgetting_an_unknown_key_fails_with_its_code(
    tmp_path: Path,
) -> None:
    db = tmp_path / "history.db"
    loc = str(tmp_path / "journal")
    learned = _learn(db, loc, "a finding")
    assert _cli(db, loc, "forget", learned["key"]).returncode == 0
    again = _learn(db, loc, "a finding")
    assert again["key"] != learned["key"]
    assert [r["key"] for r in json_of(_cli(db, loc, "recall", "--json"))] == [again["key"]]
    unknown = _cli(db, loc, "forget", "f" * 32, "--json")
    assert unknown.returncode == 1 and orjson.loads(unknown.stderr)["code"] == "memory_finding_unknown"
    assert _cli(db, loc, "history", "f" * 32).returncode == 1


BAD = [
    (("learn", "", "--scope", "desk"), "memory_finding_invalid"),
    (("learn", "x", "--scope", ""), "memory_argument_invalid"),
    (("learn", "x", "--scope", "desk", "--meta", "novalue"), "memory_argument_invalid"),
    (("learn", "x", "--scope", "desk", "--meta", "=1"), "memory_argument_invalid"),
    (("learn", "x", "--scope", "desk", "--meta", "k=1", "--meta", "k=2"), "memory_argument_invalid"),
    (("learn", "x", "--scope", "desk", "--meta", "k" * 129 + "=1"), "memory_finding_invalid"),
    (("learn", "x", "--scope", "desk", "--tag", ""), "memory_finding_invalid"),
    (("learn", "x", "--scope", "desk", "--supersedes", "abc"), "memory_argument_invalid"),
    (("learn", "x", "--scope", "desk", "--expires", "0"), "usage"),  # the argument's range: 1 to 2^53 - 1
    (("learn", "x", "--scope", "desk", "--expires", str(2**53)), "usage"),
    (("learn", "x", "--scope", "desk", "--expires", "1970-01-01T00:00:00+00:00"), "usage"),
    (("learn", "x", "--scope", "desk", "--expires", "15000000w"), "usage"),  # ends past 2^53 ms
    (("update", "0" * 32, "x", "--expires", str(2**63 - 1)), "usage"),
    (("learn", "x", "--scope", "desk", "--expires", "soon"), "usage"),
    (("learn", "x"), "usage"),
    (("forget", "abc"), "memory_argument_invalid"),
    (("forget", "0" * 32, "--reason", ""), "memory_argument_invalid"),
    (("history", "ABC"), "memory_argument_invalid"),
    (("recall", "--meta", "x"), "memory_argument_invalid"),
    (("recall", "--tag", ""), "memory_argument_invalid"),
    (("why", "x", "--meta", "a=1", "--meta", "a=2"), "memory_argument_invalid"),
    # an integer past 64 bits: orjson read it as a float, which was learned (or filtered on) instead
    (("learn", "x", "--scope", "desk", "--meta", f"id={2**64}"), "memory_finding_invalid"),
    (("learn", "x", "--scope", "desk", "--meta", f"ids=[1,{2**64}]"), "memory_finding_invalid"),
    (("recall", "--meta", f"id={2**64}"), "memory_argument_invalid"),
    (("why", "x", "--meta", f"id={-(2**64)}"), "memory_argument_invalid"),
]


@pytest.mark.parametrize(("args", "code"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_exits_2_with_its_code_and_writes_nothing(
    tmp_path: Path, args: tuple[str, ...], code: str
) -> None:
    db = tmp_path / "store" / "history.db"
    loc = str(tmp_path / "store" / "journal")
    os.makedirs(loc)  # an empty store: a journal named at a missing folder is no store at all
    result = _cli(db, loc, *args, "--json")
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert orjson.loads(result.stderr.splitlines()[-1])["code"] == code
    assert json_of(_cli(db, loc, "runs", "--json")) == []
    assert not (db.parent / "flows-memory").exists()


@pytest.mark.parametrize("command", ["learn", "forget", "history"])
def test_every_memory_command_has_help(command: str, tmp_path: Path) -> None:
    result = flows(tmp_path / "h.db", command, "--help")
    assert result.returncode == 0
    assert "--db" in result.stdout and "usage: flows" in result.stdout


def test_times_take_durations_iso_dates_and_epoch_ms_wherever_a_time_is_taken(tmp_path: Path) -> None:
    import time

    db = tmp_path / "h.db"
    before = int(time.time() * 1000)
    assert flows(db, "learn", "expires in a week", "--scope", "s", "--expires", "7d").returncode == 0
    after = int(time.time() * 1000)
    assert flows(db, "learn", "expires on a date", "--scope", "s", "--expires", "2999-01-31").returncode == 0
    got = {r["text"]: r["expiresMs"] for r in json_of(flows(db, "recall", "--json"))}
    assert before + 7 * 86_400_000 <= got["expires in a week"] <= after + 7 * 86_400_000
    assert got["expires on a date"] > after + 900 * 365 * 86_400_000
    # learned just now: none before one hour ago, both before a date far ahead
    assert json_of(flows(db, "recall", "--before", "1h", "--json")) == []
    assert len(json_of(flows(db, "recall", "--before", "2999-01-01", "--json"))) == 2
    assert len(json_of(flows(db, "runs", "--since", "1h", "--json"))) == 2
    assert json_of(flows(db, "runs", "--since", str(after + 60_000), "--json")) == []
    bad = flows(db, "learn", "x", "--scope", "s", "--expires", "soon")
    assert bad.returncode == 2 and "a duration (90s, 15m, 12h, 7d, 2w, 1h30m)" in bad.stderr


def _piped(db: Path, data: bytes, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in ("FLOWS_EMBEDDER", "FLOWS_JOURNAL")}
    return subprocess.run(
        [*flows_cmd(), *args, "--db", str(db), "--json"],
        input=data,
        capture_output=True,
        env={**env, "PYTHONPATH": str(ROOT)},
        timeout=60,
        check=False,
    )


def test_text_dash_reads_the_text_from_standard_input_bounded_and_checked(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    text = "line one: gas is cheap at night\nline two: « ünïcode »\n\n  indented"
    learned = orjson.loads(_piped(db, text.encode() + b"\r\n", "learn", "-", "--scope", "desk").stdout)
    (row,) = json_of(flows(db, "recall", "--json"))
    assert row["key"] == learned["key"] and row["text"] == text  # less only the final line ending
    updated = orjson.loads(_piped(db, b"second version\n", "update", learned["memoryId"], "-").stdout)
    (row,) = json_of(flows(db, "recall", "--json"))
    assert (row["text"], row["memoryId"]) == ("second version", learned["memoryId"])
    assert row["key"] == updated["key"]

    other = tmp_path / "other" / "history.db"
    too_big = b"x" * (memory.TEXT_MAX_BYTES + 1) + b"\n"  # one byte over, though a line ending follows
    endless = b"y" * (8 * memory.TEXT_MAX_BYTES)  # read only up to the bound, then refused
    for data, says in ((too_big, "text"), (endless, "standard input"), (b"caf\xe9 au lait\n", "not UTF-8")):
        done = _piped(other, data, "learn", "-", "--scope", "desk")
        error = orjson.loads(done.stderr)
        assert done.returncode == 2 and error["code"] == "memory_finding_invalid", done.stderr
        assert says in error["message"], error
    assert not other.parent.exists()  # refused before anything was written
    assert _piped(db, b"\xff\xfe", "update", learned["memoryId"], "-").returncode == 2
    (row,) = json_of(flows(db, "recall", "--json"))
    assert row["text"] == "second version"

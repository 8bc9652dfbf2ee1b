"""``sail journal``: the ledger told per day in plain sentences, each citing the lines it came from.

The ledgers here are written through the ledger's own writer (and the activity log's), shaped like
what ticks leave; the narrative over a real chain's ledger is checked with ``sail demo`` in
``test_anvil.py``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from memory.ledger import (
    Acted,
    ActivityLog,
    Amount,
    DispatchIncluded,
    DispatchSettled,
    Ledger,
    Outcome,
    Skipped,
    TokenMetadata,
    allowance_reason,
    balance_reason,
    cadence_reason,
    narrate,
)
from memory.ledger._snapshot import VERSION as SNAPSHOT_VERSION
from sail._cli import main
from sail._config import SailConfig, save_config

USDC, WETH, ROUTER = "0x" + "1a" * 20, "0x" + "2b" * 20, "0x" + "3c" * 20
DAY = 1_767_225_600  # 2026-01-01 00:00 UTC
HOUR = 3600


def swap(ts: int, n: int, outcome: Outcome, out_units: int = 9_821_340_000_000_000) -> Acted:
    confirmed = outcome is Outcome.CONFIRMED
    return Acted(
        ts=ts,
        block=None if outcome is Outcome.UNVERIFIED else n + 4,
        chain_id=31337,
        action="swap",
        permission="p",
        outcome=outcome,
        tx_hash=f"0x{n:064x}",
        gas_used=None if outcome is Outcome.UNVERIFIED else 142_013,
        token_in=USDC,
        token_out=WETH,
        amount_in=Amount.of(25_000_000, 6, "USDC"),
        amount_out=Amount.of(out_units, 18, "WETH") if confirmed else None,
        balances_after={USDC: 35_000_000, WETH: out_units} if confirmed else None,
    )


def included(entry: Acted) -> DispatchIncluded:
    """Where the chain held a confirmed swap, as reconcile logs it just before its line: what backs it."""
    assert entry.block is not None
    return DispatchIncluded(entry.ts + 1, 31337, entry.tx_hash, entry.block, "0x" + "cd" * 32, 1)


def skip(ts: int, reason: str) -> Skipped:
    return Skipped(ts=ts, block=1, chain_id=31337, reason=reason)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """Two days: trades, a revert with its reason, skips, a balance block that a swap ends, then on
    day two a gap of six hours, an allowance block still on at the end, and an unverified swap."""
    save_config(
        tmp_path,
        SailConfig(
            rpc_url="http://127.0.0.1:9", router=ROUTER, token_in=USDC, token_out=WETH,
            amount_in=25_000_000, interval_s=HOUR, min_balance=25_000_000,
        ),
    )  # fmt: skip
    sail = tmp_path / ".sail"
    activity = ActivityLog(sail)
    activity.append(TokenMetadata(DAY, USDC, 6, "USDC"))
    entries: list[Acted | Skipped] = [
        swap(DAY + 12, 1, Outcome.CONFIRMED),  # line 1
        skip(DAY + 60, cadence_reason(48, HOUR)),  # 2
        swap(DAY + HOUR + 12, 2, Outcome.REVERTED),  # 3
        skip(DAY + 2 * HOUR, balance_reason(10_000_000, 25_000_000)),  # 4
        skip(DAY + 3 * HOUR, balance_reason(10_000_000, 25_000_000)),  # 5
        swap(DAY + 4 * HOUR + 12, 3, Outcome.CONFIRMED, 10_000_000_000_000_000),  # 6
        skip(DAY + 24 * HOUR, cadence_reason(60, HOUR)),  # 7: day two
        skip(DAY + 30 * HOUR, allowance_reason(0, 25_000_000, ROUTER)),  # 8: after a six-hour gap
        skip(DAY + 31 * HOUR, allowance_reason(0, 25_000_000, ROUTER)),  # 9
        swap(DAY + 32 * HOUR, 4, Outcome.UNVERIFIED),  # 10
    ]
    activity.append(
        DispatchSettled(DAY + HOUR + 13, "dispatch_reverted", f"0x{2:064x}", 6, 1, "NO_LIQUIDITY")
    )
    for e in entries:
        if isinstance(e, Acted) and e.outcome is Outcome.CONFIRMED:
            activity.append(included(e))
    with Ledger(sail).writer() as w:
        for e in entries:
            w.append(e)
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def journal(capsys: pytest.CaptureFixture[str], home: Path, *argv: str) -> dict[str, Any]:
    status, out, err = run(capsys, "journal", "--home", str(home), "--json", *argv)
    assert (status, err) == (0, ""), err
    told: dict[str, Any] = json.loads(out)
    return told


def texts(told: dict[str, Any]) -> dict[str, list[str]]:
    return {d["date"]: [s["text"] for s in d["sentences"]] for d in told["days"]}


def test_the_journal_tells_each_day_in_plain_sentences(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    told = journal(capsys, home)
    assert (told["timezone"], told["gapS"]) == ("UTC", 2 * HOUR)
    assert texts(told) == {
        "2026-01-01": [
            "Swapped 25.0 USDC for 0.00982134 WETH at 2545.48 USDC per WETH, confirmed in block 5 "
            "(tx 0x0000…0001).",
            "Skipped once on cadence; its reason: cadence: last acted 48s ago, interval 3600s.",
            "Tried to swap 25.0 USDC for WETH; it reverted in block 6 (reason: NO_LIQUIDITY; "
            "tx 0x0000…0002).",
            "Blocked on balance from 02:00:00: balance 10.0 USDC (10000000) < min 25.0 USDC; it trades again "
            "once the agent holds at least 25.0 USDC; until 2026-01-01 04:00:12 (2 ticks), when a swap "
            "followed (confirmed).",
            "Skipped 2 times on balance, 02:00:00 to 03:00:00; the latest reason: balance 10.0 USDC "
            "(10000000) < min 25.0 USDC.",
            "Swapped 25.0 USDC for 0.01 WETH at 2500 USDC per WETH, confirmed in block 7 (tx 0x0000…0003).",
            "No decision ledgered from 04:00:12 to 2026-01-02 00:00:00 (19h 59m 48s): the agent did not "
            "tick, or its ticks failed (the activity log says which).",
        ],
        "2026-01-02": [
            "Skipped once on cadence; its reason: cadence: last acted 60s ago, interval 3600s.",
            "No decision ledgered from 00:00:00 to 2026-01-02 06:00:00 (6h): the agent did not tick, or "
            "its ticks failed (the activity log says which).",
            f"Blocked on allowance from 06:00:00: allowance 0.0 USDC (0) < 25.0 USDC for {ROUTER} — owner "
            "top-up needed; it trades again once the owner lets the router spend at least 25.0 USDC; until "
            "2026-01-02 08:00:00 (2 ticks), when a swap followed (unverified).",
            f"Skipped 2 times on allowance, 06:00:00 to 07:00:00; the latest reason: allowance 0.0 USDC (0) "
            f"< 25.0 USDC for {ROUTER} — owner top-up needed.",
            "Sent a swap of 25.0 USDC for WETH that the chain could not confirm yet: ledgered unverified, a "
            "later entry resolves it (tx 0x0000…0004).",
        ],
    }
    cited = {
        s["text"][:24]: [(c["file"], c["line"]) for c in s["cites"]]
        for d in told["days"]
        for s in d["sentences"]
    }
    assert cited["Tried to swap 25.0 USDC "] == [("ledger", 3), ("activity", 2)]
    assert cited["Blocked on balance from "] == [("ledger", 4), ("ledger", 5), ("ledger", 6)]
    assert cited["No decision ledgered fro"] == [("ledger", 7), ("ledger", 8)]


def test_every_citation_names_a_line_whose_digest_a_reader_can_check(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = {
        "ledger": (home / ".sail" / "memory" / "ledger.jsonl").read_bytes().split(b"\n"),
        "activity": (home / ".sail" / "activity.jsonl").read_bytes().split(b"\n"),
    }
    cites = [c for d in journal(capsys, home)["days"] for s in d["sentences"] for c in s["cites"]]
    assert len(cites) >= 15 and {c["file"] for c in cites} == {"ledger", "activity"}
    for cite in cites:
        line = files[cite["file"]][cite["line"] - 1]
        assert hashlib.sha256(line).hexdigest() == cite["sha256"], cite
    status, out, _ = run(capsys, "journal", "--home", str(home))
    assert status == 0
    first = hashlib.sha256(files["ledger"][0]).hexdigest()
    assert "  00:00:12  Swapped 25.0 USDC for 0.00982134 WETH" in out and f"[L1 {first[:12]}]" in out
    assert out.splitlines()[2] == "2026-01-01"


def test_the_journal_is_rebuilt_the_same_and_writes_nothing(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = sorted(p for p in (home / ".sail").rglob("*") if p.is_file())
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in files}
    first = journal(capsys, home)
    assert journal(capsys, home) == first
    assert run(capsys, "journal", "--home", str(home))[1] == run(capsys, "journal", "--home", str(home))[1]
    assert sorted(p for p in (home / ".sail").rglob("*") if p.is_file()) == files
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in files} == before
    # a later entry never rewrites an earlier day
    with Ledger(home / ".sail").writer() as w:
        w.append(skip(DAY + 50 * HOUR, cadence_reason(10, HOUR)))
    assert journal(capsys, home)["days"][0] == first["days"][0]


def test_since_and_until_bound_the_window(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    day_two = journal(capsys, home, "--since", "2026-01-02T00:00:00+00:00")
    assert [d["date"] for d in day_two["days"]] == ["2026-01-02"]
    assert (day_two["sinceMs"], day_two["untilMs"]) == ((DAY + 24 * HOUR) * 1000, None)
    morning = journal(capsys, home, "--since", str(DAY * 1000), "--until", "2026-01-01T02:30:00Z")
    assert texts(morning)["2026-01-01"][-2].startswith(
        "Blocked on balance from 02:00:00: balance 10.0 USDC (10000000) < min 25.0 USDC; it trades again "
        "once the agent holds at least 25.0 USDC; still blocked at the last entry in view"
    )
    assert {
        c["line"]
        for d in morning["days"]
        for s in d["sentences"]
        for c in s["cites"]
        if c["file"] == "ledger"
    } == {1, 2, 3, 4}
    narrow = journal(
        capsys, home, "--since", str(DAY * 1000), "--until", str((DAY + 90) * 1000), "--gap", "20"
    )
    assert [t[:63] for t in texts(narrow)["2026-01-01"] if t.startswith("No decision")] == [
        "No decision ledgered from 00:00:12 to 2026-01-01 00:01:00 (48s)",
        "No decision ledgered from 00:01:00 to 2026-01-01 00:01:30 (30s)",
    ]
    status, _, err = run(
        capsys, "journal", "--home", str(home), "--since", "2026-01-02", "--until", "2026-01-01"
    )
    assert status == 2 and "--until must come after --since" in err
    empty = journal(capsys, home, "--since", "2027-01-01")
    assert empty["days"] == []
    assert run(capsys, "journal", "--home", str(home), "--since", "2027-01-01")[1].endswith(
        "no entries in this window\n"
    )


def test_the_json_gives_its_times_in_epoch_ms_and_its_window_fed_back_is_the_same_window(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Times in ``--json`` are epoch milliseconds in keys ending in ``Ms``, as ``--since`` and
    ``--until`` read a bare number: the window printed, fed back, is the same window (printed in
    unix seconds, ``since`` fed back was read as milliseconds: a window in 1970)."""
    told = journal(capsys, home, "--days", "1")
    assert set(told) == {"ledger", "timezone", "sinceMs", "untilMs", "gapS", "days"}
    sentences = [s for d in told["days"] for s in d["sentences"]]
    assert sentences and all(set(s) == {"kind", "tsMs", "text", "cites"} for s in sentences)
    assert all(s["tsMs"] >= told["sinceMs"] == (DAY + 24 * HOUR) * 1000 for s in sentences)
    assert journal(capsys, home, "--since", str(told["sinceMs"])) == told
    bounded = journal(capsys, home, "--since", "2026-01-01T01:00:00Z", "--until", "2026-01-01T03:00:00Z")
    assert (bounded["sinceMs"], bounded["untilMs"]) == ((DAY + HOUR) * 1000, (DAY + 3 * HOUR) * 1000)
    again = ["--since", str(bounded["sinceMs"]), "--until", str(bounded["untilMs"])]
    assert journal(capsys, home, *again) == bounded
    stamped = [s["tsMs"] for d in bounded["days"] for s in d["sentences"]]
    assert stamped and all(bounded["sinceMs"] <= ts < bounded["untilMs"] and ts % 1000 == 0 for ts in stamped)


def test_days_tells_the_last_days_up_to_the_last_entry(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    last = journal(capsys, home, "--days", "1")
    assert last == journal(capsys, home, "--since", "2026-01-02")
    assert last["sinceMs"] == (DAY + 24 * HOUR) * 1000 and [d["date"] for d in last["days"]] == ["2026-01-02"]
    assert journal(capsys, home, "--days", "2") == journal(capsys, home, "--since", "2026-01-01")
    assert journal(capsys, home, "--days", "2")["days"] == journal(capsys, home)["days"]
    for bad in ("0", "367", "x"):
        status, _, err = run(capsys, "journal", "--home", str(home), "--days", bad)
        assert status == 2 and "--days" in err
    status, _, err = run(capsys, "journal", "--home", str(home), "--days", "1", "--since", "1d")
    assert status == 2 and "--days or --since" in err


def test_a_damaged_ledger_fails_closed(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = home / ".sail" / "memory" / "ledger.jsonl"
    lines = path.read_bytes().split(b"\n")
    intact = path.read_bytes()
    lines[2] = lines[2].replace(b'"outcome":"reverted"', b'"outcome":"REVERTED"')  # the same length
    path.write_bytes(b"\n".join(lines))
    for argv in ([], ["--json"]):
        status, out, err = run(capsys, "journal", "--home", str(home), *argv)
        assert (status, out) == (1, "")
        assert "journal_corrupt" in err and "line 3" in err
    path.write_bytes(intact)


def test_the_narrative_is_the_memory_layers_and_needs_no_chain(home: Path) -> None:
    """``narrate`` is what the command prints (a dashboard can tell the same story)."""
    told = narrate(Ledger(home / ".sail"), token_in=USDC, interval_s=HOUR)
    assert [d.date for d in told.days] == ["2026-01-01", "2026-01-02"]
    assert told.lines()[0].startswith("the narrative of ")


# -- read from the tail --------------------------------------------------------------------------


def long_home(tmp_path: Path, days: int = 3) -> Path:
    """``days`` days of ticks every 5 minutes, a swap every 50 ticks (some reverted), each confirmed
    swap stamped with its block's time, up to 20 minutes before the skip written just ahead of it."""
    save_config(
        tmp_path,
        SailConfig(
            rpc_url="http://127.0.0.1:9", router=ROUTER, token_in=USDC, token_out=WETH,
            amount_in=25_000_000, interval_s=HOUR, min_balance=25_000_000,
        ),
    )  # fmt: skip
    sail = tmp_path / ".sail"
    activity = ActivityLog(sail)
    activity.append(TokenMetadata(DAY, USDC, 6, "USDC"))
    with Ledger(sail).writer() as w:
        for i in range(days * 288):
            ts = DAY + 300 * i
            if i % 50 == 49:
                outcome = Outcome.REVERTED if i % 100 == 99 else Outcome.CONFIRMED
                if outcome is Outcome.REVERTED:
                    activity.append(
                        DispatchSettled(ts + 1, "dispatch_reverted", f"0x{i:064x}", i + 4, 1, f"R{i}")
                    )
                act = swap(ts - 60 * (i % 20), i, outcome)
                if outcome is Outcome.CONFIRMED:
                    activity.append(included(act))
                w.append(act)
            else:
                w.append(skip(ts, cadence_reason(300, HOUR)))
    return tmp_path


def test_a_window_read_from_the_tail_cites_exactly_the_lines_in_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = long_home(tmp_path)
    path = home / ".sail" / "memory" / "ledger.jsonl"
    raw = path.read_bytes().split(b"\n")[:-1]
    stamps = [json.loads(line)["ts"] for line in raw]
    activity = (home / ".sail" / "activity.jsonl").read_bytes().split(b"\n")
    for since, until in ((DAY + 86_400, None), (DAY + 86_400 + 3 * HOUR, DAY + 2 * 86_400 - 7 * HOUR)):
        argv = ["--since", str(since * 1000)] + ([] if until is None else ["--until", str(until * 1000)])
        told = journal(capsys, home, *argv)
        cited = {
            c["line"]
            for d in told["days"]
            for s in d["sentences"]
            for c in s["cites"]
            if c["file"] == "ledger"
        }
        inside = {n for n, ts in enumerate(stamps, 1) if ts >= since and (until is None or ts < until)}
        assert cited == inside
        for c in (c for d in told["days"] for s in d["sentences"] for c in s["cites"]):
            line = (raw if c["file"] == "ledger" else activity)[c["line"] - 1]
            assert hashlib.sha256(line).hexdigest() == c["sha256"], c
        reasons = [s["text"] for d in told["days"] for s in d["sentences"] if "reverted" in s["text"]]
        assert reasons and all("(reason: R" in t for t in reasons)
    assert journal(capsys, home, "--days", "1") == journal(capsys, home, "--since", "2026-01-03")


def test_a_window_reads_the_tail_only_a_full_read_fails_closed_on_a_damaged_earlier_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = long_home(tmp_path)
    journal(capsys, home)  # the snapshot is there (a tick's writer saved it)
    path = home / ".sail" / "memory" / "ledger.jsonl"
    lines = path.read_bytes().split(b"\n")
    assert b'"kind":"skipped"' in lines[100]
    lines[100] = lines[100].replace(b'"kind":"skipped"', b'"kind":"SKIPPED"')  # line 101, mid-file
    path.write_bytes(b"\n".join(lines))
    status, _, err = run(capsys, "journal", "--home", str(home))
    assert status == 1 and "journal_corrupt" in err and "line 101" in err
    last = journal(capsys, home, "--days", "1")
    assert [d["date"] for d in last["days"]] == ["2026-01-03"]
    lines[100] = lines[100].replace(b'"kind":"SKIPPED"', b'"kind":"skipped"')
    path.write_bytes(b"\n".join(lines))


def test_the_snapshot_counts_each_files_lines_and_an_old_snapshot_still_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = long_home(tmp_path, days=1)
    snap_path = home / ".sail" / "memory" / "state.json"
    snap = json.loads(snap_path.read_bytes())
    ledger_lines = (home / ".sail" / "memory" / "ledger.jsonl").read_bytes().count(b"\n")
    activity_lines = (home / ".sail" / "activity.jsonl").read_bytes().count(b"\n")
    assert (snap["version"], snap["ledger"]["lines"], snap["activity"]["lines"]) == (
        SNAPSHOT_VERSION, ledger_lines, activity_lines,
    )  # fmt: skip
    expected = journal(capsys, home, "--days", "1")
    # the same snapshot as version 2 wrote it: no line counts (nor dropped dispatches: stale, rebuilt)
    old = {
        k: v
        for k, v in snap.items()
        if k not in ("digest", "dropped", "anchor", "included", "reorged", "acknowledged")
    }
    old["version"] = 2
    for part in ("ledger", "activity"):
        old[part] = {k: v for k, v in old[part].items() if k != "lines"}
    old["digest"] = hashlib.sha256(
        json.dumps(old, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    snap_path.write_text(json.dumps(old))
    assert journal(capsys, home, "--days", "1") == expected  # rebuilt, not written
    assert json.loads(snap_path.read_bytes())["version"] == 2
    Ledger(home / ".sail").state()  # a reader that saves writes the current version
    again = json.loads(snap_path.read_bytes())
    current = (SNAPSHOT_VERSION, ledger_lines, [])
    assert (again["version"], again["ledger"]["lines"], again["dropped"]) == current
    assert journal(capsys, home, "--days", "1") == expected


# -- learned into flows-memory -------------------------------------------------------------------


def flows_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    from flows._cli import main as flows_main

    status = flows_main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert status == 0, err
    return json.loads(out)


def test_learn_puts_each_finished_days_sentences_in_memory_once_and_why_answers_from_them(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "store" / "history.db")
    (tmp_path / "store").mkdir()
    # each finished day told on its own window: here the same as both days' window at once
    told = journal(capsys, home, "--since", "2026-01-01", "--until", "2026-01-03")
    sentences = [(d["date"], s) for d in told["days"] for s in d["sentences"]]
    first = journal(capsys, home, "--learn", "--db", db)
    assert first["scope"] == f"sail:{home.name}" and first["days"] == ["2026-01-01", "2026-01-02"]
    assert len(first["learned"]) == len(sentences) == 13 and first["known"] == []
    runs = flows_json(capsys, "runs", "--db", db)
    # again: nothing new learned, no root run begun
    again = journal(capsys, home, "--learn", "--db", db)
    day_two = [k for k, (date, _) in zip(first["learned"], sentences, strict=True) if date == "2026-01-02"]
    assert (again["days"], again["learned"], again["known"]) == (["2026-01-02"], [], day_two)
    assert flows_json(capsys, "runs", "--db", db) == runs
    status, out, _ = run(capsys, "journal", "--home", str(home), "--learn", "--db", db)
    assert (
        status == 0
        and out.startswith("learned 0 findings from 1 finished days")
        and f"({len(day_two)} already there)" in out
    )

    ledger_lines = (home / ".sail" / "memory" / "ledger.jsonl").read_bytes().split(b"\n")
    answers = flows_json(capsys, "why", "why did the agent stop trading", "--db", db)
    top = answers[0]
    assert "the agent stopped trading: Blocked on" in top["text"], top
    assert top["scope"] == f"sail:{home.name}" and top["source"] == "sail journal"
    cites = top["metadata"]["cites"]
    assert cites and top["metadata"]["journal"]["kind"] == "blocked"
    for cite in cites:
        file, line, digest = cite.split(":")
        if file == "ledger":
            assert hashlib.sha256(ledger_lines[int(line) - 1]).hexdigest() == digest
    assert top["citation"]["stream"] == "memory-learn" and top["flow"] == "sail-journal"  # its journal record
    told_texts = {s["text"] for _, s in sentences}
    assert top["text"].split(": ", 1)[1] in told_texts
    friday = flows_json(capsys, "why", "why did the agent stop trading on Friday", "--db", db)[0]
    assert friday["text"].startswith("On Friday 2026-01-02") and "Blocked on allowance" in friday["text"]
    # with an embedder too (the offline default model): words and meaning fused
    fused = flows_json(capsys, "why", "why did the agent stop trading", "--db", db, "--mode", "hybrid")
    assert fused[0]["metadata"]["journal"]["kind"] == "blocked" and fused[0]["matchedBy"] == "both"


def test_learn_leaves_today_for_when_it_is_over_and_refuses_store_options_without_it(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import time

    now = int(time.time())
    with Ledger(home / ".sail").writer() as w:
        w.append(skip(now - 5, cadence_reason(5, HOUR)))
    db = str(tmp_path / "history.db")
    learned = journal(capsys, home, "--learn", "--db", db)
    today = time.strftime("%Y-%m-%d", time.gmtime(now))
    assert today not in learned["days"] and learned["days"][:2] == ["2026-01-01", "2026-01-02"]
    status, _, err = run(capsys, "journal", "--home", str(home), "--db", db)
    assert status == 2 and "go with --learn" in err


def test_learn_reads_from_the_last_day_it_learned(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = long_home(tmp_path / "agent")
    db = str(tmp_path / "history.db")
    first = journal(capsys, home, "--learn", "--db", db)
    assert first["days"] == ["2026-01-01", "2026-01-02", "2026-01-03"] and first["learned"]
    path = home / ".sail" / "memory" / "ledger.jsonl"
    intact = path.read_bytes()
    lines = intact.split(b"\n")
    lines[100] = lines[100].replace(b'"kind":"skipped"', b'"kind":"SKIPPED"')  # on the first day
    path.write_bytes(b"\n".join(lines))
    again = journal(capsys, home, "--learn", "--db", db)  # reads the last day learned only
    assert (again["days"], again["learned"]) == (["2026-01-03"], [])
    assert set(again["known"]) < set(first["learned"])
    path.write_bytes(intact)

"""The snapshot never outranks the ledger, and every reader fails closed on the same damage."""

from __future__ import annotations

import hashlib
import os
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

import memory.ledger as ml
from journal import JournalCorrupt
from memory.ledger import (
    ActivityLog,
    DispatchSigned,
    DispatchUnsent,
    LastAct,
    Ledger,
    Outcome,
    Skipped,
)
from tests.ledger.test_ledger import acted, skipped, write

AGENT, ROUTER = "0x" + "33" * 20, "0x" + "44" * 20


def _forge(ledger: Ledger, edit: dict) -> None:
    """Edit the snapshot's body and recompute its digest, as a careful hand would."""
    snap = orjson.loads(ledger.snapshot_path.read_bytes())
    snap.pop("digest")
    snap.update(edit)
    digest = hashlib.sha256(orjson.dumps(snap, option=orjson.OPT_SORT_KEYS)).hexdigest()
    ledger.snapshot_path.write_bytes(orjson.dumps({**snap, "digest": digest}))


def _hand_edit(ledger: Ledger, last: object) -> None:
    snap = orjson.loads(ledger.snapshot_path.read_bytes())
    snap["lastConfirmed"] = last
    ledger.snapshot_path.write_bytes(orjson.dumps(snap, option=orjson.OPT_INDENT_2))


@pytest.mark.parametrize("forged", [False, True], ids=["by-hand", "digest-recomputed"])
def test_a_last_confirmed_edited_to_a_later_time_is_caught_and_rebuilt(tmp_path: Path, forged: bool) -> None:
    ledger = Ledger(tmp_path)
    write(ledger, acted(5, 7), skipped(6))
    snap = orjson.loads(ledger.snapshot_path.read_bytes())
    wrong = {**snap["lastConfirmed"], "ts": 10**9}  # would make every tick a false cadence skip
    if forged:
        _forge(ledger, {"lastConfirmed": wrong})
    else:
        _hand_edit(ledger, wrong)
    assert Ledger(tmp_path).last_confirmed() == LastAct(5, 107, f"0x{7:064x}")
    rebuilt = orjson.loads(ledger.snapshot_path.read_bytes())
    assert rebuilt["lastConfirmed"]["ts"] == 5  # rewritten from the ledger


def test_a_last_confirmed_edited_to_null_is_caught_by_its_digest(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    write(ledger, acted(5, 7), skipped(6))
    _hand_edit(ledger, None)  # would make the next tick swap inside the interval
    assert Ledger(tmp_path).last_confirmed() == LastAct(5, 107, f"0x{7:064x}")


def test_a_snapshot_naming_a_line_that_is_not_there_is_caught_by_the_lines_digest(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    write(ledger, acted(5, 7), skipped(6), acted(8, 9))
    snap = orjson.loads(ledger.snapshot_path.read_bytes())
    # the first act's values at the first line's offset, with the digest of the last line
    older = {"ts": 5, "block": 107, "txHash": f"0x{7:064x}", "offset": 0}
    _forge(ledger, {"lastConfirmed": {**snap["lastConfirmed"], **older}})
    assert Ledger(tmp_path).last_confirmed() == LastAct(8, 109, f"0x{9:064x}")


@pytest.mark.parametrize(
    "token",
    [{"decimals": 10**9, "symbol": "USDC"}, {"decimals": 6, "symbol": "US DC"}],
    ids=["decimals", "symbol"],
)
def test_a_snapshots_token_beyond_what_token_metadata_accepts_is_not_believed(
    tmp_path: Path, token: dict[str, object]
) -> None:
    ledger = Ledger(tmp_path)
    write(ledger, acted(5, 7), skipped(6))
    address = "0x" + "55" * 20
    _forge(ledger, {"tokens": {address: token}})  # 10**9 decimals: a billion-digit number per amount
    assert Ledger(tmp_path).state(save=False).tokens == {}  # rebuilt from the logs, which hold none
    assert ml.reason_text("balance 10 < min 25", address, Ledger(tmp_path).state().tokens) == (
        "balance 10 < min 25"
    )


def test_an_open_dispatch_removed_from_the_snapshot_by_hand_comes_back(tmp_path: Path) -> None:
    sail = tmp_path / ".sail"
    ledger = Ledger(sail)
    ActivityLog(sail).append(_signed(1))
    assert [d.tx_hash for d in ledger.state().open] == [_signed(1).tx_hash]
    snap = orjson.loads(ledger.snapshot_path.read_bytes())
    snap["open"] = []
    ledger.snapshot_path.write_bytes(orjson.dumps(snap))
    assert [d.tx_hash for d in Ledger(sail).state().open] == [_signed(1).tx_hash]


def test_the_unresolved_dispatches_follow_the_logs_through_catch_up_and_rebuild(tmp_path: Path) -> None:
    sail = tmp_path / ".sail"
    ledger, activity = Ledger(sail), ActivityLog(sail)
    for n in (1, 2, 3):
        activity.append(_signed(n))
    activity.append(DispatchUnsent(10, _signed(2).tx_hash, 2, "never broadcast"))
    # reconcile's lines: where the chain holds it, then its final entry (see the test below)
    activity.append(_included(acted(20, 1)))
    write(ledger, acted(20, 1))  # dispatch 1 is final
    caught = ledger.state()
    assert [d.tx_hash for d in caught.open] == [_signed(3).tx_hash]
    assert [d.tx_hash for d in caught.unsent] == [_signed(2).tx_hash]
    activity.append(_included(acted(30, 2)))
    write(ledger, acted(30, 2))  # the unsent one was mined after all: no longer watched
    ledger.snapshot_path.unlink()
    rebuilt = Ledger(sail).state()
    assert ([d.tx_hash for d in rebuilt.open], rebuilt.unsent) == ([_signed(3).tx_hash], ())
    assert rebuilt.last_confirmed == LastAct(30, 102, f"0x{2:064x}", signed_ts=2)  # its signing line's ts


def _included(entry: ml.Acted) -> ml.DispatchIncluded:
    """The ``dispatch_included`` line reconcile logs just before ``entry`` (its block and status)."""
    assert entry.block is not None
    status = 1 if entry.outcome is Outcome.CONFIRMED else 0
    return ml.DispatchIncluded(entry.ts, entry.chain_id, entry.tx_hash, entry.block, "0x" + "ab" * 32, status)


def _signed(n: int) -> DispatchSigned:
    return DispatchSigned(
        ts=n, chain_id=1, tx_hash=f"0x{n:064x}", nonce=n, sender=AGENT, to=ROUTER, data="0x", action="swap",
        permission=None,
    )  # fmt: skip


# -- one verdict for every reader ------------------------------------------------------------------


def _damage_last_line(ledger: Ledger, replacement: bytes) -> None:
    """Overwrite the last (acknowledged, below the watermark) line, keeping its length."""
    data = ledger.path.read_bytes()
    start = data.rstrip(b"\n").rfind(b"\n") + 1
    line = data[start:-1]
    ledger.path.write_bytes(data[:start] + replacement.ljust(len(line), b" ")[: len(line)] + b"\n")


def _readers(ledger: Ledger) -> dict[str, object]:
    return {
        "entries": ledger.entries,
        "iter_reverse": lambda: list(ledger.iter_reverse()),
        "scan": lambda: list(ledger.scan()),
        "last_confirmed": ledger.last_confirmed,
        "state": ledger.state,
        "recent_confirmed": lambda: ledger.recent_confirmed(0),
        "writer": lambda: ledger.writer().__enter__(),
    }


@pytest.mark.parametrize("damage", [b"\x00\x17garbage", b'{"kind": "traded"}'], ids=["bytes", "json"])
def test_a_damaged_acknowledged_last_line_fails_every_reader_closed_and_saves_no_snapshot(
    tmp_path: Path, damage: bytes
) -> None:
    sail = tmp_path / "damaged" / ".sail"
    ledger = Ledger(sail)
    write(ledger, acted(5, 7), skipped(6), skipped(7))
    before = ledger.snapshot_path.read_bytes()
    assert (ledger.path.stat().st_size, ml.Ledger(sail).lines.watermark()) == (
        len(ledger.path.read_bytes()),
    ) * 2
    _damage_last_line(ledger, damage)
    for name, read in _readers(Ledger(sail)).items():
        with pytest.raises(JournalCorrupt) as info:
            read()  # type: ignore[operator]
        assert (info.value.code, info.value.line) == ("journal_corrupt", 3), name
    ledger.snapshot_path.unlink()
    for name, read in _readers(Ledger(sail)).items():
        with pytest.raises(JournalCorrupt):
            read()  # type: ignore[operator]
        assert not ledger.snapshot_path.exists(), f"{name} saved a snapshot from a failed read"
    assert before  # (the snapshot before the damage existed; it was never rewritten from it)


def test_an_append_in_flight_past_the_watermark_is_no_record_for_any_reader(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    write(ledger, acted(5, 7), skipped(6))
    with ledger.path.open("ab") as f:
        f.write(b"\x00\x00{not yet\n")  # written, not yet fsync'd: the watermark stays below it
    assert [e.ts for e in ledger.iter_reverse()] == [6, 5]
    assert ledger.last_confirmed() == LastAct(5, 107, f"0x{7:064x}")
    assert [e.ts for e in ledger.entries()] == [e.ts for e in ledger.scan()] == [5, 6]
    write(ledger, skipped(9))  # the next locked open cuts it
    assert [e.ts for e in ledger.entries()] == [5, 6, 9]


_WHOLE = orjson.dumps(skipped(50).to_wire()) + b"\n"  # a complete, valid line
_CRAFTED_DAMAGE = {  # past the watermark, yet no crash leaves it: each append is its own write and fsync
    "junk-then-a-whole-line": b"\x00junk\n" + _WHOLE,
    "a-line-junk-a-line": _WHOLE + b"\x00junk\n" + _WHOLE,
    "junk-then-schema-breaking": b"\x00junk\n" + b'{"kind": "traded"}\n',
}


@pytest.mark.parametrize("tail", list(_CRAFTED_DAMAGE.values()), ids=list(_CRAFTED_DAMAGE))
def test_a_line_that_does_not_decode_before_one_that_does_is_one_verdict_for_every_reader_and_the_writer(
    tmp_path: Path, tail: bytes
) -> None:
    sail = tmp_path / "damaged" / ".sail"
    ledger = Ledger(sail)
    write(ledger, acted(5, 7), skipped(6))
    mark = ledger.lines.watermark()
    with ledger.path.open("ab") as f:
        f.write(tail)
    assert mark == ledger.lines.watermark()  # all of it past the watermark
    data = ledger.path.read_bytes()
    readers = {
        **_readers(Ledger(sail)),
        "newest (sail why, the dashboard)": lambda: next(Ledger(sail).iter_reverse()),
        "recent_skips": lambda: ml.recent_skips(Ledger(sail), 1),
        "recent_confirmed(now)": lambda: Ledger(sail).recent_confirmed(40),
        "agent_state (sail status)": lambda: ml.agent_state(sail, interval_s=60, save=False),
    }
    lines = set()
    for name, read in readers.items():
        with pytest.raises(JournalCorrupt) as info:
            read()  # type: ignore[operator]
        lines.add(info.value.line)
        assert ledger.path.read_bytes() == data, f"{name} cut the file"
    assert len(lines) == 1, lines


@pytest.mark.parametrize("tail", list(_CRAFTED_DAMAGE.values()), ids=list(_CRAFTED_DAMAGE))
def test_the_activity_log_gives_one_verdict_on_the_same_crafted_tails(tmp_path: Path, tail: bytes) -> None:
    log = ActivityLog(tmp_path)
    log.append(_signed(1))
    whole = orjson.dumps(_signed(2).to_wire()) + b"\n"
    with log.path.open("ab") as f:
        f.write(tail.replace(_WHOLE, whole))
    data = log.path.read_bytes()
    for name, read in {
        "read": log.read,
        "newest": lambda: next(log.iter_reverse()),
        "append": lambda: log.append(_signed(3)),
    }.items():
        with pytest.raises(JournalCorrupt):
            read()
        assert log.path.read_bytes() == data, f"{name} cut the file"


@pytest.mark.parametrize(
    "tail",
    [b"\x00ju", b'{"kind": "traded"}', _WHOLE[:-1], b"\x00a\n\x00b\n", b"\x00a\n" + _WHOLE[:-1]],
    ids=["junk", "schema-breaking", "a-whole-line", "two-torn-lines", "torn-then-unterminated"],
)
def test_an_unfinished_append_past_the_watermark_is_no_record_for_any_reader_and_cut_by_the_writer(
    tmp_path: Path, tail: bytes
) -> None:
    sail = tmp_path / "damaged" / ".sail"  # (the tail is not a line of the schema until it is cut)
    ledger = Ledger(sail)
    write(ledger, acted(5, 7), skipped(6))
    with ledger.path.open("ab") as f:
        f.write(tail)
    assert [e.ts for e in ledger.entries()] == [e.ts for e in ledger.scan()] == [5, 6]
    assert [e.ts for e in ledger.iter_reverse()] == [6, 5]
    assert ml.recent_skips(ledger, 1)[0].ts == 6
    write(ledger, skipped(9))
    assert [e.ts for e in Ledger(sail).entries()] == [5, 6, 9]


def test_a_snapshot_larger_than_its_bound_is_stale_and_rewritten(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    write(ledger, acted(5, 7), skipped(6))
    good = ledger.snapshot_path.read_bytes()
    padded = good + b" " * (ml.MAX_SNAPSHOT_BYTES + 1 - len(good))  # still valid JSON, same digest
    ledger.snapshot_path.write_bytes(padded)
    assert ledger.state().last_confirmed == LastAct(5, 107, f"0x{7:064x}")
    assert ledger.snapshot_path.read_bytes() == good  # never believed: rebuilt from the files


def test_a_sparse_snapshot_of_many_gigabytes_is_never_read_whole(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    write(ledger, acted(5, 7), skipped(6))
    with ledger.snapshot_path.open("r+b") as f:
        f.truncate(64 * 2**30)  # costs no disk; reading it would hold 64 GiB in memory
    assert ledger.last_confirmed() == LastAct(5, 107, f"0x{7:064x}")
    assert ledger.snapshot_path.stat().st_size < 2**20


def test_the_tail_read_for_recent_acts_stops_at_lines_older_than_the_span(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    write(ledger, acted(100, 1), *[skipped(200 + i) for i in range(5)], acted(10_000, 2), skipped(10_001))
    assert ledger.recent_confirmed(9_000) == (LastAct(10_000, 102, f"0x{2:064x}"), True)
    assert ledger.recent_confirmed(20_000) == (None, True)
    # a confirmed act resolved late (written after newer skips) is still found by its time
    write(ledger, acted(9_500, 3), skipped(10_002))
    assert ledger.recent_confirmed(9_400)[0] == LastAct(10_000, 102, f"0x{2:064x}")
    assert Ledger(tmp_path).last_confirmed() == LastAct(10_000, 102, f"0x{2:064x}")


def test_a_skip_or_an_unverified_line_stamped_far_back_ends_the_tail_read(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    write(ledger, acted(1_000, 1), skipped(2_000), acted(3_000, 2, Outcome.UNVERIFIED), Skipped(
        ts=20_000, block=1, chain_id=1, reason="quote returned 0"
    ))  # fmt: skip
    # since 10_000: the unverified line at 3_000 is more than an hour older: nothing before it counts
    assert ledger.recent_confirmed(10_000) == (None, True)
    assert ledger.recent_confirmed(1_000) == (LastAct(1_000, 101, f"0x{1:064x}"), True)


def test_a_snapshot_read_races_no_appender_into_a_wrong_answer(tmp_path: Path) -> None:
    """Readers (no lock) and a writer at once: every answer is one the ledger had at some point."""
    import threading

    ledger = Ledger(tmp_path)
    write(ledger, acted(1, 1))
    seen: list[LastAct | None] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            seen.append(Ledger(tmp_path).last_confirmed())

    readers = [threading.Thread(target=read) for _ in range(3)]
    for r in readers:
        r.start()
    try:
        for n in range(2, 30):
            write(ledger, acted(n, n), skipped(n))
    finally:
        stop.set()
        for r in readers:
            r.join()
    allowed = {LastAct(n, 100 + n, f"0x{n:064x}") for n in range(1, 30)}
    assert set(seen) <= allowed and Ledger(tmp_path).last_confirmed() == LastAct(29, 129, f"0x{29:064x}")
    assert os.path.exists(ledger.snapshot_path)


@pytest.mark.parametrize(
    "reason",
    [
        f"balance {'9' * 4400} < min 1",  # past what int() converts: it failed every view of the ledger
        f"allowance 1 < {'9' * 4400} for 0x{'ab' * 20} — owner top-up needed",
        "balance \u0661\u0662\u0663 < min 5",  # digits of another script are not the figure 123
    ],
)
def test_a_skip_reason_past_any_amount_is_shown_as_written(reason: str) -> None:
    usdc = "0x" + "a0" * 20
    assert ml.reason_text(reason, usdc, {usdc: (6, "USDC")}) == reason
    assert ml.reason_text("balance 1500000 < min 2000000", usdc, {usdc: (6, "USDC")}) == (
        "balance 1.5 USDC (1500000) < min 2.0 USDC"
    )


def test_a_final_line_without_its_receipts_inclusion_leaves_the_dispatch_watched(tmp_path: Path) -> None:
    """A dispatch the agent signed leaves the watch only through a line reconcile wrote from its
    receipt, just after the ``dispatch_included`` line of that block and status. A ``reverted`` line
    added by hand for a swap still pending resolved it, and the next tick swapped beside it: on a
    real node both swaps were mined for one decision, and the ledger said the first reverted."""
    sail = tmp_path / ".sail"
    ledger = Ledger(sail)
    ActivityLog(sail).append(_signed(1))
    with ledger.writer() as w:
        w.append(acted(2, 1, Outcome.REVERTED))  # no receipt said so
    assert [d.tx_hash for d in ledger.state().open] == [_signed(1).tx_hash]
    ledger.snapshot_path.unlink()
    assert [d.tx_hash for d in Ledger(sail).state().open] == [_signed(1).tx_hash]  # rebuilt
    # reconcile's own: the inclusion, then the line from the receipt
    mined = acted(3, 1, Outcome.CONFIRMED)
    ActivityLog(sail).append(_included(mined))
    with ledger.writer() as w:
        w.append(mined)
    assert ledger.state().open == ()
    ledger.snapshot_path.unlink()
    assert Ledger(sail).state(save=False).open == ()  # rebuilt: the claim before it consumes nothing
    assert ledger.state().last_confirmed == LastAct(3, 101, _signed(1).tx_hash, signed_ts=1)


def _signed_and_mined(sail: Path, signed_at: int, block_ts: int) -> Ledger:
    """An act signed at ``signed_at`` by the agent's clock, mined in a block stamped ``block_ts``,
    ledgered as reconcile ledgers it (its inclusion, then the line)."""
    ledger = Ledger(sail)
    dispatch = DispatchSigned(
        ts=signed_at, chain_id=1, tx_hash=f"0x{1:064x}", nonce=1, sender=AGENT, to=ROUTER, data="0x",
        action="swap", permission=None,
    )  # fmt: skip
    ActivityLog(sail).append(dispatch)
    mined = acted(block_ts, 1, Outcome.CONFIRMED)
    ActivityLog(sail).append(replace(_included(mined), ts=signed_at + 60))  # the reconciling tick's clock
    with ledger.writer() as w:
        w.append(mined)
    return ledger


def test_the_last_act_keeps_its_signing_time_through_catch_up_and_rebuild(tmp_path: Path) -> None:
    """A chain behind the agent's clock stamps the act long before it was signed; the cadence counts
    from the later of the two, so the snapshot keeps the signing line's time, checked at its offset."""
    sail = tmp_path / ".sail"
    ledger = _signed_and_mined(sail, signed_at=10_000, block_ts=2_000)
    caught_up = ledger.state().last_confirmed
    assert caught_up == LastAct(2_000, 101, f"0x{1:064x}", signed_ts=10_000)
    assert caught_up is not None and caught_up.since == 10_000
    ledger.snapshot_path.unlink()
    assert Ledger(sail).state().last_confirmed == caught_up  # rebuilt from the files alike
    # a chain ahead of the clock: the block's time is the later
    other = _signed_and_mined(tmp_path / "ahead", signed_at=2_000, block_ts=10_000).last_confirmed()
    assert other is not None and other.since == 10_000


@pytest.mark.parametrize(
    "edit",
    [
        {"ts": 10**9},  # holds the agent for decades
        {"ts": 1},  # lets it trade at once
        {"offset": 0},  # another line's place
    ],
    ids=["later", "earlier", "elsewhere"],
)
def test_a_signing_time_forged_in_the_snapshot_is_caught_and_rebuilt(tmp_path: Path, edit: dict) -> None:
    sail = tmp_path / ".sail"
    ledger = _signed_and_mined(sail, signed_at=10_000, block_ts=2_000)
    snap = orjson.loads(ledger.snapshot_path.read_bytes())
    signed = snap["lastConfirmed"]["signed"]
    if "offset" in edit:  # the inclusion line's place, digest and all: a line, but not the signing
        included = (sail / "activity.jsonl").read_bytes().split(b"\n")[1]
        edit = {"offset": len((sail / "activity.jsonl").read_bytes().split(b"\n")[0]) + 1,
                "lineSha256": hashlib.sha256(included).hexdigest()}  # fmt: skip
    _forge(ledger, {"lastConfirmed": {**snap["lastConfirmed"], "signed": {**signed, **edit}}})
    assert Ledger(sail).last_confirmed() == LastAct(2_000, 101, f"0x{1:064x}", signed_ts=10_000)
    assert orjson.loads(ledger.snapshot_path.read_bytes())["lastConfirmed"]["signed"] == signed


def test_the_activity_tail_gives_the_latest_mined_swap_signed_within_the_span(tmp_path: Path) -> None:
    """``recent_signing``: what a snapshot forged to drop the signing time cannot hide. A reverted
    swap, or one with no receipt read, is not counted; the read stops at lines older than the span."""
    sail = tmp_path / ".sail"
    ledger = _signed_and_mined(sail, signed_at=10_000, block_ts=2_000)
    assert ledger.recent_signing(9_000) == (10_000, True)
    assert ledger.recent_signing(10_001) == (None, True)
    log = ActivityLog(sail)
    reverted = acted(2_100, 2, Outcome.REVERTED)
    log.append(replace(_signed(2), ts=10_500))
    log.append(replace(_included(reverted), ts=10_560))
    log.append(replace(_signed(3), ts=10_600))  # no receipt read yet
    assert ledger.recent_signing(9_000) == (10_000, True)
    assert ledger.recent_signing(10_001) == (None, True)
    log.append(replace(_included(acted(2_200, 3, Outcome.CONFIRMED)), ts=10_660))
    assert ledger.recent_signing(9_000) == (10_600, True)
    # a span that begins more than an hour after every line: the read stops at the newest line
    assert ledger.recent_signing(10_660 + 3_601) == (None, True)

"""The ledger file: append-only, torn tails cut, damage named, snapshot."""

from __future__ import annotations

import hashlib
import signal
import subprocess
import sys
import threading
from pathlib import Path

import orjson
import pytest

import journal
import memory.ledger as ml
from journal import JournalCorrupt
from memory.ledger import Acted, Amount, LastAct, Ledger, LedgerInvalidEntry, Outcome, Skipped
from tests._helpers.failpoints import child_env
from tests.conftest import run_python
from tests.ledger.test_entries import TOKEN_IN, TOKEN_OUT


def acted(ts: int, n: int, outcome: Outcome = Outcome.CONFIRMED) -> Acted:
    final = outcome is Outcome.CONFIRMED
    return Acted(
        ts=ts,
        block=None if outcome is Outcome.UNVERIFIED else 100 + n,
        chain_id=1,
        action="swap",
        permission=None,
        outcome=outcome,
        tx_hash=f"0x{n:064x}",
        gas_used=None if outcome is Outcome.UNVERIFIED else 50_000,
        token_in=TOKEN_IN,
        token_out=TOKEN_OUT,
        amount_in=Amount.of(25_000_000, 6, "USDC"),
        amount_out=Amount.of(10**16, 18, "WETH") if final else None,
        balances_after={TOKEN_IN: 1, TOKEN_OUT: 2} if final else None,
    )


def skipped(ts: int) -> Skipped:
    return Skipped(ts=ts, block=ts, chain_id=1, reason=ml.balance_reason(1, 2))


def write(ledger: Ledger, *entries: ml.Entry) -> None:
    with ledger.writer() as w:
        for e in entries:
            w.append(e)


def test_entries_are_appended_one_line_each_and_read_back_in_order(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / ".sail")
    entries = [skipped(1), acted(2, 1), skipped(3)]
    write(ledger, *entries[:2])
    write(ledger, entries[2])
    assert ledger.path == tmp_path / ".sail" / "memory" / "ledger.jsonl"
    assert ledger.entries() == entries
    assert list(ledger.iter_reverse()) == entries[::-1]
    assert ledger.path.read_bytes().count(b"\n") == 3


def test_appending_something_that_is_not_an_entry_writes_nothing(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    with ledger.writer() as w, pytest.raises(LedgerInvalidEntry):
        w.append({"ts": 1})  # type: ignore[arg-type]
    assert ledger.entries() == []


def test_a_missing_ledger_reads_as_empty(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    assert ledger.entries() == []
    assert ledger.last_confirmed() is None


def test_last_confirmed_ignores_reverted_unverified_and_skips(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    write(ledger, acted(10, 1), acted(20, 2, Outcome.REVERTED), acted(30, 3, Outcome.UNVERIFIED), skipped(40))
    assert ledger.last_confirmed() == LastAct(ts=10, block=101, tx_hash=f"0x{1:064x}")


def test_last_confirmed_comes_from_the_ledger_in_a_fresh_process(tmp_path: Path) -> None:
    write(Ledger(tmp_path), acted(10, 1), skipped(11), acted(12, 2), skipped(13))
    out = run_python(
        "import sys, memory.ledger as m; print(m.Ledger(sys.argv[1]).last_confirmed().ts)", str(tmp_path)
    )
    assert (out.returncode, out.stdout.strip()) == (0, "12")


def test_a_torn_last_line_is_cut_at_the_next_locked_open_and_the_next_append_is_clean(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    write(ledger, acted(1, 1))
    whole = ledger.path.read_bytes()
    with ledger.path.open("ab") as f:
        f.write(ml.LedgerCodec().encode(skipped(2))[:30])  # an append that never returned
    assert ledger.entries() == [acted(1, 1)]  # a reader does not see the torn tail
    write(ledger, skipped(3))
    assert ledger.path.read_bytes() == whole + ml.LedgerCodec().encode(skipped(3)) + b"\n"
    assert ledger.entries() == [acted(1, 1), skipped(3)]


_APPENDER = """
import sys, memory.ledger as m
ledger = m.Ledger(sys.argv[1])
i = 0
while True:
    i += 1
    with ledger.writer() as w:
        w.append(m.Skipped(ts=i, block=i, chain_id=1, reason="balance 1 < min " + "9" * 3000))
"""


@pytest.mark.slow
def test_appends_killed_mid_flight_leave_only_whole_lines_after_recovery(tmp_path: Path) -> None:
    env = child_env("linelog.before_fsync=sleep2")
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", _APPENDER, str(tmp_path)], env=env)
        try:
            deadline = 200
            while deadline and (
                not Ledger(tmp_path).path.exists() or Ledger(tmp_path).path.stat().st_size < 10_000
            ):
                threading.Event().wait(0.05)
                deadline -= 1
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    ledger = Ledger(tmp_path)
    write(ledger, skipped(999_999))
    raw = ledger.path.read_bytes()
    assert raw.endswith(b"\n")
    lines = raw.split(b"\n")[:-1]
    assert [ml.LedgerCodec().decode(line) for line in lines] == ledger.entries()
    assert ledger.entries()[-1] == skipped(999_999)


def test_a_damaged_line_mid_file_fails_closed_naming_the_line(tmp_path: Path) -> None:
    sail = tmp_path / "damaged"
    ledger = Ledger(sail)
    write(ledger, skipped(1), skipped(2), skipped(3))
    lines = ledger.path.read_bytes().split(b"\n")
    wire = orjson.loads(lines[1])
    wire["note"] = "not in the schema"
    ledger.path.write_bytes(b"\n".join([lines[0], orjson.dumps(wire), *lines[2:]]))
    ledger = Ledger(sail)  # a fresh reader, as the next tick's process would be
    for read in (ledger.entries, lambda: list(ledger.iter_reverse())):
        with pytest.raises(JournalCorrupt) as info:
            read()
        assert (info.value.code, info.value.line, info.value.path) == ("journal_corrupt", 2, ledger.path)
    with pytest.raises(JournalCorrupt), ledger.writer():
        pass
    assert ledger.path.read_bytes().count(b"\n") == 3  # fails closed: nothing cut, nothing written


def test_a_schema_breaking_last_line_is_damage_not_a_tear(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "damaged")
    write(ledger, skipped(1))
    with ledger.path.open("ab") as f:
        f.write(b'{"ts":2,"kind":"skipped"}\n')
    with pytest.raises(JournalCorrupt) as info, ledger.writer():
        pass
    assert info.value.line == 2


def test_concurrent_writers_interleave_whole_lines(tmp_path: Path) -> None:
    def worker(base: int) -> None:
        ledger = Ledger(tmp_path)
        for i in range(25):
            write(ledger, skipped(base + i))

    threads = [threading.Thread(target=worker, args=(k * 1000,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(e.ts for e in Ledger(tmp_path).entries()) == sorted(
        k * 1000 + i for k in range(4) for i in range(25)
    )


# -- the snapshot -----------------------------------------------------------------------


def test_appending_keeps_the_snapshot_current(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    write(ledger, skipped(1), acted(5, 7), skipped(9))
    snap = orjson.loads(ledger.snapshot_path.read_bytes())
    assert snap["ledger"]["size"] == ledger.path.stat().st_size
    line = ledger.path.read_bytes().split(b"\n")[1]
    assert snap["lastConfirmed"] == {
        "ts": 5,
        "block": 107,
        "txHash": f"0x{7:064x}",
        "offset": ledger.path.read_bytes().index(line),
        "lineSha256": hashlib.sha256(line).hexdigest(),
        "signed": None,  # no dispatch_signed line for it in the activity log
        "backed": False,  # nor a dispatch_included line: written by hand, a claim
    }


def test_a_valid_snapshot_answers_without_reading_the_ledger_body(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    write(ledger, acted(5, 7), *[skipped(10 + i) for i in range(400)])
    # Corrupt the middle of the ledger where neither the snapshot's digests nor a tail read look:
    # a valid snapshot answers in O(1), so it never notices.
    raw = bytearray(ledger.path.read_bytes())
    mid = len(raw) // 2
    raw[mid : mid + 5] = b"#####"
    ledger.path.write_bytes(bytes(raw))
    assert ledger.last_confirmed() == LastAct(5, 107, f"0x{7:064x}")
    ledger.snapshot_path.unlink()
    with pytest.raises(JournalCorrupt):  # without it, the backward read reaches the damage
        ledger.last_confirmed()
    ledger.path.write_bytes(b"")  # leave no damaged ledger behind for the schema check


def test_a_deleted_snapshot_is_rebuilt_from_the_tail(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    write(ledger, acted(5, 7), skipped(6), acted(8, 9), skipped(10))
    ledger.snapshot_path.unlink()
    assert ledger.last_confirmed() == LastAct(8, 109, f"0x{9:064x}")
    assert orjson.loads(ledger.snapshot_path.read_bytes())["ledger"]["size"] == ledger.path.stat().st_size


def test_a_snapshot_that_lies_about_the_ledger_is_stale_and_never_outranks_it(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    write(ledger, acted(5, 7), skipped(6))
    snap = orjson.loads(ledger.snapshot_path.read_bytes())
    snap["lastConfirmed"]["ts"] = 999  # the file was edited by hand
    snap["ledger"]["tailSha256"] = "0" * 64
    ledger.snapshot_path.write_bytes(orjson.dumps(snap))
    assert ledger.last_confirmed() == LastAct(5, 107, f"0x{7:064x}")


def test_a_snapshot_of_another_ledger_is_stale(tmp_path: Path) -> None:
    a, b = Ledger(tmp_path / "a"), Ledger(tmp_path / "b")
    write(a, acted(5, 7), skipped(6))
    write(b, acted(50, 70), skipped(60))
    b.snapshot_path.write_bytes(a.snapshot_path.read_bytes())
    assert b.last_confirmed() == LastAct(50, 170, f"0x{70:064x}")


def test_a_ledger_that_grew_past_its_snapshot_is_caught_up(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    write(ledger, acted(5, 7), skipped(6))
    old_snapshot = ledger.snapshot_path.read_bytes()
    write(ledger, skipped(7), acted(8, 9), skipped(10))
    ledger.snapshot_path.write_bytes(old_snapshot)  # as if the process died before updating it
    assert ledger.last_confirmed() == LastAct(8, 109, f"0x{9:064x}")
    with ledger.writer():  # the next tick writes the caught-up snapshot back
        pass
    assert orjson.loads(ledger.snapshot_path.read_bytes())["ledger"]["size"] == ledger.path.stat().st_size


@pytest.mark.parametrize("junk", [b"", b"{", b"[]", b'{"version": 2}', b"\xff\xfe"])
def test_a_malformed_snapshot_is_rebuilt(tmp_path: Path, junk: bytes) -> None:
    ledger = Ledger(tmp_path)
    write(ledger, acted(5, 7), skipped(6))
    ledger.snapshot_path.write_bytes(junk)
    assert ledger.last_confirmed() == LastAct(5, 107, f"0x{7:064x}")


def test_a_ledger_rewritten_shorter_makes_the_snapshot_stale(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    write(ledger, acted(5, 7), skipped(6), acted(8, 9))
    first_two = b"".join(line + b"\n" for line in ledger.path.read_bytes().split(b"\n")[:2])
    ledger.path.write_bytes(first_two)
    # restored from a backup with its durable mark (a shorter file under the old mark is lost lines)
    journal.LineLog(ledger.path, ledger._codec)._set_watermark(len(first_two))
    assert ledger.last_confirmed() == LastAct(5, 107, f"0x{7:064x}")


# -- the package's face --------------------------------------------------------------------------


def test_importing_the_ledger_does_not_import_web3() -> None:
    out = run_python("import memory, memory.ledger, sys; assert 'web3' not in sys.modules, 'web3'")
    assert out.returncode == 0, out.stderr


def test_the_public_names_are_exactly_all() -> None:
    public = {n for n in dir(ml) if not n.startswith("_")} - {"annotations"}
    assert public == set(ml.__all__)


def test_a_writer_that_cannot_get_the_lock_in_time_is_busy_and_writes_nothing(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with Ledger(tmp_path).writer():
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        with pytest.raises(ml.LedgerBusy) as info, ledger.writer(timeout=0.2) as w:
            w.append(skipped(1))
        assert info.value.code == "ledger_busy"
    finally:
        release.set()
        holder.join()
    assert ledger.entries() == []


def test_last_confirmed_is_the_latest_by_time_when_an_older_dispatch_resolves_later(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    older = acted(100, 1, Outcome.UNVERIFIED)
    newer = acted(200, 2)
    resolved_older = acted(150, 1)  # mined at 150, its receipt read only after ``newer`` was ledgered
    write(ledger, older, skipped(160), newer, skipped(260))
    write(ledger, resolved_older, skipped(300))  # the snapshot is caught up over these two lines
    expected = LastAct(200, 102, f"0x{2:064x}")
    assert ledger.last_confirmed() == expected
    ledger.snapshot_path.unlink()
    assert ledger.last_confirmed() == expected  # through a backward read


@pytest.mark.parametrize(
    "field", ["gasUsed", "amountIn.baseUnits", "balancesAfter"], ids=["gas", "amount", "balance"]
)
def test_a_figure_of_more_digits_than_python_reads_is_named_damage_not_an_internal_error(
    tmp_path: Path, field: str
) -> None:
    """A decimal string past 4,300 digits is one Python will not read as an int: every reader failed
    with a bare ValueError (``internal_error``), never ``journal_corrupt`` naming the line."""
    sail = tmp_path / "damaged"
    ledger = Ledger(sail)
    write(ledger, acted(100, 1), acted(200, 2))
    lines = ledger.path.read_bytes().split(b"\n")
    wire = orjson.loads(lines[0])
    huge = "9" * 5000
    if field == "gasUsed":
        wire["gasUsed"] = huge
    elif field == "amountIn.baseUnits":
        wire["amountIn"]["baseUnits"] = huge
    else:
        wire["balancesAfter"] = {token: huge for token in wire["balancesAfter"]}
    ledger.path.write_bytes(b"\n".join([orjson.dumps(wire), *lines[1:]]))
    ledger = Ledger(sail)
    for read in (ledger.entries, lambda: list(ledger.iter_reverse()), ledger.last_confirmed):
        with pytest.raises(JournalCorrupt) as info:
            read()
        assert (info.value.code, info.value.line) == ("journal_corrupt", 1)
        assert "at most 100 digits" in str(info.value) and huge not in str(info.value)


def test_a_figure_of_more_than_100_digits_is_refused_on_write() -> None:
    with pytest.raises(LedgerInvalidEntry, match="at most 100 digits"):
        Amount.of(10**100, 6, "USDC")
    with pytest.raises(LedgerInvalidEntry, match="at most 100 digits"):
        acted(1, 1).__class__(**{**acted(1, 1).__dict__, "gas_used": 10**5000})
    assert Amount.of(10**100 - 1, 6, "USDC").base_units == 10**100 - 1

"""The free text an agent writes into its ledger and activity log is bounded when written.

A skip's reason of megabytes was one valid line, and every reader of the ledger (``sail why``, the
dashboard's agent page and its ``why`` API) carried it whole. A text longer than ``MAX_TEXT_CHARS``
is now refused at write time with the schema's code, nothing written; text from outside the agent (a
node's error) is cut to fit with a marker; a ledger written before the bound still reads.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from journal import LineLog
from memory.ledger import (
    MAX_TEXT_CHARS,
    Acted,
    ActivityCodec,
    ActivityInvalidRecord,
    ActivityLog,
    DispatchSettled,
    DispatchSubmitted,
    DispatchUnsent,
    Ledger,
    LedgerCodec,
    LedgerInvalidEntry,
    Outcome,
    Skipped,
    TickFinished,
    TokenMetadata,
    fit_text,
    quote_unavailable_reason,
    recent_skips,
)

CHAIN = 8453
TX = "0x" + "ab" * 32
ADDR = "0x" + "1a" * 20
TOO_LONG = "x" * (MAX_TEXT_CHARS + 1)


def _sail(tmp_path: Path) -> Path:
    sail = tmp_path / ".sail"
    (sail / "memory").mkdir(parents=True)
    return sail


def _bytes(path: Path) -> bytes:
    return path.read_bytes() if path.exists() else b""


def test_a_skip_reason_longer_than_the_bound_is_refused_with_its_code_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    ledger = Ledger(_sail(tmp_path))
    with ledger.writer() as writer:
        writer.append(Skipped(ts=1, block=1, chain_id=CHAIN, reason="r" * MAX_TEXT_CHARS))  # fits
    before = _bytes(ledger.path)
    with pytest.raises(LedgerInvalidEntry) as caught, ledger.writer() as writer:
        writer.append(Skipped(ts=2, block=2, chain_id=CHAIN, reason=TOO_LONG))
    assert caught.value.code == "ledger_invalid_entry" and caught.value.field == "reason"
    assert f"{MAX_TEXT_CHARS + 1} characters" in str(caught.value)
    assert _bytes(ledger.path) == before
    assert [len(s.reason) for s in recent_skips(ledger, 10)] == [MAX_TEXT_CHARS]


@pytest.mark.parametrize("field", ["action", "permission"])
def test_an_acted_entrys_action_or_permission_longer_than_the_bound_is_refused(
    tmp_path: Path, field: str
) -> None:
    ledger = Ledger(_sail(tmp_path))
    fields: dict[str, object] = {
        "ts": 1,
        "block": None,
        "chain_id": CHAIN,
        "action": "swap",
        "permission": None,
        "outcome": Outcome.UNVERIFIED,
        "tx_hash": TX,
        "gas_used": None,
        "token_in": None,
        "token_out": None,
        "amount_in": None,
        "amount_out": None,
        "balances_after": None,
        field: TOO_LONG,
    }
    with pytest.raises(LedgerInvalidEntry) as caught, ledger.writer() as writer:
        writer.append(Acted(**fields))  # type: ignore[arg-type]
    assert caught.value.field == field
    assert _bytes(ledger.path) == b""


@pytest.mark.parametrize(
    ("record", "field"),
    [
        (TickFinished(1, 7, "skipped", reason=TOO_LONG), "reason"),
        (TickFinished(1, 7, "failed", code="chain_unavailable", message=TOO_LONG), "message"),
        (TickFinished(1, 7, "failed", code=TOO_LONG), "code"),
        (DispatchSettled(1, "dispatch_reverted", TX, 5, 21_000, TOO_LONG), "reason"),
        (DispatchUnsent(1, TX, 0, TOO_LONG), "reason"),
        (TokenMetadata(1, ADDR, 6, TOO_LONG), "symbol"),
        (DispatchSubmitted(1, CHAIN, TX, ADDR, ADDR, "0x00", TOO_LONG, None), "action"),
    ],
)
def test_an_activity_record_with_a_text_longer_than_the_bound_is_refused_and_nothing_is_written(
    tmp_path: Path, record: object, field: str
) -> None:
    log = ActivityLog(_sail(tmp_path))
    log.append(TickFinished(0, 7, "skipped", reason="r" * MAX_TEXT_CHARS))  # fits
    before = _bytes(log.path)
    with pytest.raises(ActivityInvalidRecord) as caught:
        log.append(record)  # type: ignore[arg-type]
    assert caught.value.code == "activity_invalid_record" and caught.value.field == field
    assert _bytes(log.path) == before


def test_a_ledger_written_before_the_bound_still_reads_whole(tmp_path: Path) -> None:
    sail = _sail(tmp_path)
    ledger = Ledger(sail)
    huge = "h" * (3 * 1024 * 1024)
    # as a ledger written before the bound: the line log's own append, without the writer's check
    with LineLog(ledger.path, LedgerCodec()).locked() as log:
        log.append(Skipped(ts=1, block=1, chain_id=CHAIN, reason=huge))
    with LineLog(ActivityLog(sail).path, ActivityCodec()).locked() as log:
        log.append(TickFinished(2, 7, "skipped", reason=huge))
    assert [e.reason for e in ledger.entries() if isinstance(e, Skipped)] == [huge]
    assert [r.reason for r in ActivityLog(sail).read() if isinstance(r, TickFinished)] == [huge]
    with ledger.writer() as writer:  # and the agent goes on writing after it
        writer.append(Skipped(ts=3, block=2, chain_id=CHAIN, reason="cadence: ok"))
    assert [len(s.reason) for s in recent_skips(ledger, 10)] == [len("cadence: ok"), len(huge)]


def test_a_nodes_error_in_a_quote_skip_is_cut_to_fit_with_a_marker_and_the_skip_is_written(
    tmp_path: Path,
) -> None:
    message = "node says " + "e" * 10_000
    reason = quote_unavailable_reason(message)
    assert len(reason) == MAX_TEXT_CHARS
    assert reason.startswith("quote unavailable: node says eee")
    assert reason.endswith(f"… [cut: {len(message)} characters in all]")
    ledger = Ledger(_sail(tmp_path))
    with ledger.writer() as writer:
        writer.append(Skipped(ts=1, block=1, chain_id=CHAIN, reason=reason))
    assert recent_skips(ledger, 1)[0].reason == reason
    assert quote_unavailable_reason("timed  out\n") == "quote unavailable: timed out"  # short: as it was


def test_fit_text_keeps_a_text_that_fits_and_cuts_one_that_does_not_to_exactly_the_bound() -> None:
    assert fit_text("short") == "short"
    assert fit_text("a" * MAX_TEXT_CHARS) == "a" * MAX_TEXT_CHARS
    cut = fit_text("a" * (MAX_TEXT_CHARS + 1))
    assert len(cut) == MAX_TEXT_CHARS and cut.endswith(f"[cut: {MAX_TEXT_CHARS + 1} characters in all]")


def test_a_text_with_a_lone_surrogate_is_refused_with_its_code_and_outside_text_is_escaped(
    tmp_path: Path,
) -> None:
    # a lone surrogate (a byte that is not UTF-8, as Python reads it) made the append raise a bare
    # TypeError from the JSON encoder: an uncoded failure of the tick
    sail = _sail(tmp_path)
    with pytest.raises(LedgerInvalidEntry) as caught, Ledger(sail).writer() as writer:
        writer.append(Skipped(ts=1, block=1, chain_id=CHAIN, reason="bad \udcff byte"))
    assert caught.value.field == "reason" and "U+DCFF" in str(caught.value)
    with pytest.raises(ActivityInvalidRecord) as refused:
        ActivityLog(sail).append(TickFinished(1, 7, "failed", code="x", message="\ud800"))
    assert refused.value.field == "message"
    assert _bytes(Ledger(sail).path) == b"" and _bytes(ActivityLog(sail).path) == b""
    assert quote_unavailable_reason("node \udcff") == "quote unavailable: node \\udcff"

"""What the reorganisation check keeps in the snapshot: the block hash of the last confirmed act, a
``chain_reorged`` line that holds trading and its acknowledgement — the same whether caught up line by
line or rebuilt from the files, and held without asking the chain."""

from __future__ import annotations

import hashlib
from pathlib import Path

import orjson
import pytest

from memory.ledger import (
    RECENT_ACTS,
    ActivityLog,
    ChainReorged,
    DispatchIncluded,
    DispatchSigned,
    Ledger,
    Receipt,
    ReorgDetected,
    ReorgNotHeld,
    Snapshot,
    acknowledge_reorg,
    check_newest_act,
)
from tests.ledger.test_ledger import acted, skipped, write

AGENT, ROUTER = "0x" + "33" * 20, "0x" + "44" * 20
TX = f"0x{7:064x}"
BLOCK_HASH = "0x" + "ab" * 32


class NeverAsked:
    """A chain that must not be asked anything (the check answers from the files alone)."""

    def receipt(self, tx_hash: str, timeout: float) -> Receipt | None:
        raise AssertionError(f"the chain was asked for the receipt of {tx_hash}")

    def block_hash(self, block: int) -> str | None:
        raise AssertionError(f"the chain was asked for block {block}")


def _rebuilt(sail_dir: Path) -> Snapshot:
    (sail_dir / "memory" / "state.json").unlink()
    return Ledger(sail_dir).state(save=False)


def _ledgered_with_its_block(sail_dir: Path) -> Ledger:
    """A swap signed, its ``dispatch_included`` line, then its confirmed entry, each caught up apart."""
    ledger, activity = Ledger(sail_dir), ActivityLog(sail_dir)
    activity.append(DispatchSigned(1, 1, TX, 0, AGENT, ROUTER, "0x", "swap", None))
    ledger.state()
    activity.append(DispatchIncluded(4, 1, TX, 107, BLOCK_HASH, 1))
    assert [i.tx_hash for i in ledger.state().included] == [TX]  # kept while its dispatch is open
    write(ledger, acted(5, 7), skipped(6))
    return ledger


def test_the_last_acts_block_hash_is_kept_alike_caught_up_or_rebuilt(tmp_path: Path) -> None:
    ledger = _ledgered_with_its_block(tmp_path)
    caught_up = ledger.state()
    assert caught_up.anchor is not None
    assert (caught_up.anchor.tx_hash, caught_up.anchor.block, caught_up.anchor.block_hash) == (
        TX, 107, BLOCK_HASH,
    )  # fmt: skip
    assert caught_up.included == ()
    assert _rebuilt(tmp_path) == caught_up


def test_a_held_reorganisation_holds_every_tick_without_asking_the_chain_until_acknowledged(
    tmp_path: Path,
) -> None:
    ledger = _ledgered_with_its_block(tmp_path)
    activity = ActivityLog(tmp_path)
    activity.append(ReorgDetected(9, TX, 107, BLOCK_HASH, None, None, None, "gone"))
    for _ in range(2):
        with ledger.writer() as writer, pytest.raises(ChainReorged) as held:
            check_newest_act(writer, activity, NeverAsked(), clock=lambda: 10)
        assert (held.value.code, held.value.tx_hash, held.value.block) == ("chain_reorged", TX, 107)
        assert "sail ack-reorg" in str(held.value)
    assert _rebuilt(tmp_path).reorged == ledger.state().reorged
    assert ledger.state().reorged is not None

    with pytest.raises(ReorgNotHeld):  # it must name the held swap
        acknowledge_reorg(tmp_path, f"0x{8:064x}", clock=lambda: 11)
    assert acknowledge_reorg(tmp_path, TX, clock=lambda: 11).tx_hash == TX
    state = ledger.state()
    assert state.reorged is None and state.acknowledged is not None and state.acknowledged.tx_hash == TX
    assert _rebuilt(tmp_path) == state  # the acknowledgement folded before the act's line: the same
    with ledger.writer() as writer:  # the acknowledged act's place is not checked again
        check_newest_act(writer, activity, NeverAsked(), clock=lambda: 12)
    with pytest.raises(ReorgNotHeld):
        acknowledge_reorg(tmp_path, TX, clock=lambda: 13)


def test_a_snapshot_naming_a_line_that_is_not_the_held_one_is_rebuilt(tmp_path: Path) -> None:
    ledger = _ledgered_with_its_block(tmp_path)
    ActivityLog(tmp_path).append(ReorgDetected(9, TX, 107, BLOCK_HASH, None, None, None, "gone"))
    with ledger.writer() as writer:  # a tick's writer saves the snapshot as it ends
        honest = writer.refresh()
    snap = orjson.loads(ledger.snapshot_path.read_bytes())
    snap.pop("digest")
    snap["reorged"] = {**snap["reorged"], "offset": 0}  # the dispatch_signed line
    digest = hashlib.sha256(orjson.dumps(snap, option=orjson.OPT_SORT_KEYS)).hexdigest()
    ledger.snapshot_path.write_bytes(orjson.dumps({**snap, "digest": digest}))
    assert Ledger(tmp_path).state() == honest


def test_an_act_ledgered_without_its_block_hash_is_not_checked(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    write(ledger, acted(5, 7))  # as a ledger written before dispatch_included lines were
    assert ledger.state().anchor is None
    with ledger.writer() as writer:
        check_newest_act(writer, ActivityLog(tmp_path), NeverAsked(), clock=lambda: 10)


def _ledgered_acts(sail_dir: Path, count: int) -> Ledger:
    """``count`` swaps, each signed, its ``dispatch_included`` line, then its confirmed entry."""
    ledger, activity = Ledger(sail_dir), ActivityLog(sail_dir)
    for n in range(1, count + 1):
        tx = f"0x{n:064x}"
        activity.append(DispatchSigned(10 * n, 1, tx, n, AGENT, ROUTER, "0x", "swap", None))
        activity.append(DispatchIncluded(10 * n + 1, 1, tx, 100 + n, f"0x{n:064x}", 1))
        write(ledger, acted(10 * n + 2, n))
        ledger.state()  # caught up act by act
    return ledger


def test_the_last_acts_block_hashes_are_kept_alike_caught_up_or_rebuilt(tmp_path: Path) -> None:
    ledger = _ledgered_acts(tmp_path, RECENT_ACTS + 2)
    caught_up = ledger.state()
    assert [(a.tx_hash, a.block) for a in caught_up.anchors] == [
        (f"0x{n:064x}", 100 + n) for n in range(3, RECENT_ACTS + 3)
    ]  # the newest RECENT_ACTS, oldest first: the snapshot stays small whatever the ledger's length
    assert caught_up.anchor == caught_up.anchors[-1]
    assert _rebuilt(tmp_path) == caught_up


def test_an_acknowledged_earlier_act_is_not_checked_again_caught_up_or_rebuilt(tmp_path: Path) -> None:
    ledger = _ledgered_acts(tmp_path, 2)
    first = f"0x{1:064x}"
    activity = ActivityLog(tmp_path)
    activity.append(ReorgDetected(30, first, 101, f"0x{1:064x}", None, None, None, "gone"))
    with ledger.writer() as writer, pytest.raises(ChainReorged) as held:
        check_newest_act(writer, activity, NeverAsked(), clock=lambda: 31)
    assert str(held.value).startswith(f"the chain no longer holds an earlier ledgered swap {first}")
    acknowledge_reorg(tmp_path, first, clock=lambda: 32)
    state = ledger.state()
    assert [m.tx_hash for m in state.acked] == [first] and state.reorged is None
    assert _rebuilt(tmp_path) == state  # the acknowledgement folded before the act's line: the same

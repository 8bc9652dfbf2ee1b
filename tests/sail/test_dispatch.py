"""The signed dispatch, written ahead and resolved from the chain, against a real in-process EVM.

Each test sets up a state today's failure modes produce (a dispatch the process died with, a log
rewritten by hand, a node that refused, a node that cannot be read) and checks what the next ticks
do: never a second swap for one decision, the ledger's amounts from the chain, every resolution
kept in the activity log.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator

import orjson
import pytest
from web3 import Web3

from memory.ledger import (
    MAX_TEXT_CHARS,
    RESOLUTION_UNBORNE,
    Acted,
    ActivityLog,
    Amount,
    ChainReorged,
    DispatchDropped,
    DispatchIncluded,
    DispatchMismatch,
    DispatchSettled,
    DispatchSigned,
    DispatchUnsent,
    Outcome,
    Skipped,
    agent_state,
    reconcile,
)
from sail import SailSubmitFailed
from sail._chain import Chain
from sail._runner import Dispatched, Runner
from sail._strategy import Swap
from staging import _failpoints
from tests.sail.conftest import AMOUNT_IN, INTERVAL, World

UNSENT_AFTER = 600


@pytest.fixture
def failpoints() -> Iterator[None]:
    """Failpoints armed in this process by ``arm``; disarmed after the test."""
    yield
    os.environ.pop("FLOWS_FAILPOINTS", None)
    _failpoints.reset()


def arm(plan: str) -> None:
    os.environ["FLOWS_FAILPOINTS"] = plan
    _failpoints.reset()


def swaps_mined(world: World, before: int) -> int:
    """How many transactions the agent got mined since its nonce was ``before``."""
    return int(world.w3.eth.get_transaction_count(world.agent.address)) - before


def acted(world: World) -> list[tuple[str, Outcome]]:
    return [(e.tx_hash, e.outcome) for e in world.ledger().entries() if isinstance(e, Acted)]


def records(world: World, kind: type) -> list:
    return [r for r in ActivityLog(world.sail_dir).read() if isinstance(r, kind)]


def test_a_dispatch_signed_and_logged_but_never_sent_holds_the_next_trade_then_resolves_as_unsent(
    world: World, failpoints: None
) -> None:
    nonce = int(world.w3.eth.get_transaction_count(world.agent.address))
    arm("sail.logged=EIO")  # the process fails right after the write-ahead line, before sending
    with pytest.raises(OSError):
        world.tick(unsent_after_s=UNSENT_AFTER)
    arm("")
    (signed,) = records(world, DispatchSigned)
    assert signed.nonce == nonce and swaps_mined(world, nonce) == 0

    world.clock.now += 60  # the cadence would allow a swap (nothing confirmed), the dispatch does not
    held = world.tick(unsent_after_s=UNSENT_AFTER)
    assert held.dispatched is None and held.skipped is not None
    assert held.skipped.reason == f"unresolved dispatch {signed.tx_hash}, signed 60s ago"

    world.clock.now += UNSENT_AFTER  # its nonce still unused past the timeout: it was never broadcast
    resolved = world.tick(unsent_after_s=UNSENT_AFTER)
    (unsent,) = records(world, DispatchUnsent)
    assert (unsent.tx_hash, unsent.nonce) == (signed.tx_hash, nonce)
    assert "never broadcast" in unsent.reason
    assert resolved.reconciled == () and resolved.dispatched is not None  # now it trades, once
    world.clock.now += 60
    world.tick(unsent_after_s=UNSENT_AFTER)
    assert swaps_mined(world, nonce) == 1
    assert acted(world) == [(resolved.dispatched.tx_hash, Outcome.CONFIRMED)]  # nothing for the unsent one


def _resolved_as_unsent(world: World) -> DispatchSigned:
    """A swap signed but never logged as sent (its log line failed), resolved by a later tick as
    unsent; later ticks skip, so only reconcile acts."""
    arm("sail.logged=EIO")
    with pytest.raises(OSError):
        world.tick(unsent_after_s=UNSENT_AFTER)
    arm("")
    (signed,) = records(world, DispatchSigned)
    world.strategy_overrides["min_balance"] = 10**18  # later ticks skip: only reconcile matters
    world.clock.now += UNSENT_AFTER
    world.tick(unsent_after_s=UNSENT_AFTER)
    assert [u.tx_hash for u in records(world, DispatchUnsent)] == [signed.tx_hash]
    return signed


def test_an_unsent_dispatch_mined_after_all_is_ledgered_from_the_chain_and_the_next_trade_waits(
    world: World, failpoints: None
) -> None:
    nonce = int(world.w3.eth.get_transaction_count(world.agent.address))
    signed = _resolved_as_unsent(world)

    # A node that held the signed bytes broadcasts them after all (signing is deterministic).
    runner = Runner(Chain(world.w3), world.agent, ActivityLog(world.sail_dir), clock=world.clock)
    tx = dict(_rebuilt_tx(world, signed))
    raw = world.agent.sign_transaction(tx)
    assert Web3.to_hex(raw.hash) == signed.tx_hash
    world.w3.eth.send_raw_transaction(raw.raw_transaction)
    assert runner.agent == signed.sender

    world.clock.now += 60
    (entry,) = world.tick(unsent_after_s=UNSENT_AFTER).reconciled  # its nonce is consumed, by it
    assert (entry.tx_hash, entry.outcome) == (signed.tx_hash, Outcome.CONFIRMED)
    assert entry.amount_in is not None and entry.amount_in.base_units == AMOUNT_IN
    assert swaps_mined(world, nonce) == 1
    world.strategy_overrides.clear()
    world.clock.now += 60
    assert world.tick(unsent_after_s=UNSENT_AFTER).skipped.reason.startswith("cadence: ")  # type: ignore[union-attr]


def test_an_unsent_dispatch_mined_after_all_and_reverted_logs_its_revert_once_across_a_retry(
    world: World, failpoints: None
) -> None:
    signed = _resolved_as_unsent(world)
    # broadcast after all, into a router that has been emptied since: it is mined and reverts
    raw = world.agent.sign_transaction(dict(_rebuilt_tx(world, signed)))
    assert Web3.to_hex(raw.hash) == signed.tx_hash
    router = world.contract("SwapRouter", world.market.router)
    world.as_owner(router.functions.withdraw(world.market.weth, 100 * 10**18))
    world.w3.eth.send_raw_transaction(raw.raw_transaction)

    world.clock.now += 60
    arm("ledger.reconcile_before_append=EIO")  # the revert is logged, then the tick fails
    with pytest.raises(OSError):
        world.tick(unsent_after_s=UNSENT_AFTER)
    arm("")
    world.clock.now += 60
    (entry,) = world.tick(unsent_after_s=UNSENT_AFTER).reconciled
    assert (entry.tx_hash, entry.outcome) == (signed.tx_hash, Outcome.REVERTED)
    reverts = [r for r in records(world, DispatchSettled) if r.tx_hash == signed.tx_hash]
    assert [r.event for r in reverts] == ["dispatch_reverted"]  # once


def _rebuilt_tx(world: World, signed: DispatchSigned) -> dict:
    """The transaction the runner signed, rebuilt from its write-ahead line and the chain."""
    block = world.w3.eth.get_block(world.w3.eth.block_number)
    return {
        "to": Web3.to_checksum_address(signed.to),
        "data": signed.data,
        "nonce": signed.nonce,
        "gas": 300_000,
        "maxFeePerGas": 2 * int(block["baseFeePerGas"]) + 10**9,
        "maxPriorityFeePerGas": 10**9,
        "chainId": signed.chain_id,
        "value": 0,
        "type": 2,
    }


def test_a_pending_dispatch_is_unverified_once_and_no_second_swap_is_sent_while_it_is(world: World) -> None:
    tester = world.w3.provider.ethereum_tester  # type: ignore[attr-defined]
    tester.disable_auto_mine_transactions()
    nonce = int(world.w3.eth.get_transaction_count(world.agent.address))
    sent = world.tick(receipt_timeout=0.2).dispatched
    assert sent is not None and sent.settled is None
    for step in range(3):  # long past the interval: the cadence allows a swap every time
        world.clock.now += INTERVAL + 1
        result = world.tick(reconcile_wait_s=0.1, receipt_timeout=0.2)
        assert result.dispatched is None, f"tick {step} sent a second swap for one decision"
        assert result.skipped is not None and result.skipped.reason.startswith(
            f"unresolved dispatch {sent.tx_hash}"
        )
    assert acted(world) == [(sent.tx_hash, Outcome.UNVERIFIED)]  # said once, and nothing else
    tester.enable_auto_mine_transactions()
    tester.mine_blocks(1)
    world.clock.now += 60
    world.strategy_overrides["min_balance"] = 10**18  # (the tick's clock is far past the block's time)
    (resolved,) = world.tick().reconciled
    assert (resolved.tx_hash, resolved.outcome) == (sent.tx_hash, Outcome.CONFIRMED)
    assert swaps_mined(world, nonce) == 1


def _mined_with_a_rewritten_amount(world: World) -> tuple[Dispatched, bytes, bytes]:
    """A swap sent, then its calldata in the runner's log rewritten (amountIn 25 USDC becomes
    99 USDC), then mined: the sent dispatch, the amount as sent and as rewritten (hex)."""
    tester = world.w3.provider.ethereum_tester  # type: ignore[attr-defined]
    tester.disable_auto_mine_transactions()
    sent = world.tick(receipt_timeout=0.1).dispatched
    assert sent is not None
    path = ActivityLog(world.sail_dir).path
    data = path.read_bytes()
    old_amount, new_amount = f"{AMOUNT_IN:064x}".encode(), f"{99 * 10**6:064x}".encode()
    assert data.count(old_amount) == 2  # in dispatch_signed and dispatch_submitted
    path.write_bytes(data.replace(old_amount, new_amount))
    tester.enable_auto_mine_transactions()
    tester.mine_blocks(1)
    world.clock.now += 60
    return sent, old_amount, new_amount


def test_amount_in_comes_from_the_chain_and_a_rewritten_local_copy_is_an_error_in_the_activity_log(
    world: World,
) -> None:
    sent, old_amount, new_amount = _mined_with_a_rewritten_amount(world)
    (entry,) = world.tick().reconciled
    assert entry.amount_in is not None and entry.amount_in.to_wire() == {
        "baseUnits": "25000000",
        "human": "25.0 USDC",
    }
    (mismatch,) = records(world, DispatchMismatch)
    assert (mismatch.tx_hash, mismatch.field) == (sent.tx_hash, "data")
    assert new_amount.decode() in mismatch.local and old_amount.decode() in mismatch.chain


def test_a_megabyte_calldata_in_the_log_is_cut_in_its_mismatch_with_the_digest_of_the_whole(
    world: World,
) -> None:
    """The log's copy of a dispatch rewritten to a megabyte of calldata: its ``dispatch_mismatch``
    carried both copies whole (a megabyte line in the activity log, in every `sail` output quoting
    it); each copy is now at most ``MAX_TEXT_CHARS``, its start kept and the whole one's SHA-256."""
    tester = world.w3.provider.ethereum_tester  # type: ignore[attr-defined]
    tester.disable_auto_mine_transactions()
    sent = world.tick(receipt_timeout=0.1).dispatched
    assert sent is not None
    path = ActivityLog(world.sail_dir).path
    (signed,) = records(world, DispatchSigned)
    huge = signed.data + "00" * 2**19  # a megabyte of hex: still calldata
    path.write_bytes(path.read_bytes().replace(signed.data.encode(), huge.encode()))
    tester.enable_auto_mine_transactions()
    tester.mine_blocks(1)
    world.clock.now += 60
    (entry,) = world.tick().reconciled
    assert (entry.tx_hash, entry.outcome) == (sent.tx_hash, Outcome.CONFIRMED)
    (mismatch,) = records(world, DispatchMismatch)
    assert (mismatch.field, mismatch.chain) == ("data", signed.data.lower())  # short: kept whole
    digest = hashlib.sha256(huge.lower().encode()).hexdigest()
    assert len(mismatch.local) == MAX_TEXT_CHARS and huge.lower().startswith(mismatch.local.split("…")[0])
    assert mismatch.local.endswith(f"… [cut: {len(huge)} characters in all, sha256 {digest}]")
    (line,) = [x for x in path.read_bytes().splitlines() if b'"dispatch_mismatch"' in x]
    assert len(line) < 3 * MAX_TEXT_CHARS


def test_a_mismatch_is_logged_once_when_the_tick_that_found_it_dies_before_ledgering(
    world: World, failpoints: None
) -> None:
    sent, _, _ = _mined_with_a_rewritten_amount(world)
    arm("ledger.reconcile_before_append=EIO")  # the mismatch is logged, then the tick fails
    with pytest.raises(OSError):
        world.tick()
    arm("")
    assert len(records(world, DispatchMismatch)) == 1
    world.clock.now += 60
    (entry,) = world.tick().reconciled  # the retry ledgers it, and logs the same fact no second time
    assert entry.tx_hash == sent.tx_hash
    assert [(m.tx_hash, m.field) for m in records(world, DispatchMismatch)] == [(sent.tx_hash, "data")]


def test_a_logged_hash_of_another_accounts_transaction_is_refused_and_nothing_is_ledgered(
    world: World,
) -> None:
    tester = world.w3.provider.ethereum_tester  # type: ignore[attr-defined]
    tester.disable_auto_mine_transactions()
    sent = world.tick(receipt_timeout=0.1).dispatched
    assert sent is not None
    tester.enable_auto_mine_transactions()
    tester.mine_blocks(1)
    usdc = world.contract("TestToken", world.market.usdc)
    foreign = world.as_owner(usdc.functions.mint(world.owner, 1))["transactionHash"]
    path = ActivityLog(world.sail_dir).path
    path.write_bytes(path.read_bytes().replace(sent.tx_hash[2:].encode(), Web3.to_hex(foreign)[2:].encode()))
    world.clock.now += 60
    from memory.ledger import DispatchNotOurs

    with pytest.raises(DispatchNotOurs) as info:
        world.tick()
    assert info.value.code == "dispatch_not_ours" and world.owner in str(info.value)
    assert world.ledger().entries() == []
    (mismatch,) = records(world, DispatchMismatch)
    assert (mismatch.field, mismatch.chain) == ("from", world.owner)
    world.clock.now += 60
    with pytest.raises(DispatchNotOurs):  # every tick refuses it; the fact is in the log once
        world.tick()
    assert records(world, DispatchMismatch) == [mismatch]


def test_an_unverified_entry_keeps_the_trade_size_and_only_the_unknowable_is_null(world: World) -> None:
    # A swap sent without the tick (so no token metadata was logged), then the node goes away.
    runner = Runner(Chain(world.w3), world.agent, ActivityLog(world.sail_dir), clock=world.clock)
    sent = runner.submit(_swap(world))
    dead = Chain.connect("http://127.0.0.1:9", timeout=0.5)
    with world.ledger().writer() as w:
        (entry,) = reconcile(
            w, ActivityLog(world.sail_dir), dead, clock=lambda: world.clock.now, receipt_timeout=0
        )
    assert (entry.tx_hash, entry.outcome, entry.token_in) == (
        sent.tx_hash,
        Outcome.UNVERIFIED,
        world.market.usdc,
    )
    assert entry.amount_in is None  # the base units are known, but no token metadata was ever read
    # Once the token's metadata has been seen (any tick that trades logs it), the size is kept.
    world.clock.now += INTERVAL
    second = world.tick().dispatched  # reconciles the first, logs USDC's metadata, trades again
    assert second is not None
    with world.ledger().writer() as w:
        (again,) = reconcile(
            w, ActivityLog(world.sail_dir), dead, clock=lambda: world.clock.now, receipt_timeout=0
        )
    assert again.amount_in is not None and again.amount_in.to_wire() == {
        "baseUnits": str(AMOUNT_IN),
        "human": "25.0 USDC",
    }


def _swap(world: World) -> Swap:
    return Swap(
        router=world.market.router,
        token_in=world.market.usdc,
        token_out=world.market.weth,
        amount_in=AMOUNT_IN,
        amount_out_min=0,
        deadline=world.clock.now + 600,
        permission=None,
    )


def test_a_swap_the_node_refuses_is_logged_unsent_at_once_and_does_not_hold_the_next_trade(
    world: World,
) -> None:
    # The agent's gas money is taken away: the node refuses the signed swap.
    balance = int(world.w3.eth.get_balance(world.agent.address))
    fee = 21_000 * 2 * 10**9
    drain = world.agent.sign_transaction(
        {
            "to": world.owner,
            "value": balance - fee,
            "gas": 21_000,
            "maxFeePerGas": 2 * 10**9,
            "maxPriorityFeePerGas": 10**9,
            "nonce": int(world.w3.eth.get_transaction_count(world.agent.address)),
            "chainId": int(world.w3.eth.chain_id),
        }
    )
    world.w3.eth.wait_for_transaction_receipt(world.w3.eth.send_raw_transaction(drain.raw_transaction))
    with pytest.raises(SailSubmitFailed) as info:
        world.tick()
    assert info.value.code == "sail_submit_failed"
    (signed,) = records(world, DispatchSigned)
    (unsent,) = records(world, DispatchUnsent)
    assert unsent.tx_hash == signed.tx_hash and unsent.reason.startswith("refused by the node: ")
    world.w3.eth.send_transaction({"from": world.owner, "to": world.agent.address, "value": 10**18})
    world.clock.now += 1
    result = world.tick()
    assert result.dispatched is not None  # no timeout to wait out: the refusal resolved it


def test_a_revert_reason_is_decoded_kept_in_the_activity_log_and_shown_by_sail_ledger(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    router = world.contract("SwapRouter", world.market.router)
    world.as_owner(router.functions.withdraw(world.market.weth, 100 * 10**18))
    sent = world.tick().dispatched
    assert sent is not None
    world.clock.now += 1
    world.tick()
    reverts = [r for r in records(world, DispatchSettled) if r.tx_hash == sent.tx_hash]
    assert [(r.event, r.reason) for r in reverts] == [("dispatch_reverted", "INSUFFICIENT_BALANCE")]  # once
    from sail._cli import main

    assert main(["ledger", "--home", str(world.save_config())]) == 0
    out = capsys.readouterr().out
    (row,) = [line for line in out.splitlines() if "reverted" in line]
    assert "(reverted: INSUFFICIENT_BALANCE)" in row and f"{sent.tx_hash[:6]}…{sent.tx_hash[-4:]}" in row


def test_a_killed_runner_leaves_no_swap_unlogged_and_the_activity_log_orders_sign_before_send(
    world: World, failpoints: None
) -> None:
    """The write-ahead order, in process: a failure right after sending still leaves the signed line."""
    nonce = int(world.w3.eth.get_transaction_count(world.agent.address))
    arm("sail.sent=EIO")  # sent and mined, then the process fails before logging the submission
    with pytest.raises(OSError):
        world.tick()
    arm("")
    (signed,) = records(world, DispatchSigned)
    assert swaps_mined(world, nonce) == 1
    events = [
        orjson.loads(raw)["event"] for raw in ActivityLog(world.sail_dir).path.read_bytes().splitlines()
    ]
    # logged before it was sent, nothing after
    assert events == ["token_metadata", "token_metadata", "dispatch_signed"]
    world.clock.now += 60
    result = world.tick()
    assert [(e.tx_hash, e.outcome) for e in result.reconciled] == [(signed.tx_hash, Outcome.CONFIRMED)]
    assert isinstance(world.ledger().entries()[-1], Skipped) and swaps_mined(world, nonce) == 1


def _forge_last_confirmed(world: World, value: object) -> None:
    """Rewrite the snapshot's lastConfirmed and recompute its digest, as a careful hand would."""
    import hashlib

    path = world.ledger().snapshot_path
    snap = orjson.loads(path.read_bytes())
    snap.pop("digest")
    snap["lastConfirmed"] = value
    digest = hashlib.sha256(orjson.dumps(snap, option=orjson.OPT_SORT_KEYS)).hexdigest()
    path.write_bytes(orjson.dumps({**snap, "digest": digest}))


@pytest.mark.parametrize("forged", [False, True], ids=["by-hand", "digest-recomputed"])
def test_a_last_confirmed_edited_to_null_never_causes_a_swap_inside_the_interval(
    world: World, forged: bool
) -> None:
    nonce = int(world.w3.eth.get_transaction_count(world.agent.address))
    world.tick()
    world.clock.now += 60
    world.tick()
    last = world.ledger().last_confirmed()  # counted from its signing (the world's clock runs ahead)
    assert last is not None
    if forged:
        _forge_last_confirmed(world, None)
    else:
        path = world.ledger().snapshot_path
        path.write_bytes(path.read_bytes().replace(b'"lastConfirmed": {', b'"lastConfirmed": null, "x": {'))
    world.clock.now = last.since + INTERVAL - 60
    result = world.tick()
    assert result.dispatched is None and swaps_mined(world, nonce) == 1
    assert (
        result.skipped is not None
        and result.skipped.reason == f"cadence: last acted {INTERVAL - 60}s ago, interval {INTERVAL}s"
    )


@pytest.mark.parametrize("forged", [False, True], ids=["by-hand", "digest-recomputed"])
def test_a_last_confirmed_edited_to_a_later_time_never_causes_a_false_skip(
    world: World, forged: bool
) -> None:
    world.tick()
    world.clock.now += 60
    (entry,) = world.tick().reconciled
    last = world.ledger().last_confirmed()
    assert last is not None
    snap = orjson.loads(world.ledger().snapshot_path.read_bytes())
    later = {**snap["lastConfirmed"], "ts": entry.ts + 10 * INTERVAL}
    if forged:
        _forge_last_confirmed(world, later)
    else:
        snap["lastConfirmed"] = later
        world.ledger().snapshot_path.write_bytes(orjson.dumps(snap))
    world.clock.now = last.since + INTERVAL
    assert world.tick().dispatched is not None  # one interval after the real act: it trades


def test_a_dispatch_line_replayed_after_its_swap_was_ledgered_is_never_ledgered_again(world: World) -> None:
    """A ``dispatch_signed`` line appended again after its swap was ledgered (a duplicated line, a log
    restored over a newer one) opened the dispatch again in the caught-up snapshot, and reconcile
    ledgered the same transaction a second time; a rebuild, which folds the whole activity log
    before the ledger, knew it was resolved."""
    nonce = int(world.w3.eth.get_transaction_count(world.agent.address))
    sent = world.tick().dispatched
    assert sent is not None
    world.clock.now += 60
    assert [e.tx_hash for e in world.tick().reconciled] == [sent.tx_hash]
    path = world.sail_dir / "activity.jsonl"
    (line,) = [raw for raw in path.read_bytes().splitlines(keepends=True) if b'"dispatch_signed"' in raw]
    with path.open("ab") as log:
        log.write(line)

    world.clock.now += 60
    again = world.tick()
    assert again.reconciled == () and again.dispatched is None
    assert again.skipped is not None and again.skipped.reason.startswith("cadence: last acted ")
    assert acted(world) == [(sent.tx_hash, Outcome.CONFIRMED)]  # once: the chain holds one swap
    assert swaps_mined(world, nonce) == 1
    assert world.ledger().state().open == ()  # the tick's rebuilt snapshot: nothing awaits reconcile


def _forge_dropped(world: World, tx_hash: str, nonce: int) -> None:
    """A ``dispatch_dropped`` line nobody's reconcile wrote: the log's bytes are untrusted."""
    ActivityLog(world.sail_dir).append(DispatchDropped(world.clock.now, tx_hash, nonce, "forged"))


def test_a_forged_dropped_line_for_a_pending_swap_neither_frees_the_next_trade_nor_hides_the_swap(
    world: World,
) -> None:
    """A crafted ``dispatch_dropped`` took a pending swap off the watch list: the next tick swapped
    again beside it, and the first swap, mined, was never ledgered. The line is a claim: its nonce
    still free, the dispatch is resolved as an open one is (it holds the trade), and once mined it
    is ledgered from the chain."""
    tester = world.w3.provider.ethereum_tester  # type: ignore[attr-defined]
    tester.disable_auto_mine_transactions()
    nonce = int(world.w3.eth.get_transaction_count(world.agent.address))
    sent = world.tick(receipt_timeout=0.1).dispatched
    assert sent is not None
    _forge_dropped(world, sent.tx_hash, nonce)
    world.clock.now += INTERVAL + 1  # the cadence allows a swap: only the pending one may hold it
    held = world.tick(reconcile_wait_s=0.1, receipt_timeout=0.1)
    assert held.dispatched is None and held.skipped is not None
    assert held.skipped.reason.startswith(f"unresolved dispatch {sent.tx_hash}")
    status = agent_state(world.sail_dir, interval_s=INTERVAL, clock=world.clock)
    assert status["blockedBy"]["kind"] == "dispatch" and sent.tx_hash in status["blockedBy"]["reason"]
    tester.enable_auto_mine_transactions()
    tester.mine_blocks(1)
    world.strategy_overrides["min_balance"] = 10**18  # only reconcile matters now
    world.clock.now += 60
    (entry,) = world.tick().reconciled
    assert (entry.tx_hash, entry.outcome) == (sent.tx_hash, Outcome.CONFIRMED)
    assert swaps_mined(world, nonce) == 1
    assert [e.tx_hash for e in world.ledger().entries() if isinstance(e, Acted)] == [
        sent.tx_hash,
        sent.tx_hash,
    ]  # unverified while pending, then confirmed


def test_a_swap_mined_after_a_dropped_line_is_ledgered_from_the_chain_not_written_off(
    world: World, failpoints: None
) -> None:
    """A ``dispatch_dropped`` line for a swap that was in fact mined (a forged line, or one a
    reorganisation undid): the swap is on chain, so the ledger must say so, and the next trade waits
    for the cadence from it."""
    nonce = int(world.w3.eth.get_transaction_count(world.agent.address))
    arm("sail.submitted=EIO")  # the swap leaves and is mined; the tick dies before its receipt is read
    with pytest.raises(OSError):
        world.tick()
    arm("")
    (signed,) = records(world, DispatchSigned)
    assert swaps_mined(world, nonce) == 1
    _forge_dropped(world, signed.tx_hash, nonce)
    world.clock.now += 60
    result = world.tick()
    (entry,) = result.reconciled
    assert (entry.tx_hash, entry.outcome) == (signed.tx_hash, Outcome.CONFIRMED)
    assert result.skipped is not None and result.skipped.reason.startswith("cadence: ")
    assert swaps_mined(world, nonce) == 1
    world.clock.now += 60
    assert world.tick().reconciled == ()  # ledgered once: off the watch list for good
    state = world.ledger().state()
    assert (state.open, state.unsent, state.dropped) == ((), (), ())


def test_a_crafted_resolution_of_a_pending_swap_holds_the_next_trade_and_no_second_swap_is_mined(
    world: World,
) -> None:
    """Two appended lines, made without the key from public chain data, resolved a swap still in the
    node's pool: a ``dispatch_included`` naming the real head block (number and hash) with status 0,
    and a ``reverted`` ledger line there. The reorganisation check believed the block's hash (no
    receipt, the block unchanged), a revert holds no cadence, and the next tick signed a second swap
    beside the first: both mined for one decision. The chain has not used the first one's nonce, so
    no receipt backs the pair: it holds the next trade, and says why."""
    tester = world.w3.provider.ethereum_tester  # type: ignore[attr-defined]
    tester.disable_auto_mine_transactions()
    nonce = int(world.w3.eth.get_transaction_count(world.agent.address))
    sent = world.tick(receipt_timeout=0.1).dispatched
    assert sent is not None
    (signed,) = records(world, DispatchSigned)
    head = world.w3.eth.get_block("latest")
    block_hash = head["hash"].to_0x_hex()
    ActivityLog(world.sail_dir).append(
        DispatchIncluded(world.clock.now, signed.chain_id, sent.tx_hash, head["number"], block_hash, 0)
    )
    forged = Acted(
        ts=int(head["timestamp"]), block=head["number"], chain_id=signed.chain_id, action="swap",
        permission=signed.permission, outcome=Outcome.REVERTED, tx_hash=sent.tx_hash, gas_used=51400,
        token_in=world.market.usdc, token_out=world.market.weth, amount_in=Amount(AMOUNT_IN, "25.0 USDC"),
        amount_out=None, balances_after=None,
    )  # fmt: skip
    with world.ledger().writer() as writer:
        writer.append(forged)
    assert world.ledger().state().open == ()  # the files alone resolve it
    for _ in range(2):  # past the interval: only the pending swap may hold the trade
        world.clock.now += INTERVAL + 1
        held = world.tick(reconcile_wait_s=0.1, receipt_timeout=0.1)
        assert held.dispatched is None, "a second swap was signed beside the pending one"
        assert held.skipped is not None
        assert held.skipped.reason.startswith(f"unresolved dispatch {sent.tx_hash}")
        assert held.skipped.reason.endswith(RESOLUTION_UNBORNE)
    status = agent_state(world.sail_dir, interval_s=INTERVAL, clock=world.clock)
    assert status["blockedBy"]["kind"] == "dispatch" and sent.tx_hash in status["blockedBy"]["reason"]
    assert [d["state"] for d in status["dispatches"] if d["txHash"] == sent.tx_hash] == ["claimed"]
    tester.enable_auto_mine_transactions()
    tester.mine_blocks(1)
    assert swaps_mined(world, nonce) == 1
    world.clock.now += 60
    with pytest.raises(ChainReorged):  # mined after all, not where the crafted pair said: a person looks
        world.tick()
    assert swaps_mined(world, nonce) == 1

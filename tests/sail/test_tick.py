"""The tick and reconcile against a real in-process EVM."""

from __future__ import annotations

import hashlib
import json
import threading

import orjson
import pytest

from memory.ledger import (
    Acted,
    ActivityInvalidRecord,
    ActivityLog,
    ChainReorged,
    DispatchSettled,
    DispatchSigned,
    DispatchSubmitted,
    Ledger,
    Outcome,
    Skipped,
    TokenMetadata,
    acknowledge_reorg,
    agent_state,
    cadence_reason,
    reconcile,
)
from sail._chain import Chain
from sail._deploy import DEFAULT_RATE, deploy_contract
from sail._runner import Runner
from sail._strategy import Swap
from tests.sail.conftest import AMOUNT_IN, INTERVAL, World

EXPECTED_OUT = AMOUNT_IN * DEFAULT_RATE // 10**18  # 0.01 WETH


def act_and_reconcile(world: World) -> Acted:
    """Tick once (submits), move on past nothing, tick again (reconciles, then cadence-skips)."""
    first = world.tick()
    assert first.dispatched is not None
    world.clock.now += 1
    second = world.tick()
    assert len(second.reconciled) == 1
    return second.reconciled[0]


def test_a_confirmed_swap_is_ledgered_with_exact_amounts_and_balances_that_match_balance_of(
    world: World,
) -> None:
    usdc_before, weth_before = world.balance(world.market.usdc), world.balance(world.market.weth)
    entry = act_and_reconcile(world)
    receipt = world.w3.eth.get_transaction_receipt(entry.tx_hash)
    block = world.w3.eth.get_block(receipt["blockNumber"])
    line = orjson.loads(world.ledger().path.read_bytes().split(b"\n")[0])
    assert line == {
        "ts": block["timestamp"],
        "block": receipt["blockNumber"],
        "chainId": world.w3.eth.chain_id,
        "kind": "acted",
        "action": "swap",
        "permission": "perm-dca-1",
        "outcome": "confirmed",
        "txHash": entry.tx_hash,
        "gasUsed": str(receipt["gasUsed"]),
        "tokenIn": world.market.usdc,
        "tokenOut": world.market.weth,
        "amountIn": {"baseUnits": "25000000", "human": "25.0 USDC"},
        "amountOut": {"baseUnits": str(EXPECTED_OUT), "human": "0.01 WETH"},
        "balancesAfter": {
            world.market.usdc: str(world.balance(world.market.usdc)),
            world.market.weth: str(world.balance(world.market.weth)),
        },
    }
    assert world.balance(world.market.usdc) == usdc_before - AMOUNT_IN
    assert world.balance(world.market.weth) == weth_before + EXPECTED_OUT


def test_the_submitting_tick_writes_nothing_to_the_ledger(world: World) -> None:
    result = world.tick()
    assert result.dispatched is not None and result.skipped is None
    assert world.ledger().entries() == []
    records = ActivityLog(world.sail_dir).read()
    assert [type(r) for r in records] == [
        TokenMetadata, TokenMetadata, DispatchSigned, DispatchSubmitted, DispatchSettled
    ]  # fmt: skip
    assert {r.tx_hash for r in records[2:]} == {result.dispatched.tx_hash}  # type: ignore[union-attr]
    assert records[4].event == "dispatch_executed"  # type: ignore[union-attr]


def test_a_reverted_swap_is_ledgered_with_nulls_where_the_schema_says(world: World) -> None:
    router = world.contract("SwapRouter", world.market.router)
    world.as_owner(router.functions.withdraw(world.market.weth, 100 * 10**18))  # nothing left to pay out
    usdc_before = world.balance(world.market.usdc)
    first = world.tick()
    assert first.dispatched is not None and first.dispatched.settled is not None
    assert first.dispatched.settled.event == "dispatch_reverted"
    world.clock.now += 1
    entry = world.tick().reconciled[0]
    receipt = world.w3.eth.get_transaction_receipt(entry.tx_hash)
    assert receipt["status"] == 0
    wire = entry.to_wire()
    assert wire["outcome"] == "reverted"
    assert (wire["amountOut"], wire["balancesAfter"]) == (None, None)
    assert wire["amountIn"] == {"baseUnits": "25000000", "human": "25.0 USDC"}
    assert (wire["gasUsed"], wire["block"]) == (str(receipt["gasUsed"]), receipt["blockNumber"])
    assert world.balance(world.market.usdc) == usdc_before  # nothing moved: nothing is claimed


def test_a_revert_on_amount_out_min_is_reverted_not_confirmed(world: World) -> None:
    chain = Chain(world.w3)
    runner = Runner(chain, world.agent, ActivityLog(world.sail_dir), clock=world.clock)
    swap = Swap(
        router=world.market.router,
        token_in=world.market.usdc,
        token_out=world.market.weth,
        amount_in=AMOUNT_IN,
        amount_out_min=EXPECTED_OUT + 1,
        deadline=world.clock.now + 600,
        permission=None,
    )
    sent = runner.submit(swap)
    with world.ledger().writer() as w:
        (entry,) = reconcile(
            w, ActivityLog(world.sail_dir), chain, clock=lambda: world.clock.now, receipt_timeout=1
        )
    assert (entry.tx_hash, entry.outcome, entry.permission) == (sent.tx_hash, Outcome.REVERTED, None)


def test_a_rising_balance_after_a_revert_cannot_be_claimed_by_a_later_confirmed_swap(world: World) -> None:
    """A confirmed swap after a reverted one is ledgered with its own amounts only."""
    router = world.contract("SwapRouter", world.market.router)
    world.as_owner(router.functions.withdraw(world.market.weth, 100 * 10**18))
    world.tick()
    weth = world.contract("TestToken", world.market.weth)
    world.as_owner(weth.functions.mint(world.market.router, 10**18))
    world.clock.now += 1
    second = world.tick()  # reconciles the revert; no confirmed act yet, so it swaps again
    assert [e.outcome for e in second.reconciled] == [Outcome.REVERTED]
    assert second.dispatched is not None
    world.clock.now += 1
    (confirmed,) = world.tick().reconciled
    assert confirmed.outcome is Outcome.CONFIRMED
    assert confirmed.amount_out is not None and confirmed.amount_out.base_units == EXPECTED_OUT


def test_an_unverified_dispatch_is_ledgered_once_and_later_resolved_as_a_new_entry(world: World) -> None:
    tester = world.w3.provider.ethereum_tester  # type: ignore[attr-defined]
    tester.disable_auto_mine_transactions()
    sent = world.tick(receipt_timeout=0.2).dispatched
    assert sent is not None and sent.settled is None  # the runner saw no receipt in time
    world.strategy_overrides["min_balance"] = 10**18  # later ticks skip: only reconcile matters
    world.clock.now += 1
    (unverified,) = world.tick(reconcile_wait_s=0.2).reconciled
    assert unverified.to_wire() == {
        "ts": world.clock.now,
        "block": None,
        "chainId": world.w3.eth.chain_id,
        "kind": "acted",
        "action": "swap",
        "permission": "perm-dca-1",
        "outcome": "unverified",
        "txHash": sent.tx_hash,
        "gasUsed": None,
        "tokenIn": world.market.usdc,
        "tokenOut": world.market.weth,
        "amountIn": {"baseUnits": "25000000", "human": "25.0 USDC"},
        "amountOut": None,
        "balancesAfter": None,
    }
    world.clock.now += 1
    assert world.tick(reconcile_wait_s=0.2).reconciled == ()  # still unreadable: no second line
    tester.enable_auto_mine_transactions()
    tester.mine_blocks(1)
    world.clock.now += 1
    (resolved,) = world.tick(reconcile_wait_s=2).reconciled
    assert (resolved.tx_hash, resolved.outcome) == (sent.tx_hash, Outcome.CONFIRMED)
    assert resolved.amount_out is not None and resolved.amount_out.base_units == EXPECTED_OUT
    acted = [(e.tx_hash, e.outcome) for e in world.ledger().entries() if isinstance(e, Acted)]
    assert acted == [(sent.tx_hash, Outcome.UNVERIFIED), (sent.tx_hash, Outcome.CONFIRMED)]
    assert world.ledger().last_confirmed().tx_hash == sent.tx_hash  # type: ignore[union-attr]


def test_a_swap_sent_with_an_empty_permission_id_is_ledgered_with_null_not_stuck(world: World) -> None:
    """A dispatch signed with permission "" (a config that allowed it) went on chain, and every
    later tick failed to ledger it (ledger_invalid_entry: the schema wants a non-empty id or null):
    a real trade never recorded, and the agent stuck behind it."""
    first = world.tick(permission="")
    assert first.dispatched is not None
    world.clock.now += 1
    second = world.tick(permission="")
    assert [(e.tx_hash, e.outcome, e.permission) for e in second.reconciled] == [
        (first.dispatched.tx_hash, Outcome.CONFIRMED, None)
    ]
    assert world.ledger().state().open == ()


def test_a_token_bought_whose_symbol_cannot_be_recorded_fails_the_tick_before_anything_is_sent(
    world: World,
) -> None:
    """The bought token's metadata was first read by reconcile, after the swap: a symbol the ledger
    refuses (here with a space) left a confirmed trade on chain that every later tick failed to
    ledger. It is read and logged before signing now, so the tick fails with nothing sent."""
    odd = deploy_contract(world.w3, world.owner, "TestToken", "Odd Ether", "W ETH", 18)
    router = world.contract("SwapRouter", world.market.router)
    world.as_owner(router.functions.setRate(world.market.usdc, odd.address, DEFAULT_RATE))
    world.as_owner(odd.functions.mint(world.market.router, 10**21))
    nonce = world.w3.eth.get_transaction_count(world.agent.address)
    for _ in range(2):
        with pytest.raises(ActivityInvalidRecord) as caught:
            world.tick(token_out=odd.address)
        assert caught.value.code == "activity_invalid_record"
        world.clock.now += 1
    assert world.w3.eth.get_transaction_count(world.agent.address, "pending") == nonce
    assert world.balance(odd.address) == 0
    assert world.ledger().state().open == ()
    assert not list(ActivityLog(world.sail_dir).scan(frozenset({"dispatch_signed"})))


def test_a_token_whose_symbol_is_bytes32_is_traded_and_ledgered_under_that_symbol(world: World) -> None:
    """Some mainnet tokens (MKR) answer symbol() with a bytes32, not a string; its metadata is read
    before signing, so a reader that takes only a string would fail every tick of such a pair."""
    mkr = deploy_contract(
        world.w3, world.owner, "Bytes32Token", b"Maker".ljust(32, b"\0"), b"MKR".ljust(32, b"\0"), 18
    )
    router = world.contract("SwapRouter", world.market.router)
    world.as_owner(router.functions.setRate(world.market.usdc, mkr.address, DEFAULT_RATE))
    world.as_owner(mkr.functions.mint(world.market.router, 10**21))
    sent = world.tick(token_out=mkr.address).dispatched
    assert sent is not None
    world.clock.now += 1
    (entry,) = world.tick(token_out=mkr.address).reconciled
    assert entry.outcome is Outcome.CONFIRMED and entry.amount_out is not None
    assert entry.amount_out.to_wire()["human"].endswith(" MKR")
    assert world.ledger().state().tokens[mkr.address.lower()] == (18, "MKR")


@pytest.mark.parametrize(
    "symbol",
    [b"\0" * 32, b"M KR".ljust(32, b"\0"), b"\xff\xfeMKR".ljust(32, b"\0")],
    ids=["empty", "space", "not-utf8"],
)
def test_a_bytes32_symbol_the_ledger_cannot_keep_fails_the_tick_before_anything_is_sent(
    world: World, symbol: bytes
) -> None:
    """Empty, with a space, or not UTF-8: the symbol rules of a string symbol, not a node error."""
    odd = deploy_contract(world.w3, world.owner, "Bytes32Token", b"Odd".ljust(32, b"\0"), symbol, 18)
    router = world.contract("SwapRouter", world.market.router)
    world.as_owner(router.functions.setRate(world.market.usdc, odd.address, DEFAULT_RATE))
    world.as_owner(odd.functions.mint(world.market.router, 10**21))
    nonce = world.w3.eth.get_transaction_count(world.agent.address)
    with pytest.raises(ActivityInvalidRecord) as caught:  # the symbol, not the node, is the trouble
        world.tick(token_out=odd.address)
    assert caught.value.code == "activity_invalid_record" and caught.value.field == "symbol"
    assert world.w3.eth.get_transaction_count(world.agent.address, "pending") == nonce
    assert not list(ActivityLog(world.sail_dir).scan(frozenset({"dispatch_signed"})))


def test_reconciling_twice_ledgers_one_entry(world: World) -> None:
    world.tick()
    chain, activity = Chain(world.w3), ActivityLog(world.sail_dir)
    for _ in range(2):
        with Ledger(world.sail_dir).writer() as w:
            reconcile(w, activity, chain, clock=lambda: world.clock.now, receipt_timeout=1)
    assert len(world.ledger().entries()) == 1


def test_concurrent_reconciles_ledger_one_entry(world: World) -> None:
    world.tick()
    barrier = threading.Barrier(4)
    results: list[int] = []

    def run() -> None:
        chain, activity = Chain(world.w3), ActivityLog(world.sail_dir)
        barrier.wait()
        with Ledger(world.sail_dir).writer() as w:
            results.append(
                len(reconcile(w, activity, chain, clock=lambda: world.clock.now, receipt_timeout=1))
            )

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [0, 0, 0, 1]
    assert len(world.ledger().entries()) == 1


def test_a_transfer_from_a_look_alike_contract_is_not_counted(world: World) -> None:
    router = world.contract("SwapRouter", world.market.router)
    world.as_owner(router.functions.setEcho(world.market.lookalike))
    entry = act_and_reconcile(world)
    receipt = world.w3.eth.get_transaction_receipt(entry.tx_hash)
    emitters = {log["address"] for log in receipt["logs"]}
    assert world.market.lookalike in emitters  # the look-alike did emit a Transfer to the agent
    assert entry.amount_out is not None and entry.amount_out.base_units == EXPECTED_OUT
    assert entry.balances_after is not None
    assert entry.balances_after[world.market.weth] == world.balance(world.market.weth) == EXPECTED_OUT


# -- cadence and skips -----------------------------------------------------------


def test_cadence_is_honoured_from_the_last_confirmed_act_in_the_ledger(world: World) -> None:
    act_and_reconcile(world)
    last = world.ledger().last_confirmed()
    assert last is not None and last.signed_ts is not None  # the world's clock: a little ahead
    skips = [e for e in world.ledger().entries() if isinstance(e, Skipped)]
    assert [s.reason for s in skips] == [cadence_reason(world.clock.now - last.since, INTERVAL)]
    world.clock.now = last.since + INTERVAL - 1
    assert world.tick().skipped is not None
    world.clock.now = last.since + INTERVAL
    assert world.tick().dispatched is not None


def test_a_last_act_stamped_ahead_of_the_ticks_clock_is_said_to_be_ahead_not_0s_ago(world: World) -> None:
    """The chain stamps an act with its block's time; when that runs ahead of the tick's clock (a
    dev chain moved forward, as after ``sail demo``), the cadence skip says how far ahead it is."""
    entry = act_and_reconcile(world)
    last = world.ledger().last_confirmed()
    assert last is not None and last.since >= entry.ts
    world.clock.now = last.since - 7200  # this machine's clock: two hours behind the act's time
    skipped = world.tick().skipped
    assert skipped is not None
    assert skipped.reason == (
        f"cadence: last acted 7200s ahead of this tick's clock (the chain's clock runs ahead of it), "
        f"interval {INTERVAL}s"
    )
    assert "0s ago" not in skipped.reason


def test_a_chain_clock_behind_the_ticks_counts_the_cadence_from_the_signing_not_every_tick(
    world: World,
) -> None:
    """A chain whose clock runs two hours behind this machine's stamps the act two hours back.
    Counted from that stamp, every tick found the interval long past and swapped: one swap a tick.
    The cadence counts from the later of the block's time and the signing."""
    world.clock.now += 7200  # this machine's clock: two hours ahead of the chain's
    signed_at = world.clock.now
    first = world.tick()
    assert first.dispatched is not None
    world.clock.now += 60
    second = world.tick()
    [entry] = second.reconciled
    assert entry.outcome is Outcome.CONFIRMED and entry.ts < signed_at - 3600  # the chain's stamp
    assert second.dispatched is None and second.skipped is not None
    assert second.skipped.reason == cadence_reason(60, INTERVAL)
    last = world.ledger().last_confirmed()
    assert last is not None and (last.ts, last.signed_ts, last.since) == (entry.ts, signed_at, signed_at)
    status = agent_state(world.sail_dir, interval_s=INTERVAL, clock=world.clock)
    assert status["nextEligibleMs"] == (signed_at + INTERVAL) * 1000  # what `sail status` says
    assert status["lastConfirmed"]["signedMs"] == signed_at * 1000
    world.clock.now = signed_at + INTERVAL - 1
    assert world.tick().skipped is not None
    world.clock.now = signed_at + INTERVAL
    assert world.tick().dispatched is not None


def test_a_snapshot_forged_to_drop_the_signing_time_does_not_let_a_chain_behind_swap_again(
    world: World,
) -> None:
    """The O(1) checks cannot see a signing time removed (with the digest recomputed): null is what
    an act with no signing line has. Before a swap the tick reads the activity log's tail over the
    interval, finds the mined swap it signed there, rebuilds, and skips."""
    world.clock.now += 7200
    signed_at = world.clock.now
    assert world.tick().dispatched is not None
    world.clock.now += 60
    assert world.tick().skipped is not None  # reconciled, then the cadence
    ledger = world.ledger()
    snap = orjson.loads(ledger.snapshot_path.read_bytes())
    assert snap["lastConfirmed"]["signed"]["ts"] == signed_at
    forged = {**snap, "lastConfirmed": {**snap["lastConfirmed"], "signed": None}}
    forged.pop("digest")
    digest = hashlib.sha256(orjson.dumps(forged, option=orjson.OPT_SORT_KEYS)).hexdigest()
    ledger.snapshot_path.write_bytes(orjson.dumps({**forged, "digest": digest}))
    world.clock.now += 60
    third = world.tick()
    assert third.dispatched is None and third.skipped is not None
    assert third.skipped.reason == cadence_reason(120, INTERVAL)
    assert orjson.loads(ledger.snapshot_path.read_bytes())["lastConfirmed"]["signed"]["ts"] == signed_at


def test_a_copy_of_the_last_confirmed_line_takes_no_signing_time_away(world: World) -> None:
    """A second final line of one dispatch (a line copied, replayed) knows no signing: its dispatch
    is no longer watched. Taken as the last act, it dropped the signing time, and with a chain
    behind this clock the next tick swapped 120 s after the last. The latest signing of every
    confirmed act counts, and a mined swap the activity log shows signed within the interval holds
    the trade whatever the ledger says."""
    world.clock.now += 7200
    signed_at = world.clock.now
    assert world.tick().dispatched is not None
    world.clock.now += 60
    assert world.tick().skipped is not None  # reconciled, then the cadence
    path = world.ledger().path
    confirmed = [line for line in path.read_bytes().splitlines() if b'"confirmed"' in line][-1]
    with path.open("ab") as fh:
        fh.write(confirmed + b"\n")
    last = world.ledger().last_confirmed()
    assert last is not None and last.signed_ts == signed_at
    world.clock.now += 60
    third = world.tick()
    assert third.dispatched is None and third.skipped is not None
    assert third.skipped.reason == cadence_reason(120, INTERVAL)
    world.ledger().snapshot_path.unlink()  # rebuilt from the files alike
    last = world.ledger().last_confirmed()
    assert last is not None and last.signed_ts == signed_at


def test_an_act_mined_with_an_earlier_block_time_than_the_last_still_counts_from_its_signing(
    world: World,
) -> None:
    """The chain's clock goes back (the agent's node moved forward, then reorganised onto a branch
    whose clock runs ten hours behind, acknowledged): the next act is stamped before the last one,
    which stays the last by block time. Its signing was never counted, and every tick swapped."""
    tester = world.w3.provider.ethereum_tester  # type: ignore[attr-defined]
    branch = tester.take_snapshot()
    world.clock.now += 10 * 3600
    tester.time_travel(world.clock.now)  # the chain in step with this clock
    start = world.clock.now
    first = world.tick().dispatched
    assert first is not None
    world.clock.now += 60
    assert world.tick().skipped is not None
    tester.revert_to_snapshot(branch)  # a branch ten hours behind
    tester.mine_blocks(3)
    world.clock.now += 60
    with pytest.raises(ChainReorged):
        world.tick()
    acknowledge_reorg(world.sail_dir, first.tx_hash, clock=lambda: world.clock.now)
    world.clock.now = start + INTERVAL + 100
    assert world.tick().dispatched is not None  # the next act, due
    signed_at = world.clock.now
    for _ in range(3):
        world.clock.now += 60
        held = world.tick()
        assert held.dispatched is None and held.skipped is not None
    last = world.ledger().last_confirmed()
    assert last is not None and last.tx_hash == first.tx_hash  # the latest by block time
    assert last.signed_ts == signed_at and last.since == signed_at


def test_a_reverted_act_does_not_count_for_cadence(world: World) -> None:
    router = world.contract("SwapRouter", world.market.router)
    world.as_owner(router.functions.withdraw(world.market.weth, 100 * 10**18))
    world.tick()
    world.clock.now += 1
    assert world.ledger().last_confirmed() is None
    second = world.tick()
    assert second.reconciled[0].outcome is Outcome.REVERTED
    assert second.skipped is None and second.dispatched is not None  # no cadence skip


@pytest.mark.parametrize(
    ("setup", "overrides", "reason"),
    [
        ("none", {"min_balance": 10**12}, "balance 500000000 < min 1000000000000"),
        ("none", {"amount_in": 600 * 10**6, "min_balance": 0}, "balance 500000000 < min 600000000"),
        ("revoke", {}, "allowance 0 < 25000000 for {router} — owner top-up needed"),
        ("none", {"token_out": "lookalike"}, "quote unavailable: execution reverted: NO_ROUTE"),
        ("rate1", {}, "quote returned 0"),
    ],
)
def test_every_skip_reason_is_ledgered_once_in_its_standard_form(
    world: World, setup: str, overrides: dict[str, object], reason: str
) -> None:
    if setup == "revoke":
        usdc = world.contract("TestToken", world.market.usdc)
        world.w3.eth.wait_for_transaction_receipt(
            usdc.functions.approve(world.market.router, 0).transact({"from": world.agent.address})
        )
    if setup == "rate1":
        router = world.contract("SwapRouter", world.market.router)
        world.as_owner(router.functions.setRate(world.market.usdc, world.market.weth, 1))
    if overrides.get("token_out") == "lookalike":
        overrides = {"token_out": world.market.lookalike}
    result = world.tick(**overrides)
    expected = reason.format(router=world.market.router)
    assert result.skipped is not None and result.dispatched is None
    (entry,) = world.ledger().entries()
    assert entry == Skipped(
        ts=world.clock.now, block=world.w3.eth.block_number, chain_id=world.w3.eth.chain_id, reason=expected
    )
    if reason.startswith(("balance", "allowance")):  # its figures are USDC's: the tick says so, once
        (metadata,) = ActivityLog(world.sail_dir).read()
        assert metadata == TokenMetadata(world.clock.now, world.market.usdc, 6, "USDC")
    else:
        assert ActivityLog(world.sail_dir).read() == []


def test_the_owner_reads_a_skips_figures_in_usdc_beside_the_base_units_the_ledger_keeps(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first tick skips on balance: no swap ever logged the token, yet every display names it."""
    world.tick(min_balance=10**12)
    world.clock.now += 60
    world.tick(min_balance=10**12)
    stored = "balance 500000000 < min 1000000000000"
    shown = "balance 500.0 USDC (500000000) < min 1000000.0 USDC"
    home = world.save_config(min_balance=10**12)
    lines = world.ledger().path.read_text().splitlines()
    assert [json.loads(line)["reason"] for line in lines] == [stored, stored]  # the ledger is as stored
    from sail._cli import main

    assert main(["why", "--home", str(home)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and all(line.endswith(f"  {shown}") for line in out)
    assert main(["why", "--home", str(home), "--json"]) == 0
    assert [s["reason"] for s in json.loads(capsys.readouterr().out)] == [stored, stored]
    assert main(["status", "--home", str(home)]) == 0
    out = capsys.readouterr().out
    assert f"next trade: blocked: {shown} (as of the tick at " in out
    assert main(["status", "--home", str(home), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["blockedBy"]["reason"] == stored
    assert main(["ledger", "--home", str(home)]) == 0
    assert capsys.readouterr().out.count(f"skipped  {shown}") == 2
    assert world.ledger().path.read_text().splitlines() == lines  # nothing was rewritten


def test_a_dispatch_whose_node_is_unreachable_is_unverified_then_resolved(world: World) -> None:
    sent = world.tick().dispatched
    assert sent is not None
    dead = Chain.connect("http://127.0.0.1:9", timeout=0.5)  # nothing listens on the discard port
    activity = ActivityLog(world.sail_dir)
    with world.ledger().writer() as w:
        (entry,) = reconcile(w, activity, dead, clock=lambda: world.clock.now, receipt_timeout=0.2)
    assert (entry.outcome, entry.block, entry.gas_used) == (Outcome.UNVERIFIED, None, None)
    assert (entry.token_in, entry.token_out) == (world.market.usdc, world.market.weth)  # from the calldata
    # the base units from the calldata, the human form from the metadata logged before the swap
    assert entry.amount_in is not None and entry.amount_in.to_wire() == {
        "baseUnits": "25000000",
        "human": "25.0 USDC",
    }
    with world.ledger().writer() as w:
        (resolved,) = reconcile(
            w, activity, Chain(world.w3), clock=lambda: world.clock.now, receipt_timeout=1
        )
    assert (resolved.tx_hash, resolved.outcome) == (sent.tx_hash, Outcome.CONFIRMED)


def test_chain_read_failures_map_to_chain_unavailable_and_quotes_to_a_skip_reason() -> None:
    from memory.ledger import ChainUnavailable
    from sail._chain import QuoteUnavailable

    dead = Chain.connect("http://127.0.0.1:9", timeout=0.5)
    token, owner = "0x" + "11" * 20, "0x" + "22" * 20
    reads = [
        dead.head,
        dead.chain_id,
        lambda: dead.block_timestamp(1),
        lambda: dead.token_info(token),
        lambda: dead.balance_of(token, owner),
        lambda: dead.allowance(token, owner, owner),
        lambda: dead.receipt("0x" + "ab" * 32, 0),
    ]
    for read in reads:
        with pytest.raises(ChainUnavailable) as info:
            read()
        assert info.value.code == "chain_unavailable" and "rpc_url" in str(info.value)
    with pytest.raises(QuoteUnavailable):
        dead.quote(owner, 1, (token, owner))


def test_a_setup_transaction_that_reverts_is_sail_setup_failed_with_its_reason(world: World) -> None:
    """``sail init --embedded`` and ``sail demo`` set the market up with ``send``: a revert there is a
    coded error naming the call and the decoded reason, not an uncoded one."""
    from sail import SailSetupFailed
    from sail._deploy import send

    usdc = Chain(world.w3)._token(world.market.usdc)
    with pytest.raises(SailSetupFailed) as err:  # the agent holds far less than this
        send(world.w3, usdc.functions.transfer(world.owner, 10**30), world.agent.address)
    assert err.value.code == "sail_setup_failed"
    assert "transfer" in str(err.value) and "INSUFFICIENT_BALANCE" in str(err.value)
    assert "fresh chain" in str(err.value)

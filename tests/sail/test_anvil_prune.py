"""A node that keeps only recent state never sticks the agent (anvil ``--prune-history 16``).

Most hosted RPC nodes prune: they answer reads at the last few blocks' states only. A swap's
``acted`` entry is written by a later tick, often hundreds of blocks on; its balances are fresh reads
(the latest block when it is reconciled), so that tick works, and so do the ticks after it. Every
tick is ``python -m sail tick`` in a fresh process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from web3 import Web3

from memory.ledger import Acted, DispatchSettled, Ledger, Outcome
from sail._contracts import abi
from sail._deploy import send
from sail._node import AnvilNode, find_anvil
from tests.conftest import ROOT
from tests.sail.test_anvil_dispatch import AMOUNT, INTERVAL, Agent

pytestmark = pytest.mark.slow

KEPT = 16  # block states the node keeps
LATER = 200  # blocks mined between a swap and the tick that reconciles it


@pytest.fixture(scope="module")
def pruned() -> Iterator[AnvilNode]:
    """An anvil that keeps only the last ``KEPT`` blocks' states."""
    if find_anvil() is None and shutil.which("npm") is None:
        pytest.skip("anvil is not installed and npm is not on PATH, so it cannot be (npm ci installs it)")
    with AnvilNode(prune_history=KEPT) as node:
        yield node


def token(agent: Agent, address: str) -> Any:
    return agent.w3.eth.contract(address=Web3.to_checksum_address(address), abi=abi("TestToken"))


def balances(agent: Agent) -> dict[str, str]:
    return {
        t: str(token(agent, t).functions.balanceOf(agent.address).call())
        for t in (agent.market.usdc, agent.market.weth)
    }


def status(agent: Agent) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "sail", "status", "--json", "--home", str(agent.home)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_a_swap_reconciled_200_blocks_later_on_a_pruned_node_is_ledgered_and_ticks_go_on(
    pruned: AnvilNode, tmp_path: Path
) -> None:
    agent = Agent(pruned, tmp_path)
    first = agent.ok(0)
    assert first["submitted"] is not None
    swap_block = agent.w3.eth.get_transaction_receipt(first["submitted"])["blockNumber"]
    # the owner tops the agent up after its swap; then the chain moves on far past what the node keeps
    send(agent.w3, token(agent, agent.market.usdc).functions.mint(agent.address, 5 * 10**6), agent.owner)
    pruned.rpc("anvil_mine", hex(LATER))
    head = agent.w3.eth.block_number
    assert head - swap_block > KEPT
    with pytest.raises(Exception, match="BlockOutOfRange"):  # the node cannot read the swap's block
        token(agent, agent.market.usdc).functions.balanceOf(agent.address).call(block_identifier=swap_block)

    second = agent.ok(60)
    (entry,) = second["reconciled"]
    assert (entry["txHash"], entry["outcome"]) == (first["submitted"], "confirmed")
    assert entry["block"] == swap_block
    # balancesAfter: balanceOf at the latest block when reconciled, the owner's top-up included
    assert entry["balancesAfter"] == balances(agent)
    assert entry["balancesAfter"][agent.market.usdc] == str(agent.usdc0 - AMOUNT + 5 * 10**6)
    assert second["skipped"].startswith("cadence: last acted ")
    now = status(agent)
    assert (now["blockedBy"], now["dispatches"], now["failedTicksSinceSuccess"]) == (None, [], 0)
    assert now["lastConfirmed"]["txHash"] == first["submitted"]

    # ticks keep working: a swap one interval on, killed before its receipt was read, and one that
    # reverts (the owner pulled the router's WETH), each reconciled 200 blocks later
    acted_ts = Ledger(agent.home / ".sail").entries()[0].ts
    at = acted_ts - agent.t0 + INTERVAL + 10
    pruned.rpc("evm_setNextBlockTimestamp", agent.t0 + at)
    killed = agent.tick(at, failpoints="sail.submitted=kill")
    assert killed.returncode == -9, killed.stderr
    pruned.rpc("anvil_mine", hex(LATER))
    third = agent.ok(at + 60)
    assert [e["outcome"] for e in third["reconciled"]] == ["confirmed"]
    assert third["reconciled"][0]["balancesAfter"] == balances(agent)

    router_at = Web3.to_checksum_address(agent.market.router)
    router = agent.w3.eth.contract(address=router_at, abi=abi("SwapRouter"))
    held = token(agent, agent.market.weth).functions.balanceOf(agent.market.router).call()
    send(agent.w3, router.functions.withdraw(agent.market.weth, held), agent.owner)
    at += INTERVAL + 60
    pruned.rpc("evm_setNextBlockTimestamp", agent.t0 + at)
    killed = agent.tick(at, failpoints="sail.submitted=kill")  # the runner never read the revert
    assert killed.returncode == -9, killed.stderr
    pruned.rpc("anvil_mine", hex(LATER))
    fourth = agent.ok(at + 60)
    assert [e["outcome"] for e in fourth["reconciled"]] == ["reverted"]
    assert fourth["submitted"] is not None  # a revert holds nothing: it swaps again, and that reverts
    reverts = [r for r in agent.activity(DispatchSettled) if r.event == "dispatch_reverted"]
    # the reconciled one's replay needs the state before its block, gone: no reason, and no failure;
    # the runner read the new one's at once
    assert [(r.tx_hash, r.reason) for r in reverts] == [
        (fourth["reconciled"][0]["txHash"], None),
        (fourth["submitted"], "INSUFFICIENT_BALANCE"),
    ]
    pruned.rpc("anvil_mine", hex(LATER))
    fifth = agent.ok(at + 120)
    assert [e["outcome"] for e in fifth["reconciled"]] == ["reverted"]
    outcomes = [e.outcome for e in Ledger(agent.home / ".sail").entries() if isinstance(e, Acted)]
    assert outcomes == [Outcome.CONFIRMED, Outcome.CONFIRMED, Outcome.REVERTED, Outcome.REVERTED]
    assert status(agent)["failedTicksSinceSuccess"] == 0

"""A swap ledgered as reverted that a reorganisation mines again, this time taken by the chain.

A revert holds nothing: the agent swaps again. Should a reorganisation drop the reverted swap's
block and the same signed transaction be mined on the new branch, where it does not revert, the
chain holds a swap the ledger says failed, and the agent's next swap would be a second one. The
reorganisation check reads the recent reverted acts too (their ``dispatch_included`` line records
the status the chain gave): such an act is ``chain_reorged`` and holds trading until acknowledged.
(The in-process EVM's snapshots make the reorganisation.)
"""

from __future__ import annotations

from typing import Any

import pytest

from memory.ledger import Acted, ActivityLog, ChainReorged, DispatchIncluded, Outcome, ReorgDetected
from tests.sail.conftest import World


def _entries(world: World) -> list[Acted]:
    return [e for e in world.ledger().entries() if isinstance(e, Acted)]


def test_a_reverted_swap_mined_again_and_taken_on_another_branch_holds_trading(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    tester: Any = world.w3.provider.ethereum_tester  # type: ignore[attr-defined]
    branch = tester.take_snapshot()  # the chain before the router was emptied
    router = world.contract("SwapRouter", world.market.router)
    world.as_owner(router.functions.withdraw(world.market.weth, 100 * 10**18))
    sent: list[bytes] = []
    eth: Any = world.w3.eth
    send = eth.send_raw_transaction

    def seen(raw: bytes) -> Any:  # what the agent broadcasts, kept to mine it again
        sent.append(bytes(raw))
        return send(raw)

    monkeypatch.setattr(eth, "send_raw_transaction", seen)
    dispatched = world.tick().dispatched
    monkeypatch.undo()
    assert dispatched is not None and len(sent) == 1
    world.clock.now += 60
    world.tick()
    [reverted] = _entries(world)
    assert (reverted.tx_hash, reverted.outcome) == (dispatched.tx_hash, Outcome.REVERTED)
    [included] = [r for r in _included(world) if r.tx_hash == dispatched.tx_hash]
    assert included.status == 0

    # the reorganisation: back to before the router was emptied, the same signed swap mined there
    tester.revert_to_snapshot(branch)
    world.w3.eth.send_raw_transaction(sent[0])
    receipt = world.w3.eth.get_transaction_receipt(dispatched.tx_hash)  # type: ignore[arg-type]
    assert receipt["status"] == 1  # the chain now holds the swap the ledger says reverted
    tester.mine_blocks(3)
    ledger_before = (world.sail_dir / "memory" / "ledger.jsonl").read_bytes()

    world.clock.now += 60
    with pytest.raises(ChainReorged) as found:
        world.tick()
    assert (found.value.code, found.value.tx_hash) == ("chain_reorged", dispatched.tx_hash)
    [reorged] = [r for r in _activity(world) if isinstance(r, ReorgDetected)]
    assert (reorged.chain_status, reorged.chain_block) == (1, receipt["blockNumber"])
    assert (world.sail_dir / "memory" / "ledger.jsonl").read_bytes() == ledger_before  # no second swap


def _activity(world: World) -> list[Any]:
    return list(ActivityLog(world.sail_dir).read())


def _included(world: World) -> list[DispatchIncluded]:
    return [r for r in _activity(world) if isinstance(r, DispatchIncluded)]

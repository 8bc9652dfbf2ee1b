"""A reorganisation deeper than ``confirmations`` after ledgering, on a real node (anvil on loopback).

The chain is rolled back under a ledgered swap with ``evm_snapshot``/``evm_revert`` and a few blocks
mined on top: the next tick finds the newest ledgered act gone (``chain_reorged``), trades nothing,
and every tick after holds until ``sail ack-reorg``; then the agent trades again. A shallow
reorganisation before ledgering is still resolved from what the chain then says, and a node that
cannot be read is never taken for a reorganisation. An earlier swap gone while a newer one stands is
found too. The check costs one receipt request per recent act per tick
and reads no more of the files on a long ledger than on a short one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
from eth_account import Account
from web3 import Web3
from web3.exceptions import TransactionNotFound

from memory.ledger import (
    REORG_WINDOW_BLOCKS,
    Acted,
    ActivityLog,
    ChainReorged,
    ChainUnavailable,
    DispatchIncluded,
    DispatchSigned,
    Ledger,
    Outcome,
    ReorgDetected,
    Skipped,
    check_newest_act,
)
from sail._chain import Chain
from sail._config import SailConfig, save_config
from sail._deploy import Deployment, deploy_market
from sail._node import ANVIL_KEYS, AnvilNode
from sail._runner import Runner
from sail._strategy import DcaStrategy
from sail._tick import TickResult, tick
from tests.conftest import ROOT
from tests.sail.http_servers import serving

pytestmark = pytest.mark.slow

AMOUNT = 25 * 10**6
INTERVAL = 3600


class CountingChain(Chain):
    """A ``Chain`` over the node's JSON-RPC that counts the requests it makes, by method."""

    def __init__(self, url: str) -> None:
        super().__init__(Chain.connect(url).w3)
        self.calls: list[tuple[str, Any]] = []
        provider: Any = self.w3.provider
        make_request = provider.make_request

        def counted(method: Any, params: Any) -> Any:
            self.calls.append((str(method), params))
            return make_request(method, params)

        provider.make_request = counted


class Agent:
    """An agent home on its own freshly deployed market, ticked in this process over JSON-RPC
    (fresh objects each tick: nothing carried in memory between ticks)."""

    def __init__(self, anvil: AnvilNode, home: Path) -> None:
        self.anvil = anvil
        self.w3 = Web3(Web3.HTTPProvider(anvil.url))
        self.owner, self.address = self.w3.eth.accounts[0], self.w3.eth.accounts[1]
        self.market: Deployment = deploy_market(self.w3, self.owner, self.address)
        self.home = home
        self.sail_dir = home / ".sail"
        save_config(
            home,
            SailConfig(
                rpc_url=anvil.url,
                router=self.market.router,
                token_in=self.market.usdc,
                token_out=self.market.weth,
                amount_in=AMOUNT,
                interval_s=INTERVAL,
                min_balance=AMOUNT,
                permission="perm-r",
            ),
        )
        self.t0 = int(self.w3.eth.get_block("latest")["timestamp"])

    def tick(self, at: int, *, confirmations: int = 1, url: str | None = None) -> TickResult:
        return self.tick_on(CountingChain(url or self.anvil.url), at, confirmations=confirmations)

    def tick_on(self, chain: Chain, at: int, *, confirmations: int = 1) -> TickResult:
        now = self.t0 + at

        def clock() -> float:
            return float(now)

        runner = Runner(chain, Account.from_key(ANVIL_KEYS[1]), ActivityLog(self.sail_dir), clock=clock)
        strategy = DcaStrategy(
            router=self.market.router,
            token_in=self.market.usdc,
            token_out=self.market.weth,
            amount_in=AMOUNT,
            interval_s=INTERVAL,
            min_balance=AMOUNT,
            permission="perm-r",
        )
        return tick(
            self.sail_dir,
            strategy=strategy,
            chain=chain,
            runner=runner,
            clock=clock,
            reconcile_wait_s=2.0,
            confirmations=confirmations,
        )

    def lines(self) -> tuple[bytes, bytes]:
        """The ledger's and the activity log's bytes."""
        return (
            (self.sail_dir / "memory" / "ledger.jsonl").read_bytes(),
            (self.sail_dir / "activity.jsonl").read_bytes(),
        )

    def records(self, kind: type[Any]) -> list[Any]:
        return [r for r in ActivityLog(self.sail_dir).read() if isinstance(r, kind)]

    def confirmed(self) -> list[Acted]:
        return [e for e in Ledger(self.sail_dir).entries() if isinstance(e, Acted)]

    def swap_and_ledger(self, at: int) -> Acted:
        """A swap sent at ``at`` and ledgered confirmed by the tick after it; returns the entry."""
        sent = self.tick(at)
        assert sent.dispatched is not None and sent.skipped is None
        after = self.tick(at + 10)
        assert [e.tx_hash for e in after.reconciled] == [sent.dispatched.tx_hash]
        entry = after.reconciled[0]
        assert entry.outcome is Outcome.CONFIRMED
        return entry

    def cli(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sail", *argv, "--home", str(self.home)],
            env={**os.environ, "PYTHONPATH": str(ROOT), "SAIL_PRIVATE_KEY": ANVIL_KEYS[1]},
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )


def test_a_deep_reorganisation_under_a_ledgered_swap_holds_trading_until_acknowledged(
    anvil: AnvilNode, tmp_path: Path
) -> None:
    agent = Agent(anvil, tmp_path)
    before_swap = anvil.rpc("evm_snapshot")
    entry = agent.swap_and_ledger(0)
    assert entry.block is not None
    ledgered_hash = Web3.to_hex(agent.w3.eth.get_block(entry.block)["hash"])
    assert [(i.tx_hash, i.block, i.block_hash, i.chain_id) for i in agent.records(DispatchIncluded)] == [
        (entry.tx_hash, entry.block, ledgered_hash, 31337)
    ]
    # the chain rolls back below the ledgered swap, and goes on: the block at its number is another
    assert anvil.rpc("evm_revert", before_swap) is True
    anvil.rpc("anvil_mine", 3)
    assert Web3.to_hex(agent.w3.eth.get_block(entry.block)["hash"]) != ledgered_hash
    ledger_before, _ = agent.lines()
    signed_before = len(agent.records(DispatchSigned))

    with pytest.raises(ChainReorged) as found:
        agent.tick(INTERVAL + 100)  # due to trade by the clock: only the check holds it
    assert (found.value.code, found.value.tx_hash) == ("chain_reorged", entry.tx_hash)
    assert found.value.block == entry.block
    assert f"sail ack-reorg {entry.tx_hash}" in str(found.value)
    [reorged] = agent.records(ReorgDetected)
    receipt = agent.w3.eth.get_transaction_receipt(entry.tx_hash) if _known(agent, entry.tx_hash) else None
    assert (reorged.tx_hash, reorged.block, reorged.block_hash) == (entry.tx_hash, entry.block, ledgered_hash)
    assert reorged.chain_block == (None if receipt is None else receipt["blockNumber"])
    assert agent.lines()[0] == ledger_before  # nothing ledgered
    assert len(agent.records(DispatchSigned)) == signed_before  # nothing signed, nothing sent

    # every later tick holds and says why, without a second chain_reorged line; a fresh process too
    with pytest.raises(ChainReorged):
        agent.tick(INTERVAL + 200)
    done = agent.cli("tick", "--now", str(agent.t0 + INTERVAL + 300))
    assert done.returncode == 1
    assert done.stderr.startswith("sail: error[chain_reorged]: the chain no longer holds the newest ledgered")
    assert len(agent.records(ReorgDetected)) == 1 and agent.lines()[0] == ledger_before

    status = json.loads(agent.cli("status", "--json").stdout)
    assert status["chainReorged"]["txHash"] == entry.tx_hash
    held = status["chainReorged"]
    assert (held["block"], held["blockHash"]) == (entry.block, ledgered_hash)
    assert status["blockedBy"]["kind"] == "reorg" and status["nextEligibleMs"] is None
    assert status["lastTick"]["outcome"] == "failed" and status["lastTick"]["code"] == "chain_reorged"
    assert "next trade: held, every tick fails with chain_reorged" in agent.cli("status").stdout
    assert agent.cli("why").stdout.startswith("held: every tick fails with chain_reorged since ")

    # an acknowledgement must name the held swap; it is a new line, the ledger is not edited
    wrong = agent.cli("ack-reorg", "0x" + "ab" * 32)
    assert wrong.returncode == 1 and "error[reorg_not_held]" in wrong.stderr
    acked = agent.cli("ack-reorg", entry.tx_hash)
    assert acked.returncode == 0, acked.stderr
    assert agent.lines()[0] == ledger_before
    assert json.loads(agent.cli("status", "--json").stdout)["chainReorged"] is None
    row = next(line for line in agent.cli("ledger").stdout.splitlines() if entry.tx_hash[-4:] in line)
    note = f"chain_reorged: no longer in block {entry.block} as ledgered; reorganisation acknowledged"
    assert row.endswith(note)  # said beside the trade, whose line stays as written

    resumed = agent.tick(2 * INTERVAL + 100)
    assert resumed.dispatched is not None  # trading resumes
    again = agent.tick(2 * INTERVAL + 110)  # the new swap is ledgered, and is the act now checked
    assert [e.tx_hash for e in again.reconciled] == [resumed.dispatched.tx_hash]
    anchor = Ledger(agent.sail_dir).state().anchor
    assert anchor is not None and anchor.tx_hash == resumed.dispatched.tx_hash
    assert agent.cli("ack-reorg", entry.tx_hash).returncode == 1  # nothing held any more


def _known(agent: Agent, tx_hash: str) -> bool:
    try:
        return agent.w3.eth.get_transaction_receipt(tx_hash) is not None
    except TransactionNotFound:
        return False


def test_a_shallow_reorganisation_before_ledgering_is_resolved_from_the_chain_as_before(
    anvil: AnvilNode, tmp_path: Path
) -> None:
    agent = Agent(anvil, tmp_path)
    before_swap = anvil.rpc("evm_snapshot")
    sent = agent.tick(0, confirmations=3)
    assert sent.dispatched is not None
    held = agent.tick(10, confirmations=3)  # mined, not 3 deep yet: nothing ledgered
    assert held.reconciled == () and held.skipped is not None
    assert held.skipped.reason.startswith(f"unresolved dispatch {sent.dispatched.tx_hash}")
    assert anvil.rpc("evm_revert", before_swap) is True
    anvil.rpc("anvil_mine", 3)
    after = agent.tick(20, confirmations=3)  # a skip, as before: no chain_reorged, never an error
    assert after.skipped is not None
    assert agent.records(ReorgDetected) == [] and agent.records(DispatchIncluded) == []
    assert all(e.outcome is not Outcome.CONFIRMED for e in agent.confirmed())


def test_a_node_that_cannot_be_read_is_not_a_reorganisation(anvil: AnvilNode, tmp_path: Path) -> None:
    agent = Agent(anvil, tmp_path)
    agent.swap_and_ledger(0)
    with pytest.raises(ChainUnavailable) as failed:
        agent.tick(INTERVAL + 100, url="http://127.0.0.1:9")  # nothing listens there
    assert failed.value.code == "chain_unavailable"
    assert agent.records(ReorgDetected) == []
    with AnvilNode(chain_id=4242) as other:  # another chain's node: it knows nothing of the swap
        skipped = agent.tick(100, url=other.url).skipped
    assert skipped is not None and skipped.reason.startswith("cadence")
    assert agent.records(ReorgDetected) == []
    assert agent.tick(INTERVAL + 200).dispatched is not None  # the node back: it trades


class _NoReceipts(BaseHTTPRequestHandler):
    """Forwards JSON-RPC to the node, but answers every receipt request with null: a node that
    keeps no index of older transactions (as a node may, a year or so back)."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = json.loads(body)
        if request.get("method") == "eth_getTransactionReceipt":
            content = json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": None}).encode()
        else:
            upstream = self.server.upstream  # type: ignore[attr-defined]
            headers = {"Content-Type": "application/json"}
            content = requests.post(upstream, data=body, headers=headers, timeout=30).content
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_node_without_the_receipt_is_believed_by_the_block_hash_at_its_number(
    anvil: AnvilNode, tmp_path: Path
) -> None:
    agent = Agent(anvil, tmp_path)
    before_swap = anvil.rpc("evm_snapshot")
    agent.swap_and_ledger(0)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NoReceipts)
    server.upstream = anvil.url  # type: ignore[attr-defined]
    with serving(server) as url:
        # no receipt, but the block at its number is the one it was ledgered in: not a reorganisation
        skipped = agent.tick(100, url=url).skipped
        assert skipped is not None and skipped.reason.startswith("cadence")
        assert agent.records(ReorgDetected) == []
        assert anvil.rpc("evm_revert", before_swap) is True
        anvil.rpc("anvil_mine", 3)
        with pytest.raises(ChainReorged):  # another block there now: it is one
            agent.tick(200, url=url)
    [reorged] = agent.records(ReorgDetected)
    assert (reorged.chain_block, reorged.chain_block_hash, reorged.chain_status) == (None, None, None)


def test_the_check_costs_one_receipt_request_and_reads_no_more_of_a_long_ledger(
    anvil: AnvilNode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = Agent(anvil, tmp_path)
    entry = agent.swap_and_ledger(0)
    chain = CountingChain(anvil.url)
    result = agent.tick_on(chain, 100)
    assert isinstance(result.skipped, Skipped) and result.skipped.reason.startswith("cadence")
    receipts = [p for m, p in chain.calls if m == "eth_getTransactionReceipt"]
    assert receipts == [[entry.tx_hash]]  # one request: the newest ledgered act's receipt
    # a cadence skip: the head and chain id for its entry (as before), and that one request
    methods = sorted(m for m, _ in chain.calls)
    assert methods == ["eth_blockNumber", "eth_chainId", "eth_getTransactionReceipt"]

    def bytes_read_by_the_check() -> int:
        read = 0
        real = os.pread

        def counting(fd: int, size: int, offset: int) -> bytes:
            nonlocal read
            data = real(fd, size, offset)
            read += len(data)
            return data

        ledger = Ledger(agent.sail_dir)
        with ledger.writer() as writer:
            monkeypatch.setattr(os, "pread", counting)  # every read of the two files is a pread
            check_newest_act(writer, ActivityLog(agent.sail_dir), Chain.connect(anvil.url), clock=lambda: 0)
            monkeypatch.setattr(os, "pread", real)
        return read

    def grow(lines: int) -> None:  # long lines appended, the snapshot caught up
        with Ledger(agent.sail_dir).writer() as writer:
            for n in range(lines):
                reason = f"cadence: {n} " + "x" * 1_000
                writer.append(Skipped(ts=agent.t0 + 200 + n, block=None, chain_id=31337, reason=reason))

    grow(10)  # past the 4 KiB edges the snapshot's prefix check reads, whatever the length
    short = bytes_read_by_the_check()
    grow(2_000)
    assert (agent.sail_dir / "memory" / "ledger.jsonl").stat().st_size > 2_000_000
    assert bytes_read_by_the_check() == short


def _two_swaps(agent: Agent, anvil: AnvilNode) -> tuple[Acted, Acted]:
    """Two swaps ledgered confirmed, the second an interval after the first by the chain's clock too
    (so the tick that ledgers it sends no third)."""
    first = agent.swap_and_ledger(0)
    anvil.rpc("evm_setNextBlockTimestamp", agent.t0 + INTERVAL + 100)
    second = agent.swap_and_ledger(INTERVAL + 100)
    assert [e.tx_hash for e in agent.confirmed()] == [first.tx_hash, second.tx_hash]
    assert agent.records(DispatchSigned)[-1].tx_hash == second.tx_hash  # nothing else in flight
    return first, second


def test_an_earlier_swap_gone_while_a_newer_one_stands_is_found_and_holds_trading(
    anvil: AnvilNode, tmp_path: Path
) -> None:
    agent = Agent(anvil, tmp_path)
    before_first = anvil.rpc("evm_snapshot")
    first, second = _two_swaps(agent, anvil)
    assert first.block is not None and second.block is not None and first.block < second.block
    first_hash = Web3.to_hex(agent.w3.eth.get_block(first.block)["hash"])
    second_raw = anvil.rpc("eth_getRawTransactionByHash", second.tx_hash)
    first_nonce = agent.w3.eth.get_transaction(first.tx_hash)["nonce"]

    # the chain rolls back below the first swap; on the new branch another transaction takes its
    # nonce, and the second swap is mined again: the first is gone, the second still on the chain
    assert anvil.rpc("evm_revert", before_first) is True
    other = {"from": agent.address, "to": agent.address, "value": 0, "nonce": first_nonce}
    agent.w3.eth.send_transaction(other)  # type: ignore[arg-type]
    anvil.rpc("eth_sendRawTransaction", second_raw)
    anvil.rpc("anvil_mine", 3)
    assert not _known(agent, first.tx_hash)
    assert agent.w3.eth.get_transaction_receipt(second.tx_hash)["status"] == 1
    ledger_before, _ = agent.lines()
    signed_before = len(agent.records(DispatchSigned))

    with pytest.raises(ChainReorged) as found:
        agent.tick(2 * INTERVAL + 200)  # due to trade by the clock: only the check holds it
    assert (found.value.code, found.value.tx_hash) == ("chain_reorged", first.tx_hash)
    assert found.value.block == first.block
    assert str(found.value).startswith(f"the chain no longer holds an earlier ledgered swap {first.tx_hash}")
    [reorged] = agent.records(ReorgDetected)
    assert (reorged.tx_hash, reorged.block, reorged.block_hash) == (first.tx_hash, first.block, first_hash)
    assert (reorged.chain_block, reorged.chain_block_hash, reorged.chain_status) == (None, None, None)
    with pytest.raises(ChainReorged) as again:  # held, without a second line
        agent.tick(2 * INTERVAL + 300)
    assert again.value.tx_hash == first.tx_hash and len(agent.records(ReorgDetected)) == 1
    assert agent.lines()[0] == ledger_before and len(agent.records(DispatchSigned)) == signed_before

    # acknowledged, the next tick checks the others: the second swap, mined again in another block,
    # is not where it was ledgered either; acknowledged too, the agent trades again
    assert agent.cli("ack-reorg", first.tx_hash).returncode == 0
    with pytest.raises(ChainReorged) as moved:
        agent.tick(2 * INTERVAL + 400)
    assert moved.value.tx_hash == second.tx_hash
    assert str(moved.value).startswith(f"the chain no longer holds the newest ledgered swap {second.tx_hash}")
    assert agent.cli("ack-reorg", second.tx_hash).returncode == 0
    assert agent.tick(2 * INTERVAL + 500).dispatched is not None
    assert agent.lines()[0] == ledger_before


def test_an_earlier_swap_far_below_the_head_is_no_longer_asked_about(
    anvil: AnvilNode, tmp_path: Path
) -> None:
    agent = Agent(anvil, tmp_path)
    first, second = _two_swaps(agent, anvil)
    chain = CountingChain(anvil.url)
    assert agent.tick_on(chain, INTERVAL + 200).skipped is not None  # by the cadence
    receipts = [p for m, p in chain.calls if m == "eth_getTransactionReceipt"]
    assert receipts == [[first.tx_hash], [second.tx_hash]]  # oldest first, one request each
    assert second.block is not None
    anvil.rpc("anvil_mine", REORG_WINDOW_BLOCKS + first.block - second.block)  # the first just out of reach
    chain = CountingChain(anvil.url)
    assert agent.tick_on(chain, INTERVAL + 300).skipped is not None
    receipts = [p for m, p in chain.calls if m == "eth_getTransactionReceipt"]
    assert receipts == [[second.tx_hash]]  # the newest is asked about, whatever its depth

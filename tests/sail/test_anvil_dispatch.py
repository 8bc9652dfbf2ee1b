"""Exactly one swap per decision, across crashes, on a real node over JSON-RPC (anvil on loopback).

Every tick is ``python -m sail tick`` in a fresh process. The runner is killed (SIGKILL, through its
failpoints) at every point between signing a swap and logging its outcome; the JSON-RPC connection
dies right after the node accepted ``eth_sendRawTransaction``; the disk refuses the write-ahead line.
After the ticks that follow, the chain holds exactly one swap for the decision and the ledger one
confirmed entry for it — the transaction the chain mined.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
from web3 import Web3

from memory.ledger import (
    Acted,
    ActivityLog,
    DispatchSigned,
    DispatchUnsent,
    Ledger,
    Outcome,
    Skipped,
    TickFinished,
)
from sail._config import SailConfig, save_config
from sail._contracts import abi
from sail._deploy import Deployment, deploy_market
from sail._node import ANVIL_KEYS, AnvilNode
from tests.conftest import ROOT
from tests.sail.http_servers import serving

pytestmark = pytest.mark.slow

AMOUNT = 25 * 10**6
INTERVAL = 3600
UNSENT_AFTER = 600


class Agent:
    """An agent home on its own freshly deployed market, ticked by fresh ``sail`` processes."""

    def __init__(
        self, anvil: AnvilNode, home: Path, *, rpc_url: str | None = None, token_out: str = ""
    ) -> None:
        self.w3 = Web3(Web3.HTTPProvider(anvil.url))
        self.owner, self.address = self.w3.eth.accounts[0], self.w3.eth.accounts[1]
        self.market: Deployment = deploy_market(self.w3, self.owner, self.address)
        self.home = home
        save_config(
            home,
            SailConfig(
                rpc_url=rpc_url or anvil.url,
                router=self.market.router,
                token_in=self.market.usdc,
                token_out=token_out or self.market.weth,
                amount_in=AMOUNT,
                interval_s=INTERVAL,
                min_balance=AMOUNT,
                permission="perm-x",
                receipt_timeout_s=10.0,
                reconcile_wait_s=2.0,
                unsent_after_s=UNSENT_AFTER,
            ),
        )
        self.t0 = int(self.w3.eth.get_block("latest")["timestamp"])
        self.nonce0 = self.nonce()
        self.usdc0 = self.usdc()

    def nonce(self) -> int:
        return int(self.w3.eth.get_transaction_count(self.address))

    def usdc(self) -> int:
        token = self.w3.eth.contract(address=Web3.to_checksum_address(self.market.usdc), abi=abi("TestToken"))
        return int(token.functions.balanceOf(self.address).call())

    def tick(self, at: int, *, failpoints: str = "") -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "SAIL_PRIVATE_KEY": ANVIL_KEYS[1],
            "FLOWS_FAILPOINTS": failpoints,
        }
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "sail",
                "tick",
                "--json",
                "--home",
                str(self.home),
                "--now",
                str(self.t0 + at),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    def ok(self, at: int) -> dict:
        done = self.tick(at)
        assert done.returncode == 0, done.stderr
        result: dict = json.loads(done.stdout)
        return result

    def acted(self) -> list[tuple[str, Outcome]]:
        return [(e.tx_hash, e.outcome) for e in Ledger(self.home / ".sail").entries() if isinstance(e, Acted)]

    def activity(self, kind: type) -> list:
        return [r for r in ActivityLog(self.home / ".sail").read() if isinstance(r, kind)]

    def assert_one_swap(self) -> str:
        """Exactly one swap on chain since the agent was set up, ledgered once, as confirmed."""
        assert self.nonce() - self.nonce0 == 1, "the agent's transactions on chain"
        assert self.usdc0 - self.usdc() == AMOUNT, "USDC spent"
        ((tx_hash, outcome),) = self.acted()
        assert outcome is Outcome.CONFIRMED
        receipt = self.w3.eth.get_transaction_receipt(tx_hash)
        assert receipt["status"] == 1 and receipt["from"] == self.address
        return tx_hash


@pytest.mark.parametrize(
    "point", ["sail.signed", "sail.logged", "sail.sent", "sail.submitted", "sail.settled"]
)
def test_a_tick_killed_anywhere_between_signing_and_logging_leaves_exactly_one_swap_for_the_decision(
    anvil: AnvilNode, tmp_path: Path, point: str
) -> None:
    agent = Agent(anvil, tmp_path)
    killed = agent.tick(0, failpoints=f"{point}=kill")
    assert killed.returncode == -9, killed.stderr
    signed = agent.activity(DispatchSigned)
    assert len(signed) == (0 if point == "sail.signed" else 1)  # written ahead, or nothing was signed

    outcomes = [agent.ok(at) for at in (60, 120, UNSENT_AFTER + 200, UNSENT_AFTER + 260)]
    tx_hash = agent.assert_one_swap()
    if point == "sail.logged":  # signed and logged, never sent: held, then resolved as never sent
        assert outcomes[0]["skipped"] == f"unresolved dispatch {signed[0].tx_hash}, signed 60s ago"
        assert [u.tx_hash for u in agent.activity(DispatchUnsent)] == [signed[0].tx_hash]
        assert outcomes[2]["submitted"] == tx_hash != signed[0].tx_hash
    elif point != "sail.signed":  # it reached the chain: the next tick ledgers it, from the chain
        assert [e["txHash"] for e in outcomes[0]["reconciled"]] == [signed[0].tx_hash] == [tx_hash]
        assert all(o["submitted"] is None for o in outcomes)
    last = Ledger(agent.home / ".sail").entries()[-1]
    assert isinstance(last, Skipped) and last.reason.startswith("cadence: last acted ")


class _DropAfterSend(BaseHTTPRequestHandler):
    """Forwards JSON-RPC to the node; after forwarding ``eth_sendRawTransaction`` it hangs up unanswered."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        answer = requests.post(
            self.server.upstream, data=body, headers={"Content-Type": "application/json"}, timeout=30
        )  # type: ignore[attr-defined]
        method = json.loads(body).get("method") if body.startswith(b"{") else None
        if method == "eth_sendRawTransaction" and self.server.drops > 0:  # type: ignore[attr-defined]
            self.server.drops -= 1  # type: ignore[attr-defined]
            self.close_connection = True
            return  # the node has the transaction; the caller never hears so
        self.send_response(answer.status_code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)

    def log_message(self, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def proxy(anvil: AnvilNode) -> Iterator[ThreadingHTTPServer]:
    """A loopback JSON-RPC proxy in front of anvil that drops the first send's answer."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _DropAfterSend)
    server.upstream = anvil.url  # type: ignore[attr-defined]
    server.drops = 1  # type: ignore[attr-defined]
    with serving(server):
        yield server


def test_an_rpc_that_dies_right_after_accepting_the_swap_leaves_exactly_one_swap(
    anvil: AnvilNode, tmp_path: Path, proxy: ThreadingHTTPServer
) -> None:
    agent = Agent(anvil, tmp_path, rpc_url=f"http://127.0.0.1:{proxy.server_address[1]}")
    first = agent.tick(0)
    assert first.returncode == 1 and json.loads(first.stderr)["code"] == "sail_submit_uncertain"
    assert agent.nonce() - agent.nonce0 == 1  # the node had it, and mined it
    second = agent.ok(60)
    (signed,) = agent.activity(DispatchSigned)
    assert [e["txHash"] for e in second["reconciled"]] == [signed.tx_hash]
    assert second["submitted"] is None and second["skipped"].startswith("cadence: last acted ")
    agent.ok(120)
    assert agent.assert_one_swap() == signed.tx_hash
    ticks = [(t.outcome, t.code) for t in agent.activity(TickFinished)]
    assert ticks == [("failed", "sail_submit_uncertain"), ("skipped", None), ("skipped", None)]


def test_a_disk_that_refuses_the_write_ahead_line_sends_nothing(anvil: AnvilNode, tmp_path: Path) -> None:
    agent = Agent(anvil, tmp_path)
    assert agent.ok(0)["submitted"] is not None
    agent.ok(60)
    before = agent.nonce()
    refused = agent.tick(INTERVAL + 100, failpoints="linelog.before_append=ENOSPC")
    assert refused.returncode == 1 and json.loads(refused.stderr)["code"] == "journal_unwritable"
    assert agent.nonce() == before  # signed, refused by the disk, never sent
    assert len(agent.activity(DispatchSigned)) == 1
    again = agent.ok(INTERVAL + 160)
    assert again["submitted"] is not None and agent.nonce() == before + 1


def test_a_quote_the_router_refuses_reads_as_its_revert_reason_over_json_rpc(
    anvil: AnvilNode, tmp_path: Path
) -> None:
    agent = Agent(anvil, tmp_path)
    agent = Agent(anvil, tmp_path / "lookalike", token_out=agent.market.lookalike)
    assert agent.ok(0)["skipped"] == "quote unavailable: execution reverted: NO_ROUTE"

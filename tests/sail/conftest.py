"""Fixtures of the sail tests: a real EVM in process (eth-tester + py-evm) with the repo's contracts.

Every ledger a test leaves is held to the entry schema, line by line.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("web3", reason="the chain extra (web3[tester]) is not installed")

from eth_account import Account
from eth_account.signers.local import LocalAccount
from web3 import EthereumTesterProvider, Web3

from memory.ledger import ActivityLog, Ledger
from sail._chain import Chain
from sail._config import SailConfig, save_config
from sail._deploy import Deployment, deploy_market, send
from sail._node import AnvilNode, find_anvil
from sail._runner import Runner
from sail._strategy import DcaStrategy
from sail._tick import TickResult, tick
from tests.ledger.schema import assert_entry_schema

AGENT_KEY = "0x" + "00" * 31 + "02"  # eth-tester's second funded account
AMOUNT_IN = 25 * 10**6
INTERVAL = 3600


@dataclass
class Clock:
    """An injectable clock: unix seconds, moved only by the test."""

    now: int

    def __call__(self) -> float:
        return float(self.now)


@dataclass
class World:
    """One in-process chain with the market deployed, and an agent home in tmp_path."""

    w3: Web3
    owner: str
    agent: LocalAccount
    market: Deployment
    sail_dir: Path
    clock: Clock
    strategy_overrides: dict[str, Any] = field(default_factory=dict)

    def contract(self, name: str, address: str) -> Any:
        return Chain(self.w3).router(address) if name == "SwapRouter" else Chain(self.w3)._token(address)

    def as_owner(self, fn: Any) -> Any:
        return send(self.w3, fn, self.owner)

    def strategy(self, **overrides: Any) -> DcaStrategy:
        args: dict[str, Any] = {
            "router": self.market.router,
            "token_in": self.market.usdc,
            "token_out": self.market.weth,
            "amount_in": AMOUNT_IN,
            "interval_s": INTERVAL,
            "min_balance": AMOUNT_IN,
            "permission": "perm-dca-1",
        }
        args.update(self.strategy_overrides)
        args.update(overrides)
        return DcaStrategy(**args)

    def tick(
        self,
        *,
        receipt_timeout: float = 10.0,
        reconcile_wait_s: float = 2.0,
        unsent_after_s: float = 600.0,
        **overrides: Any,
    ) -> TickResult:
        """One tick with fresh objects (no state carried in memory between ticks)."""
        chain = Chain(self.w3)
        runner = Runner(
            chain, self.agent, ActivityLog(self.sail_dir), clock=self.clock, receipt_timeout=receipt_timeout
        )
        return tick(
            self.sail_dir,
            strategy=self.strategy(**overrides),
            chain=chain,
            runner=runner,
            clock=self.clock,
            reconcile_wait_s=reconcile_wait_s,
            unsent_after_s=unsent_after_s,
        )

    def ledger(self) -> Ledger:
        return Ledger(self.sail_dir)

    def save_config(self, **overrides: Any) -> Path:
        """Write the home's ``.sail/config.toml`` for this market (the reading commands need it);
        returns the home."""
        strategy = self.strategy()
        fields: dict[str, Any] = {
            "rpc_url": "http://127.0.0.1:9",  # the reading commands never use the chain
            "router": strategy.router,
            "token_in": strategy.token_in,
            "token_out": strategy.token_out,
            "amount_in": strategy.amount_in,
            "interval_s": strategy.interval_s,
            "min_balance": strategy.min_balance,
            "permission": strategy.permission,
        }
        fields.update(overrides)
        save_config(self.sail_dir.parent, SailConfig(**fields))
        return self.sail_dir.parent

    def balance(self, token: str) -> int:
        return Chain(self.w3).balance_of(token, self.agent.address)

    def head_ts(self) -> int:
        return int(self.w3.eth.get_block("latest")["timestamp"])


@dataclass(frozen=True)
class _Evm:
    w3: Web3
    owner: str
    agent: LocalAccount
    market: Deployment
    snapshot: Any


@pytest.fixture(scope="session")
def _evm() -> _Evm:
    """One in-process EVM per session with the market deployed, and a snapshot to revert to."""
    w3 = Web3(EthereumTesterProvider())
    owner = w3.eth.accounts[0]
    agent: LocalAccount = Account.from_key(AGENT_KEY)
    assert agent.address == w3.eth.accounts[1]
    market = deploy_market(w3, owner, agent.address)
    return _Evm(w3, owner, agent, market, w3.provider.ethereum_tester.take_snapshot())  # type: ignore[attr-defined]


@pytest.fixture
def world(_evm: _Evm, tmp_path: Path) -> World:
    """The in-process EVM as it was right after deployment (USDC, WETH, router, look-alike; agent funded)."""
    tester = _evm.w3.provider.ethereum_tester  # type: ignore[attr-defined]
    tester.enable_auto_mine_transactions()
    tester.revert_to_snapshot(_evm.snapshot)
    # The EVM stamps each block it mines with the wall clock (never before its parent): a world
    # made long after the snapshot must start from now, not from the snapshot's head, or its
    # first block lies far ahead of its clock (a cadence the agent reads as skipped ticks).
    head = int(_evm.w3.eth.get_block("latest")["timestamp"])
    clock = Clock(max(head, int(time.time())) + 5)
    return World(_evm.w3, _evm.owner, _evm.agent, _evm.market, tmp_path / ".sail", clock)


@pytest.fixture(autouse=True)
def _ledgers_keep_the_entry_schema(tmp_path: Path) -> Iterator[None]:
    """After each test, check every ledger under its tmp_path against the entry schema."""
    yield
    assert_entry_schema(tmp_path)


Ticker = Callable[..., TickResult]


@pytest.fixture(scope="module")
def anvil() -> Iterator[AnvilNode]:
    """A fresh anvil on a free loopback port, stopped at teardown; ``npm ci`` first if needed."""
    if find_anvil() is None and shutil.which("npm") is None:
        pytest.skip("anvil is not installed and npm is not on PATH, so it cannot be (npm ci installs it)")
    with AnvilNode() as node:
        yield node

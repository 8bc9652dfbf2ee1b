"""``sail demo --home DIR``: the embedded default, end to end on a real local chain.

Starts anvil (npm ``@foundry-rs/anvil``) on 127.0.0.1, deploys the repo's contracts (USDC, WETH, the
router), funds the agent with 60 USDC, writes ``DIR/.sail/config.toml`` (25 USDC into WETH every
hour, minimum 25 USDC), and runs ``sail tick`` as a fresh process per tick. Chain time is moved with
``evm_increaseTime`` and each tick is given the chain's time as its clock (``--now``), so an
hour passes in a moment. The chain is born that much (and a few minutes more) in the past, so its
clock ends the demo just behind this machine's: the ``sail tick`` it suggests, on the machine's
clock, follows the ledger in order (the cadence has passed; the balance skip holds). The script
produces, in order: a confirmed swap, a cadence skip, a swap that reverts (the owner has pulled the
router's WETH), a confirmed swap (refilled), a cadence skip, and a balance skip (10 USDC left).
anvil is stopped at the end, whatever happens.

The node is the home's embedded chain (its state in ``DIR/.sail/chain/``), and the config it leaves
says ``rpc_url = "embedded"``: the next ``sail tick --home DIR`` (with the agent's key, printed)
starts that chain again from its saved state and works.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from eth_account import Account
from web3 import Web3

from memory.ledger import Ledger
from sail._config import EMBEDDED, SailConfig, config_path, load_config, sail_dir, save_config
from sail._contracts import abi
from sail._deploy import deploy_market, send
from sail._errors import SailError
from sail._node import ANVIL_KEYS, embedded_chain

HOUR = 3600
AMOUNT = 25 * 10**6
#: how far behind this machine's clock the chain's clock ends the demo (deploys add a few seconds)
_CATCH_UP_MARGIN_S = 300


#: the demo's ticks: seconds the chain's clock moves first, what happens, the owner's move before it
_STEPS: tuple[tuple[int, str, str | None], ...] = (
    (0, "first tick: nothing in the ledger, so it swaps", None),
    (60, "a minute later: reconciles the swap (confirmed), then cadence skip", None),
    (HOUR, "an hour on, the owner has pulled the router's WETH: the swap reverts", "pull"),
    (60, "reconciles the revert; no confirmed act for an hour, so it swaps again", "refill"),
    (60, "reconciles that swap (confirmed), then cadence skip", None),
    (HOUR, "an hour on: 10 USDC left, under the 25 USDC minimum: balance skip", None),
)


def init_embedded(
    home: Path, *, amount_in: int, interval_s: int, min_balance: int, permission: str | None
) -> SailConfig:
    """``sail init --embedded``: deploy the demo market on the agent's embedded chain; write the config.

    The agent is anvil's dev account 1 (funded with 500 USDC, the router approved); the tokens and
    the router are the repo's contracts.
    """
    with embedded_chain(sail_dir(home)) as node:
        w3 = Web3(Web3.HTTPProvider(node.url))
        owner, agent = (Account.from_key(k).address for k in ANVIL_KEYS)
        market = deploy_market(w3, owner, agent)
    config = SailConfig(
        rpc_url=EMBEDDED,
        router=market.router,
        token_in=market.usdc,
        token_out=market.weth,
        amount_in=amount_in,
        interval_s=interval_s,
        min_balance=min_balance,
        permission=permission,
    )
    save_config(home, config)
    return config


def run_tick(home: Path, now: int, key: str) -> subprocess.CompletedProcess[str]:
    """``python -m sail tick --home HOME --now NOW`` in a fresh process, the key in its env only."""
    env = {**os.environ, "SAIL_PRIVATE_KEY": key}
    return subprocess.run(
        [sys.executable, "-m", "sail", "tick", "--home", str(home), "--now", str(now)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _name_the_embedded_chain(home: Path) -> None:
    """Point the home's config at its embedded chain (whose state the demo's node left behind)."""
    with contextlib.suppress(SailError):
        save_config(home, replace(load_config(home), rpc_url=EMBEDDED))


def run_demo(home: Path, *, out: IO[str], progress: Callable[[int, int], None] | None = None) -> int:
    """Run the demo in ``home``; print each tick's output and the ledger; return 0 on success.

    ``progress(done, total)`` is told of each tick run. The home is left with its embedded chain
    and a config that names it, so ``sail tick`` works there afterwards.

    Raises:
        SailNodeUnavailable: anvil cannot be installed or started.
    """
    home.mkdir(parents=True, exist_ok=True)
    owner_key, agent_key = ANVIL_KEYS
    steps = _STEPS
    # born in the past by all the time the script moves it forward: it ends behind this machine's clock
    genesis = int(time.time()) - sum(advance for advance, _, _ in steps) - _CATCH_UP_MARGIN_S
    try:
        with embedded_chain(sail_dir(home), genesis_ts=genesis) as node:
            w3 = Web3(Web3.HTTPProvider(node.url))
            owner, agent = Account.from_key(owner_key).address, Account.from_key(agent_key).address
            market = deploy_market(w3, owner, agent, agent_usdc=60 * 10**6)
            save_config(
                home,
                SailConfig(
                    rpc_url=node.url,
                    router=market.router,
                    token_in=market.usdc,
                    token_out=market.weth,
                    amount_in=AMOUNT,
                    interval_s=HOUR,
                    min_balance=AMOUNT,
                    permission="demo-dca-permission",
                    receipt_timeout_s=10.0,
                ),
            )
            print(
                f"anvil on {node.url}; contracts: USDC {market.usdc} WETH {market.weth} "
                f"router {market.router}",
                file=out,
            )
            router = w3.eth.contract(address=Web3.to_checksum_address(market.router), abi=abi("SwapRouter"))
            weth = w3.eth.contract(address=Web3.to_checksum_address(market.weth), abi=abi("TestToken"))

            def pull() -> object:  # the owner takes all the router's WETH out: the next swap reverts
                held = weth.functions.balanceOf(market.router).call()
                return send(w3, router.functions.withdraw(market.weth, held), owner)

            def refill() -> object:
                return send(w3, weth.functions.mint(market.router, 10**18), owner)

            moves: dict[str, Callable[[], object]] = {"pull": pull, "refill": refill}
            for n, (advance, label, move) in enumerate(steps, 1):
                before = None if move is None else moves[move]
                if progress is not None:
                    progress(n, len(steps))
                if before is not None:
                    before()
                if advance:
                    node.rpc("evm_increaseTime", advance)
                    node.rpc("evm_mine")
                now = int(w3.eth.get_block("latest")["timestamp"])
                done = run_tick(home, now, agent_key)
                print(f"\n== tick at chain time {now} ({label})", file=out)
                out.write(done.stdout)
                if done.returncode != 0:
                    out.write(done.stderr)
                    return 1
    finally:  # the node is gone: the next process starts the chain again from its saved state
        _name_the_embedded_chain(home)
    print("\n== the ledger (.sail/memory/ledger.jsonl)", file=out)
    for line in Ledger(sail_dir(home)).path.read_text(encoding="utf-8").splitlines():
        print(line, file=out)
    print(f"\n{config_path(home)} now names the home's embedded chain; try:", file=out)
    for command in next_commands(home):
        print(f"  {command}", file=out)
    return 0


def next_commands(home: Path) -> tuple[str, ...]:
    """The commands the demo suggests running on the home it leaves."""
    where = shlex.quote(str(home))
    return (
        f"sail ledger --home {where}",
        f"sail why --home {where}",
        f"sail status --home {where}",
        f"SAIL_PRIVATE_KEY={ANVIL_KEYS[1]} sail tick --home {where}",
    )


def outcome(home: Path, *, ok: bool) -> dict[str, Any]:
    """``sail demo --json``'s output: ``ok``; the ``home`` and its ``config``; the ``ledger`` it left
    (entries as their lines in the file); the commands to ``try`` next (none when it failed)."""
    ledger = Ledger(sail_dir(home))
    return {
        "ok": ok,
        "home": str(home),
        "config": str(config_path(home)),
        "ledger": [entry.to_wire() for entry in ledger.scan()] if ledger.path.exists() else [],
        "try": list(next_commands(home)) if ok else [],
    }

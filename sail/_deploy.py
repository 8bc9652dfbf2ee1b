"""Deploy the shipped contracts: the test tokens, the router and a funded, approved agent.

Used by ``sail demo`` and by the tests; a real deployment brings its own tokens and router.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from web3 import Web3
from web3.exceptions import ContractLogicError

from sail._chain import revert_text
from sail._contracts import artifact
from sail._errors import SailSetupFailed

#: 1 USDC (6 decimals) buys 0.0004 WETH (18 decimals): out = in * RATE / 1e18
DEFAULT_RATE = 4 * 10**26


@dataclass(frozen=True)
class Deployment:
    """Addresses of a deployed demo market."""

    usdc: str
    weth: str
    router: str
    lookalike: str


def deploy_contract(w3: Web3, deployer: str, name: str, *args: Any) -> Any:
    """Deploy contract ``name`` from ``deployer`` (an unlocked account) and return it."""
    art = artifact(name)
    factory = w3.eth.contract(abi=art["abi"], bytecode=art["bytecode"])
    tx_hash = factory.constructor(*args).transact({"from": deployer})
    receipt = w3.eth.wait_for_transaction_receipt(tx_hash, timeout=30)
    return w3.eth.contract(address=receipt["contractAddress"], abi=art["abi"])


def _reverts() -> tuple[type[BaseException], ...]:
    """What a reverting call raises: over JSON-RPC, and on the in-process EVM (when installed)."""
    try:
        from eth_tester.exceptions import TransactionFailed  # type: ignore[import-untyped]  # no types
    except ImportError:  # pragma: no cover - eth-tester is part of the chain extra
        return (ContractLogicError,)
    return (ContractLogicError, TransactionFailed)


def send(w3: Web3, fn: Any, sender: str) -> Any:
    """Send a contract call from an unlocked account and return its receipt (status checked).

    Raises:
        SailSetupFailed: the call reverted (when its gas was estimated, or once mined).
    """
    what = f"{getattr(fn, 'fn_name', 'a call')} on {getattr(fn, 'address', 'a contract')}"
    try:
        receipt = w3.eth.wait_for_transaction_receipt(fn.transact({"from": sender}), timeout=30)
    except _reverts() as exc:
        raise SailSetupFailed(
            f"a setup transaction ({what}) reverted: {revert_text(exc)}; the chain is not the one "
            "the shipped contracts were set up on, or they changed: start from a fresh chain"
        ) from exc
    if receipt["status"] != 1:
        raise SailSetupFailed(
            f"a setup transaction ({what}) reverted once mined (tx {receipt['transactionHash'].hex()}); "
            "start from a fresh chain"
        )
    return receipt


def deploy_market(
    w3: Web3,
    owner: str,
    agent: str,
    *,
    agent_usdc: int = 500 * 10**6,
    router_weth: int = 100 * 10**18,
    rate: int = DEFAULT_RATE,
    approve: int = 2**256 - 1,
) -> Deployment:
    """USDC and WETH test tokens, a router quoting USDC→WETH at ``rate``, and a funded agent.

    The agent (an unlocked account on a dev chain) gets ``agent_usdc`` and approves the router for
    ``approve``; the router holds ``router_weth`` to pay out.
    """
    usdc = deploy_contract(w3, owner, "TestToken", "USD Coin", "USDC", 6)
    weth = deploy_contract(w3, owner, "TestToken", "Wrapped Ether", "WETH", 18)
    router = deploy_contract(w3, owner, "SwapRouter")
    lookalike = deploy_contract(w3, owner, "LookalikeToken")
    send(w3, router.functions.setRate(usdc.address, weth.address, rate), owner)
    send(w3, usdc.functions.mint(agent, agent_usdc), owner)
    send(w3, weth.functions.mint(router.address, router_weth), owner)
    send(w3, usdc.functions.approve(router.address, approve), agent)
    return Deployment(
        usdc=str(usdc.address),
        weth=str(weth.address),
        router=str(router.address),
        lookalike=str(lookalike.address),
    )

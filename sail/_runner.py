"""The dispatch runner: sign, log ahead, send, log the submission, await the receipt, log the outcome.

The runner's account of its dispatches lives in ``.sail/activity.jsonl``, in this order:

1. ``dispatch_signed`` — the signed transaction's hash, nonce, sender, target and calldata, appended
   and fsync'd *before* the transaction leaves the process (write-ahead). A crash at any later point
   leaves a record that the next tick resolves from the chain;
2. the transaction is sent (``eth_sendRawTransaction``). If the node answers with an error, it
   refused it: ``dispatch_unsent`` follows at once and ``SailSubmitFailed`` is raised. If the
   connection fails, nobody knows whether it arrived: ``SailSubmitUncertain`` is raised and the
   dispatch stays unresolved until reconcile settles it from the chain;
3. ``dispatch_submitted`` once the node accepted it;
4. ``dispatch_executed`` or ``dispatch_reverted`` (with the decoded revert reason) once the receipt is
   read within ``receipt_timeout``; if it does not come in time, nothing more is written here.

The signing key comes from an environment variable or an encrypted keystore file, is held only in
memory by ``eth_account``, and is never written to any log, file or message.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_utils.exceptions import ValidationError as EthValidationError
from web3 import Web3
from web3.exceptions import Web3RPCError

from memory.ledger import (
    ActivityLog,
    ChainUnavailable,
    DispatchSettled,
    DispatchSigned,
    DispatchSubmitted,
    DispatchUnsent,
    fit_text,
)
from sail._chain import READ_ERRORS, SHAPE_ERRORS, TESTER_ERRORS, UINT256, Chain, quantity
from sail._errors import SailKeyUnavailable, SailSubmitFailed, SailSubmitUncertain
from sail._strategy import Swap
from staging import failpoint

DEFAULT_KEY_ENV = "SAIL_PRIVATE_KEY"
PRIORITY_FEE = 10**9  # 1 gwei
DEFAULT_PASSWORD_ENV = "SAIL_KEYSTORE_PASSWORD"  # noqa: S105 - the name of an env var, not a secret


def load_account(
    *, key_env: str = DEFAULT_KEY_ENV, keystore: Path | None = None, password_env: str = DEFAULT_PASSWORD_ENV
) -> LocalAccount:
    """The agent's signing account, from ``keystore`` (decrypted with ``$password_env``) or ``$key_env``.

    Raises:
        SailKeyUnavailable: neither is set, the keystore cannot be read or decrypted, or the key
            is malformed. The message never contains the key or the password.
    """
    if keystore is not None:
        password = os.environ.get(password_env)
        if password is None:
            raise SailKeyUnavailable(f"keystore {keystore} needs its password in ${password_env}")
        try:
            key = Account.decrypt(keystore.read_text(encoding="utf-8"), password)
        except (OSError, ValueError) as exc:
            raise SailKeyUnavailable(
                f"cannot decrypt keystore {keystore} ({type(exc).__name__}); check the file and "
                f"${password_env}",
                path=keystore,
            ) from None
        account: LocalAccount = Account.from_key(key)
        return account
    raw = os.environ.get(key_env)
    if not raw:
        raise SailKeyUnavailable(
            f"no signing key: set ${key_env} to the agent's private key, or `keystore` in .sail/config.toml"
        )
    try:
        account = Account.from_key(raw.strip())
    except (ValueError, TypeError):
        raise SailKeyUnavailable(f"${key_env} does not hold a valid private key") from None
    return account


@dataclass(frozen=True)
class Dispatched:
    """What the runner did with one swap: the hash it sent, and the receipt's outcome if it came."""

    tx_hash: str
    settled: DispatchSettled | None


class Runner:
    """Signs and sends the agent's swaps and keeps ``activity.jsonl``.

    Args:
        chain: chain access.
        account: the signing account (the agent).
        activity: the activity log to append to.
        clock: unix seconds, for the records' ``ts``.
        gas: the gas limit of every swap; set explicitly, so a swap that will revert is still sent
            and its revert is recorded from the chain, as it would be on a live network.
        receipt_timeout: seconds to await the receipt after sending.
    """

    def __init__(
        self,
        chain: Chain,
        account: LocalAccount,
        activity: ActivityLog,
        *,
        clock: Callable[[], float],
        gas: int = 300_000,
        receipt_timeout: float = 30.0,
    ) -> None:
        self.chain = chain
        self.account = account
        self.activity = activity
        self.clock = clock
        self.gas = gas
        self.receipt_timeout = receipt_timeout

    @property
    def agent(self) -> str:
        """The agent's address."""
        return str(self.account.address)

    def submit(self, swap: Swap, *, nonce_at_most: int | None = None) -> Dispatched:
        """Sign ``swap``, log it ahead, send it, log the submission, then the receipt's outcome.

        ``nonce_at_most`` caps the nonce (else the node's pending count): the nonce of a dispatch
        resolved as never sent whose bytes may still reach a node, so that at most one of the two
        is ever mined.

        Raises:
            SailSubmitFailed: the node refused the transaction (logged as never sent).
            SailSubmitUncertain: the connection failed while sending; the next tick resolves it.
            ChainUnavailable: the nonce, gas price or chain id could not be read (nothing signed).
            journal.JournalUnwritable: the write-ahead line could not be made durable (nothing sent).
        """
        tx = self._build(swap, nonce_at_most)
        signed = self.account.sign_transaction(tx)
        tx_hash = Web3.to_hex(signed.hash)
        failpoint("sail.signed")
        self.activity.append(
            DispatchSigned(
                ts=int(self.clock()),
                chain_id=int(tx["chainId"]),
                tx_hash=tx_hash,
                nonce=int(tx["nonce"]),
                sender=self.agent,
                to=str(tx["to"]),
                data=str(tx["data"]),
                action=swap.action,
                permission=swap.permission,
            )
        )
        failpoint("sail.logged")
        self._send(signed.raw_transaction, tx_hash, int(tx["nonce"]))
        failpoint("sail.sent")
        self.activity.append(
            DispatchSubmitted(
                ts=int(self.clock()),
                chain_id=int(tx["chainId"]),
                tx_hash=tx_hash,
                sender=self.agent,
                to=str(tx["to"]),
                data=str(tx["data"]),
                action=swap.action,
                permission=swap.permission,
            )
        )
        failpoint("sail.submitted")
        settled = self._await(tx_hash)
        if settled is not None:
            self.activity.append(settled)
            failpoint("sail.settled")
        return Dispatched(tx_hash=tx_hash, settled=settled)

    def _send(self, raw: bytes, tx_hash: str, nonce: int) -> None:
        """``eth_sendRawTransaction``; a refusal is logged as never sent, a lost connection is not."""
        try:
            self.chain.w3.eth.send_raw_transaction(raw)
        except _REFUSALS as exc:
            if "already known" in str(exc).lower():  # it is in the node's pool after all
                raise SailSubmitUncertain(_uncertain(tx_hash, exc)) from exc
            self.activity.append(
                DispatchUnsent(
                    int(self.clock()), tx_hash, nonce, fit_text(f"refused by the node: {_one_line(exc)}")
                )
            )
            raise SailSubmitFailed(
                f"the node refused the swap {tx_hash}: {_one_line(exc)}; check the agent's gas funds and "
                "nonce (it was logged as never sent)"
            ) from exc
        except (*_TRANSPORT, *READ_ERRORS) as exc:
            raise SailSubmitUncertain(_uncertain(tx_hash, exc)) from exc

    def _build(self, swap: Swap, nonce_at_most: int | None = None) -> dict[str, Any]:
        w3 = self.chain.w3
        fn = self.chain.router(swap.router).functions.swapExactTokensForTokens(
            swap.amount_in,
            swap.amount_out_min,
            [Web3.to_checksum_address(swap.token_in), Web3.to_checksum_address(swap.token_out)],
            self.agent,
            swap.deadline,
        )
        try:
            nonce = quantity(
                w3.eth.get_transaction_count(self.account.address, "pending"), "pending nonce", 2**64
            )
            params: Any = {
                "from": self.agent,
                "nonce": nonce if nonce_at_most is None else min(nonce, nonce_at_most),
                "gas": self.gas,
                # EIP-1559 fees: twice the base fee leaves room for it to rise while pending
                "maxFeePerGas": 2 * quantity(w3.eth.get_block("latest")["baseFeePerGas"], "base fee", UINT256)
                + PRIORITY_FEE,
                "maxPriorityFeePerGas": PRIORITY_FEE,
                "chainId": self.chain.chain_id(),
            }
            built: dict[str, Any] = dict(fn.build_transaction(params))
        except (*READ_ERRORS, *SHAPE_ERRORS) as exc:
            raise ChainUnavailable(f"cannot prepare the swap: {exc}; check the node") from exc
        return built

    def _await(self, tx_hash: str) -> DispatchSettled | None:
        """The receipt's outcome within ``receipt_timeout`` (with the revert reason), or None."""
        try:
            receipt = self.chain.receipt(tx_hash, self.receipt_timeout)
        except ChainUnavailable:
            return None  # the ledger's reconcile will look again
        if receipt is None:
            return None
        reason = None
        if receipt.status != 1:
            try:
                reason = self.chain.revert_reason(tx_hash)
            except ChainUnavailable:
                reason = None  # reconcile reads it again when it ledgers the revert
        return DispatchSettled(
            ts=int(self.clock()),
            event="dispatch_executed" if receipt.status == 1 else "dispatch_reverted",
            tx_hash=tx_hash,
            block=receipt.block,
            gas_used=receipt.gas_used,
            reason=None if reason is None else fit_text(reason),  # a contract's text: cut to the bound
        )


#: errors with which a node answered ``eth_sendRawTransaction``: it does not have the transaction
_REFUSALS: tuple[type[BaseException], ...] = (Web3RPCError, EthValidationError, *TESTER_ERRORS)
#: errors of the connection itself: the transaction may or may not have arrived
_TRANSPORT: tuple[type[BaseException], ...] = (requests.RequestException, OSError)


def _one_line(exc: BaseException) -> str:
    return " ".join((str(exc) or type(exc).__name__).split())


def _uncertain(tx_hash: str, exc: BaseException) -> str:
    return (
        f"the connection failed while sending the swap {tx_hash} ({_one_line(exc)}); it may have reached "
        "the node: the next tick resolves it from the chain before trading again"
    )

"""Reconcile: turn the runner's dispatches into ``acted`` entries from chain truth (SPEC R-A3).

This module holds the rules and knows no web3: it reads the chain through ``ChainReader``, a small
protocol that ``sail`` implements with web3. For each ``dispatch_submitted`` in the activity log
that the ledger does not yet hold with a final outcome:

* read its receipt within a bounded wait; none → ``unverified`` (written once; later ticks look
  again and append the resolution as a new entry, the old line stays);
* status 0 → ``reverted``: block, ``ts`` from that block, ``gasUsed``, and what the calldata says;
* status 1 → ``confirmed``: ``tokenIn``/``tokenOut``/``amountIn`` from the submitted calldata,
  ``amountOut`` from the ERC-20 ``Transfer`` logs *emitted by the tokenOut contract* to the agent
  (a look-alike contract's Transfer is not counted), ``balancesAfter`` by ``balanceOf`` at the
  receipt's block.

Idempotence comes from the ledger's lock: reconcile runs inside ``Ledger.writer()``, which also
re-reads the ledger, so two ticks (or a crash and a rerun) never ledger one dispatch twice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from memory.ledger._activity import ActivityLog, DispatchSubmitted
from memory.ledger._entries import Acted, Amount, Outcome
from memory.ledger._errors import ChainUnavailable, DispatchUndecodable
from memory.ledger._ledger import LedgerWriter
from staging import failpoint

TRANSFER_TOPIC: Final = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"


@dataclass(frozen=True)
class LogRecord:
    """One event log of a receipt: the emitting contract, its topics (0x-hex) and data (bytes)."""

    address: str
    topics: tuple[str, ...]
    data: bytes


@dataclass(frozen=True)
class Receipt:
    """The parts of a transaction receipt reconcile uses."""

    status: int
    block: int
    gas_used: int
    logs: tuple[LogRecord, ...]


@dataclass(frozen=True)
class SwapCall:
    """What a swap's calldata asked for."""

    token_in: str
    token_out: str
    amount_in: int


@dataclass(frozen=True)
class TokenInfo:
    """An ERC-20's ``decimals`` and ``symbol``."""

    decimals: int
    symbol: str


class ChainReader(Protocol):
    """Read-only chain access for reconcile. Every method raises ``ChainUnavailable`` on failure."""

    def receipt(self, tx_hash: str, timeout: float) -> Receipt | None:
        """The receipt, waiting up to ``timeout`` seconds; None if it could not be read by then."""
        ...

    def block_timestamp(self, block: int) -> int:
        """The block's timestamp (unix seconds)."""
        ...

    def decode_swap(self, to: str, data: str) -> SwapCall | None:
        """Decode router calldata; None when it is not a swap call."""
        ...

    def token_info(self, token: str) -> TokenInfo:
        """The token's decimals and symbol."""
        ...

    def balance_of(self, token: str, owner: str, block: int) -> int:
        """``balanceOf(owner)`` at ``block``."""
        ...


def reconcile(
    writer: LedgerWriter,
    activity: ActivityLog,
    reader: ChainReader,
    *,
    clock: Callable[[], int],
    receipt_timeout: float,
) -> list[Acted]:
    """Ledger every dispatch that lacks a final entry; return the entries appended.

    Args:
        writer: the open ledger writer (the caller holds the ledger's lock).
        activity: the runner's activity log.
        reader: chain access.
        clock: unix seconds, for the ``ts`` of an ``unverified`` entry (which has no block).
        receipt_timeout: how long to wait for each receipt before calling it unverified.

    Raises:
        ChainUnavailable: a receipt was read but a block, token or balance read then failed;
            nothing was written for that dispatch, and a later tick tries again.
        DispatchUndecodable: a ``swap`` dispatch whose calldata is not a swap.
    """
    final = writer.final_tx_hashes()
    unverified = writer.unverified_tx_hashes()
    appended: list[Acted] = []
    for dispatch in activity.submitted():
        key = dispatch.tx_hash.lower()
        if key in final or dispatch.action != "swap":
            continue
        entry = resolve(dispatch, reader, clock=clock, receipt_timeout=receipt_timeout)
        if entry.outcome is Outcome.UNVERIFIED and key in unverified:
            continue  # already said so once; the resolution will be a new line
        failpoint("ledger.reconcile_before_append")
        writer.append(entry)
        appended.append(entry)
        (final if entry.is_final else unverified).add(key)
    return appended


def resolve(
    dispatch: DispatchSubmitted, reader: ChainReader, *, clock: Callable[[], int], receipt_timeout: float
) -> Acted:
    """Build the ``acted`` entry the chain supports for one dispatch (see the module docstring)."""
    call = reader.decode_swap(dispatch.to, dispatch.data)
    if call is None:
        raise DispatchUndecodable(
            f"dispatch {dispatch.tx_hash} is a swap but its calldata is not the router's swap call; "
            "it cannot be ledgered (inspect .sail/activity.jsonl)"
        )
    try:
        receipt = reader.receipt(dispatch.tx_hash, receipt_timeout)
    except ChainUnavailable:
        receipt = None  # unreadable is unreadable, whatever the reason: unverified, not failed
    if receipt is None:
        return _unverified(dispatch, call, reader, clock())
    info_in = reader.token_info(call.token_in)
    amount_in = Amount.of(call.amount_in, info_in.decimals, info_in.symbol)
    ts = reader.block_timestamp(receipt.block)
    common = {
        "ts": ts,
        "block": receipt.block,
        "chain_id": dispatch.chain_id,
        "action": dispatch.action,
        "permission": dispatch.permission,
        "tx_hash": dispatch.tx_hash,
        "gas_used": receipt.gas_used,
        "token_in": call.token_in,
        "token_out": call.token_out,
        "amount_in": amount_in,
    }
    if receipt.status != 1:
        return Acted(outcome=Outcome.REVERTED, amount_out=None, balances_after=None, **common)  # type: ignore[arg-type]
    info_out = reader.token_info(call.token_out)
    received = transferred_to(receipt.logs, token=call.token_out, recipient=dispatch.sender)
    balances = {
        token: reader.balance_of(token, dispatch.sender, receipt.block)
        for token in (call.token_in, call.token_out)
    }
    return Acted(
        outcome=Outcome.CONFIRMED,
        amount_out=Amount.of(received, info_out.decimals, info_out.symbol),
        balances_after=balances,
        **common,  # type: ignore[arg-type]
    )


def _unverified(dispatch: DispatchSubmitted, call: SwapCall, reader: ChainReader, now: int) -> Acted:
    try:
        info = reader.token_info(call.token_in)
        amount_in: Amount | None = Amount.of(call.amount_in, info.decimals, info.symbol)
    except ChainUnavailable:
        amount_in = None  # the token cannot be read either: say nothing rather than guess
    return Acted(
        ts=now,
        block=None,
        chain_id=dispatch.chain_id,
        action=dispatch.action,
        permission=dispatch.permission,
        outcome=Outcome.UNVERIFIED,
        tx_hash=dispatch.tx_hash,
        gas_used=None,
        token_in=call.token_in,
        token_out=call.token_out,
        amount_in=amount_in,
        amount_out=None,
        balances_after=None,
    )


def transferred_to(logs: Sequence[LogRecord], *, token: str, recipient: str) -> int:
    """Sum the ERC-20 ``Transfer`` values that contract ``token`` emitted to ``recipient``.

    Both the emitting address and the indexed ``to`` are checked: a Transfer event from any other
    contract, however it is shaped, is not the token moving.
    """
    want_to = "0x" + recipient.lower().removeprefix("0x").rjust(64, "0")
    total = 0
    for log in logs:
        if log.address.lower() != token.lower() or len(log.topics) != 3:
            continue
        if log.topics[0].lower() != TRANSFER_TOPIC or log.topics[2].lower() != want_to:
            continue
        total += int.from_bytes(log.data, "big")
    return total

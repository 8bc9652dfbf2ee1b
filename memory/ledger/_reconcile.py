"""Reconcile: resolve every dispatch the runner signed from the chain, and ledger the trades.

This module holds the rules and knows no web3: it reads the chain through ``ChainReader``, a small
protocol that ``sail`` implements with web3. Each dispatch the snapshot lists as unresolved (signed,
ahead of sending, in the activity log; or, in older logs, submitted) is looked up on the chain:

* **mined** (a receipt): the transaction itself is read back (``eth_getTransactionByHash``) and its
  input decoded with the router's ABI — ``tokenIn``, ``tokenOut``, ``amountIn`` come from the chain,
  never from the log's copy; a difference between the two is recorded (``dispatch_mismatch``), and a
  transaction sent by another account is not ours (``dispatch_not_ours``). Status 0 → ``reverted``
  (its revert reason logged), else ``confirmed``: ``amountOut`` from the ERC-20 ``Transfer`` logs
  *emitted by the tokenOut contract* to the agent, ``balancesAfter`` by ``balanceOf`` at the latest
  block when it is reconciled (fresh reads: never the receipt's block, which a node that keeps only
  recent state cannot serve; so they hold whatever else moved the agent's tokens since the swap);
* **pending** (a node has it), or unreadable after the node accepted it → ``unverified``, written
  once; later ticks look again and append the resolution as a new entry (the old line stays);
* **unknown to the node**: its nonce decides. Still unused ``unsent_after_s`` after signing → it was
  never broadcast: ``dispatch_unsent`` in the activity log, nothing in the ledger. Consumed → by one of
  this agent's own signed transactions with that nonce (ledgered from the chain if it was mined), or
  by a transaction it never signed: ``dispatch_dropped``, nothing in the ledger.

Until a dispatch is resolved the tick does not trade again (see ``sail``). A dispatch resolved as
unsent stays watched while its nonce is free: should it ever be mined after all, it is ledgered. So
does one resolved as dropped, for good: a ``dispatch_dropped`` line is a claim (a crafted one, or one
a reorganisation undid), and only a ledger line from the chain takes a dispatch off the watch list.

Idempotence comes from the ledger's lock and the snapshot: reconcile runs inside
``Ledger.writer()``, and a dispatch leaves the unresolved list only through a line that resolves it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from memory.ledger._activity import (
    ActivityLog,
    DispatchDropped,
    DispatchIncluded,
    DispatchMismatch,
    DispatchSettled,
    DispatchSigned,
    DispatchSubmitted,
    DispatchUnsent,
    TokenMetadata,
)
from memory.ledger._entries import Acted, Amount, Outcome, fit_copy, fit_text
from memory.ledger._errors import ChainUnavailable, DispatchNotOurs, DispatchUndecodable
from memory.ledger._ledger import LedgerWriter
from memory.ledger._snapshot import OpenDispatch
from staging import failpoint

TRANSFER_TOPIC: Final = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"
#: how long a signed dispatch may stay unknown to the node, its nonce unused, before it is unsent
DEFAULT_UNSENT_AFTER_S: Final = 600.0


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
    block_hash: str | None = None
    """The hash of the receipt's block (0x-hex), when the reader gives it."""


@dataclass(frozen=True)
class ChainTransaction:
    """A transaction as the chain holds it: sender, target, nonce, input; ``block`` None while pending."""

    sender: str
    to: str | None
    nonce: int
    data: str
    block: int | None


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

    def transaction(self, tx_hash: str) -> ChainTransaction | None:
        """The transaction (mined or pending) as the node holds it; None when the node does not know it."""
        ...

    def nonce(self, account: str) -> int:
        """How many transactions of ``account`` are mined (its next unused nonce at the head)."""
        ...

    def revert_reason(self, tx_hash: str) -> str | None:
        """The decoded revert reason of a reverted transaction, or None when there is none."""
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

    def balance_of(self, token: str, owner: str, block: int | None = None) -> int:
        """``balanceOf(owner)`` at ``block``; at the latest block when None (all reconcile asks for)."""
        ...

    def head(self) -> int:
        """The latest block number (read only when more than one confirmation is asked for)."""
        ...


Dispatch = DispatchSigned | DispatchSubmitted


@dataclass
class _Pass:
    """One reconcile pass: its inputs, and what it appended."""

    writer: LedgerWriter
    activity: ActivityLog
    reader: ChainReader
    now: int
    receipt_timeout: float
    unsent_after_s: float
    appended: list[Acted]
    confirmations: int = 1

    def deep_enough(self, receipt: Receipt) -> bool:
        """Whether ``receipt``'s block has ``confirmations`` blocks on it, itself included (a head
        that cannot be read confirms nothing)."""
        if self.confirmations <= 1:
            return True
        try:
            head = self.reader.head()
        except ChainUnavailable:
            return False
        return head - receipt.block + 1 >= self.confirmations

    def log(self, record: DispatchMismatch | DispatchSettled | DispatchUnsent | DispatchDropped) -> None:
        if isinstance(record, DispatchMismatch | DispatchSettled) and self._logged(record):
            return  # a pass that died (or was refused) after logging it, before its dispatch resolved
        self.activity.append(record)

    def _logged(self, record: DispatchMismatch | DispatchSettled) -> bool:
        """Whether the activity log already holds this fact about this dispatch (its time aside).
        Read only when there is such a fact to log, which a healthy agent rarely has."""
        return any(
            isinstance(r, type(record)) and _fact(r) == _fact(record)
            for r in self.activity.scan(frozenset({record.event}))
        )

    def ledger(self, entry: Acted) -> None:
        if entry.outcome is not Outcome.UNVERIFIED and self._ledgered_already(entry):
            return
        failpoint("ledger.reconcile_before_append")
        self.writer.append(entry)
        self.appended.append(entry)
        failpoint("ledger.reconcile_after_append")


    def _ledgered_already(self, entry: Acted) -> bool:
        """Whether the ledger already holds this dispatch's final entry (then it is not written again).

        The snapshot folds only the lines appended since it was made: a ``dispatch_signed`` line
        replayed into the activity log after its swap was ledgered (a duplicated line, a log restored
        over a newer one) opens the dispatch again there, while a rebuild, which folds the whole
        activity log before the ledger, sees it resolved. Reconcile would have ledgered the same
        transaction twice. A final entry is stamped with its block's time, so the ledger's tail is
        read back to that time; when it holds one (or the read gives up), the snapshot is rebuilt and
        decides.
        """
        if self.writer.ledger.holds_outcome(entry.tx_hash, entry.ts) is False:
            return False
        state = self.writer.rebuild()
        key = entry.tx_hash.lower()
        return all(d.tx_hash.lower() != key for d in (*state.open, *state.unsent))


def _fact(record: DispatchMismatch | DispatchSettled) -> tuple[object, ...]:
    """What a mismatch or a receipt's outcome says, without the time it was logged."""
    if isinstance(record, DispatchMismatch):
        return (record.tx_hash.lower(), record.field, record.local, record.chain)
    return (record.tx_hash.lower(), record.event)


def reconcile(
    writer: LedgerWriter,
    activity: ActivityLog,
    reader: ChainReader,
    *,
    clock: Callable[[], int],
    receipt_timeout: float,
    unsent_after_s: float = DEFAULT_UNSENT_AFTER_S,
    confirmations: int = 1,
    chain_id: int | None = None,
) -> list[Acted]:
    """Resolve every unresolved dispatch from the chain; return the ledger entries appended.

    Args:
        writer: the open ledger writer (the caller holds the ledger's lock).
        activity: the runner's activity log.
        reader: chain access.
        clock: unix seconds, for the ``ts`` of an ``unverified`` entry (which has no block) and to
            age a dispatch the node does not know.
        receipt_timeout: how long to wait for a pending transaction's receipt.
        unsent_after_s: how long after signing a dispatch whose hash no node knows and whose nonce
            is still unused is resolved as never sent.
        confirmations: how many blocks, its own included, must hold a receipt before it is ledgered;
            until then the dispatch stays unresolved (a block a reorganisation can still remove
            confirms nothing).
        chain_id: the chain the reader serves; a dispatch the log says was dropped is watched only
            on the chain it was signed for (None: on any).

    Raises:
        ChainUnavailable: a receipt was read but a transaction, block, token or balance read then
            failed; nothing was ledgered for that dispatch, and a later tick tries again.
        DispatchUndecodable: a mined swap whose input is not the router's swap call.
        DispatchNotOurs: the chain's transaction under a logged hash was sent by another account.
    """
    state = writer.refresh()
    run = _Pass(writer, activity, reader, clock(), receipt_timeout, unsent_after_s, [], confirmations)
    for dispatch in state.open:
        _resolve(run, dispatch, activity.dispatch_at(dispatch))
    for unsent in writer.refresh().unsent:
        _watch_unsent(run, unsent, activity.dispatch_at(unsent))
    for dropped in writer.refresh().dropped:
        record = activity.dispatch_at(dropped)
        if chain_id is None or record.chain_id == chain_id:
            _watch_dropped(run, dropped, record)
    writer.refresh()
    return run.appended


def _resolve(run: _Pass, dispatch: OpenDispatch, record: Dispatch) -> None:
    """Resolve one open dispatch, or leave it open (see the module docstring)."""
    tx_hash = dispatch.tx_hash
    try:
        tx = run.reader.transaction(tx_hash)
        readable = True
    except ChainUnavailable:
        tx, readable = None, False
    if tx is not None or not readable:
        receipt = _receipt(
            run, tx_hash, 0 if tx is not None and tx.block is not None else run.receipt_timeout
        )
        if receipt is not None:
            if run.deep_enough(receipt):
                _ledger_mined(run, record, receipt, tx, settled=dispatch.settled)
            return  # mined, not yet deep enough: wait (the tick will not trade)
        elif tx is not None or dispatch.broadcast:
            _unverified_once(run, dispatch, record, tx)
        return  # unreadable, and never known to have left: wait (the tick will not trade)
    if dispatch.nonce is None:  # an older log's dispatch, known only by its hash
        if dispatch.broadcast:
            _unverified_once(run, dispatch, record, None)
        return
    _unknown_to_the_node(run, dispatch, record, dispatch.nonce)


def _unknown_to_the_node(run: _Pass, dispatch: OpenDispatch, record: Dispatch, nonce: int) -> None:
    """No node knows the hash: the account's nonce says whether it ever can be mined."""
    try:
        used = run.reader.nonce(record.sender)
    except ChainUnavailable:
        return  # wait for a tick that can read it
    age = run.now - dispatch.ts
    if used > nonce:
        for sibling in run.writer.state.unsent:
            mined = _mined_sibling(run, sibling) if sibling.nonce == nonce else False
            if mined is None:
                return  # the sibling took the nonce in a block not yet deep enough: wait
            if mined:
                run.log(
                    DispatchDropped(
                        run.now,
                        dispatch.tx_hash,
                        nonce,
                        f"nonce {nonce} was consumed by {sibling.tx_hash}, "
                        "an earlier dispatch of this agent, ledgered from the chain",
                    )
                )
                return
        if age >= run.unsent_after_s:
            run.log(
                DispatchDropped(
                    run.now,
                    dispatch.tx_hash,
                    nonce,
                    f"nonce {nonce} was consumed by a transaction this agent "
                    f"did not record, and no node knows {dispatch.tx_hash} {age}s after signing",
                )
            )
    elif age >= run.unsent_after_s:
        run.log(
            DispatchUnsent(
                run.now,
                dispatch.tx_hash,
                nonce,
                f"nonce {nonce} still unused {age}s after signing and no node knows the transaction: "
                + (
                    "a node accepted it, then dropped it from its pool; it was never mined"
                    if dispatch.broadcast
                    else "it was never broadcast"
                ),
            )
        )


def _mined_sibling(run: _Pass, sibling: OpenDispatch) -> bool | None:
    """Ledger ``sibling`` (a dispatch resolved as unsent) if it was mined after all; None when it
    was, in a block not yet deep enough to ledger it, or when its receipt cannot be read: its nonce
    is consumed, and a receipt the node failed to give is not one it lacks (judged absent, the
    swap would be written off as dropped for ever, and a trade on chain never ledgered)."""
    try:
        receipt = run.reader.receipt(sibling.tx_hash, 0)
    except ChainUnavailable:
        return None  # wait for a tick that can read it
    if receipt is None:
        return False
    if not run.deep_enough(receipt):
        return None
    _ledger_mined(run, run.activity.dispatch_at(sibling), receipt, None)
    return True


def _watch_unsent(run: _Pass, unsent: OpenDispatch, record: Dispatch) -> None:
    """A dispatch resolved as unsent, while its nonce is free: ledger it if it is mined after all."""
    assert unsent.nonce is not None  # the snapshot keeps only nonced dispatches as unsent
    try:
        used = run.reader.nonce(record.sender)
    except ChainUnavailable:
        return
    if used <= unsent.nonce:
        return
    if _mined_sibling(run, unsent) is False:
        run.log(
            DispatchDropped(
                run.now,
                unsent.tx_hash,
                unsent.nonce,
                f"nonce {unsent.nonce} was consumed by another transaction",
            )
        )


def _watch_dropped(run: _Pass, dropped: OpenDispatch, record: Dispatch) -> None:
    """A dispatch the activity log says was dropped: a line anyone could have written, so the chain
    is asked again on every tick. Mined after all (its receipt, ``confirmations`` deep), it is
    ledgered from the chain like any other. Its nonce still free, the line is wrong (no transaction
    took the nonce): it is resolved as an open dispatch is (pending: ``unverified``, and it holds
    the next trade; unknown past ``unsent_after_s``: ``dispatch_unsent``)."""
    assert dropped.nonce is not None  # the snapshot keeps only nonced dispatches as dropped
    try:
        used = run.reader.nonce(record.sender)
    except ChainUnavailable:
        return
    if used > dropped.nonce:
        _mined_sibling(run, dropped)
    else:
        _resolve(run, dropped, record)


def _receipt(run: _Pass, tx_hash: str, timeout: float) -> Receipt | None:
    try:
        return run.reader.receipt(tx_hash, timeout)
    except ChainUnavailable:
        return None  # unreadable is unreadable, whatever the reason


def _ledger_mined(
    run: _Pass, record: Dispatch, receipt: Receipt, tx: ChainTransaction | None, *, settled: bool = False
) -> None:
    """Ledger a mined dispatch from the chain: its own input, receipt, logs and balances."""
    if tx is None or tx.block is None:
        tx = run.reader.transaction(record.tx_hash)
        if tx is None:
            raise ChainUnavailable(
                f"the node has a receipt for {record.tx_hash} but not the transaction; "
                "check that it is synced"
            )
    if tx.block != receipt.block:
        raise ChainUnavailable(
            f"the node places {record.tx_hash} in block {tx.block} and its receipt in block {receipt.block} "
            "(a reorganisation, or a node that contradicts itself); nothing was ledgered, the next tick "
            "reads it again"
        )
    _compare(run, record, tx)
    call = run.reader.decode_swap(tx.to or "", tx.data)
    if call is None:
        raise DispatchUndecodable(
            f"dispatch {record.tx_hash} is a swap but its input on chain is not the router's swap call; "
            "it cannot be ledgered (inspect .sail/activity.jsonl)"
        )
    amount_in = _amount(run, call.token_in, call.amount_in, required=True)
    assert amount_in is not None
    ts = run.reader.block_timestamp(receipt.block)
    common = {
        "ts": ts,
        "block": receipt.block,
        "chain_id": record.chain_id,
        "action": record.action,
        # an empty id (a config before it was refused) names no permission: null, so the swap is ledgered
        "permission": record.permission or None,
        "tx_hash": record.tx_hash,
        "gas_used": receipt.gas_used,
        "token_in": call.token_in,
        "token_out": call.token_out,
        "amount_in": amount_in,
    }
    if receipt.status != 1:
        if not settled:  # the runner did not live to log the revert and its reason: log them now
            _log_revert(run, record.tx_hash, receipt)
        _log_included(run, record, receipt, settled=True)  # (its revert was logged above, or before)
        run.ledger(Acted(outcome=Outcome.REVERTED, amount_out=None, balances_after=None, **common))  # type: ignore[arg-type]
        return
    received = transferred_to(receipt.logs, token=call.token_out, recipient=record.sender)
    amount_out = _amount(run, call.token_out, received, required=True)
    # fresh reads: the latest block now, never the receipt's (a node that keeps only recent state,
    # as most hosted ones do, cannot serve an old block, and the agent must never stick on one)
    balances = {
        token: run.reader.balance_of(token, record.sender) for token in (call.token_in, call.token_out)
    }
    _log_included(run, record, receipt, settled=settled)
    run.ledger(
        Acted(outcome=Outcome.CONFIRMED, amount_out=amount_out, balances_after=balances, **common)  # type: ignore[arg-type]
    )


def _log_included(run: _Pass, record: Dispatch, receipt: Receipt, *, settled: bool) -> None:
    """Log where the chain holds the dispatch (``dispatch_included``), just before its ledger line:
    what a later tick checks the newest ledgered act against (see ``check_newest_act``), and the
    line beside which that ledger line resolves the dispatch (a final line without one is a claim:
    ``StateBuilder.fold_ledger``). A reader that gives no block hash leaves the act unchecked; its
    receipt's outcome (``dispatch_executed``, unless ``settled``: logged already) is that line."""
    if receipt.block_hash is not None:
        run.activity.append(
            DispatchIncluded(
                run.now, record.chain_id, record.tx_hash, receipt.block, receipt.block_hash, receipt.status
            )
        )
    elif not settled:
        tx_hash, block, gas = record.tx_hash, receipt.block, receipt.gas_used
        run.log(DispatchSettled(run.now, "dispatch_executed", tx_hash, block, gas))


def _log_revert(run: _Pass, tx_hash: str, receipt: Receipt) -> None:
    try:
        reason = run.reader.revert_reason(tx_hash)
    except ChainUnavailable:
        reason = None
    reason = None if reason is None else fit_text(reason)  # a contract's text: cut to the bound
    run.log(DispatchSettled(run.now, "dispatch_reverted", tx_hash, receipt.block, receipt.gas_used, reason))


def _compare(run: _Pass, record: Dispatch, tx: ChainTransaction) -> None:
    """Record every field where the log's copy differs from the chain's; refuse another sender's."""
    if tx.sender.lower() != record.sender.lower():
        run.log(DispatchMismatch(run.now, record.tx_hash, "from", record.sender, fit_copy(tx.sender)))
        raise DispatchNotOurs(
            f"the transaction {record.tx_hash} that .sail/activity.jsonl records as the agent's was sent by "
            f"{tx.sender}, not by the agent {record.sender}: the log was altered; inspect it "
            "(nothing was ledgered)"
        )
    pairs = [("to", record.to.lower(), (tx.to or "").lower()), ("data", record.data.lower(), tx.data.lower())]
    if isinstance(record, DispatchSigned):
        pairs.append(("nonce", str(record.nonce), str(tx.nonce)))
    for name, local, chain in pairs:
        if local != chain:  # either copy may be megabytes (a crafted log, a node's answer): cut, digested
            run.log(DispatchMismatch(run.now, record.tx_hash, name, fit_copy(local), fit_copy(chain)))


def _amount(run: _Pass, token: str, units: int, *, required: bool) -> Amount | None:
    """``units`` of ``token`` with its metadata from the chain, else as cached; None when unknown."""
    try:
        info = run.reader.token_info(token)
    except ChainUnavailable:
        cached = run.writer.state.tokens.get(token.lower())
        if cached is None:
            if required:
                raise
            return None
        return Amount.of(units, cached[0], cached[1])
    if token.lower() not in run.writer.state.tokens:
        run.activity.append(TokenMetadata(run.now, token, info.decimals, info.symbol))
        run.writer.refresh()
    return Amount.of(units, info.decimals, info.symbol)


def _unverified_once(
    run: _Pass, dispatch: OpenDispatch, record: Dispatch, tx: ChainTransaction | None
) -> None:
    """Ledger ``unverified`` for a dispatch a node accepted but whose receipt cannot be read (once)."""
    if dispatch.unverified:
        return  # already said so once; the resolution will be a new line
    call = run.reader.decode_swap(record.to, tx.data if tx is not None else record.data)
    if call is None:
        raise DispatchUndecodable(
            f"dispatch {record.tx_hash} is a swap but its calldata is not the router's swap call; "
            "it cannot be ledgered (inspect .sail/activity.jsonl)"
        )
    run.ledger(
        Acted(
            ts=run.now,
            block=None,
            chain_id=record.chain_id,
            action=record.action,
            permission=record.permission or None,
            outcome=Outcome.UNVERIFIED,
            tx_hash=record.tx_hash,
            gas_used=None,
            token_in=call.token_in,
            token_out=call.token_out,
            amount_in=_amount(run, call.token_in, call.amount_in, required=False),
            amount_out=None,
            balances_after=None,
        )
    )


def transferred_to(logs: Sequence[LogRecord], *, token: str, recipient: str) -> int:
    """Sum the ERC-20 ``Transfer`` values that contract ``token`` emitted to ``recipient``.

    Both the emitting address and the indexed ``to`` are checked: a Transfer event from any other
    contract, however it is shaped, is not the token moving. So is the shape: three topics, and a
    value of exactly 32 bytes (one ``uint256``) — a log whose data is longer is not an ERC-20
    Transfer (a token, or a node, that wrote 2,000 bytes there made a number of thousands of digits
    that no amount could be written from, and every tick after failed as ``internal_error``).
    """
    want_to = "0x" + recipient.lower().removeprefix("0x").rjust(64, "0")
    total = 0
    for log in logs:
        if log.address.lower() != token.lower() or len(log.topics) != 3 or len(log.data) != 32:
            continue
        if log.topics[0].lower() != TRANSFER_TOPIC or log.topics[2].lower() != want_to:
            continue
        total += int.from_bytes(log.data, "big")
    return total

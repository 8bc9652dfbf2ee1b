"""The canonical tick: reconcile → read memory → decide → skip or submit.

0. The recent ledgered acts are still where the chain held them when they were ledgered (one receipt
   read each, ``memory.ledger.check_ledgered_acts``); else ``chain_reorged``, and nothing more until a
   person acknowledges it.
1. Reconcile first: every dispatch the runner signed and nothing has resolved yet is resolved from
   the chain — ledgered from its transaction, receipt and balance reads, or logged as never sent
   (``memory.ledger.reconcile``).
2. Read memory: the last confirmed act and the unresolved dispatches, from the verified snapshot of
   the ledger, never from in-process data.
3. Decide (the strategy). A swap while an earlier signed dispatch is still unresolved becomes a
   skip (``unresolved dispatch <txHash>, signed <n>s ago``): one decision, never two swaps.
4. Skip → one ``skipped`` entry, at the point of return.
5. Act → submit through the runner (which logs the signed transaction before sending it), and write
   nothing to the ledger: the ``acted`` entry appears when a later tick reconciles it.

The whole tick holds the ledger's lock, so concurrent ticks run one after the other: the second
reconciles what the first dispatched before it decides, and a dispatch is never ledgered twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from memory.ledger import (
    DEFAULT_UNSENT_AFTER_S,
    Acted,
    ActivityLog,
    ChainUnavailable,
    Ledger,
    LedgerWriter,
    OpenDispatch,
    Skipped,
    Snapshot,
    TokenMetadata,
    check_ledgered_acts,
    reconcile,
    unresolved_reason,
)
from sail._chain import Chain
from sail._config import EMBEDDED, SailConfig, sail_dir
from sail._errors import SailChainMismatch, SailTickTimeout
from sail._node import embedded_chain
from sail._runner import Dispatched, Runner, load_account
from sail._strategy import DcaStrategy, Skip, Strategy, Swap, TickState


@dataclass(frozen=True)
class TickResult:
    """What one tick did: entries reconciled, and either the skip it ledgered or the dispatch it sent."""

    reconciled: tuple[Acted, ...]
    skipped: Skipped | None
    dispatched: Dispatched | None
    chain_ahead_s: int | None = None
    """How far the chain's head block is stamped ahead of the tick's clock, in seconds (negative:
    behind), measured as the tick ends; None when it was not measured (``tick`` alone never does)."""


def tick(
    home_sail_dir: Path,
    *,
    strategy: Strategy,
    chain: Chain,
    runner: Runner,
    clock: Callable[[], float] = time.time,
    reconcile_wait_s: float = 5.0,
    lock_timeout: float = 120.0,
    unsent_after_s: float = DEFAULT_UNSENT_AFTER_S,
    confirmations: int = 1,
    deadline: float | None = None,
) -> TickResult:
    """Run one tick for the agent whose ``.sail`` directory is ``home_sail_dir``.

    ``deadline`` (a ``time.monotonic()`` instant) bounds the whole tick: no chain request is made
    past it (``Chain.set_deadline``), and a tick that reaches it before it has ledgered its skip or
    signed its swap fails with ``SailTickTimeout`` instead; a swap signed before it is still sent.

    Raises:
        ChainUnavailable: a chain read the tick cannot do without failed (nothing is ledgered
            for it; the next tick starts over).
        SailSubmitFailed: the node refused the swap.
        SailSubmitUncertain: the connection failed while sending; the next tick resolves it.
        journal.JournalCorrupt: the ledger or activity log is damaged.
        LedgerBusy: another tick held the ledger for ``lock_timeout`` seconds.
        SailChainMismatch: the node serves another chain than an unresolved dispatch was signed for.
        SailTickTimeout: ``deadline`` passed before the tick ledgered its skip or signed its swap.
        ChainReorged: the chain no longer holds a recent ledgered act where it was ledgered (found
            now, or by an earlier tick and not yet acknowledged): nothing reconciled, decided or sent.
    """
    chain.set_deadline(deadline)
    try:
        return _tick(
            home_sail_dir, strategy=strategy, chain=chain, runner=runner, clock=clock,
            reconcile_wait_s=reconcile_wait_s, lock_timeout=lock_timeout, unsent_after_s=unsent_after_s,
            confirmations=confirmations, deadline=deadline,
        )  # fmt: skip
    except ChainUnavailable as exc:
        if _past(deadline):  # a read refused, or cut short, by the tick's bound
            raise _timed_out("a chain read") from exc
        raise


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def _timed_out(at: str) -> SailTickTimeout:
    return SailTickTimeout(
        f"the tick ran past its time bound (tick_timeout_s) at {at}: the node answers too slowly; "
        "nothing more was ledgered or signed, and the next tick starts over"
    )


def _in_time(deadline: float | None, at: str) -> None:
    """Raise ``SailTickTimeout`` once ``deadline`` has passed: what the tick read may be cut short."""
    if _past(deadline):
        raise _timed_out(at)


def _tick(
    home_sail_dir: Path,
    *,
    strategy: Strategy,
    chain: Chain,
    runner: Runner,
    clock: Callable[[], float],
    reconcile_wait_s: float,
    lock_timeout: float,
    unsent_after_s: float,
    confirmations: int,
    deadline: float | None,
) -> TickResult:
    ledger = Ledger(home_sail_dir)
    activity = ActivityLog(home_sail_dir)

    def now() -> int:  # the ledger wants whole seconds
        return int(clock())

    with ledger.writer(lock_timeout) as writer:
        # before anything else: a reorganisation deeper than `confirmations` under a recent
        # ledgered act holds the agent (nothing reconciled, decided or sent) until acknowledged
        check_ledgered_acts(writer, activity, chain, clock=now)
        _same_chain(writer, activity, chain)
        dropped = writer.refresh().dropped  # watched on the chain each was signed for, only
        reconciled = reconcile(
            writer,
            activity,
            chain,
            clock=now,
            receipt_timeout=reconcile_wait_s,
            unsent_after_s=unsent_after_s,
            confirmations=confirmations,
            chain_id=chain.chain_id() if dropped else None,
        )
        state = writer.refresh()
        decision = strategy.decide(
            TickState(now=now(), agent=runner.agent, last_confirmed=state.last_confirmed, chain=chain)
        )
        if isinstance(decision, Swap) and _snapshot_understates(writer, now() - strategy.interval_s):
            state = writer.rebuild()  # the logs' tails know a later act: they win, and we decide again
            decision = strategy.decide(
                TickState(now=now(), agent=runner.agent, last_confirmed=state.last_confirmed, chain=chain)
            )
        if isinstance(decision, Swap) and state.open:
            oldest = min(state.open, key=lambda d: d.ts)
            decision = Skip(unresolved_reason(oldest.tx_hash, now() - oldest.ts))
        claimed_cap: int | None = None
        if isinstance(decision, Swap) and state.resolved:
            claimed = _resolution_unborne(state, activity, chain, runner.agent, now())
            if isinstance(claimed, Skip):
                decision = claimed
            else:
                claimed_cap = claimed
        nonce_cap: int | None = None
        if isinstance(decision, Swap) and (state.unsent or state.dropped):
            held = _behind_unsent(state, activity, chain, runner.agent, now())
            if isinstance(held, Skip):
                decision = held
            else:
                nonce_cap = held
        if claimed_cap is not None:
            nonce_cap = claimed_cap if nonce_cap is None else min(nonce_cap, claimed_cap)
        if isinstance(decision, Skip):
            if decision.token is not None:  # its figures are that token's units: say which, once
                with contextlib.suppress(ChainUnavailable):
                    _remember_token(writer, activity, chain, decision.token, now())
            entry = Skipped(
                ts=now(), block=_head_or_none(chain), chain_id=chain.chain_id(), reason=decision.reason
            )
            _in_time(deadline, "its skip")  # a read the bound refused may be behind the reason
            writer.append(entry)
            return TickResult(tuple(reconciled), entry, None)
        # both tokens' metadata is read and logged before anything is signed: reconcile needs it to
        # ledger the swap, and a token whose metadata cannot be read or recorded must fail the tick
        # here, with nothing sent, not leave a trade on chain that no later tick can ledger
        for token in (decision.token_in, decision.token_out):
            _remember_token(writer, activity, chain, token, now())
        _in_time(deadline, "its swap, before signing")
        return TickResult(tuple(reconciled), None, runner.submit(decision, nonce_at_most=nonce_cap))


def _behind_unsent(
    state: Snapshot, activity: ActivityLog, chain: Chain, agent: str, now: int
) -> Skip | int | None:
    """The nonce a swap must not exceed while dispatches resolved as never sent are watched, or the
    skip that holds it.

    Such a dispatch's bytes still exist: a node that dropped it may hear it again from a peer, and
    a node that answered its send with an error may hold it after all. Signed with the node's
    pending count while it sits in a pool again, the next swap would take the nonce after it and
    both could be mined; signed with its nonce, at most one of the two ever is (the node refuses the
    second, or it replaces the first). A watched dispatch whose nonce the chain has consumed and that
    reconcile could not resolve yet (its receipt unreadable, or not yet ``confirmations`` deep) may
    be the trade itself: it holds the next one, as an unresolved dispatch does.

    A dispatch the activity log says was dropped (signed for this chain) is held to the chain's word
    too: its nonce still free, the line was wrong (or crafted), and it holds the next trade as an
    open dispatch does until reconcile resolves it; its nonce consumed, it holds the next trade
    while the node cannot say whether its own transaction took it (its receipt unreadable, or not
    yet ``confirmations`` deep).
    """
    serving = chain.chain_id() if state.dropped else None
    mine = [
        (u, u.nonce, kind)
        for kind, listed in (("unsent", state.unsent), ("dropped", state.dropped))
        for u in listed
        if u.nonce is not None
        and activity.dispatch_at(u).sender.lower() == agent.lower()
        and (kind == "unsent" or activity.dispatch_at(u).chain_id == serving)
    ]
    if not mine:
        return None
    mined = chain.nonce(agent)
    holding = [
        (u, kind)
        for u, nonce, kind in mine
        if (kind == "dropped" and nonce >= mined)
        or (nonce < mined and (kind == "unsent" or _maybe_mined(chain, u)))
    ]
    if holding:
        oldest, kind = min(holding, key=lambda pair: pair[0].ts)
        dropped = kind == "dropped"
        return Skip(unresolved_reason(oldest.tx_hash, now - oldest.ts, unsent=True, dropped=dropped))
    free = [nonce for _, nonce, kind in mine if kind == "unsent" and nonce >= mined]
    return min(free) if free else None


def _resolution_unborne(
    state: Snapshot, activity: ActivityLog, chain: Chain, agent: str, now: int
) -> Skip | int | None:
    """The skip that holds the next trade while a dispatch of this agent's that a final ledger line
    resolved was never mined (the chain has not used its nonce, so it may still be: pending in a
    pool, or held by a peer); or, for one a person acknowledged after a reorganisation took it away,
    the nonce the next swap must not exceed; or None.

    A final line resolves a dispatch in the files only beside a line that says where the chain held
    it; both can be appended by anyone who can write the files (the head block's number and hash
    are public). A transaction whose nonce the account has not used has no receipt anywhere, so
    such a resolution is a claim, and a swap signed beside it could be mined with it: two swaps for
    one decision. One nonce read, before a swap only, against the dispatches of the highest nonces
    the snapshot keeps (``resolved``): a resolution buried under later ones has a lower nonce, so
    the newest decides. A used nonce proves no receipt either, but nothing of that nonce can be
    mined again: where the chain holds the act is the reorganisation check's to say.

    A reorganisation that a person acknowledged (``sail ack-reorg``) may leave a ledgered swap whose
    nonce the chain no longer used: the agent trades again, as documented, but takes that nonce, so
    at most one of the two is ever mined (a forged acknowledgement frees nothing more than that).
    """
    serving = chain.chain_id()
    mined = chain.nonce(agent)
    unborne = [
        d
        for d in state.resolved
        if d.nonce is not None
        and d.nonce >= mined
        and activity.dispatch_at(d).sender.lower() == agent.lower()
        and activity.dispatch_at(d).chain_id == serving
    ]
    acked = {m.tx_hash.lower() for m in state.acked}
    if state.acknowledged is not None:
        acked.add(state.acknowledged.tx_hash.lower())
    holding = [d for d in unborne if d.tx_hash.lower() not in acked]
    if holding:
        oldest = min(holding, key=lambda d: (d.ts, d.line.offset))
        return Skip(unresolved_reason(oldest.tx_hash, now - oldest.ts, claimed=True))
    return min((d.nonce for d in unborne if d.nonce is not None), default=None)


def _maybe_mined(chain: Chain, dropped: OpenDispatch) -> bool:
    """Whether a dispatch said to be dropped, whose nonce is consumed, may be the transaction that
    consumed it: its receipt unreadable, or read (reconcile left it unledgered: not deep enough)."""
    try:
        return chain.receipt(dropped.tx_hash, 0) is not None
    except ChainUnavailable:
        return True


def _same_chain(writer: LedgerWriter, activity: ActivityLog, chain: Chain) -> None:
    """Refuse a node of another chain than the dispatches still being resolved were signed for:
    its nonces and transactions say nothing about them (a swap mined on its own chain would be
    judged never sent, or dropped, from another chain's account)."""
    state = writer.refresh()
    watched = (*state.open, *state.unsent)
    if not watched:
        return
    serving = chain.chain_id()
    for dispatch in watched:
        signed_for = activity.dispatch_at(dispatch).chain_id
        if signed_for != serving:
            raise SailChainMismatch(
                f"the node at rpc_url serves chain {serving}, but dispatch {dispatch.tx_hash} was signed "
                f"for chain {signed_for}: point rpc_url at chain {signed_for}'s node (nothing was "
                "resolved, ledgered or sent)"
            )


def _snapshot_understates(writer: LedgerWriter, since: int) -> bool:
    """Whether the ledger's tail holds a confirmed act since ``since`` later than the snapshot's, or
    the activity log's tail a mined swap signed since then later than the snapshot's act counts
    from (a snapshot forged to drop the signing time of an act a chain behind this clock stamped)."""
    found, conclusive = writer.ledger.recent_confirmed(since)
    last = writer.state.last_confirmed
    if not conclusive or (found is not None and (last is None or found.ts > last.ts)):
        return True
    signed, conclusive = writer.ledger.recent_signing(since)
    return not conclusive or (signed is not None and (last is None or signed > last.since))


def _remember_token(writer: LedgerWriter, activity: ActivityLog, chain: Chain, token: str, now: int) -> None:
    """Log the token's metadata once, so an entry written while the chain is down can say its amount."""
    if token.lower() in writer.state.tokens:
        return
    info = chain.token_info(token)
    activity.append(TokenMetadata(ts=now, token=token, decimals=info.decimals, symbol=info.symbol))


def _head_or_none(chain: Chain) -> int | None:
    try:
        return chain.head()
    except ChainUnavailable:
        return None


def dca_strategy(config: SailConfig) -> DcaStrategy:
    """The DCA strategy a config describes."""
    return DcaStrategy(
        router=config.router,
        token_in=config.token_in,
        token_out=config.token_out,
        amount_in=config.amount_in,
        interval_s=config.interval_s,
        min_balance=config.min_balance,
        slippage_bps=config.slippage_bps,
        deadline_s=config.deadline_s,
        permission=config.permission,
    )


def tick_from_config(home: Path, config: SailConfig, *, clock: Callable[[], float] = time.time) -> TickResult:
    """One tick as ``sail tick`` runs it: chain over the config's RPC URL (or the embedded chain),
    key from the env var or keystore.

    Raises:
        SailKeyUnavailable: no signing key.
        SailNodeUnavailable: the embedded chain cannot be started.
        (and whatever ``tick`` raises)
    """
    account = load_account(
        key_env=config.key_env, keystore=None if config.keystore is None else Path(config.keystore)
    )
    directory = sail_dir(home)
    deadline = time.monotonic() + config.tick_timeout_s
    with contextlib.ExitStack() as stack:
        url = config.rpc_url
        if url == EMBEDDED:
            url = stack.enter_context(embedded_chain(directory)).url
        chain = Chain.connect(url, timeout=config.rpc_timeout_s)
        runner = Runner(
            chain,
            account,
            ActivityLog(directory),
            clock=clock,
            gas=config.gas,
            receipt_timeout=config.receipt_timeout_s,
        )
        result = tick(
            directory,
            strategy=dca_strategy(config),
            chain=chain,
            runner=runner,
            clock=clock,
            reconcile_wait_s=config.reconcile_wait_s,
            lock_timeout=config.lock_timeout_s,
            unsent_after_s=config.unsent_after_s,
            confirmations=config.confirmations,
            deadline=deadline,
        )
        return dataclasses.replace(result, chain_ahead_s=chain_ahead_s(chain, clock))


def chain_ahead_s(chain: Chain, clock: Callable[[], float]) -> int | None:
    """Seconds the chain's head block is stamped ahead of ``clock`` (negative: behind); None when
    the chain cannot say (the tick is done by then: this never fails it)."""
    try:
        head_ts = chain.block_timestamp(chain.head())
    except ChainUnavailable:
        return None
    return head_ts - int(clock())
